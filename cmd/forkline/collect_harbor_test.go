package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/registrytest"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/docker"
	"github.com/forkline/forkline/schemas"
)

// harborSuite is the Harbor task suite of the task package's testdata.
const harborSuite = "../../task/testdata/harbor"

// requireDockerDebian skips (or fails, under FORKLINE_REQUIRE) unless the
// engine has forkline/debian: Harbor's verifiers run bash.
func requireDockerDebian(t *testing.T) {
	t.Helper()
	testenv.NeedDockerImage(t, testenv.DockerDebian, docker.ImageDebian)
}

// engineClient is a client of the test's engine, closed when t ends.
func engineClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := docker.Connect(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return cli
}

// freshBuilds removes the images the build contexts make, so a run must
// build them, and removes them again when t ends.
func freshBuilds(t *testing.T, cli *client.Client, contexts ...string) {
	t.Helper()
	for _, c := range contexts {
		abs, err := filepath.Abs(c)
		require.NoError(t, err)
		tag, err := docker.BuildTag(providers.Build{Context: abs})
		require.NoError(t, err)
		registrytest.Remove(t, cli, tag)
		t.Cleanup(func() { registrytest.Remove(t, cli, tag) })
	}
}

// collectOutput runs forkline collect as a process with env added and
// returns its exit code and what it printed.
func collectOutput(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := collectProcess(args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return exitCode(err), string(out)
}

// The Harbor suite collected unchanged on docker: images built once per
// distinct environment, the scripted solve.sh earning what it earns, the
// tests hidden from every episode, the forks of a task sharing its golden.
func TestCollectHarborSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images and starts containers")
	}
	requireDockerDebian(t)
	eng := engineClient(t)
	freshBuilds(t, eng, harborSuite+"/fix-greeting/environment", harborSuite+"/sum-column/environment")
	out := filepath.Join(t.TempDir(), "run")
	code, printed := collectOutput(t, nil, "-tasks", harborSuite, "-provider", "docker", "-replicas", "2", "-repeats", "2",
		"-out", out, "-workdir", t.TempDir())
	require.Equal(t, cli.ExitOK, code, printed)
	require.Contains(t, printed, "docker: 2 images ready", "three tasks, two distinct environments")
	require.Contains(t, printed, "2 built, 0 pulled, 0 already on the engine")
	require.Regexp(t, `docker: build forkline/build:[0-9a-f]+: Step 3/\d+ : COPY data/ /app/data/`, printed, "a progress line per step")
	require.Contains(t, printed, "tasks word-stats ask for a disk size (storage_mb): recorded, not enforced")

	ds, err := shard.Open(out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
	goldens := map[string]map[string]bool{}
	metadata := map[string]string{}
	byID := map[string]schemas.EpisodeRow{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Equal(t, "done", e.ExitReason, e.Detail)
		require.Contains(t, []string{"fork", "fork+standby"}, e.ResetStrategy, "forked, or handed a fork the default standby made ahead")
		require.Equal(t, "image", e.ResetOrigin)
		if goldens[e.TaskID] == nil {
			goldens[e.TaskID] = map[string]bool{}
		}
		goldens[e.TaskID][e.GoldenID] = true
		if e.Metadata != nil {
			metadata[e.TaskID] = *e.Metadata
		}
		byID[e.EpisodeID] = e
	}
	require.Len(t, byID, 6)
	for id, g := range goldens {
		require.Len(t, g, 1, "the forks of %s share one golden checkpoint", id)
	}
	require.Contains(t, metadata["fix-greeting"], `"difficulty":"easy"`)
	require.Contains(t, metadata["fix-greeting"], `"name":"forkline/fix-greeting"`)

	solveSteps := 0
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		var a struct{ Cmd string }
		require.NoError(t, json.Unmarshal([]byte(s.ActionJSON), &a))
		if strings.Contains(a.Cmd, "bash /solution/solve.sh") {
			solveSteps++
			require.Contains(t, s.Output, "no /tests", "episode %s saw /tests", s.EpisodeID)
			require.NotContains(t, s.Output, "saw /tests")
		}
	}
	require.Equal(t, 6, solveSteps)

	want := map[string]float64{"fix-greeting": 1, "sum-column": 1, "word-stats": 0.6667}
	metrics := map[string]float64{}
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		task := byID[r.EpisodeID].TaskID
		require.NotNil(t, r.Value, "%s %s: %s", task, r.Name, r.Detail)
		if r.Name == "verify" {
			require.InDelta(t, want[task], *r.Value, 1e-9, "%s: %s", task, r.Detail)
			require.Equal(t, "bash /tests/test.sh", r.Source)
			continue
		}
		require.Equal(t, "word-stats", task, "only word-stats writes reward.json metrics")
		metrics[r.Name] += *r.Value
	}
	require.Equal(t, map[string]float64{"lines_ok": 2, "words_ok": 2, "chars_ok": 0}, metrics, "each metric a reward row, over 2 episodes")

	// A second run builds nothing.
	again := filepath.Join(t.TempDir(), "again")
	code, printed = collectOutput(t, nil, "-tasks", harborSuite, "-provider", "docker", "-out", again, "-workdir", t.TempDir())
	require.Equal(t, cli.ExitOK, code, printed)
	require.Contains(t, printed, "0 built, 0 pulled, 2 already on the engine")
	require.NotContains(t, printed, ": Step ")

	// On local, whose commands run on the host, a Harbor task is refused
	// before anything runs.
	code, printed = collectOutput(t, nil, "-tasks", harborSuite, "-out", filepath.Join(t.TempDir(), "local"))
	require.Equal(t, cli.ExitBadInput, code, printed)
	require.Contains(t, printed, "needs sandboxes with a filesystem of their own: provider local runs commands on the host")
}

// Tasks that share one Dockerfile context build it once; a second run
// builds nothing.
func TestCollectBuildsASharedContextOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images and starts containers")
	}
	requireDocker(t)
	eng := engineClient(t)
	dir := t.TempDir()
	ctxDir := filepath.Join(dir, "image")
	require.NoError(t, os.MkdirAll(ctxDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM forkline/busybox\nCOPY motd /etc/motd\nRUN echo built > /built\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ctxDir, "motd"), []byte(strings.Repeat("x", 64)+"\n"), 0o644))
	freshBuilds(t, eng, ctxDir)
	var tasks strings.Builder
	for i, name := range []string{"one", "two", "three"} {
		if i > 0 {
			tasks.WriteString("---\n")
		}
		tasks.WriteString("id: " + name + "\ninstruction: check the image\nbuild: {context: image}\nverify: test \"$(cat /built)\" = built\nsolution: [{kind: done}]\n")
	}
	file := filepath.Join(dir, "tasks.yaml")
	require.NoError(t, os.WriteFile(file, []byte(tasks.String()), 0o644))

	// A -workdir that does not exist yet is made; the build's log is there.
	workdir := filepath.Join(t.TempDir(), "not-yet")
	code, printed := collectOutput(t, nil, "-tasks", file, "-provider", "docker", "-out", filepath.Join(dir, "a"), "-workdir", workdir)
	require.Equal(t, cli.ExitOK, code, printed)
	require.Contains(t, printed, "docker: 1 images ready")
	require.Contains(t, printed, "1 built, 0 pulled, 0 already on the engine")
	require.Equal(t, 1, strings.Count(printed, "docker: built forkline/build:"), printed)
	logs, err := filepath.Glob(filepath.Join(workdir, "forkline-build-*.log"))
	require.NoError(t, err)
	require.Len(t, logs, 1, "the build's output streams to a log in -workdir")
	log, err := os.ReadFile(logs[0])
	require.NoError(t, err)
	require.Contains(t, string(log), "RUN echo built > /built", "the log holds the engine's output")
	code, printed = collectOutput(t, nil, "-tasks", file, "-provider", "docker", "-out", filepath.Join(dir, "b"), "-workdir", t.TempDir())
	require.Equal(t, cli.ExitOK, code, printed)
	require.Contains(t, printed, "0 built, 0 pulled, 1 already on the engine")

	ds, err := shard.Open(filepath.Join(dir, "b"))
	require.NoError(t, err)
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		require.Equal(t, 1.0, *r.Value, r.Detail)
	}
}

// A task's image, missing from the engine, is pulled from the registry
// with the credentials of the docker client's configuration, with a
// progress line; wrong credentials are a clear error and exit 2 before any
// episode, leaving no run behind.
func TestCollectPullsTheImage(t *testing.T) {
	if testing.Short() {
		t.Skip("pulls images and starts containers")
	}
	requireDocker(t)
	reg := registrytest.Get(t)
	eng := engineClient(t)
	ref, marker := registrytest.PushUnique(t, eng, reg.Auth, "collect", registrytest.AuthHeader(reg.Auth, reg.User, reg.Password))
	dir := t.TempDir()
	file := filepath.Join(dir, "pull.yaml")
	require.NoError(t, os.WriteFile(file, []byte("id: pull\ninstruction: read the marker\nimage: "+ref+
		"\nverify: test \"$(cat /forkline-marker)\" = "+marker+"\nsolution: [{kind: exec, cmd: cat /forkline-marker}, {kind: done}]\n"), 0o644))

	const wrong = "wrong-password-5a1f"
	bad := []string{"DOCKER_CONFIG=" + registrytest.ConfigWithAuth(t, reg.Auth, reg.User, wrong)}
	out := filepath.Join(dir, "refused")
	code, printed := collectOutput(t, bad, "-tasks", file, "-provider", "docker", "-out", out, "-workdir", t.TempDir())
	require.Equal(t, cli.ExitBadInput, code, printed)
	require.Contains(t, printed, "the images and services the tasks need cannot be had; nothing was collected")
	require.Contains(t, printed, "pulling "+ref+" with the credentials from ")
	require.True(t, strings.HasPrefix(ref, reg.Auth+"/"), "the message names the registry (%s) in the image's reference", reg.Auth)
	require.Contains(t, strings.ToLower(printed), "unauthorized")
	require.NotContains(t, printed, wrong)
	_, err := os.Stat(filepath.Join(out, shard.ManifestFile))
	require.True(t, os.IsNotExist(err), "no run is left behind")

	good := []string{"DOCKER_CONFIG=" + registrytest.ConfigWithAuth(t, reg.Auth, reg.User, reg.Password)}
	out = filepath.Join(dir, "run")
	code, printed = collectOutput(t, good, "-tasks", file, "-provider", "docker", "-out", out, "-workdir", t.TempDir())
	require.Equal(t, cli.ExitOK, code, printed)
	require.Regexp(t, `docker: pulled `+strings.ReplaceAll(ref, ".", `\.`)+`: \d of \d layers, [0-9.]+ (B|kB|MB) of [0-9.]+ (B|kB|MB) in `, printed)
	require.Contains(t, printed, "0 built, 1 pulled, 0 already on the engine")
	require.NotContains(t, printed, reg.Password, "the credential reaches no log line")
	ds, err := shard.Open(out)
	require.NoError(t, err)
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		require.Equal(t, 1.0, *r.Value, r.Detail)
	}
	// The credentials reach no output of the run.
	require.NoError(t, filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		require.NoError(t, err)
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NotContains(t, string(data), reg.Password, p)
		}
		return nil
	}))
}

// Harbor's verifier contract is the only path to a reward: an agent that
// plants /tests/test.sh and a reward in /logs/verifier (both absent during
// the episode) earns nothing, because both are emptied and the task's own
// tests uploaded before bash /tests/test.sh runs.
func TestCollectHarborPlantedRewardEarnsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images and starts containers")
	}
	requireDockerDebian(t)
	suite := filepath.Join(t.TempDir(), "suite")
	task := filepath.Join(suite, "cheat-greeting")
	require.NoError(t, os.CopyFS(task, os.DirFS(harborSuite+"/fix-greeting")))
	const cheat = `#!/bin/bash
if [ -e /tests ]; then echo "saw /tests"; else echo "no /tests"; fi
if [ -e /logs/verifier/reward.txt ]; then echo "saw a reward"; else echo "no reward yet"; fi
mkdir -p /tests /logs/verifier
printf '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n' > /tests/test.sh
echo 1 > /logs/verifier/reward.txt
echo '{"reward": 1}' > /logs/verifier/reward.json
`
	require.NoError(t, os.WriteFile(filepath.Join(task, "solution", "solve.sh"), []byte(cheat), 0o755))
	out := filepath.Join(t.TempDir(), "run")
	code, printed := collectOutput(t, nil, "-tasks", suite, "-provider", "docker", "-repeats", "2",
		"-out", out, "-workdir", t.TempDir())
	require.Equal(t, cli.ExitOK, code, printed)

	ds, err := shard.Open(out)
	require.NoError(t, err)
	cheated := 0
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		if strings.Contains(s.ActionJSON, "bash /solution/solve.sh") {
			cheated++
			require.Equal(t, "no /tests\nno reward yet\n", s.Output, "the episode starts without the tests or a reward")
		}
	}
	require.Equal(t, 2, cheated)
	rewards := 0
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		require.Equal(t, "verify", r.Name, "the planted reward.json's keys are not read: the task's test.sh wrote reward.txt")
		require.NotNil(t, r.Value, r.Detail)
		require.Equal(t, 0.0, *r.Value, "the planted test.sh and reward were emptied before the task's tests ran: %s", r.Detail)
		rewards++
	}
	require.Equal(t, 2, rewards)
}

// A Harbor task with a key forkline does not support is refused when the
// suite is read, naming the file, line and key: nothing runs, no dataset.
func TestCollectHarborRefusesAnUnsupportedKey(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	code, printed := collectOutput(t, nil, "-tasks", "../../task/testdata/harbor-refused", "-provider", "docker", "-out", out, "-workdir", t.TempDir())
	require.Equal(t, cli.ExitBadInput, code, printed)
	require.Regexp(t, `uses-mcp/task\.toml:8:1: field environment\.mcp_servers: MCP servers for the agent are not supported`, printed)
	_, err := os.Stat(filepath.Join(out, shard.ManifestFile))
	require.True(t, os.IsNotExist(err), "no run is left behind")
}
