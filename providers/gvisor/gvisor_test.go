package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/providertest"
	"github.com/forkline/forkline/runtime"
)

// needRunsc skips (or, under FORKLINE_REQUIRE=gvisor, fails) a test on a
// host without runsc, or not running as root (runsc needs it here), or
// when FORKLINE_HIDE hides gvisor. The probe is the provider's own
// findRunsc, so the reason is the error a user would see.
func needRunsc(t testing.TB) {
	t.Helper()
	testenv.Need(t, testenv.Gvisor, func() error {
		if _, err := findRunsc(""); err != nil {
			return err
		}
		if uid := os.Geteuid(); uid != 0 {
			return fmt.Errorf("runsc runs sandboxes as root here, and the tests run as uid %d", uid)
		}
		return nil
	})
}

// open opens a provider on forkline/busybox (through the Docker engine
// when one has it, else a rootfs directory made from the host's busybox)
// that is closed when t ends.
func open(t testing.TB, params map[string]string) *Provider {
	t.Helper()
	needRunsc(t)
	ps := map[string]string{}
	for k, v := range params {
		ps[k] = v
	}
	if _, ok := ps[ParamImage]; !ok {
		if _, ok := ps[ParamRootfs]; !ok {
			ps[ParamRootfs] = busyboxRootfs(t)
		}
	}
	p, err := New(context.Background(), providers.Options{Dir: t.TempDir(), Params: ps})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providers.Provider { return open(t, nil) })
}

// sh runs cmd in sb and returns the observation; an infrastructure error
// fails t.
func sh(t testing.TB, sb providers.Sandbox, cmd string) runtime.Observation {
	t.Helper()
	obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec, Cmd: cmd})
	require.NoError(t, err, "exec %q", cmd)
	return obs
}

func create(t testing.TB, p *Provider, spec providers.Spec) providers.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	return sb
}

func TestRegistered(t *testing.T) {
	require.Contains(t, providers.Names(), Name)
}

// Bad params fail New, naming the param and what would do; nothing is left
// in Options.Dir.
func TestParams(t *testing.T) {
	needRunsc(t)
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	empty := t.TempDir()
	cases := []struct {
		name   string
		params map[string]string
		want   string
	}{
		{"unknown", map[string]string{"imagee": "x"}, `providers: gvisor has no setting "imagee" (known: boot_timeout, cpus, debug_log, goldens, image, memory_mb, network, pids, platform, rootfs, runsc, sweep)`},
		{"rootfsFile", map[string]string{ParamRootfs: file}, "is not a directory"},
		{"rootfsMissing", map[string]string{ParamRootfs: filepath.Join(empty, "nope")}, "no such file or directory"},
		{"rootfsWithoutSh", map[string]string{ParamRootfs: empty}, "holds no bin/sh"},
		{"rootfsAndImage", map[string]string{ParamRootfs: empty, ParamImage: "forkline/busybox"}, "give one"},
		{"network", map[string]string{ParamNetwork: "bridge"}, `param network="bridge" (known: host, none)`},
		{"platform", map[string]string{ParamPlatform: "systrap"}, `param platform="systrap" (known: kvm, ptrace)`},
		{"pids", map[string]string{ParamPids: "0"}, "there is no unlimited"},
		{"bootTimeout", map[string]string{ParamBootTimeout: "soon"}, "want a duration"},
		{"runscMissing", map[string]string{ParamRunsc: "/nonexistent/runsc"}, "apt-get install runsc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := New(t.Context(), providers.Options{Dir: dir, Params: c.params})
			require.ErrorContains(t, err, c.want)
			ents, _ := os.ReadDir(dir)
			require.Empty(t, ents, "a refused New leaves nothing")
		})
	}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		_, err := New(t.Context(), providers.Options{Dir: t.TempDir(), Params: map[string]string{ParamPlatform: PlatformKVM}})
		require.ErrorContains(t, err, "needs /dev/kvm")
	}
}

// A sandbox deleted behind the provider's back is ErrSandboxDied for every
// action, not an observation, and Close still succeeds.
func TestDeletedBehindOurBack(t *testing.T) {
	p := open(t, nil)
	sb := create(t, p, providers.Spec{})
	require.NoError(t, p.rs.deleteContainer(t.Context(), sb.(*sandbox).cidNow()))
	for _, a := range []runtime.Action{
		{Kind: runtime.ActExec, Cmd: "true"},
		{Kind: runtime.ActReadFile, Path: "f"},
		{Kind: runtime.ActWriteFile, Path: "f", Content: "x"},
	} {
		_, err := sb.Act(t.Context(), a)
		require.ErrorIs(t, err, ErrSandboxDied, "%s", a.Kind)
	}
	require.NoError(t, sb.Close(t.Context()))
}

// Checkpoint details: the image's size and how it was made; a checkpoint
// of a sandbox that has not acted since its last one is a link of the same
// image; the checkpointed sandbox is restored, with its id, at its next
// action; Release deletes the image and forks go on without it; a fork of
// a released checkpoint fails by name; a corrupt image fails the fork
// with runsc's reason and leaves nothing.
func TestCheckpointDetails(t *testing.T) {
	p := open(t, nil)
	sb := create(t, p, providers.Spec{})
	sh(t, sb, "echo one > f")
	cp, err := p.Checkpoint(t.Context(), sb, "first")
	require.NoError(t, err)
	require.Equal(t, MethodCheckpoint, cp.Method)
	require.Positive(t, cp.Bytes)
	require.Positive(t, cp.Took)
	again, err := p.Checkpoint(t.Context(), sb, "again")
	require.NoError(t, err)
	require.Equal(t, MethodLink, again.Method, "nothing ran since: the same image")
	require.Equal(t, cp.Bytes, again.Bytes)
	require.Equal(t, "one\n", sh(t, sb, "cat f").Text(), "the checkpointed sandbox is restored at its next action")
	cid := sb.(*sandbox).cidNow()
	require.Equal(t, containerID(sb.Info().ID, 1), cid, "restored into a new container; the sandbox keeps its id")
	state, err := p.rs.containerState(t.Context(), cid)
	require.NoError(t, err)
	require.Equal(t, "running", state)
	sb.(*sandbox).retired.Wait()
	ids, err := p.rs.list(t.Context())
	require.NoError(t, err)
	require.NotContains(t, ids, containerID(sb.Info().ID, 0), "the stopped container was deleted in the background")

	f, err := p.Fork(t.Context(), cp)
	require.NoError(t, err)
	defer f.Close(context.Background())
	require.Equal(t, ForkMethod, f.Info().Origin)
	require.NoError(t, p.Release(t.Context(), cp))
	require.NoError(t, p.Release(t.Context(), again))
	require.Equal(t, "one\n", sh(t, f, "cat f").Text(), "a fork outlives its checkpoint")
	_, err = p.Fork(t.Context(), cp)
	require.ErrorContains(t, err, "unknown or released checkpoint")

	bad, err := p.Checkpoint(t.Context(), f, "to-corrupt")
	require.NoError(t, err)
	img := filepath.Join(p.dir, "checkpoints", bad.ID, imageFile)
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	for i := len(b) / 2; i < len(b)/2+4096 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	require.NoError(t, os.Remove(img)) // the fork's own link keeps the good bytes
	require.NoError(t, os.WriteFile(img, b, 0o600))
	before, err := p.Leftovers(t.Context())
	require.NoError(t, err)
	_, err = p.Fork(t.Context(), bad)
	require.Error(t, err, "a corrupt image cannot be restored")
	require.ErrorContains(t, err, "restoring")
	after, err := p.Leftovers(t.Context())
	require.NoError(t, err)
	require.Equal(t, before, after, "the failed fork left nothing")
	require.Equal(t, "one\n", sh(t, f, "cat f").Text(), "the checkpointed fork resumes from its own copy")
}

// Host paths bound into a sandbox (how the agent policy brings its harness
// and gateway socket into docker sandboxes) are refused by name, before
// any sandbox, not dropped: a harness would otherwise start without them.
func TestMountsAreRefusedByName(t *testing.T) {
	p := open(t, nil)
	spec := providers.Spec{Mounts: []providers.Mount{{Source: t.TempDir(), Target: "/opt/forkline/harness"}}}
	err := p.Prepare(t.Context(), []providers.Spec{spec}, nil)
	require.ErrorIs(t, err, providers.ErrCannotPrepare)
	require.ErrorIs(t, err, providers.ErrNotSupported)
	require.ErrorContains(t, err, "/opt/forkline/harness")
	_, err = p.Create(t.Context(), spec)
	require.ErrorIs(t, err, providers.ErrNotSupported)
	left, err := p.Leftovers(t.Context())
	require.NoError(t, err)
	require.Empty(t, left)
}

func TestPersistentShell(t *testing.T) {
	providertest.PersistentShell(t, open(t, nil), providers.Spec{})
}

// What a background job of the persistent shell printed after a command's
// frame comes with the next command's output, a checkpoint in between or
// not (Terminal.Detach keeps it for the sandbox's own next command).
func TestPersistentShellOutputBetweenCommandsOutlivesACheckpoint(t *testing.T) {
	p := open(t, nil)
	sb := create(t, p, providers.Spec{Shell: providers.ShellPersistent})
	obs := sh(t, sb, "(sleep 0.3; echo late) &")
	require.Equal(t, 0, obs.ExitCode, obs.Text())
	obs = sh(t, sb, "sleep 1; echo now")
	require.Equal(t, "late\nnow\n", string(obs.Output), "between commands, without a checkpoint")
	obs = sh(t, sb, "(sleep 0.3; echo later) &")
	require.Equal(t, 0, obs.ExitCode, obs.Text())
	_, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActWait, MS: 1500})
	require.NoError(t, err)
	cp, err := p.Checkpoint(t.Context(), sb, "held")
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Release(context.Background(), cp) })
	obs = sh(t, sb, "echo now")
	require.Equal(t, "later\nnow\n", string(obs.Output), "the job's output came before the checkpoint; the sandbox's next command has it")
}
