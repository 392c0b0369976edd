package chat

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/schemas"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func ptr[T any](v T) *T { return &v }

// sampleEpisode has one step of each shape: a command with model text and
// reasoning, a failing command, a file read that failed, a screenshot by
// hash, and a done action.
func sampleEpisode() *model.Episode {
	id := "ep-1"
	return &model.Episode{
		Row:          schemas.EpisodeRow{EpisodeID: id, TaskID: "fix-bug", ExitReason: "done", Answer: "fixed", Steps: 5},
		Instruction:  "Fix the failing test in ./calc.",
		Conversation: policy.Conversation{SystemPrompt: "You are a careful engineer."},
		RewardName:   "verify",
		Split:        "train",
		Steps: []schemas.StepRow{
			{EpisodeID: id, StepIndex: 0, ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"go test ./... 2>&1 | head -n 5 > /tmp/x"}`,
				Output: "ok\n", ModelText: ptr("Let me run the tests."), Reasoning: ptr("tests first")},
			{EpisodeID: id, StepIndex: 1, ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"false","timeout_ms":5000}`,
				Output: "boom", ExitCode: 2, IsError: true, ErrorKind: "exit_status"},
			{EpisodeID: id, StepIndex: 2, ActionKind: "read_file", ActionJSON: `{"kind":"read_file","path":"missing.go"}`,
				ExitCode: -1, IsError: true, ErrorKind: "not_found"},
			{EpisodeID: id, StepIndex: 3, ActionKind: "screenshot", ActionJSON: `{"kind":"screenshot"}`,
				ExitCode: -1, ScreenHash: "abc", ScreenW: 640, ScreenH: 480},
			{EpisodeID: id, StepIndex: 4, ActionKind: "done", ActionJSON: `{"kind":"done","answer":"fixed"}`, ModelText: ptr("All done.")},
		},
		Rewards: []schemas.RewardRow{
			{EpisodeID: id, Name: "other", Value: ptr(0.25)},
			{EpisodeID: id, Name: "verify", Value: ptr(1.0)},
			{EpisodeID: id, StepIndex: ptr(int32(1)), Name: "verify", Value: ptr(-0.5)},
		},
	}
}

// The lines are OpenAI/TRL chat examples: every tool message answers the
// call before it, arguments decode to the action's object in both
// encodings, every assistant message carries a weight, no key is null, and
// a split without episodes has no file.
func TestJSONLWriter(t *testing.T) {
	for _, args := range []model.ArgsEncoding{model.ArgsString, model.ArgsObject} {
		t.Run(string(args), func(t *testing.T) {
			dir := t.TempDir()
			w := NewJSONLWriter(dir, []string{"train", "test"}, model.Options{Args: args})
			require.NoError(t, w.Write(sampleEpisode()))
			require.NoError(t, w.Close())

			_, err := os.Stat(filepath.Join(dir, "test.jsonl"))
			assert.True(t, os.IsNotExist(err), "a split without episodes is not written (datasets cannot load an empty one)")

			got, err := os.ReadFile(filepath.Join(dir, "train.jsonl"))
			require.NoError(t, err)
			golden(t, filepath.Join("testdata", "chat-"+string(args)+".golden.jsonl"), got)
			assert.NotContains(t, string(got), "null", "finding 3: no key is null")

			sc := bufio.NewScanner(bytes.NewReader(got))
			sc.Buffer(nil, 1<<20)
			require.True(t, sc.Scan())
			var line struct {
				Messages []struct {
					Role       string  `json:"role"`
					Content    *string `json:"content"`
					ToolCallID string  `json:"tool_call_id"`
					Weight     *int    `json:"weight"`
					ToolCalls  []struct {
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string          `json:"name"`
							Arguments json.RawMessage `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"messages"`
				Tools             []map[string]any `json:"tools"`
				ParallelToolCalls *bool            `json:"parallel_tool_calls"`
			}
			require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
			assert.Len(t, line.Tools, 13)
			require.NotNil(t, line.ParallelToolCalls)
			pending := ""
			var names []string
			for i, m := range line.Messages {
				require.NotNil(t, m.Content, "message %d: content is always there (Qwen3's template reads it)", i)
				switch m.Role {
				case "assistant":
					require.NotNil(t, m.Weight, "message %d: a weight on every assistant turn", i)
					assert.Equal(t, 1, *m.Weight)
					for _, tc := range m.ToolCalls {
						assert.Equal(t, "function", tc.Type)
						var obj map[string]any
						if args == model.ArgsString {
							var s string
							require.NoError(t, json.Unmarshal(tc.Function.Arguments, &s), "arguments are a JSON string")
							require.NoError(t, json.Unmarshal([]byte(s), &obj))
						} else {
							require.NoError(t, json.Unmarshal(tc.Function.Arguments, &obj), "arguments are an object")
						}
						pending = tc.ID
						names = append(names, tc.Function.Name)
					}
				case "tool":
					assert.Equal(t, pending, m.ToolCallID, "message %d answers the call before it", i)
					pending = ""
				default:
					assert.Nil(t, m.Weight)
				}
			}
			assert.Equal(t, []string{"exec", "exec", "read_file", "screenshot", "done"}, names, "finding 1: the done call is there")
		})
	}
}

// Chat-jsonl's per-turn weight: a turn that ended the episode without a
// valid action is weight 0, so training on the file leaves it out.
func TestFailedTurnHasWeightZero(t *testing.T) {
	ep := sampleEpisode()
	ep.Steps[4] = schemas.StepRow{EpisodeID: "ep-1", StepIndex: 4, ActionJSON: "null", ModelText: ptr("I give up.")}
	b, err := Encode(ep, model.Options{})
	require.NoError(t, err)
	assert.Contains(t, string(b), `{"role":"assistant","content":"I give up.","weight":0}`)
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	assert.Equal(t, string(want), string(got), "%s differs; rerun with -update if the change is intended", path)
}

// A pair shares the longest common prefix of its conversations; chosen and
// rejected are each the model's message at the first difference, in TRL's
// lines as in OpenAI's (whose field names are the ones OpenAI's preference
// fine-tuning guide documents: input, preferred_output,
// non_preferred_output), OpenAI's with string arguments and no reasoning.
func TestEncodePair(t *testing.T) {
	chosen, rejected := sampleEpisode(), sampleEpisode()
	rejected.Row.EpisodeID = "ep-2"
	rejected.Steps[1].ActionJSON = `{"kind":"exec","cmd":"true"}`
	rejected.Steps[1].Reasoning = ptr("try true")
	c, err := NewConversation(chosen, 1, model.Options{Reasoning: model.ReasoningAll})
	require.NoError(t, err)
	r, err := NewConversation(rejected, 0, model.Options{Reasoning: model.ReasoningAll})
	require.NoError(t, err)
	p := &Pair{GroupID: "g", Split: "train", Chosen: c, Rejected: r}
	k, ok := p.PromptLen()
	require.True(t, ok)
	assert.Equal(t, 4, k, "system, user, the shared first call and its result")

	line, ok := EncodePair(p, DPOTRL, model.Options{})
	require.True(t, ok)
	var trl map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(line, &trl))
	for _, side := range []string{"chosen", "rejected"} {
		var msgs []map[string]any
		require.NoError(t, json.Unmarshal(trl[side], &msgs))
		require.Len(t, msgs, 1, "%s: the model's message at the divergence only; TRL gives every completion token to the loss", side)
		assert.Equal(t, "assistant", msgs[0]["role"])
	}
	assert.Contains(t, string(trl["chosen"]), `"cmd":"false"`)
	assert.Contains(t, string(trl["rejected"]), `"cmd":"true"`)
	assert.JSONEq(t, `"ep-2"`, string(trl["rejected_episode_id"]))

	line, ok = EncodePair(p, DPOOpenAI, model.Options{})
	require.True(t, ok)
	var keys map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(line, &keys))
	assert.ElementsMatch(t, []string{"input", "preferred_output", "non_preferred_output"}, slices.Collect(maps.Keys(keys)))
	var oa struct {
		Input struct {
			Messages []map[string]any `json:"messages"`
			Tools    []any            `json:"tools"`
		} `json:"input"`
		Preferred    []map[string]any `json:"preferred_output"`
		NonPreferred []map[string]any `json:"non_preferred_output"`
	}
	require.NoError(t, json.Unmarshal(line, &oa))
	assert.Len(t, oa.Input.Messages, 4)
	require.Len(t, oa.Preferred, 1)
	require.Len(t, oa.NonPreferred, 1)
	args := oa.NonPreferred[0]["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["arguments"]
	assert.Equal(t, `{"cmd":"true"}`, args, "OpenAI: arguments as a string")
	assert.NotContains(t, oa.NonPreferred[0], "reasoning_content")

	same := &Pair{Chosen: c, Rejected: c}
	_, ok = same.PromptLen()
	assert.False(t, ok, "identical conversations: nothing to prefer")

	// The same call answered differently: the prompts part before the
	// model's choices do.
	observed := sampleEpisode()
	observed.Steps[0].Output = "FAIL\n"
	o, err := NewConversation(observed, 0, model.Options{Reasoning: model.ReasoningAll})
	require.NoError(t, err)
	_, ok = (&Pair{Chosen: c, Rejected: o}).PromptLen()
	assert.False(t, ok, "first difference an observation: no shared prompt")
}
