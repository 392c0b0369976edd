package main

import (
	"path/filepath"
	"testing"

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
		require.Equal(t, "fork", e.ResetStrategy)
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
