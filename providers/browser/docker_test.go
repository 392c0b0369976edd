package browser_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/browser"
	"github.com/forkline/forkline/providers/docker"
	"github.com/forkline/forkline/providers/providertest"
	"github.com/forkline/forkline/runtime"
)

// chromiumImage is the browser image of make images-browser.
const chromiumImage = "forkline/chromium"

// needDockerChromium skips (or, when FORKLINE_REQUIRE says so, fails) the
// test unless an engine answers and has the image.
func needDockerChromium(t *testing.T) {
	t.Helper()
	testenv.NeedDockerImage(t, testenv.DockerChromium, chromiumImage)
}

// TestDockerSandboxOverExecStream runs Chromium inside a docker sandbox with
// network none, from the forkline/chromium image (make images-browser), and
// drives it over the exec stream: no port, no network.
func TestDockerSandboxOverExecStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	needDockerChromium(t)
	prov, err := docker.New(t.Context(), providers.Options{RunID: "browser-test", Params: map[string]string{docker.ParamImage: chromiumImage}})
	require.NoError(t, err)
	defer prov.Close(context.Background())
	sb, err := prov.Create(ctx, providers.Spec{Files: map[string][]byte{"index.html": []byte(formPage), "done.html": []byte(donePage)}})
	require.NoError(t, err)
	cfg := browser.DefaultConfig()
	cfg.Width, cfg.Height, cfg.Start = 800, 600, "index.html"
	_, ok := sb.(browser.Piper)
	require.True(t, ok, "docker sandboxes can pipe a process")
	s, err := browser.NewSession(sb, cfg)
	require.NoError(t, err)
	defer s.Close(context.Background())

	obs := act(t, s, runtime.Action{Kind: runtime.ActExec, Cmd: "ls /sys/class/net"})
	require.Equal(t, "lo\n", string(obs.Output), "the sandbox has no network but loopback")
	obs = act(t, s, runtime.Action{Kind: runtime.ActScreenshot})
	require.False(t, obs.Error, string(obs.Output))
	require.Contains(t, string(obs.Output), "url: index.html\n")
	checkScreenshot(t, obs, 800, 600)
	x, y := center(findRole(t, obs, "textbox", "Full name"))
	act(t, s, runtime.Action{Kind: runtime.ActClick, X: x, Y: y})
	act(t, s, runtime.Action{Kind: runtime.ActType, Text: "Grace Hopper"})
	obs = act(t, s, runtime.Action{Kind: runtime.ActKey, Keys: "Enter"})
	require.Contains(t, string(obs.Output), "url: done.html?name=Grace+Hopper&email=\n")
	obs = act(t, s, runtime.Action{Kind: runtime.ActExec, Cmd: "cat .browser/url .browser/text; test -s .browser/pid"})
	require.Equal(t, "done.html?name=Grace+Hopper&email=\nWelcome, Grace Hopper\n", string(obs.Output))
	require.EqualValues(t, 0, obs.ExitCode)
	require.NoError(t, s.Close(context.Background()))
}

// TestDockerGoldenProfile: on docker too, the golden checkpoint (a commit)
// holds the prepared profile and forks start from it.
func TestDockerGoldenProfile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	needDockerChromium(t)
	dp, err := docker.New(t.Context(), providers.Options{RunID: "browser-test-golden", Params: map[string]string{docker.ParamImage: chromiumImage}})
	require.NoError(t, err)
	defer dp.Close(context.Background())
	prov := browser.Provider(dp, browser.DefaultConfig())
	gui := &providers.GUI{Width: 640, Height: 480, Start: "index.html", Screenshots: true, A11y: true}

	golden, err := prov.Create(ctx, providers.Spec{Files: map[string][]byte{"index.html": []byte(visitsPage)}, GUI: gui})
	require.NoError(t, err)
	cp, err := prov.Checkpoint(ctx, golden, "golden")
	require.NoError(t, err)
	require.NoError(t, golden.Close(ctx))
	defer prov.Release(context.Background(), cp)
	var shots [][]byte
	for range 2 {
		shots = append(shots, firstForkObservation(t, prov, cp).Screenshot.PNG)
	}
	require.Equal(t, shots[0], shots[1], "forks of one golden see the same first screenshot")
}

// TestDockerEngineGone: when the engine goes away under a browser task,
// every error the browser decorator passes on (Create, Fork, a shell
// action, a GUI action whose browser went with the engine) still matches
// runtime.ErrUnavailable, so a collector can tell the run's failure from
// the episode's. The engine is taken away from this provider only, through
// a proxy.
func TestDockerEngineGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	needDockerChromium(t)
	direct, err := docker.Connect(ctx)
	require.NoError(t, err)
	target, ok := strings.CutPrefix(direct.DaemonHost(), "unix://")
	direct.Close()
	if !ok {
		testenv.Inapplicable(t, fmt.Sprintf("the engine is not on a unix socket (%s)", direct.DaemonHost()))
	}
	px := providertest.NewSocketProxy(t, "unix", target)
	t.Setenv("DOCKER_HOST", "unix://"+px.Path())
	dp, err := docker.New(t.Context(), providers.Options{RunID: "browser-test-gone", Params: map[string]string{docker.ParamImage: chromiumImage}})
	require.NoError(t, err)
	defer func() {
		px.Restore()
		require.NoError(t, dp.Close(context.Background()))
	}()
	prov := browser.Provider(dp, browser.DefaultConfig())
	spec := providers.Spec{Files: map[string][]byte{"index.html": []byte(formPage)},
		GUI: &providers.GUI{Width: 640, Height: 480, Start: "index.html", Screenshots: true, A11y: true}}
	golden, err := prov.Create(ctx, spec)
	require.NoError(t, err)
	cp, err := prov.Checkpoint(ctx, golden, "golden")
	require.NoError(t, err)
	s, err := prov.Fork(ctx, cp)
	require.NoError(t, err)
	obs := act(t, s, runtime.Action{Kind: runtime.ActScreenshot}) // the browser runs
	require.False(t, obs.Error, obs.Text())

	px.Cut()
	_, err = s.Act(ctx, runtime.Action{Kind: runtime.ActScreenshot})
	require.ErrorIs(t, err, runtime.ErrUnavailable, "a GUI action whose browser went with the engine")
	_, err = s.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "true"})
	require.ErrorIs(t, err, runtime.ErrUnavailable, "a shell action through the browser session")
	_, err = prov.Create(ctx, spec)
	require.ErrorIs(t, err, runtime.ErrUnavailable, "Create through the decorator")
	_, err = prov.Fork(ctx, cp)
	require.ErrorIs(t, err, runtime.ErrUnavailable, "Fork through the decorator")
	_, err = prov.Checkpoint(ctx, golden, "again")
	require.ErrorIs(t, err, runtime.ErrUnavailable, "Checkpoint through the decorator")
}

// A browser task on docker is checked before anything is spent: its image
// must hold the Chromium its sessions run inside the sandbox.
func TestPrepareChecksChromiumInTheImage(t *testing.T) {
	needDockerChromium(t)
	inner, err := docker.New(t.Context(), providers.Options{RunID: "browser-prepare-test"})
	require.NoError(t, err)
	defer inner.Close(context.Background())
	prov := browser.Provider(inner, browser.DefaultConfig())
	prep, ok := providers.As[providers.Preparer](prov)
	require.True(t, ok, "the decorator prepares, then checks")
	gui := &providers.GUI{Screenshots: true}

	err = prep.Prepare(t.Context(), []providers.Spec{{Image: docker.ImageBusybox, GUI: gui}, {Image: docker.ImageBusybox}}, nil)
	require.ErrorIs(t, err, providers.ErrCannotPrepare)
	require.ErrorContains(t, err, "forkline/busybox has none at /usr/bin/chromium")
	require.ErrorContains(t, err, "forkline/chromium")

	require.NoError(t, prep.Prepare(t.Context(), []providers.Spec{{Image: chromiumImage, GUI: gui}, {Image: docker.ImageBusybox}}, nil),
		"a shell task's image needs no Chromium")
}
