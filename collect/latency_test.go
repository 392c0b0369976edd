package collect

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/task"
)

// The reset latencies 1..4 ms through collect's summary: the same p50 and
// p95 as serve's stats and inspect's reading of the same values
// (serve.TestResetLatencyOf1To4IsTheOneRule, inspect's), by the one rule,
// manifest.Sample's nearest rank: p50 2, p95 4.
func TestResetLatencyOf1To4IsTheOneRule(t *testing.T) {
	s := newSummary(4, 0)
	var one manifest.Sample
	for i := 4; i >= 1; i-- {
		// Through the path a collected episode takes: the runner's Begin
		// tells the summary of the reset.
		runner := episode.Runner{RunID: "r", Provider: "local", Capture: capture.DefaultPolicy(), Observer: s}
		runner.Begin(episode.Identity{EpisodeID: fmt.Sprint(i)}, &task.Spec{ID: "t"},
			pool.Replica{Strategy: pool.Fork, Origin: "overlay", Reset: time.Duration(i) * time.Millisecond})
		one.Add(float64(i))
	}
	want := manifest.Latency{N: 4, P50: 2, P95: 4}
	require.Equal(t, want, one.Latency())
	require.Equal(t, map[string]manifest.Latency{"fork/overlay": want}, s.Report().ResetMS)
}
