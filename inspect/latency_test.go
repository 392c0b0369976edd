package inspect

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/schemas"
)

// The reset latencies 1..4 ms read back from a dataset: the same p50 and
// p95 as collect's summary and serve's stats of the same values
// (collect.TestResetLatencyOf1To4IsTheOneRule, serve's), by the one rule,
// manifest.Sample's nearest rank: p50 2, p95 4.
func TestResetLatencyOf1To4IsTheOneRule(t *testing.T) {
	var batches []shard.EpisodeBatch
	for i := 4; i >= 1; i-- {
		batches = append(batches, shard.EpisodeBatch{Episode: schemas.EpisodeRow{EpisodeID: string(rune('a' + i)), TaskID: "shell",
			ExitReason: "done", Provider: "local", ResetStrategy: "fork", ResetOrigin: "overlay", ResetMS: float64(i)}})
	}
	dir := writeDataset(t, fixtureManifest(t, "run-latency", "hash"), batches, shard.Config{})
	s, err := Summarize(t.Context(), dir, Options{})
	require.NoError(t, err)
	require.Equal(t, []Latency{{Key: "fork/overlay", Strategy: "fork", Origin: "overlay",
		Latency: manifest.Latency{N: 4, P50: 2, P95: 4}, Exact: true}}, s.Reset)
}
