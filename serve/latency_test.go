package serve

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

// The reset latencies 1..4 ms through serve's stats: the same p50 and p95
// as collect's summary and inspect's reading of the same values
// (collect.TestResetLatencyOf1To4IsTheOneRule, inspect's), by the one rule,
// manifest.Sample's nearest rank: p50 2, p95 4.
func TestResetLatencyOf1To4IsTheOneRule(t *testing.T) {
	s := newStats()
	// Through the path a served episode takes: the runner's Begin tells
	// the stats' tally of the reset.
	runner := episode.Runner{RunID: "r", Provider: "local", Capture: capture.DefaultPolicy(), Observer: s.tally}
	for i := 4; i >= 1; i-- {
		runner.Begin(episode.Identity{EpisodeID: fmt.Sprint(i)}, &task.Spec{ID: "t"},
			pool.Replica{Strategy: pool.Fork, Origin: "overlay", Reset: time.Duration(i) * time.Millisecond})
	}
	sum := s.summary(time.Second, pool.Stats{})
	require.Equal(t, []manifest.ResetLatency{{Kind: "fork/overlay", Latency: manifest.Latency{N: 4, P50: 2, P95: 4}}}, sum.ResetLatency)
}
