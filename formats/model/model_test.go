package model

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

func ptr[T any](v T) *T { return &v }

// sampleEpisode has one step of each shape: a command with model text and
// reasoning, a failing command, a file read that failed, a screenshot by
// hash, and a done action.
func sampleEpisode() *Episode {
	id := "ep-1"
	return &Episode{
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

func roles(msgs []Message) []string {
	out := []string{}
	for _, m := range msgs {
		out = append(out, m.Role)
	}
	return out
}

func TestMessages(t *testing.T) {
	msgs, err := Messages(sampleEpisode(), Options{Reasoning: ReasoningAll})
	require.NoError(t, err)
	assert.Equal(t, []string{"system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"}, roles(msgs))
	assert.Equal(t, "Fix the failing test in ./calc.", msgs[1].Content)

	first := msgs[2]
	assert.Equal(t, "Let me run the tests.", first.Content)
	assert.Equal(t, "tests first", first.Reasoning)
	require.Len(t, first.ToolCalls, 1)
	assert.Equal(t, ToolCall{ID: "call_0", Name: "exec", Arguments: json.RawMessage(`{"cmd":"go test ./... 2>&1 | head -n 5 > /tmp/x"}`),
		Text: `{"cmd":"go test ./... 2>&1 | head -n 5 > /tmp/x"}`}, first.ToolCalls[0],
		"without the server's record, arguments are the action's fields, kind removed, no HTML escapes")
	assert.Equal(t, "call_0", msgs[3].ToolCallID)
	assert.Equal(t, "exit code: 0\nok\n", msgs[3].Content, "observations read as the policy shows them (aci.ObservationText)")

	assert.Equal(t, `{"cmd":"false","timeout_ms":5000}`, string(msgs[4].ToolCalls[0].Arguments))
	assert.Equal(t, "exit code: 2\nboom", msgs[5].Content)
	assert.Equal(t, "error: not_found\n", msgs[7].Content)
	assert.Equal(t, `{}`, string(msgs[8].ToolCalls[0].Arguments))
	assert.Equal(t, "[forkline: a 640x480 screenshot was taken; this policy sends text only]\n", msgs[9].Content)
	for _, m := range msgs {
		assert.False(t, m.Failed)
	}
}

// Finding 1: the done call the model made is the last assistant turn, a
// tool call with its arguments — not a plain message with the answer.
func TestDoneIsAToolCall(t *testing.T) {
	msgs, err := Messages(sampleEpisode(), Options{})
	require.NoError(t, err)
	done := msgs[len(msgs)-1]
	assert.Equal(t, RoleAssistant, done.Role)
	assert.Equal(t, "All done.", done.Content, "the model's text stays its text")
	require.Len(t, done.ToolCalls, 1)
	assert.Equal(t, "done", done.ToolCalls[0].Name)
	assert.Equal(t, `{"answer":"fixed"}`, string(done.ToolCalls[0].Arguments))

	ep := sampleEpisode()
	ep.Conversation.SystemPrompt = ""
	ep.Steps = ep.Steps[4:]
	ep.Steps[0].StepIndex = 0
	ep.Steps[0].ActionJSON = `{"kind":"done"}`
	ep.Steps[0].ModelText = nil
	msgs, err = Messages(ep, Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"user", "assistant"}, roles(msgs))
	assert.Equal(t, "", msgs[1].Content)
	assert.Equal(t, `{}`, string(msgs[1].ToolCalls[0].Arguments), "done without an answer is still the call")
}

// Finding 8: the calls the server returned are written as the model wrote
// them — key order, spacing decoded to the same object, every parallel
// call with its own tool message — not re-serialized from the action.
func TestRecordedToolCallsAreKept(t *testing.T) {
	ep := sampleEpisode()
	ep.Steps[0].ToolCalls = ptr(`[{"id":"chatcmpl-tool-7","name":"exec","arguments":"{\"cmd\": \"go test ./... 2>&1 | head -n 5 > /tmp/x\", \"timeout_ms\": 100}"},` +
		`{"id":"chatcmpl-tool-8","name":"read_file","arguments":"{\"path\": \"calc.go\"}"}]`)
	msgs, err := Messages(ep, Options{})
	require.NoError(t, err)
	calls := msgs[2].ToolCalls
	require.Len(t, calls, 2)
	assert.Equal(t, `{"cmd":"go test ./... 2>&1 | head -n 5 > /tmp/x","timeout_ms":100}`, string(calls[0].Arguments))
	assert.Equal(t, `{"cmd": "go test ./... 2>&1 | head -n 5 > /tmp/x", "timeout_ms": 100}`, calls[0].Text, "the string form is the model's text")
	assert.Equal(t, "chatcmpl-tool-7", calls[0].ID)
	assert.Equal(t, Message{Role: RoleTool, Content: "exit code: 0\nok\n", ToolCallID: "chatcmpl-tool-7", Step: 0}, msgs[3])
	assert.Equal(t, Message{Role: RoleTool, Content: aci.NotRunResult, ToolCallID: "chatcmpl-tool-8", Step: 0}, msgs[4])
	assert.Equal(t, RoleAssistant, msgs[5].Role)

	ep.Steps[0].ToolCalls = ptr(`[{"id":"x","name":"exec","arguments":"{\"cmd\": \"ls"}]`)
	msgs, err = Messages(ep, Options{})
	require.NoError(t, err)
	assert.Equal(t, `"{\"cmd\": \"ls"`, string(msgs[2].ToolCalls[0].Arguments), "broken arguments stay the model's text")
}

// A turn that ended the episode without a valid action is marked Failed
// (chat-jsonl gives it weight 0); nothing follows it.
func TestFailedTurn(t *testing.T) {
	ep := sampleEpisode()
	ep.Steps[4] = schemas.StepRow{EpisodeID: "ep-1", StepIndex: 4, ActionJSON: "null", ModelText: ptr("I think it works now.")}
	msgs, err := Messages(ep, Options{})
	require.NoError(t, err)
	last := msgs[len(msgs)-1]
	assert.Equal(t, Message{Role: RoleAssistant, Content: "I think it works now.", Step: 4, Failed: true}, last)
}

// Finding 8: reasoning is kept where the model saw it. The policy sent no
// reasoning back, so only the last turn keeps its own.
func TestReasoningAsShown(t *testing.T) {
	ep := sampleEpisode()
	ep.Steps[4].Reasoning = ptr("all green")
	reasoning := func(o Options) []string {
		msgs, err := Messages(ep, o)
		require.NoError(t, err)
		var out []string
		for _, m := range msgs {
			if m.Role == RoleAssistant {
				out = append(out, m.Reasoning)
			}
		}
		return out
	}
	assert.Equal(t, []string{"", "", "", "", "all green"}, reasoning(Options{}))
	assert.Equal(t, []string{"tests first", "", "", "", "all green"}, reasoning(Options{Reasoning: ReasoningAll}))
	assert.Equal(t, []string{"", "", "", "", ""}, reasoning(Options{Reasoning: ReasoningNone}))
	ep.Conversation.SendReasoning = &[]bool{true}[0]
	assert.Equal(t, []string{"tests first", "", "", "", "all green"}, reasoning(Options{}), "a policy that sent reasoning back showed all of it")
}

// Finding 3: a message has exactly the keys that apply to it; the options
// choose the argument encoding and the content beside calls.
func TestEncodeMessage(t *testing.T) {
	ep := sampleEpisode()
	ep.Steps[0].ModelText = nil
	msgs, err := Messages(ep, Options{})
	require.NoError(t, err)
	assert.Equal(t, `{"role":"system","content":"You are a careful engineer."}`, string(EncodeMessage(msgs[0], Options{})))
	assert.Equal(t, `{"role":"assistant","content":"","tool_calls":[{"id":"call_0","type":"function","function":{"name":"exec","arguments":{"cmd":"go test ./... 2>&1 | head -n 5 > /tmp/x"}}}]}`,
		string(EncodeMessage(msgs[2], Options{})))
	assert.Equal(t, `{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"exec","arguments":"{\"cmd\":\"go test ./... 2>&1 | head -n 5 > /tmp/x\"}"}}]}`,
		string(EncodeMessage(msgs[2], Options{Args: ArgsString, CallContent: ContentNull})))
	assert.Equal(t, `{"role":"tool","content":"exit code: 0\nok\n","tool_call_id":"call_0","weight":1}`,
		string(EncodeMessage(msgs[3], Options{}, Member{"weight", json.RawMessage("1")})))
	last := msgs[len(msgs)-1]
	last.Reasoning = "r"
	assert.Equal(t, `{"role":"assistant","content":"All done.","reasoning_content":"r","tool_calls":[{"id":"call_4","type":"function","function":{"name":"done","arguments":{"answer":"fixed"}}}]}`,
		string(EncodeMessage(last, Options{Args: ArgsObject, CallContent: ContentNull})), "content null only without text")
}

func TestMessagesRefuseBadActions(t *testing.T) {
	ep := sampleEpisode()
	ep.Steps[1].ActionJSON = `{"kind":"exec"}`
	_, err := Messages(ep, Options{})
	require.ErrorContains(t, err, "episode ep-1 step 1")
	ep = sampleEpisode()
	ep.Steps[1].ToolCalls = ptr(`{not json`)
	_, err = Messages(ep, Options{})
	require.ErrorContains(t, err, "episode ep-1 step 1: tool_calls")
}

// Replicas of one task from one golden state with one prompt share a
// group; a collector's group_id wins.
func TestGroupID(t *testing.T) {
	a, b := sampleEpisode(), sampleEpisode()
	b.Row.EpisodeID = "ep-2"
	a.Row.GoldenID, b.Row.GoldenID = "g1", "g1"
	assert.Equal(t, a.GroupID(), b.GroupID())
	assert.Len(t, a.GroupID(), 32)
	for _, change := range []func(e *Episode){
		func(e *Episode) { e.Row.GoldenID = "g2" },
		func(e *Episode) { e.Row.TaskHash = "other" },
		func(e *Episode) { e.Row.TaskID = "other" },
		func(e *Episode) { e.Instruction = "other" },
		func(e *Episode) { e.Conversation.SystemPrompt = "other" },
		func(e *Episode) { e.Conversation.Actions = []runtime.ActionKind{runtime.ActDone} },
	} {
		c := sampleEpisode()
		c.Row.GoldenID = "g1"
		change(c)
		assert.NotEqual(t, a.GroupID(), c.GroupID())
	}
	b.Row.GroupID = ptr("branch-7")
	assert.Equal(t, "branch-7", b.GroupID())
}

func TestToolResult(t *testing.T) {
	for _, tc := range []struct {
		name  string
		row   schemas.StepRow
		limit int
		want  string
	}{
		{"ok command", schemas.StepRow{ActionJSON: `{"kind":"exec","cmd":"x"}`, Output: "hi\n"}, 0, "exit code: 0\nhi\n"},
		{"command without output", schemas.StepRow{ActionJSON: `{"kind":"exec","cmd":"x"}`}, 0, "exit code: 0\n(no output)"},
		{"timeout", schemas.StepRow{ActionJSON: `{"kind":"exec","cmd":"x"}`, Output: "partial\n", ExitCode: -1, IsError: true, ErrorKind: "timeout", TimedOut: true}, 0,
			"exit code: -1\n[forkline: the action timed out and was killed]\npartial\n"},
		{"file written", schemas.StepRow{ActionJSON: `{"kind":"write_file","path":"a"}`, ExitCode: -1}, 0, ""},
		{"refused path", schemas.StepRow{ActionJSON: `{"kind":"write_file","path":"/etc/x"}`, ExitCode: -1, IsError: true, ErrorKind: "path_refused"}, 0, "error: path_refused\n"},
		{"screenshot kept whole", schemas.StepRow{ActionJSON: `{"kind":"click","x":1,"y":1}`, ExitCode: -1, Screenshot: []byte{1}, ScreenW: 3, ScreenH: 4}, 0,
			"[forkline: a 3x4 screenshot was taken; this policy sends text only]\n"},
		{"capped", schemas.StepRow{ActionJSON: `{"kind":"read_file","path":"a"}`, Output: "0123456789abcdefghij", ExitCode: -1}, 10,
			"01234\n[... forkline: 10 bytes elided from the middle of this output ...]\nfghij"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ToolResult(&tc.row, tc.limit)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// A run whose policy wrote tool calls as text exports the model's text as
// it was — the done call too — and the observations as user messages, with
// no function tools.
func TestMessagesWithTextToolCalls(t *testing.T) {
	ep := sampleEpisode()
	ep.Conversation.ToolMode = policy.ToolsText
	ep.Steps[0].ModelText = ptr("<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>")
	ep.Steps[4].ModelText = ptr("Thinking aloud. <tool_call>{\"name\":\"done\",\"arguments\":{\"answer\":\"fixed\"}}</tool_call>")
	ep.Steps[1].ModelText = nil
	msgs, err := Messages(ep, Options{})
	require.NoError(t, err)
	assert.Equal(t, Message{Role: RoleAssistant, Content: *ep.Steps[0].ModelText, Step: 0}, msgs[2])
	assert.Equal(t, Message{Role: RoleUser, Content: "exit code: 0\nok\n", Step: 0}, msgs[3])
	assert.Equal(t, "<tool_call>\n{\"name\":\"exec\",\"arguments\":{\"cmd\":\"false\",\"timeout_ms\":5000}}\n</tool_call>", msgs[4].Content,
		"a step without the model's text gets its call written in the dialect")
	last := msgs[len(msgs)-1]
	assert.Equal(t, *ep.Steps[4].ModelText, last.Content, "finding 1: the done call as the model wrote it, not the answer")
	assert.Nil(t, ep.Tools())
	ep.Conversation.ToolMode = policy.ToolsNative
	ep.Conversation.Actions = []runtime.ActionKind{runtime.ActExec, runtime.ActDone}
	assert.Equal(t, string(aci.OfferedToolsJSON(ep.Conversation.Actions)), string(ep.Tools()), "tools in aci's key order")
}

func TestRewards(t *testing.T) {
	ep := sampleEpisode()
	require.NotNil(t, ep.Reward())
	assert.Equal(t, 1.0, *ep.Reward())
	assert.Equal(t, -0.5, *ep.StepReward(1))
	assert.Nil(t, ep.StepReward(0))
	ep.RewardName = "missing"
	assert.Nil(t, ep.Reward())
	ep.RewardName = "verify"
	ep.Rewards[1].Value = nil
	assert.Nil(t, ep.Reward(), "a null reward stays null")
}

func TestScreenshot(t *testing.T) {
	ep := sampleEpisode()
	b, err := ep.Screenshot(3)
	require.NoError(t, err)
	assert.Nil(t, b, "no blob resolver: no bytes")
	ep.Blob = func(sha string) ([]byte, error) { return []byte("png:" + sha), nil }
	b, err = ep.Screenshot(3)
	require.NoError(t, err)
	assert.Equal(t, "png:abc", string(b))
	ep.Steps[3].Screenshot = []byte("inline")
	b, _ = ep.Screenshot(3)
	assert.Equal(t, "inline", string(b), "bytes in the row win")
}
