package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// recording writes replayed episodes as a new dataset (Config.Record): the
// same episode ids and tasks, the steps as they happened in the replay,
// captured under the recording's capture policy, and the replayed rewards.
type recording struct {
	w        *shard.Writer
	runID    string
	provider string

	mu   sync.Mutex
	seen capture.SetIndex // blobs already committed
}

func newRecording(cfg Config, src shard.Manifest, specs map[string]task.Spec, provider string) (*recording, error) {
	list := make([]task.Spec, 0, len(specs))
	for _, s := range specs {
		list = append(list, s)
	}
	tasks, err := task.EncodeRecords(list)
	if err != nil {
		return nil, err
	}
	runID := "replay-" + time.Now().UTC().Format("20060102T150405Z")
	provRec, _ := json.Marshal(map[string]any{"name": provider, "params": cfg.ProviderParams, "image": cfg.Image})
	polRec, _ := json.Marshal(map[string]any{"name": "replay", "source": cfg.In, "source_run_id": src.RunID})
	w, err := shard.Create(cfg.Record, shard.Manifest{
		SchemaVersion: schemas.Version, Tool: shard.ToolName, ToolVersion: src.ToolVersion, RunID: runID,
		Provider: provRec, Policy: polRec, Capture: src.Capture, Tasks: tasks, Plan: src.Plan,
	}, shard.DefaultConfig())
	if err != nil {
		return nil, fmt.Errorf("replay: -record: %w", err)
	}
	return &recording{w: w, runID: runID, provider: provider, seen: capture.SetIndex{}}, nil
}

// commit writes one replayed episode. Blobs are deduplicated across the run
// under the lock, as the collector does.
func (r *recording) commit(ctx context.Context, j *recorded, er EpisodeReport, c *comparer) error {
	if c == nil {
		return nil
	}
	ep := j.ep
	ep.RunID, ep.Provider = r.runID, r.provider
	ep.ExitReason, ep.Detail, ep.Answer = string(c.result.Exit), c.result.Detail, c.result.Answer
	ep.Steps = int32(len(c.rows))
	ep.DurationMS, ep.PolicyMS, ep.EnvMS = schemas.Millis(c.result.Duration), schemas.Millis(c.result.PolicyTime), schemas.Millis(c.result.EnvTime)
	ep.StartedAt = time.Now().UnixMilli()
	// The token record belongs to the model that produced the original
	// episode; a replay re-executes actions and has no model turns.
	ep.PromptIDs, ep.ResponseIDs, ep.ResponseMask, ep.ResponseLogprobs, ep.TokenTurns, ep.TokenDrift = nil, nil, nil, nil, 0, false
	b := shard.EpisodeBatch{Episode: ep, Steps: c.rows}
	if c.reward != nil {
		b.Rewards = []schemas.RewardRow{{EpisodeID: ep.EpisodeID, Name: "verify", Value: c.reward.Value,
			Source: j.spec.Verify.Cmd, Detail: c.reward.Detail, ExitCode: int32(c.reward.ExitCode)}}
		ep.VerifyMS = schemas.Millis(c.reward.Took)
		b.Episode = ep
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, bl := range c.blobs {
		if r.seen.Add(bl.SHA256) {
			b.Blobs = append(b.Blobs, bl)
		}
	}
	return r.w.Commit(context.WithoutCancel(ctx), b)
}

func (r *recording) close(rep *Report, finished bool) error {
	status := shard.StatusComplete
	if !finished || rep.Errored > 0 {
		status = shard.StatusPartial
	}
	sum, _ := json.Marshal(map[string]any{"replay_of": rep.Dataset, "identical": rep.Identical, "diverged": rep.Diverged, "errored": rep.Errored})
	r.w.Update(func(m *shard.Manifest) { m.Summary = sum })
	return r.w.Close(status)
}
