package collect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/forkline/forkline/episode"
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
	cfg      Config
	runner   episode.Runner
	rec      *recorder
	policies policy.Source
	log      func(format string, args ...any)
	logger   *slog.Logger
	obs      observe.Observer
	live     *liveCounter
	halt     *halter
	todo     int // episodes this invocation runs (for -max-loss percentages)
}

func (er episodeRunner) run(ctx context.Context, job pool.Job, rep pool.Replica, acquireErr error) pool.Outcome {
	p := job.Payload.(*planned)
	if er.halt.stopped() {
		// Scheduling stopped (a signal, an unavailable service, a write
		// error, -max-loss) after the pool took this job but before it
		// began: it never started, and a resume does it.
		return pool.Done
	}
	defer er.live.ended.Add(1)
	if acquireErr == nil {
		er.obs.Observe(resetEvent(p.task.ID, rep))
	}
	ep := er.runner.Begin(episode.Identity{EpisodeID: p.id, TaskHash: p.hash, Repeat: p.repeat, Seed: er.cfg.Seed}, p.task, rep)
	if exit, err := er.play(ctx, ep, p, acquireErr); err != nil {
		// The golden build, the fork, the engine or the model server went
		// away under the episode: the run's failure, not the episode's.
		// Its steps so far are not kept, and a resume runs it whole once
		// the service is back.
		er.notKept(p, exit, err)
		er.obs.Observe(observe.EpisodeEnded{Task: p.task.ID, EpisodeID: p.id, Exit: string(exit),
			ScaffoldLoss: exit.ScaffoldLoss(), Steps: len(ep.Capture.Steps()), Kept: false})
		return pool.Done
	}
	batch, keep := ep.Rows()
	if !keep {
		er.obs.Observe(observe.EpisodeEnded{Task: p.task.ID, EpisodeID: p.id, Exit: ep.Row.ExitReason, Kept: false})
		return ep.Outcome()
	}
	if er.commit(ctx, p, batch) {
		er.obs.Observe(episodeEnded(batch.Episode, batch.Rewards, true))
		er.logger.Debug("episode kept", "task", p.task.ID, "episode_id", p.id, "exit_reason", batch.Episode.ExitReason,
			"steps", batch.Episode.Steps, "duration_ms", batch.Episode.DurationMS)
	}
	return ep.Outcome()
}

// play runs the episode's pieces: no replica, no policy, or the rollout and
// its verification. It returns an error, wrapping runtime.ErrUnavailable,
// only for an episode that is not to be kept, with the exit reason it ended
// with.
func (er episodeRunner) play(ctx context.Context, ep *episode.Episode, p *planned, acquireErr error) (runtime.ExitReason, error) {
	if acquireErr != nil {
		if errors.Is(acquireErr, runtime.ErrUnavailable) {
			return runtime.ExitEnvError, acquireErr
		}
		ep.NoReplica(ctx, acquireErr)
		return "", nil
	}
	pol, err := er.policies.NewPolicy(policyEpisode(p.task, p.id, p.repeat, er.cfg.Seed))
	if err != nil {
		ep.PolicyFailed(err)
		return "", nil
	}
	// A failing sink is kept as unknown (Rollout recorded it so); only an
	// unavailable service is not kept.
	watch := episode.StepObserver(er.obs, p.task.ID, p.id)
	if err := ep.Rollout(ctx, pol, runtime.History{Instruction: p.task.Instruction}, p.task.Limits.Runtime(), watch); errors.Is(err, runtime.ErrUnavailable) {
		return ep.Result.Exit, err
	}
	if _, err := ep.Verify(ctx); errors.Is(err, runtime.ErrUnavailable) {
		return runtime.ExitEnvError, err
	}
	return "", nil
}

// commit writes the episode, counts it, logs its error when it is the
// first of its kind, and checks -max-loss. It reports whether the episode
// was written.
func (er episodeRunner) commit(ctx context.Context, p *planned, batch shard.EpisodeBatch) bool {
	firstError, err := er.rec.commit(context.WithoutCancel(ctx), batch)
	if err != nil {
		er.logger.Warn(fmt.Sprintf("episode %s of %s could not be written: %v", p.id[:12], p.task.ID, err),
			"task", p.task.ID, "episode_id", p.id)
		er.halt.writeFailed(err)
		return false
	}
	if firstError {
		// Each distinct error is logged once; the summary counts them.
		er.logger.Warn(fmt.Sprintf("episode %s of %s: %s: %s (further episodes with this error are counted, not logged)",
			p.id[:12], p.task.ID, batch.Episode.ExitReason, oneLine(batch.Episode.Detail, 1000)),
			"task", p.task.ID, "episode_id", p.id, "exit_reason", batch.Episode.ExitReason)
	}
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
	if er.rec.sum.addUnavailable(string(exit), err.Error()) {
		er.logger.Warn(fmt.Sprintf("episode %s of %s not kept: %s: %v", p.id[:12], p.task.ID, exit, err),
			"task", p.task.ID, "episode_id", p.id, "exit_reason", string(exit))
	}
	er.halt.serviceUnavailable(err)
}
