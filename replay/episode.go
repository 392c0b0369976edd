package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forkline/forkline/capture"
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
func (rp *replayer) episode(ctx context.Context, j *recorded, r pool.Replica, acqErr error) (er EpisodeReport, out pool.Outcome) {
	er = EpisodeReport{EpisodeID: j.ep.EpisodeID, TaskID: j.ep.TaskID, Steps: len(j.steps), RewardRecorded: j.reward}
	// The replay is the same episode (identity) run again: how this run
	// went — replica, reset, golden, timings — is the replay's own.
	ep := rp.runner.Begin(episode.Identity{EpisodeID: j.ep.EpisodeID, TaskHash: j.ep.TaskHash, Repeat: int(j.ep.Repeat), Seed: j.ep.Seed}, j.spec, r)
	defer func() {
		// Its end, with the verdict, as every episode's is told.
		if ep.Row.ExitReason == "" {
			// No replica, or no rollout.
			ep.Row.ExitReason, ep.Row.Detail = string(runtime.ExitEnvError), er.Error
		}
		ep.End(true, string(er.Status))
	}()
	if acqErr != nil {
		er.Status, er.Error = Errored, acqErr.Error()
		return er, pool.Done
	}
	actions, err := recordedActions(j.steps)
	if err != nil {
		er.Status, er.Error = Errored, err.Error()
		return er, pool.Done
	}
	// What the replay runs: the recorded actions through the script
	// policy, or for an agent episode its harness against the record.
	var pol runtime.Policy = script.New(actions)
	expected := len(actions)
	if j.ep.Agent != nil {
		if rp.agents == nil {
			er.Status, er.Error = Errored, "an agent episode in a run whose policy was not agent"
			return er, pool.Done
		}
		if pol, err = rp.agentPolicy(j); err != nil {
			er.Status, er.Error = Errored, err.Error()
			return er, pool.Done
		}
		expected = len(j.steps)
	}
	cmp := &comparer{cfg: rp.cfg, capture: rp.compare, rec: j.steps, blob: rp.blob}
	lim := j.spec.Limits.Runtime()
	lim.MaxSteps = expected + 1
	// An unavailable backend ends the rollout as env_error, reported below.
	err = ep.Rollout(ctx, pol, runtime.History{Instruction: j.spec.Instruction}, lim, cmp)
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
	if er.First == nil && cmp.seen < expected {
		er.First = &StepDiff{Step: cmp.seen, Field: "steps", Recorded: fmt.Sprint(expected), Replayed: fmt.Sprint(cmp.seen),
			Diff: fmt.Sprintf("the replay ended after %d of %d recorded steps (%s: %s)", cmp.seen, expected, res.Exit, res.Detail)}
	}
	if er.First == nil && j.ep.Agent != nil && res.Exit != runtime.ExitDone {
		er.First = &StepDiff{Step: cmp.seen, Field: "exit_reason", Recorded: j.ep.ExitReason, Replayed: string(res.Exit),
			Diff: fmt.Sprintf("the harness ended %s (%s)", res.Exit, res.Detail)}
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
				er.First = &StepDiff{Step: expected, Field: "reward", Recorded: fmtReward(j.reward), Replayed: fmtReward(ep.Reward.Value),
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

// agentPolicy is the policy that replays agent episode j: its harness run
// again, each model call answered with the recorded reply, each side call
// with the recorded side reply.
func (rp *replayer) agentPolicy(j *recorded) (runtime.Policy, error) {
	steps := make([]runtime.Step, len(j.steps))
	for i, r := range j.steps {
		st, err := capture.Step(r)
		if err != nil {
			return nil, err
		}
		if st.Model == nil {
			return nil, fmt.Errorf("step %d of the agent episode records no model call", r.StepIndex)
		}
		steps[i] = st
	}
	var side []string
	var rec schemas.AgentRecord
	if err := json.Unmarshal([]byte(*j.ep.Agent), &rec); err != nil {
		return nil, fmt.Errorf("the episode's agent record: %v", err)
	}
	if rec.SideCallsSHA256 != "" && rp.blob != nil {
		data, err := rp.blob(rec.SideCallsSHA256)
		if err != nil {
			return nil, fmt.Errorf("the side calls blob: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		for dec.More() {
			var c struct {
				Reply struct {
					Content string `json:"content"`
				} `json:"reply"`
			}
			if err := dec.Decode(&c); err != nil {
				return nil, fmt.Errorf("the side calls blob: %v", err)
			}
			side = append(side, c.Reply.Content)
		}
	}
	return rp.agents.Policy(j.ep.EpisodeID, steps, side), nil
}
