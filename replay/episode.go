package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/policy/script"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// episode replays one stored episode on the replica the pool handed over:
// its recorded actions through episode's runner, each step compared with
// the recorded one, then its verification; with Config.Record the replayed
// episode is committed to the recording.
func (rp *replayer) episode(ctx context.Context, j *recorded, r pool.Replica, acqErr error) (EpisodeReport, pool.Outcome) {
	er := EpisodeReport{EpisodeID: j.ep.EpisodeID, TaskID: j.ep.TaskID, Steps: len(j.steps), RewardRecorded: j.reward}
	if acqErr != nil {
		er.Status, er.Error = Errored, acqErr.Error()
		return er, pool.Done
	}
	actions, err := recordedActions(j.steps)
	if err != nil {
		er.Status, er.Error = Errored, err.Error()
		return er, pool.Done
	}
	// The replay is the same episode (identity) run again: how this run
	// went — replica, reset, golden, timings — is the replay's own.
	ep := rp.runner.Begin(episode.Identity{EpisodeID: j.ep.EpisodeID, TaskHash: j.ep.TaskHash, Repeat: int(j.ep.Repeat), Seed: j.ep.Seed}, j.spec, r)
	cmp := &comparer{cfg: rp.cfg, capture: rp.compare, rec: j.steps, blob: rp.blob}
	lim := j.spec.Limits.Runtime()
	lim.MaxSteps = len(actions) + 1
	// An unavailable backend ends the rollout as env_error, reported below.
	watch := episode.ChainSinks(cmp, episode.StepObserver(rp.obs, j.ep.TaskID, j.ep.EpisodeID))
	err = ep.Rollout(ctx, script.New(actions), runtime.History{Instruction: j.spec.Instruction}, lim, watch)
	er.exit = ep.Row.ExitReason
	if err != nil && !errors.Is(err, runtime.ErrUnavailable) {
		er.Status, er.Error = Errored, err.Error()
		return er, pool.Broken
	}
	res := ep.Result
	er.Matched, er.First = cmp.matched, cmp.first
	if res.Exit == runtime.ExitEnvError {
		er.Status, er.Error = Errored, "sandbox failed: "+res.Detail
		return er, pool.Broken
	}
	if er.First == nil && cmp.seen < len(actions) {
		er.First = &StepDiff{Step: cmp.seen, Field: "steps", Recorded: fmt.Sprint(len(actions)), Replayed: fmt.Sprint(cmp.seen),
			Diff: fmt.Sprintf("the replay ended after %d of %d recorded actions (%s: %s)", cmp.seen, len(actions), res.Exit, res.Detail)}
	}
	if j.hasReward {
		ran, err := ep.Verify(ctx)
		if err != nil {
			er.Status, er.Error = Errored, err.Error()
			return er, pool.Broken
		}
		if ran {
			er.RewardReplayed = ep.Reward.Value
			er.RewardChanged = !sameReward(j.reward, ep.Reward.Value)
			if er.RewardChanged && er.First == nil {
				er.First = &StepDiff{Step: len(actions), Field: "reward", Recorded: fmtReward(j.reward), Replayed: fmtReward(ep.Reward.Value),
					Diff: "the final verification reward changed although every step matched"}
			}
		}
	}
	er.Status = Identical
	if er.First != nil {
		er.Status = Diverged
	}
	if rp.rec != nil {
		// Nothing is kept of an episode cancelled before its first step,
		// as in a collection.
		if b, keep := ep.Rows(); keep {
			if err := rp.rec.commit(ctx, b); err != nil {
				er.Status, er.Error = Errored, "recording: "+err.Error()
			}
		}
	}
	return er, pool.Done
}

// recordedActions are the canonical actions of the stored steps, up to the
// first model turn without one, which ended the recorded episode.
func recordedActions(steps []schemas.StepRow) ([]runtime.Action, error) {
	var actions []runtime.Action
	for _, s := range steps {
		var a runtime.Action
		if err := json.Unmarshal([]byte(s.ActionJSON), &a); err != nil {
			return nil, fmt.Errorf("step %d: recorded action unreadable: %v", s.StepIndex, err)
		}
		if a.Kind == "" {
			break
		}
		actions = append(actions, a)
	}
	return actions, nil
}
