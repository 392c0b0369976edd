package serve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/pool"
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
	var seed int64
	if req.Seed != nil {
		seed = *req.Seed
	}
	ep := s.runner.Begin(episode.Identity{EpisodeID: id, TaskHash: t.hash, Repeat: repeat, Seed: seed,
		GroupID: episode.RootGroupID(t.spec.ID, t.hash)}, t.spec, rep)
	l := &liveEpisode{t: t, ep: ep, h: h, prefix: runtime.History{Instruction: t.spec.Instruction}, began: time.Now()}
	s.drive(ctx, l, l.prefix, t.spec.Limits.Runtime())
	if l.drv.Ended() { // the server stopped at once
		s.finish(l, runtime.ExitCancelled, "the server stopped")
		return l, *l.final, nil
	}
	return l, StepResult{Observation: Observation{EpisodeID: id, TaskID: t.spec.ID, Instruction: t.spec.Instruction, Text: t.spec.Instruction}}, nil
}

// errClientGone is why an episode's context ends when its client went away.
var errClientGone = errors.New("the client went away")

// drive starts l's episode from history h under lim. It runs under the
// server's run (whose grace interrupts it) and under conn, the connection
// or request that drives it: when the client is gone — a dropped or closed
// connection, a one-shot request whose client went away — the step in
// flight is interrupted at once (its processes killed) and the episode
// ends as cancelled, so its sandbox is destroyed now rather than when the
// action's own timeout ends. finish detaches it.
func (s *Server) drive(conn context.Context, l *liveEpisode, h runtime.History, lim runtime.Limits) {
	ctx, cancel := context.WithCancelCause(s.runCtx)
	stop := context.AfterFunc(conn, func() { cancel(errClientGone) })
	l.ctx = ctx
	l.detach = func() {
		stop()
		cancel(nil)
	}
	l.drv = l.ep.Drive(ctx, h, lim, nil)
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
	s.cfg.Logger.Warn("serve: reset failed", "task", t.spec.ID, "err", err)
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
	if !taken.Ended {
		return StepResult{Observation: observationOf(l.ep.Row.EpisodeID, l.t.spec.ID, *taken.Step)}, nil
	}
	res := s.finish(l, "", "")
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
// destroys the sandbox. It sets l.final and returns the episode's last
// reply.
//
// What the session keeps of the ended episode (until its next reset or its
// end) is its final reply without the answer, and its counts: its steps,
// its rows and its answer go once recorded, so a session whose episode
// ended holds nothing of what its client sent.
func (s *Server) finish(l *liveEpisode, exit runtime.ExitReason, detail string) StepResult {
	if !l.drv.Ended() {
		l.drv.Stop(exit, detail)
	}
	ep := l.ep
	if err := l.drv.Wait(); err != nil {
		s.cfg.Logger.Warn("serve: episode ended by a failure", "episode", ep.Row.EpisodeID, "task", l.t.spec.ID, "err", err)
	}
	if ep.Row.ExitReason == string(runtime.ExitCancelled) && errors.Is(context.Cause(l.ctx), errClientGone) {
		// The client went away: the session's own words when it ended the
		// episode (the episode context may have ended it first, while it
		// waited for the next action), else the step it interrupted.
		ep.Row.Detail = detail
		if detail == "" {
			ep.Row.Detail = fmt.Sprintf("the client went away (the connection dropped or closed) during step %d, which was interrupted: %s", l.stepCount()-1, ep.Row.Detail)
		}
	}
	l.detach()
	// A cancelled episode is not verified, as in collect: nobody waits for
	// its reward, and its sandbox is released at once.
	if ep.Row.ExitReason != string(runtime.ExitCancelled) {
		if _, err := ep.Verify(s.runCtx); err != nil {
			s.cfg.Logger.Warn("serve: verifier's session failed", "episode", ep.Row.EpisodeID, "task", l.t.spec.ID, "err", err)
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
	ep.End(keep, "")
	s.cfg.Logger.Debug("serve: episode ended", "episode", ep.Row.EpisodeID, "task", l.t.spec.ID, "exit", ep.Row.ExitReason,
		"steps", l.drv.Steps(), "detail", ep.Row.Detail)
	kept := res
	kept.Observation.Answer = ""
	l.final = &kept
	l.taken, l.drv = l.drv.Steps(), nil
	ep.Capture, ep.Row.Answer, ep.Result.Answer, l.prefix.Steps = nil, "", "", nil
	return res
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// onGolden tells the observers how a golden build goes, and logs its end
// (the pool's OnGolden).
func (s *Server) onGolden(g pool.GoldenProgress) {
	task, _, _ := strings.Cut(g.Template, "@")
	s.obs.Observe(observe.Golden{Task: task, Phase: observe.GoldenPhase(g.Phase), Command: g.Command, Index: g.Index,
		Commands: g.Commands, Began: g.Began, Took: g.Took, Err: g.Err})
	switch g.Phase {
	case pool.GoldenBuilt:
		s.cfg.Logger.Info("serve: golden checkpoint built", "task", task, "setup_commands", g.Commands, "took", g.Took.Round(time.Millisecond).String())
	case pool.GoldenFailed:
		s.cfg.Logger.Warn("serve: golden checkpoint failed", "task", task, "took", g.Took.Round(time.Millisecond).String(), "err", g.Err)
	}
}
