package collect

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/runtime"
)

// clockTask's first step reads the clock: its prefix never reproduces.
const clockTask = `id: clock
instruction: read the clock, then write
solution:
  - {kind: exec, cmd: 'date +%s%N'}
  - {kind: exec, cmd: echo x > g}
  - {kind: exec, cmd: echo y >> g}
  - {kind: done}
`

// A -from run re-executes each stored trajectory's first K steps in a fresh
// fork of the golden, keeps them as its root (branched, its id derived from
// the source) and continues it Width times; the manifest names the source
// run and, per root, the source episode. A stored episode whose prefix does
// not reproduce is skipped, and nothing of it is written.
func TestBranchFromAStoredDataset(t *testing.T) {
	tasks := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(tasks, "deep.yaml"), []byte(deepTask), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(tasks, "clock.yaml"), []byte(clockTask), 0o644))
	src := baseConfig(t, tasks)
	_, err := Run(context.Background(), src)
	require.NoError(t, err)
	srcEps, srcSteps, _ := readAll(t, src.Out)
	srcDS, err := shard.Open(src.Out)
	require.NoError(t, err)
	srcRun := srcDS.Manifest().RunID

	var log syncBuffer
	cfg := baseConfig(t, tasks)
	cfg.From, cfg.Logger = src.Out, textLogger(&log)
	cfg.Branch = BranchPlan{At: 2, Width: 3}
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err, log.String())
	rep := sum.Report()
	require.Equal(t, "complete", rep.Status)
	require.Contains(t, log.String(), "the recorded prefix did not reproduce")
	require.Contains(t, log.String(), "skipped: nothing of it is written")

	var roots []string
	want := map[string]string{}
	for id, e := range srcEps {
		if e.TaskID == "deep" {
			root := FromRootID(srcRun, id, 2)
			roots = append(roots, root)
			want[root] = id
		}
	}
	branched := checkBranchTree(t, cfg.Out, cfg.Branch, roots)
	require.Len(t, branched, 2, "both deep episodes branched")
	eps, steps, rewards := readAll(t, cfg.Out)
	require.Len(t, eps, 2*(1+3), "the clock episodes are skipped whole: no root without branches")
	require.Equal(t, 2*(1+3), rep.Planned)
	for _, e := range eps {
		require.Equal(t, "deep", e.TaskID)
	}
	for root, source := range want {
		require.Equal(t, string(runtime.ExitBranched), eps[root].ExitReason)
		for i := range 2 {
			require.Equal(t, srcSteps[source][i].Output, steps[root][i].Output, "the root re-executed the stored steps")
			require.Equal(t, srcSteps[source][i].ActionJSON, steps[root][i].ActionJSON)
		}
		for i := range 3 {
			b := episode.BranchID(root, 2, i)
			require.Equal(t, string(runtime.ExitDone), eps[b].ExitReason)
			require.Equal(t, 1.0, *rewards[b].Value, "the branch continued from the stored episode's files")
		}
	}
	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	plan, err := manifest.DecodePlan(ds.Manifest().Plan)
	require.NoError(t, err)
	require.NotNil(t, plan.From)
	require.Equal(t, srcRun, plan.From.RunID)
	abs, _ := filepath.Abs(src.Out)
	require.Equal(t, abs, plan.From.Dataset)
	require.Len(t, plan.From.Roots, len(srcEps), "every planned root names its source episode, a skipped one too")
	for root, source := range want {
		require.Equal(t, source, plan.From.Roots[root])
	}

	// A resume from another dataset is refused by name.
	cfg.Resume = true
	before := dirHashes(t, cfg.Out)
	cfg.From = t.TempDir()
	_, err = Run(context.Background(), cfg)
	require.ErrorContains(t, err, "From "+cfg.From)
	require.Equal(t, before, dirHashes(t, cfg.Out), "a refused command changes nothing")
}

func TestBranchFromRefusesBadInput(t *testing.T) {
	src := baseConfig(t, writeTask(t, deepTask))
	_, err := Run(context.Background(), src)
	require.NoError(t, err)
	for name, c := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"no such episode":  {func(c *Config) { c.FromEpisodes = []string{"zzz"} }, "FromEpisodes zzz: no trajectory"},
		"too few steps":    {func(c *Config) { c.Branch.At = 40 }, "no trajectory to branch from"},
		"no dataset":       {func(c *Config) { c.From = t.TempDir() }, "From "},
		"the task changed": {func(c *Config) { c.Tasks = writeTask(t, deepTask+"# edited\nmetadata: {x: 1}\n") }, "its golden would be another"},
	} {
		cfg := baseConfig(t, src.Tasks)
		cfg.From, cfg.Branch = src.Out, BranchPlan{At: 2, Width: 2}
		c.edit(&cfg)
		_, err := Run(context.Background(), cfg)
		require.ErrorIs(t, err, ErrConfig, name)
		require.ErrorContains(t, err, c.want, name)
		_, statErr := os.Stat(cfg.Out)
		require.True(t, os.IsNotExist(statErr), "%s: nothing is written", name)
	}
}

// A -from run stopped mid-tree resumes to exactly its planned trees: a kept
// root's missing branches run from its remade branch point (nothing of the
// remake kept again), and none is there twice.
func TestBranchFromCancelThenResume(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	slow := strings.Join([]string{"id: slow", "instruction: build a file slowly", "solution:",
		"  - {kind: exec, cmd: 'echo 1 > f; sleep 0.1'}", "  - {kind: exec, cmd: 'echo 2 >> f; sleep 0.1'}",
		"  - {kind: exec, cmd: 'touch " + started + "; echo 3 >> f; sleep 0.3'}", "  - {kind: exec, cmd: sleep 0.1}", "  - {kind: done}",
		"verify:", `  cmd: test "$(cat f)" = "$(printf '1\n2\n3')"`, "  reward: exit", ""}, "\n")
	spec := writeTask(t, slow)
	src := baseConfig(t, spec)
	_, err := Run(context.Background(), src)
	require.NoError(t, err)
	require.NoError(t, os.Remove(started))

	cfg := baseConfig(t, spec)
	cfg.From, cfg.Replicas, cfg.Branch = src.Out, 1, BranchPlan{At: 2, Width: 3}
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
	require.Less(t, len(eps), 2*(1+3))
	kept := 0
	for _, e := range eps {
		if e.ExitReason == string(runtime.ExitBranched) {
			kept++
		}
	}
	require.Positive(t, kept, "the stop came with a root kept and its branches still to run")

	cfg.Resume = true
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	srcDS, err := shard.Open(src.Out)
	require.NoError(t, err)
	var roots []string
	for e, err := range srcDS.Episodes() {
		require.NoError(t, err)
		roots = append(roots, FromRootID(srcDS.Manifest().RunID, e.EpisodeID, 2))
	}
	require.Len(t, checkBranchTree(t, cfg.Out, cfg.Branch, roots), 2)
	rep := sum.Report()
	require.Equal(t, 2*(1+3), rep.Episodes)
	require.Equal(t, rep.Planned, rep.Episodes)
	_, _, rewards := readAll(t, cfg.Out)
	for id, r := range rewards {
		require.Equal(t, 1.0, *r.Value, id)
	}
}
