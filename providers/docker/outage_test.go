package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/providertest"
	"github.com/forkline/forkline/runtime"
)

// engineProxy is a providertest.SocketProxy to the real engine that can
// also remove a sandbox behind the provider's back: a providertest.Outage.
type engineProxy struct {
	*providertest.SocketProxy
	target string // the engine's socket
}

func newEngineProxy(t *testing.T) *engineProxy {
	t.Helper()
	cli := engine(t)
	host := cli.DaemonHost()
	target, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		testenv.Inapplicable(t, fmt.Sprintf("the engine is at %s, not on a unix socket: the outage proxy speaks unix sockets only", host))
	}
	return &engineProxy{SocketProxy: providertest.NewSocketProxy(t, "unix", target), target: target}
}

func (px *engineProxy) host() string { return "unix://" + px.Path() }

// RemoveSandbox force-removes sb's container over a direct connection.
func (px *engineProxy) RemoveSandbox(ctx context.Context, sb providers.Sandbox) error {
	cli, err := client.New(client.WithHost("unix://" + px.target))
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.ContainerRemove(ctx, sb.Info().ID, client.ContainerRemoveOptions{Force: true})
	return err
}

// openThroughProxy opens a provider whose engine connection goes through a
// new proxy, with the engine watch tuned to notice a silent engine in about
// a second.
func openThroughProxy(t *testing.T) (*Provider, *engineProxy) {
	t.Helper()
	px := newEngineProxy(t)
	t.Setenv("DOCKER_HOST", px.host())
	p, err := New(t.Context(), providers.Options{RunID: "test-" + tagSafe(t.Name())})
	require.NoError(t, err)
	p.probeEvery, p.probeTimeout = 300*time.Millisecond, 700*time.Millisecond
	return p, px
}

// TestEngineGone runs the conformance suite's outage checks with the
// engine taken away through a proxy: cut (connections closed, socket gone)
// and frozen (nothing answers).
func TestEngineGone(t *testing.T) {
	providertest.RunUnavailable(t, func(t *testing.T) (providers.Provider, providertest.Outage) {
		return openThroughProxy(t)
	})
}

// TestEngineGoneDetails checks what the conformance suite cannot see: the
// errors name the engine and what failed, and are not ErrSandboxDied; a
// container that died (killed, removed) under an episode is ErrSandboxDied
// and not ErrUnavailable, also through the proxy.
func TestEngineGoneDetails(t *testing.T) {
	p, px := openThroughProxy(t)
	defer func() {
		px.Restore()
		require.NoError(t, p.Close(context.Background()))
	}()
	ctx := t.Context()
	sb, err := p.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	killed, err := p.Create(ctx, providers.Spec{})
	require.NoError(t, err)

	_, err = p.cli.ContainerKill(ctx, killed.Info().ID, client.ContainerKillOptions{Signal: "KILL"})
	require.NoError(t, err)
	waitNotRunning(t, p.cli, killed.Info().ID)
	_, err = killed.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "true"})
	require.ErrorIs(t, err, ErrSandboxDied)
	require.NotErrorIs(t, err, runtime.ErrUnavailable, "a killed container is the episode's failure")

	px.Cut()
	_, err = sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "true"})
	require.ErrorIs(t, err, ErrEngineGone)
	require.ErrorIs(t, err, runtime.ErrUnavailable)
	require.NotErrorIs(t, err, ErrSandboxDied)
	require.Contains(t, err.Error(), px.host(), "names the engine")
	require.Contains(t, err.Error(), "exec create", "names what failed")

	_, err = New(t.Context(), providers.Options{})
	require.ErrorIs(t, err, ErrNoEngine)
	require.ErrorIs(t, err, runtime.ErrUnavailable, "an engine that is not there at all is unavailable too")
}

// TestEngineWatchKeepsSlowCalls: a call that takes longer than the watch's
// interval but whose engine answers pings is left alone.
func TestEngineWatchKeepsSlowCalls(t *testing.T) {
	p := open(t, nil)
	p.probeEvery, p.probeTimeout = 100*time.Millisecond, 2*time.Second
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	defer sb.Close(context.Background())
	obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec, Cmd: "sleep 1; echo slept"})
	require.NoError(t, err)
	require.Equal(t, "slept\n", obs.Text())
}

// The sentinels match runtime.ErrUnavailable through any wrapping.
func TestEngineErrorsMatchUnavailable(t *testing.T) {
	for _, e := range []error{ErrEngineGone, ErrNoEngine} {
		wrapped := errors.Join(io.EOF, errors.New("x"), e)
		require.ErrorIs(t, wrapped, runtime.ErrUnavailable)
	}
	require.NotErrorIs(t, ErrSandboxDied, runtime.ErrUnavailable)
	require.NotErrorIs(t, ErrEngineGone, ErrNoEngine)
}

// Start-up can be cancelled: opening a provider on an engine that hangs
// ends when the caller's context does, and says it was cancelled rather
// than that no engine answers.
func TestOpenCancelledWhileTheEngineHangs(t *testing.T) {
	px := newEngineProxy(t)
	t.Setenv("DOCKER_HOST", px.host())
	px.Freeze()
	defer px.Restore()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err := providers.Open(ctx, Name, providers.Options{RunID: "test-" + tagSafe(t.Name())})
	// Had Open waited for the ping timeout instead, the error would be
	// ErrNoEngine: the caller's context was still live then.
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrNoEngine, "a cancelled start-up is not a missing engine")

	cancelled, stop := context.WithCancel(t.Context())
	stop()
	_, err = New(cancelled, providers.Options{})
	require.ErrorIs(t, err, context.Canceled)
}
