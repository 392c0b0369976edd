package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
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

	runID := requireForkedAndSolved(t, out, 3)
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
	return copyTaskFrom(t, composeSuite, name, edit)
}

// copyTaskFrom is copyTask for a task of another suite.
func copyTaskFrom(t *testing.T, from, name string, edit func(string) string) string {
	t.Helper()
	suite := t.TempDir()
	src := filepath.Join(from, name)
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

// composeBuildSuite holds a Harbor compose task whose service is built from
// the task's Dockerfile and seeded from the task's files.
const composeBuildSuite = "../../task/testdata/harbor-compose-build"

// seededKVTag is the tag of the image seeded-kv's service builds.
func seededKVTag(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(composeBuildSuite, "seeded-kv", "environment", "kv"))
	require.NoError(t, err)
	tag, err := docker.BuildTag(providers.Build{Context: dir, Args: map[string]string{"VERSION": "v7"}})
	require.NoError(t, err)
	return tag
}

// A compose task whose service is built from the task's Dockerfile (a build
// argument in it) and reads its first counter from a folder of the task
// bound read-only: the build is made once, before any episode, and a second
// run makes none; the seed is copied into the golden's service, so each
// fork has its own counter (41 + 1 = 42 in every episode); nothing of the
// run is left, and the built image is kept, as a task's built images are.
func TestCollectHarborComposeBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image and starts containers")
	}
	requireDockerDebian(t)
	testenv.NeedDockerImage(t, testenv.Docker, docker.ImageBusybox)
	eng := engineClient(t)
	tag := seededKVTag(t)
	remove := func() {
		_, err := eng.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing %s: %v", tag, err)
		}
	}
	remove()
	t.Cleanup(remove)
	out := filepath.Join(t.TempDir(), "run")
	code, printed := collectOutput(t, nil, "-tasks", composeBuildSuite, "-provider", "docker", "-replicas", "2", "-repeats", "3",
		"-out", out, "-workdir", t.TempDir())
	require.Equal(t, cli.ExitOK, code, printed)
	require.Contains(t, printed, "1 built, 0 pulled, 1 already on the engine", "kv's image built once")

	runID := requireForkedAndSolved(t, out, 3)
	require.Empty(t, leftovers(t, eng, docker.LabelRun+"="+runID), "the run's containers, networks and images are gone")
	ins, err := eng.ImageInspect(t.Context(), tag)
	require.NoError(t, err, "the built image is kept for later runs")
	require.Equal(t, "build", ins.Config.Labels[docker.LabelImage])
	require.Empty(t, ins.Config.Labels[docker.LabelRun], "a built image belongs to no run")

	// A second run builds nothing.
	out2 := filepath.Join(t.TempDir(), "run")
	code, printed = collectOutput(t, nil, "-tasks", composeBuildSuite, "-provider", "docker", "-repeats", "1",
		"-out", out2, "-workdir", t.TempDir())
	require.Equal(t, cli.ExitOK, code, printed)
	require.Contains(t, printed, "0 built, 0 pulled, 2 already on the engine")
	ds, err := shard.Open(out2)
	require.NoError(t, err)
	require.Empty(t, leftovers(t, eng, docker.LabelRun+"="+ds.Manifest().RunID))
}

// A compose task whose build or volumes would reach outside the task, or
// whose service's image declares a VOLUME (whose contents a checkpoint
// would not carry), is refused before any episode, naming the file, line
// and field (or the service), and nothing is written.
func TestCollectHarborComposeBuildBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image")
	}
	requireDockerDebian(t)
	testenv.NeedDockerImage(t, testenv.Docker, docker.ImageBusybox)
	eng := engineClient(t)
	for _, c := range []struct {
		name  string
		edit  func(string) string
		setup func(t *testing.T, task string)
		want  []string
	}{
		{"context outside", func(s string) string {
			return strings.Replace(s, "context: ./kv", "context: ../..", 1)
		}, nil, []string{"docker-compose.yaml:9:7: field services.kv.build.context:", "is outside the task's folder"}},
		{"context linked out", func(s string) string {
			return strings.Replace(s, "context: ./kv", "context: ./out", 1)
		}, func(t *testing.T, task string) {
			require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(task, "environment", "out")))
		}, []string{"docker-compose.yaml:9:7: field services.kv.build.context: environment/out leads outside the task's folder (a symlink"}},
		{"host path volume", func(s string) string {
			return strings.Replace(s, "./seed:/var/lib/kv/seed:ro", "/etc:/var/lib/kv/seed:ro", 1)
		}, nil, []string{"docker-compose.yaml:13:9: field services.kv.volumes.0: /etc is outside the task's folder"}},
		{"volume linked out", nil, func(t *testing.T, task string) {
			seed := filepath.Join(task, "environment", "seed")
			require.NoError(t, os.RemoveAll(seed))
			require.NoError(t, os.Symlink(t.TempDir(), seed))
		}, []string{"docker-compose.yaml:13:9: field services.kv.volumes.0: environment/seed leads outside the task's folder (a symlink"}},
		{"build secrets", func(s string) string {
			s = strings.Replace(s, "      args:\n", "      secrets: [token]\n      args:\n", 1)
			return s + "secrets:\n  token:\n    file: /etc/hostname\n"
		}, nil, []string{"docker-compose.yaml:10:7: field services.kv.build.secrets: not supported: build secrets are not supported"}},
		{"an image with a VOLUME", nil, func(t *testing.T, task string) {
			f := filepath.Join(task, "environment", "kv", "Dockerfile")
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(f, append(b, "VOLUME /data\n"...), 0o644))
			tag, err := docker.BuildTag(providers.Build{Context: filepath.Dir(f), Args: map[string]string{"VERSION": "v7"}})
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = eng.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true}) })
		}, []string{"service kv: its image forkline/build:", "declares VOLUME /data", "does not carry a volume's contents"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			edit := c.edit
			if edit == nil {
				edit = func(s string) string { return s }
			}
			suite := copyTaskFrom(t, composeBuildSuite, "seeded-kv", edit)
			if c.setup != nil {
				c.setup(t, filepath.Join(suite, "seeded-kv"))
			}
			out := filepath.Join(t.TempDir(), "run")
			code, printed := collectOutput(t, nil, "-tasks", suite, "-provider", "docker", "-out", out, "-workdir", t.TempDir())
			require.Equal(t, cli.ExitBadInput, code, printed)
			for _, w := range c.want {
				require.Contains(t, printed, w)
			}
			require.NoDirExists(t, out)
		})
	}
}

// requireForkedAndSolved checks the complete dataset in out: n episodes,
// each done, forked (or handed a fork the default standby made ahead), and
// rewarded 1 by its verifier; it returns the run's id.
func requireForkedAndSolved(t *testing.T, out string, n int) string {
	t.Helper()
	ds, err := shard.Open(out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
	episodes := map[string]bool{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Equal(t, "done", e.ExitReason, e.Detail)
		require.Contains(t, []string{"fork", "fork+standby"}, e.ResetStrategy, "forked, or handed a fork the default standby made ahead")
		episodes[e.EpisodeID] = true
	}
	require.Len(t, episodes, n)
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
	require.Equal(t, n, rewards)
	return ds.Manifest().RunID
}
