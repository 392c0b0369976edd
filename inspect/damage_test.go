package inspect

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// copyTree copies the dataset at src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	}))
}

// outcome is what one call did, panics included.
type outcome struct {
	err   error
	panic any
}

func safely(f func() error) (o outcome) {
	defer func() { o.panic = recover() }()
	o.err = f()
	return o
}

func TestNotADataset(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	foreign := filepath.Join(root, "foreign")
	require.NoError(t, os.MkdirAll(foreign, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(foreign, shard.ManifestFile), []byte(`{"name": "someone else's"}`), 0o644))
	future := filepath.Join(root, "future")
	copyTree(t, writeFixture(t), future)
	m, err := os.ReadFile(filepath.Join(future, shard.ManifestFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(future, shard.ManifestFile),
		[]byte(strings.Replace(string(m), `"schema_version": 3`, `"schema_version": 99`, 1)), 0o644))

	for name, tc := range map[string]struct{ dir, names string }{
		"missing":            {filepath.Join(root, "nope"), filepath.Join(root, "nope")},
		"a file":             {file, file},
		"empty":              {root, filepath.Join(root) + " has no manifest.json"},
		"another tool's":     {foreign, filepath.Join(foreign, shard.ManifestFile)},
		"newer schema":       {future, filepath.Join(future, shard.ManifestFile) + " was written with schema version 99"},
		"the tables' parent": {filepath.Join(future, "steps"), "manifest.json"},
	} {
		t.Run(name, func(t *testing.T) {
			o := safely(func() error { _, err := Summarize(t.Context(), tc.dir, Options{}); return err })
			require.Nil(t, o.panic)
			assert.ErrorIs(t, o.err, ErrNotDataset)
			assert.ErrorContains(t, o.err, tc.names)
			o = safely(func() error {
				_, err := Transcripts(t.Context(), tc.dir, []string{"s"}, TranscriptOptions{})
				return err
			})
			require.Nil(t, o.panic)
			assert.ErrorIs(t, o.err, ErrNotDataset)
		})
	}
}

// damages spoil a file's bytes as formats/shard's own corruption tests do:
// single flipped bytes spread over the whole file (header, pages, footer)
// and garbled 64-byte runs.
func damages(size int) map[string]func([]byte) {
	out := map[string]func([]byte){}
	offsets := []int{0, 4, 64, size - 1, size - 5, size - 8, size - 40}
	for i := 1; i < 8; i++ {
		offsets = append(offsets, size*i/8)
	}
	for _, off := range offsets {
		if off >= 0 && off < size {
			out[fmt.Sprintf("flip@%d", off)] = func(b []byte) { b[off] ^= 1 }
		}
	}
	for _, off := range []int{size / 3, size - 100} {
		if off >= 0 && off+64 <= size {
			out[fmt.Sprintf("garble64@%d", off)] = func(b []byte) {
				for i := range 64 {
					b[off+i] = byte(i*37 + 11)
				}
			}
		}
	}
	return out
}

// A damaged dataset — a shard of any table spoilt at many offsets, a shard
// missing, a manifest edited by hand or cut short — is reported naming
// the file, with ErrDamaged (exit 1), and never makes inspect panic. A
// transcript is refused the same way, or, when the damage lies where it
// does not read, is exactly the undamaged one.
func TestDamagedDataset(t *testing.T) {
	orig := writeFixture(t)
	ds, err := shard.Open(orig)
	require.NoError(t, err)
	m := ds.Manifest()
	prefixes := []string{"s-done-1", "s-done-0", "s-max", "s-lost", "g-done", "g-half"}
	clean, err := Transcripts(t.Context(), orig, prefixes, TranscriptOptions{})
	require.NoError(t, err)

	check := func(t *testing.T, dir, file string) {
		t.Helper()
		var s *Summary
		o := safely(func() error { var err error; s, err = Summarize(t.Context(), dir, Options{}); return err })
		require.Nil(t, o.panic, "Summarize panicked")
		require.ErrorIs(t, o.err, ErrDamaged)
		assert.ErrorContains(t, o.err, file, "the error names the file")
		if s != nil {
			assert.Contains(t, strings.Join(s.Problems, "\n"), file)
			assert.Zero(t, s.Episodes, "no row section from a damaged dataset")
		}
		var ts []*Transcript
		o = safely(func() error {
			var err error
			ts, err = Transcripts(t.Context(), dir, prefixes, TranscriptOptions{Screenshots: filepath.Join(t.TempDir(), "shots")})
			return err
		})
		require.Nil(t, o.panic, "Transcripts panicked")
		if o.err != nil {
			assert.ErrorIs(t, o.err, ErrDamaged)
			assert.ErrorContains(t, o.err, file)
			return
		}
		for i := range ts {
			ts[i].Steps, clean[i].Steps = clearFiles(ts[i].Steps), clearFiles(clean[i].Steps)
		}
		assert.Equal(t, clean, ts, "a transcript read around the damage is the undamaged one")
	}

	cases := 0
	for _, table := range schemas.Tables {
		victim := ds.Shards(table)[0]
		data, err := os.ReadFile(filepath.Join(orig, victim.File))
		require.NoError(t, err)
		for name, spoil := range damages(len(data)) {
			t.Run(table+"/"+name, func(t *testing.T) {
				cases++
				dir := filepath.Join(t.TempDir(), "run")
				copyTree(t, orig, dir)
				b := slices.Clone(data)
				spoil(b)
				require.NoError(t, os.WriteFile(filepath.Join(dir, victim.File), b, 0o644))
				check(t, dir, victim.File)
			})
		}
		t.Run(table+"/missing", func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			copyTree(t, orig, dir)
			require.NoError(t, os.Remove(filepath.Join(dir, victim.File)))
			check(t, dir, victim.File)
		})
	}
	assert.Greater(t, cases, 40, "many offsets of every table's shard")

	edit := func(t *testing.T, fn func(*shard.Manifest)) string {
		dir := filepath.Join(t.TempDir(), "run")
		copyTree(t, orig, dir)
		e := m.Clone()
		fn(&e)
		b, err := json.MarshalIndent(e, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, shard.ManifestFile), b, 0o644))
		return dir
	}
	steps := ds.Shards(schemas.TableSteps)[0]
	t.Run("manifest/sha256 edited", func(t *testing.T) {
		dir := edit(t, func(e *shard.Manifest) {
			for i := range e.Shards {
				if e.Shards[i].File == steps.File {
					e.Shards[i].SHA256 = strings.Repeat("0", 64)
				}
			}
		})
		check(t, dir, steps.File)
	})
	t.Run("manifest/run id edited", func(t *testing.T) {
		check(t, edit(t, func(e *shard.Manifest) { e.RunID = "run-other" }), "run_id")
	})
	t.Run("manifest/unreadable policy", func(t *testing.T) {
		check(t, edit(t, func(e *shard.Manifest) { e.Policy = json.RawMessage(`["not", "a", "policy"]`) }), shard.ManifestFile)
	})
	t.Run("manifest/cut short", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		copyTree(t, orig, dir)
		b, err := os.ReadFile(filepath.Join(dir, shard.ManifestFile))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, shard.ManifestFile), b[:len(b)/2], 0o644))
		check(t, dir, shard.ManifestFile)
	})
}

func clearFiles(steps []Step) []Step {
	for i := range steps {
		if steps[i].Screenshot != nil {
			c := *steps[i].Screenshot
			c.File = ""
			steps[i].Screenshot = &c
		}
	}
	return steps
}

func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Summarize's memory does not grow with the number of episodes: the heap
// it holds while reading 50,000 episodes (each with its own reward value,
// so the reward takes the histogram path, and with reset latencies past the
// exact-quantile sample) is no larger than while reading 5,000, but for
// 1 MiB of slack (an index of 50,000 episode ids alone would take more). It keeps counters per task and per reset key, a bounded latency
// sample and bounded reward bins, never a row or an id per episode.
func TestSummarizeMemoryDoesNotGrowWithEpisodes(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 55,000 episodes")
	}
	peak := func(n int) uint64 {
		var batches []shard.EpisodeBatch
		for i := range n {
			id := fmt.Sprintf("ep-%07d", i)
			v := float64(i%997) / 996
			batches = append(batches, shard.EpisodeBatch{
				Episode: schemas.EpisodeRow{EpisodeID: id, TaskID: fmt.Sprintf("task-%d", i%5), ExitReason: "done", Steps: 1,
					ResetStrategy: "fork", ResetOrigin: "overlay", ResetMS: float64(i%1000) / 10},
				Steps:   []schemas.StepRow{{EpisodeID: id, TaskID: "t", ActionKind: "done", ActionJSON: `{"kind":"done"}`, ExitCode: -1}},
				Rewards: []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: &v}},
			})
		}
		dir := writeDataset(t, shard.Manifest{RunID: fmt.Sprintf("mem-%d", n)}, batches, shard.Config{RollBytes: 256 << 10})
		batches = nil
		var most uint64
		testHookEpisode = func(k int64) {
			if k%500 == 0 {
				most = max(most, heapInuse())
			}
		}
		defer func() { testHookEpisode = nil }()
		base := heapInuse()
		s, err := Summarize(t.Context(), dir, Options{})
		require.NoError(t, err)
		require.EqualValues(t, n, s.Episodes)
		require.Len(t, s.Reward.Histogram, histogramBins)
		t.Logf("%d episodes: heap %0.1f MiB at start, at most %.1f MiB while reading", n, float64(base)/(1<<20), float64(most)/(1<<20))
		return most - min(most, base)
	}
	small := peak(5000)
	large := peak(50000)
	assert.Less(t, large, small+1<<20, "the heap Summarize holds does not grow with the episodes (5,000: +%d, 50,000: +%d bytes)", small, large)
}
