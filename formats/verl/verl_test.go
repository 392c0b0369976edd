package verl

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/export/model"
	"github.com/forkline/forkline/export/model/tabletest"
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
	w, err := NewAgentWriter(dir, []string{"train", "test"})
	require.NoError(t, err)
	rewards := map[string]*float64{"a": ptr(1.0), "b": ptr(0.0), "c": nil, "d": ptr(0.5)}
	for _, id := range []string{"a", "b", "c", "d"} {
		split := "train"
		if id == "d" {
			split = "test"
		}
		require.NoError(t, w.Write(episode(id, split, rewards[id])))
	}
	noTokens := episode("e", "train", ptr(1.0))
	noTokens.Row.PromptIDs, noTokens.Row.ResponseIDs, noTokens.Row.ResponseMask, noTokens.Row.ResponseLogprobs, noTokens.Row.TokenTurns = nil, nil, nil, nil, 0
	var ref *model.Refusal
	require.ErrorAs(t, w.Write(noTokens), &ref)
	assert.Equal(t, RefusedNoTokens, ref.Reason)
	drift := episode("f", "train", ptr(1.0))
	drift.Row.TokenDrift = true
	require.ErrorAs(t, w.Write(drift), &ref)
	assert.Equal(t, RefusedDrift, ref.Reason)
	noLogprobs := episode("g", "train", ptr(1.0))
	noLogprobs.Row.ResponseLogprobs = nil
	require.NoError(t, w.Write(noLogprobs))
	require.NoError(t, w.Close())

	schemaGolden(t, "verl-agent.golden", AgentFeatures)
	train := readChecked(t, filepath.Join(dir, "train.parquet"))
	require.Len(t, train.Rows, 4)
	for i, row := range train.Rows {
		ids := row["response_ids"].([]any)
		mask := row["response_mask"].([]any)
		require.Len(t, mask, len(ids))
		if lp, ok := row["response_logprobs"].([]any); ok {
			require.Len(t, lp, len(ids))
			for j := range mask {
				if mask[j] == int64(0) {
					assert.Equal(t, 0.0, lp[j], "environment tokens have logprob 0.0")
				}
			}
		}
		ef := row["extra_fields"].(map[string]any)
		id := ef["episode_id"].(string)
		assert.Equal(t, id, row["extra_info"].(map[string]any)["episode_id"])
		assert.Equal(t, int64(i), row["extra_info"].(map[string]any)["index"])
		if rewards[id] == nil && id != "g" {
			assert.Nil(t, row["reward_score"], "episode %s", id)
		} else if id != "g" {
			assert.Equal(t, *rewards[id], row["reward_score"], "episode %s", id)
		}
		assert.Equal(t, int64(4), row["num_turns"])
		assert.Equal(t, "done", ef["traj_exit_reason"])
		assert.Equal(t, AgentName, row["agent_name"])
		assert.Equal(t, []any{
			map[string]any{"role": "system", "content": "sys"},
			map[string]any{"role": "user", "content": "Do " + id},
		}, row["prompt"])
	}
	assert.Nil(t, train.Rows[3]["response_logprobs"], "no logprobs: null, never zeros")
	test := readChecked(t, filepath.Join(dir, "test.parquet"))
	require.Len(t, test.Rows, 1)
	assert.Equal(t, 0.5, test.Rows[0]["reward_score"])
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

func TestRLRows(t *testing.T) {
	dir := t.TempDir()
	w, err := NewRLWriter(dir, []string{"train"})
	require.NoError(t, err)
	require.NoError(t, w.Write(episode("a", "train", ptr(1.0))))
	require.NoError(t, w.Write(episode("b", "train", nil)))
	require.NoError(t, w.Close())
	schemaGolden(t, "verl-rl.golden", PromptFeatures)
	tab := readChecked(t, filepath.Join(dir, "train.parquet"))
	require.Len(t, tab.Rows, 2)
	r := tab.Rows[1]
	assert.Equal(t, "forkline", r["data_source"])
	assert.Equal(t, "agent", r["ability"])
	assert.Equal(t, map[string]any{"style": "forkline_verify", "ground_truth": "test -f done"}, r["reward_model"])
	assert.Equal(t, map[string]any{"split": "train", "index": int64(1), "episode_id": "b", "task_id": "t-b", "run_id": "run-1", "exit_reason": "done", "reward": nil}, r["extra_info"])
}

func TestSFTRows(t *testing.T) {
	for _, thinking := range []bool{false, true} {
		dir := t.TempDir()
		w, err := NewSFTWriter(dir, []string{"train"}, thinking)
		require.NoError(t, err)
		ep := episode("a", "train", ptr(1.0))
		ep.Conversation.EnableThinking = ptr(false)
		require.NoError(t, w.Write(ep))
		require.NoError(t, w.Close())
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
		args := fn["arguments"].(map[string]any)
		assert.Equal(t, "ls", args["cmd"])
		assert.Equal(t, int64(100), args["timeout_ms"])
		assert.Nil(t, args["path"], "fields of other actions are null in the union struct")
		click := msgs[4].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["arguments"].(map[string]any)
		assert.Equal(t, map[string]any{"x": int64(3), "y": int64(4), "button": "right"}, dropNulls(click))
		assert.Equal(t, "call_1", msgs[5].(map[string]any)["tool_call_id"])

		tools := row["tools"].([]any)
		require.Len(t, tools, 11)
		exec := dropNulls(tools[2].(map[string]any)).(map[string]any)
		assert.Equal(t, "exec", exec["function"].(map[string]any)["name"])
		params := exec["function"].(map[string]any)["parameters"].(map[string]any)
		assert.Equal(t, []any{"cmd"}, params["required"])
		assert.Equal(t, false, params["additionalProperties"])
		assert.Len(t, params["properties"], 2, "after dropping nulls, exec's own properties")
	}
}

// dropNulls removes null keys, as docs/verl_agent_loop.py does before the
// chat template.
func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if e != nil {
				out[k] = dropNulls(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = dropNulls(x[i])
		}
		return out
	}
	return v
}
