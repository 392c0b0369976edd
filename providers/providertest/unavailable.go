package providertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// Outage is what a backend's test gives RunUnavailable to take the
// provider's backend (a Docker engine, a remote API) away and bring it back
// without stopping it for anyone else, typically a proxy between the
// provider and the backend. Cut, Freeze and Restore are called from the
// test's goroutine; a provider must have been opened through the proxy.
type Outage interface {
	// Cut makes the backend unreachable: open connections are closed and
	// new ones refused, as when the backend stops.
	Cut()
	// Freeze makes the backend stop answering: connections stay open or are
	// accepted, but nothing comes back, as when it hangs.
	Freeze()
	// Restore ends a Cut or a Freeze.
	Restore()
	// RemoveSandbox removes sb's object in the backend (its container)
	// behind the provider's back, through a path the outage does not touch.
	RemoveSandbox(ctx context.Context, sb providers.Sandbox) error
}

// unavailableWait bounds how long an action may take to notice an outage
// before the test gives up on it; it is a guard against a hang, not a
// measured time.
const unavailableWait = 3 * time.Minute

// RunUnavailable checks that a provider tells a backend that went away
// (runtime.ErrUnavailable: the run's failure, retried when the backend is
// back) from an episode's sandbox that failed (an ordinary error): after a
// Cut or during a Freeze, an action in flight, later actions, Create, Fork
// and Checkpoint all fail with errors matching runtime.ErrUnavailable; a
// sandbox removed behind the provider's back fails without it; and after
// Restore the provider works again. open returns a new provider whose
// backend connection goes through the Outage, tuned to notice a silent
// backend within seconds.
func RunUnavailable(t *testing.T, open func(t *testing.T) (providers.Provider, Outage)) {
	t.Helper()
	t.Run("Cut", func(t *testing.T) { outage(t, open, Outage.Cut) })
	t.Run("Freeze", func(t *testing.T) { outage(t, open, Outage.Freeze) })
	t.Run("SandboxRemoved", func(t *testing.T) { sandboxRemoved(t, open) })
}

func openOutage(t *testing.T, open func(t *testing.T) (providers.Provider, Outage)) (providers.Provider, Outage) {
	t.Helper()
	p, o := open(t)
	require.NotNil(t, p)
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		o.Restore() // the provider cleans up through the backend it lost
		assert.NoError(t, p.Close(ctx), "provider Close after the outage ended")
		assertNoLeftovers(t, ctx, p, "after an outage and provider Close")
	})
	return p, o
}

func requireUnavailable(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, "%s must fail while the backend is away", what)
	require.ErrorIs(t, err, runtime.ErrUnavailable, "%s: the backend is away, not the episode's sandbox broken: %v", what, err)
}

func outage(t *testing.T, open func(t *testing.T) (providers.Provider, Outage), takeAway func(Outage)) {
	p, o := openOutage(t, open)
	ctx := t.Context()
	sb, err := p.Create(ctx, providers.Spec{Files: map[string][]byte{"f": []byte("x")}})
	require.NoError(t, err)
	var cp providers.Checkpoint
	canFork := p.Capabilities().Checkpoint && p.Capabilities().Fork
	if canFork {
		cp, err = p.Checkpoint(ctx, sb, "outage")
		require.NoError(t, err)
	}
	require.Equal(t, "x", read(t, sb, "f"))

	// An action in flight when the backend goes away.
	inFlight := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		actx, cancel := context.WithTimeout(ctx, unavailableWait)
		defer cancel()
		close(started)
		_, err := sb.Act(actx, runtime.Action{Kind: runtime.ActExec, Cmd: "sleep 60", TimeoutMS: 90_000})
		inFlight <- err
	}()
	<-started
	time.Sleep(500 * time.Millisecond) // let the exec reach the backend
	takeAway(o)
	requireUnavailable(t, <-inFlight, "an exec in flight")

	actx, cancel := context.WithTimeout(ctx, unavailableWait)
	defer cancel()
	for _, a := range []runtime.Action{
		{Kind: runtime.ActExec, Cmd: "true"},
		{Kind: runtime.ActReadFile, Path: "f"},
		{Kind: runtime.ActWriteFile, Path: "g", Content: "y"},
	} {
		_, err := sb.Act(actx, a)
		requireUnavailable(t, err, string(a.Kind))
		require.False(t, errors.Is(err, context.DeadlineExceeded), "%s: noticed before the test's guard: %v", a.Kind, err)
	}
	_, err = p.Create(actx, providers.Spec{})
	requireUnavailable(t, err, "Create")
	if canFork {
		_, err = p.Fork(actx, cp)
		requireUnavailable(t, err, "Fork")
		_, err = p.Checkpoint(actx, sb, "during-outage")
		requireUnavailable(t, err, "Checkpoint")
	}

	// The backend comes back: what outlived the outage works again.
	o.Restore()
	require.Equal(t, "x", read(t, sb, "f"), "a sandbox that outlived the outage")
	require.Equal(t, "back\n", run(t, sb, "echo back"))
	if canFork {
		f := fork(t, p, cp)
		require.Equal(t, "x", read(t, f, "f"))
		require.NoError(t, p.Release(ctx, cp))
	}
	require.NoError(t, sb.Close(ctx))
}

func sandboxRemoved(t *testing.T, open func(t *testing.T) (providers.Provider, Outage)) {
	p, o := openOutage(t, open)
	ctx := t.Context()
	sb := create(t, p, providers.Spec{})
	run(t, sb, "true")
	require.NoError(t, o.RemoveSandbox(ctx, sb))
	_, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "true"})
	require.Error(t, err, "an action on a removed sandbox fails")
	require.NotErrorIs(t, err, runtime.ErrUnavailable, "a removed sandbox is the episode's failure, not the backend's: %v", err)
	other := create(t, p, providers.Spec{})
	require.Equal(t, "fine\n", run(t, other, "echo fine"), "the provider still works")
}
