package episode

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// Branching is an episode checkpointed after a step and continued several
// times. The pieces, in the order a collector (or a server opening forks
// of a session) calls them:
//
//   - Episode.Branch, after the parent's rollout stopped at the branch
//     step: checkpoints its replica (pool.Checkpoint) and marks its row
//     branched, so its steps are stored once, as the prefix;
//   - for each branch: BranchID and BranchGroupID name it, BranchPolicy
//     makes its policy continue the parent's history, the pool forks its
//     replica from the branch point (pool.Job.Branch or Pool.ForkBranch),
//     and Runner.Begin (with Identity.Branch) then Episode.Rollout from the
//     parent's history run it like any episode;
//   - a branch point lost with its process (a resumed run) is made again by
//     Episode.Reproduce: the recorded prefix re-executed in a fork of the
//     golden, every observation checked, then checkpointed.

// RootGroupID is the group_id of a root episode: every episode of the same
// task spec started from its golden shares it.
func RootGroupID(taskID, taskHash string) string {
	return digest("forkline/task-group", taskID, taskHash)
}

// BranchGroupID is the group_id of the branches of parent at step: they
// share the prefix and differ after it.
func BranchGroupID(parentID string, step int) string {
	return digest("forkline/branch-group", parentID, fmt.Sprint(step))
}

// BranchID is the id of branch index of parent at step. It depends on
// nothing else, so a resumed run, every part of a parted one and a merge
// name each branch the same way.
func BranchID(parentID string, step, index int) string {
	h := sha256.New()
	h.Write([]byte("forkline/branch\x00"))
	h.Write([]byte(parentID))
	var b [17]byte
	binary.BigEndian.PutUint64(b[1:9], uint64(step))
	binary.BigEndian.PutUint64(b[9:], uint64(index))
	h.Write(b[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func digest(kind string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(kind))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Branch makes the episode a branch point after its last step: the pool
// checkpoints its replica, with uses branches to come (pool.Checkpoint),
// and the row's exit reason becomes branched. A branched episode is not
// verified: it is the prefix its branches share, not a trajectory. When
// the checkpoint fails nothing changes, and the caller decides what the
// episode then is.
func (e *Episode) Branch(ctx context.Context, pl *pool.Pool, uses int) (*pool.Branch, error) {
	b, err := pl.Checkpoint(ctx, e.Replica, "branch "+e.Row.EpisodeID, uses)
	if err != nil {
		return nil, err
	}
	e.Row.ExitReason, e.Row.Detail = string(runtime.ExitBranched), ""
	e.Result.Exit = runtime.ExitBranched
	return b, nil
}

// BranchPolicy makes the policy of a branch: a fresh one from src for the
// branch's own episode pe (so its sampling seed is the branch's), told
// that it continues h (policy.Continue) — from parent, the live policy
// that decided h, when there is one, else from the record h holds.
func BranchPolicy(ctx context.Context, src policy.Source, pe policy.Episode, h runtime.History, parent runtime.Policy) (runtime.Policy, error) {
	pol, err := src.NewPolicy(pe)
	if err != nil {
		return nil, err
	}
	if err := policy.Continue(ctx, pol, h, parent); err != nil {
		return nil, fmt.Errorf("episode: the branch's policy cannot continue its parent's history: %w", err)
	}
	return pol, nil
}

// BranchLimits are the limits of a branch starting after prefix steps
// that took prefixTime: a task's limits bound the whole trajectory, so the
// branch gets the steps and the wall clock its prefix left. ok is false
// when nothing is left.
func BranchLimits(lim runtime.Limits, prefix int, prefixTime float64) (runtime.Limits, bool) {
	max := lim.MaxSteps
	if max <= 0 {
		max = runtime.DefaultMaxSteps
	}
	if prefix >= max {
		return lim, false
	}
	lim.MaxSteps = max - prefix
	if lim.EpisodeTimeout > 0 {
		left := lim.EpisodeTimeout - msDuration(prefixTime)
		if left <= 0 {
			return lim, false
		}
		lim.EpisodeTimeout = left
	}
	return lim, true
}

// ErrNotReproduced is returned, wrapped, by Reproduce when a re-executed
// step's observation is not the recorded one; the error names the step,
// the field and both values.
var ErrNotReproduced = errors.New("episode: the recorded prefix did not reproduce")

// Reproduce re-executes a recorded prefix on the episode's replica (a fresh
// fork of the golden): the actions of steps — a stored trajectory's steps
// from step 0, as formats/shard's EachTrajectory gives them — in order,
// each observation compared with the recorded one as replay compares in
// its exact mode, under cmp, the recording's capture policy: exit code,
// error and timeout flags, the output as captured, the screenshot's hash.
// The re-executed steps are the episode's own (captured, each with its
// recorded model turn, so a branch's token record starts with the recorded
// ids), and the returned history — the instruction and those steps — is
// what branches continue from. A difference stops it with ErrNotReproduced;
// a sandbox that breaks, with the rollout's error. lim bounds each action
// (its MaxSteps is set to the prefix).
func (e *Episode) Reproduce(ctx context.Context, instruction string, steps []schemas.StepRow, cmp capture.Policy, lim runtime.Limits) (runtime.History, error) {
	h := runtime.History{Instruction: instruction}
	rec := make([]runtime.Step, len(steps))
	for i, r := range steps {
		s, err := capture.Step(r)
		if err != nil {
			return h, err
		}
		if s.Action.Kind == "" || s.Action.Kind == runtime.ActDone || int(r.StepIndex) != i {
			return h, fmt.Errorf("episode: step %d of the recorded prefix cannot be re-executed (action %q)", r.StepIndex, s.Action.Kind)
		}
		rec[i] = s
	}
	cmp.Pixels = capture.PixelsNone // screenshots are compared by hash
	w := &reproducer{rec: steps, cmp: cmp}
	lim.MaxSteps = len(steps)
	if err := e.Rollout(ctx, recordedPolicy(rec), h, lim, w); err != nil {
		return h, err
	}
	if w.diff != nil {
		return h, w.diff
	}
	if e.Result.Exit != runtime.ExitMaxSteps || len(w.got) != len(steps) {
		return h, fmt.Errorf("%w: the re-execution ended after %d of %d steps (%s: %s)", ErrNotReproduced, len(w.got), len(steps), e.Result.Exit, e.Result.Detail)
	}
	h.Steps = w.got
	return h, nil
}

// recordedPolicy decides the recorded steps' actions, each with its
// recorded model turn.
type recordedPolicy []runtime.Step

func (r recordedPolicy) Decide(ctx context.Context, h runtime.History) (runtime.Decision, error) {
	if err := ctx.Err(); err != nil {
		return runtime.Decision{}, err
	}
	i := len(h.Steps)
	if i >= len(r) {
		return runtime.Decision{Stop: runtime.ExitNoAction, Detail: "episode: the recorded prefix ran out"}, nil
	}
	return runtime.Decision{Action: r[i].Action, Model: r[i].Model}, nil
}

// reproducer compares each re-executed step with the recorded one and
// keeps the steps, until the first difference.
type reproducer struct {
	rec  []schemas.StepRow
	cmp  capture.Policy
	got  []runtime.Step
	diff error
}

func (w *reproducer) WriteStep(_ context.Context, s runtime.Step) error {
	if w.diff != nil || s.Index >= len(w.rec) {
		return nil
	}
	was := w.rec[s.Index]
	now, _ := w.cmp.Row("", "", s, nil)
	field, a, b := "", "", ""
	switch {
	case was.ExitCode != now.ExitCode:
		field, a, b = "exit_code", fmt.Sprint(was.ExitCode), fmt.Sprint(now.ExitCode)
	case was.IsError != now.IsError:
		field, a, b = "is_error", fmt.Sprint(was.IsError), fmt.Sprint(now.IsError)
	case was.TimedOut != now.TimedOut:
		field, a, b = "timed_out", fmt.Sprint(was.TimedOut), fmt.Sprint(now.TimedOut)
	case was.ScreenHash != now.ScreenHash:
		field, a, b = "screenshot_sha256", was.ScreenHash, now.ScreenHash
	case was.Output != now.Output || string(was.OutputRaw) != string(now.OutputRaw):
		field, a, b = "output", clip(was.Output), clip(now.Output)
	}
	if field != "" {
		w.diff = fmt.Errorf("%w: step %d %s: %s recorded %q, re-executed %q", ErrNotReproduced, s.Index, s.Action, field, a, b)
		return nil
	}
	w.got = append(w.got, s)
	return nil
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// msDuration is a row's milliseconds as a duration.
func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
