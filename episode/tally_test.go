package episode

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/schemas"
)

// One tally counts an episode the same whichever consumer ran it: the
// events of this invocation and the rows a resumed run kept before.
func TestTallyCountsEventsAndKeptRows(t *testing.T) {
	tl := NewTally()
	var mu sync.Mutex
	var first []string
	tl.OnFirstError(func(e observe.EpisodeEnded) {
		mu.Lock()
		first = append(first, e.EpisodeID)
		mu.Unlock()
	})
	one, half := 1.0, 0.5
	// Kept before: a done episode with reward 1, reset 3 ms, golden 70 ms.
	tl.Kept(schemas.EpisodeRow{EpisodeID: "a", TaskID: "t", ExitReason: "done", Steps: 2, ResetStrategy: "fork", ResetOrigin: "overlay",
		ResetMS: 3, GoldenID: "g", GoldenBuildMS: 70}, &schemas.RewardRow{Name: "verify", Value: &one})
	// This invocation: three resets, steps, a kept loss twice with one
	// error, a kept episode with no reward value, one not kept.
	for i, ms := range []int{1, 2, 4} {
		tl.Observe(observe.Reset{Task: "t", Strategy: "fork", Method: "overlay", Took: time.Duration(ms) * time.Millisecond})
		tl.Observe(observe.Step{Task: "t", EpisodeID: string(rune('b' + i))})
	}
	loss := observe.EpisodeEnded{Task: "t", EpisodeID: "b", Exit: "env_error", Detail: "boom", ScaffoldLoss: true, Steps: 1, Kept: true}
	tl.Observe(loss)
	loss.EpisodeID = "c"
	tl.Observe(loss)
	tl.Observe(observe.EpisodeEnded{Task: "t", EpisodeID: "d", Exit: "done", Steps: 3, Kept: true, RewardMissing: true, TokenDrift: true})
	tl.Observe(observe.EpisodeEnded{Task: "t", EpisodeID: "e", Exit: "cancelled", Kept: false})
	tl.Observe(observe.EpisodeEnded{Task: "t", EpisodeID: "f", Exit: "done", Steps: 1, Kept: true, Reward: &half})

	c := tl.Counts()
	require.Equal(t, map[string]int{"done": 3, "env_error": 2, "cancelled": 1}, c.Ended)
	require.Equal(t, map[string]int{"done": 3, "env_error": 2}, c.ByExit)
	require.Equal(t, 5, c.Kept)
	require.Equal(t, 1, c.KeptBefore)
	require.Equal(t, 4, c.Ran)
	require.Equal(t, int64(2+1+1+3+1), c.Steps)
	require.Equal(t, int64(1+1+3+1), c.RanSteps)
	require.Equal(t, 3, c.StepEvents)
	require.Equal(t, 2, c.RanLosses)
	require.Equal(t, []manifest.ErrorCount{{Episodes: 2, ExitReason: "env_error", Detail: "boom"}}, c.Errors)
	require.Equal(t, []string{"b"}, first, "each distinct error is told once")
	require.Equal(t, 2, c.Rewarded)
	require.InDelta(t, 0.75, *c.RewardMean, 1e-9)
	require.Equal(t, 1, c.RewardsMissing)
	require.Equal(t, 1, c.TokenDrift)
	require.Equal(t, 4, c.Resets)
	// 1..4 ms: the one percentile rule (manifest.Sample's nearest rank).
	require.Equal(t, map[string]manifest.Latency{"fork/overlay": {N: 4, P50: 2, P95: 4}}, c.ResetMS)
	require.Equal(t, map[string]float64{"t": 70}, c.GoldenBuildMS)
}
