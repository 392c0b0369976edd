package shard

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/schemas"
)

// cancelled marks batches from..to-1 as cancelled, as a stopped run keeps
// the episodes in flight.
func cancelledBatches(from, to int) []EpisodeBatch {
	bs := makeBatchesRange(from, to)
	for i := range bs {
		bs[i].Episode.ExitReason = "cancelled"
	}
	return bs
}

// TestDropThenRedo is what a resume does with the episodes a stop
// cancelled: it drops them, commits them again, and the dataset ends with
// each episode once, every row intact, blobs first stored with a dropped
// episode still there for the episodes that share them.
func TestDropThenRedo(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{RollBytes: 1 << 30, RowGroupBytes: 2 << 10}
	w, err := Create(dir, testManifest(), cfg)
	require.NoError(t, err)
	ctx := context.Background()
	// Generation 0: episodes 0..29 finished, 30..34 cancelled;
	// generation 1: 35..59 finished, 60..63 cancelled.
	var kept []EpisodeBatch
	kept = append(kept, commitRange(t, w, 0, 30)...)
	for _, b := range cancelledBatches(30, 35) {
		require.NoError(t, w.Commit(ctx, b))
	}
	require.NoError(t, w.Roll())
	kept = append(kept, commitRange(t, w, 35, 60)...)
	for _, b := range cancelledBatches(60, 64) {
		require.NoError(t, w.Commit(ctx, b))
	}
	require.NoError(t, w.Close(StatusPartial))
	blobsBefore := collect(t, mustOpen(t, dir).Blobs())

	w, err = Resume(dir, cfg)
	require.NoError(t, err)
	exits := w.ExitReasons()
	require.Len(t, exits, 64)
	redo := map[string]bool{}
	for id, exit := range exits {
		if exit == "cancelled" {
			redo[id] = true
		}
	}
	require.Len(t, redo, 9)
	redo["not-committed"] = true // ignored
	n, err := w.Drop(ctx, redo)
	require.NoError(t, err)
	assert.Equal(t, 9, n)
	committed := w.Committed()
	assert.Len(t, committed, 55)
	for id := range redo {
		assert.False(t, committed[id], id)
	}
	// The dataset between drop and redo: the kept episodes only, valid.
	d := mustOpen(t, dir)
	wantEps, wantSteps, wantRewards := expected(kept)
	sortEps := func(e []schemas.EpisodeRow) []schemas.EpisodeRow {
		slices.SortFunc(e, func(a, b schemas.EpisodeRow) int { return strings.Compare(a.EpisodeID, b.EpisodeID) })
		return e
	}
	assert.Equal(t, sortEps(wantEps), sortEps(normEpisodes(collect(t, d.Episodes()))))
	assert.Equal(t, len(wantSteps), len(collect(t, d.Steps())))
	assert.Equal(t, len(wantRewards), len(collect(t, d.Rewards())))
	assert.Equal(t, blobsBefore, collect(t, d.Blobs()), "blobs stay where they were")
	rep, err := Verify(dir)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
	assert.Empty(t, rep.Unlisted, "the old shards are deleted")
	require.NoError(t, d.EachEpisode(func(schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) error { return nil }))

	// Redo them, now finished.
	var redone []EpisodeBatch
	for _, b := range append(makeBatchesRange(30, 35), makeBatchesRange(60, 64)...) {
		require.NoError(t, w.Commit(ctx, b))
		redone = append(redone, b)
	}
	require.NoError(t, w.Close(StatusComplete))
	rep, err = Verify(dir)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
	d = mustOpen(t, dir)
	all := append(slices.Clone(kept), redone...)
	wantEps, wantSteps, _ = expected(all)
	gotEps := normEpisodes(collect(t, d.Episodes()))
	assert.Equal(t, sortEps(wantEps), sortEps(slices.Clone(gotEps)))
	for _, e := range gotEps {
		assert.NotEqual(t, "cancelled", e.ExitReason)
	}
	assert.ElementsMatch(t, wantSteps, normSteps(collect(t, d.Steps())))
	// Every step's hashed screenshot still resolves.
	for st, err := range d.Steps() {
		require.NoError(t, err)
		if st.ScreenHash != "" && st.Screenshot == nil {
			_, err := d.Blob(st.ScreenHash)
			require.NoError(t, err, "step %s/%d", st.EpisodeID, st.StepIndex)
		}
	}
}

// TestDropCrash: a crash after the new shards are renamed but before the
// manifest lists them leaves the dataset as it was; Resume deletes them.
func TestDropCrash(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{RollBytes: 1 << 30, RowGroupBytes: 2 << 10}
	w, err := Create(dir, testManifest(), cfg)
	require.NoError(t, err)
	commitRange(t, w, 0, 20)
	require.NoError(t, w.Close(StatusPartial))
	before, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	require.NoError(t, err)

	// What a drop of generation 0 writes before its manifest write.
	w, err = Resume(dir, cfg)
	require.NoError(t, err)
	info, rows, err := copyShard(w, mustOpen(t, dir).Shards(schemas.TableEpisodes)[0], w.nextGen,
		func(r *schemas.EpisodeRow) (bool, int64) { return r.EpisodeID != "ep-000003", 1 })
	require.NoError(t, err)
	assert.EqualValues(t, 19, rows)
	w.abandon() // crash
	require.FileExists(t, filepath.Join(dir, filepath.FromSlash(info.File)))

	w, err = Resume(dir, cfg)
	require.NoError(t, err)
	assert.Contains(t, w.Removed(), info.File)
	assert.Len(t, w.Committed(), 20, "the dataset is as it was")
	require.NoError(t, w.Close(StatusPartial))
	after, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	require.NoError(t, err)
	assert.Equal(t, shardsOf(t, before), shardsOf(t, after))
}

func mustOpen(t *testing.T, dir string) *Dataset {
	t.Helper()
	d, err := Open(dir)
	require.NoError(t, err)
	return d
}

func shardsOf(t *testing.T, manifest []byte) []ShardInfo {
	t.Helper()
	var m Manifest
	require.NoError(t, json.Unmarshal(manifest, &m))
	return m.Shards
}
