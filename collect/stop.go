package collect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/runtime"
)

// Whose failure is it? An episode's own failures are part of the data: a
// command that fails or times out (an observation), a sandbox that died or
// was killed under it (an OOM, a container removed, a browser that crashed:
// env_error), a policy that failed on a live server (an HTTP error after
// retries: policy_error). They are kept and counted as scaffold losses.
//
// The run's failures are not the episode's: a service every episode depends
// on could not be reached at all (the sandbox backend's engine stopped
// answering, nothing listens at the model server's address), which
// providers and policies mark by wrapping runtime.ErrUnavailable; or the
// dataset cannot be written (a full disk). Such an episode is not kept: the
// collector stops scheduling, lets the episodes in flight end, closes the
// shards, marks the run partial and exits non-zero, so that -resume runs the
// missing episodes once the service is back. docs/FAILURES.md has the table.

// ErrUnavailable is wrapped, together with runtime.ErrUnavailable and the
// first such error, by Run's error when a service the episodes depend on
// was unavailable: scheduling stopped, the episodes it ended were not kept,
// the manifest says partial, and a resume runs them once it is back.
var ErrUnavailable = errors.New("collect: a service the run depends on is unavailable")

// ErrMaxLoss is wrapped by Run's error when Config.MaxLoss stopped the run:
// scheduling stopped once this invocation's scaffold losses passed the
// limit, the episodes in flight were kept, the manifest says partial, and a
// resume continues the run.
var ErrMaxLoss = errors.New("collect: scaffold losses passed -max-loss")

// ErrAllLost is wrapped by Run's error when every episode of a complete run
// is a scaffold loss: the manifest says complete (every planned episode is
// kept), but nothing worked — typically a wrong image, a setup that fails
// or a model server that answers only errors.
var ErrAllLost = errors.New("collect: every episode is a scaffold loss")

// LossLimit is -max-loss: the most scaffold losses this invocation may have
// before it stops scheduling. It is either a count ("N") or a percentage
// ("F%") of the episodes this invocation runs (planned minus already kept),
// and is passed when the losses exceed it: "0" stops at the first loss,
// "10%" of 200 episodes at the 21st. The zero value is no limit.
//
// Decision: the limit counts this invocation's losses only, so a resumed run
// gets its own budget (the losses an earlier invocation kept do not stop it
// at once); the percentage is of the episodes to run, not of those run so
// far, so an early loss does not count as 100%.
type LossLimit struct {
	set     bool
	percent bool
	count   int     // when !percent
	frac    float64 // when percent: 0..100
}

// ParseLossLimit reads "N" (an integer >= 0) or "F%" (0 <= F <= 100); ""
// is no limit.
func ParseLossLimit(s string) (LossLimit, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return LossLimit{}, nil
	}
	bad := fmt.Errorf("collect: -max-loss %s: want a count N >= 0 or a percentage F%% with 0 <= F <= 100, e.g. 10 or 5%%", s)
	if f, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || math.IsNaN(v) || v < 0 || v > 100 {
			return LossLimit{}, bad
		}
		return LossLimit{set: true, percent: true, frac: v}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return LossLimit{}, bad
	}
	return LossLimit{set: true, count: n}, nil
}

// IsSet reports whether there is a limit.
func (l LossLimit) IsSet() bool { return l.set }

// String is the flag form ("" when there is no limit).
func (l LossLimit) String() string {
	switch {
	case !l.set:
		return ""
	case l.percent:
		return strconv.FormatFloat(l.frac, 'f', -1, 64) + "%"
	}
	return strconv.Itoa(l.count)
}

// passed reports whether losses exceed the limit for a run of todo
// episodes.
func (l LossLimit) passed(losses, todo int) bool {
	switch {
	case !l.set:
		return false
	case l.percent:
		return float64(losses)*100 > l.frac*float64(todo)
	}
	return losses > l.count
}

// halter stops a run from the inside: at the first episode ended by an
// unavailable service, at the first write error, or when -max-loss is
// passed. Stopping scheduling cancels sched, which the job feeder and every
// episode about to start watch; a write error also cancels the episodes in
// flight (cancelRun), since none of them could be kept.
type halter struct {
	sched     context.Context
	stop      context.CancelCauseFunc
	cancelRun context.CancelFunc
	log       func(format string, args ...any)

	// signalled is set when the run's stop signal came (the first
	// SIGINT/SIGTERM), while episodes may still be in flight.
	signalled atomic.Bool

	mu          sync.Mutex
	unavailable error // the first error that marked a service unavailable
	writeErr    error
	maxLoss     bool
}

// stopped reports whether scheduling has stopped (for any reason, a signal
// included): an episode that has not started yet is then left for a resume.
func (h *halter) stopped() bool { return h.sched.Err() != nil }

// Decision: after the stop signal, an episode still in flight whose
// command or verifier was killed by SIGHUP, SIGINT or SIGTERM, or which
// failed the way a killed process fails it (a scaffold loss: the sandbox,
// browser or model server went away), is kept as cancelled, not as a
// trajectory. A batch system delivers its stop to every process of the job
// — Slurm's scancel signals all of them, forkline's children included, and
// a local sandbox's commands and a host Chromium are forkline's children —
// so the grace period's episodes may end with observations the agent never
// caused: a killed `sleep` read as a failed step, a killed verifier read
// as reward 0. Telling those apart from the agent's own doing is not
// possible from outside, and running the episode again on -resume costs
// one episode, while keeping it would train on a fault.
func (h *halter) stopHit(ep *episode.Episode) (detail string, hit bool) {
	if !h.signalled.Load() {
		return "", false
	}
	if exit := runtime.ExitReason(ep.Row.ExitReason); exit.ScaffoldLoss() {
		return fmt.Sprintf("ended as %s after the stop signal, which reaches the sandbox's processes too (%s); -resume runs it again", exit, ep.Row.Detail), true
	}
	for _, st := range ep.Capture.Steps() {
		if stopSignal(st.ExitCode) {
			return fmt.Sprintf("step %d's command was killed by signal %d after the stop signal; -resume runs it again", st.StepIndex, st.ExitCode-128), true
		}
	}
	if r := ep.Reward; r != nil && stopSignal(r.ExitCode) {
		return fmt.Sprintf("the verifier was killed by signal %d after the stop signal; -resume runs it again", r.ExitCode-128), true
	}
	return "", false
}

// stopSignal reports whether a shell exit status is a death by SIGHUP,
// SIGINT or SIGTERM (128+1, 128+2, 128+15).
func stopSignal(code int32) bool { return code == 129 || code == 130 || code == 143 }

func (h *halter) serviceUnavailable(err error) {
	h.mu.Lock()
	first := h.unavailable == nil
	if first {
		h.unavailable = err
	}
	h.mu.Unlock()
	if first {
		// Stop scheduling before anything else (logging can be slow): a
		// worker that takes the next job checks it first.
		h.stop(ErrUnavailable)
		h.log("a service the episodes depend on is unavailable: %v", err)
		h.log("no new episodes are started; the episodes in flight finish; episodes it ends are not kept (-resume runs them once the service is back)")
	}
}

func (h *halter) writeFailed(err error) {
	h.mu.Lock()
	first := h.writeErr == nil
	if first {
		h.writeErr = err
	}
	h.mu.Unlock()
	if first {
		h.stop(err)
		h.cancelRun()
		h.log("writing the dataset failed: %v", err)
		h.log("no new episodes are started, and the episodes in flight are cancelled: none of them could be kept")
	}
}

func (h *halter) lossLimitPassed(limit LossLimit, losses, todo int) {
	h.mu.Lock()
	first := !h.maxLoss
	h.maxLoss = true
	h.mu.Unlock()
	if first {
		h.stop(ErrMaxLoss)
		h.log("-max-loss %s passed: %d scaffold losses among %d episodes to run; no new episodes are started (the episodes in flight finish and are kept; -resume continues)",
			limit, losses, todo)
	}
}

func (h *halter) state() (unavailable, writeErr error, maxLoss bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unavailable, h.writeErr, h.maxLoss
}
