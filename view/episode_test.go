package view

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/schemas"
)

func ptr[T any](v T) *T { return &v }

// branchingDataset writes a run of branching trees in small rolls, so its
// episodes (and a tree's members) span several generations.
func branchingDataset(t *testing.T) (string, []string) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := shard.Create(dir, shard.Manifest{RunID: "run-view", ToolVersion: "test"}, shard.Config{RollBytes: 1 << 10})
	require.NoError(t, err)
	step := func(id string, i int) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, TaskID: "shell", StepIndex: int32(i), ActionKind: "exec",
			ActionJSON: fmt.Sprintf(`{"kind":"exec","cmd":"echo %s %d"}`, id, i), Output: fmt.Sprintf("%s %d\n", id, i),
			AXTree: fmt.Sprintf(`{"role":"text","name":%q}`, id)}
	}
	var ids []string
	commit := func(b shard.EpisodeBatch) {
		b.Episode.RunID = "run-view"
		require.NoError(t, w.Commit(t.Context(), b))
		ids = append(ids, b.Episode.EpisodeID)
	}
	for r := range 4 {
		root := fmt.Sprintf("root%d-aaaaaaaaaaaa", r)
		commit(shard.EpisodeBatch{
			Episode: schemas.EpisodeRow{EpisodeID: root, TaskID: "shell", ExitReason: "branched", Steps: 2, Provider: "local"},
			Steps:   []schemas.StepRow{step(root, 0), step(root, 1)},
		})
		for i := range 2 {
			id := fmt.Sprintf("kid%d%d-bbbbbbbbbbbb", r, i)
			commit(shard.EpisodeBatch{
				Episode: schemas.EpisodeRow{EpisodeID: id, TaskID: "shell", ExitReason: "done", Steps: 1, Provider: "local",
					ParentEpisodeID: ptr(root), BranchStep: ptr(int32(2)), BranchIndex: ptr(int32(i)), GroupID: ptr("g"),
					PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3, 4}, ResponseMask: []int32{1, 0}, TokenTurns: 1},
				Steps:   []schemas.StepRow{step(id, 2)},
				Rewards: []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: ptr(float64(i))}},
			})
		}
	}
	require.NoError(t, w.Close(shard.StatusComplete))
	return dir, ids
}

// An episode's page of a run of several generations, read from the
// episode's generation only, shows what inspect's transcript of the
// episode shows (steps, rewards, the branching tree across generations),
// with its own accessibility trees and token record; the run's summary,
// read in the background, is inspect's.
func TestEpisodePageOfManyGenerations(t *testing.T) {
	dir, ids := branchingDataset(t)
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	require.Greater(t, len(ds.Manifest().Generations()), 2, "the run spans several generations")

	s, err := New(t.Context(), Config{Dirs: []string{dir}})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	defer srv.Close()
	get := func(path string, v any) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		if v != nil {
			json.NewDecoder(resp.Body).Decode(v)
		}
		return resp.StatusCode
	}
	// Pages asked while the summary is read, side by side.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { get("/api/runs", nil); get("/api/runs/0", nil) })
	}
	var run struct {
		Summarising bool             `json:"summarising"`
		Summary     *inspect.Summary `json:"summary"`
	}
	for deadline := time.Now().Add(time.Minute); ; {
		run.Summarising, run.Summary = false, nil
		require.Equal(t, http.StatusOK, get("/api/runs/0", &run))
		if !run.Summarising || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	require.False(t, run.Summarising)
	want, err := inspect.Summarize(t.Context(), dir, inspect.Options{})
	require.NoError(t, err)
	require.NotNil(t, run.Summary)
	assert.Equal(t, want.Episodes, run.Summary.Episodes)
	assert.Equal(t, want.Steps, run.Summary.Steps)
	assert.Equal(t, want.ByExit, run.Summary.ByExit)

	for _, id := range ids {
		ts, err := inspect.Transcripts(t.Context(), dir, []string{id}, inspect.TranscriptOptions{})
		require.NoError(t, err)
		wantJSON, err := json.Marshal(ts[0])
		require.NoError(t, err)
		var page, wantFields map[string]any
		require.Equal(t, http.StatusOK, get("/api/runs/0/episodes/"+id, &page), id)
		require.NoError(t, json.Unmarshal(wantJSON, &wantFields))
		for k, v := range wantFields {
			assert.Equal(t, v, page[k], "%s: %s", id, k)
		}
		require.NotNil(t, page["tree"], "%s is in a tree", id)
		assert.Contains(t, fmt.Sprint(page["step_a11y_trees"]), id, "%s: its own accessibility trees", id)
		if page["parent_episode_id"] != nil {
			assert.NotNil(t, page["tokens"], "%s: its token record", id)
		}
	}
	assert.Equal(t, http.StatusNotFound, get("/api/runs/0/episodes/root0", nil), "an id is exact")
}
