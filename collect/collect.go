// Package collect is the collector as a library: it plans the episodes of a
// run (tasks × repeats, with deterministic ids), opens the provider and the
// pool, drives every episode with its policy, verifies it, captures its steps
// and commits everything to the native dataset, episode by episode, so that a
// crash loses at most one open shard generation and a resumed run skips what
// is already kept. It decides what is the episode's failure (kept, a scaffold
// loss) and what is the run's (an unavailable service, a broken writer: not
// kept, the run stops partial), and whether a resume matches the run it
// resumes, read-only. forkline collect (cmd/forkline) is a thin wrapper
// around Run.
//
// Each episode runs through package episode (the runner collect shares with
// replay); collect adds what belongs to a run: plans and ids, parts,
// resume compatibility, merge, the summary, and whose failure stops it. It
// is where the consumer-side pieces meet (task, policy, episode, pool,
// capture, formats/shard); none of those know about each other through it.
package collect

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/record"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// Version is the tool version written into manifests.
const Version = "0.1.0"

// Config is everything a run needs. forkline collect fills it from flags,
// starting from DefaultConfig; a zero field means what its comment says
// (Validate reports a value that cannot run).
type Config struct {
	Tasks          string            // a task file or a directory of them
	Provider       string            // registry name; "" is "local"; the program registers it (import providers/all, or one backend)
	ProviderParams map[string]string // backend settings
	Replicas       int               // episodes in parallel; 0 is DefaultReplicas (4), as on the command line
	Repeats        int               // episodes per task; 0 is 1
	// Shell, when set ("fresh" or "persistent"), is every task's shell
	// mode (task.Spec.Shell): part of the task's spec, so of its hash.
	Shell      string
	Seed       int64
	Policy     string // registry name; "" is "script"; the program registers it (import policy/all, or one policy)
	ScriptFile string // for policy script: actions to replay instead of each task's solution
	// PolicyOptions are policy settings (-policy-opt k=v). They are recorded
	// in the manifest, so they must never hold a secret: policies take keys
	// from environment variables named here, never from values.
	PolicyOptions map[string]string
	Reset         pool.Strategy  // "" is pool.Auto
	Capture       capture.Policy // the zero Policy is capture.DefaultPolicy()
	Shards        shard.Config   // zero fields are shard.DefaultConfig()'s
	Out           string
	// Grace is how long episodes in flight may run on after ctx is
	// cancelled before they are cancelled too (and kept as cancelled).
	// 0 cancels them at once; DefaultConfig has DefaultGrace (10s).
	Grace time.Duration
	// Standby keeps this many ready replicas per task prepared in the
	// background, so a reset is a hand-off (pool.Config.Standby); 0 keeps
	// none. StandbyAuto (DefaultConfig's) sizes it to the run: up to
	// Replicas replicas prepared ahead across every task, the task the plan
	// reaches first served first.
	Standby int
	// MaxCreates caps concurrent sandbox creations; 0 is 2 × Replicas.
	MaxCreates int
	// Part is the share of the plan this machine collects; the zero Part
	// is all of it (Whole).
	Part Part
	// MaxLoss stops scheduling once this invocation's scaffold losses pass
	// it (ErrMaxLoss); the zero value is no limit.
	MaxLoss LossLimit
	// Branch is the branching plan (-branch); the zero value is none.
	Branch BranchPlan
	// From, when set, is a stored dataset to branch from instead of
	// running roots (-from): see planFrom. FromEpisodes, when set, are
	// id prefixes of the source episodes to take (-episode); all of them
	// otherwise.
	From         string
	FromEpisodes []string
	Resume       bool // finish the run in Out, skipping kept episodes
	// Recorded is the configuration as the program that started the run
	// resolved it (its own names and values: forkline's flags), written
	// into the plan entry so that the program can resume the run from it
	// alone. collect records it and never reads it; nil records none.
	Recorded map[string][]string
	Force    bool // replace the run in Out
	WorkDir  string

	// Progress, when set, receives a live progress line (TTY) or periodic
	// plain progress lines (package progress); Run never prints the
	// summary.
	Progress    io.Writer
	ProgressTTY bool
	// Logger receives the run's log records, each with the run id and an
	// episode's with its task and episode id: warnings (fallbacks,
	// replaced replicas, the first episode of each distinct error), the
	// run's start, golden builds and end at info, every episode's end at
	// debug. When nil, nothing is logged. (Every config takes one logger
	// type: collect, replay and serve a *slog.Logger named Logger.)
	Logger *slog.Logger
	// Observer, when set, is told of the run as it goes (package observe):
	// metrics and progress are observers.
	Observer observe.Observer
	// StopGuard, when set, tells whether a stop (ctx cancelled by a
	// signal) reached the sandboxes' processes too, on a provider whose
	// sandboxes are host processes: their episodes in flight are then kept
	// as cancelled, and a resume runs them again. forkline's command gives
	// internal/stopguard's canary. Nil takes every stop to reach the
	// collector alone (a context cancelled by the program).
	StopGuard StopGuard
}

// ErrOutputExists is returned when Out holds another run and neither Resume
// nor Force is set.
var ErrOutputExists = errors.New("collect: output directory holds another run")

// ErrConfig is wrapped by every error that comes from bad input — flags,
// task files, names of providers or policies, the output directory — as
// opposed to a failure during the run. forkline collect maps it to exit code 2.
var ErrConfig = errors.New("collect: bad input")

type configError struct{ err error }

func (e configError) Error() string   { return e.err.Error() }
func (e configError) Unwrap() []error { return []error{e.err, ErrConfig} }
func badInput(err error) error {
	if err == nil {
		return nil
	}
	return configError{err}
}

// ErrIncompatibleResume is returned when a resume would produce other
// episodes than the run it resumes: other tasks or plan, provider, policy or
// capture policy (see compatible). The run is left untouched.
var ErrIncompatibleResume = errors.New("collect: cannot resume")

// EpisodeID derives an episode's id from what defines it, so that a rerun or
// a resume produces the same ids and never duplicates an episode.
func EpisodeID(taskID, taskHash string, repeat int, seed int64) string {
	h := sha256.New()
	h.Write([]byte(taskID))
	h.Write([]byte{0})
	h.Write([]byte(taskHash))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(repeat))
	binary.BigEndian.PutUint64(b[8:], uint64(seed))
	h.Write(b[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// planned is one episode of the plan.
type planned struct {
	id     string
	task   *task.Spec
	hash   string
	repeat int
	// branch is set for a branch episode (its id is episode.BranchID of
	// its parent's), remake for a kept branched root whose branch point a
	// resume makes again; both nil for a root to run.
	branch *branchJob
	remake *remakeJob
}

// Run collects a dataset. It returns the summary and an error; on
// cancellation it finishes the episodes in flight as cancelled, closes the
// shards, marks the manifest partial and returns an error wrapping
// context.Canceled. It stops scheduling early, keeping what ran and marking
// the run partial, when a service the episodes depend on is unavailable
// (ErrUnavailable), when the dataset cannot be written, and when Config.MaxLoss
// is passed (ErrMaxLoss). A complete run whose every episode is a scaffold
// loss returns ErrAllLost. A resume is checked against the run without
// changing it (ErrIncompatibleResume), and resuming a complete run changes
// nothing (Summary.NothingToDo).
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	inv, err := planRun(cfg)
	if err != nil {
		return nil, err
	}
	if done, err := inv.checkResume(ctx); done != nil || err != nil {
		if done != nil {
			done.RunID = inv.runID
			inv.log.Info("nothing to do: the run is complete", "episodes", done.kept(), "planned", done.Planned, "out", cfg.Out)
		}
		return done, err
	}
	defer closePolicy(inv.policies, inv.logf)
	if err := inv.checkPolicy(ctx); err != nil {
		return nil, err
	}
	// The provider and pool are opened, and the images the plan needs got
	// ready, before the output, so a bad provider name or setting, or an
	// image that cannot be had, leaves no half-made run behind.
	env, err := inv.openEnvironment(ctx)
	if err != nil {
		return nil, err
	}
	defer env.close()
	out, err := inv.openDataset(ctx, env)
	if err != nil {
		return nil, err
	}
	halt := inv.runEpisodes(ctx, env, out)
	status, runErr := inv.outcome(ctx, out, halt)
	return inv.closeDataset(out, status, runErr)
}

// invocation is one call of Run: the plan, and what it runs on and writes.
type invocation struct {
	cfg       Config
	logf      func(format string, args ...any) // a warning of the run
	log       *slog.Logger                     // the run's logger: its records carry the run id
	obs       observe.Observer
	specs     []task.Spec
	plan      []planned      // this part's episodes
	from      *manifest.From // the source of a -from run
	total     int            // the episodes of every part
	templates map[string]*pool.Template
	policies  policy.Source
	policy    manifest.Policy // the manifest's policy entry
	runID     string
	prior     *priorRun // the run being resumed, if any
	// closeProgress prints the progress meter's last line, once the
	// manifest is closed.
	closeProgress func()
}

// planRun checks cfg, loads the tasks, refuses a policy that cannot run
// them, and plans the episodes: everything that needs no provider and
// touches nothing.
func planRun(cfg Config) (*invocation, error) {
	if err := validate(&cfg); err != nil {
		return nil, badInput(err)
	}
	specs, err := task.Load(cfg.Tasks)
	if err != nil {
		return nil, badInput(err)
	}
	inv := &invocation{cfg: cfg, runID: newRunID(), templates: map[string]*pool.Template{}, obs: observe.Or(cfg.Observer)}
	inv.setLogger()
	for _, dir := range task.NotRead(cfg.Tasks) {
		// Not recursive: say what is left out rather than skip it
		// silently (make demo left examples/tasks/web out unsaid).
		inv.log.Info(fmt.Sprintf("the tasks in %s: %s holds task files and is not read (a directory's tasks are its own *.yaml files and Harbor task folders); give %s itself to run them", cfg.Tasks, dir, dir))
	}
	inv.obs, inv.closeProgress = inv.observers()
	for i := range specs {
		switch cfg.Shell {
		case "fresh":
			specs[i].Shell = ""
		case "persistent":
			specs[i].Shell = cfg.Shell
		}
		specs[i] = specs[i].WithDefaults()
		if inv.templates[specs[i].ID], err = episode.Template(&specs[i]); err != nil {
			return nil, badInput(fmt.Errorf("collect: task %s (%s): %w", specs[i].ID, specs[i].Source, err))
		}
	}
	inv.specs = specs
	if cfg.From == "" {
		warning, err := cfg.Branch.reach(specs)
		if err != nil {
			return nil, badInput(err)
		}
		if warning != "" {
			inv.logf("%s", warning)
		}
	}
	if inv.policies, inv.policy, err = openPolicy(cfg, specs, inv.logf, func(format string, args ...any) { inv.log.Info(fmt.Sprintf(format, args...)) }); err != nil {
		return nil, badInput(err)
	}
	if cfg.From != "" {
		if err := inv.planFrom(); err != nil {
			return nil, err
		}
		return inv, nil
	}
	for i := range specs {
		s := &specs[i]
		h := s.Hash()
		for r := range cfg.Repeats {
			inv.total++
			id := EpisodeID(s.ID, h, r, cfg.Seed)
			if cfg.Part.Has(id) {
				inv.plan = append(inv.plan, planned{id: id, task: s, hash: h, repeat: r})
			}
		}
	}
	return inv, nil
}

// checkResume decides a resume on a read-only look at the run, before the
// provider is opened or the dataset touched: refused, it changes nothing;
// already complete, there is nothing to do (the summary is returned).
func (inv *invocation) checkResume(ctx context.Context) (nothingToDo *Summary, err error) {
	if !inv.cfg.Resume {
		return nil, nil
	}
	prior, err := inspectResume(ctx, inv.cfg, inv.specs, inv.policy)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, badInput(err)
	}
	inv.prior, inv.runID = prior, prior.manifest.RunID
	if prior.nothingToDo(inv.plan, inv.cfg.Branch) {
		sum := prior.tally
		sum.Planned, sum.Skipped = inv.plannedWith(prior.branched), sum.kept()
		sum.Status, sum.NothingToDo = string(shard.StatusComplete), true
		return sum, nil
	}
	prior.kept = nil // the writer holds the same set from here on
	return nil, nil
}

// environment is what the episodes run on: the provider (with a browser
// beside the sandboxes of browser tasks) and the pool over it.
type environment struct {
	env  *episode.Env
	prov providers.Provider
	pool *pool.Pool
	rec  manifest.Provider // the manifest's provider entry
	logf func(format string, args ...any)
}

// openEnvironment opens the run's environment (episode.OpenEnv: the
// provider swept, the browser wired in for browser tasks, the policy's
// shaping, the pool) and gets what the templates need ready.
func (inv *invocation) openEnvironment(ctx context.Context) (*environment, error) {
	cfg := inv.cfg
	standby, standbyBudget := cfg.Standby, 0
	if standby == StandbyAuto {
		// Sized to the run: as many prepared ahead as run at once, so a
		// replica ending its episode finds the next one ready.
		standby, standbyBudget = cfg.Replicas, cfg.Replicas
	}
	opened, err := episode.OpenEnv(ctx, episode.EnvConfig{
		Provider: cfg.Provider, Options: providers.Options{RunID: inv.runID, Dir: cfg.WorkDir, Params: cfg.ProviderParams},
		Specs: inv.specs, Templates: inv.templates, Shaper: inv.policies,
		Pool: pool.Config{Replicas: cfg.Replicas, Strategy: cfg.Reset, Log: inv.logf, Standby: standby, StandbyBudget: standbyBudget, MaxCreates: cfg.MaxCreates,
			MaxBranches: cfg.Branch.maxLive(cfg.Replicas), OnGolden: onGolden(inv.obs, inv.log)},
		Logf: inv.logf,
	})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, fmt.Errorf("collect: %w", ctx.Err())
	case errors.Is(err, context.Canceled):
		return nil, err
	case errors.Is(err, episode.ErrShape):
		return nil, badInput(fielderr.New("collect", "Policy", cfg.Policy, err))
	default:
		return nil, badInput(err)
	}
	env := &environment{env: opened, prov: opened.Provider, pool: opened.Pool, rec: opened.Record, logf: inv.logf}
	if cfg.Branch.IsSet() && env.pool.Strategy() != pool.Fork {
		env.close()
		return nil, badInput(fielderr.Errorf("collect", "Branch", cfg.Branch.String(), "%w (provider %s, reset %s)", pool.ErrCannotBranch, env.prov.Name(), env.pool.Strategy()))
	}
	if err := inv.prepare(ctx, env); err != nil {
		env.close()
		return nil, err
	}
	return env, nil
}

// closePolicy closes a policy source that holds something for the run (the
// agent policy's gateway).
func closePolicy(src policy.Source, logf func(string, ...any)) {
	if c, ok := src.(io.Closer); ok {
		if err := c.Close(); err != nil {
			logf("closing the policy: %v", err)
		}
	}
}

// checkPolicy asks the policy's service, when it has one (a model server),
// whether it answers and serves what the options name, before anything is
// spent (policy.Checker).
func (inv *invocation) checkPolicy(ctx context.Context) error {
	c, ok := inv.policies.(policy.Checker)
	if !ok {
		return nil
	}
	if err := c.Check(ctx); err != nil {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("collect: %w", ctx.Err())
		case errors.Is(err, runtime.ErrUnavailable):
			return fmt.Errorf("%w: %w", ErrUnavailable, fielderr.Errorf("", "Policy", inv.cfg.Policy, "%w; nothing was collected", err))
		}
		return badInput(fielderr.Errorf("collect", "Policy", inv.cfg.Policy, "%w; nothing was collected", err))
	}
	return nil
}

// prepare checks, before the first episode, what the templates need of the
// provider: that the pool can run them as its strategy would, and — for a
// provider that gets images ready (providers.Preparer) — that every image
// (pulled, built) and network they name can be had, getting the images
// ready in parallel now, so no episode waits for one. A plan whose images
// cannot be had is bad input: nothing was collected.
func (inv *invocation) prepare(ctx context.Context, env *environment) error {
	specs := make([]providers.Spec, 0, len(inv.specs))
	var storage []string
	for i := range inv.specs {
		t := inv.templates[inv.specs[i].ID]
		if err := env.pool.Check(t); err != nil {
			return badInput(fmt.Errorf("collect: task %s (%s): %w", inv.specs[i].ID, inv.specs[i].Source, err))
		}
		specs = append(specs, t.Spec)
		if inv.specs[i].Limits.StorageMB > 0 {
			storage = append(storage, inv.specs[i].ID)
		}
	}
	if len(storage) > 0 {
		inv.logf("tasks %s ask for a disk size (storage_mb): recorded, not enforced; no provider bounds a sandbox's disk here", strings.Join(storage, ", "))
	}
	prep, ok := providers.As[providers.Preparer](env.prov)
	if !ok {
		return nil
	}
	// The provider's lines (pulls, build steps, the images ready) are the
	// run's log records, at info.
	progress := &lineLog{log: inv.log}
	err := prep.Prepare(ctx, specs, progress)
	progress.flush()
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("collect: %w", ctx.Err())
		case errors.Is(err, runtime.ErrUnavailable):
			return fmt.Errorf("%w: getting the images ready: %w", ErrUnavailable, err)
		}
		return badInput(fmt.Errorf("collect: the images and services the tasks need cannot be had; nothing was collected:\n%w", err))
	}
	return nil
}

// close closes the pool (standbys, goldens) and then the provider.
func (env *environment) close() {
	if err := env.env.Close(context.Background()); err != nil {
		env.logf("%v", err)
	}
}

// dataset is the run's output as it is written.
type dataset struct {
	w         *shard.Writer
	rec       *recorder
	sum       *Summary
	committed map[string]bool // episodes kept before this invocation
	// remakes are the branch points a resume makes again, by root id.
	remakes map[string][]*remakeJob
}

// openDataset creates, resumes or replaces the dataset, reruns a resumed
// run's cancelled episodes, and starts the summary and the recorder.
func (inv *invocation) openDataset(ctx context.Context, env *environment) (*dataset, error) {
	cfg := inv.cfg
	rec, err := openOutput(cfg, inv.runID, inv.specs, len(inv.plan), inv.total, inv.from, env.rec, inv.policy)
	if err != nil {
		return nil, badInput(err)
	}
	w := rec.Writer()
	if cfg.Resume {
		if err := redoCancelledLogged(ctx, w, inv.log); err != nil {
			w.Close(shard.StatusPartial)
			return nil, err
		}
	}
	out := &dataset{w: w, committed: w.Committed(), sum: newSummary(len(inv.plan), 0)}
	if inv.prior != nil {
		// The summary covers the whole dataset: the episodes kept before,
		// as tallied from their rows, and what this invocation adds.
		out.sum = inv.prior.tally
		out.sum.Planned, out.sum.Skipped = inv.plannedWith(inv.prior.branched), out.sum.kept()
	}
	if out.remakes, err = inv.loadRemakes(ctx, out.committed); err != nil {
		w.Close(shard.StatusPartial)
		return nil, err
	}
	out.rec = &recorder{Recorder: rec, sum: out.sum}
	w.OnGeneration(func(g shard.GenerationClosed) {
		ev := observe.Generation{Number: g.Number}
		for _, info := range g.Shards {
			ev.Bytes += info.Bytes
			ev.Rows += info.Rows
		}
		out.sum.addShards(ev.Bytes)
		inv.obs.Observe(ev)
	})
	return out, nil
}

// runEpisodes runs every planned episode not yet kept over the pool and
// commits each as it ends, until all ran or scheduling stopped: by a signal
// (ctx; the episodes in flight then get cfg.Grace to finish before they
// are cancelled too), or from inside (the halter it returns: an unavailable
// service, a write error, -max-loss).
func (inv *invocation) runEpisodes(ctx context.Context, env *environment, out *dataset) *halter {
	cfg := inv.cfg
	sched, stopScheduling := context.WithCancelCause(ctx)
	defer stopScheduling(nil)
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	halt := &halter{sched: sched, stop: stopScheduling, cancelRun: cancelRun, log: inv.logf,
		guard: cfg.StopGuard, hostProcesses: env.prov.Capabilities().Isolation == "none", signalCame: make(chan struct{})}
	stopGrace := context.AfterFunc(ctx, func() {
		halt.signal()
		if cfg.Grace <= 0 {
			cancelRun()
			return
		}
		inv.logf("stopping: no new episodes; episodes in flight get %s to finish", cfg.Grace)
		time.AfterFunc(cfg.Grace, cancelRun)
		if halt.hostProcesses {
			go func() {
				if halt.reached(time.Now()) {
					// Their commands were killed with the collector's
					// children: finishing them is no use (stopHit keeps
					// them as cancelled).
					inv.logf("the stop reached the sandboxes' processes too (a signal to every process of the job): the episodes in flight are cancelled now; a resume runs them again")
					cancelRun()
				}
			}()
		}
	})
	defer stopGrace()

	todo, order, ahead := inv.upcoming(out.committed, out.remakes)
	live := &liveCounter{todo: todo}
	inv.obs.Observe(observe.RunStarted{Command: "collect", RunID: inv.runID, Planned: len(inv.plan), KeptBefore: len(out.committed),
		Todo: todo, Replicas: cfg.Replicas, Live: live.live(env.pool)})
	inv.log.Info("run started", "planned", len(inv.plan), "kept_before", len(out.committed), "todo", todo,
		"part", cfg.Part.String(), "provider", env.prov.Name(), "policy", cfg.Policy, "replicas", cfg.Replicas, "out", cfg.Out)
	// After RunStarted, so every golden event an early build sends belongs
	// to a run the observers know (its id on every log record). In plan
	// order, the order the episodes are scheduled in: under a budget
	// (StandbyAuto) the replicas prepared are the next episodes'.
	if cfg.Standby != 0 {
		env.pool.ExpectInOrder(runCtx, order)
	}
	// Every task's golden is built ahead, up to one build per replica at a
	// time, so no replica waits for a golden at a task boundary.
	env.pool.Prepare(runCtx, sched, ahead, cfg.Replicas)
	began := time.Now()
	queue := newBranchQueue()
	// The summary is told of the episodes as every observer is: it is
	// their tally.
	obs := observe.Multi{out.sum, inv.obs}
	out.sum.tally.OnFirstError(func(e observe.EpisodeEnded) {
		// Each distinct error is logged once; the summary counts them.
		inv.log.Warn(fmt.Sprintf("episode %s of %s: %s: %s (further episodes with this error are counted, not logged)",
			e.EpisodeID[:min(12, len(e.EpisodeID))], e.Task, e.Exit, oneLine(e.Detail, 1000)),
			"task", e.Task, "episode_id", e.EpisodeID, "exit_reason", e.Exit)
	})
	runner := episodeRunner{cfg: cfg, runner: episode.Runner{RunID: inv.runID, Provider: env.prov.Name(), Capture: cfg.Capture, Observer: obs},
		rec: out.rec, policies: inv.policies, log: inv.logf, logger: inv.log, obs: obs, live: live, halt: halt, todo: todo,
		pool: env.pool, queue: queue, templates: inv.templates}
	// Once scheduling stops, a job the pool took but has not started does
	// not start (no golden of the next task is built after a stop).
	env.pool.RunScheduled(runCtx, sched, inv.feedJobs(sched, out.committed, out.remakes, queue), runner.run)
	out.sum.finish(time.Since(began), env.pool.Stats())
	logErrorCounts(out.sum, inv.logf)
	return halt
}

// feedJobs sends the planned episodes not yet kept, in plan order, until
// they are all sent or sched is done. With a branching plan, the branches
// the episodes make (queue) go first, before the next root, and the feed
// ends once no episode that may still branch is running; a kept root whose
// branches a resume still needs goes as its remake.
func (inv *invocation) feedJobs(sched context.Context, committed map[string]bool, remakes map[string][]*remakeJob, queue *branchQueue) <-chan pool.Job {
	jobs := make(chan pool.Job)
	send := func(j pool.Job) bool {
		select {
		case jobs <- j:
			return true
		case <-sched.Done():
			return false
		}
	}
	go func() {
		defer close(jobs)
		next := 0
		for sched.Err() == nil {
			if j, ok := queue.pop(); ok {
				queue.started()
				if !send(j) {
					return
				}
				continue
			}
			if next < len(inv.plan) {
				p := &inv.plan[next]
				next++
				if committed[p.id] {
					// A kept root: the branch points of its tree that a
					// resume still needs, a parent's before its
					// descendants'.
					for _, r := range remakes[p.id] {
						queue.started()
						if !send(pool.Job{Template: inv.templates[p.task.ID], Payload: &planned{id: r.id, task: p.task, hash: p.hash, repeat: p.repeat, remake: r}}) {
							return
						}
					}
					continue
				}
				queue.started()
				if !send(pool.Job{Template: inv.templates[p.task.ID], Payload: p}) {
					return
				}
				continue
			}
			if queue.idle() {
				return
			}
			select {
			case <-queue.wake:
			case <-sched.Done():
				return
			}
		}
	}()
	return jobs
}

// plannedWith is the number of planned episodes once the episodes in
// branched (roots, and in a tree branches) have branched: the roots, and
// the plan's width per branch point.
func (inv *invocation) plannedWith(branched map[string]bool) int {
	n := len(inv.plan)
	if inv.cfg.Branch.IsSet() {
		n += len(branched) * inv.cfg.Branch.Width
	}
	return n
}

// upcoming is what this invocation runs: how many episodes, the template of
// each in plan order (what the standby prepares for), and the templates of
// the tasks it runs (or remakes a branch point of), in plan order: the
// goldens to build ahead.
func (inv *invocation) upcoming(committed map[string]bool, remakes map[string][]*remakeJob) (todo int, order, templates []*pool.Template) {
	needed := map[string]bool{}
	for _, p := range inv.plan {
		if !committed[p.id] {
			order = append(order, inv.templates[p.task.ID])
			todo++
		}
		if (!committed[p.id] || len(remakes[p.id]) > 0) && !needed[p.task.ID] {
			needed[p.task.ID] = true
			templates = append(templates, inv.templates[p.task.ID])
		}
	}
	return todo, order, templates
}

// outcome decides the run's status and error. The run is complete when
// every planned episode is kept and finished, whatever its outcome — even
// if a stop came during the grace period. An episode kept as cancelled is
// not finished: a resume runs it again, so a run that holds one is partial
// even when no planned episode is missing (a stop that cancelled every
// episode of a small part).
func (inv *invocation) outcome(ctx context.Context, out *dataset, halt *halter) (shard.Status, error) {
	sum, plan := out.sum, out.sum.planned()
	kept, cancelled := len(out.committed)+sum.Done(), sum.cancelled()
	// finished counts kept episodes that a resume leaves alone.
	finished := kept - cancelled
	unavailable, writeErr, maxLoss := halt.state()
	cancelledNote := ""
	if cancelled > 0 {
		cancelledNote = fmt.Sprintf(", %d of them cancelled (a resume runs them again)", cancelled)
	}
	switch rep := sum.Report(); {
	case out.rec.failed() != nil || writeErr != nil:
		// The writer broke: no new episode was started after it.
		return shard.StatusPartial, cmp.Or(out.rec.failed(), writeErr)
	case unavailable != nil:
		return shard.StatusPartial, fmt.Errorf("%w: %d episodes were not kept and %d of %d planned episodes are kept; resume the run once it is back: %w",
			ErrUnavailable, rep.NotRun, kept, plan, unavailable)
	case finished < plan && ctx.Err() != nil:
		return shard.StatusPartial, fmt.Errorf("collect: %w (%d of %d planned episodes kept%s)", context.Canceled, kept, plan, cancelledNote)
	case finished < plan && maxLoss:
		return shard.StatusPartial, fmt.Errorf("%w: %w", ErrMaxLoss, fielderr.Errorf("", "MaxLoss", inv.cfg.MaxLoss.String(), "%d scaffold losses in this invocation; %d of %d planned episodes kept%s (a resume continues)",
			sum.RanLosses(), kept, plan, cancelledNote))
	case finished < plan:
		return shard.StatusPartial, fmt.Errorf("collect: %d of %d planned episodes are missing or cancelled", plan-finished, plan)
	case rep.Episodes > 0 && rep.Losses == rep.Episodes:
		// Complete — every planned episode is kept — but nothing worked.
		return shard.StatusComplete, fmt.Errorf("%w: all %d episodes of the run (%s)", ErrAllLost, rep.Episodes, mostCommonError(rep))
	}
	return shard.StatusComplete, nil
}

// closeDataset records the summary in the manifest and closes the dataset
// with status.
func (inv *invocation) closeDataset(out *dataset, status shard.Status, runErr error) (*Summary, error) {
	sum := out.sum
	sum.Status, sum.RunID = string(status), inv.runID
	// The open generation closes first, so that the summary the manifest
	// records counts its shards' bytes on disk (a broken writer refuses,
	// and Close reports why).
	_ = out.w.Roll()
	rep := sum.Report()
	if _, err := (manifest.Summary{Collect: &rep}).Encode(); err != nil {
		inv.log.Warn("the run's summary is not recorded in the manifest", "err", err)
	}
	err := out.rec.Close(status, manifest.Summary{Collect: &rep})
	if err != nil {
		sum.Status = string(shard.StatusPartial)
		err = errors.Join(runErr, err)
	} else {
		err = runErr
	}
	inv.obs.Observe(observe.RunEnded{Status: sum.Status, Err: err})
	inv.closeProgress()
	rep = sum.Report()
	attrs := []any{"status", sum.Status, "episodes", rep.Episodes, "planned", rep.Planned, "ran", rep.Ran,
		"steps", rep.Steps, "scaffold_losses", rep.Losses, "wall_s", rep.WallSec}
	if err != nil {
		inv.log.Warn("run ended", append(attrs, "err", err)...)
	} else {
		inv.log.Info("run ended", attrs...)
	}
	return sum, err
}

// logErrorCounts logs, once each, the distinct errors this invocation met,
// with how many episodes of the dataset ended with them.
func logErrorCounts(sum *Summary, logf func(string, ...any)) {
	sum.tally.RepeatedErrors(func(e manifest.ErrorCount) { logf("%s", e) })
	sum.mu.Lock()
	defer sum.mu.Unlock()
	sum.unavailable.Repeated(func(e manifest.ErrorCount) { logf("not kept, a service was unavailable: %s", e) })
}

func mostCommonError(r Report) string {
	if len(r.Errors) == 0 {
		return "no error detail"
	}
	return "most common: " + r.Errors[0].String()
}

func newRunID() string {
	var b [6]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// openOutput creates, resumes or replaces the dataset in cfg.Out.
// A resume was checked read-only (inspectResume) before it gets here.
func openOutput(cfg Config, runID string, specs []task.Spec, episodes, total int, from *manifest.From, prov manifest.Provider, pol manifest.Policy) (*record.Recorder, error) {
	planRec := manifest.Plan{Repeats: cfg.Repeats, Seed: cfg.Seed, Replicas: cfg.Replicas, Reset: string(cfg.Reset),
		Episodes: episodes, Part: manifest.Part(cfg.Part), Total: total, Branch: cfg.Branch.String(), From: from,
		Config: cfg.Recorded}.Encode()
	providerRec, policyRec := prov.Encode(), pol.Encode()
	tasksRec, err := task.EncodeRecords(specs)
	if err != nil {
		return nil, err
	}
	rec, err := record.Open(record.Config{Dir: cfg.Out, Resume: cfg.Resume, Replace: cfg.Force && !cfg.Resume, Shards: cfg.Shards,
		Manifest: shard.Manifest{
			SchemaVersion: schemas.Version, Tool: "forkline", ToolVersion: Version, RunID: runID,
			Tasks: tasksRec, Plan: planRec, Capture: cfg.Capture.MarshalManifest(),
			// Recorded at creation, so that a run that crashes before its
			// first generation closes can still be checked on resume.
			Provider: providerRec, Policy: policyRec,
		},
		Fill: func(m *shard.Manifest) {
			m.Plan = planRec
			// The run keeps its own provider and policy entries: the resume
			// check let through only differences that do not change an
			// episode. A manifest written before the entries were recorded
			// at creation may lack them.
			if m.Provider == nil {
				m.Provider = providerRec
			}
			if m.Policy == nil {
				m.Policy = policyRec
			}
		},
	})
	switch {
	case err == nil:
		return rec, nil
	case errors.Is(err, shard.ErrLocked):
		// Another collect (or serve) writing into the same directory is
		// said so, whatever it has written yet.
		return nil, fielderr.New("collect", "Out", cfg.Out, err)
	case errors.Is(err, record.ErrExists):
		return nil, fmt.Errorf("%w: %s", ErrOutputExists, cfg.Out)
	case errors.Is(err, record.ErrNothingToResume):
		return nil, fielderr.Errorf("collect", "Resume", "", "%s holds no run (no manifest.json)", cfg.Out)
	case errors.Is(err, record.ErrNotEmpty):
		return nil, fielderr.Sentence("collect", "Out", cfg.Out, "is not empty and holds no forkline run; choose an empty or new directory (Force replaces only a forkline run)").Mentions("Force")
	case cfg.Force && !cfg.Resume:
		return nil, fielderr.New("collect", "Force", "", err)
	}
	return nil, err
}

// redoCancelled removes, from a run being resumed, the episodes a stop
// kept as cancelled, so that they run again: a resumed run ends with the
// episodes an uninterrupted run would have, each once and finished. Their
// partial rows were worth keeping while the run was stopped (a run that is
// never resumed still has them); once the episode can be run whole, they
// are not. Copy the run directory first to keep them.
func redoCancelled(ctx context.Context, w *shard.Writer, logf func(string, ...any)) error {
	redo := map[string]bool{}
	for id, exit := range w.ExitReasons() {
		if exit == string(runtime.ExitCancelled) {
			redo[id] = true
		}
	}
	if len(redo) == 0 {
		return nil
	}
	n, err := w.Drop(ctx, redo)
	if err != nil {
		return fmt.Errorf("collect: resume: removing the cancelled episodes to run them again: %w", err)
	}
	logf("resume: %d episodes kept as cancelled run again (their partial rows are replaced)", n)
	return nil
}

// redoCancelledLogged is redoCancelled logging at info.
func redoCancelledLogged(ctx context.Context, w *shard.Writer, log *slog.Logger) error {
	return redoCancelled(ctx, w, func(f string, a ...any) { log.Info(fmt.Sprintf(f, a...)) })
}
