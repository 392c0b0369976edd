package replay

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/schemas"
)

// TestRecordSummaryCountsTheReplay: the recording's manifest summary and
// status come from the replay's counts. They were written before the
// episodes were counted, so every recording said 0 identical, 0 diverged,
// 0 errored, and complete even when episodes had failed.
func TestRecordSummaryCountsTheReplay(t *testing.T) {
	run := collectRun(t, "../examples/tasks/fix-sum.yaml")
	out := filepath.Join(t.TempDir(), "rec")
	rep, err := Run(context.Background(), Config{In: run, Record: out, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Identical)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	var sum struct{ Identical, Diverged, Errored int }
	require.NoError(t, json.Unmarshal(ds.Manifest().Summary, &sum))
	require.Equal(t, 2, sum.Identical)
	require.Zero(t, sum.Diverged+sum.Errored)
}

// TestRecordDescribesTheReplay: a recorded episode is the same episode
// (id, task, repeat, seed) run again; how this run went — the provider's
// fork method, the golden, the replica — is the replay's, not copied from
// the source's row.
func TestRecordDescribesTheReplay(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	_, err := collect.Run(context.Background(), collect.Config{Tasks: "../examples/tasks/fix-sum.yaml", Out: out,
		Replicas: 2, Repeats: 2, WorkDir: t.TempDir()})
	require.NoError(t, err)
	rec := filepath.Join(t.TempDir(), "rec")
	_, err = Run(context.Background(), Config{In: out, Record: rec, WorkDir: t.TempDir(), Replicas: 1,
		ProviderParams: map[string]string{"fork": "copy"}})
	require.NoError(t, err)
	src, err := shard.Open(out)
	require.NoError(t, err)
	was := map[string]schemas.EpisodeRow{}
	for e, err := range src.Episodes() {
		require.NoError(t, err)
		was[e.EpisodeID] = e
	}
	dst, err := shard.Open(rec)
	require.NoError(t, err)
	n := 0
	for e, err := range dst.Episodes() {
		require.NoError(t, err)
		n++
		w := was[e.EpisodeID]
		require.Equal(t, [4]any{w.TaskID, w.TaskHash, w.Repeat, w.Seed}, [4]any{e.TaskID, e.TaskHash, e.Repeat, e.Seed}, "the same episode")
		require.Equal(t, "copy", e.ResetOrigin, "the replay's fork method")
		require.NotEqual(t, w.GoldenID, e.GoldenID, "the replay's own golden")
		require.Zero(t, e.Replica, "one replica replayed every episode")
		require.Equal(t, dst.Manifest().RunID, e.RunID)
	}
	require.Equal(t, 2, n)
}

// TestRecordKeepsScreenshotsUnderTheRecordedPolicy: a recording states the
// source's capture policy in its manifest and captures under it. It used to
// capture under the comparison's policy (pixels none): a recording of a
// pixels hash run said pixels hash and kept no screenshot.
func TestRecordKeepsScreenshotsUnderTheRecordedPolicy(t *testing.T) {
	testenv.NeedChromium(t)
	out := filepath.Join(t.TempDir(), "run")
	_, err := collect.Run(context.Background(), collect.Config{Tasks: "../examples/tasks/web/web-form.yaml", Out: out,
		Replicas: 1, Repeats: 1, WorkDir: t.TempDir(), Capture: capture.DefaultPolicy()})
	require.NoError(t, err)
	rec := filepath.Join(t.TempDir(), "rec")
	rep, err := Run(context.Background(), Config{In: out, Record: rec, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Identical, "%+v", rep.Episodes)
	ds, err := shard.Open(rec)
	require.NoError(t, err)
	pol, err := capture.DecodeManifest(ds.Manifest().Capture)
	require.NoError(t, err)
	require.Equal(t, capture.PixelsHash, pol.Pixels)
	shots := 0
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		if s.ScreenHash == "" {
			continue
		}
		shots++
		png, err := ds.Blob(s.ScreenHash)
		require.NoError(t, err, "step %d's screenshot is in blobs/, as pixels hash says", s.StepIndex)
		require.NotEmpty(t, png)
		require.NotEmpty(t, s.AXTree, "a11y full keeps the tree")
	}
	require.Positive(t, shots)
}

// slowSource delivers a dataset's episodes and then, like a reader still
// busy with the rest of a large dataset, takes a while to return once the
// replay is cancelled.
type slowSource struct {
	ds     *shard.Dataset
	cancel context.CancelFunc
	done   atomic.Bool
}

func (s *slowSource) EachEpisode(fn func(schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) error) error {
	err := s.ds.EachEpisode(fn)
	s.cancel()
	time.Sleep(500 * time.Millisecond)
	s.done.Store(true)
	return err
}

// TestCancelledReplayWaitsForItsFeeder: a replay cancelled while its feeder
// is still reading returns only once the feeder has ended. It used to
// return at once, leaving the feeder running and reading its error while
// the feeder could still write it (a data race, under -race, and a leaked
// goroutine).
func TestCancelledReplayWaitsForItsFeeder(t *testing.T) {
	run := collectRun(t, "../examples/tasks/fix-sum.yaml")
	cfg := Config{In: run, WorkDir: t.TempDir(), Replicas: 1}
	require.NoError(t, cfg.withDefaults())
	ds, specs, err := openRecorded(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rp, err := newReplayer(ctx, cfg, ds, specs)
	require.NoError(t, err)
	defer rp.close(context.Background())
	src := &slowSource{ds: ds, cancel: cancel}
	_, err = rp.replayAll(ctx, src)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, src.done.Load(), "the replay returned while its feeder was still reading the dataset")
}

// TestCancelledReplayStopsReading: once cancelled, the feeder stops at the
// next stored episode, selected or not, instead of reading the rest.
func TestCancelledReplayStopsReading(t *testing.T) {
	run := collectRun(t, "../examples/tasks/fix-sum.yaml")
	ds, err := shard.Open(run)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rp := &replayer{cfg: Config{EpisodeIDs: []string{"no-such-episode"}}}
	read := 0
	err = rp.feed(ctx, countingSource{ds, &read}, make(chan pool.Job))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, read, "the feeder read on after the cancellation")
}

type countingSource struct {
	ds   *shard.Dataset
	read *int
}

func (c countingSource) EachEpisode(fn func(schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) error) error {
	return c.ds.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
		*c.read++
		return fn(ep, steps, rewards)
	})
}
