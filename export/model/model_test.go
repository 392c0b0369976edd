package model

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

func TestMessages(t *testing.T) {
	msgs, err := Messages(sampleEpisode())
	require.NoError(t, err)
	roles := []string{}
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	assert.Equal(t, []string{"system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"}, roles)
	assert.Equal(t, "Fix the failing test in ./calc.", msgs[1].Content)

	first := msgs[2]
	assert.Equal(t, "Let me run the tests.", first.Content)
	assert.Equal(t, "tests first", first.Reasoning)
	require.Len(t, first.ToolCalls, 1)
	assert.Equal(t, ToolCall{ID: "call_0", Name: "exec", Arguments: json.RawMessage(`{"cmd":"go test ./... 2>&1 | head -n 5 > /tmp/x"}`)}, first.ToolCalls[0],
		"arguments are the action's fields, kind removed, no HTML escapes")
	assert.Equal(t, "call_0", msgs[3].ToolCallID)
	assert.Equal(t, "exit code: 0\nok\n", msgs[3].Content, "observations read as the policy shows them (aci.ObservationText)")

	assert.Equal(t, `{"cmd":"false","timeout_ms":5000}`, string(msgs[4].ToolCalls[0].Arguments))
	assert.Equal(t, "exit code: 2\nboom", msgs[5].Content)
	assert.Equal(t, "error: not_found\n", msgs[7].Content)
	assert.Equal(t, `{}`, string(msgs[8].ToolCalls[0].Arguments))
	assert.Equal(t, "[forkline: a 640x480 screenshot was taken; this policy sends text only]\n", msgs[9].Content)

	done := msgs[10]
	assert.Equal(t, "fixed", done.Content, "a done action is an assistant message with the answer")
	assert.Empty(t, done.ToolCalls)
}

func TestMessagesWithoutSystemOrAnswer(t *testing.T) {
	ep := sampleEpisode()
	ep.Conversation.SystemPrompt = ""
	ep.Steps = ep.Steps[4:]
	ep.Steps[0].StepIndex = 0
	ep.Steps[0].ActionJSON = `{"kind":"done"}`
	msgs, err := Messages(ep)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	assert.Equal(t, RoleUser, msgs[0].Role)
	assert.Equal(t, "All done.", msgs[1].Content, "without an answer, the model's text")
}

func TestMessagesRefuseBadActions(t *testing.T) {
	ep := sampleEpisode()
	ep.Steps[1].ActionJSON = `{"kind":"exec"}`
	_, err := Messages(ep)
	require.ErrorContains(t, err, "episode ep-1 step 1")
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
// it was and the observations as user messages, with no function tools.
func TestMessagesWithTextToolCalls(t *testing.T) {
	ep := sampleEpisode()
	ep.Conversation.ToolMode = policy.ToolsText
	ep.Steps[0].ModelText = ptr("<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>")
	msgs, err := Messages(ep)
	require.NoError(t, err)
	assert.Equal(t, RoleAssistant, msgs[2].Role)
	assert.Equal(t, *ep.Steps[0].ModelText, msgs[2].Content)
	assert.Empty(t, msgs[2].ToolCalls)
	assert.Equal(t, Message{Role: RoleUser, Content: "exit code: 0\nok\n"}, msgs[3])
	assert.Nil(t, ep.Tools())
	ep.Conversation.ToolMode = policy.ToolsNative
	ep.Conversation.Actions = []runtime.ActionKind{runtime.ActExec, runtime.ActDone}
	require.Len(t, ep.Tools(), 2)
	assert.Equal(t, "exec", ep.Tools()[0]["function"].(map[string]any)["name"])
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
