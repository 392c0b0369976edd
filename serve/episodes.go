package serve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/runtime"
)

// begin starts an episode for a reset: it picks the task, claims the
// episode id, calls endPrevious (the session's episode before ends only
// once the new one's parameters are known good), takes a replica from the
// pool and drives the episode from the task's instruction. The answer is
// the first observation: the instruction.
func (s *Server) begin(ctx context.Context, req resetRequest, endPrevious func()) (*liveEpisode, StepResult, error) {
	if req.FromCheckpoint != nil {
		return s.beginBranch(ctx, req, endPrevious)
	}
	t, err := s.pickTask(req)
	if err != nil {
		return nil, StepResult{}, err
	}
	given := ""
	if req.EpisodeID != nil {
		given = *req.EpisodeID
	}
	id, repeat, err := s.claim(given, t)
	if err != nil {
		return nil, StepResult{}, err
	}
	endPrevious()
	rep, h, err := s.acquire(ctx, t, nil)
	if err != nil {
		s.unclaim(id)
		return nil, StepResult{}, s.resetFailed(t, err)
	}
	s.stats.reset(rep)
	var seed int64
	if req.Seed != nil {
		seed = *req.Seed
	}
	ep := s.runner.Begin(episode.Identity{EpisodeID: id, TaskHash: t.hash, Repeat: repeat, Seed: seed,
		GroupID: episode.RootGroupID(t.spec.ID, t.hash)}, t.spec, rep)
	l := &liveEpisode{t: t, ep: ep, h: h, prefix: runtime.History{Instruction: t.spec.Instruction}, began: time.Now()}
	l.drv = ep.Drive(s.runCtx, l.prefix, t.spec.Limits.Runtime(), nil)
	if l.drv.Ended() { // the server stopped at once
		s.finish(l, runtime.ExitCancelled, "the server stopped")
		return l, *l.final, nil
	}
	return l, StepResult{Observation: Observation{EpisodeID: id, TaskID: t.spec.ID, Instruction: t.spec.Instruction, Text: t.spec.Instruction}}, nil
}

// resetFailed is the answer to a reset whose replica could not be had.
func (s *Server) resetFailed(t *served, err error) error {
	var pe *protocolError
	if errors.As(err, &pe) || errors.Is(err, context.Canceled) {
		return err
	}
	// The golden build, the fork or the start commands failed after the
	// pool's retries: OpenEnv's factory error. No episode began; the client
	// may retry with the same id.
	s.stats.resetFailed()
	s.cfg.Log.Warn("serve: reset failed", "task", t.spec.ID, "err", err)
	return refuse(codeFactory, "serve: reset of task %s: %v", t.spec.ID, err)
}

// step hands the client's decision to the episode and answers with what
// the action produced; the step that ends the episode comes back with the
// verifier's reward and how it ended.
func (s *Server) step(ctx context.Context, l *liveEpisode, dec runtime.Decision) (StepResult, error) {
	taken, err := l.drv.Step(ctx, dec)
	if err != nil {
		return StepResult{}, err
	}
	s.stats.step()
	if !taken.Ended {
		return StepResult{Observation: observationOf(l.ep.Row.EpisodeID, l.t.spec.ID, *taken.Step)}, nil
	}
	s.finish(l, "", "")
	res := *l.final
	if taken.Step != nil {
		end := res.Observation
		res.Observation = observationOf(l.ep.Row.EpisodeID, l.t.spec.ID, *taken.Step)
		res.Observation.ExitReason, res.Observation.Detail = end.ExitReason, end.Detail
		res.Observation.Answer, res.Observation.RewardDetail = end.Answer, end.RewardDetail
	} else {
		res.Observation.ActionTaken = &no
		res.Observation.Text = fmt.Sprintf("[forkline: the episode had ended (%s) before this action; it was not taken]", l.ep.Row.ExitReason)
	}
	return res, nil
}

// finish ends the episode (with exit and detail, when it is still
// running: Stop lets a step in flight finish), verifies it unless it was
// cancelled, records it, and gives its replica back to the pool, which
// destroys the sandbox. It sets l.final.
func (s *Server) finish(l *liveEpisode, exit runtime.ExitReason, detail string) {
	if !l.drv.Ended() {
		l.drv.Stop(exit, detail)
	}
	ep := l.ep
	if err := l.drv.Wait(); err != nil {
		s.cfg.Log.Warn("serve: episode ended by a failure", "episode", ep.Row.EpisodeID, "task", l.t.spec.ID, "err", err)
	}
	// A cancelled episode is not verified, as in collect: nobody waits for
	// its reward, and its sandbox is released at once.
	if ep.Row.ExitReason != string(runtime.ExitCancelled) {
		if _, err := ep.Verify(s.runCtx); err != nil {
			s.cfg.Log.Warn("serve: verifier's session failed", "episode", ep.Row.EpisodeID, "task", l.t.spec.ID, "err", err)
		}
	}
	batch, keep := ep.Rows()
	if s.rec != nil {
		s.record(batch, keep, ep.Row.EpisodeID)
	}
	l.h.outcome <- ep.Outcome()
	res := StepResult{Done: true}
	obs := Observation{EpisodeID: ep.Row.EpisodeID, TaskID: l.t.spec.ID, Step: l.stepCount(), ExitReason: ep.Row.ExitReason,
		Detail: ep.Row.Detail, Answer: ep.Row.Answer}
	if r := ep.Reward; r != nil {
		res.Reward = rewardOf(r.Value)
		obs.RewardDetail = r.Detail
	}
	res.Observation = obs
	l.final = &res
	var reward *float64
	if ep.Reward != nil {
		reward = ep.Reward.Value
	}
	s.stats.episodeEnded(ep.Row.ExitReason, reward, keep)
	s.cfg.Log.Debug("serve: episode ended", "episode", ep.Row.EpisodeID, "task", l.t.spec.ID, "exit", ep.Row.ExitReason,
		"steps", l.drv.Steps(), "detail", ep.Row.Detail)
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}
