package record_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/record"
	"github.com/forkline/forkline/schemas"
)

// episode is a one-step episode whose step shows the blob png.
func episode(id string, png []byte) shard.EpisodeBatch {
	sum := sha256.Sum256(png)
	h := hex.EncodeToString(sum[:])
	return shard.EpisodeBatch{
		Episode: schemas.EpisodeRow{EpisodeID: id, RunID: "run-1", TaskID: "t", ExitReason: "done", Steps: 1},
		Steps:   []schemas.StepRow{{EpisodeID: id, StepIndex: 0, ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"true"}`, ScreenHash: h}},
		Blobs:   []schemas.BlobRow{{SHA256: h, Media: "image/png", Data: png}},
	}
}

func open(t *testing.T, cfg record.Config) *record.Recorder {
	t.Helper()
	if cfg.Manifest.RunID == "" {
		cfg.Manifest = shard.Manifest{RunID: "run-1", ToolVersion: "dev"}
	}
	if cfg.Shards == (shard.Config{}) {
		cfg.Shards = shard.DefaultConfig()
	}
	r, err := record.Open(cfg)
	require.NoError(t, err)
	return r
}

func blobCount(t *testing.T, dir string) int {
	t.Helper()
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	n := 0
	for _, err := range ds.Blobs() {
		require.NoError(t, err)
		n++
	}
	return n
}

// snapshot is every file under dir with its bytes.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		files[p] = string(b)
		return err
	}))
	return files
}

// A blob shown by episodes of two invocations — the first, then a resume —
// is stored once; the resume keeps the run id and the episodes kept.
func TestABlobIsStoredOnceAcrossAResume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	png := []byte("\x89PNG one screenshot")
	r := open(t, record.Config{Dir: dir})
	require.False(t, r.Resumed())
	for i := range 2 {
		require.NoError(t, r.Commit(context.Background(), new(episode(fmt.Sprint("a", i), png))))
	}
	require.NoError(t, r.Close(shard.StatusPartial, manifest.Summary{}))
	require.Equal(t, 1, blobCount(t, dir))

	filled := false
	r = open(t, record.Config{Dir: dir, Resume: true, Fill: func(m *shard.Manifest) { filled = m.RunID == "run-1" }})
	require.True(t, r.Resumed())
	require.True(t, filled, "Fill sees the stored manifest")
	require.Len(t, r.Writer().Committed(), 2)
	b0, b1 := episode("b0", png), episode("b1", []byte("\x89PNG another"))
	require.NoError(t, r.Commit(context.Background(), &b0))
	require.Empty(t, b0.Blobs, "the batch holds what was stored with it: nothing new")
	require.NoError(t, r.Commit(context.Background(), &b1))
	require.Len(t, b1.Blobs, 1)
	require.NoError(t, r.Close(shard.StatusComplete, manifest.Summary{Serve: &manifest.Serve{Sessions: 4}}))
	require.Equal(t, 2, blobCount(t, dir), "the resumed run's blob is not stored again")

	ds, err := shard.Open(dir)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
	sum, err := manifest.DecodeSummary(ds.Manifest().Summary)
	require.NoError(t, err)
	require.NotNil(t, sum.Serve)
	require.Equal(t, 4, sum.Serve.Sessions)
	rep, err := shard.Verify(dir)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
}

// Every refusal names why and leaves the directory as it was.
func TestRefusalsChangeNothing(t *testing.T) {
	base := t.TempDir()
	ds := filepath.Join(base, "ds")
	r := open(t, record.Config{Dir: ds})
	require.NoError(t, r.Commit(context.Background(), new(episode("a", []byte("png")))))
	require.NoError(t, r.Close(shard.StatusComplete, manifest.Summary{}))
	notMine := filepath.Join(base, "notmine")
	require.NoError(t, os.MkdirAll(notMine, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(notMine, "notes.txt"), []byte("mine"), 0o644))
	empty := filepath.Join(base, "empty")

	for _, c := range []struct {
		name string
		cfg  record.Config
		want error
	}{
		{"a dataset, neither resume nor replace", record.Config{Dir: ds}, record.ErrExists},
		{"resume of nothing", record.Config{Dir: empty, Resume: true}, record.ErrNothingToResume},
		{"someone else's files", record.Config{Dir: notMine}, record.ErrNotEmpty},
		{"replace of someone else's files", record.Config{Dir: notMine, Replace: true}, record.ErrNotEmpty},
	} {
		before, beforeMine := snapshot(t, ds), snapshot(t, notMine)
		c.cfg.Manifest, c.cfg.Shards = shard.Manifest{RunID: "run-2"}, shard.DefaultConfig()
		_, err := record.Open(c.cfg)
		require.ErrorIs(t, err, c.want, c.name)
		require.ErrorContains(t, err, c.cfg.Dir, c.name)
		require.Equal(t, before, snapshot(t, ds), c.name)
		require.Equal(t, beforeMine, snapshot(t, notMine), c.name)
		_, statErr := os.Stat(empty)
		require.True(t, os.IsNotExist(statErr), c.name)
	}

	// Replace removes the dataset forkline wrote and starts another.
	r = open(t, record.Config{Dir: ds, Replace: true, Manifest: shard.Manifest{RunID: "run-3"}})
	require.Empty(t, r.Writer().Committed())
	require.NoError(t, r.Close(shard.StatusComplete, manifest.Summary{}))
	got, err := shard.Open(ds)
	require.NoError(t, err)
	require.Equal(t, "run-3", got.Manifest().RunID)
}
