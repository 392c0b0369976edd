package verl

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/model/tabletest"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/schemas"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func ptr[T any](v T) *T { return &v }

// episode returns an episode of two model turns with an environment turn
// between them (mask 0, logprob 0.0), reward r.
func episode(id, split string, r *float64) *model.Episode {
	return &model.Episode{
		Row: schemas.EpisodeRow{EpisodeID: id, RunID: "run-1", TaskID: "t-" + id, ExitReason: "done", Steps: 2,
			PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{10, 11, 50, 51, 52, 20}, ResponseMask: []int32{1, 1, 0, 0, 0, 1},
			ResponseLogprobs: []float32{-0.1, -0.2, 0, 0, 0, -0.3}, TokenTurns: 2},
		Steps: []schemas.StepRow{
			{EpisodeID: id, StepIndex: 0, ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"ls","timeout_ms":100}`, Output: "a\n"},
			{EpisodeID: id, StepIndex: 1, ActionKind: "click", ActionJSON: `{"kind":"click","x":3,"y":4,"button":"right"}`, ExitCode: -1},
		},
		Rewards:      []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: r}},
		Instruction:  "Do " + id,
		VerifyCmd:    "test -f done",
		Conversation: policy.Conversation{SystemPrompt: "sys"},
		RewardName:   "verify",
		Split:        split,
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	assert.Equal(t, string(want), string(got), "%s differs; rerun with -update if the change is intended", path)
}

func schemaGolden(t *testing.T, name string, fs model.Features) {
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, fs.JSON(), "", "  "))
	golden(t, name, []byte("# Arrow schema\n"+fs.ArrowSchema().String()+"\n\n# features JSON\n"+pretty.String()+"\n"))
}

// readChecked reads a file back with parquet-go and applies datasets'
// features rule to it, against the inferred Parquet schema and the stored
// ARROW:schema.
func readChecked(t *testing.T, path string) *tabletest.Table {
	t.Helper()
	tab, err := tabletest.ReadParquetFile(path)
	require.NoError(t, err)
	require.NoError(t, tabletest.CheckFeatures(tab, false))
	stored, err := tabletest.StoredArrowSchema(tab)
	require.NoError(t, err)
	want, err := tabletest.FeatureTypes(tab.Metadata[model.MetadataKey])
	require.NoError(t, err)
	require.NoError(t, tabletest.CheckFields(want, stored.Fields, true))
	return tab
}

func TestAgentRowsKeepInvariantsAndRewards(t *testing.T) {
	dir := t.TempDir()
	w, err := NewAgentWriter(dir, []string{"train", "test"}, AgentOptions{})
	require.NoError(t, err)
	rewards := map[string]*float64{"a": ptr(1.0), "b": ptr(0.0), "d": ptr(0.5)}
	for _, id := range []string{"a", "b", "d"} {
		split := "train"
		if id == "d" {
			split = "test"
		}
		require.NoError(t, w.Write(episode(id, split, rewards[id])))
	}
	var ref *model.Refusal
	require.ErrorAs(t, w.Write(episode("c", "train", nil)), &ref, "finding 6: a null reward is refused, never written")
	assert.Equal(t, RefusedNoReward, ref.Reason)
	noTokens := episode("e", "train", ptr(1.0))
	noTokens.Row.PromptIDs, noTokens.Row.ResponseIDs, noTokens.Row.ResponseMask, noTokens.Row.ResponseLogprobs, noTokens.Row.TokenTurns = nil, nil, nil, nil, 0
	require.ErrorAs(t, w.Write(noTokens), &ref)
	assert.Equal(t, RefusedNoTokens, ref.Reason)
	drift := episode("f", "train", ptr(1.0))
	drift.Row.TokenDrift = true
	require.ErrorAs(t, w.Write(drift), &ref)
	assert.Equal(t, RefusedDrift, ref.Reason)
	require.NoError(t, w.Close())

	schemaGolden(t, "verl-agent.golden", AgentFeatures)
	train := readChecked(t, filepath.Join(dir, "train.parquet"))
	require.Len(t, train.Rows, 2)
	for i, row := range train.Rows {
		ids := row["response_ids"].([]any)
		mask := row["response_mask"].([]any)
		require.Len(t, mask, len(ids))
		lp := row["response_logprobs"].([]any)
		require.Len(t, lp, len(ids))
		for j := range mask {
			if mask[j] == int64(0) {
				assert.Equal(t, 0.0, lp[j], "environment tokens have logprob 0.0")
			}
		}
		ef := row["extra_fields"].(map[string]any)
		id := ef["episode_id"].(string)
		assert.Equal(t, id, row["extra_info"].(map[string]any)["episode_id"])
		assert.Equal(t, int64(i), row["extra_info"].(map[string]any)["index"])
		assert.Equal(t, *rewards[id], row["reward_score"], "episode %s", id)
		assert.Equal(t, int64(4), row["num_turns"])
		assert.Equal(t, "done", ef["traj_exit_reason"])
		assert.Equal(t, AgentName, row["agent_name"])
		assert.Equal(t, episode(id, "train", nil).GroupID(), row["group_id"], "finding 6: the group key verl's uid can take")
		assert.Equal(t, []any{
			map[string]any{"role": "system", "content": "sys"},
			map[string]any{"role": "user", "content": "Do " + id},
		}, row["prompt"])
	}
	test := readChecked(t, filepath.Join(dir, "test.parquet"))
	require.Len(t, test.Rows, 1)
	assert.Equal(t, 0.5, test.Rows[0]["reward_score"])
}

// Finding 6: verl reads logprobs from a batch's first row, so rows with and
// without them must not meet; the writer fails, naming the split to make.
func TestAgentRefusesAMixOfLogprobs(t *testing.T) {
	w, err := NewAgentWriter(t.TempDir(), []string{"train"}, AgentOptions{})
	require.NoError(t, err)
	require.NoError(t, w.Write(episode("a", "train", ptr(1.0))))
	noLogprobs := episode("g", "train", ptr(1.0))
	noLogprobs.Row.ResponseLogprobs = nil
	require.NoError(t, w.Write(noLogprobs))
	err = w.Close()
	require.ErrorIs(t, err, model.ErrSelection)
	assert.ErrorContains(t, err, "1 of 2 rows have no response_logprobs (episode g has none, a has them)")
	assert.ErrorContains(t, err, "-where has_logprobs=true")

	// All without logprobs is fine: null, never zeros.
	dir := t.TempDir()
	w, err = NewAgentWriter(dir, []string{"train"}, AgentOptions{})
	require.NoError(t, err)
	require.NoError(t, w.Write(noLogprobs))
	require.NoError(t, w.Close())
	tab := readChecked(t, filepath.Join(dir, "train.parquet"))
	assert.Nil(t, tab.Rows[0]["response_logprobs"])
}

// Finding 6: rows longer than the rollout lengths are refused at export.
func TestAgentLengthLimits(t *testing.T) {
	w, err := NewAgentWriter(t.TempDir(), []string{"train"}, AgentOptions{MaxPromptTokens: 2})
	require.NoError(t, err)
	var ref *model.Refusal
	require.ErrorAs(t, w.Write(episode("a", "train", ptr(1.0))), &ref)
	assert.Equal(t, RefusedPromptTooLong, ref.Reason)
	w, err = NewAgentWriter(t.TempDir(), []string{"train"}, AgentOptions{MaxPromptTokens: 3, MaxResponseTokens: 5})
	require.NoError(t, err)
	require.ErrorAs(t, w.Write(episode("a", "train", ptr(1.0))), &ref)
	assert.Equal(t, RefusedResponseToLong, ref.Reason)
}

// Turn rows are each model turn's own ids, mask 1 over the response: an
// episode whose assembled record drifted still gives all its turns.
func TestAgentTurnRows(t *testing.T) {
	dir := t.TempDir()
	w, err := NewAgentWriter(dir, []string{"train"}, AgentOptions{Rows: RowsTurn})
	require.NoError(t, err)
	ep := episode("a", "train", ptr(1.0))
	ep.Row.TokenDrift = true
	ep.Steps[0].PromptIDs, ep.Steps[0].ResponseIDs, ep.Steps[0].ResponseLogprobs = []int32{1, 2, 3}, []int32{10, 11}, []float32{-0.1, -0.2}
	ep.Steps[1].PromptIDs, ep.Steps[1].ResponseIDs, ep.Steps[1].ResponseLogprobs = []int32{1, 2, 3, 10, 11, 60, 61}, []int32{20}, []float32{-0.3}
	require.NoError(t, w.Write(ep))
	require.NoError(t, w.Close())
	tab := readChecked(t, filepath.Join(dir, "train.parquet"))
	require.Len(t, tab.Rows, 2)
	r := tab.Rows[1]
	assert.Equal(t, []any{int64(1), int64(2), int64(3), int64(10), int64(11), int64(60), int64(61)}, r["prompt_ids"])
	assert.Equal(t, []any{int64(20)}, r["response_ids"])
	assert.Equal(t, []any{int64(1)}, r["response_mask"])
	assert.Equal(t, int64(2), r["num_turns"])
	assert.Equal(t, int64(1), r["extra_fields"].(map[string]any)["turn"])
	assert.Equal(t, int64(1), r["extra_info"].(map[string]any)["turn"])
	assert.Equal(t, 1.0, r["reward_score"])
}

// -advantage bakes GRPO's and RLOO's group-relative advantage into
// reward_score, as verl computes them (unbiased std, eps 1e-6).
func TestGroupAdvantage(t *testing.T) {
	rs := []float64{1, 0, 0, 1}
	std := math.Sqrt((4 * 0.25) / 3)
	assert.InDelta(t, 0.5/(std+1e-6), GroupAdvantage(AdvantageGRPO, 1, rs), 1e-12)
	assert.InDelta(t, -0.5/(std+1e-6), GroupAdvantage(AdvantageGRPO, 0, rs), 1e-12)
	assert.InDelta(t, 1-1.0/3, GroupAdvantage(AdvantageRLOO, 1, rs), 1e-12)
	assert.Equal(t, 0.0, GroupAdvantage(AdvantageGRPO, 1, []float64{1}), "a group of one learns nothing")

	dir := t.TempDir()
	a, b := episode("a", "train", ptr(1.0)), episode("b", "train", ptr(0.0))
	a.Row.TaskID, b.Row.TaskID = "same", "same"
	b.Instruction = a.Instruction
	groups := map[string]*Group{a.GroupID(): {Rewards: []float64{1, 0}}}
	w, err := NewAgentWriter(dir, []string{"train"}, AgentOptions{Advantage: AdvantageRLOO, Groups: groups})
	require.NoError(t, err)
	require.NoError(t, w.Write(a))
	require.NoError(t, w.Write(b))
	require.NoError(t, w.Close())
	tab := readChecked(t, filepath.Join(dir, "train.parquet"))
	assert.Equal(t, 1.0, tab.Rows[0]["reward_score"])
	assert.Equal(t, -1.0, tab.Rows[1]["reward_score"])
	assert.Equal(t, 1.0, tab.Rows[0]["extra_info"].(map[string]any)["reward"], "the raw reward stays in extra_info")
}

func TestCheckRecordRefusesCorruptRecords(t *testing.T) {
	ep := episode("a", "train", nil)
	ep.Row.ResponseMask = ep.Row.ResponseMask[1:]
	err := CheckRecord(ep)
	require.Error(t, err)
	var ref *model.Refusal
	assert.False(t, errors.As(err, &ref), "a broken record is an error, not a refusal")
	ep = episode("a", "train", nil)
	ep.Row.ResponseMask[2] = 2
	require.ErrorContains(t, CheckRecord(ep), "response_mask[2] = 2")
}

// Finding 2: no union struct — arguments are the model's JSON text, tools
// one JSON string in the key order sent; nothing carries another action's
// fields.
func TestSFTRows(t *testing.T) {
	for _, thinking := range []bool{false, true} {
		dir := t.TempDir()
		w := NewSFTWriter(dir, []string{"train", "test"}, thinking, false, model.Options{})
		ep := episode("a", "train", ptr(1.0))
		ep.Conversation.EnableThinking = ptr(false)
		require.NoError(t, w.Write(ep))
		require.NoError(t, w.Close())
		_, err := os.Stat(filepath.Join(dir, "test.parquet"))
		assert.True(t, os.IsNotExist(err), "finding 5: no empty split")
		name := "verl-sft.golden"
		if thinking {
			name = "verl-sft-thinking.golden"
		}
		schemaGolden(t, name, SFTFeatures(thinking))
		tab := readChecked(t, filepath.Join(dir, "train.parquet"))
		require.Len(t, tab.Rows, 1)
		row := tab.Rows[0]
		if thinking {
			assert.Equal(t, false, row["enable_thinking"])
		} else {
			_, has := tab.Field("enable_thinking")
			assert.False(t, has)
		}
		msgs := row["messages"].([]any)
		require.Len(t, msgs, 6)
		call := msgs[2].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
		fn := call["function"].(map[string]any)
		assert.Equal(t, "exec", fn["name"])
		assert.Equal(t, `{"cmd":"ls","timeout_ms":100}`, fn["arguments"])
		click := msgs[4].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["arguments"]
		assert.Equal(t, `{"x":3,"y":4,"button":"right"}`, click)
		assert.Equal(t, "call_1", msgs[5].(map[string]any)["tool_call_id"])
		assert.Equal(t, string(ep.Tools()), row["tools"])
	}
}
