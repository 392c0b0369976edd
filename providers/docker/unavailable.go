package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/runtime"
)

// engineError is the type of the sentinels that mean the engine itself
// cannot be reached: each matches runtime.ErrUnavailable with errors.Is, so
// a collector can tell a run whose backend went away from an episode whose
// sandbox failed, without knowing this package.
type engineError struct{ msg string }

func (e *engineError) Error() string { return e.msg }

// Is makes every engineError match runtime.ErrUnavailable.
func (e *engineError) Is(target error) bool { return target == runtime.ErrUnavailable }

// ErrEngineGone is wrapped by the errors of Create, Fork, Checkpoint,
// Release and Act when the engine stopped answering while the provider was
// in use: a connection refused or reset, the socket gone, or a call in
// flight while a ping of the engine gets no answer in time. It matches
// runtime.ErrUnavailable. A sandbox that died under an episode (removed,
// killed, out of memory) is ErrSandboxDied instead: the engine answered, the
// episode's sandbox failed.
var ErrEngineGone error = &engineError{"docker: the engine stopped answering"}

// How the provider notices an engine that stopped answering without
// closing its connections (hung, or a network path that blackholes): a call
// still in flight after probeEvery makes it ping the engine, and a ping
// without an answer within probeTimeout means the engine is gone; the call
// is then abandoned. An engine busy with a long call (a big commit) still
// answers pings, so only a silent one is given up on.
const (
	defaultProbeEvery   = 10 * time.Second
	defaultProbeTimeout = 5 * time.Second
)

// engineAnswered reports whether err is an answer of the engine (an API
// error with an HTTP status), which proves it alive.
func engineAnswered(err error) bool {
	return cerrdefs.IsNotFound(err) || cerrdefs.IsInvalidArgument(err) || cerrdefs.IsConflict(err) ||
		cerrdefs.IsInternal(err) || cerrdefs.IsUnknown(err) || cerrdefs.IsPermissionDenied(err) ||
		cerrdefs.IsUnauthorized(err) || cerrdefs.IsNotImplemented(err) || cerrdefs.IsFailedPrecondition(err) ||
		cerrdefs.IsAlreadyExists(err) || cerrdefs.IsResourceExhausted(err) || cerrdefs.IsNotModified(err)
}

// ping asks the engine for /_ping within the probe timeout and returns why
// it did not answer, or nil. A ctx that ends first is not the engine's
// fault: ping then returns nil.
func (p *Provider) ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, p.probeTimeout)
	defer cancel()
	_, err := p.cli.Ping(pctx, client.PingOptions{})
	if err == nil || ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer to GET /_ping within %s", p.probeTimeout)
	}
	return err
}

// gone returns an error wrapping ErrEngineGone when the engine does not
// answer a ping, nil when it does. what names the call that failed with
// cause (nil when nothing failed yet). An error the engine itself returned
// (an API error) proves it alive without a ping.
func (p *Provider) gone(ctx context.Context, what string, cause error) error {
	if cause != nil && engineAnswered(cause) {
		return nil
	}
	perr := p.ping(ctx)
	if perr == nil {
		return nil
	}
	if cause == nil {
		return fmt.Errorf("%w: %s at %s (ping: %v)", ErrEngineGone, what, p.cli.DaemonHost(), perr)
	}
	return fmt.Errorf("%w: %s at %s (ping: %v): %w", ErrEngineGone, what, p.cli.DaemonHost(), perr, cause)
}

// watch returns a context for the engine calls of one operation and a stop
// function. While the operation runs, the engine is pinged every
// probeEvery; when a ping gets no answer the context is cancelled with a
// cause wrapping ErrEngineGone, which ends calls that would otherwise wait
// for ever (hijacked exec streams are closed by their context's end too).
// Callers turn the cancellation into that cause with p.cause.
func (p *Provider) watch(ctx context.Context) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTimer(p.probeEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if err := p.gone(wctx, "a call still in flight", nil); err != nil {
				cancel(err)
				return
			}
			t.Reset(p.probeEvery)
		}
	}()
	return wctx, func() {
		close(done)
		cancel(nil)
	}
}

// detach returns a context for cleanup and diagnosis after a call failed:
// it outlives ctx's cancellation (a cancelled episode must still remove its
// container) and ends after d, or as soon as ctx's engine watch gives up on
// the engine, since then nothing will answer.
func detach(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), ErrEngineGone) {
			cancel()
		}
	})
	return dctx, func() { stop(); cancel() }
}

// cause returns err, or the reason the watch gave up on the engine when it
// did: the error every caller should see then, whatever the call in flight
// made of its cancellation.
func cause(wctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if c := context.Cause(wctx); c != nil && errors.Is(c, ErrEngineGone) && !errors.Is(err, ErrEngineGone) {
		return c
	}
	return err
}
