package shard

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A dataset with everything a Writer can leave: listed shards, a tasks
// sidecar, leftovers of a crash and the manifest reserve. RemoveDataset
// deletes all of it, the table directories too, and keeps dir.
func TestRemoveDatasetRemovesOnlyItsFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	m := testManifest()
	m.Tasks = bigTasks(TasksInlineMax + 1)
	w, err := Create(dir, m, smallConfig())
	require.NoError(t, err)
	commitRange(t, w, 0, 20)
	require.NoError(t, w.Roll())
	commitRange(t, w, 20, 25)
	w.abandon() // a crash: the open generation's temporaries and the reserve stay
	require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile+".tmp"), []byte("{"), 0o644))
	tree := treeHashes(t, dir)
	require.Contains(t, tree, ReserveFile)
	require.Contains(t, tree, w.Manifest().TasksFile.File)
	hasTmp := false
	for f := range tree {
		hasTmp = hasTmp || strings.HasSuffix(f, ".parquet.tmp")
	}
	require.True(t, hasTmp, "the crash left temporaries: %v", tree)

	require.NoError(t, RemoveDataset(dir))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
	_, err = Create(dir, testManifest(), smallConfig())
	require.NoError(t, err, "the emptied directory takes a new run")
}

// Anything forkline did not write makes RemoveDataset refuse, with every
// byte left as it was.
func TestRemoveDatasetRefusesForeignFiles(t *testing.T) {
	forkline := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "run")
		w, err := Create(dir, testManifest(), smallConfig())
		require.NoError(t, err)
		commitRange(t, w, 0, 5)
		require.NoError(t, w.Close(StatusComplete))
		return dir
	}
	write := func(t *testing.T, path, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	for _, tc := range []struct {
		name   string
		make   func(t *testing.T) string
		want   error
		naming string
	}{
		{"a foreign manifest and steps/notes.txt", func(t *testing.T) string {
			dir := t.TempDir()
			write(t, filepath.Join(dir, ManifestFile), `{"name": "my thesis data", "version": 3}`)
			write(t, filepath.Join(dir, "steps", "notes.txt"), "precious")
			return dir
		}, ErrForeignFile, "notes.txt"},
		{"a manifest of another tool", func(t *testing.T) string {
			dir := t.TempDir()
			data, _ := json.Marshal(map[string]any{"schema_version": schemas.Version, "tool": "other", "run_id": "theirs", "status": "complete", "shards": []any{}})
			write(t, filepath.Join(dir, ManifestFile), string(data))
			write(t, filepath.Join(dir, "steps", "part-00000.parquet"), "not ours")
			return dir
		}, ErrNotForkline, `tool "other"`},
		{"an undecodable manifest", func(t *testing.T) string {
			dir := t.TempDir()
			write(t, filepath.Join(dir, ManifestFile), "not json")
			return dir
		}, ErrNotForkline, ManifestFile},
		{"a manifest of another schema version", func(t *testing.T) string {
			dir := forkline(t)
			path := filepath.Join(dir, ManifestFile)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			var raw map[string]any
			require.NoError(t, json.Unmarshal(data, &raw))
			raw["schema_version"] = schemas.Version + 1
			data, _ = json.Marshal(raw)
			write(t, path, string(data))
			return dir
		}, ErrSchemaVersion, "schema version"},
		{"a user's file next to a forkline run", func(t *testing.T) string {
			dir := forkline(t)
			write(t, filepath.Join(dir, "thesis.tex"), "precious")
			return dir
		}, ErrForeignFile, "thesis.tex"},
		{"a user's file in a table directory", func(t *testing.T) string {
			dir := forkline(t)
			write(t, filepath.Join(dir, "rewards", "part-00000.parquet.bak"), "precious")
			return dir
		}, ErrForeignFile, "part-00000.parquet.bak"},
		{"a directory inside a table directory", func(t *testing.T) string {
			dir := forkline(t)
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "steps", "part-00009.parquet"), 0o755))
			return dir
		}, ErrForeignFile, "part-00009.parquet"},
		{"a table directory that is a symbolic link", func(t *testing.T) string {
			dir := forkline(t)
			elsewhere := t.TempDir()
			write(t, filepath.Join(elsewhere, "part-00000.parquet"), "the user's")
			require.NoError(t, os.RemoveAll(filepath.Join(dir, "blobs")))
			require.NoError(t, os.Symlink(elsewhere, filepath.Join(dir, "blobs")))
			return dir
		}, ErrForeignFile, "blobs"},
		{"no manifest", func(t *testing.T) string {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "steps", "part-00000.parquet"), "whose?")
			return dir
		}, ErrNoDataset, ManifestFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.make(t)
			before := treeHashes(t, dir)
			err := RemoveDataset(dir)
			require.ErrorIs(t, err, tc.want)
			assert.ErrorContains(t, err, tc.naming)
			assert.Equal(t, before, treeHashes(t, dir), "a refused RemoveDataset changed files")
		})
	}
	assert.ErrorIs(t, RemoveDataset(filepath.Join(t.TempDir(), "missing")), ErrNoDataset)
}

// RemoveDataset on a directory a live Writer holds refuses, and the live
// run goes on undisturbed: it commits, closes cleanly, and every shard it
// lists is there.
func TestRemoveDatasetRefusesLiveWriter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	batches := commitRange(t, w, 0, 20)
	require.NoError(t, w.Roll())
	before := treeHashes(t, dir)

	err = RemoveDataset(dir)
	require.ErrorIs(t, err, ErrLocked)
	assert.Equal(t, before, treeHashes(t, dir))

	for i := 20; i < 40; i++ {
		b := makeBatch(testRunID, i)
		require.NoError(t, w.Commit(context.Background(), b))
		batches = append(batches, b)
	}
	require.NoError(t, w.Close(StatusComplete))
	rep, err := Verify(dir)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
	d := mustOpen(t, dir)
	assert.Equal(t, StatusComplete, d.Manifest().Status)
	assert.Equal(t, int64(len(batches)), d.Manifest().Counts[schemas.TableEpisodes])
	assert.Len(t, collect(t, d.Episodes()), len(batches))
}
