package serve

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// Branching over the wire, forkline's extension of the OpenEnv session
// protocol: a session checkpoints its episode's sandbox after a step
// ({"type": "checkpoint"}, answered with a checkpoint id), and a reset on
// any session with {"from_checkpoint": ID} starts a branch of that episode
// — a fork of the checkpoint continuing the parent's history, recorded
// with collect's lineage. The parent goes on: a checkpoint does not end
// it. A checkpoint is the session's that made it until it releases it
// ({"type": "release"}), closes, is reaped or dropped, or the server
// drains.

// checkpoint is a live branch point a session made.
type checkpoint struct {
	id     string
	owner  *session
	branch *pool.Branch
	parent *liveEpisode // the episode checkpointed
	step   int          // the trajectory's steps at the checkpoint: the branch step
	// history is what its branches continue: the instruction and the
	// parent's trajectory up to step.
	history  runtime.History
	prefixMS float64

	released bool           // under Server.mu
	forks    sync.WaitGroup // forks of it in flight: its release waits for them
}

// CheckpointInfo is the answer to a checkpoint message.
type CheckpointInfo struct {
	CheckpointID string `json:"checkpoint_id"`
	EpisodeID    string `json:"episode_id"`
	TaskID       string `json:"task_id"`
	// Step is the steps the checkpoint holds: a branch's own steps are
	// numbered from it.
	Step int `json:"step"`
}

// checkpoint makes a branch point of the session's running episode after
// its last step. A second checkpoint at the same step answers the first
// one's id: the sandbox has not changed.
func (ss *session) checkpoint() (CheckpointInfo, error) {
	s := ss.srv
	l := ss.live
	if l == nil || l.final != nil {
		return CheckpointInfo{}, refuse(codeExecution, "serve: checkpoint: this session has no running episode to checkpoint")
	}
	if l.drv.Ended() {
		// Its timeout passed while the client was deciding: the next step
		// says so; a branch of it would continue an ended episode.
		return CheckpointInfo{}, refuse(codeExecution, "serve: checkpoint: episode %s has ended (%s); send a step or reset", l.ep.Row.EpisodeID, l.ep.Result.Exit)
	}
	if l.drv.Steps() == 0 {
		return CheckpointInfo{}, refuse(codeExecution, "serve: checkpoint: episode %s has taken no step of its own: a reset (or a reset from the checkpoint it came from) already gives that state", l.ep.Row.EpisodeID)
	}
	if s.isDraining() {
		return CheckpointInfo{}, errStopping
	}
	step := l.stepCount()
	info := func(cp *checkpoint) CheckpointInfo {
		return CheckpointInfo{CheckpointID: cp.id, EpisodeID: l.ep.Row.EpisodeID, TaskID: l.t.spec.ID, Step: cp.step}
	}
	s.mu.Lock()
	for _, cp := range ss.checkpoints {
		if cp.parent == l && cp.step == step {
			s.mu.Unlock()
			return info(cp), nil
		}
	}
	held := len(ss.checkpoints)
	s.mu.Unlock()
	if held >= s.cfg.SessionCheckpoints {
		return CheckpointInfo{}, refuse(codeCheckpointLimit, "serve: checkpoint: this session holds %d checkpoints (the server allows %d a session): release one first",
			held, s.cfg.SessionCheckpoints)
	}
	b, err := s.pool.Checkpoint(s.runCtx, l.ep.Replica, "serve "+l.ep.Row.EpisodeID, 0)
	switch {
	case errors.Is(err, pool.ErrTooManyBranches):
		return CheckpointInfo{}, refuse(codeCheckpointLimit, "serve: checkpoint: %d checkpoints are live on the server (its limit): release one first", s.cfg.MaxCheckpoints)
	case errors.Is(err, pool.ErrCannotBranch):
		return CheckpointInfo{}, refuse(codeExecution, "serve: checkpoint: %v", err)
	case err != nil:
		// The episode goes on: its sandbox was only read.
		return CheckpointInfo{}, refuse(codeExecution, "serve: checkpoint of episode %s: %v", l.ep.Row.EpisodeID, err)
	}
	cp := &checkpoint{id: "cp-" + randomID(), owner: ss, branch: b, parent: l, step: step,
		history:  runtime.History{Instruction: l.prefix.Instruction, Steps: append(slices.Clone(l.prefix.Steps), l.drv.Taken()...)},
		prefixMS: l.prefixMS + schemas.Millis(time.Since(l.began))}
	s.mu.Lock()
	s.checkpoints[cp.id] = cp
	ss.checkpoints[cp.id] = cp
	s.mu.Unlock()
	s.hold(l.ep.Row.EpisodeID)
	s.stats.checkpointed()
	s.cfg.Logger.Debug("serve: checkpoint", "checkpoint", cp.id, "episode", l.ep.Row.EpisodeID, "step", step, "took", b.Took.String())
	return info(cp), nil
}

// releaseRequest is a release message's data.
type releaseRequest struct {
	CheckpointID string `json:"checkpoint_id"`
}

// release releases one of the session's checkpoints. Branches running
// from it keep their forks.
func (ss *session) release(data []byte) (string, error) {
	fields, err := objectFields(data, "release data")
	if err != nil {
		return "", err
	}
	if err := onlyKeys(fields, []string{"checkpoint_id"}, "release"); err != nil {
		return "", err
	}
	var r releaseRequest
	if err := decodeFields(fields, &r); err != nil || r.CheckpointID == "" {
		return "", refuse(codeValidation, "serve: release: want {\"checkpoint_id\": ID}")
	}
	s := ss.srv
	s.mu.Lock()
	cp, ok := ss.checkpoints[r.CheckpointID]
	_, elsewhere := s.checkpoints[r.CheckpointID]
	s.mu.Unlock()
	if !ok {
		if elsewhere {
			return "", refuse(codeValidation, "serve: release: checkpoint %s belongs to another session: only the session that made it releases it", r.CheckpointID)
		}
		return "", refuse(codeCheckpointNotFound, "serve: release: no checkpoint %s (unknown, or released already)", r.CheckpointID)
	}
	s.releaseCheckpoint(cp)
	return cp.id, nil
}

// releaseCheckpoints releases every checkpoint the session holds: it is
// ending.
func (ss *session) releaseCheckpoints() {
	ss.srv.mu.Lock()
	held := make([]*checkpoint, 0, len(ss.checkpoints))
	for _, cp := range ss.checkpoints {
		held = append(held, cp)
	}
	ss.srv.mu.Unlock()
	for _, cp := range held {
		ss.srv.releaseCheckpoint(cp)
	}
}

// releaseCheckpoint forgets cp, waits for the forks of it in flight, and
// releases its provider storage.
func (s *Server) releaseCheckpoint(cp *checkpoint) {
	s.mu.Lock()
	cp.released = true
	delete(s.checkpoints, cp.id)
	delete(cp.owner.checkpoints, cp.id)
	s.mu.Unlock()
	cp.forks.Wait()
	if err := cp.branch.Release(context.WithoutCancel(s.runCtx)); err != nil {
		s.cfg.Logger.Warn("serve: releasing a checkpoint", "checkpoint", cp.id, "err", err)
	}
}

// takeCheckpoint finds the checkpoint a reset names and marks a fork of it
// in flight; done ends the mark.
func (s *Server) takeCheckpoint(id string) (cp *checkpoint, done func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp, ok := s.checkpoints[id]
	if !ok || cp.released {
		return nil, nil, refuse(codeCheckpointNotFound, "serve: reset: no checkpoint %q (unknown, released, or its session closed)", id)
	}
	cp.forks.Add(1)
	return cp, cp.forks.Done, nil
}

// claimBranch reserves the id of the next branch of cp: the one the client
// gave, or the one collect would derive (episode.BranchID of the parent,
// the step and the index).
func (s *Server) claimBranch(given string, cp *checkpoint) (id string, index int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	parent := cp.parent.ep.Row.EpisodeID
	if cp.parent.nextBranch == nil {
		cp.parent.nextBranch = map[int]int{}
	}
	index = cp.parent.nextBranch[cp.step]
	if given != "" {
		if s.ids[given] {
			return "", 0, refuse(codeValidation, "serve: reset: episode_id %q is taken: an episode of this server or its dataset has it (episode ids are unique in a dataset)", given)
		}
		id = given
	} else {
		for id = episode.BranchID(parent, cp.step, index); s.ids[id]; id = episode.BranchID(parent, cp.step, index) {
			index++
		}
	}
	cp.parent.nextBranch[cp.step] = index + 1
	s.ids[id] = true
	return id, index, nil
}

// beginBranch starts a branch episode for a reset from_checkpoint: a fork
// of the checkpoint, driven from the parent's history within what the
// task's limits leave, recorded with its lineage. Its first observation is
// the parent's last one, with where the branch comes from.
func (s *Server) beginBranch(ctx context.Context, req resetRequest, endPrevious func()) (*liveEpisode, StepResult, error) {
	cp, forked, err := s.takeCheckpoint(*req.FromCheckpoint)
	if err != nil {
		return nil, StepResult{}, err
	}
	defer forked()
	p, t := cp.parent, cp.parent.t
	lim, ok := episode.BranchLimits(t.spec.Limits.Runtime(), cp.step, cp.prefixMS)
	if !ok {
		return nil, StepResult{}, refuse(codeExecution, "serve: reset: checkpoint %s: its %d steps and %.0f ms leave the task's limits nothing", cp.id, cp.step, cp.prefixMS)
	}
	given := ""
	if req.EpisodeID != nil {
		given = *req.EpisodeID
	}
	id, index, err := s.claimBranch(given, cp)
	if err != nil {
		return nil, StepResult{}, err
	}
	endPrevious()
	rep, h, err := s.acquire(ctx, t, cp.branch)
	if err != nil {
		s.unclaim(id)
		return nil, StepResult{}, s.resetFailed(t, err)
	}
	parentID := p.ep.Row.EpisodeID
	group := episode.BranchGroupID(parentID, cp.step)
	ep := s.runner.Begin(episode.Identity{EpisodeID: id, TaskHash: t.hash, Repeat: int(p.ep.Row.Repeat), Seed: p.ep.Row.Seed,
		GroupID: group, Branch: &episode.Lineage{ParentID: parentID, Step: cp.step, Index: index}}, t.spec, rep)
	l := &liveEpisode{t: t, ep: ep, h: h, prefix: cp.history, first: cp.step, prefixMS: cp.prefixMS, began: time.Now()}
	s.drive(ctx, l, cp.history, lim)
	if l.drv.Ended() {
		s.finish(l, runtime.ExitCancelled, "the server stopped")
		return l, *l.final, nil
	}
	last := cp.history.Steps[len(cp.history.Steps)-1]
	obs := observationOf(id, t.spec.ID, last)
	// The parent's last observation, as the branch's model would be shown
	// it next; no action was taken by this reset.
	obs.ActionTaken, obs.Instruction = nil, t.spec.Instruction
	obs.ParentEpisodeID, obs.BranchIndex, obs.GroupID = parentID, &index, group
	return l, StepResult{Observation: obs}, nil
}

// hold marks a checkpointed episode: its branches that end before it wait
// for it to be committed.
func (s *Server) hold(parentID string) {
	if s.rec == nil {
		return
	}
	s.holdMu.Lock()
	if _, ok := s.holding[parentID]; !ok {
		s.holding[parentID] = nil
	}
	s.holdMu.Unlock()
}

// record commits an ended episode, unless it waits for its parent, and
// then the branches that waited for it. An episode that is not kept (or
// could not be committed) takes the branches that waited for it with it:
// they would be a tree without its root.
func (s *Server) record(b shard.EpisodeBatch, keep bool, id string) {
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	if parent, _, ok := b.Episode.Branched(); ok && keep {
		if held, waits := s.holding[parent]; waits {
			s.holding[parent] = append(held, b)
			return
		}
	}
	type pending struct {
		b    shard.EpisodeBatch
		keep bool
	}
	queue := []pending{{b, keep}}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		eid := next.b.Episode.EpisodeID
		if !next.keep {
			eid = id
		}
		ok := next.keep
		if next.keep {
			if err := s.rec.commit(next.b); err != nil {
				ok = false
				s.stats.recordFailed()
				s.cfg.Logger.Error("serve: episode could not be recorded", "episode", eid, "task", next.b.Episode.TaskID, "err", err)
			}
		}
		held := s.holding[eid]
		delete(s.holding, eid)
		for _, c := range held {
			if !ok {
				s.stats.recordFailed()
				s.cfg.Logger.Error("serve: branch not recorded: its parent is not in the dataset", "episode", c.Episode.EpisodeID, "parent", eid)
				continue
			}
			queue = append(queue, pending{c, true})
		}
	}
}

// checkpointIDs are the checkpoints the session holds, for its state.
func (ss *session) checkpointIDs() []string {
	ss.srv.mu.Lock()
	defer ss.srv.mu.Unlock()
	ids := make([]string, 0, len(ss.checkpoints))
	for id := range ss.checkpoints {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
