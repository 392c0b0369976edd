package browser_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/browser"
	"github.com/forkline/forkline/providers/docker"
	"github.com/forkline/forkline/providers/providertest"
)

// The browser decorator is a provider like any other: it passes the
// conformance suite over each backend it can sit on. Its sandboxes that ask
// for no GUI are the backend's as they are; the suite's GUI checks exercise
// the ones that do.

func TestConformanceOverLocal(t *testing.T) {
	needChromium(t)
	providertest.Run(t, func(t *testing.T) providers.Provider {
		inner, err := openLocal(t)
		require.NoError(t, err)
		return browser.Provider(inner, browser.DefaultConfig())
	})
}

func TestConformanceOverDocker(t *testing.T) {
	needDockerChromium(t)
	providertest.Run(t, func(t *testing.T) providers.Provider {
		inner, err := docker.New(t.Context(), providers.Options{RunID: "browser-conformance",
			Params: map[string]string{docker.ParamImage: chromiumImage}})
		require.NoError(t, err)
		return browser.Provider(inner, browser.DefaultConfig())
	})
}
