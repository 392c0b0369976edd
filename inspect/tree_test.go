package inspect

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// A branch episode's transcript names its parent and the prefix it does
// not hold, and shows the tree of its root with the reward of each branch;
// the root's transcript shows the same tree.
func TestTranscriptOfABranchShowsItsTree(t *testing.T) {
	exec := func(id string, i int) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, TaskID: "shell", StepIndex: int32(i), ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"ls"}`}
	}
	batches := []shard.EpisodeBatch{{
		Episode: schemas.EpisodeRow{EpisodeID: "root-aaaaaaaaaaaa", TaskID: "shell", ExitReason: "branched", Steps: 2},
		Steps:   []schemas.StepRow{exec("root-aaaaaaaaaaaa", 0), exec("root-aaaaaaaaaaaa", 1)},
	}}
	for i, v := range []float64{1, 0} {
		id := fmt.Sprintf("kid%d-bbbbbbbbbbb", i)
		batches = append(batches, shard.EpisodeBatch{
			Episode: schemas.EpisodeRow{EpisodeID: id, TaskID: "shell", ExitReason: "done", Steps: 1,
				ParentEpisodeID: ptr("root-aaaaaaaaaaaa"), BranchStep: ptr(int32(2)), BranchIndex: ptr(int32(i)), GroupID: ptr("g")},
			Steps:   []schemas.StepRow{exec(id, 2)},
			Rewards: []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: ptr(v)}},
		})
	}
	dir := writeDataset(t, fixtureManifest(t, "run-tree", "hash"), batches, shard.Config{})
	ts, err := Transcripts(context.Background(), dir, []string{"kid1", "root"}, TranscriptOptions{})
	require.NoError(t, err)
	kid, root := ts[0], ts[1]
	require.Equal(t, "root-aaaaaaaaaaaa", kid.Parent)
	require.Equal(t, 2, kid.BranchStep)
	require.NotNil(t, kid.Tree)
	require.Equal(t, kid.Tree, root.Tree, "one tree, from its root")
	require.Equal(t, "root-aaaaaaaaaaaa", kid.Tree.EpisodeID)
	require.Len(t, kid.Tree.Branches, 2)
	for i, b := range kid.Tree.Branches {
		require.Equal(t, i, b.BranchIndex)
		require.Equal(t, map[string]float64{"verify": float64(1 - i)}, b.Rewards)
	}
	require.Equal(t, 1, kid.Tree.Branches[1].BranchIndex, "the tree holds this episode (its text marks it: internal/ui)")
	require.Equal(t, "kid1-bbbbbbbbbbb", kid.Tree.Branches[1].EpisodeID)

	// An episode outside any tree has none.
	plain, err := Transcripts(context.Background(), writeFixture(t), []string{"s-done-1"}, TranscriptOptions{})
	require.NoError(t, err)
	require.Nil(t, plain[0].Tree)
}

// TranscriptIn, told an episode's generation, gives what Transcripts
// gives (the steps, rewards and the branching tree) for every episode of a
// dataset of several generations whose trees span generations, and no
// episode in any other generation.
func TestTranscriptInAgreesWithTranscripts(t *testing.T) {
	exec := func(id string, i int) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, TaskID: "shell", StepIndex: int32(i), ActionKind: "exec",
			ActionJSON: fmt.Sprintf(`{"kind":"exec","cmd":"echo %s %d"}`, id, i), Output: fmt.Sprintf("%s step %d\n", id, i)}
	}
	batches := fixtureEpisodes()
	for r := range 3 {
		root := fmt.Sprintf("root%d-aaaaaaaaaaa", r)
		batches = append(batches, shard.EpisodeBatch{
			Episode: schemas.EpisodeRow{EpisodeID: root, TaskID: "shell", ExitReason: "branched", Steps: 2},
			Steps:   []schemas.StepRow{exec(root, 0), exec(root, 1)},
		})
		for i, v := range []float64{1, 0} {
			id := fmt.Sprintf("kid%d%d-bbbbbbbbbb", r, i)
			batches = append(batches, shard.EpisodeBatch{
				Episode: schemas.EpisodeRow{EpisodeID: id, TaskID: "shell", ExitReason: "done", Steps: 1,
					ParentEpisodeID: ptr(root), BranchStep: ptr(int32(2)), BranchIndex: ptr(int32(i)), GroupID: ptr("g")},
				Steps:   []schemas.StepRow{exec(id, 2)},
				Rewards: []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: ptr(v)}},
			})
		}
	}
	dir := writeDataset(t, fixtureManifest(t, "run-gens", "hash"), batches, shard.Config{RollBytes: 1 << 10})
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	gens := ds.Manifest().Generations()
	require.Greater(t, len(gens), 2, "the dataset spans several generations")
	trees := 0
	for _, b := range batches {
		id := b.Episode.EpisodeID
		want, err := Transcripts(t.Context(), dir, []string{id}, TranscriptOptions{})
		require.NoError(t, err)
		found := 0
		for _, gen := range gens {
			got, err := TranscriptIn(t.Context(), ds, id, gen, TranscriptOptions{})
			if errors.Is(err, ErrNoMatch) {
				continue
			}
			require.NoError(t, err, "%s in generation %d", id, gen)
			require.Equal(t, want[0], got, id)
			found++
		}
		require.Equal(t, 1, found, "%s is in one generation", id)
		if want[0].Tree != nil {
			trees++
		}
	}
	require.Equal(t, 9, trees, "every episode of the three trees shows its tree")
}
