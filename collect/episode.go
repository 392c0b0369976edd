package collect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
)

// episodeRunner runs one planned episode on a replica and commits it: the
// collector's policy around episode's pieces — which failures are the run's
// (not kept, scheduling stops) and which the episode's (kept, counted).
type episodeRunner struct {
	cfg       Config
	runner    episode.Runner
	rec       *recorder
	policies  policy.Source
	log       func(format string, args ...any)
	logger    *slog.Logger
	obs       observe.Observer
	live      *liveCounter
	halt      *halter
	todo      int // episodes this invocation runs (for -max-loss percentages)
	pool      *pool.Pool
	queue     *branchQueue // where a branching root's branches go
	templates map[string]*pool.Template
}

// planned counts n more planned episodes (fewer for n < 0): the summary's
// plan, the queue depth, and the observers' totals (progress showed
// "30/6 episodes" for a branching run).
func (er episodeRunner) planned(n int) {
	er.rec.sum.addPlanned(n)
	if er.live != nil {
		er.live.more.Add(int64(n))
	}
	er.obs.Observe(observe.Planned{Added: n})
}

func (er episodeRunner) run(ctx context.Context, job pool.Job, rep pool.Replica, acquireErr error) pool.Outcome {
	p := job.Payload.(*planned)
	// Every job may branch (a root, a remake, a branch of a tree): the
	// feed waits for it before it ends.
	defer er.queue.ended()
	if p.remake != nil {
		er.remake(ctx, p, rep, acquireErr)
		return pool.Done
	}
	if er.halt.stopped() {
		// Scheduling stopped (a signal, an unavailable service, a write
		// error, -max-loss) after the pool took this job but before it
		// began: it never started, and a resume does it.
		return pool.Done
	}
	defer er.live.ended.Add(1)
	ep := er.runner.Begin(er.identity(p), p.task, rep)
	play := er.play
	if p.branch != nil {
		play = er.playBranch
	}
	exit, branched, err := play(ctx, ep, p, acquireErr)
	if err != nil {
		// The golden build, the fork, the engine or the model server went
		// away under the episode: the run's failure, not the episode's.
		// Its steps so far are not kept, and a resume runs it whole once
		// the service is back.
		er.notKept(p, exit, err)
		ep.Row.ExitReason, ep.Row.Detail = string(exit), err.Error()
		ep.End(false, "")
		return pool.Done
	}
	if detail, hit := er.halt.stopHit(ep); hit {
		ep.Interrupted(detail)
		if branched != nil {
			// A root kept as cancelled branches when a resume runs it
			// again, not from this run's checkpoint.
			branched.release(ctx, er.log)
			branched = nil
		}
	}
	batch, keep := ep.Rows()
	if !keep {
		ep.End(false, "")
		return ep.Outcome()
	}
	if !er.commit(ctx, p, ep, batch) {
		if branched != nil {
			branched.release(ctx, er.log)
		}
		return ep.Outcome()
	}
	er.logger.Debug("episode kept", "task", p.task.ID, "episode_id", p.id, "exit_reason", batch.Episode.ExitReason,
		"steps", batch.Episode.Steps, "duration_ms", batch.Episode.DurationMS)
	if branched != nil {
		// The parent is kept before its branches run: a branch is never in
		// the dataset without the prefix it continues.
		er.planned(len(branched.jobs))
		er.queue.push(branched.jobs...)
	}
	return ep.Outcome()
}

// identity is the episode's identity: a root's, or a branch's with its
// lineage and group.
func (er episodeRunner) identity(p *planned) episode.Identity {
	id := episode.Identity{EpisodeID: p.id, TaskHash: p.hash, Repeat: p.repeat, Seed: er.cfg.Seed}
	if b := p.branch; b != nil {
		id.GroupID = episode.BranchGroupID(b.parentID, b.step)
		id.Branch = &episode.Lineage{ParentID: b.parentID, Step: b.step, Index: b.index}
	} else {
		id.GroupID = episode.RootGroupID(p.task.ID, p.hash)
	}
	return id
}

// branchPoint is a root that branched: its checkpoint and the jobs of its
// branches, pushed once the root is kept.
type branchPoint struct {
	b    *pool.Branch
	jobs []pool.Job
}

// release gives the checkpoint back when the branches will not run.
func (bp *branchPoint) release(ctx context.Context, log func(string, ...any)) {
	if err := bp.b.Release(context.WithoutCancel(ctx)); err != nil {
		log("%v", err)
	}
}

// play runs the episode's pieces: no replica, no policy, or the rollout and
// its verification. It returns an error, wrapping runtime.ErrUnavailable,
// only for an episode that is not to be kept, with the exit reason it ended
// with. With a branching plan, a root may branch (rollout).
func (er episodeRunner) play(ctx context.Context, ep *episode.Episode, p *planned, acquireErr error) (runtime.ExitReason, *branchPoint, error) {
	if acquireErr != nil {
		if errors.Is(acquireErr, runtime.ErrUnavailable) {
			return runtime.ExitEnvError, nil, acquireErr
		}
		ep.NoReplica(ctx, acquireErr)
		return "", nil, nil
	}
	pol, err := er.policies.NewPolicy(policyEpisode(p.task, p.id, p.repeat, er.cfg.Seed, er.cfg.Provider))
	if err != nil {
		ep.PolicyFailed(err)
		return "", nil, nil
	}
	h := runtime.History{Instruction: p.task.Instruction}
	return er.rollout(ctx, ep, p, pol, h, p.task.Limits.Runtime(), 0, 0)
}

// rollout runs the episode's policy pol from history h (its prefix, start
// steps) within lim, the limits left after the prefix, and verifies it. When
// the plan checkpoints the episode at a step it is still running at, it is
// stopped there and checkpointed (branched, not verified); the branch point
// is returned with its branches' jobs, whose policies continue from pol;
// prefixMS is how long h's steps took. A
// checkpoint that fails is the run's failure (the episode is not kept, and
// a resume runs it whole): a branched episode without its branch point
// would be a tree with no branches.
func (er episodeRunner) rollout(ctx context.Context, ep *episode.Episode, p *planned, pol runtime.Policy, h runtime.History, lim runtime.Limits, start int, prefixMS float64) (runtime.ExitReason, *branchPoint, error) {
	depth, budget := p.node(er.cfg.Branch)
	at := er.cfg.Branch.checkpointAt(p.task.Limits.Runtime(), depth, budget)
	var prefix *prefixSink
	var watch runtime.StepSink
	if at > 0 {
		lim.MaxSteps, prefix = at-start, &prefixSink{}
		watch = prefix
	}
	// A failing sink is kept as unknown (Rollout recorded it so); only an
	// unavailable service is not kept.
	if err := ep.Rollout(ctx, pol, h, lim, watch); errors.Is(err, runtime.ErrUnavailable) {
		return ep.Result.Exit, nil, err
	}
	if at > 0 && ep.Result.Exit == runtime.ExitMaxSteps && len(prefix.steps) == at-start {
		b, err := ep.Branch(ctx, er.pool, er.cfg.Branch.Width)
		if err != nil && ctx.Err() != nil {
			// Stopped at the branch point: kept as cancelled, so a resume
			// runs the episode again rather than taking it for a
			// trajectory.
			ep.Row.ExitReason, ep.Row.Detail = string(runtime.ExitCancelled), "stopped at the branch point: "+err.Error()
			return "", nil, nil
		}
		if err != nil {
			return runtime.ExitEnvError, nil, fmt.Errorf("%w: %w", runtime.ErrUnavailable, err)
		}
		// The branches continue the whole trajectory so far: the
		// ancestors' steps, then this episode's.
		h.Steps = append(slices.Clip(h.Steps), prefix.steps...)
		indexes := make([]int, er.cfg.Branch.Width)
		for i := range indexes {
			indexes[i] = i
		}
		jobs := er.cfg.Branch.branchJobs(p, b, er.templates[p.task.ID], at, indexes, h, pol, prefixMS+ep.Row.DurationMS)
		return "", &branchPoint{b: b, jobs: jobs}, nil
	}
	if _, err := ep.Verify(ctx); errors.Is(err, runtime.ErrUnavailable) {
		return runtime.ExitEnvError, nil, err
	}
	return "", nil, nil
}

// playBranch runs a branch episode on a replica forked from its parent's
// branch point: its policy continues the parent's history, within what
// the task's limits leave after the prefix, and it is verified like any
// trajectory — or, in a tree, branches again at its own checkpoint.
func (er episodeRunner) playBranch(ctx context.Context, ep *episode.Episode, p *planned, acquireErr error) (runtime.ExitReason, *branchPoint, error) {
	if acquireErr != nil {
		if errors.Is(acquireErr, runtime.ErrUnavailable) {
			return runtime.ExitEnvError, nil, acquireErr
		}
		ep.NoReplica(ctx, acquireErr)
		return "", nil, nil
	}
	b := p.branch
	pol, err := episode.BranchPolicy(ctx, er.policies, policyEpisode(p.task, p.id, p.repeat, er.cfg.Seed, er.cfg.Provider), b.history, b.parentPolicy)
	if err != nil {
		ep.PolicyFailed(err)
		return "", nil, nil
	}
	lim, ok := episode.BranchLimits(p.task.Limits.Runtime(), b.step, b.prefixMS)
	if !ok {
		ep.Row.ExitReason, ep.Row.Detail = string(runtime.ExitTimeout), "the prefix used up the episode's time limit"
		return "", nil, nil
	}
	return er.rollout(ctx, ep, p, pol, b.history, lim, b.step, b.prefixMS)
}

// remake makes a kept episode's branch point again (a resumed run): its
// full recorded prefix (in a tree, its ancestors' steps and then its own)
// re-executed in a fresh fork of the golden, each
// observation checked against the record, then checkpointed for the
// branches not kept. Nothing of the re-execution is kept; a prefix that
// does not reproduce, or a checkpoint that fails, leaves those branches
// missing and the run partial, with the reason.
func (er episodeRunner) remake(ctx context.Context, p *planned, rep pool.Replica, acquireErr error) {
	if er.halt.stopped() {
		return
	}
	fail := func(err error) {
		if src := p.remake.source; src != "" {
			err = fielderr.Errorf("collect", "From", "", "episode %s (%s): %w", src, p.task.ID, err)
		} else {
			err = fmt.Errorf("collect: remaking the branch point of %s (%s): %w", p.id[:12], p.task.ID, err)
		}
		if errors.Is(err, runtime.ErrUnavailable) {
			er.notKept(p, runtime.ExitEnvError, err)
			return
		}
		if p.remake.source != "" && ctx.Err() == nil {
			// A stored episode whose prefix does not reproduce is skipped,
			// with the reason: branching it from another state than the
			// record's would be a lie, and nothing of it is written (no
			// root without branches). It leaves the plan, so the run can
			// be complete with the episodes that do reproduce.
			er.log("%v; skipped: nothing of it is written", err)
			er.planned(-1)
			return
		}
		// A prefix that does not reproduce is this tree's problem, not the
		// run's: the other episodes go on, and the run ends partial with
		// these branches missing.
		er.log("%v; its %d missing branches are not run", err, len(p.remake.missing))
	}
	if acquireErr != nil {
		fail(acquireErr)
		return
	}
	ep := er.runner.Begin(er.identity(p), p.task, rep)
	h, err := ep.Reproduce(ctx, p.task.Instruction, p.remake.steps, er.cfg.Capture, p.task.Limits.Runtime())
	if err != nil {
		fail(err)
		return
	}
	b, err := ep.Branch(ctx, er.pool, len(p.remake.missing))
	if err != nil {
		fail(err)
		return
	}
	prefixMS := p.remake.prefixMS
	if p.remake.source != "" {
		// A -from root: the re-executed prefix is this run's root, kept
		// (branched) before its branches run, as a live root is.
		batch, keep := ep.Rows()
		if !keep || !er.commit(ctx, p, ep, batch) {
			if err := b.Release(context.WithoutCancel(ctx)); err != nil {
				er.log("%v", err)
			}
			return
		}
		prefixMS = batch.Episode.DurationMS
		er.planned(len(p.remake.missing))
	}
	er.queue.push(er.cfg.Branch.branchJobs(p, b, er.templates[p.task.ID], len(p.remake.steps), p.remake.missing, h, nil, prefixMS)...)
}

// commit writes the episode, ends it (its end event counts it in the
// summary, which logs its error when it is the first of its kind), and
// checks the loss limit.
func (er episodeRunner) commit(ctx context.Context, p *planned, ep *episode.Episode, batch shard.EpisodeBatch) (ok bool) {
	if err := er.rec.commit(context.WithoutCancel(ctx), batch); err != nil {
		ep.End(false, "")
		er.logger.Warn(fmt.Sprintf("episode %s of %s could not be written: %v", p.id[:12], p.task.ID, err),
			"task", p.task.ID, "episode_id", p.id)
		er.halt.writeFailed(err)
		return false
	}
	ep.End(true, "")
	if limit := er.cfg.MaxLoss; limit.IsSet() {
		if losses := er.rec.sum.RanLosses(); limit.passed(losses, er.todo) {
			er.halt.lossLimitPassed(limit, losses, er.todo)
		}
	}
	return true
}

// notKept records an episode ended by an unavailable service: counted, its
// error logged once, scheduling stopped; nothing is committed.
func (er episodeRunner) notKept(p *planned, exit runtime.ExitReason, err error) {
	er.halt.serviceUnavailable(err) // first: no new episode starts meanwhile
	if er.rec.sum.addUnavailable(string(exit), err.Error()) {
		er.logger.Warn(fmt.Sprintf("episode %s of %s not kept: %s: %v", p.id[:12], p.task.ID, exit, err),
			"task", p.task.ID, "episode_id", p.id, "exit_reason", string(exit))
	}
}
