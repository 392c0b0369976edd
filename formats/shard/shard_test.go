package shard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	batches := commitRange(t, w, 0, 300)
	require.NoError(t, w.Update(func(m *Manifest) {
		m.Summary = []byte(`{"episodes":300}`)
		m.Shards = nil // writer-owned: ignored
	}))
	require.NoError(t, w.Close(StatusComplete))
	require.NoError(t, w.Close(StatusComplete), "Close is idempotent")

	d, err := Open(dir)
	require.NoError(t, err)
	m := d.Manifest()
	assert.Equal(t, StatusComplete, m.Status)
	assert.Equal(t, schemas.Version, m.SchemaVersion)
	assert.Equal(t, ToolName, m.Tool)
	assert.JSONEq(t, `{"episodes":300}`, string(m.Summary))
	assert.JSONEq(t, `{"name":"local"}`, string(m.Provider))
	assert.Greater(t, len(m.Generations()), 5, "small RollBytes must roll several generations")

	wantEps, wantSteps, wantRewards := expected(batches)
	assert.Equal(t, wantEps, normEpisodes(collect(t, d.Episodes())))
	assert.Equal(t, wantSteps, normSteps(collect(t, d.Steps())))
	assert.Equal(t, wantRewards, collect(t, d.Rewards()))
	assert.Equal(t, int64(len(wantEps)), m.Counts[schemas.TableEpisodes])
	assert.Equal(t, int64(len(wantSteps)), m.Counts[schemas.TableSteps])
	assert.Equal(t, int64(len(wantRewards)), m.Counts[schemas.TableRewards])

	// Every referenced blob resolves; the shared one is stored once per
	// generation at most.
	shared := 0
	for bl, err := range d.Blobs() {
		require.NoError(t, err)
		if bl.SHA256 == sharedBlob.SHA256 {
			shared++
		}
	}
	assert.LessOrEqual(t, shared, len(m.Generations()))
	for _, b := range batches {
		for _, bl := range b.Blobs {
			data, err := d.Blob(bl.SHA256)
			require.NoError(t, err)
			assert.Equal(t, bl.Data, data)
		}
	}
	_, err = d.Blob("00")
	assert.ErrorIs(t, err, ErrBlobNotFound)

	// EachEpisode hands out whole episodes in commit order.
	i := 0
	require.NoError(t, d.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
		b := batches[i]
		i++
		assert.Equal(t, normEpisode(b.Episode), normEpisode(ep))
		assert.Equal(t, normSteps(b.Steps), normSteps(steps))
		assert.Equal(t, b.Rewards, rewards)
		return nil
	}))
	assert.Equal(t, len(batches), i)
	stop := errors.New("stop")
	assert.ErrorIs(t, d.EachEpisode(func(schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) error { return stop }), stop)

	// EachEpisodeRewards hands out the same episodes and rewards, without
	// the steps.
	i = 0
	require.NoError(t, d.EachEpisodeRewards(func(ep schemas.EpisodeRow, rewards []schemas.RewardRow) error {
		b := batches[i]
		i++
		assert.Equal(t, normEpisode(b.Episode), normEpisode(ep))
		assert.Equal(t, b.Rewards, rewards)
		return nil
	}))
	assert.Equal(t, len(batches), i)
	assert.ErrorIs(t, d.EachEpisodeRewards(func(schemas.EpisodeRow, []schemas.RewardRow) error { return stop }), stop)

	rep, err := Verify(dir)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
	assert.Empty(t, rep.Unlisted)
	assert.Equal(t, len(m.Shards), rep.Shards)
}

func TestConcurrentCommits(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < 400; i += 8 {
				assert.NoError(t, w.Commit(context.Background(), makeBatch(testRunID, i)))
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Close(StatusComplete))
	rep, err := Verify(dir)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
	assert.Equal(t, int64(400), rep.Rows[schemas.TableEpisodes])

	d, err := Open(dir)
	require.NoError(t, err)
	n := 0
	require.NoError(t, d.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, _ []schemas.RewardRow) error {
		n++
		assert.Len(t, steps, int(ep.Steps))
		return nil
	}))
	assert.Equal(t, 400, n)
}

// TestCrashAndResume drops a Writer mid-generation, as a crash would, and
// resumes the run.
func TestCrashAndResume(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{RollBytes: 1 << 30, RowGroupBytes: 2 << 10} // roll only when told
	w, err := Create(dir, testManifest(), cfg)
	require.NoError(t, err)
	closed := commitRange(t, w, 0, 40)
	require.NoError(t, w.Roll())
	closed = append(closed, commitRange(t, w, 40, 70)...)
	require.NoError(t, w.Roll())
	commitRange(t, w, 70, 100) // the open generation: lost in the crash
	w.abandon()

	// Readers see the closed generations only.
	d, err := Open(dir)
	require.NoError(t, err)
	assert.Equal(t, StatusRunning, d.Manifest().Status)
	assert.Equal(t, []int{0, 1}, d.Manifest().Generations())
	var ids []string
	for ep, err := range d.Episodes() {
		require.NoError(t, err)
		ids = append(ids, ep.EpisodeID)
	}
	assert.Equal(t, episodeIDs(closed), ids)
	rep, err := Verify(dir)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
	for _, table := range schemas.Tables {
		if table == schemas.TableBlobs && !hasBlobs(makeBatchesRange(70, 100)) {
			continue
		}
		assert.Contains(t, rep.Unlisted, table+"/"+tmpName(2), "the half-written generation's temporary file stays behind")
	}

	// A generation that crashed after its files were renamed but before the
	// manifest listed them is dropped too.
	orphan := filepath.Join(dir, schemas.TableSteps, shardName(7))
	require.NoError(t, os.WriteFile(orphan, []byte("not listed"), 0o644))

	w2, err := Resume(dir, cfg)
	require.NoError(t, err)
	removed := w2.Removed()
	assert.Contains(t, removed, "steps/"+tmpName(2))
	assert.Contains(t, removed, "episodes/"+tmpName(2))
	assert.Contains(t, removed, "steps/"+shardName(7))
	assert.NoFileExists(t, orphan)
	assert.Equal(t, StatusRunning, w2.Manifest().Status)

	committed := w2.Committed()
	assert.Len(t, committed, len(closed))
	for _, b := range closed {
		assert.True(t, committed[b.Episode.EpisodeID])
	}

	// The collector skips committed episodes and runs the rest.
	var rerun []EpisodeBatch
	for i := range 120 {
		b := makeBatch(testRunID, i)
		if committed[b.Episode.EpisodeID] {
			assert.ErrorIs(t, w2.Commit(context.Background(), b), ErrDuplicate)
			continue
		}
		require.NoError(t, w2.Commit(context.Background(), b))
		rerun = append(rerun, b)
	}
	require.NoError(t, w2.Close(StatusComplete))

	rep, err = Verify(dir)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
	assert.Empty(t, rep.Unlisted)
	d, err = Open(dir)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1, 2}, d.Manifest().Generations(), "numbering continues")
	assert.Equal(t, StatusComplete, d.Manifest().Status)
	all := append(slices.Clone(closed), rerun...)
	wantEps, wantSteps, _ := expected(all)
	gotEps := normEpisodes(collect(t, d.Episodes()))
	assert.Equal(t, wantEps, gotEps)
	assert.Equal(t, wantSteps, normSteps(collect(t, d.Steps())))
	seen := map[string]bool{}
	for _, ep := range gotEps {
		assert.False(t, seen[ep.EpisodeID], "duplicate %s", ep.EpisodeID)
		seen[ep.EpisodeID] = true
	}
	assert.Len(t, seen, 120)
}

func makeBatchesRange(from, to int) []EpisodeBatch {
	var out []EpisodeBatch
	for i := from; i < to; i++ {
		out = append(out, makeBatch(testRunID, i))
	}
	return out
}

func hasBlobs(bs []EpisodeBatch) bool {
	for _, b := range bs {
		if len(b.Blobs) > 0 {
			return true
		}
	}
	return false
}

// Project reads a few columns of a table, in the table's order.
func TestProjectReadsSomeColumns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	path := "tito"
	var want []string
	for i := range 3 {
		b := makeBatch(testRunID, i)
		for j := range b.Steps {
			if j%2 == 1 {
				b.Steps[j].TokenPath = &path
			}
			want = append(want, fmt.Sprintf("%s/%d/%v", b.Steps[j].EpisodeID, b.Steps[j].StepIndex, j%2 == 1))
		}
		require.NoError(t, w.Commit(context.Background(), b))
	}
	require.NoError(t, w.Close(StatusComplete))
	ds, err := Open(dir)
	require.NoError(t, err)
	type provenance struct {
		EpisodeID string  `parquet:"episode_id"`
		StepIndex int32   `parquet:"step_index"`
		TokenPath *string `parquet:"token_path,optional"`
	}
	var got []string
	for p, err := range Project[provenance](ds, schemas.TableSteps) {
		require.NoError(t, err)
		got = append(got, fmt.Sprintf("%s/%d/%v", p.EpisodeID, p.StepIndex, p.TokenPath != nil && *p.TokenPath == "tito"))
	}
	require.Equal(t, want, got)
}
