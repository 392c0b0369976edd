package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/task"
)

// finishRE finds the command a partial run prints: the line after
// "... with:".
var finishRE = regexp.MustCompile(`with:\n  (.+)\n`)

// finishCommand returns the printed command that finishes the run.
func finishCommand(t *testing.T, printed string) string {
	t.Helper()
	m := finishRE.FindStringSubmatch(printed)
	require.NotNil(t, m, "no finish command in:\n%s", printed)
	return m[1]
}

// runShell runs a printed command through a shell from another directory,
// with env added to a clean environment, and returns its exit code.
func runShell(t *testing.T, command string, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", command)
	cmd.Dir = t.TempDir()
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return exitCode(err), out.String()
}

// startMarked starts the collector on the slow task (marked at its second
// step), with its output collected.
func startMarked(t *testing.T, out string, env []string, args ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	spec := filepath.Join(dir, "slow.yaml")
	marked := strings.Replace(slowTask, "- {kind: exec, cmd: sleep 0.25}\n  - {kind: exec, cmd: sleep 0.25}",
		"- {kind: exec, cmd: sleep 0.25}\n  - {kind: exec, cmd: 'touch "+filepath.Join(dir, "started")+"; sleep 0.25'}", 1)
	require.NoError(t, os.WriteFile(spec, []byte(marked), 0o644))
	cmd := collectProcess(append([]string{"-tasks", spec, "-out", out}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var printed syncBuffer
	cmd.Stdout, cmd.Stderr = &printed, &printed
	require.NoError(t, cmd.Start())
	return cmd, spec, &printed
}

// slowIDs derives the planned ids of the slow task for a part of the plan.
func slowIDs(t *testing.T, out string, repeats int, seed int64, part collect.Part) []string {
	t.Helper()
	ds, err := shard.Open(out)
	require.NoError(t, err)
	specs, err := task.DecodeRecords(ds.Manifest().Tasks)
	require.NoError(t, err)
	var ids []string
	for r := range repeats {
		if id := collect.EpisodeID("slow", specs["slow"].Hash(), r, seed); part.Has(id) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// The command an interrupted run prints reproduces every setting that
// matters — provider and its settings, capture, part, seed, repeats,
// replicas, ... — shell-quoted (the output path holds a space and a quote),
// and running it, from another directory and without the array job's
// environment, finishes the run.
func TestPrintedFinishCommandResumesTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the collector for seconds")
	}
	work := t.TempDir()
	out := filepath.Join(t.TempDir(), "run it's here")
	cmd, spec, printed := startMarked(t, out, []string{"JOB_COMPLETION_INDEX=1"},
		"-provider", "local", "-provider-opt", "fork=copy", "-replicas", "2", "-repeats", "12", "-seed", "7",
		"-text", "cap:100000", "-pixels", "none", "-tokens", "drop", "-shard-count", "2", "-standby", "1",
		"-max-creates", "3", "-grace", "0s", "-roll-mb", "8", "-roll-interval", "300ms", "-max-loss", "50%",
		"-workdir", work, "-quiet")
	waitStarted(t, spec, cmd, printed)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, cli.ExitInterrupted, exitCode(cmd.Wait()), printed.String())
	require.Equal(t, shard.StatusPartial, manifestStatus(t, out))

	// The printed command is -resume -out DIR: the rest is the manifest's
	// record of the run's configuration.
	finish := finishCommand(t, printed.String())
	require.Regexp(t, ` collect -resume -out '`+regexp.QuoteMeta(strings.ReplaceAll(out, "'", `'\''`))+`' -quiet$`, finish)
	recorded := planConfig(t, out)
	for name, want := range map[string][]string{"provider": {"local"}, "provider-opt": {"fork=copy"}, "replicas": {"2"}, "repeats": {"12"},
		"seed": {"7"}, "policy": {"script"}, "text": {"cap:100000"}, "pixels": {"none"}, "a11y": {"full"}, "tokens": {"drop"},
		"shard": {"1/2"}, "standby": {"1"}, "max-creates": {"3"}, "max-loss": {"50%"}, "grace": {"0s"}, "roll-mb": {"8"},
		"roll-interval": {"300ms"}, "workdir": {work}, "tasks": {spec}} {
		require.Equal(t, want, recorded[name], "plan.config %s", name)
	}
	require.NotContains(t, recorded, "shard-count", "-shard-count is recorded as the -shard i/n it stood for")

	code, resumed := runShell(t, finish)
	require.Equal(t, cli.ExitOK, code, resumed)
	require.Equal(t, shard.StatusComplete, manifestStatus(t, out))
	part := collect.Part{Index: 1, Count: 2}
	got, _ := keptIDs(t, out)
	require.Equal(t, slowIDs(t, out, 12, 7, part), got, "exactly the planned episodes of part 1/2, none twice")
	ds, err := shard.Open(out)
	require.NoError(t, err)
	m := ds.Manifest()
	var prov struct {
		Name   string
		Params map[string]string
	}
	require.NoError(t, json.Unmarshal(m.Provider, &prov))
	require.Equal(t, "local", prov.Name)
	require.Equal(t, map[string]string{"fork": "copy"}, prov.Params)
	var capt map[string]string
	require.NoError(t, json.Unmarshal(m.Capture, &capt))
	require.Equal(t, map[string]string{"text": "cap:100000", "pixels": "none", "a11y": "full", "tokens": "drop"}, capt)
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Equal(t, "done", e.ExitReason)
		require.Equal(t, "copy", e.ResetOrigin, "every episode, before and after the resume, forked by copy")
		require.EqualValues(t, 7, e.Seed)
	}
	left, err := os.ReadDir(work)
	require.NoError(t, err)
	require.Empty(t, left, "sandboxes left in the workdir")
}

// A second signal exits at once; the output says that the sandboxes and
// their mounts stay until the next run's sweep, and prints the command
// that finishes the run, which sweeps them and completes it.
func TestDoubleSignalSaysSandboxesStayUntilTheSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the collector for seconds")
	}
	work := t.TempDir()
	out := filepath.Join(t.TempDir(), "run")
	cmd, spec, printed := startMarked(t, out, nil, "-replicas", "2", "-repeats", "12", "-grace", "1m", "-workdir", work, "-quiet")
	waitStarted(t, spec, cmd, printed)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return strings.Contains(printed.String(), "signal again to stop at once") },
		time.Minute, 10*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, cli.ExitInterrupted, exitCode(cmd.Wait()))
	said := printed.String()
	require.Contains(t, said, "second signal: exiting now")
	require.Contains(t, said, "this run's sandboxes stay behind (local workspaces and their overlay mounts under "+work)
	require.Contains(t, said, "the next collect run sweeps them at start-up")
	left, err := os.ReadDir(work)
	require.NoError(t, err)
	require.NotEmpty(t, left, "the sandboxes of the killed run are still there")

	code, resumed := runShell(t, finishCommand(t, said))
	require.Equal(t, cli.ExitOK, code, resumed)
	require.Equal(t, shard.StatusComplete, manifestStatus(t, out))
	got, _ := keptIDs(t, out)
	require.Equal(t, expectedIDs(t, out), got)
	left, err = os.ReadDir(work)
	require.NoError(t, err)
	require.Empty(t, left, "the sweep removed what the killed run left")
}

// A run where nothing worked exits 3 (it is complete: every planned
// episode is kept) and reports the one error once, with a count.
func TestEveryEpisodeLostExitsThree(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "broken.yaml")
	require.NoError(t, os.WriteFile(spec, []byte("id: broken\ninstruction: never starts\nsetup:\n  - echo 'no such database' >&2; exit 7\nsolution:\n  - {kind: done}\n"), 0o644))
	out := filepath.Join(t.TempDir(), "run")
	// Without -quiet: the warnings are what is checked (-quiet leaves
	// errors only).
	cmd := collectProcess("-tasks", spec, "-out", out, "-repeats", "6", "-workdir", t.TempDir())
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.Equal(t, cli.ExitLosses, exitCode(cmd.Run()), stderr.String())
	require.Equal(t, shard.StatusComplete, manifestStatus(t, out))
	require.Contains(t, stdout.String(), "6 episodes: env_error: golden build failed: pool: golden for broken@")
	require.Equal(t, 1, strings.Count(stderr.String(), `msg="episode `), "logged once, not per episode:\n%s", stderr.String())
	require.Contains(t, stderr.String(), `msg="6 episodes: env_error: `)
	require.Contains(t, stderr.String(), "every episode is a scaffold loss")
	require.NotContains(t, stderr.String(), "with:\n", "a complete run has nothing to finish")
}

// shellQuote gives the shell back exactly the string, whatever it holds.
func TestShellQuoteRoundTrips(t *testing.T) {
	for _, s := range []string{"plain", "", "with space", "it's", `back\slash`, "$HOME", "`id`", "a\nb", "*?[x]", "-x=y,z", "tab\there", `"dq"`, "semi;colon|pipe&"} {
		out, err := exec.Command("sh", "-c", "printf '%s' "+shellQuote(s)).Output()
		require.NoError(t, err, s)
		require.Equal(t, s, string(out))
	}
}
