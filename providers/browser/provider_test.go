package browser_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/browser"
)

func TestProviderForksStartFromTheGoldenProfile(t *testing.T) {
	needChromium(t)
	inner, err := openLocal(t)
	require.NoError(t, err)
	prov := browser.Provider(inner, browser.DefaultConfig())
	gui := &providers.GUI{Width: 640, Height: 480, Start: "index.html", Screenshots: true, A11y: true}
	require.True(t, prov.Capabilities().GUI)
	require.Equal(t, inner.Capabilities().ForkMethod, prov.Capabilities().ForkMethod)
	ctx := context.Background()

	plain, err := prov.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	_, isSession := plain.(*browser.Session)
	require.False(t, isSession, "a sandbox that asks for no GUI is the sandbox as it is")
	require.False(t, plain.Info().GUI, "and does not claim one")
	require.NoError(t, plain.Close(ctx))

	// The page stores something in its origin's storage: the golden's
	// profile keeps it, and every fork sees it.
	golden, err := prov.Create(ctx, providers.Spec{Files: map[string][]byte{"index.html": []byte(visitsPage)}, GUI: gui})
	require.NoError(t, err)
	_, isSession = golden.(*browser.Session)
	require.True(t, isSession)
	require.True(t, golden.Info().GUI)
	cp, err := prov.Checkpoint(ctx, golden, "golden")
	require.NoError(t, err)
	require.NoError(t, golden.Close(ctx))

	fork, err := prov.Fork(ctx, cp)
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(fork.Info().Workspace, browser.ProfileDir, "Local State"))
	require.NoError(t, err, "the checkpoint holds the profile")
	require.NoError(t, fork.Close(ctx))
	var shots [][]byte
	for range 2 {
		shots = append(shots, firstForkObservation(t, prov, cp).Screenshot.PNG)
	}
	require.Equal(t, shots[0], shots[1], "forks of one golden see the same first screenshot, byte for byte")
	require.NoError(t, prov.Release(ctx, cp))
}
