package ui

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/runtime"
)

// WriteCollect writes collect's summary of a run, as forkline collect prints
// it after the run; dataset is the run's directory ("" leaves its line out).
func WriteCollect(w io.Writer, r manifest.Collect, dataset string) {
	if r.NothingToDo {
		fmt.Fprintf(w, "\nforkline collect: nothing to do — the run is complete: %d of %d planned episodes kept; nothing was changed\n", r.Episodes, r.Planned)
		if dataset != "" {
			fmt.Fprintf(w, "  dataset: %s\n", dataset)
		}
		return
	}
	writeCollectOutcome(w, r)
	writeCollectMeasures(w, r)
	if dataset != "" {
		fmt.Fprintf(w, "  dataset: %s\n", dataset)
	}
}

// writeCollectOutcome is what the run kept and how its episodes ended.
func writeCollectOutcome(w io.Writer, r manifest.Collect) {
	fmt.Fprintf(w, "\nforkline collect: %s — %d of %d planned episodes kept, %d steps\n", r.Status, r.Episodes, r.Planned, r.Steps)
	fmt.Fprintf(w, "  this invocation: %d episodes, %d steps in %.1fs (%.1f steps/s, %.2f episodes/s)", r.Ran, r.RanSteps, r.WallSec, r.StepsPerSec, r.EpisodesPerSec)
	if r.Skipped > 0 {
		fmt.Fprintf(w, "; %d kept before", r.Skipped)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  exit reasons:")
	for _, e := range runtime.ExitReasons() {
		if n := r.ByExit[string(e)]; n > 0 {
			tag := ""
			if e.ScaffoldLoss() {
				tag = "*"
			}
			fmt.Fprintf(w, " %s%s=%d", e, tag, n)
		}
	}
	fmt.Fprintf(w, "   (* scaffold loss: %d)\n", r.Losses)
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "  scaffold losses by error:\n")
		for _, e := range r.Errors {
			fmt.Fprintf(w, "    %s\n", e)
		}
		if r.OtherErrors > 0 {
			fmt.Fprintf(w, "    %d more episodes with other errors\n", r.OtherErrors)
		}
	}
	if r.NotRun > 0 {
		fmt.Fprintf(w, "  not kept, a service was unavailable (-resume runs them):\n")
		for _, e := range r.Unavailable {
			fmt.Fprintf(w, "    %s\n", e)
		}
	}
}

// writeCollectMeasures is the run's rewards, reset latency, golden builds,
// screenshots, bytes, token drift and replacements.
func writeCollectMeasures(w io.Writer, r manifest.Collect) {
	if r.RewardMean != nil {
		fmt.Fprintf(w, "  reward: mean %.3f over %d episodes", *r.RewardMean, r.Rewarded)
	} else {
		fmt.Fprintf(w, "  reward: none")
	}
	if r.RewardsMissing > 0 {
		fmt.Fprintf(w, " (%d verifications gave no value)", r.RewardsMissing)
	}
	fmt.Fprintln(w)
	for _, k := range sortedKeys(r.ResetMS) {
		l := r.ResetMS[k]
		fmt.Fprintf(w, "  reset %-16s p50 %9.3f ms   p95 %9.3f ms   (n=%d)\n", k, l.P50, l.P95, l.N)
	}
	if len(r.GoldenBuildMS) > 0 {
		var parts []string
		for k, v := range r.GoldenBuildMS {
			parts = append(parts, fmt.Sprintf("%s %.0fms", k, v))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "  golden builds: %s\n", strings.Join(parts, ", "))
	}
	only := ""
	if r.Skipped > 0 {
		only = " (this invocation)"
	}
	switch {
	case r.Screenshots > 0 && r.BlobsStored > 0:
		fmt.Fprintf(w, "  screenshots: %d, blobs stored: %d (dedup ratio %.1fx)%s\n", r.Screenshots, r.BlobsStored, r.DedupRatio, only)
	case r.Screenshots > 0:
		fmt.Fprintf(w, "  screenshots: %d, no blobs stored by this run%s\n", r.Screenshots, only)
	}
	if r.RanSteps > 0 {
		fmt.Fprintf(w, "  bytes kept per step: %.0f%s\n", r.BytesPerStep, only)
	}
	if r.TokenDrift > 0 {
		fmt.Fprintf(w, "  token drift: %d episodes flagged\n", r.TokenDrift)
	}
	if r.Replacements > 0 {
		fmt.Fprintf(w, "  replicas replaced: %d%s\n", r.Replacements, only)
	}
}

// WriteServe writes serve's summary, as forkline serve prints it when it
// stops.
func WriteServe(w io.Writer, sum *manifest.Serve) {
	fmt.Fprintf(w, "forkline serve: stopped after %.1fs on %s — %d sessions (%d reaped idle, %d dropped), %d resets (%d failed), %d steps\n",
		sum.Seconds, sum.Addr, sum.Sessions, sum.Reaped, sum.Dropped, sum.Resets, sum.ResetFailures, sum.Steps)
	var ended []string
	for _, r := range runtime.ExitReasons() {
		if n := sum.Episodes[string(r)]; n > 0 {
			ended = append(ended, fmt.Sprintf("%s=%d", r, n))
		}
	}
	total := 0
	for _, n := range sum.Episodes {
		total += n
	}
	if len(ended) == 0 {
		ended = []string{"none"}
	}
	fmt.Fprintf(w, "  episodes: %d ended (%s)", total, strings.Join(ended, " "))
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
