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
	"github.com/forkline/forkline/manifest"
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

// MergedPart is one input of a merge, as the merged manifest's summary
// lists it.
type MergedPart = manifest.MergedPart

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
	in, err := openParts(parts)
	if err != nil {
		return nil, err
	}
	// Refuse overlap before writing anything.
	if err := in.refuseOverlap(); err != nil {
		return nil, err
	}
	in.rep.Out = out
	runID := "merge-" + newRunID()
	w, err := shard.Create(out, in.manifest(runID), cfg)
	if err != nil {
		return nil, err
	}
	if err := in.copyEpisodes(ctx, w, runID); err != nil {
		w.Close(shard.StatusPartial)
		return nil, err
	}
	rep := in.rep
	sort.Ints(rep.Missing)
	if from, err := (manifest.Summary{Merge: &manifest.Merge{MergedFrom: rep.Parts, MissingParts: rep.Missing}}).Encode(); err == nil {
		w.Update(func(m *shard.Manifest) { m.Summary = from })
	}
	if err := w.Close(rep.Status); err != nil {
		return nil, err
	}
	return rep, nil
}

// mergeInputs are the parts of a merge, opened and checked against the
// first.
type mergeInputs struct {
	dirs  []string
	sets  []*shard.Dataset
	first shard.Manifest
	plan  manifest.Plan // the first part's
	rep   *MergeReport
}

// openParts opens every part and refuses those that disagree with the
// first on tasks (by spec hash), repeats, seed, part count or capture
// policy, or that repeat a part; it notes parts that are not complete and
// parts of the plan no input covers.
func openParts(dirs []string) (*mergeInputs, error) {
	in := &mergeInputs{dirs: dirs, sets: make([]*shard.Dataset, len(dirs)), rep: &MergeReport{Status: shard.StatusComplete}}
	var firstTasks map[string]string
	covered := map[int]bool{}
	for i, dir := range dirs {
		ds, err := shard.Open(dir)
		if err != nil {
			return nil, err
		}
		in.sets[i] = ds
		m := ds.Manifest()
		plan, err := manifest.DecodePlan(m.Plan)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: manifest plan unreadable: %v", ErrMerge, dir, err)
		}
		tasks, err := task.RecordHashes(m.Tasks)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrMerge, dir, err)
		}
		if i == 0 {
			in.first, in.plan, firstTasks = m, plan, tasks
		} else if err := in.sameRun(dir, m, plan, tasks, firstTasks); err != nil {
			return nil, err
		}
		if covered[plan.Part.Index] && plan.Part.Count > 1 {
			return nil, fmt.Errorf("%w: two inputs are shard %s", ErrMerge, plan.Part)
		}
		covered[plan.Part.Index] = true
		if m.Status != shard.StatusComplete {
			in.rep.Status = shard.StatusPartial
		}
		in.rep.Parts = append(in.rep.Parts, MergedPart{Dir: dir, RunID: m.RunID, Part: plan.Part, Status: m.Status})
	}
	for i := range in.plan.Part.Count {
		if !covered[i] {
			in.rep.Missing = append(in.rep.Missing, i)
			in.rep.Status = shard.StatusPartial
		}
	}
	return in, nil
}

// sameRun refuses a part (dir) collected from other tasks, another plan or
// another capture policy than the first.
func (in *mergeInputs) sameRun(dir string, m shard.Manifest, plan manifest.Plan, tasks, firstTasks map[string]string) error {
	first, fp := in.dirs[0], in.plan
	if !reflect.DeepEqual(tasks, firstTasks) {
		return fmt.Errorf("%w: %s has other tasks or task versions than %s", ErrMerge, dir, first)
	}
	if plan.Repeats != fp.Repeats || plan.Seed != fp.Seed || plan.Part.Count != fp.Part.Count {
		return fmt.Errorf("%w: %s was planned with %d repeats, seed %d, over %d parts, %s with %d repeats, seed %d, over %d parts",
			ErrMerge, dir, plan.Repeats, plan.Seed, plan.Part.Count, first, fp.Repeats, fp.Seed, fp.Part.Count)
	}
	if !sameCapture(m.Capture, in.first.Capture) {
		return fmt.Errorf("%w: %s used capture policy %s, %s used %s", ErrMerge, dir, m.Capture, first, in.first.Capture)
	}
	return nil
}

// refuseOverlap refuses an episode id that is in two parts.
func (in *mergeInputs) refuseOverlap() error {
	seen := map[string]string{}
	for i, ds := range in.sets {
		for ep, err := range ds.Episodes() {
			if err != nil {
				return err
			}
			if prev, dup := seen[ep.EpisodeID]; dup {
				return fmt.Errorf("%w: episode %s is in both %s and %s", ErrMerge, ep.EpisodeID, prev, in.dirs[i])
			}
			seen[ep.EpisodeID] = in.dirs[i]
		}
	}
	return nil
}

// manifest is the merged dataset's manifest: the first part's provider,
// policy, capture policy and tasks, and the whole plan.
func (in *mergeInputs) manifest(runID string) shard.Manifest {
	plan := in.plan
	plan.Part, plan.Episodes = manifest.Part(Whole), plan.Total
	planJSON := plan.Encode()
	return shard.Manifest{
		SchemaVersion: schemas.Version, Tool: "forkline", ToolVersion: Version, RunID: runID,
		Provider: in.first.Provider, Policy: in.first.Policy, Capture: in.first.Capture, Tasks: in.first.Tasks, Plan: planJSON,
	}
}

// copyEpisodes re-commits every part's episodes into w, one at a time (so
// memory does not grow with the dataset), under the merged run's id, each
// blob once.
func (in *mergeInputs) copyEpisodes(ctx context.Context, w *shard.Writer, runID string) error {
	blobs := map[string]bool{}
	for i, ds := range in.sets {
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
					return fmt.Errorf("collect: merge: %s: episode %s step %d: %w", in.dirs[i], ep.EpisodeID, s.StepIndex, err)
				}
				blobs[s.ScreenHash] = true
				b.Blobs = append(b.Blobs, schemas.BlobRow{SHA256: s.ScreenHash, Media: "image/png", Data: data})
			}
			n++
			return w.Commit(ctx, b)
		})
		if err != nil {
			return err
		}
		in.rep.Parts[i].Episodes = n
		in.rep.Episodes += n
	}
	return nil
}

// sameCapture reports whether two manifests' capture entries are one
// policy. An entry that cannot be read matches nothing: merging it would
// claim a policy nobody can check.
func sameCapture(a, b json.RawMessage) bool {
	x, errA := capture.DecodeManifest(a)
	y, errB := capture.DecodeManifest(b)
	return errA == nil && errB == nil && x == y
}
