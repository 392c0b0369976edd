package collect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/fielderr"
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
var ErrMaxLoss = errors.New("collect: scaffold losses passed the limit")

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
	bad := fielderr.Errorf("collect", "MaxLoss", s, "want a count N >= 0 or a percentage F%% with 0 <= F <= 100, e.g. 10 or 5%%")
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

	// guard and hostProcesses tell whether a stop signal reached the
	// sandboxes' processes (stopHit).
	guard         StopGuard
	hostProcesses bool

	mu          sync.Mutex
	signalled   time.Time     // when the run's stop signal (the first SIGINT/SIGTERM) came
	signalCame  chan struct{} // closed at that moment
	unavailable error         // the first error that marked a service unavailable
	writeErr    error
	maxLoss     bool
}

// stopped reports whether scheduling has stopped (for any reason, a signal
// included): an episode that has not started yet is then left for a resume.
func (h *halter) stopped() bool { return h.sched.Err() != nil }

// Decision: a stop may reach more than the collector. A batch system
// delivers its stop to every process of the job — Slurm's scancel signals
// all of them (proctrack linuxproc and cgroup), and a kill of a process
// group does the same — and a local sandbox's commands and a host Chromium
// are the collector's children. The grace period's episodes then end with
// observations the agent never caused: a killed `sleep` read as a failed
// step, a verifier whose `cat` was killed read as reward 0. The shell's
// exit status does not tell (a killed child of a shell leaves the shell
// exiting 1), so the collector finds out whether the stop reached its
// children from a canary: a child of its own, in a process group of its
// own like a sandbox's commands, that does nothing but wait. When the stop
// killed the canary and the sandboxes are host processes (Isolation
// "none"), every episode in flight at the signal is kept as cancelled,
// without its reward, and -resume runs it again; so is, whatever the
// provider, an episode that ended as a scaffold loss after such a stop (a
// model server in the same job). Running an episode again costs one
// episode; keeping it would train on a fault. A stop that reached the
// collector alone (an operator's kill PID, Kubernetes' SIGTERM to the
// container's first process) keeps -grace as it is.
//
// The collector may learn of the stop after its children: Slurm's
// proctrack/linuxproc signals a job's process tree deepest first, so a
// verifier's `cat` dies, its shell exits 1 and the episode ends while the
// collector's own SIGTERM is still on its way. An episode that ends before
// the collector has seen a stop therefore asks the canary too (the
// command's StopGuard): a canary already struck (a signal pending, dying, or dead of a signal) means a
// stop is under way, and the episode waits for the collector's signal
// before it is judged. The canary is the collector's child, signalled in
// the same sweep as the sandboxes' commands, microseconds apart; the
// episode's end takes a shell's exit and the verifier's scoring after its
// command died, which is longer.

// StopGuard tells whether a stop reached the collector's children too (the
// decision above). Signals are the program's: forkline's command gives its
// canary (internal/stopguard); a program that embeds the collector gives
// its own, or none.
type StopGuard interface {
	// Struck reports, without waiting, whether a stop is under way among
	// the children (a hint: the verdict is Reached's).
	Struck() bool
	// Reached reports whether the stop that came at since reached the
	// children; it may wait up to about a second after since to tell.
	Reached(since time.Time) bool
}

// guardWait is how long an episode that saw the guard struck waits for the
// collector's own stop before it takes the children's to be theirs alone.
const guardWait = time.Second

// struck is the guard's hint; with no guard, nothing is under way.
func (h *halter) struck() bool { return h.guard != nil && h.guard.Struck() }

// reached is the guard's verdict. With no guard the stop is taken to have
// reached the collector alone, and -grace is kept as it is: a program that
// cancels the run's context without a signal to its children (the usual
// embedding) loses no episode to it; one whose stops reach its children
// gives a guard.
func (h *halter) reached(since time.Time) bool { return h.guard != nil && h.guard.Reached(since) }

// stopHit reports whether episode ep, which was in flight when the stop
// signal came, is to be kept as cancelled (the decision above), and why.
func (h *halter) stopHit(ep *episode.Episode) (detail string, hit bool) {
	at, ok := h.signalledAt()
	if !ok && h.hostProcesses && failedVerify(ep) {
		// A verifier that failed may have failed because the stop killed
		// its command: the sweep that signals the sandboxes' processes
		// reaches the canary a moment later, and on a loaded machine the
		// signaller can be descheduled between the two (an episode was
		// kept with reward 0 this way). A failed verification waits a
		// moment for the canary before it is judged; a passed one, or
		// an episode without a verifier, does not.
		for end := time.Now().Add(suspectWait); !h.struck() && time.Now().Before(end); {
			select {
			case <-h.signalCame:
			case <-time.After(10 * time.Millisecond):
			}
			if _, ok := h.signalledAt(); ok {
				break
			}
		}
		at, ok = h.signalledAt()
	}
	if !ok && h.struck() {
		// The stop reached the canary before the collector (above): wait
		// for the collector's own signal. None within guardWait means
		// the canary alone was killed, and nothing stops.
		select {
		case <-h.signalCame:
			at, ok = h.signalledAt()
		case <-time.After(guardWait):
		}
	}
	if !ok || !h.reached(at) {
		return "", false
	}
	if h.hostProcesses {
		return "in flight when the stop signal, which reached the sandbox's processes too, came; a resume runs it again", true
	}
	if exit := runtime.ExitReason(ep.Row.ExitReason); exit.ScaffoldLoss() {
		return fmt.Sprintf("ended as %s after the stop signal, which reached the collector's children too (%s); a resume runs it again", exit, ep.Row.Detail), true
	}
	return "", false
}

// suspectWait is how long a failed verification waits for the canary to
// show a stop under way before the episode is judged (stopHit). It is paid
// by every failed verification on a provider whose sandboxes are host
// processes, stop or not: a fixed cost per failed episode, traded for never
// training on a reward the stop made. Long against a signaller's sweep
// (microseconds between two kills; a scheduling delay at most tens of
// milliseconds on a loaded machine), short against an episode.
const suspectWait = 100 * time.Millisecond

// failedVerify reports whether ep's verifier ran and gave no reward above
// zero (failed, or gave none).
func failedVerify(ep *episode.Episode) bool {
	return ep.Reward != nil && (ep.Reward.Value == nil || *ep.Reward.Value <= 0)
}

// signal records the moment of the run's stop signal.
func (h *halter) signal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.signalled.IsZero() {
		h.signalled = time.Now()
		close(h.signalCame)
	}
}

func (h *halter) signalledAt() (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.signalled, !h.signalled.IsZero()
}

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
		h.log("no new episodes are started; the episodes in flight finish; episodes it ends are not kept (a resume runs them once the service is back)")
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
		h.log("the loss limit %s passed: %d scaffold losses among %d episodes to run; no new episodes are started (the episodes in flight finish and are kept; a resume continues)",
			limit, losses, todo)
	}
}

func (h *halter) state() (unavailable, writeErr error, maxLoss bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unavailable, h.writeErr, h.maxLoss
}
