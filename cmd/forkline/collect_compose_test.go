package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers/docker"
)

// composeSuite holds Harbor tasks whose environment is a compose file.
const composeSuite = "../../task/testdata/harbor-compose"

// leftovers lists the containers, networks and images carrying label.
func leftovers(t *testing.T, eng *client.Client, label string) []string {
	t.Helper()
	var out []string
	f := make(client.Filters).Add("label", label)
	cl, err := eng.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: f})
	require.NoError(t, err)
	for _, c := range cl.Items {
		out = append(out, "container "+c.ID[:12])
	}
	nl, err := eng.NetworkList(t.Context(), client.NetworkListOptions{Filters: f})
	require.NoError(t, err)
	for _, n := range nl.Items {
		out = append(out, "network "+n.Name)
	}
	il, err := eng.ImageList(t.Context(), client.ImageListOptions{All: true, Filters: f})
	require.NoError(t, err)
	for _, im := range il.Items {
		out = append(out, "image "+im.ID)
	}
	return out
}

// A Harbor compose task collected on docker with its solve.sh: the services
// start once for the golden, every fork starts them again from their
// committed images on a network of its own, so each episode's kv counter
// is its own (41 + 1 = 42 in every one: a write another fork made would
// show), and nothing the run made is left on the engine.
func TestCollectHarborCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	requireDockerDebian(t)
	testenv.NeedDockerImage(t, testenv.Docker, docker.ImageBusybox)
	eng := engineClient(t)
	out := filepath.Join(t.TempDir(), "run")
	code, printed := collectOutput(t, nil, "-tasks", composeSuite, "-provider", "docker", "-replicas", "2", "-repeats", "3",
		"-out", out, "-workdir", t.TempDir())
	require.Equal(t, cli.ExitOK, code, printed)

	ds, err := shard.Open(out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
	runID := ds.Manifest().RunID
	episodes := map[string]bool{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Equal(t, "done", e.ExitReason, e.Detail)
		require.Contains(t, []string{"fork", "fork+standby"}, e.ResetStrategy, "forked, or handed a fork the default standby made ahead")
		episodes[e.EpisodeID] = true
	}
	require.Len(t, episodes, 3)
	rewards := 0
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		if r.Name != "verify" {
			continue
		}
		require.NotNil(t, r.Value, r.Detail)
		require.Equal(t, 1.0, *r.Value, "episode %s: %s", r.EpisodeID, r.Detail)
		rewards++
	}
	require.Equal(t, 3, rewards)
	require.Empty(t, leftovers(t, eng, docker.LabelRun+"="+runID), "the run's containers, networks and images are gone")

	// local and gvisor refuse it before anything runs, naming docker.
	for _, prov := range []string{"local"} {
		dir := filepath.Join(t.TempDir(), prov)
		code, printed = collectOutput(t, nil, "-tasks", composeSuite, "-provider", prov, "-out", dir)
		require.Equal(t, cli.ExitBadInput, code, printed)
		require.Contains(t, printed, "services kv, audit")
		require.Contains(t, printed, "docker")
		require.NoDirExists(t, dir)
	}
}

// copyTask copies a task folder of the compose suite into a temporary
// suite, with edit applied to its compose file.
func copyTask(t *testing.T, name string, edit func(string) string) string {
	t.Helper()
	suite := t.TempDir()
	src := filepath.Join(composeSuite, name)
	require.NoError(t, os.CopyFS(filepath.Join(suite, name), os.DirFS(src)))
	f := filepath.Join(suite, name, "environment", "docker-compose.yaml")
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(f, []byte(edit(string(b))), 0o644))
	return suite
}

// A compose task the run cannot start is refused before any episode, and
// no dataset is written: a service that never gets healthy, an image the
// engine does not have, a key compose does not know.
func TestCollectHarborComposeBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	requireDockerDebian(t)
	testenv.NeedDockerImage(t, testenv.Docker, docker.ImageBusybox)
	for _, c := range []struct {
		name string
		edit func(string) string
		args []string
		want []string
	}{
		{"never healthy", func(s string) string {
			s = strings.Replace(s, "grep -q '[0-9]'", "grep -q never", 1)
			return strings.Replace(s, "retries: 30", "retries: 2", 1)
		}, nil, []string{"nothing was collected", "service kv is unhealthy"}},
		{"missing image", func(s string) string {
			return strings.Replace(s, "image: forkline/busybox\n    depends_on", "image: forkline/no-such-image:1\n    depends_on", 1)
		}, []string{"-provider-opt", "pull=never"}, []string{"nothing was collected", `"forkline/no-such-image:1"`, "forbids pulling it"}},
		{"unknown key", func(s string) string {
			return strings.Replace(s, "  audit:\n", "  audit:\n    colour: blue\n", 1)
		}, nil, []string{"docker-compose.yaml:28:5: field services.audit.colour: not a key of the compose specification"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			suite := copyTask(t, "kv-counter", c.edit)
			out := filepath.Join(t.TempDir(), "run")
			args := append([]string{"-tasks", suite, "-provider", "docker", "-out", out, "-workdir", t.TempDir()}, c.args...)
			code, printed := collectOutput(t, nil, args...)
			require.Equal(t, cli.ExitBadInput, code, printed)
			for _, w := range c.want {
				require.Contains(t, printed, w)
			}
			require.NoDirExists(t, out)
		})
	}
}

// A collect of a compose task killed (SIGKILL: no cleanup of its own) while
// forks run leaves its services, networks and checkpoint images; the
// -resume that finishes the run sweeps them (their owner is dead) and
// leaves nothing of its own.
func TestCollectHarborComposeKillResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	requireDockerDebian(t)
	testenv.NeedDockerImage(t, testenv.Docker, docker.ImageBusybox)
	eng := engineClient(t)
	out := filepath.Join(t.TempDir(), "run")
	work := t.TempDir()
	args := []string{"-tasks", composeSuite, "-provider", "docker", "-replicas", "2", "-repeats", "4", "-out", out, "-workdir", work, "-quiet"}
	cmd := collectProcess(args...)
	require.NoError(t, cmd.Start())
	host, err := os.Hostname()
	require.NoError(t, err)
	owner := docker.LabelOwner + "=" + strconv.Itoa(cmd.Process.Pid) + "@" + host
	t.Cleanup(func() { _, _ = docker.Sweep(context.Background(), eng, docker.SweepOptions{DeadOwners: true}) })
	// Wait for a fork's services: containers of a service labelled with a
	// checkpoint (the golden's).
	require.Eventually(t, func() bool {
		f := make(client.Filters).Add("label", owner).Add("label", docker.LabelService).Add("label", docker.LabelCheckpoint)
		cl, err := eng.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: f})
		return err == nil && len(cl.Items) > 0
	}, 3*time.Minute, 50*time.Millisecond, "no fork started its services")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	left := leftovers(t, eng, owner)
	require.NotEmpty(t, left, "a killed run leaves its objects")
	require.Contains(t, strings.Join(left, " "), "network forkline-", "and its networks")

	code, printed := collectOutput(t, nil, append(args, "-resume")...)
	require.Equal(t, cli.ExitOK, code, printed)
	require.Empty(t, leftovers(t, eng, owner), "the resume swept what the killed run left")
	ds, err := shard.Open(out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
	n := 0
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		if r.Name == "verify" {
			require.NotNil(t, r.Value, r.Detail)
			require.Equal(t, 1.0, *r.Value, r.Detail)
			n++
		}
	}
	require.Equal(t, 4, n, "every episode once, none twice")
	require.Empty(t, leftovers(t, eng, docker.LabelRun+"="+ds.Manifest().RunID))
}
