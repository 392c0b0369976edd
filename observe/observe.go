// Package observe is what a running command reports as it goes — a run
// starting, golden builds and their setup commands, replica resets, every
// step, every episode's end, shard generations closing — as plain event
// values handed to an Observer. The collector and the replayer (and any
// other consumer of package episode, such as an environment server) emit
// them; metrics (Prometheus), progress (a terminal bar or plain lines) and
// tests implement Observer.
//
// It must not know who records the events or how: it imports the standard
// library only, so that the libraries that emit events never depend on a
// metrics client, and a new consumer needs no change here.
package observe

import (
	"sync"
	"time"
)

// Observer receives events. Observe is called from the goroutines that do
// the work (an episode's, a golden build's, the shard writer's), possibly
// concurrently, so implementations must be safe for concurrent use and
// must not block: an observer that is slow slows the run.
type Observer interface {
	Observe(Event)
}

// Event is one of the types below.
type Event interface{ event() }

// Func adapts a function to Observer.
type Func func(Event)

// Observe calls f.
func (f Func) Observe(e Event) { f(e) }

// Multi is an Observer that hands every event to each of its observers in
// order; nil entries are skipped.
type Multi []Observer

// Observe hands e to every observer.
func (m Multi) Observe(e Event) {
	for _, o := range m {
		if o != nil {
			o.Observe(e)
		}
	}
}

// Nop drops every event; it is what a nil Observer in a config means.
var Nop Observer = Func(func(Event) {})

// Or returns o, or Nop when o is nil.
func Or(o Observer) Observer {
	if o == nil {
		return Nop
	}
	return o
}

// RunStarted opens a run, once, before its first episode.
type RunStarted struct {
	Command string // "collect", "replay"
	RunID   string
	// Planned is the episodes of this run (of this part, for a collect with
	// -shard); KeptBefore how many of them a resumed run held already; Todo
	// how many this invocation runs.
	Planned, KeptBefore, Todo int
	Replicas                  int
	// Live, when set, returns what the replicas and the queue are doing
	// right now; observers may call it from any goroutine at any time
	// until RunEnded (a metrics scrape, a progress tick).
	Live func() Live
}

// Planned is a change of the run's plan while it runs: a root that branched
// adds its branches (Added > 0); a stored episode whose prefix did not
// reproduce leaves it (Added < 0). Observers that show a total add it.
type Planned struct {
	Added int
}

// Live is a snapshot of a running run.
type Live struct {
	Replicas int // the pool's size
	Busy     int // replicas resetting or running an episode
	Standby  int // replicas prepared ahead, ready for a hand-off
	Queued   int // episodes of this invocation not started yet
}

// Idle is the replicas doing nothing.
func (l Live) Idle() int { return max(l.Replicas-l.Busy, 0) }

// GoldenPhase is where a golden build is.
type GoldenPhase string

// The phases of a golden build; it ends in GoldenBuilt or GoldenFailed.
const (
	GoldenCreate     GoldenPhase = "create"
	GoldenSetup      GoldenPhase = "setup"
	GoldenCheckpoint GoldenPhase = "checkpoint"
	GoldenBuilt      GoldenPhase = "built"
	GoldenFailed     GoldenPhase = "failed"
)

// Golden is a golden build moving to a new phase.
type Golden struct {
	Task     string
	Phase    GoldenPhase
	Command  string // the setup command now running (GoldenSetup)
	Index    int    // its index among the task's setup commands
	Commands int    // how many setup commands the task has
	Began    time.Time
	Took     time.Duration // at GoldenBuilt and GoldenFailed
	Err      error         // at GoldenFailed
}

// Reset is a replica made ready for an episode.
type Reset struct {
	Task     string
	Strategy string // fork, recreate, fork+standby ...
	Method   string // how the provider made the sandbox (overlay, copy, container ...)
	Took     time.Duration
	// GoldenBuild is how long the golden the replica comes from took to
	// build (zero for a replica made without one).
	GoldenBuild time.Duration
}

// Step is one step of an episode, as soon as it is recorded.
type Step struct {
	Task, EpisodeID string
	Index           int
	Action          string // the canonical action's kind; "" for a model turn without one
	Policy, Env     time.Duration
	ModelTurn       bool // a model answered this step
	// PromptTokens and CompletionTokens are the model's usage for this
	// step (zero without a model or when the server sent none).
	PromptTokens, CompletionTokens int
}

// EpisodeEnded is an episode's end.
type EpisodeEnded struct {
	Task, EpisodeID string
	Exit            string // the exit reason
	Detail          string // the episode row's detail: why it ended so
	ScaffoldLoss    bool
	Steps           int
	// TokenDrift is set when the episode's token record drifted from the
	// model's own tokens (see the episode row's token_drift).
	TokenDrift bool
	// Kept is false for an episode the run did not keep: one ended by an
	// unavailable service (a resume runs it again), or one cancelled
	// before its first step.
	Kept bool
	// Reward is the episode-level verifier reward; RewardMissing is set
	// when the verifier ran and gave no value.
	Reward        *float64
	RewardMissing bool
	// Status is a replay's verdict (identical, diverged, error); "" for a
	// collected episode.
	Status string
	Took   time.Duration
}

// Generation is a shard generation closed and listed in the manifest.
type Generation struct {
	Number int   // the generation's index in the dataset
	Bytes  int64 // the bytes of its shard files
	Rows   int64
}

// RunEnded closes a run, once, after its last episode.
type RunEnded struct {
	Status string // complete, partial
	Err    error
}

func (RunStarted) event()   {}
func (Planned) event()      {}
func (Golden) event()       {}
func (Reset) event()        {}
func (Step) event()         {}
func (EpisodeEnded) event() {}
func (Generation) event()   {}
func (RunEnded) event()     {}

// Recorder is an Observer that keeps every event, for tests and examples.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Observe keeps e.
func (r *Recorder) Observe(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns the events kept so far, in order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}
