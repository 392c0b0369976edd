package shard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigTasks returns a task record array of at least n bytes, shaped like the
// collector's (id, hash, spec with embedded files).
func bigTasks(n int) json.RawMessage {
	var recs []map[string]any
	size := 0
	for i := 0; size < n; i++ {
		content := strings.Repeat(fmt.Sprintf("line %d of a big fixture file\n", i), 2000)
		recs = append(recs, map[string]any{"id": fmt.Sprintf("task-%d", i), "hash": fmt.Sprintf("h%d", i),
			"spec": map[string]any{"id": fmt.Sprintf("task-%d", i), "files": map[string]string{"data.txt": content}}})
		size += len(content) + 100
	}
	data, err := json.Marshal(recs)
	if err != nil {
		panic(err)
	}
	return data
}

func sidecars(t *testing.T, dir string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, "tasks-*.json"))
	require.NoError(t, err)
	var out []string
	for _, m := range matches {
		out = append(out, filepath.Base(m))
	}
	return out
}

func rawManifest(t *testing.T, dir string) map[string]json.RawMessage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	require.NoError(t, err)
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &raw))
	return raw
}

// Small task specs stay in the manifest: one self-contained file.
func TestSmallTasksStayInline(t *testing.T) {
	dir := t.TempDir()
	m := testManifest()
	m.Tasks = json.RawMessage(`[{"id":"a","hash":"h","spec":{"id":"a"}}]`)
	w, err := Create(dir, m, smallConfig())
	require.NoError(t, err)
	commitRange(t, w, 0, 5)
	require.NoError(t, w.Close(StatusComplete))
	raw := rawManifest(t, dir)
	assert.Contains(t, raw, "tasks")
	assert.NotContains(t, raw, "tasks_file")
	assert.Empty(t, sidecars(t, dir))
	assert.JSONEq(t, string(m.Tasks), string(mustOpen(t, dir).Manifest().Tasks))
}

// Large task specs are stored once in a sidecar that every generation close
// leaves alone; every reader (Open, Resume, a Writer's Manifest) sees the
// same Tasks bytes; Resume, Drop and Update keep it right.
func TestLargeTasksInSidecar(t *testing.T) {
	dir := t.TempDir()
	m := testManifest()
	m.Tasks = bigTasks(1 << 20)
	w, err := Create(dir, m, smallConfig())
	require.NoError(t, err)
	names := sidecars(t, dir)
	require.Len(t, names, 1)
	side := filepath.Join(dir, names[0])
	first, err := os.Stat(side)
	require.NoError(t, err)

	commitRange(t, w, 0, 40)
	require.NoError(t, w.Roll())
	require.GreaterOrEqual(t, len(w.Manifest().Generations()), 3)
	again, err := os.Stat(side)
	require.NoError(t, err)
	assert.True(t, os.SameFile(first, again) && first.ModTime().Equal(again.ModTime()), "generation closes rewrote the sidecar")
	info, err := os.Stat(filepath.Join(dir, ManifestFile))
	require.NoError(t, err)
	assert.Less(t, info.Size(), int64(16<<10), "the manifest does not embed the tasks")
	raw := rawManifest(t, dir)
	assert.NotContains(t, raw, "tasks")
	assert.Contains(t, raw, "tasks_file")
	assert.Equal(t, []byte(m.Tasks), []byte(w.Manifest().Tasks))

	data, err := os.ReadFile(side)
	require.NoError(t, err)
	assert.Equal(t, []byte(m.Tasks), data, "the sidecar holds exactly the tasks JSON")

	// Cancel some, close, resume, drop them: the sidecar carries through.
	require.NoError(t, w.Close(StatusPartial))
	assert.Equal(t, []byte(m.Tasks), []byte(mustOpen(t, dir).Manifest().Tasks))
	w, err = Resume(dir, smallConfig())
	require.NoError(t, err)
	assert.Equal(t, []byte(m.Tasks), []byte(w.Manifest().Tasks))
	ri, err := os.Stat(filepath.Join(dir, ReserveFile))
	require.NoError(t, err)
	assert.Less(t, ri.Size(), int64(1<<20), "the reserve is sized for the manifest, not for the sidecar")
	n, err := w.Drop(context.Background(), map[string]bool{"ep-000003": true, "ep-000030": true})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, names, sidecars(t, dir))

	// Other tasks: a new sidecar, the old one deleted once no manifest
	// names it.
	other := append(bytes.Clone(m.Tasks[:len(m.Tasks)-1]), `,{"id":"extra","hash":"x","spec":{"id":"extra"}}]`...)
	require.NoError(t, w.Update(func(m *Manifest) { m.Tasks = other }))
	require.NoError(t, w.Roll())
	commitRange(t, w, 50, 52)
	require.NoError(t, w.Close(StatusComplete))
	require.Len(t, sidecars(t, dir), 1)
	assert.NotEqual(t, names, sidecars(t, dir))
	assert.Equal(t, []byte(other), []byte(mustOpen(t, dir).Manifest().Tasks))
	rep, err := Verify(dir)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
	assert.Empty(t, rep.Unlisted)

	// Small again: inline, and the sidecar goes.
	w, err = Resume(dir, smallConfig())
	require.NoError(t, err)
	require.NoError(t, w.Update(func(m *Manifest) { m.Tasks = json.RawMessage(`[]`) }))
	require.NoError(t, w.Close(StatusComplete))
	assert.Empty(t, sidecars(t, dir))
	assert.Equal(t, "[]", string(mustOpen(t, dir).Manifest().Tasks))
}

// A damaged or swapped sidecar is refused by every reader and by Resume
// (changing nothing), and reported by Verify; an unreferenced one is a
// leftover that Resume deletes.
func TestSidecarDamageNoticed(t *testing.T) {
	orig := filepath.Join(t.TempDir(), "run")
	m := testManifest()
	m.Tasks = bigTasks(TasksInlineMax + 1)
	w, err := Create(orig, m, smallConfig())
	require.NoError(t, err)
	commitRange(t, w, 0, 5)
	require.NoError(t, w.Close(StatusComplete))
	name := sidecars(t, orig)[0]

	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, dir string)
		want  string
	}{
		{"flipped byte", func(t *testing.T, dir string) {
			path := filepath.Join(dir, name)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			data[len(data)/2] ^= 1
			require.NoError(t, os.WriteFile(path, data, 0o644))
		}, "sha256"},
		{"truncated", func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(filepath.Join(dir, name), 100))
		}, "bytes"},
		{"missing", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, name)))
		}, name},
		{"a path outside the dataset", func(t *testing.T, dir string) {
			path := filepath.Join(dir, ManifestFile)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			data = bytes.Replace(data, []byte(`"file": "`+name), []byte(`"file": "../`+name), 1)
			require.NoError(t, os.WriteFile(path, data, 0o644))
		}, "not a tasks sidecar name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			copyTree(t, orig, dir)
			tc.spoil(t, dir)
			_, err := Open(dir)
			require.ErrorIs(t, err, ErrCorrupt)
			assert.ErrorContains(t, err, tc.want)
			before := treeHashes(t, dir)
			_, err = Resume(dir, smallConfig())
			require.ErrorIs(t, err, ErrCorrupt)
			assert.Equal(t, before, treeHashes(t, dir))
			rep, err := Verify(dir)
			if err == nil {
				assert.False(t, rep.OK())
				assert.Contains(t, fmt.Sprint(rep.Problems), tc.want)
			} else {
				assert.ErrorIs(t, err, ErrCorrupt)
			}
		})
	}

	t.Run("unreferenced", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		copyTree(t, orig, dir)
		stale := sidecarName(strings.Repeat("ab", 32))
		require.NoError(t, os.WriteFile(filepath.Join(dir, stale), []byte("[]"), 0o644))
		rep, err := Verify(dir)
		require.NoError(t, err)
		assert.True(t, rep.OK(), "problems: %v", rep.Problems)
		assert.Equal(t, []string{stale}, rep.Unlisted)
		w, err := Resume(dir, smallConfig())
		require.NoError(t, err)
		assert.Equal(t, []string{stale}, w.Removed())
		require.NoError(t, w.Close(StatusComplete))
		assert.Equal(t, []string{name}, sidecars(t, dir))
		assert.Equal(t, int64(5), mustOpen(t, dir).Manifest().Counts[schemas.TableEpisodes])
	})
}
