package shard

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestBoundedMemory commits 20,000 small episodes and checks that the heap
// after 20,000 is not meaningfully larger than after 2,000: the writer keeps
// row groups and one generation's bookkeeping, not the run. What does grow
// is the committed-id set and the manifest's shard list (tens of bytes per
// episode and per shard), hence the slack.
func TestBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("commits 20,000 episodes")
	}
	w, err := Create(t.TempDir(), testManifest(), Config{RollBytes: 4 << 20, RowGroupBytes: 1 << 20})
	require.NoError(t, err)
	defer w.Close(StatusComplete)
	base := heapInuse()
	var at2k uint64
	for i := range 20000 {
		require.NoError(t, w.Commit(context.Background(), makeBatch(testRunID, i)))
		if i+1 == 2000 {
			at2k = heapInuse()
		}
	}
	at20k := heapInuse()
	gens := len(w.Manifest().Generations())
	t.Logf("heap in use: base %.1f MiB, after 2,000 episodes %.1f MiB, after 20,000 %.1f MiB (%d generations)",
		mib(base), mib(at2k), mib(at20k), gens)
	assert.Greater(t, gens, 3, "the run must roll several generations")
	assert.Less(t, at20k, base+64<<20, "heap stays under a generous bound")
	assert.Less(t, at20k, at2k+12<<20, "heap does not grow with the episode count")
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// benchBatch is a plausible coding-agent episode: 8 steps of 2 KiB output,
// a model turn per step with 300 prompt and 100 response tokens with
// logprobs, and two rewards.
func benchBatch(i int) EpisodeBatch {
	id := fmt.Sprintf("bench-%08d", i)
	b := EpisodeBatch{Episode: schemas.EpisodeRow{EpisodeID: id, RunID: testRunID, TaskID: "fix-sum",
		Provider: "local", ExitReason: "done", Steps: 8, StartedAt: time.Now().UnixMilli()}}
	out := strings.Repeat(fmt.Sprintf("line %d of output: ok\n", i), 2048/24)
	text := strings.Repeat("I will look at the file. ", 20)
	for s := range 8 {
		st := schemas.StepRow{EpisodeID: id, StepIndex: int32(s), TaskID: "fix-sum", ActionKind: "exec",
			ActionJSON: `{"kind":"exec","cmd":"cat sum.py"}`, Output: out, OutputBytes: int64(len(out)),
			Model: ptr("m"), ModelText: ptr(text), FinishReason: ptr("stop")}
		for k := range 300 {
			st.PromptIDs = append(st.PromptIDs, int32(k*7+s))
		}
		for k := range 100 {
			st.ResponseIDs = append(st.ResponseIDs, int32(1000+k+i%13))
			st.ResponseMask = append(st.ResponseMask, 1)
			st.ResponseLogprobs = append(st.ResponseLogprobs, -float32(k%17)/9)
		}
		b.Steps = append(b.Steps, st)
	}
	b.Rewards = []schemas.RewardRow{
		{EpisodeID: id, Name: "verify", Value: ptr(1.0), Source: "python -m pytest"},
		{EpisodeID: id, Name: "shaped", StepIndex: ptr(int32(7)), Value: ptr(0.5)},
	}
	return b
}

// BenchmarkCommit measures Commit with the default configuration (zstd,
// 64 MiB generations), generation closes included. MB/s counts the rows'
// estimated uncompressed size.
func BenchmarkCommit(b *testing.B) {
	for _, codec := range []string{"zstd", "snappy", "none"} {
		b.Run(codec, func(b *testing.B) {
			batches := make([]EpisodeBatch, 64)
			for i := range batches {
				batches[i] = benchBatch(i)
			}
			b.SetBytes(batches[0].Size())
			w, err := Create(b.TempDir(), testManifest(), Config{Compression: codec})
			require.NoError(b, err)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				bt := batches[i%len(batches)]
				bt.Episode.EpisodeID = fmt.Sprintf("bench-%08d", i)
				bt.Steps = append([]schemas.StepRow(nil), bt.Steps...)
				for s := range bt.Steps {
					bt.Steps[s].EpisodeID = bt.Episode.EpisodeID
				}
				bt.Rewards = append([]schemas.RewardRow(nil), bt.Rewards...)
				for r := range bt.Rewards {
					bt.Rewards[r].EpisodeID = bt.Episode.EpisodeID
				}
				if err := w.Commit(context.Background(), bt); err != nil {
					b.Fatal(err)
				}
			}
			require.NoError(b, w.Close(StatusComplete))
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "episodes/s")
			var disk int64
			for _, s := range w.Manifest().Shards {
				disk += s.Bytes
			}
			b.ReportMetric(float64(disk)/float64(b.N), "disk-B/episode")
		})
	}
}
