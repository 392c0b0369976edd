package episode

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/forkline/forkline/runtime"
)

// Driver runs an episode one step at a time on an outside caller's command:
// the environment server, whose client — a trainer that owns the model —
// decides each action. It is the episode's policy (an external one) and the
// Rollout is the same as collect's, so limits, capture, exit reasons and
// timings are exactly a collected episode's: the time the client takes to
// send its next action is the step's policy time, the episode timeout runs
// from Drive, and every step reaches the capture sink before the caller
// hears of it.
//
// Step, Stop and Wait are called by one goroutine at a time (the session's).
type Driver struct {
	ep   *Episode
	next chan runtime.Decision // the caller's next decision, to the rollout's Decide
	// waiting receives a token each time the rollout asks for a decision:
	// the step before was taken (captured) and the episode goes on.
	waiting chan struct{}
	done    chan struct{} // closed when the rollout returned
	err     error         // the rollout's error, set before done closes

	mu    sync.Mutex
	steps []runtime.Step // delivered steps, in order
}

// Taken is what became of the decision Step handed over.
type Taken struct {
	// Step is the step the action made, when the rollout took it; nil when
	// the episode had ended before (its timeout passed while the caller
	// was deciding), or it ended without delivering one.
	Step *runtime.Step
	// Ended reports that the episode is over: the action was done, a limit
	// was reached, the sandbox broke, or it had ended before. Result and
	// Row of the episode say how; Wait returns the rollout's error.
	Ended bool
}

// Drive starts the episode's rollout from history h under lim, with the
// caller as its policy, and returns once the rollout waits for the first
// decision (or has ended already: ctx was done). Every step goes to the
// capture sink and then, when watch is not nil, to watch, as in Rollout.
// ctx bounds the whole episode: cancelling it interrupts an action in
// flight and ends the episode as cancelled; Stop ends it between steps.
func (e *Episode) Drive(ctx context.Context, h runtime.History, lim runtime.Limits, watch runtime.StepSink) *Driver {
	d := &Driver{ep: e, next: make(chan runtime.Decision), waiting: make(chan struct{}, 1), done: make(chan struct{})}
	sink := runtime.StepSinkFunc(func(ctx context.Context, s runtime.Step) error {
		d.mu.Lock()
		d.steps = append(d.steps, s)
		d.mu.Unlock()
		if watch != nil {
			return watch.WriteStep(ctx, s)
		}
		return nil
	})
	go func() {
		defer close(d.done)
		d.err = e.Rollout(ctx, drivenPolicy{d}, h, lim, sink)
	}()
	select {
	case <-d.waiting:
	case <-d.done:
	}
	return d
}

// drivenPolicy is the rollout's side of a Driver: its policy.
type drivenPolicy struct{ d *Driver }

// Decide waits for the caller's next decision. The episode's deadline (its
// ctx) ends the wait, and the rollout then ends the episode as timeout (or
// cancelled, when the caller's context ended).
func (p drivenPolicy) Decide(ctx context.Context, _ runtime.History) (runtime.Decision, error) {
	d := p.d
	d.waiting <- struct{}{} // never blocks: Step or Drive took the last token
	select {
	case dec := <-d.next:
		return dec, nil
	case <-ctx.Done():
		return runtime.Decision{}, fmt.Errorf("episode: ended while waiting for the client's next action: %w", context.Cause(ctx))
	}
}

// Step hands the episode its next decision (an action, and the model turn
// that made it when the caller has one) and waits until the action was
// taken and captured. ctx bounds only the wait for the episode to take the
// decision; once taken, the action runs to its end under the episode's own
// limits, so a step in flight always finishes. A decision whose action is
// not canonical ends the episode as unparsed_action, as in collect: callers
// that want to refuse it instead validate it first.
func (d *Driver) Step(ctx context.Context, dec runtime.Decision) (Taken, error) {
	select {
	case <-d.done:
		return Taken{Ended: true}, nil
	default:
	}
	before := d.count()
	select {
	case d.next <- dec:
	case <-d.done:
		return Taken{Ended: true}, nil
	case <-ctx.Done():
		return Taken{}, ctx.Err()
	}
	select {
	case <-d.waiting:
		return Taken{Step: d.stepAfter(before)}, nil
	case <-d.done:
		return Taken{Step: d.stepAfter(before), Ended: true}, nil
	}
}

// Stop ends the episode between steps with exit and detail (a client that
// closed its session, a server that stops) and waits for the rollout to
// return. A step in flight finishes first. Stopping an ended episode does
// nothing.
func (d *Driver) Stop(exit runtime.ExitReason, detail string) {
	select {
	case d.next <- runtime.Decision{Stop: exit, Detail: detail}:
	case <-d.done:
	}
	<-d.done
}

// Ended reports whether the rollout has returned.
func (d *Driver) Ended() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// Wait waits for the rollout to return and returns its error (see
// Episode.Rollout).
func (d *Driver) Wait() error {
	<-d.done
	return d.err
}

// Steps returns how many steps the episode has taken so far.
func (d *Driver) Steps() int { return d.count() }

// Taken returns the steps the episode has taken so far (its own, after
// the history it was driven from), in order: what a branch point made now
// hands its branches to continue.
func (d *Driver) Taken() []runtime.Step {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.steps)
}

func (d *Driver) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.steps)
}

func (d *Driver) stepAfter(before int) *runtime.Step {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.steps) <= before {
		return nil
	}
	s := d.steps[len(d.steps)-1]
	return &s
}
