package collect

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/tokens"
)

// episodeRunner runs one planned episode on a replica and commits it.
type episodeRunner struct {
	cfg      Config
	runID    string
	provider string
	rec      *recorder
	policies policy.Source
	log      func(format string, args ...any)
	halt     *halter
	todo     int // episodes this invocation runs (for -max-loss percentages)
}

// stepBuffer is the episode's StepSink: it converts each step to a row as it
// arrives (so screenshots are hashed and dropped from memory at once under
// pixels=hash/none) and holds the rows until the episode commits.
type stepBuffer struct {
	episodeID, taskID string
	capture           capture.Policy
	seen              capture.SetIndex
	rows              []schemas.StepRow
	blobs             []schemas.BlobRow
	turns             []tokens.Turn
}

func (b *stepBuffer) WriteStep(_ context.Context, s runtime.Step) error {
	row, blobs := b.capture.Row(b.episodeID, b.taskID, s, b.seen)
	b.rows = append(b.rows, row)
	b.blobs = append(b.blobs, blobs...)
	if m := s.Model; m != nil && b.capture.Tokens == "keep" && (len(m.PromptIDs) > 0 || len(m.ResponseIDs) > 0) {
		b.turns = append(b.turns, tokens.Turn{PromptIDs: m.PromptIDs, ResponseIDs: m.ResponseIDs, Logprobs: m.Logprobs})
	}
	return nil
}

// tokenRecord assembles the episode's token record into ep. A record that
// breaks its invariants is an error: it must never reach a trainer.
func (b *stepBuffer) tokenRecord(ep *schemas.EpisodeRow) error {
	if len(b.turns) == 0 {
		return nil
	}
	r, err := tokens.Assemble(b.turns)
	if err == nil {
		err = r.Check()
	}
	if err != nil {
		return err
	}
	ep.PromptIDs, ep.ResponseIDs, ep.ResponseMask, ep.ResponseLogprobs = r.PromptIDs, r.ResponseIDs, r.Mask, r.Logprobs
	ep.TokenTurns, ep.TokenDrift = int32(r.Turns), r.Drift
	return nil
}

func (er episodeRunner) run(ctx context.Context, job pool.Job, rep pool.Replica, acquireErr error) pool.Outcome {
	p := job.Payload.(*planned)
	if er.halt.stopped() {
		// Scheduling stopped (a signal, an unavailable service, a write
		// error, -max-loss) after the pool took this job but before it
		// began: it never started, and a resume does it.
		return pool.Done
	}
	spec := p.task
	ep := schemas.EpisodeRow{
		EpisodeID: p.id, RunID: er.runID, TaskID: spec.ID, TaskHash: p.hash,
		Repeat: int32(p.repeat), Seed: er.cfg.Seed, Replica: int32(rep.Slot), Attempt: int32(rep.Attempt),
		Provider: er.provider, ResetStrategy: resetName(rep), ResetOrigin: rep.Origin,
		ResetMS: schemas.Millis(rep.Reset), StartedAt: time.Now().UnixMilli(),
	}
	if rep.Golden != nil {
		ep.GoldenID = rep.Golden.Checkpoint.ID
		ep.GoldenBuildMS = schemas.Millis(rep.Golden.BuildTime)
		ep.GoldenBytes = rep.Golden.Checkpoint.Bytes
	}
	buf := &stepBuffer{episodeID: p.id, taskID: spec.ID, capture: er.cfg.Capture, seen: capture.SetIndex{}}
	batch := shard.EpisodeBatch{}
	outcome := pool.Done

	if acquireErr != nil {
		if errors.Is(acquireErr, runtime.ErrUnavailable) {
			// The golden build or the fork failed because the backend is
			// gone: the run's failure, not the episode's.
			er.notKept(p, runtime.ExitEnvError, acquireErr)
			return pool.Done
		}
		ep.ExitReason = string(runtime.ExitEnvError)
		if errors.Is(acquireErr, context.Canceled) || ctx.Err() != nil {
			ep.ExitReason = string(runtime.ExitCancelled)
		}
		ep.Detail = acquireErr.Error()
	} else {
		pol, err := er.policies.NewPolicy(policyEpisode(spec, p.id, p.repeat, er.cfg.Seed))
		if err != nil {
			ep.ExitReason, ep.Detail = string(runtime.ExitPolicyError), err.Error()
		} else {
			began := time.Now()
			res, err := runtime.Rollout(ctx, rep.Sandbox, pol, runtime.History{Instruction: spec.Instruction}, spec.Limits.Runtime(), buf)
			if err != nil {
				res.Exit, res.Detail = runtime.ExitUnknown, err.Error()
			}
			if res.Err != nil && errors.Is(res.Err, runtime.ErrUnavailable) {
				// The engine or the model server went away under the
				// episode: its steps so far are not kept, and a resume
				// runs it whole once the service is back.
				er.notKept(p, res.Exit, res.Err)
				return pool.Done
			}
			ep.ExitReason, ep.Detail, ep.Answer = string(res.Exit), res.Detail, res.Answer
			ep.DurationMS = schemas.Millis(time.Since(began))
			ep.PolicyMS, ep.EnvMS = schemas.Millis(res.PolicyTime), schemas.Millis(res.EnvTime)
			if res.Exit == runtime.ExitEnvError {
				outcome = pool.Broken
			}
			// Verify unless the sandbox broke or the run is stopping.
			if spec.Verify != nil && outcome != pool.Broken && ctx.Err() == nil {
				r, verr := spec.Verify.Run(ctx, rep.Sandbox)
				if verr != nil && errors.Is(verr, runtime.ErrUnavailable) {
					er.notKept(p, runtime.ExitEnvError, verr)
					return pool.Done
				}
				ep.VerifyMS = schemas.Millis(r.Took)
				rw := schemas.RewardRow{EpisodeID: p.id, Name: "verify", Value: r.Value, Source: spec.Verify.Cmd,
					Detail: r.Detail, ExitCode: int32(r.ExitCode)}
				if verr != nil {
					rw.Detail = verr.Error()
					outcome = pool.Broken
				}
				batch.Rewards = append(batch.Rewards, rw)
			}
		}
	}
	if ep.ExitReason == string(runtime.ExitCancelled) && len(buf.rows) == 0 {
		// Cancelled before its first step: nothing to keep, and leaving it
		// out lets a resumed run do it.
		return outcome
	}
	ep.Steps = int32(len(buf.rows))
	if err := buf.tokenRecord(&ep); err != nil {
		// Keep the episode (its steps hold the per-turn tokens) but not a
		// record that would train on wrong tokens; say why.
		ep.Detail = strings.TrimSpace(ep.Detail + "; token record refused: " + err.Error())
	}
	batch.Episode, batch.Steps, batch.Blobs = ep, buf.rows, buf.blobs
	firstError, err := er.rec.commit(context.WithoutCancel(ctx), batch)
	if err != nil {
		er.log("episode %s of %s could not be written: %v", p.id[:12], spec.ID, err)
		er.halt.writeFailed(err)
		return outcome
	}
	if firstError {
		// Each distinct error is logged once; the summary counts them.
		er.log("episode %s of %s: %s: %s (further episodes with this error are counted, not logged)",
			p.id[:12], spec.ID, ep.ExitReason, oneLine(ep.Detail, 1000))
	}
	if limit := er.cfg.MaxLoss; limit.IsSet() {
		if losses := er.rec.sum.RanLosses(); limit.passed(losses, er.todo) {
			er.halt.lossLimitPassed(limit, losses, er.todo)
		}
	}
	return outcome
}

// notKept records an episode ended by an unavailable service: counted, its
// error logged once, scheduling stopped; nothing is committed.
func (er episodeRunner) notKept(p *planned, exit runtime.ExitReason, err error) {
	if er.rec.sum.addUnavailable(string(exit), err.Error()) {
		er.log("episode %s of %s not kept: %s: %v", p.id[:12], p.task.ID, exit, err)
	}
	er.halt.serviceUnavailable(err)
}

// resetName is the reset_strategy column: fork or recreate, with "+standby"
// when the replica was prepared ahead and only handed off.
func resetName(r pool.Replica) string {
	if r.Standby {
		return string(r.Strategy) + "+standby"
	}
	return string(r.Strategy)
}
