package gvisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/providertest"
	"github.com/forkline/forkline/runtime"
)

// needRunsc skips (or, under FORKLINE_REQUIRE=gvisor, fails) a test on a
// host without runsc, or not running as root (runsc needs it here).
func needRunsc(t testing.TB) {
	t.Helper()
	if _, err := findRunsc(""); err != nil {
		testenv.Missing(t, "gvisor", err.Error())
	}
	if out, err := exec.Command("id", "-u").Output(); err != nil || string(out) != "0\n" {
		testenv.Missing(t, "gvisor", "runsc runs sandboxes as root here, and the tests do not run as root")
	}
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
		{"unknown", map[string]string{"imagee": "x"}, `providers: gvisor has no setting "imagee" (known: boot_timeout, cpus, debug_log, image, memory_mb, network, pids, platform, rootfs, runsc, sweep)`},
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
