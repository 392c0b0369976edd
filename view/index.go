package view

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// The episode list answers from an index of the episodes' summary
// columns, read once per episodes shard (only those columns, column by
// column, with the rewards shard of the same generation for the episode
// reward) and kept keyed by the shard's sha256: a shard listed in the
// manifest is closed and never changes, so its part of the index stays
// valid while a running collection adds generations, and only the new
// shards are read when the list is asked again. Filters (export.Filter,
// the selection export and inspect -list apply), sorting and paging run
// over the index in memory. Text in the steps is found by reading only
// the steps shards' episode_id, action_json, output and model_text
// columns, shards in parallel, and the answer (one bit per episode) is
// kept for the last textCache texts.
//
// Memory bound: an indexed episode costs unsafe.Sizeof(entry{}) bytes
// (EntryBytes: 112 on 64-bit platforms) plus its episode id's allocation (and
// its parent's id for a branch), each string column other than the ids
// held once per distinct value: about 160 bytes an episode with
// 36-character ids — 16 MB at 100,000 episodes, 160 MB at 1,000,000. A
// text answer is 1 bit an episode (12.5 KB at 100,000), textCache of them
// at most. While a shard is indexed, its row groups' columns are held
// (one shard at a time per core).

// EntryBytes is the fixed size of one indexed episode (its ids' bytes
// come on top).
const EntryBytes = int(unsafe.Sizeof(entry{}))

// textCache is how many text searches' answers an index keeps.
const textCache = 16

// Dictionary-coded string columns of an entry: the columns export.Where
// can test that repeat across episodes.
const (
	colTask = iota
	colExit
	colRunID
	colTaskHash
	colProvider
	colGolden
	colResetStrategy
	colResetOrigin
	nDict
)

var dictNames = [nDict]string{"task_id", "exit_reason", "run_id", "task_hash", "provider", "golden_id", "reset_strategy", "reset_origin"}

// entry is one indexed episode.
type entry struct {
	id, parent  string
	code        [nDict]uint32
	repeat      int32
	steps       int32
	tokenTurns  int32
	branchStep  int32
	durationMS  float64
	resetMS     float64
	reward      float64
	hasReward   bool
	drift       bool
	hasBranchAt bool
}

// segment is the index of one episodes shard.
type segment struct {
	gen     int
	sha     string
	entries []entry
}

// dict interns the values of one string column.
type dict struct {
	code   map[string]uint32
	values []string
}

func (d *dict) intern(b []byte) uint32 {
	if c, ok := d.code[string(b)]; ok {
		return c
	}
	s := string(b)
	c := uint32(len(d.values))
	d.code[s] = c
	d.values = append(d.values, s)
	return c
}

// index is a run's episode index.
type index struct {
	mu    sync.Mutex
	dicts [nDict]*dict
	segs  map[string]*segment // by the episodes shard's sha256
	order []*segment          // the dataset's order
	// text answers, most recent last
	texts []textAnswer
	// version changes whenever order does (text answers are for one)
	version int
}

type textAnswer struct {
	text    string
	version int
	bits    []uint64
}

func newIndex() *index {
	x := &index{segs: map[string]*segment{}}
	for i := range x.dicts {
		x.dicts[i] = &dict{code: map[string]uint32{}}
	}
	return x
}

// update brings the index to ds's listed shards: a shard already indexed
// (same sha256) is kept, a new one read, shards in parallel. Callers hold
// x.mu.
func (x *index) update(ctx context.Context, ds *shard.Dataset, reward string) error {
	eps := ds.Shards(schemas.TableEpisodes)
	rewards := map[int]shard.ShardInfo{}
	for _, s := range ds.Shards(schemas.TableRewards) {
		rewards[s.Generation] = s
	}
	order := make([]*segment, len(eps))
	var todo []int
	for i, s := range eps {
		if seg, ok := x.segs[s.SHA256]; ok {
			order[i] = seg
		} else {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 && len(order) == len(x.order) {
		return nil
	}
	var dmu sync.Mutex // guards the dictionaries while shards are read in parallel
	err := parallel(ctx, len(todo), func(k int) error {
		s := eps[todo[k]]
		seg, err := readSegment(ds, s, rewards, reward, x.dicts, &dmu)
		if err != nil {
			return err
		}
		order[todo[k]] = seg
		return nil
	})
	if err != nil {
		return err
	}
	for _, i := range todo {
		x.segs[eps[i].SHA256] = order[i]
	}
	x.order = order
	x.version++
	return nil
}

// generation returns the generation of the episode id (exactly), reading
// new shards into the index first; ok is false when no listed episode has
// that id.
func (x *index) generation(ctx context.Context, ds *shard.Dataset, reward, id string) (gen int, ok bool, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.update(ctx, ds, reward); err != nil {
		return 0, false, err
	}
	for _, seg := range x.order {
		for i := range seg.entries {
			if seg.entries[i].id == id {
				return seg.gen, true, nil
			}
		}
	}
	return 0, false, nil
}

// parallel runs fn(0..n-1) on GOMAXPROCS goroutines and returns the first
// error; the rest stop at their next item.
func parallel(ctx context.Context, n int, fn func(int) error) error {
	workers := min(runtime.GOMAXPROCS(0), n)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		next  int
		first error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if first == nil {
					first = ctx.Err()
				}
				i := next
				next++
				stop := first != nil || i >= n
				mu.Unlock()
				if stop {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// rewardOf is the first episode-level reward row named name of an
// episode: export.Filter.EpisodeReward's rule (the first such row counts,
// its value null or not).
type rewardOf struct {
	value float64
	has   bool
}

// readSegment indexes the episodes shard s, with the episode-level reward
// named reward from the same generation's rewards shard.
func readSegment(ds *shard.Dataset, s shard.ShardInfo, rewards map[int]shard.ShardInfo, reward string, dicts [nDict]*dict, dmu *sync.Mutex) (*segment, error) {
	byID := map[string]rewardOf{}
	if rs, ok := rewards[s.Generation]; ok {
		if err := readRewards(ds, rs, reward, byID); err != nil {
			return nil, err
		}
	}
	seg := &segment{gen: s.Generation, sha: s.SHA256, entries: make([]entry, 0, s.Rows)}
	var rows []entry
	var codes [nDict][][]byte
	str := func(col string, set func(i int, v string)) shard.Column {
		return shard.StringColumn(col, func(i int, v []byte, null bool) {
			if !null {
				set(i, string(v))
			}
		})
	}
	cols := []shard.Column{
		str("episode_id", func(i int, v string) { rows[i].id = v }),
		str("parent_episode_id", func(i int, v string) { rows[i].parent = v }),
		shard.Int32Column("repeat", func(i int, v int32, _ bool) { rows[i].repeat = v }),
		shard.Int32Column("steps", func(i int, v int32, _ bool) { rows[i].steps = v }),
		shard.Int32Column("token_turns", func(i int, v int32, _ bool) { rows[i].tokenTurns = v }),
		shard.Int32Column("branch_step", func(i int, v int32, null bool) { rows[i].branchStep, rows[i].hasBranchAt = v, !null }),
		shard.Float64Column("duration_ms", func(i int, v float64, _ bool) { rows[i].durationMS = v }),
		shard.Float64Column("reset_ms", func(i int, v float64, _ bool) { rows[i].resetMS = v }),
		shard.BoolColumn("token_drift", func(i int, v bool, _ bool) { rows[i].drift = v }),
	}
	for c := range nDict {
		cols = append(cols, shard.StringColumn(dictNames[c], func(i int, v []byte, _ bool) {
			codes[c][i] = append(codes[c][i][:0], v...)
		}))
	}
	start := func(n int) error {
		rows = make([]entry, n)
		for c := range codes {
			if cap(codes[c]) < n {
				codes[c] = make([][]byte, n)
			}
			codes[c] = codes[c][:n]
			for i := range codes[c] {
				codes[c][i] = codes[c][i][:0]
			}
		}
		return nil
	}
	done := func() error {
		dmu.Lock()
		for c := range nDict {
			for i := range rows {
				rows[i].code[c] = dicts[c].intern(codes[c][i])
			}
		}
		dmu.Unlock()
		for i := range rows {
			if r, ok := byID[rows[i].id]; ok && r.has {
				rows[i].reward, rows[i].hasReward = r.value, true
			}
		}
		seg.entries = append(seg.entries, rows...)
		return nil
	}
	err := ds.ReadColumns(s, cols, start, done)
	if errors.Is(err, shard.ErrNotFlat) {
		seg.entries = seg.entries[:0]
		err = projectSegment(ds, s, byID, seg, dicts, dmu)
	}
	if err != nil {
		return nil, err
	}
	return seg, nil
}

// projectSegment is readSegment for a shard whose columns are not flat
// (an older layout): the row reader, which converts.
func projectSegment(ds *shard.Dataset, s shard.ShardInfo, byID map[string]rewardOf, seg *segment, dicts [nDict]*dict, dmu *sync.Mutex) error {
	for ep, err := range shard.ProjectShard[indexCols](ds, s) {
		if err != nil {
			return err
		}
		e := entry{id: ep.EpisodeID, repeat: ep.Repeat, steps: ep.Steps, tokenTurns: ep.TokenTurns, durationMS: ep.DurationMS,
			resetMS: ep.ResetMS, drift: ep.TokenDrift}
		if ep.ParentEpisodeID != nil {
			e.parent = *ep.ParentEpisodeID
		}
		if ep.BranchStep != nil {
			e.branchStep, e.hasBranchAt = *ep.BranchStep, true
		}
		if r, ok := byID[e.id]; ok && r.has {
			e.reward, e.hasReward = r.value, true
		}
		dmu.Lock()
		for c, v := range [nDict]string{ep.TaskID, ep.ExitReason, ep.RunID, ep.TaskHash, ep.Provider, ep.GoldenID, ep.ResetStrategy, ep.ResetOrigin} {
			e.code[c] = dicts[c].intern([]byte(v))
		}
		dmu.Unlock()
		seg.entries = append(seg.entries, e)
	}
	return nil
}

type indexCols struct {
	EpisodeID       string  `parquet:"episode_id"`
	RunID           string  `parquet:"run_id"`
	TaskID          string  `parquet:"task_id"`
	TaskHash        string  `parquet:"task_hash"`
	Repeat          int32   `parquet:"repeat"`
	Provider        string  `parquet:"provider"`
	GoldenID        string  `parquet:"golden_id"`
	ResetStrategy   string  `parquet:"reset_strategy"`
	ResetOrigin     string  `parquet:"reset_origin"`
	ExitReason      string  `parquet:"exit_reason"`
	Steps           int32   `parquet:"steps"`
	DurationMS      float64 `parquet:"duration_ms"`
	ResetMS         float64 `parquet:"reset_ms"`
	TokenDrift      bool    `parquet:"token_drift"`
	TokenTurns      int32   `parquet:"token_turns"`
	ParentEpisodeID *string `parquet:"parent_episode_id,optional"`
	BranchStep      *int32  `parquet:"branch_step,optional"`
}

// readRewards records in byID, for each episode of the rewards shard s,
// its first episode-level row named name.
func readRewards(ds *shard.Dataset, s shard.ShardInfo, name string, byID map[string]rewardOf) error {
	type row struct {
		id, name string
		episode  bool
		value    float64
		null     bool
	}
	var rows []row
	cols := []shard.Column{
		shard.StringColumn("episode_id", func(i int, v []byte, _ bool) { rows[i].id = string(v) }),
		shard.Int32Column("step_index", func(i int, _ int32, null bool) { rows[i].episode = null }),
		shard.StringColumn("name", func(i int, v []byte, _ bool) {
			if string(v) == name {
				rows[i].name = name
			}
		}),
		shard.Float64Column("value", func(i int, v float64, null bool) { rows[i].value, rows[i].null = v, null }),
	}
	start := func(n int) error { rows = make([]row, n); return nil }
	done := func() error {
		for _, r := range rows {
			if r.episode && r.name == name {
				if _, seen := byID[r.id]; !seen {
					byID[r.id] = rewardOf{value: r.value, has: !r.null}
				}
			}
		}
		return nil
	}
	err := ds.ReadColumns(s, cols, start, done)
	if errors.Is(err, shard.ErrNotFlat) {
		for r, err := range shard.ProjectShard[rewardCols](ds, s) {
			if err != nil {
				return err
			}
			if r.StepIndex == nil && r.Name == name {
				if _, seen := byID[r.EpisodeID]; !seen {
					o := rewardOf{has: r.Value != nil}
					if r.Value != nil {
						o.value = *r.Value
					}
					byID[r.EpisodeID] = o
				}
			}
		}
		return nil
	}
	return err
}

// cachedText is the kept answer for text over the index as it is, or
// nil. Callers hold x.mu.
func (x *index) cachedText(text string) []uint64 {
	for i, a := range x.texts {
		if a.text == text && a.version == x.version {
			x.texts = append(append(x.texts[:i:i], x.texts[i+1:]...), a)
			return a.bits
		}
	}
	return nil
}

// keepText keeps the answer bits for text over the index at version.
// Callers hold x.mu.
func (x *index) keepText(text string, version int, bits []uint64) {
	x.texts = append(x.texts, textAnswer{text: text, version: version, bits: bits})
	if len(x.texts) > textCache {
		x.texts = x.texts[1:]
	}
}

// scanText answers which episodes of order hold text (lower case) in a
// step's action, output or model text: one bit per episode in order's
// order. It reads only segments' ids, which never change, so it runs
// without x.mu (a list asked meanwhile is not held up).
func scanText(ctx context.Context, ds *shard.Dataset, order []*segment, text string) ([]uint64, error) {
	steps := map[int]shard.ShardInfo{}
	for _, s := range ds.Shards(schemas.TableSteps) {
		steps[s.Generation] = s
	}
	base := make([]int, len(order))
	n := 0
	for i, s := range order {
		base[i] = n
		n += len(s.entries)
	}
	bits := make([]uint64, (n+63)/64)
	var bmu sync.Mutex
	needle := []byte(text)
	err := parallel(ctx, len(order), func(k int) error {
		seg := order[k]
		s, ok := steps[seg.gen]
		if !ok {
			return nil
		}
		pos := make(map[string]int, len(seg.entries))
		for i := range seg.entries {
			pos[seg.entries[i].id] = base[k] + i
		}
		var ids []string
		var hit []bool
		var last string
		look := func(i int, v []byte, null bool) {
			if !null && !hit[i] && containsFoldBytes(v, needle) {
				hit[i] = true
			}
		}
		cols := []shard.Column{
			shard.StringColumn("episode_id", func(i int, v []byte, _ bool) {
				if string(v) != last {
					last = string(v)
				}
				ids[i] = last
			}),
			shard.StringColumn("action_json", look),
			shard.StringColumn("output", look),
			shard.StringColumn("model_text", look),
		}
		start := func(rows int) error {
			ids, hit = make([]string, rows), make([]bool, rows)
			return ctx.Err()
		}
		done := func() error {
			bmu.Lock()
			defer bmu.Unlock()
			for i, h := range hit {
				if p, ok := pos[ids[i]]; ok && h {
					bits[p/64] |= 1 << (p % 64)
				}
			}
			return nil
		}
		err := ds.ReadColumns(s, cols, start, done)
		if errors.Is(err, shard.ErrNotFlat) {
			for st, err := range shard.ProjectShard[textCols](ds, s) {
				if err != nil {
					return err
				}
				p, ok := pos[st.EpisodeID]
				if ok && (containsFoldBytes([]byte(st.ActionJSON), needle) || containsFoldBytes([]byte(st.Output), needle) ||
					(st.ModelText != nil && containsFoldBytes([]byte(*st.ModelText), needle))) {
					bmu.Lock()
					bits[p/64] |= 1 << (p % 64)
					bmu.Unlock()
				}
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("text search: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return bits, nil
}
