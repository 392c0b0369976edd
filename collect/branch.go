package collect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// BranchPlan is a branching plan. With -branch at=K,width=N every root
// episode that is still running after step K is checkpointed there (its
// replica, mid-episode) and continued Width times, each continuation a
// branch episode forked from the checkpoint with its policy continuing the
// parent's history. With -branch every=K,width=N,depth=D,max=M the
// branches do the same in turn: an episode at depth d (a root is at depth
// 0) that is still running after step (d+1)*K, with d < D, branches again,
// so a tree has up to D levels of branches, and no tree holds more than M
// episodes, its root and every branched parent included (see budgets). The
// zero value is no branching.
//
// A parent keeps its own steps once, as the prefix of its branches, with
// exit reason branched (it is not verified: it is not a trajectory); each
// branch keeps only its own steps, numbered from its branch step, and
// names its parent, that step and its index (see schemas.EpisodeRow). An
// episode that ends before its checkpoint step is an ordinary episode and
// has no branches.
type BranchPlan struct {
	At    int // the steps between checkpoints: the first is after step At
	Width int // branches per branch point
	// Depth is how many levels of branches a tree has at most (depth=D
	// of every=K); 0 is one level, the at=K plan.
	Depth int
	// Max bounds the episodes of one tree (every=K plans), root included;
	// 0 is no bound (at=K, whose trees are 1+Width episodes).
	Max int
	// tree is whether the plan was given as every=K (its String form).
	tree bool
}

// IsSet reports whether the plan branches.
func (b BranchPlan) IsSet() bool { return b.Width > 0 }

// String is the plan in the flag's form, "" for none.
func (b BranchPlan) String() string {
	switch {
	case !b.IsSet():
		return ""
	case b.tree:
		return fmt.Sprintf("every=%d,width=%d,depth=%d,max=%d", b.At, b.Width, b.Depth, b.Max)
	}
	return fmt.Sprintf("at=%d,width=%d", b.At, b.Width)
}

// Bounds of a branching plan. A GRPO group of 256 is past what trainers
// use (8 to 64 is common); a tree of 4,096 episodes is 64 roots' worth of
// such groups. Beyond them a typo (width=10000) would plan tens of
// thousands of episodes per root, so they are refused by name.
const (
	MaxBranchWidth = 256  // width=N: branches per branch point
	MaxTreeSize    = 4096 // max=M: episodes per tree, root included
)

// branchKeys are the keys -branch knows.
var branchKeys = []string{"at", "every", "width", "depth", "max"}

// ErrBranchUnsupported is wrapped by ParseBranchPlan for a branching plan
// forkline knows of but does not carry out (tree=...): it is refused by
// name rather than run as something else.
var ErrBranchUnsupported = errors.New("collect: branching plan not supported")

// ParseBranchPlan parses -branch: "at=K,width=N" (one level of branches at
// step K) or "every=K,width=N,depth=D,max=M" (a tree: a checkpoint every K
// steps, up to D levels, at most M episodes per tree), every number a
// whole number >= 1; "" is no branching.
func ParseBranchPlan(s string) (BranchPlan, error) {
	var b BranchPlan
	if strings.TrimSpace(s) == "" {
		return b, nil
	}
	seen := map[string]int{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "%q is not key=value (keys: %s)", part, strings.Join(branchKeys, ", "))
		}
		if k == "tree" {
			return BranchPlan{}, fielderr.Errorf("", "Branch", `"tree=..."`, "%w: a tree is given as every=K,width=N,depth=D,max=M", ErrBranchUnsupported)
		}
		if !slices.Contains(branchKeys, k) {
			return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "unknown key %q (keys: %s)", k, strings.Join(branchKeys, ", "))
		}
		if _, dup := seen[k]; dup {
			return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "%s given twice", k)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "%s must be a whole number >= 1, not %q", k, v)
		}
		seen[k] = n
	}
	if w, ok := seen["width"]; ok && w > MaxBranchWidth {
		return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "width=%d is more than %d branches per branch point", w, MaxBranchWidth)
	}
	if m, ok := seen["max"]; ok && m > MaxTreeSize {
		return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "max=%d is more than %d episodes per tree", m, MaxTreeSize)
	}
	_, at := seen["at"]
	_, every := seen["every"]
	switch {
	case at && every:
		return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "at and every exclude each other (at=K,width=N branches once; every=K,width=N,depth=D,max=M makes a tree)")
	case at:
		for _, k := range []string{"depth", "max"} {
			if _, ok := seen[k]; ok {
				return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "%s is for trees (every=K,width=N,depth=D,max=M); at=K branches once", k)
			}
		}
		if _, ok := seen["width"]; !ok {
			return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "width is missing (the form is at=K,width=N)")
		}
		return BranchPlan{At: seen["at"], Width: seen["width"]}, nil
	case every:
		for _, k := range []string{"width", "depth", "max"} {
			if _, ok := seen[k]; !ok {
				return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "%s is missing (the form is every=K,width=N,depth=D,max=M)", k)
			}
		}
		b = BranchPlan{At: seen["every"], Width: seen["width"], Depth: seen["depth"], Max: seen["max"], tree: true}
		if b.Max < 1+b.Width {
			return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "max=%d leaves no room for one branch point (a root and its %d branches are %d episodes)", b.Max, b.Width, 1+b.Width)
		}
		return b, nil
	}
	return BranchPlan{}, fielderr.Errorf("collect", "Branch", fmt.Sprintf("%q", s), "at or every is missing (the forms are at=K,width=N and every=K,width=N,depth=D,max=M)")
}

// reach checks the plan against the tasks' step limits: a root branches
// after step K only if its task lets it run past K. A plan no task can
// branch under is refused, naming each task's max_steps; the tasks that
// cannot are named in the returned warning when others can.
func (b BranchPlan) reach(specs []task.Spec) (warning string, err error) {
	if !b.IsSet() {
		return "", nil
	}
	var cannot []string
	for i := range specs {
		lim := specs[i].Limits.Runtime()
		if b.checkpointAt(lim, 0, b.rootBudget()) == 0 {
			max := lim.MaxSteps
			if max <= 0 {
				max = runtime.DefaultMaxSteps
			}
			cannot = append(cannot, fmt.Sprintf("%s (max_steps %d)", specs[i].ID, max))
		}
	}
	switch {
	case len(cannot) == 0:
		return "", nil
	case len(cannot) == len(specs):
		return "", fielderr.Errorf("collect", "Branch", b.String(), "no episode would branch: a root branches after step %d only if its task lets it run on, and every task ends by then: %s; give a K below the tasks' max_steps", b.At, strings.Join(cannot, ", "))
	}
	return fmt.Sprintf("branch plan %s: these tasks end by step %d, so their episodes never branch: %s", b, b.At, strings.Join(cannot, ", ")), nil
}

// levels is how many levels of branches a tree has at most.
func (b BranchPlan) levels() int { return max(b.Depth, 1) }

// checkpointAt is the step count after which an episode at depth of a task
// with limits lim is checkpointed, or 0 when it never is: no plan, the
// plan's depth reached, its tree's budget too small for another branch
// point, or the task's own step limit ends the episode at or before the
// checkpoint (there would be nothing left to continue).
func (b BranchPlan) checkpointAt(lim runtime.Limits, depth, budget int) int {
	if !b.IsSet() || depth >= b.levels() || (b.Max > 0 && budget-1 < b.Width) {
		return 0
	}
	max := lim.MaxSteps
	if max <= 0 {
		max = runtime.DefaultMaxSteps
	}
	at := (depth + 1) * b.At
	if at >= max {
		return 0
	}
	return at
}

// subtree is how many episodes the full subtree of an episode at depth
// holds (itself, and Width branches per level down to Depth), capped at
// Max so it cannot overflow.
func (b BranchPlan) subtree(depth int) int {
	total, level := 0, 1
	for d := depth; d <= b.levels(); d++ {
		total += level
		if total >= b.Max {
			return b.Max
		}
		level *= b.Width
	}
	return total
}

// budgets are the budgets of the Width branches of an episode at depth
// with budget (the episodes its subtree may hold, itself included), 0s for
// a plan without a bound. What is left after the parent and its branches
// goes to the branches in index order, each taking what its full subtree
// could use: a branch's budget depends only on its place in the tree,
// never on which episode reached its checkpoint first, so a resumed run,
// every part of a parted one and a run on another machine plan the same
// tree. At the bound, the branches without budget for a branch point of
// their own run to their end as leaves.
func (b BranchPlan) budgets(depth, budget int) []int {
	out := make([]int, b.Width)
	if b.Max == 0 {
		return out
	}
	left := budget - 1 - b.Width
	full := b.subtree(depth+1) - 1
	for i := range out {
		extra := min(left, full)
		out[i] = 1 + extra
		left -= extra
	}
	return out
}

// maxLive is the pool's bound on branch points live at once
// (pool.Config.MaxBranches), 0 for the pool's default. One level of
// branches needs the default, twice the replicas: a new root starts only
// when no branch waits, so each live branch point has a branch running or
// a root checkpointing. In a tree a branch point stays live while its
// branches branch in turn, so the bound is the trees that can be open at
// once (the same reasoning, plus one) times the branch points one tree may
// hold; a checkpoint refused at this bound would fail the run.
func (b BranchPlan) maxLive(replicas int) int {
	if b.levels() <= 1 {
		return 0
	}
	points, level := 0, 1
	for d := 0; d < b.Depth && points < (b.Max-1)/b.Width; d++ {
		points += level
		level *= b.Width
	}
	points = min(points, (b.Max-1)/b.Width)
	return (2*max(replicas, 1) + 1) * max(points, 1)
}

// rootBudget is the budget of a root's tree.
func (b BranchPlan) rootBudget() int { return b.Max }

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
	// depth is the branch's level in its tree (1 for a root's branches),
	// budget the episodes its subtree may hold (BranchPlan.budgets).
	depth, budget int
}

// node is where an episode stands in its tree: its depth (0 for a root)
// and its subtree's budget.
func (p *planned) node(plan BranchPlan) (depth, budget int) {
	switch {
	case p.branch != nil:
		return p.branch.depth, p.branch.budget
	case p.remake != nil:
		return p.remake.depth, p.remake.budget
	}
	return 0, plan.rootBudget()
}

// remakeJob is a branch point lost with its process (a resumed run whose
// episode — a root, or a branch of a tree — is kept, branched, but not all
// of its branches are): the episode's full recorded prefix (its ancestors'
// steps, then its own) re-executed in a fresh fork of the golden, checked,
// and checkpointed again for the missing branches.
type remakeJob struct {
	id       string            // the branched episode
	steps    []schemas.StepRow // from step 0
	prefixMS float64           // the recorded time of the whole prefix
	missing  []int             // branch indexes not kept
	// depth and budget are the branched episode's place in its tree.
	depth, budget int
	// source is set for a root of a -from run: the stored trajectory whose
	// first steps these are. Its remade root is committed (branched) before
	// its branches run; a resume's remake commits nothing, the root being
	// kept already.
	source string
}

// branchQueue holds the branch jobs made while the run goes, ahead of the
// plan: the feeder hands them out before the next root, so the branch
// points live at once stay bounded (by about the replicas; pool.Config's
// MaxBranches default is twice that, and trees get more: maxLive).
// pending counts the jobs handed out and not yet ended: any of them may
// still add branches (a root, a remake, in a tree a branch).
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

// branchJobs makes the jobs of the branches indexes of parent p, at
// depth, checkpointed after step, forked from b.
func (bp BranchPlan) branchJobs(p *planned, b *pool.Branch, tmpl *pool.Template, step int, indexes []int, h runtime.History, parent runtime.Policy, prefixMS float64) []pool.Job {
	depth, budget := p.node(bp)
	budgets := bp.budgets(depth, budget)
	jobs := make([]pool.Job, 0, len(indexes))
	for _, i := range indexes {
		bj := &planned{id: episode.BranchID(p.id, step, i), task: p.task, hash: p.hash, repeat: p.repeat,
			branch: &branchJob{parentID: p.id, step: step, index: i, history: h, parentPolicy: parent, prefixMS: prefixMS,
				depth: depth + 1, budget: budgets[i]}}
		jobs = append(jobs, pool.Job{Template: tmpl, Branch: b, Payload: bj})
	}
	return jobs
}

// missingBranches are the indexes of the branches of id at step not in
// kept.
func missingBranches(id string, step int, plan BranchPlan, kept map[string]bool) []int {
	var out []int
	for i := range plan.Width {
		if !kept[episode.BranchID(id, step, i)] {
			out = append(out, i)
		}
	}
	return out
}

// treeNode is where a kept episode of the run being resumed stands: its
// parent ("" for a root) and its branch index.
type treeNode struct {
	parent string
	index  int
}

// place walks from id up to its root and returns the root, id's depth and
// its subtree's budget under plan; ok is false when a parent is not kept
// (a broken tree, which the resume leaves alone).
func (p *priorRun) place(id string, plan BranchPlan) (root string, depth, budget int, ok bool) {
	var path []int // branch indexes, leaf first
	at := id
	for hops := 0; ; hops++ {
		n, kept := p.tree[at]
		if !kept || hops > len(p.tree) {
			return "", 0, 0, false
		}
		if n.parent == "" {
			break
		}
		path = append(path, n.index)
		at = n.parent
	}
	budget = plan.rootBudget()
	for d := len(path) - 1; d >= 0; d-- {
		bs := plan.budgets(len(path)-1-d, budget)
		if path[d] >= len(bs) {
			return "", 0, 0, false
		}
		budget = bs[path[d]]
	}
	return at, len(path), budget, true
}

// loadRemakes finds, in a resumed run, the branched episodes of the plan —
// roots and, in a tree, branches — whose branches are not all kept, and
// reads their full recorded prefixes (the ancestors' steps, then their
// own) so their branch points can be made again. The remakes are returned
// by root, in tree order (a parent before its descendants).
func (inv *invocation) loadRemakes(ctx context.Context, kept map[string]bool) (map[string][]*remakeJob, error) {
	if inv.prior == nil || len(inv.prior.branched) == 0 {
		return nil, nil
	}
	roots := map[string]bool{}
	for i := range inv.plan {
		roots[inv.plan[i].id] = true
	}
	type want struct {
		root          string
		depth, budget int
		missing       []int
	}
	wants := map[string]want{}
	need := map[string]bool{} // the wanted episodes and their ancestors
	for _, id := range slices.Sorted(maps.Keys(inv.prior.branched)) {
		if !kept[id] {
			continue
		}
		root, depth, budget, ok := inv.prior.place(id, inv.cfg.Branch)
		if !ok || !roots[root] {
			continue
		}
		m := missingBranches(id, (depth+1)*inv.cfg.Branch.At, inv.cfg.Branch, kept)
		if len(m) == 0 {
			continue
		}
		wants[id] = want{root: root, depth: depth, budget: budget, missing: m}
		for at := id; at != ""; at = inv.prior.tree[at].parent {
			need[at] = true
		}
	}
	if len(wants) == 0 {
		return nil, nil
	}
	ds, err := shard.Open(inv.cfg.Out)
	if err != nil {
		return nil, fielderr.Errorf("collect", "Resume", "", "reading the branch points to remake: %w", err)
	}
	own := map[string][]schemas.StepRow{}
	took := map[string]float64{}
	err = ds.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, _ []schemas.RewardRow) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if need[ep.EpisodeID] {
			own[ep.EpisodeID], took[ep.EpisodeID] = steps, ep.DurationMS
		}
		return nil
	})
	if err != nil {
		return nil, fielderr.Errorf("collect", "Resume", "", "reading the branch points to remake: %w", err)
	}
	out := map[string][]*remakeJob{}
	for _, id := range slices.Sorted(maps.Keys(wants)) {
		w := wants[id]
		var chain []string // id first, root last
		for at := id; at != ""; at = inv.prior.tree[at].parent {
			chain = append(chain, at)
		}
		r := &remakeJob{id: id, missing: w.missing, depth: w.depth, budget: w.budget}
		for i := len(chain) - 1; i >= 0; i-- {
			r.steps = append(r.steps, own[chain[i]]...)
			r.prefixMS += took[chain[i]]
		}
		out[w.root] = append(out[w.root], r)
	}
	for _, rs := range out {
		// A parent before its descendants, so the feed remakes the
		// shallower branch points first.
		slices.SortStableFunc(rs, func(a, b *remakeJob) int { return a.depth - b.depth })
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
