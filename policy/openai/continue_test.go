package openai

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/policy/openai/openaitest"
	"github.com/forkline/forkline/runtime"
)

// A branch of a live parent sends, at its first turn, exactly the request
// the parent would have sent — the parent's messages with the server's own
// ids and arguments — and leaves the parent as it was; a branch rebuilt from
// a record sends the same roles and calls, with canonical arguments.
func TestContinueBranchesTheConversation(t *testing.T) {
	turns := []openaitest.Turn{
		{ToolCalls: []openaitest.ToolCall{call("srv-1", "exec", `{"cmd": "ls"}`)}, PromptIDs: []int32{1, 2}, ResponseIDs: []int32{10}},
		{ToolCalls: []openaitest.ToolCall{call("srv-2", "exec", `{"cmd": "cat a"}`)}, PromptIDs: []int32{1, 2, 10, 20}, ResponseIDs: []int32{11}},
		{ToolCalls: []openaitest.ToolCall{call("srv-3", "done", `{"answer":"x"}`)}, PromptIDs: []int32{1, 2, 10, 20, 11, 21}, ResponseIDs: []int32{12}},
	}
	srv := openaitest.New(t, map[string][]openaitest.Turn{"parent": turns, "child": turns, "rebuilt": turns, "whole": turns})
	opts := map[string]string{"model": "m", "seed": "3"}
	decide := func(p *Policy, h *runtime.History) runtime.Decision {
		t.Helper()
		d, err := p.Decide(context.Background(), *h)
		require.NoError(t, err)
		h.Steps = append(h.Steps, runtime.Step{Index: len(h.Steps), Action: d.Action, Model: d.Model,
			Observation: runtime.Observation{Output: []byte("out\n")}})
		return d
	}
	// The parent decides two steps, then branches.
	for _, name := range []string{"child", "rebuilt"} {
		parent := newPolicy(t, srv, opts)
		h := runtime.History{Instruction: "scenario: " + name}
		decide(parent, &h)
		decide(parent, &h)
		before := len(parent.msgs)

		branch := newPolicy(t, srv, opts)
		var from runtime.Policy = parent
		if name == "rebuilt" {
			from = nil
		}
		require.NoError(t, policy.Continue(context.Background(), branch, h, from))
		d := decide(branch, &h)
		require.Equal(t, runtime.ActDone, d.Action.Kind)
		require.Len(t, parent.msgs, before, "the parent is left as it was")

		// What a parent that went on would have sent at its third turn.
		whole := newPolicy(t, srv, opts)
		wh := runtime.History{Instruction: "scenario: whole"}
		for range 3 {
			decide(whole, &wh)
		}
		want := srv.Requests("whole")
		got := srv.Requests(name)
		require.Len(t, got, 3)
		third, ref := got[2].Messages, want[len(want)-1].Messages
		require.Len(t, third, len(ref))
		for i := range ref {
			require.Equal(t, ref[i].Role, third[i].Role, "message %d", i)
		}
		if name == "child" {
			require.Equal(t, ref[2:], third[2:], "a live branch sends the parent's messages exactly")
			require.Equal(t, `{"cmd": "ls"}`, third[2].ToolCalls[0]["function"].(map[string]any)["arguments"], "as the model wrote them")
		} else {
			require.Equal(t, `{"cmd":"ls"}`, third[2].ToolCalls[0]["function"].(map[string]any)["arguments"], "a rebuilt call has canonical arguments")
			require.Equal(t, "exec", third[2].ToolCalls[0]["function"].(map[string]any)["name"])
			require.Equal(t, ref[3].Content, third[3].Content, "and the results as shown")
		}
	}

	// A policy that already decided cannot take up another history.
	p := newPolicy(t, srv, opts)
	h := runtime.History{Instruction: "scenario: parent"}
	decide(p, &h)
	require.ErrorContains(t, p.Continue(context.Background(), h, nil), "already decided")
}
