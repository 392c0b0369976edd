package collect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// BranchPlan is a branching plan (-branch at=K,width=N): every root episode
// that is still running after step K is checkpointed there (its replica,
// mid-episode) and continued Width times, each continuation a branch
// episode forked from the checkpoint with its policy continuing the
// parent's history. The zero value is no branching.
//
// The parent keeps its K steps once, as the prefix, with exit reason
// branched (it is not verified: it is not a trajectory); each branch keeps
// only its own steps, numbered from K, and names its parent, K and its
// index (see schemas.EpisodeRow). A root that ends before step K is an
// ordinary episode and has no branches.
type BranchPlan struct {
	At    int // the step count after which roots are checkpointed
	Width int // branches per branch point
}

// IsSet reports whether the plan branches.
func (b BranchPlan) IsSet() bool { return b.Width > 0 }

// String is the plan in the flag's form, "" for none.
func (b BranchPlan) String() string {
	if !b.IsSet() {
		return ""
	}
	return fmt.Sprintf("at=%d,width=%d", b.At, b.Width)
}

// branchKeys are the keys -branch knows.
var branchKeys = []string{"at", "width"}

// ErrBranchUnsupported is wrapped by ParseBranchPlan for a branching plan
// forkline knows of but does not carry out yet (tree=...): it is refused by
// name rather than run as something else.
var ErrBranchUnsupported = errors.New("collect: branching plan not supported yet")

// ParseBranchPlan parses -branch: "at=K,width=N" with K >= 1 and N >= 1;
// "" is no branching.
func ParseBranchPlan(s string) (BranchPlan, error) {
	var b BranchPlan
	if strings.TrimSpace(s) == "" {
		return b, nil
	}
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return BranchPlan{}, fmt.Errorf("collect: -branch %q: %q is not key=value (keys: %s)", s, part, strings.Join(branchKeys, ", "))
		}
		if k == "tree" || k == "depth" || k == "every" || k == "max" {
			return BranchPlan{}, fmt.Errorf("%w: -branch %s=...: tree plans (checkpoint every K steps to a depth) are not carried out by this version; use -branch at=K,width=N", ErrBranchUnsupported, k)
		}
		if !slices.Contains(branchKeys, k) {
			return BranchPlan{}, fmt.Errorf("collect: -branch %q: unknown key %q (keys: %s)", s, k, strings.Join(branchKeys, ", "))
		}
		if seen[k] {
			return BranchPlan{}, fmt.Errorf("collect: -branch %q: %s given twice", s, k)
		}
		seen[k] = true
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return BranchPlan{}, fmt.Errorf("collect: -branch %q: %s must be a whole number >= 1, not %q", s, k, v)
		}
		switch k {
		case "at":
			b.At = n
		case "width":
			b.Width = n
		}
	}
	for _, k := range branchKeys {
		if !seen[k] {
			return BranchPlan{}, fmt.Errorf("collect: -branch %q: %s is missing (the form is at=K,width=N)", s, k)
		}
	}
	return b, nil
}

// branchAt is the step count after which a root of t is checkpointed, or
// 0 when it never is: no plan, or the task's own step limit ends its
// episodes at or before the branch step (there would be nothing left to
// continue).
func (b BranchPlan) branchAt(lim runtime.Limits) int {
	if !b.IsSet() {
		return 0
	}
	max := lim.MaxSteps
	if max <= 0 {
		max = runtime.DefaultMaxSteps
	}
	if b.At >= max {
		return 0
	}
	return b.At
}

// branchJob is what a branch episode needs beyond its planned entry: where
// it comes from and what it continues.
type branchJob struct {
	parentID string
	step     int
	index    int
	history  runtime.History // the parent's instruction and its steps
	// parentPolicy is the live policy that decided history, nil when the
	// branch point was remade from the record (a resumed run).
	parentPolicy runtime.Policy
	prefixMS     float64 // how long the prefix took
}

// remakeJob is a branch point lost with its process (a resumed run whose
// root is kept, branched, but not all of its branches are): the root's
// recorded steps re-executed in a fresh fork of the golden, checked, and
// checkpointed again for the missing branches.
type remakeJob struct {
	steps    []schemas.StepRow
	prefixMS float64
	missing  []int // branch indexes not kept
}

// branchQueue holds the branch jobs made while the run goes, ahead of the
// plan: the feeder hands them out before the next root, so the branch
// points live at once stay bounded (by about the replicas; pool.Config's
// MaxBranches default is twice that). pending counts the jobs handed out
// that may still add branches (roots and remakes not yet ended).
type branchQueue struct {
	mu      sync.Mutex
	jobs    []pool.Job
	pending int
	wake    chan struct{}
}

func newBranchQueue() *branchQueue { return &branchQueue{wake: make(chan struct{}, 1)} }

func (q *branchQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *branchQueue) push(jobs ...pool.Job) {
	q.mu.Lock()
	q.jobs = append(q.jobs, jobs...)
	q.mu.Unlock()
	q.signal()
}

func (q *branchQueue) pop() (pool.Job, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.jobs) == 0 {
		return pool.Job{}, false
	}
	j := q.jobs[0]
	q.jobs = q.jobs[1:]
	return j, true
}

func (q *branchQueue) started() {
	q.mu.Lock()
	q.pending++
	q.mu.Unlock()
}

// ended is called once for every job started counted, after it pushed its
// branches (if any).
func (q *branchQueue) ended() {
	q.mu.Lock()
	q.pending--
	q.mu.Unlock()
	q.signal()
}

func (q *branchQueue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending == 0 && len(q.jobs) == 0
}

// branchJobs makes the jobs of the branches indexes of parent p at step,
// forked from b.
func branchJobs(p *planned, b *pool.Branch, tmpl *pool.Template, step int, indexes []int, h runtime.History, parent runtime.Policy, prefixMS float64) []pool.Job {
	jobs := make([]pool.Job, 0, len(indexes))
	for _, i := range indexes {
		bp := &planned{id: episode.BranchID(p.id, step, i), task: p.task, hash: p.hash, repeat: p.repeat,
			branch: &branchJob{parentID: p.id, step: step, index: i, history: h, parentPolicy: parent, prefixMS: prefixMS}}
		jobs = append(jobs, pool.Job{Template: tmpl, Branch: b, Payload: bp})
	}
	return jobs
}

// missingBranches are the indexes of the branches of root id at step not
// in kept.
func missingBranches(id string, plan BranchPlan, kept map[string]bool) []int {
	var out []int
	for i := range plan.Width {
		if !kept[episode.BranchID(id, plan.At, i)] {
			out = append(out, i)
		}
	}
	return out
}

// loadRemakes finds, in a resumed run, the branched roots of the plan whose
// branches are not all kept, and reads their recorded steps so their branch
// points can be made again.
func (inv *invocation) loadRemakes(ctx context.Context, kept map[string]bool) (map[string]*remakeJob, error) {
	if inv.prior == nil || len(inv.prior.branched) == 0 {
		return nil, nil
	}
	want := map[string][]int{}
	for i := range inv.plan {
		id := inv.plan[i].id
		if !inv.prior.branched[id] || !kept[id] {
			continue
		}
		if m := missingBranches(id, inv.cfg.Branch, kept); len(m) > 0 {
			want[id] = m
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	ds, err := shard.Open(inv.cfg.Out)
	if err != nil {
		return nil, fmt.Errorf("collect: --resume: reading the branch points to remake: %w", err)
	}
	out := map[string]*remakeJob{}
	err = ds.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, _ []schemas.RewardRow) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if m, ok := want[ep.EpisodeID]; ok {
			out[ep.EpisodeID] = &remakeJob{steps: steps, prefixMS: ep.DurationMS, missing: m}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("collect: --resume: reading the branch points to remake: %w", err)
	}
	return out, nil
}

// prefixSink keeps the steps of a rollout, for the branches that continue
// it.
type prefixSink struct{ steps []runtime.Step }

func (s *prefixSink) WriteStep(_ context.Context, st runtime.Step) error {
	s.steps = append(s.steps, st)
	return nil
}
