// Package pool owns golden checkpoints and replicas: it builds one golden
// checkpoint per template (create, setup, checkpoint — once), forks replicas
// from it, runs each template's start commands in every replica, measures the
// reset, and schedules episodes over a bounded number of replicas in
// parallel. A replica whose sandbox breaks is discarded and replaced; the
// run goes on. Two things stay off an episode's path: a run's goldens can
// be built ahead, all of them, in the background (Prepare), and a finished
// episode's sandbox is closed in the background while its slot takes the
// next job.
//
// On a provider whose checkpoints hold memory (Capabilities().ForksMemory:
// gvisor) the start commands run once, in the golden after setup and before
// its checkpoint: what they leave running is running in every fork, so no
// fork runs them again, and a branch runs neither them nor BranchStart (it
// has its parent's processes). A recreated replica has no checkpoint to
// inherit from and runs them as on any provider.
//
// It also makes branch points: checkpoints of a replica in the middle of its
// episode (Checkpoint), which replicas are forked from like from a golden
// (ForkBranch, or a Job whose Branch is set), bounded in number and
// released when the jobs that fork them have ended (see Branch).
//
// It knows providers and runtime sessions. It does not know task files,
// policies, rewards or datasets: a Template carries the commands, and the
// caller's episode function does the rest.
package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// Strategy is how a replica is reset for its next episode.
type Strategy string

// Reset strategies.
const (
	// Fork starts every episode from the golden checkpoint. It needs a
	// provider that can checkpoint.
	Fork Strategy = "fork"
	// Recreate builds every episode's sandbox from scratch and replays the
	// setup: the slow baseline peers use.
	Recreate Strategy = "recreate"
	// Auto forks when the provider can, else recreates, and says so.
	Auto Strategy = "auto"
)

// ParseStrategy reads a strategy name.
func ParseStrategy(s string) (Strategy, error) {
	switch Strategy(s) {
	case Fork, Recreate, Auto:
		return Strategy(s), nil
	}
	return "", fmt.Errorf("pool: unknown reset strategy %q (known: auto, fork, recreate)", s)
}

// Template is what replicas of one task are made from.
type Template struct {
	Key   string         // unique per template, e.g. task id + hash
	Spec  providers.Spec // sandbox to create
	Setup []string       // run once, into the golden checkpoint (or per episode when recreating)
	// Start is run in every replica before its episode — or, on a provider
	// that forks memory (Capabilities().ForksMemory), once in the golden
	// before its checkpoint, so that what it starts runs in every fork.
	Start []string
	// BranchStart is run instead of Start in every replica forked from a
	// branch point (a Branch): it carries the parent's files, not its
	// processes, and Start was written for the golden's state. It is not
	// run on a provider that forks memory: a branch has the parent's
	// processes.
	BranchStart []string
	// CommandTimeout bounds each setup and start command.
	CommandTimeout time.Duration
}

// Job is one episode to run.
type Job struct {
	Template *Template
	// Branch, when set, is the branch point the job's replica is forked
	// from (with Template's BranchStart commands) instead of the
	// template's golden; the job counts as one of its uses.
	Branch *Branch
	// Payload is the caller's own data for the episode, passed back untouched.
	Payload any
}

// Replica is a sandbox ready for one episode, with how it was made.
type Replica struct {
	Sandbox  providers.Sandbox
	Slot     int      // worker slot, 0..Replicas-1
	Attempt  int      // 1 for the first sandbox tried for this job
	Strategy Strategy // what was really used: fork or recreate
	Origin   string   // the provider's account of how the sandbox was made
	Golden   *Golden  // nil when recreating
	// Reset is what the episode waited for its sandbox: the fork (or
	// recreate) and start commands, or only the hand-off when Standby.
	Reset time.Duration
	// Standby reports that the replica was prepared ahead, in the
	// background; Prepared is what preparing it took.
	Standby  bool
	Prepared time.Duration

	template *Template // what it was made from, for Checkpoint
}

// Golden is a built golden checkpoint.
type Golden struct {
	Checkpoint providers.Checkpoint
	BuildTime  time.Duration // create + setup + checkpoint
	// Stored: the provider had it from an earlier run
	// (providers.GoldenStore); BuildTime is then the look-up.
	Stored bool
}

// Outcome tells the pool what became of a replica after its episode.
type Outcome int

// Outcomes.
const (
	// Done: the episode finished; the replica is destroyed (forks are cheap
	// and never reused, so no state leaks between episodes).
	Done Outcome = iota
	// Broken: the sandbox failed underneath the episode.
	Broken
)

// EpisodeFunc runs one job on a ready replica. When the pool could not get a
// replica (the golden build or every reset failed), it calls the function
// with a nil Sandbox and err describing why, so the caller can record the
// episode as an environment error; the run goes on. A job whose replica was
// not ready when ctx was cancelled is not passed to fn at all: it never
// started.
type EpisodeFunc func(ctx context.Context, job Job, r Replica, err error) Outcome

// Config configures a pool.
type Config struct {
	Provider providers.Provider
	Replicas int      // episodes in parallel; default 1
	Strategy Strategy // default Auto
	// MaxAttempts bounds how many sandboxes are tried for one job when
	// resets fail; default 3.
	MaxAttempts int
	// Standby is how many ready replicas per template are kept prepared in
	// the background (see Expect), so a reset is a hand-off; 0 disables it.
	Standby int
	// StandbyBudget caps the replicas prepared ahead across every template
	// (ready, or being made for no job yet); 0 is no cap beyond Standby
	// per template. Under a cap the replicas prepared are those of the
	// next StandbyBudget jobs ExpectInOrder named, whatever their
	// templates: the task running now is never starved by one whose
	// episodes come later, and a plan that alternates tasks finds each
	// one's replica ready.
	StandbyBudget int
	// MaxCreates caps concurrent sandbox creations and forks (providers
	// have start-rate limits; on Docker, parallel starts are CPU-bound);
	// 0 means 2 × Replicas.
	MaxCreates int
	// MaxBranches bounds the branch points live at once (Checkpoint);
	// 0 means 2 × Replicas.
	MaxBranches int
	// Log receives one line per notable event (fallbacks, replacements).
	Log func(format string, args ...any)
	// OnGolden, when set, is told how each golden build goes as it goes —
	// its start, each setup command as it begins, the checkpoint, the end —
	// so that a run can show what it is waiting for while a long setup
	// runs. It is called from the building goroutine and must not block.
	OnGolden func(GoldenProgress)
}

// GoldenPhase is where a golden build is.
type GoldenPhase string

// The phases of a golden build, in order; a build ends in GoldenBuilt or
// GoldenFailed.
const (
	GoldenCreate     GoldenPhase = "create"     // creating the builder sandbox
	GoldenSetup      GoldenPhase = "setup"      // running a setup command (Command, Index)
	GoldenCheckpoint GoldenPhase = "checkpoint" // checkpointing the set-up sandbox
	GoldenBuilt      GoldenPhase = "built"
	GoldenFailed     GoldenPhase = "failed"
)

// GoldenProgress is one step of a golden build.
type GoldenProgress struct {
	Template string // the template's Key
	Phase    GoldenPhase
	Command  string // the setup command running (GoldenSetup)
	Index    int    // its index in Template.Setup
	Commands int    // len(Template.Setup)
	Began    time.Time
	Took     time.Duration // since Began, at GoldenBuilt and GoldenFailed
	Err      error         // at GoldenFailed
}

// Pool runs jobs over replicas. Build one per run.
type Pool struct {
	cfg      Config
	strategy Strategy
	// forksMemory: the pool forks on a provider whose checkpoints hold
	// processes, so Start runs in the golden, not per fork (see the
	// package comment).
	forksMemory bool

	mu       sync.Mutex
	goldens  map[string]*goldenEntry
	standbys map[string]*standby
	// sbMu guards the standby window (ExpectInOrder): sbOwner is the
	// standby of each job in order, sbTaken whether it was handed a
	// replica; the window is the jobs up to sbCut, of which sbInWindow
	// are not handed one yet (at most StandbyBudget).
	sbMu       sync.Mutex
	sbOwner    []*standby
	sbTaken    []bool
	sbCut      int
	sbInWindow int
	branches   map[*Branch]struct{} // live branch points
	creates    chan struct{}        // semaphore of MaxCreates

	// closers bounds the sandboxes being torn down in the background
	// (release) to Replicas; closing counts them, background golden
	// builds (Prepare) are in ahead.
	closers chan struct{}
	closing sync.WaitGroup
	ahead   sync.WaitGroup

	statsMu sync.Mutex
	stats   Stats
	busy    int // slots running a job: resetting a replica or in its episode
}

// Occupancy is what the pool's replicas are doing right now.
type Occupancy struct {
	Replicas int // the pool's size (Config.Replicas)
	Busy     int // slots resetting a replica or running an episode
	Standby  int // replicas prepared ahead, ready for a hand-off
}

// Occupancy returns what the replicas are doing now; safe to call from any
// goroutine (a metrics scrape, a progress line).
func (p *Pool) Occupancy() Occupancy {
	p.statsMu.Lock()
	o := Occupancy{Replicas: p.cfg.Replicas, Busy: p.busy}
	p.statsMu.Unlock()
	p.mu.Lock()
	for _, sb := range p.standbys {
		o.Standby += sb.readyCount()
	}
	p.mu.Unlock()
	return o
}

type goldenEntry struct {
	once   sync.Once
	golden *Golden
	err    error
}

// Stats counts what the pool did.
type Stats struct {
	GoldenBuilds int
	Resets       int
	Replacements int
	BranchForks  int // replicas forked from branch points (counted in Resets too)
}

// ErrSetup wraps a failed setup or start command.
var ErrSetup = errors.New("pool: setup failed")

// New validates cfg and returns a pool. With Strategy Auto on a provider that
// cannot checkpoint, it falls back to Recreate and logs that loudly; with
// Strategy Fork on such a provider it fails.
func New(cfg Config) (*Pool, error) {
	if cfg.Provider == nil {
		return nil, errors.New("pool: no provider")
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	if cfg.Strategy == "" {
		cfg.Strategy = Auto
	}
	caps := cfg.Provider.Capabilities()
	canFork := caps.Checkpoint && caps.Fork
	strategy := cfg.Strategy
	switch cfg.Strategy {
	case Fork:
		if !canFork {
			return nil, fmt.Errorf("pool: provider %s cannot checkpoint and fork; use the recreate or auto strategy", cfg.Provider.Name())
		}
	case Auto:
		if canFork {
			strategy = Fork
		} else {
			strategy = Recreate
			cfg.Log("WARNING: provider %s cannot checkpoint; every episode will recreate its sandbox and replay setup (slow)", cfg.Provider.Name())
		}
	case Recreate:
	default:
		return nil, fmt.Errorf("pool: unknown reset strategy %q (known: auto, fork, recreate)", cfg.Strategy)
	}
	if cfg.MaxCreates <= 0 {
		cfg.MaxCreates = 2 * cfg.Replicas
	}
	if cfg.MaxBranches <= 0 {
		cfg.MaxBranches = defaultMaxBranches(cfg.Replicas)
	}
	return &Pool{cfg: cfg, strategy: strategy, forksMemory: strategy == Fork && caps.ForksMemory, goldens: map[string]*goldenEntry{},
		standbys: map[string]*standby{}, sbCut: -1, branches: map[*Branch]struct{}{}, creates: make(chan struct{}, cfg.MaxCreates),
		closers: make(chan struct{}, cfg.Replicas)}, nil
}

// Strategy returns the strategy really in use (Auto resolved).
func (p *Pool) Strategy() Strategy { return p.strategy }

// ErrSetupNetworkRecreate is returned by Check (and by a recreate of such a
// template) for a template whose setup runs on another network than its
// episodes (Spec.SetupNetwork) while the pool recreates: a recreated
// sandbox runs setup and the episode in one sandbox, so the episode would
// have the setup's network.
var ErrSetupNetworkRecreate = errors.New("pool: a setup network apart from the episodes' needs a golden checkpoint (the fork or auto strategy)")

// Check says whether the pool can run t as its strategy would: it refuses
// a template with a setup network of its own while recreating. Collectors
// call it before the first episode.
func (p *Pool) Check(t *Template) error {
	if p.strategy == Recreate && t.Spec.SetupNetwork != "" && t.Spec.SetupNetwork != t.Spec.Resources.Network {
		return fmt.Errorf("%w: %s sets up on network %s and runs episodes on %q", ErrSetupNetworkRecreate, t.Key, t.Spec.SetupNetwork, t.Spec.Resources.Network)
	}
	return nil
}

// Stats returns counters so far.
func (p *Pool) Stats() Stats {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	return p.stats
}

// Run runs every job from jobs with at most Replicas in parallel, calling fn
// for each, and returns when all have run or ctx is cancelled (jobs not yet
// started are then skipped). Panics in fn propagate. Goldens stay built until
// Close, so Run may be called again.
func (p *Pool) Run(ctx context.Context, jobs <-chan Job, fn EpisodeFunc) {
	p.RunScheduled(ctx, ctx, jobs, fn)
}

// RunScheduled is Run with scheduling apart from running: once sched is
// done, no job starts — one already taken from jobs but still waiting for
// a replica is skipped, so it builds no golden and resets no replica —
// while the jobs already started go on under ctx (a collector's grace after
// its first signal).
func (p *Pool) RunScheduled(ctx, sched context.Context, jobs <-chan Job, fn EpisodeFunc) {
	slots := make(chan int, p.cfg.Replicas)
	for i := range p.cfg.Replicas {
		slots <- i
	}
	wp := pool.New().WithMaxGoroutines(p.cfg.Replicas)
	for {
		var job Job
		var ok bool
		select {
		case <-ctx.Done():
			wp.Wait()
			p.closing.Wait()
			return
		case job, ok = <-jobs:
		}
		if !ok {
			break
		}
		if ctx.Err() != nil {
			break
		}
		wp.Go(func() {
			slot := <-slots
			if sched.Err() != nil {
				slots <- slot
				return // never started: the caller finds it missing
			}
			p.addBusy(1)
			defer func() {
				p.addBusy(-1)
				slots <- slot
			}()
			p.runJob(ctx, job, slot, fn)
		})
	}
	wp.Wait()
	// Every sandbox the jobs used is closed when Run returns.
	p.closing.Wait()
}

func (p *Pool) runJob(ctx context.Context, job Job, slot int, fn EpisodeFunc) {
	var lastErr error
	for attempt := 1; attempt <= p.cfg.MaxAttempts; attempt++ {
		if ctx.Err() != nil {
			return // never started: the caller will find it missing and may resume it
		}
		var r Replica
		var err error
		if job.Branch != nil {
			r, err = p.ForkBranch(ctx, job.Branch)
		} else {
			r, err = p.replica(ctx, job.Template, attempt)
		}
		r.Slot, r.Attempt = slot, attempt
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			lastErr = err
			// A golden that cannot be built will not build on a retry.
			if errors.Is(err, errGolden) || ctx.Err() != nil {
				break
			}
			p.count(func(s *Stats) { s.Replacements++ })
			p.cfg.Log("replica for %s failed to reset (attempt %d/%d): %v", job.Template.Key, attempt, p.cfg.MaxAttempts, err)
			continue
		}
		out := fn(ctx, job, r, nil)
		if job.Branch != nil {
			// A branch point is released once its branches' sandboxes are
			// gone (ended, below): this one is closed first.
			p.closeSandbox(ctx, r.Sandbox)
		} else {
			p.release(ctx, r.Sandbox)
		}
		if out == Broken {
			p.count(func(s *Stats) { s.Replacements++ })
			p.cfg.Log("replica %d broke during an episode of %s; replaced", slot, job.Template.Key)
		}
		if job.Branch != nil {
			job.Branch.ended(ctx)
		}
		return
	}
	fn(ctx, job, Replica{Slot: slot, Attempt: p.cfg.MaxAttempts, Strategy: branchStrategy(job)}, lastErr)
	if job.Branch != nil {
		job.Branch.ended(ctx)
	}
}

// release closes an episode's sandbox in the background, so that the
// teardown is never on an episode's path: the slot takes its next job at
// once. At most Replicas sandboxes are torn down at a time; past that, the
// slot waits, so the sandboxes alive stay below twice the replicas. Run
// returns once every one is closed.
func (p *Pool) release(ctx context.Context, sb providers.Sandbox) {
	p.closers <- struct{}{}
	p.closing.Add(1)
	go func() {
		defer func() {
			<-p.closers
			p.closing.Done()
		}()
		p.closeSandbox(ctx, sb)
	}()
}

// closeSandbox closes sb within a minute, even when ctx is done (a
// cancelled run still removes what it made).
func (p *Pool) closeSandbox(ctx context.Context, sb providers.Sandbox) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := sb.Close(closeCtx); err != nil {
		p.cfg.Log("closing sandbox %s: %v", sb.Info().ID, err)
	}
}

// Prepare builds the goldens of templates ahead of their first episodes,
// in the background, in the order given (a run's plan order), up to n at
// a time; it returns at once. So no replica waits for a golden at a task
// boundary, and a run's first episode still starts when its own task's
// golden is ready (its Golden call waits for that build only). A build not
// begun when sched is done never begins (a stopped run builds nothing
// more); one begun goes on under ctx, as an episode's own build would. A
// failed build is remembered as Golden remembers it: the task's episodes
// fail fast with its error. Only a forking pool has goldens; Close waits
// for the builds.
func (p *Pool) Prepare(ctx, sched context.Context, templates []*Template, n int) {
	if p.strategy != Fork || len(templates) == 0 {
		return
	}
	n = max(n, 1)
	next := make(chan *Template)
	for range min(n, len(templates)) {
		p.ahead.Add(1)
		go func() {
			defer p.ahead.Done()
			for t := range next {
				if sched.Err() == nil {
					_, _ = p.Golden(ctx, t) // remembered for the task's episodes
				}
			}
		}()
	}
	p.ahead.Add(1)
	go func() {
		defer p.ahead.Done()
		defer close(next)
		for _, t := range templates {
			select {
			case next <- t:
			case <-sched.Done():
				return
			}
		}
	}()
}

// branchStrategy is Branched for a job that forks a branch point, so that
// a branch the pool could not fork still says what it was; "" otherwise.
func branchStrategy(job Job) Strategy {
	if job.Branch != nil {
		return Branched
	}
	return ""
}

func (p *Pool) addBusy(n int) {
	p.statsMu.Lock()
	p.busy += n
	p.statsMu.Unlock()
}

func (p *Pool) count(f func(*Stats)) {
	p.statsMu.Lock()
	f(&p.stats)
	p.statsMu.Unlock()
}

var errGolden = errors.New("golden build failed")

// replica returns a ready replica for t: on a job's first attempt, a
// standby one when one is waiting, else one made now. Only the first attempt
// asks the standby: it accounts for the job there, once (take), whether or
// not a replica was waiting. A retry makes its replica now and leaves the
// standby alone: taking from it again would count the job once more (the
// standby would stop preparing for jobs still to come) and destroy a ready
// replica another job could have had.
func (p *Pool) replica(ctx context.Context, t *Template, attempt int) (Replica, error) {
	if attempt == 1 {
		p.mu.Lock()
		sb := p.standbys[t.Key]
		p.mu.Unlock()
		if sb != nil {
			began := time.Now()
			if r, ok := sb.take(ctx); ok {
				r.Reset = time.Since(began)
				return r, nil
			}
		}
	}
	return p.acquire(ctx, t)
}

// createSlot waits for the right to create or fork one sandbox.
func (p *Pool) createSlot(ctx context.Context) (func(), error) {
	select {
	case p.creates <- struct{}{}:
		return func() { <-p.creates }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// acquire returns a ready sandbox for t: forked from its golden (built on
// first use) or recreated, with start commands run.
func (p *Pool) acquire(ctx context.Context, t *Template) (Replica, error) {
	began := time.Now()
	r := Replica{Strategy: p.strategy, template: t}
	var sb providers.Sandbox
	if p.strategy == Fork {
		g, gerr := p.Golden(ctx, t)
		if gerr != nil {
			return r, fmt.Errorf("%w: %w", errGolden, gerr)
		}
		r.Golden = g
		began = time.Now() // the reset is the fork, not the one-off build
		release, err := p.createSlot(ctx)
		if err != nil {
			return r, err
		}
		sb, err = p.cfg.Provider.Fork(ctx, g.Checkpoint)
		release()
		if err != nil {
			return r, fmt.Errorf("pool: fork of %s: %w", t.Key, err)
		}
		if p.forksMemory {
			// The golden ran Start before its checkpoint: its processes
			// came with the fork.
			r.Sandbox, r.Origin, r.Reset = sb, sb.Info().Origin, time.Since(began)
			p.count(func(s *Stats) { s.Resets++ })
			return r, nil
		}
	} else {
		if err := p.Check(t); err != nil {
			return r, err
		}
		release, err := p.createSlot(ctx)
		if err != nil {
			return r, err
		}
		sb, err = p.cfg.Provider.Create(ctx, t.Spec)
		release()
		if err != nil {
			return r, fmt.Errorf("pool: create for %s: %w", t.Key, err)
		}
		if err := runCommands(ctx, sb, "setup", t.Setup, t.CommandTimeout); err != nil {
			sb.Close(context.WithoutCancel(ctx))
			return r, err
		}
	}
	if err := runCommands(ctx, sb, "start", t.Start, t.CommandTimeout); err != nil {
		sb.Close(context.WithoutCancel(ctx))
		return r, err
	}
	r.Sandbox = sb
	r.Origin = sb.Info().Origin
	r.Reset = time.Since(began)
	p.count(func(s *Stats) { s.Resets++ })
	return r, nil
}

// Golden returns t's golden checkpoint, building it on first use: create the
// sandbox, run setup, checkpoint, destroy the builder sandbox. Concurrent
// callers wait for one build. A failed build is remembered and returned to
// every caller, so a broken task fails fast instead of rebuilding per
// episode.
func (p *Pool) Golden(ctx context.Context, t *Template) (*Golden, error) {
	p.mu.Lock()
	e, ok := p.goldens[t.Key]
	if !ok {
		e = &goldenEntry{}
		p.goldens[t.Key] = e
	}
	p.mu.Unlock()
	e.once.Do(func() {
		e.golden, e.err = p.buildGolden(ctx, t)
		if e.err == nil {
			p.count(func(s *Stats) { s.GoldenBuilds++ })
		}
	})
	return e.golden, e.err
}

func (p *Pool) buildGolden(ctx context.Context, t *Template) (g *Golden, err error) {
	began := time.Now()
	tell := func(gp GoldenProgress) {
		if p.cfg.OnGolden != nil {
			gp.Template, gp.Began, gp.Commands = t.Key, began, len(t.Setup)
			p.cfg.OnGolden(gp)
		}
	}
	tell(GoldenProgress{Phase: GoldenCreate})
	defer func() {
		if err != nil {
			tell(GoldenProgress{Phase: GoldenFailed, Took: time.Since(began), Err: err})
		} else {
			tell(GoldenProgress{Phase: GoldenBuilt, Took: g.BuildTime})
		}
	}()
	if gs, ok := providers.As[providers.GoldenStore](p.cfg.Provider); ok {
		cp, stored, err := gs.StoredGolden(ctx, t.Spec, t.Key)
		if err != nil {
			return nil, fmt.Errorf("pool: golden for %s: %w", t.Key, err)
		}
		if stored {
			p.cfg.Log("golden for %s: stored by an earlier run (%s), not built", t.Key, cp.ID)
			return &Golden{Checkpoint: cp, BuildTime: time.Since(began), Stored: true}, nil
		}
	}
	sb, err := p.cfg.Provider.Create(ctx, t.Spec)
	if err != nil {
		return nil, fmt.Errorf("pool: golden for %s: create: %w", t.Key, err)
	}
	defer sb.Close(context.WithoutCancel(ctx))
	onCommand := func(i int, cmd string) { tell(GoldenProgress{Phase: GoldenSetup, Command: cmd, Index: i}) }
	if err := runCommandsTold(ctx, sb, "setup", t.Setup, t.CommandTimeout, onCommand); err != nil {
		return nil, fmt.Errorf("pool: golden for %s: %w", t.Key, err)
	}
	if p.forksMemory {
		// The checkpoint holds processes: what start leaves running runs
		// in every fork, started once.
		if err := runCommands(ctx, sb, "start", t.Start, t.CommandTimeout); err != nil {
			return nil, fmt.Errorf("pool: golden for %s: %w", t.Key, err)
		}
	}
	tell(GoldenProgress{Phase: GoldenCheckpoint})
	cp, err := p.cfg.Provider.Checkpoint(ctx, sb, t.Key)
	if err != nil {
		return nil, fmt.Errorf("pool: golden for %s: checkpoint: %w", t.Key, err)
	}
	return &Golden{Checkpoint: cp, BuildTime: time.Since(began)}, nil
}

// runCommands runs setup or start commands in order and fails on the first
// that does not exit 0, naming it with its exit code and output tail.
func runCommands(ctx context.Context, sb providers.Sandbox, phase string, cmds []string, timeout time.Duration) error {
	return runCommandsTold(ctx, sb, phase, cmds, timeout, nil)
}

// runCommandsTold is runCommands telling onCommand, when set, of each
// command as it begins.
func runCommandsTold(ctx context.Context, sb providers.Sandbox, phase string, cmds []string, timeout time.Duration, onCommand func(int, string)) error {
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	for i, c := range cmds {
		if onCommand != nil {
			onCommand(i, c)
		}
		obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: c, TimeoutMS: timeout.Milliseconds()})
		if err != nil {
			return fmt.Errorf("%w: %s[%d] %q: %w", ErrSetup, phase, i, c, err)
		}
		if obs.Error {
			why := fmt.Sprintf("exit code %d", obs.ExitCode)
			if obs.TimedOut {
				why = "timed out after " + timeout.String()
			}
			return fmt.Errorf("%w: %s[%d] %q: %s; output tail:\n%s", ErrSetup, phase, i, c, why, outputTail(obs.Text(), 1024))
		}
	}
	return nil
}

func outputTail(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	if len(s) > n {
		s = "…" + strings.ToValidUTF8(s[len(s)-n:], "")
	}
	if s == "" {
		return "(no output)"
	}
	return s
}

// Close stops the standby fillers, closes the replicas nobody took, and
// releases every branch point still live and then every golden checkpoint.
func (p *Pool) Close(ctx context.Context) error {
	p.ahead.Wait()
	p.closing.Wait()
	p.mu.Lock()
	sbs := p.standbys
	p.standbys = map[string]*standby{}
	p.mu.Unlock()
	defer func() {
		p.sbMu.Lock()
		p.sbOwner, p.sbTaken, p.sbCut, p.sbInWindow = nil, nil, -1, 0
		p.sbMu.Unlock()
	}()
	for _, sb := range sbs {
		sb.stop(ctx)
	}
	errs := []error{p.releaseBranches(ctx)}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.goldens {
		if e.golden != nil {
			if err := p.cfg.Provider.Release(ctx, e.golden.Checkpoint); err != nil {
				errs = append(errs, fmt.Errorf("pool: release golden %s: %w", k, err))
			}
		}
		delete(p.goldens, k)
	}
	return errors.Join(errs...)
}
