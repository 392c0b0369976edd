package gvisor

import (
	"context"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/providertest"
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
