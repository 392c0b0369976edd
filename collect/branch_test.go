package collect

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// stateTask builds its state in files step by step, so a branch that did
// not get its parent's files at the branch point fails both its third
// step's output and its verifier.
const stateTask = `id: state
instruction: build a file in three steps
solution:
  - {kind: exec, cmd: echo one > f}
  - {kind: exec, cmd: echo two >> f}
  - {kind: exec, cmd: cat f}
  - {kind: exec, cmd: echo three >> f}
  - {kind: done}
verify:
  cmd: test "$(cat f)" = "$(printf 'one\ntwo\nthree')"
  reward: exit
`

// checkBranchTree checks a branching dataset against the plan: every root
// that ran past plan.At branched there into exactly plan.Width branches with
// the derived ids, lineage and group; the prefix is stored once, in the
// parent; each branch's rows hold only its own steps; and EachTrajectory
// rebuilds every branch as the parent's prefix and then its own steps. It
// returns the roots that branched.
func checkBranchTree(t *testing.T, out string, plan BranchPlan, roots []string) []string {
	t.Helper()
	eps, steps, rewards := readAll(t, out)
	var branched []string
	want := map[string]bool{}
	for _, root := range roots {
		r, ok := eps[root]
		require.True(t, ok, "root %s is kept", root)
		want[root] = true
		require.Nil(t, r.ParentEpisodeID)
		require.NotNil(t, r.GroupID)
		require.Equal(t, episode.RootGroupID(r.TaskID, r.TaskHash), *r.GroupID)
		if r.ExitReason != string(runtime.ExitBranched) {
			continue
		}
		branched = append(branched, root)
		require.EqualValues(t, plan.At, r.Steps, "the parent stops at the branch step")
		require.Len(t, steps[root], plan.At, "the prefix is stored once, in the parent")
		_, verified := rewards[root]
		require.False(t, verified, "a branch point is not a trajectory: not verified")
		for i := range plan.Width {
			id := episode.BranchID(root, plan.At, i)
			want[id] = true
			b, ok := eps[id]
			require.True(t, ok, "branch %d of %s is kept", i, root)
			require.Equal(t, root, *b.ParentEpisodeID)
			require.EqualValues(t, plan.At, *b.BranchStep)
			require.EqualValues(t, i, *b.BranchIndex)
			require.Equal(t, episode.BranchGroupID(root, plan.At), *b.GroupID)
			require.Equal(t, r.TaskID, b.TaskID)
			require.Len(t, steps[id], int(b.Steps))
			for j, s := range steps[id] {
				require.EqualValues(t, plan.At+j, s.StepIndex, "a branch's rows hold only its continuation, numbered after the prefix")
			}
			require.Equal(t, "branch", b.ResetStrategy)
		}
	}
	got := map[string]bool{}
	for id := range eps {
		got[id] = true
	}
	require.Equal(t, want, got, "exactly the planned tree, none twice")

	ds, err := shard.Open(out)
	require.NoError(t, err)
	trajectories := 0
	require.NoError(t, ds.EachTrajectory(func(ep schemas.EpisodeRow, full []schemas.StepRow, _ []schemas.RewardRow) error {
		trajectories++
		require.NotEqual(t, string(runtime.ExitBranched), ep.ExitReason)
		for i, s := range full {
			require.EqualValues(t, i, s.StepIndex)
		}
		if ep.ParentEpisodeID == nil {
			require.Equal(t, steps[ep.EpisodeID], full)
			return nil
		}
		parent := *ep.ParentEpisodeID
		require.Len(t, full, plan.At+int(ep.Steps))
		prefix := slices.Clone(steps[parent])
		for i := range prefix {
			prefix[i].EpisodeID = ep.EpisodeID // the joined rows are the trajectory's
		}
		require.Equal(t, prefix, full[:plan.At], "the rebuilt episode opens with the parent's prefix")
		require.Equal(t, steps[ep.EpisodeID], full[plan.At:], "and goes on with its own steps")
		return nil
	}))
	require.Equal(t, len(eps)-len(branched), trajectories)
	vr, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, vr.OK(), "verify: %v", vr.Problems)
	return branched
}

func rootIDs(t *testing.T, out string, repeats int) []string {
	t.Helper()
	ds, err := shard.Open(out)
	require.NoError(t, err)
	hashes, err := task.RecordHashes(ds.Manifest().Tasks)
	require.NoError(t, err)
	var ids []string
	for id, h := range hashes {
		for r := range repeats {
			ids = append(ids, EpisodeID(id, h, r, 0))
		}
	}
	return ids
}

func TestBranchAtOnTheExamples(t *testing.T) {
	cfg := baseConfig(t, "../examples/tasks")
	cfg.Branch = BranchPlan{At: 2, Width: 4}
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	rep := sum.Report()
	roots := rootIDs(t, cfg.Out, cfg.Repeats)
	branched := checkBranchTree(t, cfg.Out, cfg.Branch, roots)
	require.Len(t, branched, len(roots), "every example runs past step 2")
	require.Equal(t, len(roots)*5, rep.Planned)
	require.Equal(t, len(roots)*5, rep.Episodes)
	require.Equal(t, len(roots), rep.ByExit["branched"])
	require.Zero(t, rep.Losses)
}

func TestBranchesStartFromTheParentsFiles(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "state.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(stateTask), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Branch = BranchPlan{At: 2, Width: 3}
	_, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	branched := checkBranchTree(t, cfg.Out, cfg.Branch, rootIDs(t, cfg.Out, cfg.Repeats))
	require.Len(t, branched, cfg.Repeats)
	eps, steps, rewards := readAll(t, cfg.Out)
	for id, e := range eps {
		if e.ParentEpisodeID == nil {
			continue
		}
		require.Equal(t, "one\ntwo\n", steps[id][0].Output, "the branch's first step sees the parent's files at the branch point")
		require.Equal(t, string(runtime.ExitDone), e.ExitReason)
		require.NotNil(t, rewards[id].Value)
		require.Equal(t, 1.0, *rewards[id].Value, "and its verifier passes on them")
	}
}

func TestBranchRootThatEndsBeforeTheBranchStepDoesNotBranch(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "state.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(stateTask), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Branch = BranchPlan{At: 9, Width: 2} // the task is done after 5 steps
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	rep := sum.Report()
	require.Equal(t, cfg.Repeats, rep.Planned)
	require.Equal(t, map[string]int{"done": cfg.Repeats}, rep.ByExit)
	require.Empty(t, checkBranchTree(t, cfg.Out, cfg.Branch, rootIDs(t, cfg.Out, cfg.Repeats)))
}

func TestBranchCancelThenResumeMakesExactlyThePlannedTree(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "slow.yaml")
	// Step 3 runs only in branches: its mark says a branch is in flight.
	started := filepath.Join(dir, "started")
	slow := strings.Join([]string{"id: slow", "instruction: wait a little, several times", "solution:",
		"  - {kind: exec, cmd: sleep 0.2}", "  - {kind: exec, cmd: sleep 0.2}", "  - {kind: exec, cmd: sleep 0.2}",
		"  - {kind: exec, cmd: 'touch " + started + "; sleep 0.2'}", "  - {kind: exec, cmd: sleep 0.2}", "  - {kind: done}", ""}, "\n")
	require.NoError(t, os.WriteFile(spec, []byte(slow), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Replicas, cfg.Repeats = 2, 3
	cfg.Branch = BranchPlan{At: 2, Width: 3}

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := os.Stat(started); err == nil {
				time.Sleep(100 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err := Run(ctx, cfg)
	require.ErrorIs(t, err, context.Canceled)
	eps, _, _ := readAll(t, cfg.Out)
	missing := 0
	for id, e := range eps {
		if e.ExitReason == string(runtime.ExitBranched) {
			for i := range cfg.Branch.Width {
				if b, ok := eps[episode.BranchID(id, 2, i)]; !ok || b.ExitReason == string(runtime.ExitCancelled) {
					missing++
				}
			}
		}
	}
	require.Positive(t, missing, "the stop came with branches of a kept branch point still to run")

	cfg.Resume = true
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	roots := rootIDs(t, cfg.Out, cfg.Repeats)
	require.Len(t, checkBranchTree(t, cfg.Out, cfg.Branch, roots), cfg.Repeats)
	rep := sum.Report()
	require.Equal(t, cfg.Repeats*(1+cfg.Branch.Width), rep.Episodes)
	require.Equal(t, rep.Planned, rep.Episodes)
	require.Equal(t, "complete", rep.Status)

	// Once complete, a resume has nothing to do.
	sum, err = Run(context.Background(), cfg)
	require.NoError(t, err)
	require.True(t, sum.NothingToDo)
}

func TestBranchResumeWithAnotherPlanIsRefused(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "state.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(stateTask), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Branch = BranchPlan{At: 2, Width: 2}
	_, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	before := dirHashes(t, cfg.Out)
	cfg.Resume, cfg.Branch = true, BranchPlan{At: 2, Width: 3}
	_, err = Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrIncompatibleResume)
	require.ErrorContains(t, err, `plan.branch: the run used "at=2,width=2", this command gives "at=2,width=3"`)
	require.Equal(t, before, dirHashes(t, cfg.Out), "a refused resume changes nothing")
}

func TestBranchOnAPoolThatRecreatesIsRefused(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "state.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(stateTask), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Branch, cfg.Reset = BranchPlan{At: 2, Width: 2}, pool.Recreate
	_, err := Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorIs(t, err, pool.ErrCannotBranch)
	_, statErr := os.Stat(cfg.Out)
	require.True(t, errors.Is(statErr, os.ErrNotExist), "nothing is written")
}

func TestParseBranchPlan(t *testing.T) {
	for _, c := range []struct {
		in   string
		want BranchPlan
		err  string
	}{
		{"", BranchPlan{}, ""},
		{"at=2,width=4", BranchPlan{At: 2, Width: 4}, ""},
		{" width=3 , at=1 ", BranchPlan{At: 1, Width: 3}, ""},
		{"at=2", BranchPlan{}, "width is missing"},
		{"at=0,width=2", BranchPlan{}, "at must be a whole number >= 1"},
		{"at=2,width=x", BranchPlan{}, `width must be a whole number >= 1, not "x"`},
		{"at=2,width=2,at=3", BranchPlan{}, "at given twice"},
		{"at=2,size=4", BranchPlan{}, `unknown key "size" (keys: at, every, width, depth, max)`},
		{"at2", BranchPlan{}, "is not key=value"},
		{"tree=2x3x2", BranchPlan{}, "a tree is given as every=K,width=N,depth=D,max=M"},
		{"every=2,width=3,depth=2,max=13", BranchPlan{At: 2, Width: 3, Depth: 2, Max: 13, tree: true}, ""},
		{"every=2,width=3,depth=2", BranchPlan{}, "max is missing"},
		{"every=2,width=3,max=9", BranchPlan{}, "depth is missing"},
		{"every=2,depth=2,max=9", BranchPlan{}, "width is missing"},
		{"every=2,width=3,depth=2,max=3", BranchPlan{}, "max=3 leaves no room for one branch point"},
		{"at=2,every=2,width=3", BranchPlan{}, "at and every exclude each other"},
		{"at=2,width=3,depth=2", BranchPlan{}, "depth is for trees"},
		{"width=3", BranchPlan{}, "at or every is missing"},
	} {
		got, err := ParseBranchPlan(c.in)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got)
	}
	_, err := ParseBranchPlan("tree=2x3x2")
	require.ErrorIs(t, err, ErrBranchUnsupported)
	require.True(t, slices.Equal(branchKeys, []string{"at", "every", "width", "depth", "max"}))
	p, err := ParseBranchPlan("every=2,width=3,depth=2,max=13")
	require.NoError(t, err)
	require.Equal(t, "every=2,width=3,depth=2,max=13", p.String(), "a tree plan is recorded in its own form")
	p, err = ParseBranchPlan("at=2,width=3")
	require.NoError(t, err)
	require.Equal(t, "at=2,width=3", p.String(), "a one-level plan is recorded as before")
}

// A kept root whose prefix no longer reproduces cannot have its branch
// point remade: the resume says so, runs everything else, and ends partial
// with those branches missing rather than branching from another state.
func TestBranchResumeOfAPrefixThatDoesNotReproduce(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "clock.yaml")
	started := filepath.Join(dir, "started")
	clock := strings.Join([]string{"id: clock", "instruction: read the clock, then wait", "solution:",
		"  - {kind: exec, cmd: 'date +%s%N'}", "  - {kind: exec, cmd: sleep 0.2}",
		"  - {kind: exec, cmd: 'touch " + started + "; sleep 0.3'}", "  - {kind: exec, cmd: sleep 0.3}", "  - {kind: done}", ""}, "\n")
	require.NoError(t, os.WriteFile(spec, []byte(clock), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Replicas, cfg.Repeats = 1, 1
	cfg.Branch = BranchPlan{At: 2, Width: 3}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := os.Stat(started); err == nil {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err := Run(ctx, cfg)
	require.ErrorIs(t, err, context.Canceled)

	var log syncBuffer
	cfg.Resume, cfg.Logger = true, textLogger(&log)
	sum, err := Run(context.Background(), cfg)
	require.ErrorContains(t, err, "planned episodes are missing")
	require.Equal(t, "partial", sum.Report().Status)
	require.Contains(t, log.String(), "the recorded prefix did not reproduce: step 0")
	eps, _, _ := readAll(t, cfg.Out)
	for _, e := range eps {
		require.NotEqual(t, string(runtime.ExitDone), e.ExitReason, "no branch ran from another state than its parent's")
	}
}
