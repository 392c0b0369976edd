package collect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/ui"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"

	_ "github.com/forkline/forkline/providers/all"
)

func baseConfig(t *testing.T, tasks string) Config {
	return Config{
		Tasks: tasks, Out: filepath.Join(t.TempDir(), "run"), Provider: "local",
		Replicas: 4, Repeats: 2, WorkDir: t.TempDir(),
	}
}

func readAll(t *testing.T, dir string) (map[string]schemas.EpisodeRow, map[string][]schemas.StepRow, map[string]schemas.RewardRow) {
	t.Helper()
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	eps := map[string]schemas.EpisodeRow{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		_, dup := eps[e.EpisodeID]
		require.False(t, dup, "episode %s appears twice", e.EpisodeID)
		eps[e.EpisodeID] = e
	}
	steps := map[string][]schemas.StepRow{}
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		steps[s.EpisodeID] = append(steps[s.EpisodeID], s)
	}
	rewards := map[string]schemas.RewardRow{}
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		rewards[r.EpisodeID] = r
	}
	return eps, steps, rewards
}

// TestDefaultStandbyHandsOff: with the command's defaults the standby is
// on, sized to the run, and spans tasks: a replica ending its episode is
// handed one prepared ahead, including at a task boundary (the next task's
// replica is prepared while the last episode of the one before runs).
func TestDefaultStandbyHandsOff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Tasks, cfg.Out, cfg.WorkDir = "../examples/tasks", filepath.Join(t.TempDir(), "run"), t.TempDir()
	cfg.Replicas, cfg.Repeats = 1, 4
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	eps, _, _ := readAll(t, cfg.Out)
	tasks := map[string]bool{}
	handOffs := 0
	for _, e := range eps {
		tasks[e.TaskID] = true
		require.Contains(t, []string{"fork", "fork+standby"}, e.ResetStrategy)
		if e.ResetStrategy == "fork+standby" {
			handOffs++
		}
	}
	require.Len(t, eps, 4*len(tasks))
	// Only a task's first episode may find its replica still being made
	// and fork cold beside it when the making failed; every other one is
	// a hand-off.
	require.GreaterOrEqual(t, handOffs, len(eps)-len(tasks), "episodes handed a prepared replica: %d of %d", handOffs, len(eps))
	require.Equal(t, handOffs, sum.Report().ResetMS["fork+standby/overlay"].N)
}

func TestCollectExamplesEndToEnd(t *testing.T) {
	cfg := baseConfig(t, "../examples/tasks")
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	rep := sum.Report()
	require.Equal(t, 6, rep.Episodes)
	require.Equal(t, 6, rep.ByExit["done"])

	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
	vr, err := shard.Verify(cfg.Out)
	require.NoError(t, err)
	require.True(t, vr.OK(), "verify: %+v", vr)

	eps, steps, rewards := readAll(t, cfg.Out)
	require.Len(t, eps, 6)
	byTask := map[string][]string{}
	for id, e := range eps {
		byTask[e.TaskID] = append(byTask[e.TaskID], id)
		require.Equal(t, EpisodeID(e.TaskID, e.TaskHash, int(e.Repeat), 0), id, "episode ids are derived, not random")
		require.Equal(t, "fork", e.ResetStrategy)
		require.NotEmpty(t, e.GoldenID)
		require.Greater(t, e.ResetMS, 0.0)
		require.Len(t, steps[id], int(e.Steps))
		for i, s := range steps[id] {
			require.Equal(t, int32(i), s.StepIndex)
		}
	}
	for _, id := range byTask["fix-sum"] {
		require.Equal(t, 1.0, *rewards[id].Value)
		first := steps[id][0]
		require.Equal(t, "exec", first.ActionKind)
		require.Equal(t, "3\n", first.Output, "the unfixed script is off by one in step 0")
		require.EqualValues(t, 0, first.ExitCode)
		require.False(t, first.IsError)
	}
	for _, id := range byTask["config-migrate"] {
		require.Equal(t, 0.5, *rewards[id].Value, "the scripted attempt is half right")
		require.EqualValues(t, 1, rewards[id].ExitCode, "and its verification fails")
	}
	for _, id := range byTask["error-report"] {
		require.Equal(t, 1.0, *rewards[id].Value, rewards[id].Detail)
	}
}

func TestCollectBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("id: x\ninstruction: y\nlimits:\n  max_stepz: 3\n"), 0o644))

	cases := []struct {
		name string
		mod  func(*Config)
		want []string
	}{
		{"unknown provider", func(c *Config) { c.Provider = "nope" }, []string{`unknown provider "nope"`, "known: ", "local"}},
		{"unknown policy", func(c *Config) { c.Policy = "gpt" }, []string{`unknown policy "gpt"`, "known: agent, openai, script"}},
		{"malformed task", func(c *Config) { c.Tasks = bad }, []string{"bad.yaml:4:3", "limits.max_stepz", "unknown field"}},
		{"unknown provider setting", func(c *Config) { c.ProviderParams = map[string]string{"frok": "copy"} }, []string{`"frok"`, "known: "}},
		{"bad capture", func(c *Config) { c.Capture.Pixels = "jpeg"; c.Capture.A11y = "full"; c.Capture.Tokens = "keep" }, []string{`pixels "jpeg"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig(t, "../examples/tasks")
			c.mod(&cfg)
			_, err := Run(context.Background(), cfg)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrConfig), "%v is not a config error", err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
			_, statErr := os.Stat(filepath.Join(cfg.Out, "manifest.json"))
			require.True(t, os.IsNotExist(statErr), "bad input must leave no run behind")
		})
	}
}

func TestCollectRefusesOccupiedOutput(t *testing.T) {
	cfg := baseConfig(t, "../examples/tasks/fix-sum.yaml")
	_, err := Run(context.Background(), cfg)
	require.NoError(t, err)

	_, err = Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrOutputExists)
	require.ErrorContains(t, err, cfg.Out) // the advice (-resume, -force) is the command's

	// Resume of a complete run runs nothing and duplicates nothing.
	cfg.Resume = true
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.True(t, sum.Report().NothingToDo)
	require.Equal(t, 0, sum.Report().Ran)
	require.Equal(t, 2, sum.Report().Episodes, "the summary covers the dataset")
	eps, _, _ := readAll(t, cfg.Out)
	require.Len(t, eps, 2)

	// Force replaces it.
	cfg.Resume, cfg.Force = false, true
	_, err = Run(context.Background(), cfg)
	require.NoError(t, err)

	// Force refuses a directory that is not a run.
	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "manifest.json"), []byte("{}"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(other, "thesis.tex"), []byte("precious"), 0o644))
	cfg.Out = other
	_, err = Run(context.Background(), cfg)
	require.ErrorContains(t, err, "thesis.tex")
	_, err = os.Stat(filepath.Join(other, "thesis.tex"))
	require.NoError(t, err)
}

const slowTask = `id: slow
instruction: wait a little, several times
setup:
  - echo ready > state
solution:
  - {kind: exec, cmd: sleep 0.2}
  - {kind: exec, cmd: sleep 0.2}
  - {kind: exec, cmd: sleep 0.2}
  - {kind: exec, cmd: sleep 0.2}
  - {kind: done}
`

func TestCollectCancelThenResume(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "slow.yaml")
	// The first step leaves a mark outside the sandbox (local is not a
	// boundary), so the stop comes while episodes are surely in flight,
	// however slow the machine.
	started := filepath.Join(dir, "started")
	spec0 := strings.Replace(slowTask, "{kind: exec, cmd: sleep 0.2}", "{kind: exec, cmd: 'touch "+started+"; sleep 0.2'}", 1)
	require.NoError(t, os.WriteFile(spec, []byte(spec0), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Replicas, cfg.Repeats = 2, 8

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := os.Stat(started); err == nil {
				time.Sleep(500 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, err := Run(ctx, cfg)
	require.ErrorIs(t, err, context.Canceled)

	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusPartial, ds.Manifest().Status)
	eps, steps, _ := readAll(t, cfg.Out)
	require.NotEmpty(t, eps)
	require.Less(t, len(eps), 8, "cancellation came before the run could finish")
	cancelled := 0
	for id, e := range eps {
		if e.ExitReason == string(runtime.ExitCancelled) {
			cancelled++
			require.NotEmpty(t, steps[id], "a cancelled episode keeps its steps")
			last := steps[id][len(steps[id])-1]
			require.Equal(t, string(runtime.ErrInterrupted), last.ErrorKind)
		}
	}
	require.Positive(t, cancelled, "episodes in flight are kept as cancelled")
	keptBefore := len(eps) - cancelled

	cfg.Resume = true
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	// The summary covers the whole dataset, not only this invocation.
	rep := sum.Report()
	require.Equal(t, 8, rep.Episodes)
	require.EqualValues(t, 8*5, rep.Steps)
	require.Equal(t, map[string]int{"done": 8}, rep.ByExit)
	require.Equal(t, keptBefore, rep.Skipped)
	require.Equal(t, 8-keptBefore, rep.Ran, "the cancelled ones ran again")
	ds, err = shard.Open(cfg.Out)
	require.NoError(t, err)
	var stored Report
	require.NoError(t, json.Unmarshal(ds.Manifest().Summary, &stored))
	require.Equal(t, 8, stored.Episodes, "the manifest's summary too")
	require.EqualValues(t, 40, stored.Steps)
	require.Equal(t, "complete", stored.Status)
	eps, steps, _ = readAll(t, cfg.Out)
	var got, want []string
	for id, e := range eps {
		got = append(got, id)
		require.Equal(t, string(runtime.ExitDone), e.ExitReason, "resume runs the cancelled episodes again, to the end")
		require.Len(t, steps[id], 5, "each episode has its steps once")
	}
	vr, err := shard.Verify(cfg.Out)
	require.NoError(t, err)
	require.True(t, vr.OK(), "problems: %v", vr.Problems)
	require.Empty(t, vr.Unlisted)
	ds, err = shard.Open(cfg.Out)
	require.NoError(t, err)
	hashes, err := task.RecordHashes(ds.Manifest().Tasks)
	require.NoError(t, err)
	h := hashes["slow"]
	for r := range 8 {
		want = append(want, EpisodeID("slow", h, r, 0))
	}
	sort.Strings(got)
	sort.Strings(want)
	require.Equal(t, want, got, "resume completes exactly the planned episodes")
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
}

// A stop that catches every planned episode in flight keeps them all as
// cancelled: no planned episode is missing, but none is finished, so the
// run is partial (CI once saw it called complete, exit 0, for a part of two
// episodes on two replicas), and a resume finishes it.
func TestAStopThatCancelsEveryPlannedEpisodeLeavesTheRunPartial(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "slow.yaml")
	// Each episode leaves a mark of its own at its first step; the stop
	// comes once both are in flight (the second replica's fork may land
	// later than the first's on a loaded machine).
	started := filepath.Join(dir, "started")
	require.NoError(t, os.Mkdir(started, 0o755))
	spec0 := strings.Replace(slowTask, "{kind: exec, cmd: sleep 0.2}", "{kind: exec, cmd: 'touch "+started+"/$$; sleep 0.2'}", 1)
	require.NoError(t, os.WriteFile(spec, []byte(spec0), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Replicas, cfg.Repeats, cfg.Grace = 2, 2, 0

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if marks, _ := os.ReadDir(started); len(marks) == 2 {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	sum, err := Run(ctx, cfg)
	require.ErrorIs(t, err, context.Canceled)
	rep := sum.Report()
	require.Equal(t, 2, rep.Episodes, "both planned episodes are kept")
	// Both were in flight; one may still have finished if the other's
	// first step came late (a loaded machine): at least one is cancelled.
	n := rep.ByExit["cancelled"]
	require.Positive(t, n, "exits: %v", rep.ByExit)
	require.Equal(t, 2, n+rep.ByExit["done"], "exits: %v", rep.ByExit)
	require.Equal(t, string(shard.StatusPartial), rep.Status)
	require.Contains(t, err.Error(), fmt.Sprintf("2 of 2 planned episodes kept, %d of them cancelled (a resume runs them again)", n))
	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusPartial, ds.Manifest().Status)

	cfg.Resume = true
	sum, err = Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"done": 2}, sum.Report().ByExit)
	ds, err = shard.Open(cfg.Out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
}

func TestFailingSetupAndHangingCommandsAreObservations(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte(`id: broken
instruction: never starts
setup:
  - echo preparing; echo 'no such database' >&2; exit 7
solution:
  - {kind: done}
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hang.yaml"), []byte(`id: hang
instruction: a command that never ends
limits:
  action_timeout: 1s
solution:
  - {kind: exec, cmd: "sleep 1000 & sleep 1000"}
  - {kind: exec, cmd: echo still alive}
  - {kind: done}
`), 0o644))
	cfg := baseConfig(t, dir)
	cfg.Repeats = 1
	_, err := Run(context.Background(), cfg)
	require.NoError(t, err, "a broken task does not stop the run")
	eps, steps, _ := readAll(t, cfg.Out)
	require.Len(t, eps, 2)
	for id, e := range eps {
		switch e.TaskID {
		case "broken":
			require.Equal(t, string(runtime.ExitEnvError), e.ExitReason)
			require.Contains(t, e.Detail, "setup[0]")
			require.Contains(t, e.Detail, "exit code 7")
			require.Contains(t, e.Detail, "no such database")
		case "hang":
			require.Equal(t, string(runtime.ExitDone), e.ExitReason)
			require.True(t, steps[id][0].TimedOut)
			require.Equal(t, "still alive\n", steps[id][1].Output)
		}
	}
}

// TestBytesPerStepIsWhatTheShardsTake: the summary's bytes kept per step
// is what the run's shards take on disk, per step, in the printed summary
// and the manifest's alike; the shard writer's row-size estimate (what
// rolls its generations) is reported apart. Before the fix the summary
// gave the estimate as bytes kept: 524,736 per step for steps whose
// shard took 1.7 MB each.
func TestBytesPerStepIsWhatTheShardsTake(t *testing.T) {
	cfg := baseConfig(t, "../examples/tasks/fix-sum.yaml")
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	rep := sum.Report()
	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	var onDisk int64
	for _, s := range ds.Manifest().Shards {
		st, err := os.Stat(filepath.Join(cfg.Out, s.File))
		require.NoError(t, err)
		onDisk += st.Size()
	}
	var total int64
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		total += e.Size()
	}
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		total += s.Size()
	}
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		total += r.Size()
	}
	for b, err := range ds.Blobs() {
		require.NoError(t, err)
		total += b.Size()
	}
	require.Positive(t, rep.RanSteps)
	require.InDelta(t, float64(onDisk)/float64(rep.RanSteps), rep.BytesPerStep, 1e-9, "bytes kept per step are the shards' bytes on disk")
	require.InDelta(t, float64(total)/float64(rep.RanSteps), rep.RowBytesPerStep, 1e-9, "the row estimate is the shard writer's")
	var m struct {
		Summary Report `json:"summary"`
	}
	raw, err := os.ReadFile(filepath.Join(cfg.Out, "manifest.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &m))
	require.InDelta(t, rep.BytesPerStep, m.Summary.BytesPerStep, 1e-9, "the manifest's summary says the same")
	var b strings.Builder
	ui.WriteCollect(&b, rep, cfg.Out)
	require.Contains(t, b.String(), fmt.Sprintf("bytes kept per step: %.0f\n", float64(onDisk)/float64(rep.RanSteps)))
}
