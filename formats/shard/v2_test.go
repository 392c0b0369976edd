package shard

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/schemas"
)

// testdata/v2-dataset was written by forkline at schema version 2 (commit
// 6cdbe63: collect -tasks examples/tasks/fix-sum.yaml -repeats 2), before
// the agent columns existed. This build reads it — the columns it lacks
// read as null — and refuses to resume it: a run keeps one version.
func TestReadsSchemaVersion2(t *testing.T) {
	ds, err := Open("testdata/v2-dataset")
	require.NoError(t, err)
	require.Equal(t, 2, ds.Manifest().SchemaVersion)
	n := 0
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		require.Nil(t, s.HarnessInput)
		require.Nil(t, s.ToolsSHA256)
		require.NotEmpty(t, s.ActionKind)
		n++
	}
	require.Equal(t, 10, n)
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Nil(t, e.Agent)
		require.Equal(t, "done", e.ExitReason)
	}
	_, err = Verify("testdata/v2-dataset")
	require.NoError(t, err)

	dir := filepath.Join(t.TempDir(), "v2")
	require.NoError(t, os.CopyFS(dir, os.DirFS("testdata/v2-dataset")))
	before, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	require.NoError(t, err)
	listing := func() []string {
		var out []string
		require.NoError(t, filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			out = append(out, p)
			return err
		}))
		return out
	}
	files := listing()
	_, err = Resume(dir, DefaultConfig())
	require.ErrorIs(t, err, ErrSchemaVersion)
	require.Contains(t, err.Error(), "schema version 2 and this build writes version 3")
	after, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused resume changes nothing")
	require.Equal(t, files, listing(), "a refused resume leaves no file behind")
	require.Equal(t, 3, schemas.Version)
}
