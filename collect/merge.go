package collect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// ErrMerge is wrapped by every refusal to merge: parts that overlap, or that
// were not collected from the same tasks, plan and capture policy.
var ErrMerge = errors.New("collect: cannot merge")

// MergeReport says what Merge did.
type MergeReport struct {
	Out      string          `json:"out"`
	Status   shard.Status    `json:"status"`
	Episodes int             `json:"episodes"`
	Parts    []MergedPart    `json:"parts"`
	Missing  []int           `json:"missing_parts,omitempty"` // part indexes of the plan no input covers
	Summary  json.RawMessage `json:"-"`
}

// MergedPart is one input of a merge.
type MergedPart struct {
	Dir      string       `json:"dir"`
	RunID    string       `json:"run_id"`
	Part     Part         `json:"part"`
	Status   shard.Status `json:"status"`
	Episodes int          `json:"episodes"`
}

// Merge joins datasets collected as parts of one plan (collect -shard i/n on
// n machines, or any runs of the same tasks, plan and capture policy) into a
// new dataset at out. It refuses parts that disagree on tasks (by spec hash),
// repeats, seed or capture policy, and any episode id present in two parts.
// Episodes are re-committed one at a time (memory does not grow with the
// dataset); their run_id becomes the merged run's, and the manifest lists
// where each part came from. The result is complete when every part is
// complete and together they cover every part of the plan; otherwise it is
// partial and the report names what is missing.
func Merge(ctx context.Context, out string, parts []string, cfg shard.Config) (*MergeReport, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: no parts given", ErrMerge)
	}
	if cfg == (shard.Config{}) {
		cfg = shard.DefaultConfig()
	}
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%w: %s is not empty", ErrMerge, out)
	}
	sets := make([]*shard.Dataset, len(parts))
	rep := &MergeReport{Out: out, Status: shard.StatusComplete}
	var first shard.Manifest
	var firstPlan planRecord
	var firstTasks map[string]string
	covered := map[int]bool{}
	for i, dir := range parts {
		ds, err := shard.Open(dir)
		if err != nil {
			return nil, err
		}
		sets[i] = ds
		m := ds.Manifest()
		var plan planRecord
		if err := json.Unmarshal(m.Plan, &plan); err != nil {
			return nil, fmt.Errorf("%w: %s: manifest plan unreadable: %v", ErrMerge, dir, err)
		}
		if plan.Part.Count == 0 {
			plan.Part = Whole
		}
		tasks, err := task.RecordHashes(m.Tasks)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrMerge, dir, err)
		}
		if i == 0 {
			first, firstPlan, firstTasks = m, plan, tasks
		} else {
			if !reflect.DeepEqual(tasks, firstTasks) {
				return nil, fmt.Errorf("%w: %s has other tasks or task versions than %s", ErrMerge, dir, parts[0])
			}
			if plan.Repeats != firstPlan.Repeats || plan.Seed != firstPlan.Seed || plan.Part.Count != firstPlan.Part.Count {
				return nil, fmt.Errorf("%w: %s was planned with -repeats %d -seed %d over %d parts, %s with -repeats %d -seed %d over %d parts",
					ErrMerge, dir, plan.Repeats, plan.Seed, plan.Part.Count, parts[0], firstPlan.Repeats, firstPlan.Seed, firstPlan.Part.Count)
			}
			if !sameCapture(m.Capture, first.Capture) {
				return nil, fmt.Errorf("%w: %s used capture policy %s, %s used %s", ErrMerge, dir, m.Capture, parts[0], first.Capture)
			}
		}
		if covered[plan.Part.Index] && plan.Part.Count > 1 {
			return nil, fmt.Errorf("%w: two inputs are shard %s", ErrMerge, plan.Part)
		}
		covered[plan.Part.Index] = true
		if m.Status != shard.StatusComplete {
			rep.Status = shard.StatusPartial
		}
		rep.Parts = append(rep.Parts, MergedPart{Dir: dir, RunID: m.RunID, Part: plan.Part, Status: m.Status})
	}
	for i := range firstPlan.Part.Count {
		if !covered[i] {
			rep.Missing = append(rep.Missing, i)
			rep.Status = shard.StatusPartial
		}
	}
	// Refuse overlap before writing anything.
	seen := map[string]string{}
	for i, ds := range sets {
		for ep, err := range ds.Episodes() {
			if err != nil {
				return nil, err
			}
			if prev, dup := seen[ep.EpisodeID]; dup {
				return nil, fmt.Errorf("%w: episode %s is in both %s and %s", ErrMerge, ep.EpisodeID, prev, parts[i])
			}
			seen[ep.EpisodeID] = parts[i]
		}
	}

	runID := "merge-" + newRunID()
	plan := firstPlan
	plan.Part, plan.Episodes = Whole, plan.Total
	planJSON, _ := json.Marshal(plan)
	w, err := shard.Create(out, shard.Manifest{
		SchemaVersion: schemas.Version, Tool: "forkline", ToolVersion: Version, RunID: runID,
		Provider: first.Provider, Policy: first.Policy, Capture: first.Capture, Tasks: first.Tasks, Plan: planJSON,
	}, cfg)
	if err != nil {
		return nil, err
	}
	blobs := map[string]bool{}
	for i, ds := range sets {
		n := 0
		err := ds.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			ep.RunID = runID
			b := shard.EpisodeBatch{Episode: ep, Steps: steps, Rewards: rewards}
			for _, s := range steps {
				if s.ScreenHash == "" || s.Screenshot != nil || blobs[s.ScreenHash] {
					continue
				}
				data, err := ds.Blob(s.ScreenHash)
				if err != nil {
					return fmt.Errorf("collect: merge: %s: episode %s step %d: %w", parts[i], ep.EpisodeID, s.StepIndex, err)
				}
				blobs[s.ScreenHash] = true
				b.Blobs = append(b.Blobs, schemas.BlobRow{SHA256: s.ScreenHash, Media: "image/png", Data: data})
			}
			n++
			return w.Commit(ctx, b)
		})
		if err != nil {
			w.Close(shard.StatusPartial)
			return nil, err
		}
		rep.Parts[i].Episodes = n
		rep.Episodes += n
	}
	sort.Ints(rep.Missing)
	from, _ := json.Marshal(map[string]any{"merged_from": rep.Parts, "missing_parts": rep.Missing})
	w.Update(func(m *shard.Manifest) { m.Summary = from })
	if err := w.Close(rep.Status); err != nil {
		return nil, err
	}
	return rep, nil
}

// sameCapture reports whether two manifests' capture entries are one
// policy. An entry that cannot be read matches nothing: merging it would
// claim a policy nobody can check.
func sameCapture(a, b json.RawMessage) bool {
	x, errA := capture.DecodeManifest(a)
	y, errB := capture.DecodeManifest(b)
	return errA == nil && errB == nil && x == y
}
