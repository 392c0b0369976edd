package shard

import (
	"errors"
	"fmt"
	"slices"

	"github.com/parquet-go/parquet-go"

	"github.com/forkline/forkline/schemas"
)

// exitBranched is the exit reason of an episode that was checkpointed and
// continued in branches (runtime.ExitBranched; this package knows rows, not
// the runtime).
const exitBranched = "branched"

// lineageRow is the part of an episode row the tree is read from.
type lineageRow struct {
	EpisodeID       string  `parquet:"episode_id"`
	ExitReason      string  `parquet:"exit_reason"`
	Steps           int32   `parquet:"steps"`
	ParentEpisodeID *string `parquet:"parent_episode_id,optional"`
	BranchStep      *int32  `parquet:"branch_step,optional"`
}

func (r lineageRow) parent() string {
	if r.ParentEpisodeID == nil {
		return ""
	}
	return *r.ParentEpisodeID
}

func (r lineageRow) first() int {
	if r.parent() == "" || r.BranchStep == nil {
		return 0
	}
	return int(*r.BranchStep)
}

// readLineageColumns reads the lineage columns of one episodes shard
// column-wise (readFlatColumns) and hands each row to add, in the file's
// order; errNotFlat when the shard's columns have another shape.
func readLineageColumns(src *source, s ShardInfo, add func(lineageRow)) error {
	var rows []lineageRow
	cols := []flatColumn{
		{"episode_id", parquet.ByteArray, func(i int, v parquet.Value) { rows[i].EpisodeID = string(v.ByteArray()) }},
		{"exit_reason", parquet.ByteArray, func(i int, v parquet.Value) { rows[i].ExitReason = string(v.ByteArray()) }},
		{"steps", parquet.Int32, func(i int, v parquet.Value) { rows[i].Steps = v.Int32() }},
		{"parent_episode_id", parquet.ByteArray, func(i int, v parquet.Value) {
			if !v.IsNull() {
				p := string(v.ByteArray())
				rows[i].ParentEpisodeID = &p
			}
		}},
		{"branch_step", parquet.Int32, func(i int, v parquet.Value) {
			if !v.IsNull() {
				b := v.Int32()
				rows[i].BranchStep = &b
			}
		}},
	}
	start := func(n int) error {
		rows = slices.Grow(rows[:0], n)[:n]
		clear(rows)
		return nil
	}
	done := func() error {
		for _, r := range rows {
			add(r)
		}
		return nil
	}
	return readFlatColumns(src, s, cols, start, done)
}

// lineage is the dataset's tree of episodes, read from the episodes table
// alone. It holds an entry for each episode of a tree — one that branched,
// one that branches from another, one another branches from — and counts
// the others: a root that nobody branched from is a trajectory on its own,
// and an entry for each of them (about half a kilobyte with the map's
// share) was most of an export's memory at a million episodes, and of its
// garbage collector's work. Tree, for the few readers that need every
// episode, reads them all again.
type lineage struct {
	nodes        map[string]*lineageNode
	episodes     int // every episode of the dataset
	trajectories int // the episodes that did not branch
}

type lineageNode struct {
	parent   string
	first    int // the step its own steps start at
	steps    int // its own steps
	children int
	branched bool // its exit reason is branched
	// descendants is how many trajectories descend from it, itself not
	// counted: while above zero, its steps are a prefix still needed.
	descendants int
}

// trajectory reports whether the episode is handed out by EachTrajectory:
// it did not branch. (An episode that branched but whose branches are not
// in the dataset — a run stopped between the two — is a prefix with
// nothing to continue it, and is left out too.) A parent that was
// checkpointed and went on (a served session whose trainer branched it
// over the wire) did not branch: it is a trajectory, and the first steps
// of it are also its branches' prefix.
func (n *lineageNode) trajectory() bool { return !n.branched }

// readLineage reads the tree and checks it: every parent is in the
// dataset, a branch starts where its branched parent ends (or within the
// own steps of a parent that went on), and no episode is its own ancestor. A tree that breaks these is ErrCorrupt.
func (d *Dataset) readLineage() (*lineage, error) {
	d.lineageOnce.Do(func() { d.lineage, d.lineageErr = d.loadLineage(false) })
	return d.lineage, d.lineageErr
}

// eachLineageRow hands every episode's lineage row to add, shard by shard.
func (d *Dataset) eachLineageRow(add func(lineageRow)) error {
	for _, s := range d.Shards(schemas.TableEpisodes) {
		err := readLineageColumns(d.src, s, add)
		if errors.Is(err, errNotFlat) {
			for r, rerr := range readShard[lineageRow](d.src, s, readBatchKeys) {
				if rerr != nil {
					return rerr
				}
				add(r)
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// loadLineage reads the tree: with all, an entry for every episode;
// without, for the episodes of trees only (see lineage), which takes a
// second read of the lineage columns when a parent that did not branch
// (one that went on after its checkpoint) is met before it is known to be
// one.
func (d *Dataset) loadLineage(all bool) (*lineage, error) {
	l := &lineage{nodes: map[string]*lineageNode{}}
	node := func(r lineageRow) *lineageNode {
		return &lineageNode{parent: r.parent(), first: r.first(), steps: int(r.Steps), branched: r.ExitReason == exitBranched}
	}
	parents := map[string]bool{} // parents not held yet
	err := d.eachLineageRow(func(r lineageRow) {
		l.episodes++
		if r.ExitReason != exitBranched {
			l.trajectories++
		}
		if !all && r.parent() == "" && r.ExitReason != exitBranched && !parents[r.EpisodeID] {
			return
		}
		l.nodes[r.EpisodeID] = node(r)
		delete(parents, r.EpisodeID)
		if p := r.parent(); p != "" && l.nodes[p] == nil {
			parents[p] = true
		}
	})
	if err != nil {
		return nil, err
	}
	if len(parents) > 0 {
		// Parents read before their branches were: read them now. One not
		// found is refused below as missing.
		err := d.eachLineageRow(func(r lineageRow) {
			if parents[r.EpisodeID] && l.nodes[r.EpisodeID] == nil {
				l.nodes[r.EpisodeID] = node(r)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	for id, n := range l.nodes {
		if n.parent == "" {
			continue
		}
		p, ok := l.nodes[n.parent]
		if !ok {
			return nil, fmt.Errorf("%w: episode %q branches from %q, which the dataset does not hold", ErrCorrupt, id, n.parent)
		}
		// A branched parent ends where its branches start; a parent that
		// went on after its checkpoint holds the branch step among its own
		// steps.
		end := p.first + p.steps
		if p.branched && n.first != end {
			return nil, fmt.Errorf("%w: episode %q branches at step %d, but its parent %q ends after step %d", ErrCorrupt, id, n.first, n.parent, end)
		}
		if !p.branched && (n.first <= p.first || n.first > end) {
			return nil, fmt.Errorf("%w: episode %q branches at step %d, but its parent %q holds steps %d..%d", ErrCorrupt, id, n.first, n.parent, p.first, end-1)
		}
		p.children++
	}
	for id, n := range l.nodes {
		if !n.trajectory() {
			continue
		}
		// Each trajectory counts once in every ancestor; a walk longer
		// than the dataset is a cycle.
		at, hops := n.parent, 0
		for at != "" {
			if hops++; hops > len(l.nodes) {
				return nil, fmt.Errorf("%w: episode %q is its own ancestor", ErrCorrupt, id)
			}
			node := l.nodes[at]
			node.descendants++
			at = node.parent
		}
	}
	return l, nil
}

// EachTrajectory calls fn for every trajectory of the dataset — every
// episode that did not branch — with its full steps, in step order from
// step 0, and its own rewards. A root episode's full steps are its own; a
// branch episode's are the prefix its ancestors hold (root first) and then
// its own (so len(steps) is the row's branch_step + steps). Episodes that
// branched are not handed out: they are prefixes, and their branches carry
// them. A parent that went on after its checkpoint (exit reason other than
// branched) is a trajectory of its own, handed out whole, and its branches
// get only its steps before their branch step. The row is the stored one, lineage columns included; every step
// row handed out carries the trajectory's episode_id, the prefix's too.
//
// It reads the episodes table once to learn the tree, then the episodes
// with their steps as EachEpisode does, generation by generation, holding
// a prefix's steps only until the last trajectory below it is handed out.
// A collector commits a parent before its branches, so a prefix is always
// met before the branches that need it; a branch met before one of its
// ancestors (a dataset rewritten in another order) is held until that
// ancestor is read. A tree whose parents are missing, whose branches do
// not start where their parent ends, or that loops is ErrCorrupt. It stops
// at the first error, fn's included, and returns it.
func (d *Dataset) EachTrajectory(fn func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error) error {
	l, err := d.readLineage()
	if err != nil {
		return err
	}
	j := &joiner{l: l, prefixes: map[string][]schemas.StepRow{}, waiting: map[string][]heldEpisode{}, served: map[string]int{}, fn: fn}
	if err := d.EachEpisode(j.episode); err != nil {
		return err
	}
	for at, held := range j.waiting {
		return fmt.Errorf("%w: episode %q waits for the steps of its ancestor %q, which were never read", ErrCorrupt, held[0].ep.EpisodeID, at)
	}
	return nil
}

// heldEpisode is a trajectory waiting for an ancestor's prefix.
type heldEpisode struct {
	ep      schemas.EpisodeRow
	steps   []schemas.StepRow
	rewards []schemas.RewardRow
}

// joiner joins trajectories with their prefixes as EachEpisode meets
// episodes.
type joiner struct {
	l        *lineage
	prefixes map[string][]schemas.StepRow // own steps of ancestors still needed
	waiting  map[string][]heldEpisode     // trajectories by the ancestor they wait for
	// served counts, per ancestor, the trajectories handed out with its
	// prefix (the lineage is shared and read-only: Dataset keeps it).
	served map[string]int
	fn     func(schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) error
}

func (j *joiner) episode(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
	n := j.l.nodes[ep.EpisodeID]
	if n == nil {
		// Not in a tree: a root nobody branched from, a trajectory whole.
		if (ep.ParentEpisodeID != nil && *ep.ParentEpisodeID != "") || ep.ExitReason == exitBranched {
			return fmt.Errorf("%w: episode %q appeared while the dataset was read", ErrCorrupt, ep.EpisodeID)
		}
		return j.fn(ep, steps, rewards)
	}
	if n.descendants > 0 {
		// A clone: a parent that is a trajectory too is handed to fn, which
		// may change its rows.
		j.prefixes[ep.EpisodeID] = slices.Clone(steps)
		held := j.waiting[ep.EpisodeID]
		delete(j.waiting, ep.EpisodeID)
		for _, h := range held {
			if err := j.trajectory(h); err != nil {
				return err
			}
		}
	}
	if !n.trajectory() {
		return nil
	}
	return j.trajectory(heldEpisode{ep, steps, rewards})
}

// trajectory hands out h with its prefix, or holds it until the first
// ancestor not read yet is.
func (j *joiner) trajectory(h heldEpisode) error {
	var chain []string // ancestors, parent first
	for at := j.l.nodes[h.ep.EpisodeID].parent; at != ""; at = j.l.nodes[at].parent {
		if _, ok := j.prefixes[at]; !ok {
			j.waiting[at] = append(j.waiting[at], h)
			return nil
		}
		chain = append(chain, at)
	}
	if len(chain) == 0 {
		return j.fn(h.ep, h.steps, h.rewards)
	}
	// Of each ancestor, the steps before the point where the path down
	// leaves it: all of a branched one's, the first ones of a parent that
	// went on after its checkpoint.
	full := make([]schemas.StepRow, 0, j.l.nodes[h.ep.EpisodeID].first+len(h.steps))
	for i := len(chain) - 1; i >= 0; i-- {
		a, next := j.l.nodes[chain[i]], h.ep.EpisodeID
		if i > 0 {
			next = chain[i-1]
		}
		n := j.l.nodes[next].first - a.first
		if n < 0 || n > len(j.prefixes[chain[i]]) {
			return fmt.Errorf("%w: episode %q: its ancestor %q holds %d steps, not the %d it inherits", ErrCorrupt, h.ep.EpisodeID, chain[i], len(j.prefixes[chain[i]]), n)
		}
		full = append(full, j.prefixes[chain[i]][:n]...)
	}
	full = append(full, h.steps...)
	for i := range full {
		// The joined rows are the trajectory's: a step-level reader (the
		// hf step rows) must not label a branch's prefix as its parent's.
		full[i].EpisodeID = h.ep.EpisodeID
		if int(full[i].StepIndex) != i {
			return fmt.Errorf("%w: episode %q: joined step %d has step_index %d", ErrCorrupt, h.ep.EpisodeID, i, full[i].StepIndex)
		}
	}
	if err := j.fn(h.ep, full, h.rewards); err != nil {
		return err
	}
	for _, a := range chain {
		if j.served[a]++; j.served[a] == j.l.nodes[a].descendants {
			delete(j.prefixes, a)
			delete(j.served, a)
		}
	}
	return nil
}

// Lineage is one episode's place in its tree, as the episodes table
// records it.
type Lineage struct {
	EpisodeID string
	Parent    string // "" for a root
	// FirstStep is where its own steps start (its branch step; 0 for a
	// root), Steps how many it has.
	FirstStep, Steps int
	Children         int  // branches of it in the dataset
	Branched         bool // its exit reason is branched
}

// Tree returns every episode's lineage, keyed by episode id, reading the
// episodes table only; it refuses a broken tree as EachTrajectory does. It
// holds an entry per episode: a reader that needs only the trees' shape
// asks Forest.
func (d *Dataset) Tree() (map[string]Lineage, error) {
	l, err := d.loadLineage(true)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Lineage, len(l.nodes))
	for id, n := range l.nodes {
		out[id] = Lineage{EpisodeID: id, Parent: n.parent, FirstStep: n.first, Steps: n.steps, Children: n.children, Branched: n.branched}
	}
	return out, nil
}

// Forest is the shape of a dataset's trees without an entry per episode.
type Forest struct {
	Episodes     int // every episode
	Trajectories int // the episodes that did not branch (EachTrajectory hands these out)
	// Roots maps every branch episode (one with a parent) to the root of
	// its tree.
	Roots map[string]string
}

// Forest returns the shape of the dataset's trees, refusing a broken tree
// as EachTrajectory does; its memory is that of the episodes in trees.
func (d *Dataset) Forest() (Forest, error) {
	l, err := d.readLineage()
	if err != nil {
		return Forest{}, err
	}
	f := Forest{Episodes: l.episodes, Trajectories: l.trajectories, Roots: map[string]string{}}
	for id, n := range l.nodes {
		if n.parent == "" {
			continue
		}
		at := n.parent
		for l.nodes[at].parent != "" {
			at = l.nodes[at].parent
		}
		f.Roots[id] = at
	}
	return f, nil
}
