package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Session is one live environment an episode acts in.
//
// Act performs one action and returns what it produced. A command that fails,
// times out or is refused is an Observation (with Error set), not an error:
// the returned error means the session itself broke (the sandbox died, the
// engine went away) and the session must not be used again. Act honours
// a.TimeoutMS for exec by killing the whole process tree, and ctx for
// everything. Close releases the session; it is idempotent and safe to call
// after a failed Act. A Session is used by one goroutine at a time.
type Session interface {
	Act(ctx context.Context, a Action) (Observation, error)
	Close(ctx context.Context) error
}

// History is what a policy sees when it decides: the instruction the episode
// started from and every step so far, oldest first. Policies must not keep or
// modify it after Decide returns.
type History struct {
	Instruction string
	// Start is what the environment showed before the first action (a
	// GUI episode's start page: its screenshot and accessibility tree),
	// nil when it shows nothing until acted on (a shell). A policy that
	// shows observations shows it with the instruction.
	Start *Observation
	Steps []Step
}

// Decision is a policy's answer: one action to take, or a reason to stop.
// When Stop is set, Action is ignored and the episode ends with that reason
// (ExitNoAction, ExitUnparsedAction, ExitOutputTruncated ...). Model, when set,
// is recorded either way: the final turn of an episode matters to RL.
type Decision struct {
	Action Action
	Stop   ExitReason
	Model  *ModelEvent
	Detail string // why the policy stopped, for the record
}

// Policy decides the next action. Decide returns an error only when the policy
// itself failed (its server is gone after retries); the episode then ends with
// ExitPolicyError. Decide must honour ctx.
type Policy interface {
	Decide(ctx context.Context, h History) (Decision, error)
}

// SelfDriving is a Policy that runs its episode itself rather than being
// asked for one action at a time: an agent harness running inside the
// sandbox, which executes its own tools and whose model calls are the
// episode's steps. Rollout hands it the whole episode — the session, the
// history it starts from, the limits and the sink — and returns what it
// returns. RunEpisode keeps Rollout's contract: every step goes to the
// sink in order, from the calling goroutine, as soon as it is complete;
// the error is the sink's only; everything else is in Result.
type SelfDriving interface {
	Policy
	RunEpisode(ctx context.Context, s Session, start History, lim Limits, sink StepSink) (Result, error)
}

// StepSink receives every step of an episode, in order, as it happens, from
// the goroutine running Rollout. An error from WriteStep means the step could
// not be recorded; Rollout stops and returns it.
type StepSink interface {
	WriteStep(ctx context.Context, s Step) error
}

// StepSinkFunc adapts a function to StepSink.
type StepSinkFunc func(ctx context.Context, s Step) error

// WriteStep calls f.
func (f StepSinkFunc) WriteStep(ctx context.Context, s Step) error { return f(ctx, s) }

// Limits bound one episode. Zero values mean no limit, except MaxSteps, which
// defaults to DefaultMaxSteps so a looping policy always ends.
type Limits struct {
	MaxSteps       int
	ActionTimeout  time.Duration // per action; exec is killed, tree and all
	EpisodeTimeout time.Duration // wall clock for the whole episode, policy time included
}

// DefaultMaxSteps is used when Limits.MaxSteps is zero.
const DefaultMaxSteps = 50

// actGrace is how long Rollout waits past an exec's own timeout before it
// gives up on the session: the session is meant to kill the command itself and
// report TimedOut, and only a broken session overruns this.
const actGrace = 10 * time.Second

// ErrUnavailable is wrapped by errors that mean a service the episode
// depends on could not be reached at all — the sandbox backend (a Docker
// engine that stopped answering) or the model server (nothing listens at its
// URL) — as opposed to the episode's own sandbox or policy failing. Session
// and Policy implementations wrap it (errors.Is must find it); Rollout passes
// it on in Result.Err. It is the run's failure, not the episode's: a
// collector stops scheduling and leaves such an episode unrecorded, so that
// a resumed run does it once the service is back.
var ErrUnavailable = errors.New("runtime: a service the episode depends on is unavailable")

// Result summarises an episode.
type Result struct {
	Exit   ExitReason
	Detail string // what went wrong, for env_error, policy_error and stops
	// Err is the error that ended the episode as env_error or
	// policy_error (nil otherwise); test it for ErrUnavailable.
	Err        error
	Answer     string // the done action's answer
	Steps      int
	Duration   time.Duration
	PolicyTime time.Duration
	EnvTime    time.Duration
}

// Rollout drives s with p until the policy says done, stops, or a limit is
// reached, and streams each step to sink as soon as it completes. It returns a
// non-nil error only when sink fails; everything else (a broken session, a
// failed policy, cancellation) is reported in Result.Exit with the steps up to
// that point already delivered. A step whose action was interrupted
// (cancellation, episode timeout, broken session) is still delivered, with an
// Observation of ErrorKind ErrInterrupted, so the trajectory shows what was
// being done.
func Rollout(ctx context.Context, s Session, p Policy, start History, lim Limits, sink StepSink) (Result, error) {
	began := time.Now()
	if lim.MaxSteps <= 0 {
		lim.MaxSteps = DefaultMaxSteps
	}
	if sd, ok := p.(SelfDriving); ok {
		return sd.RunEpisode(ctx, s, start, lim, sink)
	}
	epCtx := ctx
	if lim.EpisodeTimeout > 0 {
		var cancel context.CancelFunc
		epCtx, cancel = context.WithTimeout(ctx, lim.EpisodeTimeout)
		defer cancel()
	}
	h := History{Instruction: start.Instruction, Start: start.Start, Steps: append([]Step(nil), start.Steps...)}
	var res Result
	finish := func(exit ExitReason, detail string) (Result, error) {
		res.Exit, res.Detail = exit, detail
		if exit != ExitEnvError && exit != ExitPolicyError {
			res.Err = nil
		}
		res.Steps = len(h.Steps) - len(start.Steps)
		res.Duration = time.Since(began)
		return res, nil
	}
	// interrupted names the exit for a ctx-related failure: the caller's
	// cancellation wins over our own episode deadline.
	interrupted := func() (ExitReason, bool) {
		if ctx.Err() != nil {
			return ExitCancelled, true
		}
		if epCtx.Err() != nil {
			return ExitTimeout, true
		}
		return "", false
	}

	for {
		if exit, ok := interrupted(); ok {
			return finish(exit, "")
		}
		if len(h.Steps)-len(start.Steps) >= lim.MaxSteps {
			return finish(ExitMaxSteps, fmt.Sprintf("%d steps", lim.MaxSteps))
		}
		stepStart := time.Now()
		d, err := p.Decide(epCtx, h)
		policyTime := time.Since(stepStart)
		res.PolicyTime += policyTime
		if err != nil {
			if exit, ok := interrupted(); ok {
				return finish(exit, err.Error())
			}
			res.Err = err
			return finish(ExitPolicyError, err.Error())
		}
		step := Step{Index: len(h.Steps), Model: d.Model, Started: stepStart, PolicyTime: policyTime}
		if d.Stop != "" {
			// Record the final model turn even though it carried no action.
			if d.Model != nil {
				if err := deliver(ctx, sink, &h, step); err != nil {
					return res, err
				}
			}
			return finish(d.Stop, d.Detail)
		}
		a := d.Action
		if err := a.Validate(); err != nil {
			step.Action = Action{}
			if d.Model != nil {
				if err := deliver(ctx, sink, &h, step); err != nil {
					return res, err
				}
			}
			return finish(ExitUnparsedAction, err.Error())
		}
		step.Action = a
		if a.Kind == ActDone {
			step.Observation = Observation{ExitCode: -1}
			if err := deliver(ctx, sink, &h, step); err != nil {
				return res, err
			}
			res.Answer = a.Answer
			return finish(ExitDone, "")
		}

		obs, actErr := act(epCtx, s, a, lim.ActionTimeout)
		step.EnvTime = time.Since(stepStart) - policyTime
		res.EnvTime += step.EnvTime
		if actErr != nil {
			exit, ok := interrupted()
			if !ok {
				exit = ExitEnvError
				res.Err = actErr
			}
			step.Observation = Observation{
				Output: []byte(actErr.Error()), OutputBytes: int64(len(actErr.Error())),
				ExitCode: -1, Error: true, ErrorKind: ErrInterrupted, Duration: step.EnvTime,
			}
			if err := deliver(ctx, sink, &h, step); err != nil {
				return res, err
			}
			return finish(exit, actErr.Error())
		}
		step.Observation = obs
		if err := deliver(ctx, sink, &h, step); err != nil {
			return res, err
		}
	}
}

// ErrInterrupted marks a step whose action did not finish because the episode
// was cancelled, timed out, or its session broke.
const ErrInterrupted ErrorKind = "interrupted"

// act runs one action under the per-action timeout. For exec, the session
// enforces the timeout itself (it must kill the process tree and report
// TimedOut); the context deadline is only a backstop for a session that does
// not.
func act(ctx context.Context, s Session, a Action, limit time.Duration) (Observation, error) {
	if limit <= 0 {
		return s.Act(ctx, a)
	}
	deadline := limit
	if a.Kind == ActExec {
		if a.TimeoutMS <= 0 || time.Duration(a.TimeoutMS)*time.Millisecond > limit {
			a.TimeoutMS = limit.Milliseconds()
		}
		deadline = time.Duration(a.TimeoutMS)*time.Millisecond + actGrace
	}
	actx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	obs, err := s.Act(actx, a)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && a.Kind != ActExec {
		// A non-exec action overran the per-action limit: that is the
		// action's outcome, not a broken session.
		msg := fmt.Sprintf("%s did not finish within %s", a.Kind, limit)
		return Observation{Output: []byte(msg), OutputBytes: int64(len(msg)), ExitCode: -1,
			Error: true, ErrorKind: ErrTimeout, TimedOut: true}, nil
	}
	return obs, err
}

// deliver appends step to the history and hands it to the sink. The sink is
// given the caller's context rather than the episode's, so the steps of a
// timed-out episode are still recorded.
func deliver(parent context.Context, sink StepSink, h *History, step Step) error {
	h.Steps = append(h.Steps, step)
	if sink == nil {
		return nil
	}
	if err := sink.WriteStep(context.WithoutCancel(parent), step); err != nil {
		return fmt.Errorf("runtime: recording step %d: %w", step.Index, err)
	}
	return nil
}
