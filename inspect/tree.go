package inspect

import (
	"slices"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// TreeNode is one episode of a branching tree, as inspect -episode shows
// the tree an episode belongs to: its place (parent, branch step and
// index), how it ended, its own steps and its episode-level rewards.
type TreeNode struct {
	EpisodeID   string             `json:"episode_id"`
	Parent      string             `json:"parent_episode_id,omitempty"`
	BranchStep  int                `json:"branch_step"`
	BranchIndex int                `json:"branch_index"`
	GroupID     string             `json:"group_id,omitempty"`
	ExitReason  string             `json:"exit_reason"`
	Steps       int                `json:"steps"` // its own, after BranchStep
	Rewards     map[string]float64 `json:"rewards,omitempty"`
	Branches    []*TreeNode        `json:"branches,omitempty"`
}

// trees returns, for each episode of ids that is part of a branching tree
// (it has a parent or branches), the tree of its root: the whole family
// with rewards per branch. It reads the episodes and rewards tables only.
func trees(ds *shard.Dataset, ids []string) (map[string]*TreeNode, error) {
	lin, err := ds.Tree()
	if err != nil {
		return nil, err
	}
	rootOf := func(id string) string {
		for hops := 0; lin[id].Parent != "" && hops <= len(lin); hops++ {
			id = lin[id].Parent
		}
		return id
	}
	want := map[string]string{} // episode → its root, for the ones in a tree
	roots := map[string]bool{}
	for _, id := range ids {
		if l := lin[id]; l.Parent != "" || l.Children > 0 {
			want[id] = rootOf(id)
			roots[want[id]] = true
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	nodes := map[string]*TreeNode{}
	err = ds.EachEpisodeRewards(func(ep schemas.EpisodeRow, rewards []schemas.RewardRow) error {
		if !roots[rootOf(ep.EpisodeID)] {
			return nil
		}
		n := &TreeNode{EpisodeID: ep.EpisodeID, ExitReason: ep.ExitReason, Steps: int(ep.Steps)}
		if ep.ParentEpisodeID != nil {
			n.Parent = *ep.ParentEpisodeID
		}
		if ep.BranchStep != nil {
			n.BranchStep = int(*ep.BranchStep)
		}
		if ep.BranchIndex != nil {
			n.BranchIndex = int(*ep.BranchIndex)
		}
		if ep.GroupID != nil {
			n.GroupID = *ep.GroupID
		}
		for _, r := range rewards {
			if r.StepIndex == nil && r.Value != nil {
				if n.Rewards == nil {
					n.Rewards = map[string]float64{}
				}
				n.Rewards[r.Name] = *r.Value
			}
		}
		nodes[ep.EpisodeID] = n
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if p := nodes[n.Parent]; p != nil {
			p.Branches = append(p.Branches, n)
		}
	}
	for _, n := range nodes {
		slices.SortFunc(n.Branches, func(a, b *TreeNode) int {
			if a.BranchStep != b.BranchStep {
				return a.BranchStep - b.BranchStep
			}
			return a.BranchIndex - b.BranchIndex
		})
	}
	out := map[string]*TreeNode{}
	for id, root := range want {
		out[id] = nodes[root]
	}
	return out, nil
}
