package shard

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realManifest writes a small dataset of two generations and returns its
// directory and its manifest as a generic JSON object to edit.
func realManifest(t *testing.T) (string, map[string]any) {
	t.Helper()
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	commitRange(t, w, 0, 4)
	require.NoError(t, w.Roll())
	commitRange(t, w, 4, 6)
	require.NoError(t, w.Close(StatusComplete))
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(data, &raw))
	return dir, raw
}

// TestEditedManifestRefused: a manifest whose bookkeeping does not hold
// together was read as if it did (a shard listed twice exported its
// episodes twice, a shard outside its table was resumed from). Open,
// Resume and Verify now refuse it as corrupt, naming the file and field,
// and leave it as it was.
func TestEditedManifestRefused(t *testing.T) {
	shard0 := func(m map[string]any) map[string]any { return m["shards"].([]any)[0].(map[string]any) }
	cases := []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"shard listed twice", func(m map[string]any) {
			shards := m["shards"].([]any)
			m["shards"] = append(shards, shards[0])
			counts := m["counts"].(map[string]any)
			t := shard0(m)["table"].(string)
			counts[t] = counts[t].(float64) + shard0(m)["rows"].(float64)
		}, "is listed already as shards[0]"},
		{"negative rows", func(m map[string]any) { shard0(m)["rows"] = -1 }, "shards[0].rows: -1 is negative"},
		{"negative bytes", func(m map[string]any) { shard0(m)["bytes"] = -5 }, "shards[0].bytes: -5 is negative"},
		{"negative generation", func(m map[string]any) {
			s := shard0(m)
			s["generation"] = -1
			s["file"] = s["table"].(string) + "/part--0001.parquet"
		}, "shards[0].generation: -1 is negative"},
		{"sha256 not hex", func(m map[string]any) { shard0(m)["sha256"] = "not-a-hash" }, `shards[0].sha256: "not-a-hash" is not 64 lowercase hex digits`},
		{"shard outside its table", func(m map[string]any) { shard0(m)["file"] = "../outside.parquet" }, `shards[0]: shard: dataset corrupt: shard "../outside.parquet"`},
		{"count off by one", func(m map[string]any) {
			c := m["counts"].(map[string]any)
			c[schemas.TableEpisodes] = c[schemas.TableEpisodes].(float64) + 1
		}, "counts.episodes: 7, but the listed shards hold 6 rows"},
		{"counts missing", func(m map[string]any) { delete(m, "counts") }, "counts.steps: 0, but the listed shards hold 18 rows"},
		{"count of no table", func(m map[string]any) { m["counts"].(map[string]any)["stepz"] = 0 }, "counts.stepz: no such table"},
		{"unknown status", func(m map[string]any) { m["status"] = "done" }, `status "done" is not known (known: running, partial, complete)`},
		{"no run id", func(m map[string]any) { m["run_id"] = "" }, "run_id is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, raw := realManifest(t)
			c.edit(raw)
			data, err := json.MarshalIndent(raw, "", "  ")
			require.NoError(t, err)
			path := filepath.Join(dir, ManifestFile)
			require.NoError(t, os.WriteFile(path, data, 0o644))

			_, err = Open(dir)
			require.ErrorIs(t, err, ErrCorrupt)
			assert.ErrorContains(t, err, path)
			assert.ErrorContains(t, err, c.want)
			_, err = Verify(dir)
			assert.ErrorIs(t, err, ErrCorrupt)
			_, err = Resume(dir, smallConfig())
			assert.ErrorIs(t, err, ErrCorrupt)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, data, after, "a refused manifest is left as it was")
		})
	}
}

func TestManifestSyntaxErrorNamesLine(t *testing.T) {
	dir, raw := realManifest(t)
	data, err := json.MarshalIndent(raw, "", "  ")
	require.NoError(t, err)
	// Break the line that holds the status.
	data = bytes.Replace(data, []byte(`"status": "complete"`), []byte(`"status": complete`), 1)
	line := 1 + bytes.Count(data[:bytes.Index(data, []byte("complete"))], []byte("\n"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644))
	_, err = Open(dir)
	require.ErrorIs(t, err, ErrCorrupt)
	assert.ErrorContains(t, err, "manifest.json: line "+strconv.Itoa(line)+", column 13: invalid character 'c'")

	data = bytes.Replace(data, []byte(`"status": complete`), []byte(`"status": 7`), 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644))
	_, err = Open(dir)
	require.ErrorIs(t, err, ErrCorrupt)
	assert.ErrorContains(t, err, "line "+strconv.Itoa(line)+", column ")
	assert.ErrorContains(t, err, "Manifest.status")
}

// TestRealManifestsDecode: what the writer writes passes the checks, at
// every stage of a run.
func TestRealManifestsDecode(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	read := func() Manifest {
		data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
		require.NoError(t, err)
		m, err := decodeManifest("manifest.json", data)
		require.NoError(t, err)
		return m
	}
	assert.Equal(t, StatusRunning, read().Status, "a new run")
	commitRange(t, w, 0, 3)
	require.NoError(t, w.Roll())
	assert.NotEmpty(t, read().Shards, "a closed generation")
	require.NoError(t, w.Close(StatusPartial))
	w, err = Resume(dir, smallConfig())
	require.NoError(t, err)
	commitRange(t, w, 3, 5)
	require.NoError(t, w.Roll())
	n, err := w.Drop(context.Background(), map[string]bool{"ep-000001": true})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, int64(4), read().Counts[schemas.TableEpisodes], "after a drop")
	require.NoError(t, w.Close(StatusComplete))
	m := read()
	assert.Equal(t, StatusComplete, m.Status)
	assert.Equal(t, int64(4), m.Counts[schemas.TableEpisodes])
}

// TestCollectManifestsDecode: the manifests of real collect runs that seed
// FuzzDecodeManifest are accepted, so the fuzzer starts from valid ones.
func TestCollectManifestsDecode(t *testing.T) {
	files, err := filepath.Glob("testdata/fuzz/FuzzDecodeManifest/collect-*")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		quoted, ok := bytes.CutPrefix(raw, []byte("go test fuzz v1\n[]byte("))
		require.True(t, ok, f)
		data, err := strconv.Unquote(string(bytes.TrimSuffix(bytes.TrimSpace(quoted), []byte(")"))))
		require.NoError(t, err, f)
		m, err := decodeManifest(f, []byte(data))
		require.NoError(t, err, f)
		assert.Equal(t, StatusComplete, m.Status, f)
		assert.NotEmpty(t, m.Shards, f)
	}
}
