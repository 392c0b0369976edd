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
	Steps   []schemas.StepRow   // in step order, StepIndex first..first+n-1 (first = Episode.FirstStep())
	Rewards []schemas.RewardRow // episode-level (StepIndex nil) and step-level
	Blobs   []schemas.BlobRow   // payloads the steps refer to by hash
}

// Validate checks the batch's invariants for a run: every row carries the
// episode's id, the episode's run id is runID (skipped when runID is ""),
// the steps count matches, step indexes run first..first+n-1 in order
// (first is 0, or a branch episode's branch_step), its lineage is whole (a
// parent names a branch step and index, and the other way round), token columns
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
	if err := checkLineage(ep); err != nil {
		return bad("%v", err)
	}
	first := ep.FirstStep()
	for i := range b.Steps {
		s := &b.Steps[i]
		if s.EpisodeID != id {
			return bad("step %d: episode_id %q", i, s.EpisodeID)
		}
		if int(s.StepIndex) != first+i {
			return bad("step row %d: step_index %d (want %d: indexes run %d..%d in order)", i, s.StepIndex, first+i, first, first+len(b.Steps)-1)
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
		if r.StepIndex != nil && (int(*r.StepIndex) < first || int(*r.StepIndex) >= first+len(b.Steps)) {
			return bad("reward %d (%q): step_index %d, but the episode's own steps are %d..%d", i, r.Name, *r.StepIndex, first, first+len(b.Steps)-1)
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

// checkLineage refuses a row whose lineage columns do not belong together:
// a parent without a branch step and index (or the other way round), a
// negative step or index, a branch of itself.
func checkLineage(ep *schemas.EpisodeRow) error {
	hasParent := ep.ParentEpisodeID != nil && *ep.ParentEpisodeID != ""
	switch {
	case hasParent && (ep.BranchStep == nil || ep.BranchIndex == nil):
		return fmt.Errorf("parent_episode_id %q without branch_step and branch_index", *ep.ParentEpisodeID)
	case !hasParent && (ep.BranchStep != nil || ep.BranchIndex != nil):
		return fmt.Errorf("branch_step or branch_index without parent_episode_id")
	case hasParent && *ep.ParentEpisodeID == ep.EpisodeID:
		return fmt.Errorf("parent_episode_id is the episode itself")
	case hasParent && (*ep.BranchStep < 1 || *ep.BranchIndex < 0):
		return fmt.Errorf("branch_step %d, branch_index %d: want a step >= 1 and an index >= 0", *ep.BranchStep, *ep.BranchIndex)
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
