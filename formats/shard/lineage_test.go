package shard

import (
	"context"
	"fmt"
	"testing"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/require"
)

// treeBatch is an episode of a tree: its own steps from first to
// first+n-1, each with an output naming the episode and step, so a joined
// trajectory shows where each step came from.
func treeBatch(id, parent string, first, n, index int, exit string) EpisodeBatch {
	b := EpisodeBatch{Episode: schemas.EpisodeRow{EpisodeID: id, RunID: testRunID, TaskID: "t", ExitReason: exit, Steps: int32(n)}}
	if parent != "" {
		b.Episode.ParentEpisodeID, b.Episode.BranchStep, b.Episode.BranchIndex = ptr(parent), ptr(int32(first)), ptr(int32(index))
		b.Episode.GroupID = ptr("g-" + parent)
	}
	for s := first; s < first+n; s++ {
		b.Steps = append(b.Steps, schemas.StepRow{EpisodeID: id, StepIndex: int32(s), TaskID: "t", ActionKind: "exec",
			ActionJSON: `{"kind":"exec","cmd":"true"}`, Output: fmt.Sprintf("%s/%d", id, s)})
	}
	if exit != "branched" {
		b.Rewards = []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: ptr(1.0)}}
	}
	return b
}

func outputs(steps []schemas.StepRow) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Output)
	}
	return out
}

// A tree of depth 2 — root r branched at 2, its branch a branched again at
// 3, b a leaf — and a plain root: the trajectories are the leaves and the
// plain root, each with its ancestors' steps joined before its own, read
// whether the dataset holds a prefix before or after its branches.
func TestEachTrajectoryJoinsPrefixes(t *testing.T) {
	batches := []EpisodeBatch{
		treeBatch("r", "", 0, 2, 0, "branched"),
		treeBatch("a", "r", 2, 1, 0, "branched"),
		treeBatch("b", "r", 2, 2, 1, "done"),
		treeBatch("a0", "a", 3, 1, 0, "done"),
		treeBatch("a1", "a", 3, 0, 1, "no_action"),
		treeBatch("plain", "", 0, 1, 0, "done"),
	}
	want := map[string][]string{
		"b":     {"r/0", "r/1", "b/2", "b/3"},
		"a0":    {"r/0", "r/1", "a/2", "a0/3"},
		"a1":    {"r/0", "r/1", "a/2"},
		"plain": {"plain/0"},
	}
	for name, order := range map[string][]int{
		"parents first":                        {0, 1, 2, 3, 4, 5},
		"branches before their prefix":         {3, 2, 4, 5, 1, 0},
		"one generation per episode, reversed": {5, 4, 3, 2, 1, 0},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := Create(dir, testManifest(), smallConfig())
			require.NoError(t, err)
			for _, i := range order {
				require.NoError(t, w.Commit(context.Background(), batches[i]))
				if name == "one generation per episode, reversed" {
					require.NoError(t, w.Roll())
				}
			}
			require.NoError(t, w.Close(StatusComplete))
			ds, err := Open(dir)
			require.NoError(t, err)
			got := map[string][]string{}
			err = ds.EachTrajectory(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
				require.NotContains(t, got, ep.EpisodeID, "each trajectory once")
				got[ep.EpisodeID] = outputs(steps)
				for _, s := range steps {
					require.Equal(t, ep.EpisodeID, s.EpisodeID, "the joined rows are the trajectory's")
				}
				for _, r := range rewards {
					require.Equal(t, ep.EpisodeID, r.EpisodeID, "only its own rewards")
				}
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, want, got)

			tree, err := ds.Tree()
			require.NoError(t, err)
			require.Equal(t, Lineage{EpisodeID: "a", Parent: "r", FirstStep: 2, Steps: 1, Children: 2, Branched: true}, tree["a"])
			require.Len(t, tree, 6, "Tree holds every episode")
			f, err := ds.Forest()
			require.NoError(t, err)
			require.Equal(t, Forest{Episodes: 6, Trajectories: 4, Roots: map[string]string{"a": "r", "b": "r", "a0": "r", "a1": "r"}}, f)
			l, err := ds.readLineage()
			require.NoError(t, err)
			require.NotContains(t, l.nodes, "plain", "a root nobody branched from is counted, not held")
			require.Len(t, l.nodes, 5)
			rep, err := Verify(dir)
			require.NoError(t, err)
			require.True(t, rep.OK(), "%v", rep.Problems)
		})
	}
}

// A parent that went on after its checkpoint (a served session branched
// over the wire) is a trajectory of its own, and its branches take only its
// steps before their branch step — at any depth, in any order.
func TestEachTrajectoryJoinsAContinuedParentsFirstSteps(t *testing.T) {
	batches := []EpisodeBatch{
		treeBatch("p", "", 0, 4, 0, "done"),
		treeBatch("b0", "p", 2, 2, 0, "done"),
		treeBatch("b1", "p", 2, 1, 1, "cancelled"),
		treeBatch("c", "b0", 3, 1, 0, "done"),
		treeBatch("late", "p", 4, 1, 0, "done"),
	}
	want := map[string][]string{
		"p":    {"p/0", "p/1", "p/2", "p/3"},
		"b0":   {"p/0", "p/1", "b0/2", "b0/3"},
		"b1":   {"p/0", "p/1", "b1/2"},
		"c":    {"p/0", "p/1", "b0/2", "c/3"},
		"late": {"p/0", "p/1", "p/2", "p/3", "late/4"},
	}
	for name, order := range map[string][]int{"parents first": {0, 1, 2, 3, 4}, "branches first": {3, 4, 2, 1, 0}} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := Create(dir, testManifest(), smallConfig())
			require.NoError(t, err)
			for _, i := range order {
				require.NoError(t, w.Commit(context.Background(), batches[i]))
				require.NoError(t, w.Roll())
			}
			require.NoError(t, w.Close(StatusComplete))
			ds, err := Open(dir)
			require.NoError(t, err)
			got := map[string][]string{}
			require.NoError(t, ds.EachTrajectory(func(ep schemas.EpisodeRow, steps []schemas.StepRow, _ []schemas.RewardRow) error {
				got[ep.EpisodeID] = outputs(steps)
				for i := range steps {
					steps[i].Output = "changed by the reader"
				}
				return nil
			}))
			require.Equal(t, want, got)
			// The parent that went on is held once a branch names it, read
			// before or after it.
			f, err := ds.Forest()
			require.NoError(t, err)
			require.Equal(t, Forest{Episodes: 5, Trajectories: 5, Roots: map[string]string{"b0": "p", "b1": "p", "c": "p", "late": "p"}}, f)
			rep, err := Verify(dir)
			require.NoError(t, err)
			require.True(t, rep.OK(), "%v", rep.Problems)
		})
	}
}

// A broken tree is refused, by EachTrajectory and by Verify, naming the
// episode: a missing parent, a branch that does not start where its parent
// ends.
func TestEachTrajectoryRefusesBrokenTrees(t *testing.T) {
	for name, c := range map[string]struct {
		batches []EpisodeBatch
		want    string
	}{
		"missing parent":          {[]EpisodeBatch{treeBatch("a", "gone", 2, 1, 0, "done")}, `episode "a" branches from "gone", which the dataset does not hold`},
		"past a continued parent": {[]EpisodeBatch{treeBatch("r", "", 0, 2, 0, "done"), treeBatch("a", "r", 3, 1, 0, "done")}, `episode "a" branches at step 3, but its parent "r" holds steps 0..1`},
		"gap":                     {[]EpisodeBatch{treeBatch("r", "", 0, 2, 0, "branched"), treeBatch("a", "r", 3, 1, 0, "done")}, `episode "a" branches at step 3, but its parent "r" ends after step 2`},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := Create(dir, testManifest(), smallConfig())
			require.NoError(t, err)
			for _, b := range c.batches {
				require.NoError(t, w.Commit(context.Background(), b))
			}
			require.NoError(t, w.Close(StatusComplete))
			ds, err := Open(dir)
			require.NoError(t, err)
			err = ds.EachTrajectory(func(schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) error { return nil })
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, c.want)
			rep, err := Verify(dir)
			require.NoError(t, err)
			require.Contains(t, fmt.Sprint(rep.Problems), c.want)
		})
	}
}

// A batch's lineage columns must hold together, and a branch's step
// indexes start at its branch step.
func TestBatchLineageValidation(t *testing.T) {
	ok := treeBatch("a", "r", 2, 2, 0, "done")
	require.NoError(t, ok.Validate(testRunID))
	bad := treeBatch("a", "r", 2, 2, 0, "done")
	bad.Steps[0].StepIndex = 0
	require.ErrorContains(t, bad.Validate(testRunID), "step_index 0 (want 2")
	bad = treeBatch("a", "r", 2, 1, 0, "done")
	bad.Episode.BranchIndex = nil
	require.ErrorContains(t, bad.Validate(testRunID), "without branch_step and branch_index")
	bad = treeBatch("a", "", 0, 1, 0, "done")
	bad.Episode.BranchStep = ptr(int32(1))
	require.ErrorContains(t, bad.Validate(testRunID), "without parent_episode_id")
	bad = treeBatch("a", "a", 1, 1, 0, "done")
	require.ErrorContains(t, bad.Validate(testRunID), "the episode itself")
}
