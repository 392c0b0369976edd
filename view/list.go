package view

import (
	"context"
	"slices"
	"strings"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// page answers q over ds from the index, bringing the index to ds's
// listed shards first; reward names the episode-level reward rows carry
// and the reward filters test. Only the page's rows are built; the
// matching episodes are held as one pointer each while they are sorted.
// Queries of one run hold the index one at a time, but for a text search's
// reading of the steps.
func (x *index) page(ctx context.Context, ds *shard.Dataset, reward string, q Query) (*Page, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	x.mu.Lock()
	if err := x.update(ctx, ds, reward); err != nil {
		x.mu.Unlock()
		return nil, err
	}
	// order is the index as this query sees it: segments never change, a
	// later update makes a new order, and dictionaries only grow.
	order, version := x.order, x.version
	var bits []uint64
	text := strings.ToLower(q.Text)
	if text != "" {
		bits = x.cachedText(text)
	}
	x.mu.Unlock()
	if text != "" && bits == nil {
		var err error
		if bits, err = scanText(ctx, ds, order, text); err != nil {
			return nil, err
		}
		x.mu.Lock()
		x.keepText(text, version, bits)
		x.mu.Unlock()
	}
	x.mu.Lock() // for the dictionaries
	defer x.mu.Unlock()
	f := q.Filter(reward)
	// The filter is export.Filter.Match itself, over a row holding the
	// indexed columns (those export.Where can test, has_tokens and
	// has_logprobs aside: Query.check refuses them) and the episode's
	// reward as its one reward row.
	var row schemas.EpisodeRow
	rewards := []schemas.RewardRow{{Name: reward}}
	var value float64
	page := &Page{Reward: reward, Offset: q.Offset, Limit: q.Limit, Episodes: []Row{}}
	var kept []*entry
	p := -1
	for _, seg := range order {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for i := range seg.entries {
			p++
			e := &seg.entries[i]
			if bits != nil && bits[p/64]&(1<<(p%64)) == 0 {
				continue
			}
			x.fill(&row, e)
			rewards[0].Value = nil
			if e.hasReward {
				value = e.reward
				rewards[0].Value = &value
			}
			if !f.Match(&row, rewards) {
				continue
			}
			kept = append(kept, e)
		}
	}
	page.Scanned, page.Matched = p+1, len(kept)
	less := x.entryLess(q.Sort, q.Desc)
	window := q.Offset + q.Limit
	if window <= len(kept)/64 {
		// An early page of a long list: keep the window's best while
		// walking (a sort of 2×window rows each window rows), rather than
		// sorting every match.
		kept = topK(kept, window, less)
	} else {
		slices.SortFunc(kept, less)
	}
	for _, e := range kept[min(q.Offset, len(kept)):min(window, len(kept))] {
		page.Episodes = append(page.Episodes, x.row(e))
	}
	return page, nil
}

// topK returns the k least of s by less, sorted.
func topK(s []*entry, k int, less func(a, b *entry) int) []*entry {
	out := make([]*entry, 0, 2*k)
	for _, e := range s {
		out = append(out, e)
		if len(out) == cap(out) {
			slices.SortFunc(out, less)
			out = out[:k]
		}
	}
	slices.SortFunc(out, less)
	return out[:min(k, len(out))]
}

// fill sets row's indexed columns from e (the others stay zero).
func (x *index) fill(row *schemas.EpisodeRow, e *entry) {
	row.EpisodeID = e.id
	row.TaskID = x.dicts[colTask].values[e.code[colTask]]
	row.ExitReason = x.dicts[colExit].values[e.code[colExit]]
	row.RunID = x.dicts[colRunID].values[e.code[colRunID]]
	row.TaskHash = x.dicts[colTaskHash].values[e.code[colTaskHash]]
	row.Provider = x.dicts[colProvider].values[e.code[colProvider]]
	row.GoldenID = x.dicts[colGolden].values[e.code[colGolden]]
	row.ResetStrategy = x.dicts[colResetStrategy].values[e.code[colResetStrategy]]
	row.ResetOrigin = x.dicts[colResetOrigin].values[e.code[colResetOrigin]]
	row.Repeat, row.Steps, row.DurationMS, row.ResetMS = e.repeat, e.steps, e.durationMS, e.resetMS
	row.TokenDrift, row.TokenTurns = e.drift, e.tokenTurns
	row.ParentEpisodeID, row.BranchStep = nil, nil
	if e.parent != "" {
		row.ParentEpisodeID = &e.parent
	}
	if e.hasBranchAt {
		row.BranchStep = &e.branchStep
	}
}

// row is e as the list shows it.
func (x *index) row(e *entry) Row {
	r := Row{EpisodeID: e.id, TaskID: x.dicts[colTask].values[e.code[colTask]], Repeat: e.repeat,
		ExitReason: x.dicts[colExit].values[e.code[colExit]], Steps: e.steps, DurationMS: e.durationMS,
		ResetMS: e.resetMS, TokenDrift: e.drift, TokenTurns: e.tokenTurns, Parent: e.parent}
	if e.hasReward {
		v := e.reward
		r.Reward = &v
	}
	if e.hasBranchAt {
		b := e.branchStep
		r.BranchStep = &b
	}
	return r
}

// entryLess is rowLess over index entries.
func (x *index) entryLess(key string, desc bool) func(a, b *entry) int {
	sign := 1
	if desc {
		sign = -1
	}
	str := func(c int) func(a, b *entry) int {
		v := x.dicts[c].values
		return func(a, b *entry) int { return strings.Compare(v[a.code[c]], v[b.code[c]]) }
	}
	var cmpKey func(a, b *entry) int
	switch key {
	case "task_id":
		cmpKey = str(colTask)
	case "exit_reason":
		cmpKey = str(colExit)
	case "steps":
		cmpKey = func(a, b *entry) int { return int(a.steps) - int(b.steps) }
	case "duration_ms":
		cmpKey = func(a, b *entry) int { return cmpFloat(a.durationMS, b.durationMS) }
	case "reset_ms":
		cmpKey = func(a, b *entry) int { return cmpFloat(a.resetMS, b.resetMS) }
	case "repeat":
		cmpKey = func(a, b *entry) int { return int(a.repeat) - int(b.repeat) }
	case "reward":
		cmpKey = func(a, b *entry) int { return cmpFloat(a.reward, b.reward) }
	default:
		cmpKey = func(a, b *entry) int { return 0 }
	}
	return func(a, b *entry) int {
		if key == "reward" && (!a.hasReward || !b.hasReward) {
			switch {
			case !a.hasReward && b.hasReward:
				return 1
			case a.hasReward && !b.hasReward:
				return -1
			}
		} else if c := cmpKey(a, b); c != 0 {
			return sign * c
		}
		return strings.Compare(a.id, b.id)
	}
}
