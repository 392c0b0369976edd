package shard

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/require"
)

// benchTasks is a task record array of about n bytes: task specs that embed
// their files, the shape that made a 48 MB task file.
func benchTasks(n int) json.RawMessage {
	var recs []map[string]any
	for i, size := 0, 0; size < n; i++ {
		content := strings.Repeat(fmt.Sprintf("fixture line %d\n", i), 4096)
		recs = append(recs, map[string]any{"id": fmt.Sprintf("task-%d", i), "hash": fmt.Sprintf("%064d", i),
			"spec": map[string]any{"id": fmt.Sprintf("task-%d", i), "instruction": "fix it", "files": map[string]string{"data.txt": content}}})
		size += len(content) + 150
	}
	data, err := json.Marshal(recs)
	if err != nil {
		panic(err)
	}
	return data
}

// BenchmarkGenerationCloseLargeTasks measures a generation close (one small
// episode committed, then Roll) in a run whose task specs take 48 MB of
// JSON. manifest-B/close is the size of manifest.json after the close:
// what every close rewrites and fsyncs.
func BenchmarkGenerationCloseLargeTasks(b *testing.B) {
	m := testManifest()
	m.Tasks = benchTasks(48 << 20)
	dir := b.TempDir()
	w, err := Create(dir, m, Config{})
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		bt := makeBatch(testRunID, i)
		if err := w.Commit(context.Background(), bt); err != nil {
			b.Fatal(err)
		}
		if err := w.Roll(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	fi, err := os.Stat(filepath.Join(dir, ManifestFile))
	require.NoError(b, err)
	b.ReportMetric(float64(fi.Size()), "manifest-B/close")
	b.ReportMetric(float64(len(m.Tasks)), "tasks-B")
	require.NoError(b, w.Close(StatusComplete))
}

// BenchmarkEachEpisode measures reading a dataset whole, the way export and
// replay do (Open, then EachEpisode), from the page cache: every shard is
// hashed once, then decoded. MB/s counts the shards' bytes on disk.
// "incompressible" gives the steps random output, so that the files are as
// big as their rows and hashing weighs the most.
func BenchmarkEachEpisode(b *testing.B) {
	for _, kind := range []string{"compressible", "incompressible"} {
		b.Run(kind, func(b *testing.B) {
			dir := b.TempDir()
			w, err := Create(dir, testManifest(), Config{RollBytes: 16 << 20})
			require.NoError(b, err)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 2000 {
				bt := benchBatch(i)
				if kind == "incompressible" {
					for s := range bt.Steps {
						raw := make([]byte, 2048)
						for k := range raw {
							raw[k] = byte(rng.Uint32())
						}
						bt.Steps[s].Output = hex.EncodeToString(raw)
					}
				}
				require.NoError(b, w.Commit(context.Background(), bt))
			}
			require.NoError(b, w.Close(StatusComplete))
			var disk int64
			for _, s := range w.Manifest().Shards {
				disk += s.Bytes
			}
			b.SetBytes(disk)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				d, err := Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				steps := 0
				err = d.EachEpisode(func(_ schemas.EpisodeRow, st []schemas.StepRow, _ []schemas.RewardRow) error {
					steps += len(st)
					return nil
				})
				if err != nil || steps != 2000*8 {
					b.Fatal(err, steps)
				}
			}
		})
	}
}

// BenchmarkHashShard measures the check every reader makes before decoding
// a shard: one sequential sha256 pass over a 64 MiB file (the default
// generation size) from the page cache.
func BenchmarkHashShard(b *testing.B) {
	path := filepath.Join(b.TempDir(), "part-00000.parquet")
	data := make([]byte, 64<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	require.NoError(b, os.WriteFile(path, data, 0o644))
	f, err := os.Open(path)
	require.NoError(b, err)
	defer f.Close()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := hashFile(f, int64(len(data))); err != nil {
			b.Fatal(err)
		}
	}
}
