package serve

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// latencyWindow is how many of the latest resets the latency percentiles
// cover: a server runs for days, and its memory stays bounded.
const latencyWindow = 10000

// stats counts what the server did, for the summary.
type stats struct {
	mu          sync.Mutex
	sessions    int
	reapedN     int
	droppedN    int
	resets      int
	resetFails  int
	steps       int
	byExit      map[string]int
	kept        int
	recordErrs  int
	checkpoints int
	rewardSum   float64
	rewarded    int
	// latencies are the latest reset latencies, by how the replica was
	// reset, in a ring of latencyWindow.
	latencies map[string]*ring
}

type ring struct {
	vals []float64
	next int
	n    int
}

func (r *ring) add(v float64) {
	if len(r.vals) < latencyWindow {
		r.vals = append(r.vals, v)
	} else {
		r.vals[r.next] = v
		r.next = (r.next + 1) % latencyWindow
	}
	r.n++
}

func newStats() *stats {
	return &stats{byExit: map[string]int{}, latencies: map[string]*ring{}}
}

func (s *stats) sessionOpened() { s.mu.Lock(); s.sessions++; s.mu.Unlock() }
func (s *stats) reaped()        { s.mu.Lock(); s.reapedN++; s.mu.Unlock() }
func (s *stats) dropped()       { s.mu.Lock(); s.droppedN++; s.mu.Unlock() }
func (s *stats) step()          { s.mu.Lock(); s.steps++; s.mu.Unlock() }
func (s *stats) resetFailed()   { s.mu.Lock(); s.resetFails++; s.mu.Unlock() }
func (s *stats) recordFailed()  { s.mu.Lock(); s.recordErrs++; s.mu.Unlock() }
func (s *stats) checkpointed()  { s.mu.Lock(); s.checkpoints++; s.mu.Unlock() }

func (s *stats) reset(r pool.Replica) {
	key := episode.ResetName(r) + "/" + r.Origin
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resets++
	if s.latencies[key] == nil {
		s.latencies[key] = &ring{}
	}
	s.latencies[key].add(schemas.Millis(r.Reset))
}

func (s *stats) episodeEnded(exit string, reward *float64, kept bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byExit[exit]++
	if kept {
		s.kept++
	}
	if reward != nil {
		s.rewardSum += *reward
		s.rewarded++
	}
}

// Summary is what a server served, for the operator and the manifest.
type Summary struct {
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
	ResetLatency  []Latency      `json:"reset_latency_ms"`
	GoldenBuilds  int            `json:"golden_builds"`
	Replacements  int            `json:"replacements"`
	ResetsByFresh int            `json:"pool_resets"`
}

// Latency is the server-side reset latency of one reset kind (strategy,
// "+standby" for a hand-off, and the provider's origin), over the latest
// resets.
type Latency struct {
	Kind string  `json:"kind"`
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
}

func (s *stats) summary(took time.Duration, ps pool.Stats) *Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := &Summary{Seconds: took.Seconds(), Sessions: s.sessions, Reaped: s.reapedN, Dropped: s.droppedN, Resets: s.resets,
		ResetFailures: s.resetFails, Steps: s.steps, Episodes: map[string]int{}, Kept: s.kept, RecordErrors: s.recordErrs,
		Rewarded: s.rewarded, GoldenBuilds: ps.GoldenBuilds, Replacements: ps.Replacements, ResetsByFresh: ps.Resets,
		Checkpoints: s.checkpoints, BranchResets: ps.BranchForks}
	for k, v := range s.byExit {
		sum.Episodes[k] = v
	}
	if s.rewarded > 0 {
		m := s.rewardSum / float64(s.rewarded)
		sum.RewardMean = &m
	}
	for kind, r := range s.latencies {
		v := slices.Clone(r.vals)
		sort.Float64s(v)
		sum.ResetLatency = append(sum.ResetLatency, Latency{Kind: kind, N: r.n, P50: percentile(v, 0.50), P95: percentile(v, 0.95)})
	}
	sort.Slice(sum.ResetLatency, func(a, b int) bool { return sum.ResetLatency[a].Kind < sum.ResetLatency[b].Kind })
	return sum
}

// percentile of sorted values, nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Print writes the summary for a person.
func (sum *Summary) Print(w io.Writer) {
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
