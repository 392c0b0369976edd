package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/replay"
)

// requireDocker skips (or, under FORKLINE_REQUIRE=docker, fails) when no
// engine answers or the base image is missing.
func requireDocker(t *testing.T) {
	t.Helper()
	testenv.NeedDocker(t)
}

// labelled lists the containers and images carrying forkline.run=runID.
func labelled(t *testing.T, runID string) []string {
	t.Helper()
	var all []string
	for _, args := range [][]string{
		{"ps", "-aq", "--filter", "label=forkline.run=" + runID},
		{"images", "-q", "--filter", "label=forkline.run=" + runID},
	} {
		out, err := exec.Command("docker", args...).Output()
		require.NoError(t, err)
		all = append(all, strings.Fields(string(out))...)
	}
	return all
}

func TestDockerCollectCompletesAndLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	requireDocker(t)
	out := filepath.Join(t.TempDir(), "run")
	cmd := collectProcess("-provider", "docker", "-tasks", "../../examples/tasks", "-replicas", "4", "-repeats", "2", "-out", out, "-quiet")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	require.Equal(t, cli.ExitOK, exitCode(cmd.Run()))
	ds, err := shard.Open(out)
	require.NoError(t, err)
	m := ds.Manifest()
	require.Equal(t, shard.StatusComplete, m.Status)
	require.Contains(t, string(m.Provider), `"docker"`)
	n := 0
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Equal(t, "done", e.ExitReason, e.Detail)
		require.Equal(t, "image", e.ResetOrigin)
		n++
	}
	require.Equal(t, 6, n)
	require.Empty(t, labelled(t, m.RunID), "containers or images of the run are left")

	// The same episodes replay identically on the local provider...
	rep, err := replay.Run(context.Background(), replay.Config{In: out, Provider: "local", Mode: replay.Normalized, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, 6, rep.Identical, "%+v", rep.Episodes)

	// ...and episodes collected on local replay identically on docker.
	local := filepath.Join(t.TempDir(), "local")
	cmd = collectProcess("-tasks", "../../examples/tasks", "-replicas", "4", "-repeats", "2", "-out", local, "-workdir", t.TempDir(), "-quiet")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	require.Equal(t, cli.ExitOK, exitCode(cmd.Run()))
	rep, err = replay.Run(context.Background(), replay.Config{In: local, Provider: "docker", Mode: replay.Normalized})
	require.NoError(t, err)
	require.Equal(t, 6, rep.Identical, "%+v", rep.Episodes)
}

func TestDockerSIGKILLedCollectorIsSweptByTheNextRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	requireDocker(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "slow.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(slowTask), 0o644))
	out := filepath.Join(dir, "run")
	cmd := collectProcess("-provider", "docker", "-tasks", spec, "-out", out, "-replicas", "2", "-repeats", "12", "-quiet")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	require.NoError(t, cmd.Start())

	// Wait until the run has containers, then kill the collector outright.
	var runID string
	require.Eventually(t, func() bool {
		ds, err := shard.Open(out)
		if err != nil {
			return false
		}
		runID = ds.Manifest().RunID
		return len(labelled(t, runID)) > 0
	}, 60*time.Second, 100*time.Millisecond, "the collector never started a container")
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	require.NotEmpty(t, labelled(t, runID), "a SIGKILLed collector cannot clean up after itself")

	// The next collector sweeps what the dead one left, then finishes the run.
	resume := collectProcess("-provider", "docker", "-tasks", spec, "-out", out, "-replicas", "2", "-repeats", "12", "-quiet", "-resume")
	resume.Stdout, resume.Stderr = os.Stdout, os.Stderr
	require.Equal(t, cli.ExitOK, exitCode(resume.Run()))
	require.Empty(t, labelled(t, runID), "labelled objects survive the sweep")
	got, _ := keptIDs(t, out)
	require.Equal(t, expectedIDs(t, out), got)
}

func TestDockerWebTasksRunChromiumInContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers with Chromium")
	}
	requireDocker(t)
	testenv.NeedDockerImage(t, testenv.DockerChromium, "forkline/chromium")
	out := filepath.Join(t.TempDir(), "run")
	cmd := collectProcess("-provider", "docker", "-provider-opt", "image=forkline/chromium",
		"-tasks", "../../examples/tasks/web", "-replicas", "2", "-repeats", "2", "-out", out, "-quiet")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	require.Equal(t, cli.ExitOK, exitCode(cmd.Run()))
	ds, err := shard.Open(out)
	require.NoError(t, err)
	shots := 0
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		if s.ScreenHash != "" {
			shots++
			png, err := ds.Blob(s.ScreenHash)
			require.NoError(t, err)
			require.Equal(t, []byte("\x89PNG"), png[:4])
		}
	}
	require.Positive(t, shots, "the container's Chromium took screenshots")
	rewards := 0
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		require.NotNil(t, r.Value)
		require.Equal(t, 1.0, *r.Value, r.Detail)
		rewards++
	}
	require.Equal(t, 4, rewards)
	require.Empty(t, labelled(t, ds.Manifest().RunID))
}

// The case: a Docker run, interrupted, is finished with the command
// the collector prints. It used to omit -provider docker, so the run went
// on on the host. Now the command carries the provider and its settings,
// every episode ran in Docker, and a resume on another provider or image is
// refused without touching the dataset.
func TestDockerInterruptedRunFinishesOnDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	requireDocker(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "slow.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(slowTask), 0o644))
	out := filepath.Join(dir, "run")
	cmd := collectProcess("-provider", "docker", "-provider-opt", "image=forkline/busybox", "-tasks", spec, "-out", out,
		"-replicas", "2", "-repeats", "12", "-roll-interval", "200ms", "-grace", "0s", "-quiet")
	var printed syncBuffer
	cmd.Stdout, cmd.Stderr = &printed, &printed
	require.NoError(t, cmd.Start())
	// Stop once an episode is kept.
	require.Eventually(t, func() bool {
		ds, err := shard.Open(out)
		return err == nil && ds.Manifest().Counts["episodes"] > 0
	}, 2*time.Minute, 50*time.Millisecond, "no episode was kept")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, cli.ExitInterrupted, exitCode(cmd.Wait()), printed.String())
	finish := finishCommand(t, printed.String())
	require.True(t, strings.HasSuffix(finish, " collect -resume -out "+out+" -quiet"), finish)
	rec := planConfig(t, out)
	require.Equal(t, []string{"docker"}, rec["provider"])
	require.Equal(t, []string{"image=forkline/busybox"}, rec["provider-opt"], "the recorded configuration the printed command reads")

	// Resumes that would change what a sandbox is are refused, untouched.
	before := treeHash(t, out)
	for _, wrong := range [][]string{
		{"-provider", "local"},
		{"-provider", "docker", "-provider-opt", "image=forkline/chromium"},
		{"-provider", "docker", "-provider-opt", "image=forkline/busybox", "-provider-opt", "network=host"},
		{"-provider", "docker", "-provider-opt", "image=forkline/busybox", "-provider-opt", "init=off"},
	} {
		code, said := runCaptured(t, append([]string{"-tasks", spec, "-out", out, "-replicas", "2", "-repeats", "12", "-quiet", "-resume"}, wrong...)...)
		require.Equal(t, cli.ExitBadInput, code, said)
		require.Contains(t, said, "the run used")
		require.Equal(t, before, treeHash(t, out), "refused %v changed the dataset", wrong)
	}

	// Settings that do not change a sandbox may differ: the pool's standby,
	// the provider's sweep. A -provider-opt given beside the printed
	// command adds its key to the recorded ones (the image stays).
	code, resumed := runShell(t, finish+" -standby 1 -provider-opt sweep=off")
	require.Equal(t, cli.ExitOK, code, resumed)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
	require.Contains(t, string(ds.Manifest().Provider), `"image": "forkline/busybox"`, "the run keeps its own provider entry")
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Equal(t, "docker", e.Provider, "every episode ran in Docker")
		require.Equal(t, "done", e.ExitReason, e.Detail)
	}
	got, _ := keptIDs(t, out)
	require.Equal(t, expectedIDs(t, out), got)
	require.Empty(t, labelled(t, ds.Manifest().RunID))
}
