package collect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// dirHashes maps every file and directory under dir to a hash of its
// content, so that equal maps mean nothing changed.
func dirHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel+"/"] = "dir"
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	}))
	return out
}

// -force only ever clears a forkline run: a directory holding a manifest
// that is not forkline's, or the user's files and no run at all, is
// refused as bad input (exit 2) with every byte left as it was.
func TestForceRefusesWhatIsNotARun(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"a foreign manifest and steps/notes.txt", map[string]string{
			"manifest.json":   `{"name": "survey", "rows": 1200}`,
			"steps/notes.txt": "precious notes",
		}, "notes.txt"},
		{"a foreign manifest alone", map[string]string{
			"manifest.json": `{"name": "survey", "rows": 1200}`,
		}, "not a forkline dataset"},
		{"the user's files and no manifest", map[string]string{
			"thesis.tex":     "precious",
			"figures/a.png":  "png",
			"steps/keep.txt": "mine",
		}, "holds no forkline run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig(t, "../examples/tasks/fix-sum.yaml")
			for name, content := range tc.files {
				path := filepath.Join(cfg.Out, name)
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
			}
			before := dirHashes(t, cfg.Out)
			cfg.Force = true
			_, err := Run(context.Background(), cfg)
			require.ErrorIs(t, err, ErrConfig)
			assert.ErrorContains(t, err, tc.want)
			assert.Equal(t, before, dirHashes(t, cfg.Out), "a refused -force changed files")
		})
	}
}

// -force on a run a live collector is writing is refused, and the live run
// goes on: it commits, closes cleanly, and lists every shard it wrote.
func TestForceLeavesALiveRunAlone(t *testing.T) {
	cfg := baseConfig(t, "../examples/tasks/fix-sum.yaml")
	w, err := shard.Create(cfg.Out, shard.Manifest{RunID: "live", Tool: shard.ToolName}, shard.Config{})
	require.NoError(t, err)
	commit := func(id string) {
		require.NoError(t, w.Commit(context.Background(), shard.EpisodeBatch{
			Episode: schemas.EpisodeRow{EpisodeID: id, RunID: "live", TaskID: "t", ExitReason: "done", Steps: 1},
			Steps:   []schemas.StepRow{{EpisodeID: id, TaskID: "t", ActionKind: "done", ActionJSON: `{"kind":"done"}`}},
		}))
	}
	commit("a")
	require.NoError(t, w.Roll())
	before := dirHashes(t, cfg.Out)

	cfg.Force = true
	_, err = Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorIs(t, err, shard.ErrLocked)
	assert.Equal(t, before, dirHashes(t, cfg.Out))

	commit("b")
	require.NoError(t, w.Roll())
	commit("c")
	require.NoError(t, w.Close(shard.StatusComplete))
	rep, err := shard.Verify(cfg.Out)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
	assert.Equal(t, int64(3), rep.Rows[schemas.TableEpisodes])
	assert.Len(t, rep.Unlisted, 0)
}
