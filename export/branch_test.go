package export

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// branchFixture is a branching run as collect writes it: root "r" stopped
// after 2 steps (branched, its prefix stored once, its token record 2
// turns), its 3 branches (own steps from step 2, token records opening with
// r's ids, rewards 1, 0, 1), and two plain roots of the same task sharing
// the task's group (rewards 1 and 0).
func branchFixture(t *testing.T) string {
	t.Helper()
	const rootGroup, branchGroup = "g-task-shell", "g-r-2"
	step := func(id string, i int, cmd string) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, TaskID: "shell", StepIndex: int32(i), ActionKind: "exec",
			ActionJSON: fmt.Sprintf(`{"kind":"exec","cmd":%q}`, cmd), Output: cmd + "\n"}
	}
	done := func(id string, i int) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, TaskID: "shell", StepIndex: int32(i), ActionKind: "done", ActionJSON: `{"kind":"done","answer":"ok"}`, ExitCode: -1}
	}
	reward := func(id string, v float64) []schemas.RewardRow {
		return []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: ptr(v), Source: "verify"}}
	}
	prompt, rootIDs, rootMask, rootLP := tokenRecord(2, true)
	var eps []shard.EpisodeBatch
	eps = append(eps, shard.EpisodeBatch{
		Episode: schemas.EpisodeRow{EpisodeID: "r", TaskID: "shell", TaskHash: "h", ExitReason: "branched", Steps: 2, GroupID: ptr(rootGroup),
			PromptIDs: prompt, ResponseIDs: rootIDs, ResponseMask: rootMask, ResponseLogprobs: rootLP, TokenTurns: 2},
		Steps: []schemas.StepRow{step("r", 0, "ls"), step("r", 1, "cat notes")},
	})
	for i, v := range []float64{1, 0, 1} {
		id := fmt.Sprintf("r-b%d", i)
		_, ids, mask, lp := tokenRecord(4, true)
		require.Equal(t, rootIDs, ids[:len(rootIDs)], "the fixture's branch record opens with the parent's")
		eps = append(eps, shard.EpisodeBatch{
			Episode: schemas.EpisodeRow{EpisodeID: id, TaskID: "shell", TaskHash: "h", ExitReason: "done", Steps: 2, GroupID: ptr(branchGroup),
				ParentEpisodeID: ptr("r"), BranchStep: ptr(int32(2)), BranchIndex: ptr(int32(i)),
				PromptIDs: prompt, ResponseIDs: ids, ResponseMask: mask, ResponseLogprobs: lp, TokenTurns: 4},
			Steps:   []schemas.StepRow{step(id, 2, fmt.Sprintf("echo %d > answer", i)), done(id, 3)},
			Rewards: reward(id, v),
		})
	}
	for i, v := range []float64{1, 0} {
		id := fmt.Sprintf("s%d", i)
		_, ids, mask, lp := tokenRecord(2, true)
		eps = append(eps, shard.EpisodeBatch{
			Episode: schemas.EpisodeRow{EpisodeID: id, TaskID: "shell", TaskHash: "h", ExitReason: "done", Steps: 2, GroupID: ptr(rootGroup),
				PromptIDs: prompt, ResponseIDs: ids, ResponseMask: mask, ResponseLogprobs: lp, TokenTurns: 2},
			Steps:   []schemas.StepRow{step(id, 0, fmt.Sprintf("wc -l notes # %d", i)), done(id, 1)},
			Rewards: reward(id, v),
		})
	}
	return writeRun(t, t.TempDir(), runSpec{runID: "branching", policy: map[string]any{"name": "script", "options": map[string]string{}}, episodes: eps})
}

func readLines[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v T
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v), sc.Text())
		out = append(out, v)
	}
	require.NoError(t, sc.Err())
	return out
}

// verl-agent gets trajectories: the branches with their full token records
// and their group's key, the branched parent left out (it is their prefix,
// not a trajectory).
func TestVerlAgentRowsOfABranchingRun(t *testing.T) {
	in := branchFixture(t)
	out := filepath.Join(t.TempDir(), "out")
	var read, total int64
	rep := exportOK(t, Options{Inputs: []string{in}, Target: "verl-agent", Out: out, Split: split(t, "train=0.5,test=0.5"),
		Progress: func(r, tot int64) { read, total = r, tot }})
	// The progress total is what is read: trajectories, not the roots
	// that branched (it stayed at "16/20 ... ETA 0s").
	require.Equal(t, total, read, "the last progress count is the total")
	require.EqualValues(t, rep.Read, total)
	require.EqualValues(t, 5, rep.Read, "the five trajectories; the branch point is not one")
	_, rootIDs, _, _ := tokenRecord(2, true)
	groups, splits := map[string][]string{}, map[string]string{}
	for _, sp := range []string{"train", "test"} {
		for _, row := range readTable(t, filepath.Join(out, sp+".parquet")).Rows {
			ef := row["extra_fields"].(map[string]any)
			id := ef["episode_id"].(string)
			require.NotEqual(t, "r", id)
			groups[ef["group_id"].(string)] = append(groups[ef["group_id"].(string)], id)
			splits[id] = sp
			if len(id) > 2 && id[:2] == "r-" {
				ids := row["response_ids"].([]any)
				for j, want := range rootIDs {
					require.Equal(t, int64(want), ids[j], "%s: the record opens with the parent's ids", id)
				}
				require.EqualValues(t, 8, row["num_turns"])
			}
		}
	}
	require.ElementsMatch(t, []string{"r-b0", "r-b1", "r-b2"}, groups["g-r-2"], "one GRPO group per branch point")
	require.ElementsMatch(t, []string{"s0", "s1"}, groups["g-task-shell"])
	require.Equal(t, splits["r-b0"], splits["r-b1"], "a group never straddles splits")
	require.Equal(t, splits["r-b0"], splits["r-b2"])
}

// dpo pairs the siblings of a branch point (and the roots of one task) in
// TRL's conversational preference type with an explicit prompt (prompt,
// chosen, rejected: lists of messages): -pairs all gives every two whose
// rewards differ, the higher chosen; the prompt is what the two share, the
// branch's prefix at least, so prompt + chosen opens the chosen
// trajectory's conversation (as chat-jsonl writes it) and chosen is the
// model's message where the two sides diverge.
func TestPreferencePairsShareTheirPrefix(t *testing.T) {
	in := branchFixture(t)
	dir := t.TempDir()
	exportOK(t, Options{Inputs: []string{in}, Target: "dpo", Pairs: PairsAll, Out: filepath.Join(dir, "dpo")})
	exportOK(t, Options{Inputs: []string{in}, Target: "chat-jsonl", Out: filepath.Join(dir, "chat")})
	type msg = map[string]any
	whole := map[string][]msg{}
	chats := readLines[struct {
		Messages []msg `json:"messages"`
	}](t, filepath.Join(dir, "chat", "train.jsonl"))
	require.Len(t, chats, 5)
	// chat-jsonl lines carry no id: match them by their distinct first
	// action (the prefix ends after step 2 for branches, step 0 for roots).
	pairs := readLines[struct {
		Prompt            []msg   `json:"prompt"`
		Chosen            []msg   `json:"chosen"`
		Rejected          []msg   `json:"rejected"`
		GroupID           string  `json:"group_id"`
		ChosenEpisodeID   string  `json:"chosen_episode_id"`
		RejectedEpisodeID string  `json:"rejected_episode_id"`
		ChosenReward      float64 `json:"chosen_reward"`
		RejectedReward    float64 `json:"rejected_reward"`
	}](t, filepath.Join(dir, "dpo", "train.jsonl"))
	for _, c := range chats {
		// chat-jsonl's per-turn weight is its own (TRL's preference
		// lines have none); the messages are otherwise the same.
		for _, m := range c.Messages {
			delete(m, "weight")
		}
		b, _ := json.Marshal(c.Messages)
		whole[string(b)] = c.Messages
	}
	got := map[string]bool{}
	for _, p := range pairs {
		got[p.ChosenEpisodeID+">"+p.RejectedEpisodeID] = true
		require.Greater(t, p.ChosenReward, p.RejectedReward)
		require.Equal(t, "user", p.Prompt[0]["role"])
		require.Equal(t, "assistant", p.Chosen[0]["role"], "a completion starts with the model's turn")
		require.Equal(t, "assistant", p.Rejected[0]["role"])
		require.NotEqual(t, p.Chosen, p.Rejected)
		require.Len(t, p.Chosen, 1, "one model message per side")
		require.Len(t, p.Rejected, 1)
		opens := func(side []msg) bool {
			want, _ := json.Marshal(append(append([]msg{}, p.Prompt...), side...))
			for _, conv := range whole {
				if len(conv) >= len(p.Prompt)+1 {
					got, _ := json.Marshal(conv[:len(p.Prompt)+1])
					if string(got) == string(want) {
						return true
					}
				}
			}
			return false
		}
		require.True(t, opens(p.Chosen), "prompt + chosen opens the chosen trajectory's conversation")
		require.True(t, opens(p.Rejected), "prompt + rejected opens the rejected one's")
		if p.GroupID == "g-r-2" {
			require.GreaterOrEqual(t, len(p.Prompt), 1+2*2, "at least the instruction and the two prefix steps (call and result each)")
		}
	}
	require.Equal(t, map[string]bool{"r-b0>r-b1": true, "r-b2>r-b1": true, "s0>s1": true}, got, "every sibling pair whose rewards differ, once")

	// A run whose siblings all scored the same has nothing to prefer.
	_, err := Run(t.Context(), Options{Inputs: []string{in}, Target: "dpo", Out: filepath.Join(dir, "none"),
		MinReward: ptr(1.0)})
	require.ErrorContains(t, err, "no preference pair")
	_, statErr := os.Stat(filepath.Join(dir, "none"))
	require.True(t, os.IsNotExist(statErr), "nothing is written")
}

// A tree's split is drawn from its root at every depth, so a tree never
// straddles train and test: a leaf of depth 2 files under its root, not
// under its parent.
func TestSplitKeyIsTheTreesRoot(t *testing.T) {
	// The roots as shard.Dataset.Forest gives them (its own test reads
	// them from a dataset): every branch episode's root.
	parent := map[string]string{"r0": "r", "r1": "r", "r0-a": "r0"}
	roots := map[string]string{"r0": "r", "r1": "r", "r0-a": "r"}
	for id, want := range map[string]string{"r0-a": "r", "r1": "r", "r": "r", "alone": "alone"} {
		row := schemas.EpisodeRow{EpisodeID: id}
		if p := parent[id]; p != "" {
			row.ParentEpisodeID = &p
		}
		require.Equal(t, want, splitKey(row, roots), id)
	}
}
