package docker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
)

// A runtime the engine does not have is refused by New, listing the ones
// it has and how to register one.
func TestRuntimeUnknown(t *testing.T) {
	engine(t)
	_, err := New(t.Context(), providers.Options{Params: map[string]string{ParamRuntime: "forkline-no-such-runtime"}})
	require.ErrorContains(t, err, "param runtime=forkline-no-such-runtime: the engine has no such runtime (it has: ")
	require.ErrorContains(t, err, "runc")
	require.ErrorContains(t, err, "dockerd --add-runtime")
}

// With runtime=runsc (an engine with gVisor registered as "runsc"), the
// containers run on gVisor's kernel, and the docker provider still forks
// files only: a fork has the checkpointed files, not its processes.
func TestRuntimeRunsc(t *testing.T) {
	cli := engine(t)
	info, err := cli.Info(t.Context(), client.InfoOptions{})
	require.NoError(t, err)
	testenv.Need(t, testenv.DockerRunsc, func() error {
		if _, ok := info.Info.Runtimes["runsc"]; !ok {
			return errors.New("the engine has no runtime named runsc (start dockerd with --add-runtime runsc=/usr/bin/runsc; .ci/docker-up.sh does when runsc is installed)")
		}
		return nil
	})
	p := open(t, map[string]string{ParamRuntime: "runsc"})
	sb, err := p.Create(t.Context(), providers.Spec{Files: map[string][]byte{"f.txt": []byte("file")}})
	require.NoError(t, err)
	defer sb.Close(context.Background())
	require.Equal(t, "runsc", inspectHost(t, p, sb).Runtime)
	obs := sh(t, sb, "dmesg")
	require.Contains(t, obs.Text(), "gVisor", "the kernel the container runs on is gVisor's: %s", obs.Text())
	sh(t, sb, "sleep 4321 >/dev/null 2>&1 & echo made > made.txt")
	cp, err := p.Checkpoint(t.Context(), sb, "runsc")
	require.NoError(t, err)
	defer p.Release(context.Background(), cp)
	f, err := p.Fork(t.Context(), cp)
	require.NoError(t, err)
	defer f.Close(context.Background())
	require.Equal(t, "file\nmade\n", sh(t, f, "cat f.txt; echo; cat made.txt").Text(), "the fork has the files")
	ps := sh(t, f, "ps -o args").Text()
	require.False(t, strings.Contains(ps, "sleep 4321"), "and not the processes (docker commits files): %q", ps)
	require.Contains(t, sh(t, sb, "ps -o args").Text(), "sleep 4321", "the original still runs its process")

	if slices.Contains(info.Info.Runtimes["runsc"].Args, "--network=none") {
		// Registered with no network (see docs/providers.md): another
		// network is refused, never silently dropped.
		err := p.Prepare(t.Context(), []providers.Spec{{Resources: providers.Resources{Network: "host"}}}, nil)
		require.ErrorIs(t, err, providers.ErrCannotPrepare)
		require.ErrorContains(t, err, "with --network=none")
		_, err = p.Create(t.Context(), providers.Spec{Resources: providers.Resources{Network: "host"}})
		require.ErrorContains(t, err, "with --network=none")
	}
}
