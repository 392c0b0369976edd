package export

import (
	"context"
	"fmt"
	"slices"

	"github.com/forkline/forkline/formats/chat"
	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/verl"
	"github.com/forkline/forkline/schemas"
)

// groups is what a first pass over the inputs learns of the selected
// episodes' groups (model.Episode.GroupID): their rewards, for verl-agent's
// group advantages and for the preference pairs of dpo. It holds one id and
// one reward per selected episode, like checkUniqueIDs.
type groups struct {
	byID  map[string]*group
	order []string // group ids in first-seen order
}

type group struct {
	members []member // episodes with a reward, in input order
	unrated int      // selected episodes without a reward
}

type member struct {
	episode string
	reward  float64
}

// collectGroups reads every input's episode and reward rows (not their
// steps) and groups the episodes o selects.
func collectGroups(ctx context.Context, o Options, inputs []*input) (*groups, error) {
	g := &groups{byID: map[string]*group{}}
	for _, in := range inputs {
		err := in.ds.EachEpisodeRewards(func(row schemas.EpisodeRow, rewards []schemas.RewardRow) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			ep := &model.Episode{Row: row, Rewards: rewards, RewardName: o.Reward, Conversation: in.conversation}
			if !selected(o, ep) {
				return nil
			}
			if err := in.describe(ep, true); err != nil {
				return err
			}
			id := ep.GroupID()
			gr, ok := g.byID[id]
			if !ok {
				gr = &group{}
				g.byID[id] = gr
				g.order = append(g.order, id)
			}
			if r := ep.Reward(); r != nil {
				gr.members = append(gr.members, member{row.EpisodeID, *r})
			} else {
				gr.unrated++
			}
			return nil
		})
		if err != nil {
			return nil, corruptInput(in.path, err)
		}
	}
	return g, nil
}

// verl is the groups as verl-agent's advantage needs them.
func (g *groups) verl() map[string]*verl.Group {
	if g == nil {
		return nil
	}
	out := make(map[string]*verl.Group, len(g.byID))
	for id, gr := range g.byID {
		vg := &verl.Group{}
		for _, m := range gr.members {
			vg.Rewards = append(vg.Rewards, m.reward)
		}
		out[id] = vg
	}
	return out
}

// pairPlan is which episodes pair with which, by the pairing rule:
// candidates are a group's episodes with a reward; with PairsMax the group
// gives one pair, its best episode (highest reward; of equals, the smallest
// episode id) chosen over its worst (lowest; of equals, the smallest id),
// when their rewards differ; with PairsAll every two of its episodes whose
// rewards differ, the higher chosen. A group whose rewards are all equal,
// or that has one rated episode, gives none.
type pairPlan struct {
	pairs   []plannedPair
	byEp    map[string][]int // episode id → its pairs
	refusal map[string]string
}

type plannedPair struct {
	group            string
	chosen, rejected string
}

// Refusal reasons of dpo, for the episodes in no pair.
const (
	RefusedNoReward   = "no reward"
	RefusedAlone      = "the only rated episode of its group"
	RefusedUniform    = "in a group whose rewards are all equal"
	RefusedNotExtreme = "neither the best nor the worst of its group (Pairs max)"
	RefusedIdentical  = "pairs with no model message to prefer (identical, or parting at an observation)"
)

func (g *groups) plan(p Pairs) *pairPlan {
	pl := &pairPlan{byEp: map[string][]int{}, refusal: map[string]string{}}
	add := func(gid, c, r string) {
		pl.byEp[c] = append(pl.byEp[c], len(pl.pairs))
		pl.byEp[r] = append(pl.byEp[r], len(pl.pairs))
		pl.pairs = append(pl.pairs, plannedPair{gid, c, r})
	}
	for _, gid := range g.order {
		ms := slices.Clone(g.byID[gid].members)
		// Highest reward first; of equals, the smallest episode id.
		slices.SortStableFunc(ms, func(a, b member) int {
			switch {
			case a.reward > b.reward:
				return -1
			case a.reward < b.reward:
				return 1
			case a.episode < b.episode:
				return -1
			case a.episode > b.episode:
				return 1
			}
			return 0
		})
		reason := ""
		switch {
		case len(ms) == 0:
			// No rated episode (a branched root, whose reward is its
			// branches', or a task without verify:): no pair, and its
			// episodes are refused as RefusedNoReward by the sink.
			continue
		case len(ms) == 1:
			reason = RefusedAlone
		case len(ms) > 1 && ms[0].reward == ms[len(ms)-1].reward:
			reason = RefusedUniform
		}
		if reason != "" {
			for _, m := range ms {
				pl.refusal[m.episode] = reason
			}
			continue
		}
		if p == PairsAll {
			for i := range ms {
				for j := i + 1; j < len(ms); j++ {
					if ms[i].reward > ms[j].reward {
						add(gid, ms[i].episode, ms[j].episode)
					}
				}
			}
			continue
		}
		// The worst: the lowest reward, of equals the smallest id.
		worst := len(ms) - 1
		for worst > 0 && ms[worst-1].reward == ms[len(ms)-1].reward {
			worst--
		}
		add(gid, ms[0].episode, ms[worst].episode)
		for i, m := range ms {
			if i != 0 && i != worst {
				pl.refusal[m.episode] = RefusedNotExtreme
			}
		}
	}
	return pl
}

// pairSink is the dpo target: it holds each paired episode's conversation
// until every pair it is in is written (its partner has been read), so
// memory holds the conversations of open pairs only, and writes pairs in
// the order they complete, which the inputs' order fixes.
type pairSink struct {
	w         *chat.DPOWriter
	o         *Options
	plan      *pairPlan
	held      map[string]*chat.Conversation
	pending   map[string]int // pairs an episode still waits on
	done      []bool
	counts    map[string]int64
	identical int64
	err       error
}

func newPairSink(dir string, c *openContext) *pairSink {
	s := &pairSink{w: chat.NewDPOWriter(dir, c.splits, c.o.DPOFormat, c.o.conversation()), o: c.o,
		plan: c.groups.plan(c.o.Pairs), held: map[string]*chat.Conversation{}, pending: map[string]int{}, counts: map[string]int64{}}
	for _, sp := range c.splits {
		s.counts[sp] = 0
	}
	s.done = make([]bool, len(s.plan.pairs))
	for id, ps := range s.plan.byEp {
		s.pending[id] = len(ps)
	}
	return s
}

// Write takes one selected episode: it refuses an episode in no pair, holds
// a paired one and writes the pairs it completes.
func (s *pairSink) Write(ep *model.Episode) error {
	if s.err != nil {
		return s.err
	}
	id := ep.Row.EpisodeID
	ps, paired := s.plan.byEp[id]
	if !paired {
		reason, ok := s.plan.refusal[id]
		if !ok {
			reason = RefusedNoReward
		}
		return &model.Refusal{Reason: reason}
	}
	conv, err := chat.NewConversation(ep, *ep.Reward(), s.o.conversation())
	if err != nil {
		return err
	}
	s.held[id] = conv
	for _, i := range ps {
		pp := s.plan.pairs[i]
		c, r := s.held[pp.chosen], s.held[pp.rejected]
		if c == nil || r == nil || s.done[i] {
			continue
		}
		s.done[i] = true
		// A pair's split is its group's: a group never straddles splits.
		split := assignSplit(s.o.Split, pp.group)
		ok, err := s.w.WritePair(&chat.Pair{GroupID: pp.group, Split: split, Chosen: c, Rejected: r})
		if err != nil {
			s.err = err
			return err
		}
		if ok {
			s.counts[split]++
		} else {
			s.identical++
		}
		for _, e := range []string{pp.chosen, pp.rejected} {
			if s.pending[e]--; s.pending[e] == 0 {
				delete(s.held, e)
			}
		}
	}
	return nil
}

// Close finishes the files. A pair whose partner never came (an input
// changed between the passes) is an error.
func (s *pairSink) Close() error {
	err := s.w.Close()
	if err == nil && s.err == nil {
		for i, d := range s.done {
			if !d {
				return fmt.Errorf("export: dpo: pair %s/%s was never completed; did an input change during the export?", s.plan.pairs[i].chosen, s.plan.pairs[i].rejected)
			}
		}
	}
	if s.err != nil {
		return s.err
	}
	return err
}

// Counts is the pairs written per split.
func (s *pairSink) Counts() map[string]int64 { return s.counts }

// Unit is what Counts counts.
func (s *pairSink) Unit() string { return "pairs" }

// Refusals counts, by reason, what was left out after Write accepted it:
// pairs whose conversations were identical.
func (s *pairSink) Refusals() map[string]int64 {
	if s.identical == 0 {
		return nil
	}
	return map[string]int64{RefusedIdentical: s.identical}
}
