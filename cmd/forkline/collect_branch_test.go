package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/policy/openai/openaitest"
	"github.com/forkline/forkline/replay"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// branchTree reads a branching dataset and checks it is exactly the tree
// at,width plans over its roots: every root that branched has its width
// branches with their derived ids and lineage, nothing is there twice, and
// the dataset verifies. It returns the episode rows by id.
func branchTree(t *testing.T, out string, repeats, at, width int) map[string]schemas.EpisodeRow {
	t.Helper()
	ds, err := shard.Open(out)
	require.NoError(t, err)
	hashes, err := task.RecordHashes(ds.Manifest().Tasks)
	require.NoError(t, err)
	eps := map[string]schemas.EpisodeRow{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		_, dup := eps[e.EpisodeID]
		require.False(t, dup, "episode %s is there twice", e.EpisodeID)
		eps[e.EpisodeID] = e
	}
	var want []string
	for id, h := range hashes {
		for r := range repeats {
			root := collect.EpisodeID(id, h, r, 0)
			want = append(want, root)
			if eps[root].ExitReason != string(runtime.ExitBranched) {
				continue
			}
			for i := range width {
				b := episode.BranchID(root, at, i)
				want = append(want, b)
				row, ok := eps[b]
				require.True(t, ok, "branch %d of %s is kept", i, root)
				require.Equal(t, root, *row.ParentEpisodeID)
				require.EqualValues(t, at, *row.BranchStep)
				require.EqualValues(t, i, *row.BranchIndex)
				require.Equal(t, episode.BranchGroupID(root, at), *row.GroupID)
			}
		}
	}
	got := slices.Collect(func(yield func(string) bool) {
		for id := range eps {
			if !yield(id) {
				return
			}
		}
	})
	sort.Strings(want)
	sort.Strings(got)
	require.Equal(t, want, got, "exactly the planned tree, none twice")
	vr, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, vr.OK(), "verify: %v", vr.Problems)
	return eps
}

// stopBranchingRunThenResume starts a branching run (-branch at=2,width=3,
// 4 roots of the slow task) with grace, stops it past the first branch
// point with stop, requires a partial run and, when check is given, runs
// it on the stopped run; then resumes it and requires the planned tree of
// 4×(1+3) episodes with nothing left in the workdir. It returns the
// task spec, output and workdir.
func stopBranchingRunThenResume(t *testing.T, grace string, stop func(*exec.Cmd), check func(work string)) (spec, out, work string) {
	t.Helper()
	work = t.TempDir()
	cmd, spec, out := startCollect(t, work, "-grace", grace, "-branch", "at=2,width=3", "-repeats", "4")
	waitStarted(t, spec, cmd, nil)
	time.Sleep(600 * time.Millisecond) // past the first branch point
	stop(cmd)
	require.Equal(t, cli.ExitInterrupted, exitCode(cmd.Wait()))
	require.Equal(t, shard.StatusPartial, manifestStatus(t, out))
	if check != nil {
		check(work)
	}

	cmd = collectProcess("-tasks", spec, "-out", out, "-replicas", "2", "-repeats", "4", "-workdir", work, "-quiet", "-resume", "-branch", "at=2,width=3")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	require.Equal(t, cli.ExitOK, exitCode(cmd.Run()))
	require.Equal(t, shard.StatusComplete, manifestStatus(t, out))
	require.Len(t, branchTree(t, out, 4, 2, 3), 4*(1+3), "every root of the slow task runs past step 2")
	left, err := os.ReadDir(work)
	require.NoError(t, err)
	require.Empty(t, left, "sandboxes or branch layers left in the workdir")
	return spec, out, work
}

func TestSIGTERMBranchingRunResumesToThePlannedTree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the collector for seconds")
	}
	spec, out, work := stopBranchingRunThenResume(t, "0s", func(cmd *exec.Cmd) {
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	}, nil)

	// A resume with another plan is refused, and says which; one that
	// leaves -branch out takes the run's from its recorded configuration.
	r := execute(context.Background(), "collect", "-tasks", spec, "-out", out, "-replicas", "2", "-repeats", "4", "-workdir", work, "-resume", "-branch", "at=1,width=2")
	require.Equal(t, cli.ExitBadInput, r.code)
	require.Contains(t, r.stderr, `-branch: the run used "at=2,width=3", this command gives "at=1,width=2"`)
	require.Equal(t, []string{"at=2,width=3"}, planConfig(t, out)["branch"])
	r = execute(context.Background(), "collect", "-tasks", spec, "-out", out, "-replicas", "2", "-repeats", "4", "-workdir", work, "-resume")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "nothing to do")
}

// A stop sent to every process of the job (as Slurm's scancel does) in a
// branching run: the roots in flight, branched or not, are kept as
// cancelled, their branch points are released with nothing left behind,
// and the resume grows the planned tree.
func TestJobWideSIGTERMBranchingRunResumesToThePlannedTree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the collector for seconds")
	}
	stopBranchingRunThenResume(t, "30s", func(cmd *exec.Cmd) {
		signalTree(t, cmd.Process.Pid, syscall.SIGTERM)
	}, func(work string) {
		left, err := os.ReadDir(work)
		require.NoError(t, err)
		require.Empty(t, left, "sandboxes or branch layers left in the workdir after the stop")
	})
}

func TestCollectRefusesWhatBranchingDoesNotDoYet(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-branch", "tree=2x3x2"}, "a tree is given as every=K,width=N,depth=D,max=M"},
		{[]string{"-branch", "at=2,size=3"}, `unknown key "size" (keys: at, every, width, depth, max)`},
		{[]string{"-branch", "every=2,width=3,depth=2"}, "max is missing"},
		{[]string{"-from", "runs/old", "-branch", "at=2,width=2"}, "-from runs/old"},
		{[]string{"-from", "runs/old"}, "give -branch at=K,width=N"},
		{[]string{"-from", "runs/old", "-branch", "at=2,width=2", "-repeats", "2"}, "-repeats is not for a run from a stored dataset"},
		{[]string{"-from", "runs/old", "-branch", "every=2,width=2,depth=2,max=7"}, "trees from a stored dataset are not carried out"},
		{[]string{"-episode", "abc"}, "-episode picks episodes of a stored dataset, and no -from is given"},
		{[]string{"-branch", "at=2,width=2", "-reset", "recreate"}, "cannot checkpoint"},
		// A plan no task runs long enough for, and plans past the stated
		// bounds: before the fix at=1000 ran with no branch and no word,
		// and width=10000 planned 7,224 episodes in 300 s before a stop.
		{[]string{"-branch", "at=1000,width=2"}, "-branch at=1000,width=2: no episode would branch: a root branches after step 1000 only if its task lets it run on, and every task ends by then: config-migrate (max_steps 8), error-report (max_steps 12), fix-sum (max_steps 10)"},
		{[]string{"-branch", "at=1,width=10000"}, "width=10000 is more than 256 branches per branch point"},
		{[]string{"-branch", "every=1,width=2,depth=2,max=100000"}, "max=100000 is more than 4096 episodes per tree"},
	} {
		r := execute(context.Background(), append([]string{"collect", "-tasks", "../../examples/tasks", "-out", out, "-workdir", t.TempDir()}, c.args...)...)
		require.Equal(t, cli.ExitBadInput, r.code, "%v: %s", c.args, r.stderr)
		require.Contains(t, r.stderr, c.want, "%v", c.args)
		_, err := os.Stat(out)
		require.True(t, os.IsNotExist(err), "%v: nothing is written", c.args)
	}
}

// A plan some tasks end before is run, and the tasks whose episodes never
// branch are named: at=9 branches error-report (12 steps) and fix-sum (10)
// but not config-migrate (8).
func TestCollectNamesTheTasksABranchPlanMisses(t *testing.T) {
	r := execute(context.Background(), "collect", "-tasks", "../../examples/tasks", "-out", filepath.Join(t.TempDir(), "run"),
		"-workdir", t.TempDir(), "-branch", "at=9,width=2") // a warning: -quiet prints errors only
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stderr, "branch plan at=9,width=2: these tasks end by step 9, so their episodes never branch: config-migrate (max_steps 8)")
	require.NotContains(t, r.stderr, "fix-sum (max_steps")
}

// With the LLM policy, each branch's policy continues its parent's
// conversation, and its token record opens with the parent's ids exactly.
func TestBranchTokenRecordsShareTheParentsPrefix(t *testing.T) {
	turns := []openaitest.Turn{
		{ToolCalls: []openaitest.ToolCall{{ID: "c1", Name: "exec", Args: `{"cmd":"echo one > f"}`}},
			PromptIDs: []int32{1, 2}, ResponseIDs: []int32{10}, Logprobs: []float64{-0.5}},
		{ToolCalls: []openaitest.ToolCall{{ID: "c2", Name: "exec", Args: `{"cmd":"echo two >> f"}`}},
			PromptIDs: []int32{1, 2, 10, 20}, ResponseIDs: []int32{11}, Logprobs: []float64{-0.25}},
		{ToolCalls: []openaitest.ToolCall{{ID: "c3", Name: "exec", Args: `{"cmd":"cat f"}`}},
			PromptIDs: []int32{1, 2, 10, 20, 11, 21}, ResponseIDs: []int32{12}, Logprobs: []float64{-0.125}},
		{ToolCalls: []openaitest.ToolCall{{ID: "c4", Name: "done", Args: `{"answer":"ok"}`}},
			PromptIDs: []int32{1, 2, 10, 20, 11, 21, 12, 22}, ResponseIDs: []int32{13}, Logprobs: []float64{-1}},
	}
	srv := openaitest.New(t, map[string][]openaitest.Turn{"br": turns})
	tasks := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(tasks, "br.yaml"), []byte("id: br\ninstruction: 'scenario: br'\n"), 0o644))
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"-tasks", tasks, "-out", out, "-workdir", t.TempDir(), "-replicas", "2",
		"-policy", "openai", "-base-url", srv.URL, "-model", "m", "-branch", "at=2,width=3"}
	var code int
	printed := captureOutput(t, func() { code = collectInProcess(args) })
	require.Equal(t, cli.ExitOK, code, "%s", printed)

	eps := branchTree(t, out, 1, 2, 3)
	require.Len(t, eps, 4)
	var parent schemas.EpisodeRow
	for _, e := range eps {
		if e.ParentEpisodeID == nil {
			parent = e
		}
	}
	require.Equal(t, string(runtime.ExitBranched), parent.ExitReason)
	require.Equal(t, []int32{10, 20, 11}, parent.ResponseIDs)
	children := 0
	for _, e := range eps {
		if e.ParentEpisodeID == nil {
			continue
		}
		children++
		require.Equal(t, "done", e.ExitReason, e.Detail)
		require.Equal(t, parent.PromptIDs, e.PromptIDs, "the same prompt")
		require.Equal(t, parent.ResponseIDs, e.ResponseIDs[:len(parent.ResponseIDs)], "the child's record opens with the parent's ids exactly")
		require.Equal(t, []int32{10, 20, 11, 21, 12, 22, 13}, e.ResponseIDs)
		require.Equal(t, parent.ResponseMask, e.ResponseMask[:len(parent.ResponseMask)])
		require.Equal(t, parent.ResponseLogprobs, e.ResponseLogprobs[:len(parent.ResponseLogprobs)])
	}
	require.Equal(t, 3, children)
	// The branches asked the server for turns 2 and 3 only: the prefix was
	// decided once, by the parent.
	byTurn := map[int]int{}
	for _, r := range srv.Requests("br") {
		byTurn[r.Turn]++
	}
	require.Equal(t, map[int]int{0: 1, 1: 1, 2: 3, 3: 3}, byTurn)
}

func TestDockerBranchingRunLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	requireDocker(t)
	out := filepath.Join(t.TempDir(), "run")
	cmd := collectProcess("-provider", "docker", "-tasks", "../../examples/tasks", "-replicas", "2", "-repeats", "1",
		"-branch", "at=2,width=2", "-out", out, "-quiet")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	require.Equal(t, cli.ExitOK, exitCode(cmd.Run()))
	eps := branchTree(t, out, 1, 2, 2)
	require.Len(t, eps, 3*(1+2))
	for _, e := range eps {
		if e.ParentEpisodeID != nil {
			require.Equal(t, "done", e.ExitReason, e.Detail)
			require.Equal(t, "branch", e.ResetStrategy)
		}
	}
	ds, err := shard.Open(out)
	require.NoError(t, err)
	require.Empty(t, labelled(t, ds.Manifest().RunID), "containers or branch images of the run are left")

	// Replay re-executes each branch as its prefix and then its own steps.
	rep, err := replay.Run(context.Background(), replay.Config{In: out, Provider: "local", Mode: replay.Normalized, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, 3*2, rep.Identical, "%+v", rep.Episodes)
	for _, e := range rep.Episodes {
		require.Equal(t, 2+int(eps[e.EpisodeID].Steps), e.Steps, "prefix and own steps")
	}
}

// forkline collect -from branches a stored run's trajectories into a new
// dataset, and the command it prints to resume such a run names -from
// (never -repeats, which -from refuses).
func TestCollectFromAStoredRun(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "files.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(`id: files
instruction: write a file in three steps
solution:
  - {kind: exec, cmd: echo one > f}
  - {kind: exec, cmd: echo two >> f}
  - {kind: exec, cmd: echo three >> f}
  - {kind: done}
verify:
  cmd: test "$(cat f)" = "$(printf 'one\ntwo\nthree')"
  reward: exit
`), 0o644))
	src, out := filepath.Join(dir, "src"), filepath.Join(dir, "new")
	r := execute(context.Background(), "collect", "-tasks", spec, "-out", src, "-repeats", "2", "-workdir", t.TempDir(), "-quiet")
	require.Equal(t, 0, r.code, r.stderr)
	r = execute(context.Background(), "collect", "-tasks", spec, "-from", src, "-branch", "at=2,width=2", "-out", out, "-workdir", t.TempDir(), "-quiet")
	require.Equal(t, 0, r.code, r.stderr)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	n, branched := 0, 0
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		n++
		if e.ExitReason == string(runtime.ExitBranched) {
			branched++
		}
	}
	require.Equal(t, 2*(1+2), n)
	require.Equal(t, 2, branched)
	vr, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, vr.OK(), "%v", vr.Problems)

	rec := recordedSettings(collect.Config{Tasks: spec, Out: out, Provider: "local", Replicas: 1, Repeats: 1, Policy: "script",
		From: src, FromEpisodes: []string{"ab", "cd"}, Branch: mustBranch(t, "at=2,width=2")})
	require.Equal(t, []string{src}, rec["from"])
	require.Equal(t, []string{"ab,cd"}, rec["episode"])
	require.NotContains(t, rec, "repeats")
}

func mustBranch(t *testing.T, s string) collect.BranchPlan {
	t.Helper()
	p, err := collect.ParseBranchPlan(s)
	require.NoError(t, err)
	return p
}

// A depth-2 tree through the command: replay re-executes every leaf as its
// root's steps, its parent's, then its own; inspect prints the whole tree.
func TestCollectTreeReplayAndInspect(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "deep.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(`id: deep
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
`), 0o644))
	out := filepath.Join(dir, "run")
	r := execute(context.Background(), "collect", "-tasks", spec, "-out", out, "-repeats", "1", "-branch", "every=2,width=2,depth=2,max=7", "-workdir", t.TempDir(), "-quiet")
	require.Equal(t, 0, r.code, r.stderr)
	rep, err := replay.Run(context.Background(), replay.Config{In: out, Provider: "local", Mode: replay.Normalized, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, 4, rep.Identical, "%+v", rep.Episodes)
	for _, e := range rep.Episodes {
		require.Equal(t, 7, e.Steps, "the root's steps, the parent's and its own")
	}
	ds, err := shard.Open(out)
	require.NoError(t, err)
	var leaf string
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		if e.BranchStep != nil && *e.BranchStep == 4 {
			leaf = e.EpisodeID
		}
	}
	r = execute(context.Background(), "inspect", out, "-episode", leaf)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "      branch 0 at step 4", "a leaf sits under its parent, under the root")
	require.Contains(t, r.stdout, "<- this episode")
}
