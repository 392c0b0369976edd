package collect

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// deepTask has seven steps, so a tree checkpointed every 2 steps to depth 2
// has roots of steps 0-1, branches of steps 2-3 and leaves of steps 4-6;
// every step but the last builds on the files of the steps before it, so a
// leaf that did not get its ancestors' files fails its output and its
// verifier.
const deepTask = `id: deep
instruction: build a file in six steps
solution:
  - {kind: exec, cmd: echo 1 > f}
  - {kind: exec, cmd: echo 2 >> f}
  - {kind: exec, cmd: echo 3 >> f}
  - {kind: exec, cmd: echo 4 >> f}
  - {kind: exec, cmd: cat f}
  - {kind: exec, cmd: echo 5 >> f}
  - {kind: done}
verify:
  cmd: test "$(cat f)" = "$(printf '1\n2\n3\n4\n5')"
  reward: exit
`

// checkTree checks a tree dataset against the plan at every depth: each
// branched episode has exactly plan.Width branches, with the derived ids,
// starting where it ends, sharing one group; no branch is deeper than the
// plan; every tree holds at most plan.Max episodes; EachTrajectory
// rebuilds every leaf as its ancestors' steps, root first, then its own;
// Verify passes. It returns the episodes by depth.
func checkTree(t *testing.T, out string, plan BranchPlan) map[int][]string {
	t.Helper()
	eps, steps, _ := readAll(t, out)
	depthOf := func(id string) (int, string) {
		d := 0
		for eps[id].ParentEpisodeID != nil {
			id = *eps[id].ParentEpisodeID
			d++
		}
		return d, id
	}
	byDepth := map[int][]string{}
	perTree := map[string]int{}
	for id, e := range eps {
		d, root := depthOf(id)
		byDepth[d] = append(byDepth[d], id)
		perTree[root]++
		require.LessOrEqual(t, d, plan.Depth, "no branch deeper than the plan")
		if e.ExitReason == string(runtime.ExitBranched) {
			at := (d + 1) * plan.At
			require.Len(t, steps[id], plan.At, "a parent at depth %d holds only its own steps up to its checkpoint", d)
			require.Equal(t, d*plan.At, int(steps[id][0].StepIndex))
			for i := range plan.Width {
				b, ok := eps[episode.BranchID(id, at, i)]
				require.True(t, ok, "branch %d of %s (depth %d) is kept", i, id, d)
				require.Equal(t, id, *b.ParentEpisodeID)
				require.EqualValues(t, at, *b.BranchStep)
				require.EqualValues(t, i, *b.BranchIndex)
				require.Equal(t, episode.BranchGroupID(id, at), *b.GroupID)
			}
		}
		if e.ParentEpisodeID != nil {
			p := eps[*e.ParentEpisodeID]
			require.Equal(t, string(runtime.ExitBranched), p.ExitReason, "only a branched episode has branches")
		}
	}
	for root, n := range perTree {
		require.LessOrEqual(t, n, plan.Max, "tree %s within the bound", root)
	}
	ds, err := shard.Open(out)
	require.NoError(t, err)
	leaves := 0
	require.NoError(t, ds.EachTrajectory(func(ep schemas.EpisodeRow, full []schemas.StepRow, _ []schemas.RewardRow) error {
		leaves++
		var chain []string
		for at := ep.EpisodeID; at != ""; {
			chain = append(chain, at)
			if p := eps[at].ParentEpisodeID; p != nil {
				at = *p
			} else {
				at = ""
			}
		}
		var want []schemas.StepRow
		for i := len(chain) - 1; i >= 0; i-- {
			want = append(want, slices.Clone(steps[chain[i]])...)
		}
		for i := range want {
			want[i].EpisodeID = ep.EpisodeID
		}
		require.Equal(t, want, full, "leaf %s is its ancestors' steps, root first, then its own", ep.EpisodeID)
		return nil
	}))
	branched := 0
	for _, e := range eps {
		if e.ExitReason == string(runtime.ExitBranched) {
			branched++
		}
	}
	require.Equal(t, len(eps)-branched, leaves)
	tree, err := ds.Tree()
	require.NoError(t, err)
	require.Len(t, tree, len(eps))
	vr, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, vr.OK(), "verify: %v", vr.Problems)
	return byDepth
}

func writeTask(t *testing.T, text string) string {
	t.Helper()
	spec := filepath.Join(t.TempDir(), "task.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(text), 0o644))
	return spec
}

func TestBranchTreeOfDepthTwo(t *testing.T) {
	cfg := baseConfig(t, writeTask(t, deepTask))
	plan, err := ParseBranchPlan("every=2,width=2,depth=2,max=7")
	require.NoError(t, err)
	cfg.Branch = plan
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	byDepth := checkTree(t, cfg.Out, plan)
	require.Len(t, byDepth[0], cfg.Repeats)
	require.Len(t, byDepth[1], cfg.Repeats*2)
	require.Len(t, byDepth[2], cfg.Repeats*4)
	rep := sum.Report()
	require.Equal(t, cfg.Repeats*7, rep.Planned)
	require.Equal(t, cfg.Repeats*7, rep.Episodes)
	require.Equal(t, map[string]int{"branched": cfg.Repeats * 3, "done": cfg.Repeats * 4}, rep.ByExit)
	eps, steps, rewards := readAll(t, cfg.Out)
	for _, id := range byDepth[2] {
		require.Equal(t, "1\n2\n3\n4\n", steps[id][0].Output, "a leaf's first step sees its root's and its parent's files")
		require.Equal(t, string(runtime.ExitDone), eps[id].ExitReason)
		require.Equal(t, 1.0, *rewards[id].Value)
	}
}

// At the bound the budget goes to the lower branch indexes first: with
// max=5 and width 2 the root's branch 0 branches again (1+2+2 = 5) and
// branch 1 runs to its end as a leaf.
func TestBranchTreeStopsAtTheBound(t *testing.T) {
	cfg := baseConfig(t, writeTask(t, deepTask))
	plan, err := ParseBranchPlan("every=2,width=2,depth=2,max=5")
	require.NoError(t, err)
	cfg.Branch = plan
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	byDepth := checkTree(t, cfg.Out, plan)
	rep := sum.Report()
	require.Equal(t, cfg.Repeats*5, rep.Planned, "the planned count reaches the bound and does not pass it")
	require.Equal(t, cfg.Repeats*5, rep.Episodes)
	eps, _, rewards := readAll(t, cfg.Out)
	require.Len(t, byDepth[2], cfg.Repeats*2)
	for _, root := range byDepth[0] {
		b0, b1 := eps[episode.BranchID(root, 2, 0)], eps[episode.BranchID(root, 2, 1)]
		require.Equal(t, string(runtime.ExitBranched), b0.ExitReason, "branch 0 had the budget to branch")
		require.Equal(t, string(runtime.ExitDone), b1.ExitReason, "branch 1 ran to its end as a leaf")
		require.EqualValues(t, 5, b1.Steps)
		require.Equal(t, 1.0, *rewards[b1.EpisodeID].Value)
	}
}

func TestBranchTreeBudgets(t *testing.T) {
	for _, c := range []struct {
		plan          string
		depth, budget int
		want          []int
	}{
		{"every=2,width=2,depth=2,max=7", 0, 7, []int{3, 3}},
		{"every=2,width=2,depth=2,max=5", 0, 5, []int{3, 1}},
		{"every=2,width=2,depth=2,max=4", 0, 4, []int{2, 1}},
		{"every=2,width=3,depth=3,max=100", 0, 100, []int{13, 13, 13}},
		{"every=2,width=3,depth=3,max=20", 0, 20, []int{13, 5, 1}},
		{"every=2,width=3,depth=3,max=20", 1, 13, []int{4, 4, 4}},
		{"at=2,width=3", 0, 0, []int{0, 0, 0}},
	} {
		p, err := ParseBranchPlan(c.plan)
		require.NoError(t, err)
		require.Equal(t, c.want, p.budgets(c.depth, c.budget), "%s at depth %d with %d", c.plan, c.depth, c.budget)
	}
}

func TestBranchTreeCancelThenResumeMakesExactlyThePlannedTree(t *testing.T) {
	dir := t.TempDir()
	// Step 4 runs only in the tree's leaves: its mark says a leaf is in
	// flight, so the stop leaves a kept depth-1 branch point whose leaves
	// are not all kept, and its remake re-executes its root's steps and
	// then its own.
	started := filepath.Join(dir, "started")
	slow := strings.Join([]string{"id: slow", "instruction: build a file slowly", "solution:",
		"  - {kind: exec, cmd: 'echo 1 > f; sleep 0.1'}", "  - {kind: exec, cmd: 'echo 2 >> f; sleep 0.1'}",
		"  - {kind: exec, cmd: 'echo 3 >> f; sleep 0.1'}", "  - {kind: exec, cmd: 'echo 4 >> f; sleep 0.1'}",
		"  - {kind: exec, cmd: 'touch " + started + "; cat f; sleep 0.3'}", "  - {kind: exec, cmd: sleep 0.1}", "  - {kind: done}",
		"verify:", `  cmd: test "$(cat f)" = "$(printf '1\n2\n3\n4')"`, "  reward: exit", ""}, "\n")
	cfg := baseConfig(t, writeTask(t, slow))
	// One replica: the feed is first in, first out, so the stop comes in
	// the first root's first leaf, with the second root not begun.
	cfg.Replicas, cfg.Repeats = 1, 2
	plan, err := ParseBranchPlan("every=2,width=2,depth=2,max=7")
	require.NoError(t, err)
	cfg.Branch = plan

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := os.Stat(started); err == nil {
				time.Sleep(50 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err = Run(ctx, cfg)
	require.ErrorIs(t, err, context.Canceled)
	eps, _, _ := readAll(t, cfg.Out)
	deepMissing := 0
	for id, e := range eps {
		if e.ExitReason == string(runtime.ExitBranched) && e.ParentEpisodeID != nil {
			for i := range plan.Width {
				if b, ok := eps[episode.BranchID(id, 4, i)]; !ok || b.ExitReason == string(runtime.ExitCancelled) {
					deepMissing++
				}
			}
		}
	}
	require.Positive(t, deepMissing, "the stop came with leaves of a kept depth-1 branch point still to run")
	require.Less(t, len(eps), cfg.Repeats*7)

	cfg.Resume = true
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	byDepth := checkTree(t, cfg.Out, plan)
	require.Len(t, byDepth[0], 2)
	require.Len(t, byDepth[1], 4)
	require.Len(t, byDepth[2], 8, "exactly the planned tree, none twice")
	rep := sum.Report()
	require.Equal(t, cfg.Repeats*7, rep.Episodes)
	require.Equal(t, rep.Planned, rep.Episodes)
	require.Equal(t, "complete", rep.Status)
	eps, steps, rewards := readAll(t, cfg.Out)
	for _, id := range byDepth[2] {
		require.Equal(t, string(runtime.ExitDone), eps[id].ExitReason)
		require.Equal(t, "1\n2\n3\n4\n", steps[id][0].Output, "a remade branch point has its ancestors' files")
		require.Equal(t, 1.0, *rewards[id].Value)
	}

	sum, err = Run(context.Background(), cfg)
	require.NoError(t, err)
	require.True(t, sum.NothingToDo)
}
