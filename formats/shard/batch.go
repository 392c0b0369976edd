package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/forkline/forkline/schemas"
)

// EpisodeBatch is one finished episode: its episode row and every row that
// belongs to it. Commit writes it whole into one generation or not at all.
type EpisodeBatch struct {
	Episode schemas.EpisodeRow
	Steps   []schemas.StepRow   // in step order, StepIndex 0..n-1
	Rewards []schemas.RewardRow // episode-level (StepIndex nil) and step-level
	Blobs   []schemas.BlobRow   // payloads the steps refer to by hash
}

// Validate checks the batch's invariants for a run: every row carries the
// episode's id, the episode's run id is runID (skipped when runID is ""),
// the steps count matches, step indexes run 0..n-1 in order, token columns
// of every step and of the episode's token record line up
// (len(response_mask) == len(response_ids) always, and
// len(response_logprobs) == len(response_ids) whenever logprobs are present),
// step-level rewards point at an existing step, and every blob's sha256 is
// the hash of its data. The error wraps ErrInvalidBatch and names the
// episode, step and column.
func (b *EpisodeBatch) Validate(runID string) error {
	ep := &b.Episode
	id := ep.EpisodeID
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: episode %q: %s", ErrInvalidBatch, id, fmt.Sprintf(format, args...))
	}
	if id == "" {
		return fmt.Errorf("%w: episode_id is empty (task %q)", ErrInvalidBatch, ep.TaskID)
	}
	if runID != "" && ep.RunID != runID {
		return bad("run_id %q, but the run is %q", ep.RunID, runID)
	}
	if len(ep.ResponseMask) != len(ep.ResponseIDs) {
		return bad("episode row: len(response_mask) = %d, len(response_ids) = %d", len(ep.ResponseMask), len(ep.ResponseIDs))
	}
	if len(ep.ResponseLogprobs) != 0 && len(ep.ResponseLogprobs) != len(ep.ResponseIDs) {
		return bad("episode row: len(response_logprobs) = %d, len(response_ids) = %d", len(ep.ResponseLogprobs), len(ep.ResponseIDs))
	}
	if int(ep.Steps) != len(b.Steps) {
		return bad("steps = %d, but the batch has %d step rows", ep.Steps, len(b.Steps))
	}
	for i := range b.Steps {
		s := &b.Steps[i]
		if s.EpisodeID != id {
			return bad("step %d: episode_id %q", i, s.EpisodeID)
		}
		if int(s.StepIndex) != i {
			return bad("step row %d: step_index %d (want %d: indexes run 0..n-1 in order)", i, s.StepIndex, i)
		}
		if len(s.ResponseMask) != len(s.ResponseIDs) {
			return bad("step %d: len(response_mask) = %d, len(response_ids) = %d", i, len(s.ResponseMask), len(s.ResponseIDs))
		}
		if len(s.ResponseLogprobs) != 0 && len(s.ResponseLogprobs) != len(s.ResponseIDs) {
			return bad("step %d: len(response_logprobs) = %d, len(response_ids) = %d", i, len(s.ResponseLogprobs), len(s.ResponseIDs))
		}
	}
	for i := range b.Rewards {
		r := &b.Rewards[i]
		if r.EpisodeID != id {
			return bad("reward %d (%q): episode_id %q", i, r.Name, r.EpisodeID)
		}
		if r.Name == "" {
			return bad("reward %d: name is empty", i)
		}
		if r.StepIndex != nil && (*r.StepIndex < 0 || int(*r.StepIndex) >= len(b.Steps)) {
			return bad("reward %d (%q): step_index %d, but the episode has %d steps", i, r.Name, *r.StepIndex, len(b.Steps))
		}
	}
	for i := range b.Blobs {
		bl := &b.Blobs[i]
		sum := sha256.Sum256(bl.Data)
		if got := hex.EncodeToString(sum[:]); got != bl.SHA256 {
			return bad("blob %d: sha256 %q, but its data hashes to %q", i, bl.SHA256, got)
		}
	}
	return nil
}

// Size is the batch's estimated uncompressed bytes: the sum of its rows'
// schemas Size estimates, the measure the writer rolls generations by.
func (b *EpisodeBatch) Size() int64 {
	n := b.Episode.Size()
	for i := range b.Steps {
		n += b.Steps[i].Size()
	}
	for i := range b.Rewards {
		n += b.Rewards[i].Size()
	}
	for i := range b.Blobs {
		n += b.Blobs[i].Size()
	}
	return n
}
