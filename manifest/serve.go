package manifest

import (
	"fmt"
	"io"
	"strings"

	"github.com/forkline/forkline/runtime"
)

// Serve is what forkline serve served, for the operator and the manifest.
type Serve struct {
	Addr     string  `json:"addr"`
	Dataset  string  `json:"dataset,omitempty"`
	Seconds  float64 `json:"seconds"`
	Sessions int     `json:"sessions"`
	Reaped   int     `json:"sessions_reaped"`
	Dropped  int     `json:"connections_dropped"`
	Resets   int     `json:"resets"`
	// ResetFailures are resets the pool could not serve after its retries.
	ResetFailures int `json:"reset_failures"`
	Steps         int `json:"steps"`
	// Checkpoints are the checkpoints sessions made (branching over the
	// wire); BranchResets (in Resets too) the resets from one.
	Checkpoints  int `json:"checkpoints"`
	BranchResets int `json:"branch_resets"`
	// Episodes counts the episodes that ended, by exit reason; Kept those
	// recorded (an episode cancelled before its first step is not).
	Episodes      map[string]int `json:"episodes"`
	Kept          int            `json:"episodes_recorded"`
	RecordErrors  int            `json:"record_errors"`
	RewardMean    *float64       `json:"reward_mean,omitempty"`
	Rewarded      int            `json:"rewarded"`
	ResetLatency  []ResetLatency `json:"reset_latency_ms"`
	GoldenBuilds  int            `json:"golden_builds"`
	Replacements  int            `json:"replacements"`
	ResetsByFresh int            `json:"pool_resets"`
}

// ResetLatency is the server-side reset latency of one reset kind
// (strategy, "+standby" for a hand-off, and the provider's origin).
type ResetLatency struct {
	Kind string `json:"kind"`
	Latency
}

// Print writes the summary for a person.
func (sum *Serve) Print(w io.Writer) {
	fmt.Fprintf(w, "forkline serve: stopped after %.1fs on %s — %d sessions (%d reaped idle, %d dropped), %d resets (%d failed), %d steps\n",
		sum.Seconds, sum.Addr, sum.Sessions, sum.Reaped, sum.Dropped, sum.Resets, sum.ResetFailures, sum.Steps)
	var exits []string
	for _, r := range runtime.ExitReasons() {
		if n := sum.Episodes[string(r)]; n > 0 {
			exits = append(exits, fmt.Sprintf("%s=%d", r, n))
		}
	}
	total := 0
	for _, n := range sum.Episodes {
		total += n
	}
	if len(exits) == 0 {
		exits = []string{"none"}
	}
	fmt.Fprintf(w, "  episodes: %d ended (%s)", total, strings.Join(exits, " "))
	if sum.Dataset != "" {
		fmt.Fprintf(w, ", %d recorded", sum.Kept)
	}
	fmt.Fprintln(w)
	if sum.Checkpoints > 0 {
		fmt.Fprintf(w, "  branching: %d checkpoints, %d resets from them\n", sum.Checkpoints, sum.BranchResets)
	}
	if sum.RewardMean != nil {
		fmt.Fprintf(w, "  reward: mean %.3f over %d episodes\n", *sum.RewardMean, sum.Rewarded)
	}
	for _, l := range sum.ResetLatency {
		fmt.Fprintf(w, "  reset %-22s p50 %9.3f ms   p95 %9.3f ms   (n=%d)\n", l.Kind, l.P50, l.P95, l.N)
	}
	if sum.RecordErrors > 0 {
		fmt.Fprintf(w, "  %d episodes could not be recorded (see the log)\n", sum.RecordErrors)
	}
	if sum.Dataset != "" {
		fmt.Fprintf(w, "  dataset: %s\n", sum.Dataset)
	}
}
