package inspect

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

func listIDs(l *EpisodeList) []string {
	var ids []string
	for _, e := range l.Episodes {
		ids = append(ids, e.EpisodeID)
	}
	return ids
}

func mustWhere(t *testing.T, s string) export.Where {
	w, err := export.ParseWhere(s)
	require.NoError(t, err)
	return w
}

// List selects what export's filters select, in the dataset's order, and
// pages it.
func TestList(t *testing.T) {
	dir := writeFixture(t)
	all := []string{"s-done-1", "s-done-0", "s-max", "s-lost", "g-done", "g-half"}
	for _, tc := range []struct {
		name string
		o    ListOptions
		want []string
		n    int64
	}{
		{"every episode", ListOptions{}, all, 6},
		{"a task", ListOptions{Filter: export.Filter{Tasks: []string{"gui"}}}, []string{"g-done", "g-half"}, 2},
		{"an exit reason", ListOptions{Filter: export.Filter{Where: []export.Where{mustWhere(t, "exit_reason!=done")}}}, []string{"s-max", "s-lost"}, 2},
		{"a reward: null and missing never pass", ListOptions{Filter: export.Filter{MinReward: ptr(0.5)}}, []string{"s-done-1", "g-done", "g-half"}, 3},
		{"a drift", ListOptions{Filter: export.Filter{Where: []export.Where{mustWhere(t, "token_drift=true")}}}, []string{"s-done-0"}, 1},
		{"all at once", ListOptions{Filter: export.Filter{Tasks: []string{"shell"}, MinReward: ptr(1.0), Where: []export.Where{mustWhere(t, "exit_reason=done")}}}, []string{"s-done-1"}, 1},
		{"a page", ListOptions{Offset: 2, Limit: 3}, []string{"s-max", "s-lost", "g-done"}, 6},
		{"past the end", ListOptions{Offset: 10}, nil, 6},
		{"count only", ListOptions{Limit: -1}, nil, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := List(t.Context(), dir, tc.o)
			require.NoError(t, err)
			assert.Equal(t, tc.want, listIDs(l))
			assert.Equal(t, tc.n, l.Matched)
		})
	}

	l, err := List(t.Context(), dir, ListOptions{Filter: export.Filter{Episodes: []string{"s-done-1"}}})
	require.NoError(t, err)
	require.Len(t, l.Episodes, 1)
	e := l.Episodes[0]
	assert.Equal(t, Entry{EpisodeID: "s-done-1", TaskID: "shell", ExitReason: "done", Steps: 2, Reward: ptr(1.0),
		ResetStrategy: "fork", ResetMS: 1, TokenRecord: true}, e, "the episode-level verify reward, not the step's shaped one")
	l, err = List(t.Context(), dir, ListOptions{Filter: export.Filter{Episodes: []string{"s-done-1"}, Reward: "shaped"}})
	require.NoError(t, err)
	assert.Nil(t, l.Episodes[0].Reward, "shaped is a step reward only")

	_, err = List(t.Context(), t.TempDir(), ListOptions{})
	assert.ErrorIs(t, err, ErrNotDataset)

	stop := errors.New("enough")
	n := 0
	err = EachEpisode(t.Context(), dir, export.Filter{}, func(Entry) error { n++; return stop })
	assert.ErrorIs(t, err, stop)
	assert.Equal(t, 1, n)
}

// EachEpisode's memory does not grow with the run: the heap held while
// listing 100,000 episodes (with their rewards) is no larger than while
// listing 10,000, but for 1 MiB of slack (the ids alone of 100,000
// episodes would take more).
func TestListMemoryDoesNotGrowWithEpisodes(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 110,000 episodes")
	}
	peak := func(n int) uint64 {
		var batches []shard.EpisodeBatch
		for i := range n {
			id := fmt.Sprintf("ep-%07d", i)
			v := float64(i%997) / 996
			batches = append(batches, shard.EpisodeBatch{
				Episode: schemas.EpisodeRow{EpisodeID: id, TaskID: fmt.Sprintf("task-%d", i%5), ExitReason: "done", Steps: 1, ResetStrategy: "fork"},
				Steps:   []schemas.StepRow{{EpisodeID: id, TaskID: "t", ActionKind: "done", ActionJSON: `{"kind":"done"}`, ExitCode: -1}},
				Rewards: []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: &v}},
			})
		}
		dir := writeDataset(t, shard.Manifest{RunID: fmt.Sprintf("list-%d", n)}, batches, shard.Config{RollBytes: 256 << 10})
		batches = nil
		base := heapInuse()
		var most uint64
		var matched int64
		err := EachEpisode(t.Context(), dir, export.Filter{MinReward: ptr(0.5)}, func(e Entry) error {
			if matched++; matched%500 == 0 {
				most = max(most, heapInuse())
			}
			return nil
		})
		require.NoError(t, err)
		require.Greater(t, matched, int64(n/3))
		t.Logf("%d episodes (%d selected): heap %.1f MiB at start, at most %.1f MiB while listing", n, matched, float64(base)/(1<<20), float64(most)/(1<<20))
		return most - min(most, base)
	}
	small := peak(10000)
	large := peak(100000)
	assert.Less(t, large, small+1<<20, "the heap EachEpisode holds does not grow with the episodes (10,000: +%d, 100,000: +%d bytes)", small, large)
}
