package collect

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strings"

	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// FromRootID is the id of the root a -from run makes of source episode
// sourceEpisode of run sourceRun, branched at step at: derived, so the same
// source and plan name the same root (and so the same branches), and never
// the source episode's own id — the root holds only the first at steps, and
// merged with the source run it must not pass for the whole episode.
func FromRootID(sourceRun, sourceEpisode string, at int) string {
	h := sha256.New()
	for _, s := range []string{"forkline/from", sourceRun, sourceEpisode} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(at))
	h.Write(b[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// planFrom plans a -from run: every trajectory of the stored dataset
// cfg.From (those whose ids start with one of cfg.FromEpisodes, when given) whose task is in -tasks
// and that has at least the plan's K steps becomes a root whose first K
// steps are re-executed from the record in a fresh fork of the golden —
// each observation checked against the record — then checkpointed and
// continued Width times (the remake path of a resume, whose root is kept).
// A source trajectory whose task's spec changed since it was recorded
// refuses the command (its golden is another); one of a task not in -tasks,
// or shorter than K steps, is left out and said so.
func (inv *invocation) planFrom() error {
	cfg := inv.cfg
	ds, err := shard.Open(cfg.From)
	if err != nil {
		return badInput(fielderr.New("collect", "From", cfg.From, err))
	}
	m := ds.Manifest()
	abs, err := filepath.Abs(cfg.From)
	if err != nil {
		return badInput(fielderr.New("collect", "From", cfg.From, err))
	}
	inv.from = &manifest.From{Dataset: abs, RunID: m.RunID, Roots: map[string]string{}}
	matched := map[string]bool{} // the -episode prefixes that matched
	picked := func(id string) bool {
		if len(cfg.FromEpisodes) == 0 {
			return true
		}
		ok := false
		for _, p := range cfg.FromEpisodes {
			if strings.HasPrefix(id, p) {
				matched[p], ok = true, true
			}
		}
		return ok
	}
	at := cfg.Branch.At
	var short, otherTask int
	err = ds.EachTrajectory(func(ep schemas.EpisodeRow, steps []schemas.StepRow, _ []schemas.RewardRow) error {
		if !picked(ep.EpisodeID) {
			return nil
		}
		i := slices.IndexFunc(inv.specs, func(s task.Spec) bool { return s.ID == ep.TaskID })
		if i < 0 {
			otherTask++
			return nil
		}
		s := &inv.specs[i]
		if h := s.Hash(); h != ep.TaskHash {
			return fielderr.Errorf("collect", "From", cfg.From, "episode %s is of task %s as it was (spec hash %.12s), but Tasks gives it changed (%.12s): its golden would be another", ep.EpisodeID, s.ID, ep.TaskHash, h).Mentions("Tasks")
		}
		if len(steps) < at {
			short++
			return nil
		}
		id := FromRootID(m.RunID, ep.EpisodeID, at)
		prefix := slices.Clone(steps[:at])
		inv.from.Roots[id] = ep.EpisodeID
		inv.plan = append(inv.plan, planned{id: id, task: s, hash: ep.TaskHash, repeat: int(ep.Repeat),
			remake: &remakeJob{id: id, steps: prefix, missing: allIndexes(cfg.Branch.Width), budget: cfg.Branch.rootBudget(), source: ep.EpisodeID}})
		return nil
	})
	if err != nil {
		return badInput(err)
	}
	for _, p := range cfg.FromEpisodes {
		if !matched[p] {
			return badInput(fielderr.Errorf("collect", "FromEpisodes", p, "no trajectory of %s has an id starting so (a branched parent is a prefix, not a trajectory)", cfg.From))
		}
	}
	if short > 0 || otherTask > 0 {
		inv.logf("from %s: %d trajectories have fewer than %d steps and %d are of tasks not among the tasks given: left out", cfg.From, short, at, otherTask)
	}
	if len(inv.plan) == 0 {
		return badInput(fielderr.Errorf("collect", "From", cfg.From, "no trajectory to branch from (none of a task in Tasks with at least %d steps)", at).Mentions("Tasks"))
	}
	inv.total = len(inv.plan)
	return nil
}

func allIndexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
