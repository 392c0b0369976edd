package openai

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

// A harness's own tool, as it offers it.
var bashTool = json.RawMessage(`{"type":"function","function":{"name":"Bash","description":"Run a command","parameters":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}}`)

const bashCall = "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>"

// TestThreadCarriesAHarnessConversation: a thread sends the messages and
// tools its caller brings; in token-in-token-out mode each call's prompt
// extends the last one's ids exactly, and a restarted call renders the
// new conversation from scratch; in chat mode the reply goes back to the
// server as the model produced it, whatever the caller echoed.
func TestThreadCarriesAHarnessConversation(t *testing.T) {
	for _, mode := range []string{"tito", "chat"} {
		t.Run(mode, func(t *testing.T) {
			s := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true,
				Respond: vllmsim.Replies(vllmsim.Reply{Text: think + bashCall}, vllmsim.Reply{Text: think + "Two files."}, vllmsim.Reply{Text: think + "Again."})})
			src, err := Open(policy.Options{Params: map[string]string{"base_url": s.URL + "/v1", "tokens": mode, "max_tokens": "200"}})
			require.NoError(t, err)
			th, err := NewThread(src, "episode-1")
			require.NoError(t, err)
			ctx := context.Background()
			first := []ThreadMessage{{Role: "system", Content: "You are a harness."}, {Role: "user", Content: "List the files."}}
			r1, err := th.Call(ctx, first, []json.RawMessage{bashTool}, false)
			require.NoError(t, err)
			require.Equal(t, "tool_calls", r1.Finish)
			require.Len(t, r1.Calls, 1)
			require.Equal(t, "Bash", r1.Calls[0].Name)
			require.JSONEq(t, `{"command":"ls"}`, r1.Calls[0].Arguments)
			require.Equal(t, "\nI should list the files.\n", r1.Reasoning)

			// The harness sends back the result; its echo of the call
			// (re-encoded arguments) is not sent again: the thread holds
			// the reply.
			r2, err := th.Call(ctx, []ThreadMessage{{Role: "tool", ToolCallID: r1.Calls[0].ID, Content: "a.txt\nb.txt"}}, []json.RawMessage{bashTool}, false)
			require.NoError(t, err)
			require.Equal(t, "stop", r2.Finish)
			require.Equal(t, "\n\nTwo files.", r2.Content, "as vLLM's reasoning parser leaves it")
			gens := generations(s)
			require.Len(t, gens, 2)
			if mode == "tito" {
				prefix := append(slices.Clone(r1.Event.PromptIDs), r1.Event.ResponseIDs...)
				require.True(t, slices.Equal(r2.Event.PromptIDs[:len(prefix)], prefix), "call 2 extends call 1's ids exactly")
				require.Equal(t, runtime.TokenPathTITO, r2.Event.Provenance.Path)
			} else {
				require.Equal(t, runtime.TokenPathChat, r2.Event.Provenance.Path)
				var sent []map[string]any
				require.NoError(t, json.Unmarshal(gens[1].Messages, &sent))
				require.Len(t, sent, 4, "system, user, the reply as produced, the result")
				require.Equal(t, "assistant", sent[2]["role"])
			}
			require.Contains(t, gens[1].Prompt, "<tool_response>\na.txt\nb.txt\n</tool_response>")
			require.Contains(t, gens[0].Prompt, `"name": "Bash"`, "the harness's tool is in the rendered prompt")

			// A rewritten history starts over.
			r3, err := th.Call(ctx, []ThreadMessage{{Role: "system", Content: "Summary so far: two files."}, {Role: "user", Content: "Go on."}}, nil, true)
			require.NoError(t, err)
			require.Equal(t, "Again.", strings.TrimSpace(r3.Content))
			require.False(t, slices.Equal(r3.Event.PromptIDs[:min(len(r3.Event.PromptIDs), len(r1.Event.PromptIDs))], r1.Event.PromptIDs[:min(len(r3.Event.PromptIDs), len(r1.Event.PromptIDs))]))
			require.True(t, strings.HasPrefix(generations(s)[2].Prompt, "<|im_start|>system\nSummary so far"))
		})
	}
}

// Under tool_mode=text a thread cannot offer a harness's tools.
func TestThreadRefusesTextToolMode(t *testing.T) {
	src, err := Open(policy.Options{Params: map[string]string{"base_url": "http://127.0.0.1:9/v1", "tool_mode": "text"}})
	require.NoError(t, err)
	_, err = NewThread(src, "e")
	require.ErrorIs(t, err, ErrThreadTools)
}
