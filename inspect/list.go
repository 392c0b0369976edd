package inspect

import (
	"context"
	"errors"
	"fmt"

	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// Entry is one episode of a list: what tells it apart from the others of
// its run at a glance, without its steps. Its JSON form is what
// inspect -list -json prints for each episode.
type Entry struct {
	EpisodeID     string   `json:"episode_id"`
	TaskID        string   `json:"task_id"`
	Repeat        int32    `json:"repeat"`
	ExitReason    string   `json:"exit_reason"`
	Detail        string   `json:"detail,omitempty"`
	Steps         int32    `json:"steps"`
	Reward        *float64 `json:"reward"` // the Filter's reward (DefaultReward when it names none); null when the episode has none
	DurationMS    float64  `json:"duration_ms"`
	ResetStrategy string   `json:"reset_strategy"`
	ResetMS       float64  `json:"reset_ms"`
	TokenRecord   bool     `json:"token_record"`
	TokenDrift    bool     `json:"token_drift"`
	// Parent and BranchStep, for a branch episode: the episode it forked
	// from and the step it starts at.
	Parent     string `json:"parent_episode_id,omitempty"`
	BranchStep int    `json:"branch_step,omitempty"`
	// Group is the episode's group id (episodes of one task and seed, or
	// the branches of one point), "" when none was recorded.
	Group string `json:"group_id,omitempty"`
}

// entry is row's Entry, its reward the one f names.
func entry(row *schemas.EpisodeRow, rewards []schemas.RewardRow, f export.Filter) Entry {
	e := Entry{EpisodeID: row.EpisodeID, TaskID: row.TaskID, Repeat: row.Repeat, ExitReason: row.ExitReason,
		Detail: row.Detail, Steps: row.Steps, Reward: f.EpisodeReward(rewards), DurationMS: row.DurationMS,
		ResetStrategy: row.ResetStrategy, ResetMS: row.ResetMS, TokenRecord: len(row.ResponseIDs) > 0,
		TokenDrift: row.TokenDrift}
	if p, step, ok := row.Branched(); ok {
		e.Parent, e.BranchStep = p, step
	}
	if row.GroupID != nil {
		e.Group = *row.GroupID
	}
	return e
}

// EachEpisode calls fn, in the dataset's order, with the Entry of every
// episode f selects (export.Filter: the selection export applies, so a
// list shows what an export with the same filters would read). It reads
// the episodes and rewards tables only, never the steps, and holds one
// episode at a time: memory does not grow with the run. It fails with
// ErrNotDataset for a directory that is not a dataset and ErrDamaged for
// one whose files cannot be read; fn's error stops it and is returned.
func EachEpisode(ctx context.Context, dir string, f export.Filter, fn func(Entry) error) error {
	ds, err := shard.Open(dir)
	if err != nil {
		return classify(dir, err)
	}
	var stop error
	err = ds.EachEpisodeRewards(func(row schemas.EpisodeRow, rewards []schemas.RewardRow) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !f.Match(&row, rewards) {
			return nil
		}
		if err := fn(entry(&row, rewards, f)); err != nil {
			stop = err
			return err
		}
		return nil
	})
	if err != nil && stop != nil && errors.Is(err, stop) {
		return err
	}
	if err != nil {
		return classify(dir, err)
	}
	return nil
}

// ListOptions select and page a List.
type ListOptions struct {
	Filter export.Filter
	// Offset selected episodes are skipped, then at most Limit are kept
	// (DefaultListLimit when 0; a negative Limit keeps none, to count).
	Offset int
	Limit  int
}

// DefaultListLimit is how many episodes a List keeps unless told.
const DefaultListLimit = 50

// EpisodeList is one page of the episodes a filter selects.
type EpisodeList struct {
	Dir string `json:"dir"`
	// Matched is how many episodes the filter selects in the whole run;
	// Episodes are those from Offset on, at most Limit of them.
	Matched  int64   `json:"matched"`
	Offset   int     `json:"offset"`
	Limit    int     `json:"limit"`
	Episodes []Entry `json:"episodes"`
}

// List returns one page of the episodes o.Filter selects, in the dataset's
// order, with how many it selects in all. It reads the run once as
// EachEpisode does; memory grows with the page, never with the run.
func List(ctx context.Context, dir string, o ListOptions) (*EpisodeList, error) {
	if o.Offset < 0 {
		return nil, fmt.Errorf("inspect: list offset %d is negative", o.Offset)
	}
	if o.Limit == 0 {
		o.Limit = DefaultListLimit
	}
	l := &EpisodeList{Dir: dir, Offset: o.Offset, Limit: max(o.Limit, 0), Episodes: []Entry{}}
	err := EachEpisode(ctx, dir, o.Filter, func(e Entry) error {
		if l.Matched >= int64(o.Offset) && len(l.Episodes) < l.Limit {
			l.Episodes = append(l.Episodes, e)
		}
		l.Matched++
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}
