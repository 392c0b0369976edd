package vllmsim

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/forkline/forkline/internal/oracle"
)

// The conversation of every drift scenario: a system prompt, a task, and the
// two tools, keys in the order an OpenAI client sends them.
var (
	driftSystem = map[string]any{"role": "system", "content": "You operate a Linux shell. Call a tool for every step."}
	driftUser   = map[string]any{"role": "user", "content": "List the files in the working directory."}
	driftTools  = []any{
		map[string]any{"type": "function", "function": map[string]any{"name": "exec", "description": "Run a shell command.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}, "required": []any{"cmd"}}}},
		map[string]any{"type": "function", "function": map[string]any{"name": "done", "description": "Finish with an answer.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"answer": map[string]any{"type": "string"}}, "required": []any{"answer"}}}},
	}
	driftObservation = "a.txt\nb.txt"
	canonicalCall    = "<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls -la\"}}\n</tool_call>"
)

// history is how a chat client sends turn 1 back in turn 2.
type history struct {
	// sendReasoning puts the server's reasoning back on the assistant
	// message (as "reasoning").
	sendReasoning bool
	// nullWhitespaceContent sends content null when the parsers left only
	// whitespace.
	nullWhitespaceContent bool
	// textTools sends no tools: the model writes its call as text and each
	// observation is a new user message.
	textTools bool
}

// driftRow is one row of the researched drift table (how Qwen3's template
// re-renders history under vLLM): what the model (or the client)
// does, the deployment, and whether history re-renders as generated.
type driftRow struct {
	name    string
	reply   Reply
	parser  bool // --reasoning-parser qwen3
	kwargs  map[string]any
	history history
	want    bool
	// extra marks a row this test adds to the researched table.
	extra bool
}

var driftTable = []driftRow{
	{name: "no think block", reply: Reply{Text: canonicalCall}, want: true},
	{name: "think block left in content", reply: Reply{Text: "<think>\nI should list the files.\n</think>\n\n" + canonicalCall}, want: true},
	{name: "reasoning parser on, client does not send reasoning back", parser: true,
		reply: Reply{Text: "<think>\nI should list the files.\n</think>\n\n" + canonicalCall}, want: false},
	{name: "reasoning parser on, client sends reasoning back and content null when only whitespace is left", parser: true,
		reply:   Reply{Text: "<think>\nI should list the files.\n</think>\n\n" + canonicalCall},
		history: history{sendReasoning: true, nullWhitespaceContent: true}, want: true},
	{name: "reasoning parser on, client sends reasoning back but keeps the whitespace content", parser: true,
		reply:   Reply{Text: "<think>\nI should list the files.\n</think>\n\n" + canonicalCall},
		history: history{sendReasoning: true}, want: false},
	// The rows without the parser keep the think block in content, as the
	// "think block left in content" row does.
	{name: "empty think block", reply: Reply{Text: "<think>\n\n</think>\n\n" + canonicalCall}, want: false},
	{name: "enable_thinking=false", parser: true, kwargs: map[string]any{"enable_thinking": false},
		reply: Reply{Text: canonicalCall}, history: history{sendReasoning: true, nullWhitespaceContent: true}, want: false},
	{name: "compact tool-call JSON", reply: Reply{Text: "<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\":\"ls -la\"}}\n</tool_call>"}, want: false},
	{name: "a sentence before the tool call", reply: Reply{Text: "I will list the files.\n" + canonicalCall}, want: false},
	{name: "a non-canonical token split of the same text", reply: Reply{Text: canonicalCall, NonCanonical: true}, want: false},
	{name: "text tool mode (each observation a new user turn) with thinking", parser: true,
		reply:   Reply{Text: "<think>\nI should list the files.\n</think>\n\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls -la\"}}"},
		history: history{sendReasoning: true, nullWhitespaceContent: true, textTools: true}, want: false},
	// Not in the researched table: an empty think block with the parser on and
	// the client that fixes the parser row sends the whitespace reasoning
	// back, which the template writes back as the same empty block.
	{name: "empty think block, reasoning parser on, client sends reasoning back and content null", parser: true,
		reply:   Reply{Text: "<think>\n\n</think>\n\n" + canonicalCall},
		history: history{sendReasoning: true, nullWhitespaceContent: true}, want: true, extra: true},
}

// TestDriftTable reproduces the researched drift table against the simulator: for each
// row, turn 1 is rendered and generated, the client sends the history back
// the way a chat client does, and turn 2's prompt ids must (or must not)
// start with turn 1's prompt ids followed by its response ids. The rows come
// out as the table says because the real Qwen3 template and tokenizer
// produce the phenomenon; this is the measure token-in-token-out work is
// checked against.
func TestDriftTable(t *testing.T) {
	oracle.Require(t)
	var table strings.Builder
	fmt.Fprintf(&table, "\n| what the model / client does | history re-renders as generated? | first differing token |\n|---|---|---|\n")
	for _, row := range driftTable {
		t.Run(row.name, func(t *testing.T) {
			got, where := runDriftRow(t, row)
			mark := map[bool]string{true: "yes", false: "**no**"}[got]
			name := row.name
			if row.extra {
				name += " (added)"
			}
			fmt.Fprintf(&table, "| %s | %s | %s |\n", name, mark, where)
			if got != row.want {
				t.Errorf("re-renders as generated = %v, the table says %v (%s)", got, row.want, where)
			}
		})
	}
	t.Log(table.String())
}

func runDriftRow(t *testing.T, row driftRow) (bool, string) {
	t.Helper()
	s := Start(t, Config{
		ReasoningParser: row.parser, ToolParser: true,
		Respond: Replies(row.reply, Reply{Text: "<tool_call>\n{\"name\": \"done\", \"arguments\": {\"answer\": \"a.txt b.txt\"}}\n</tool_call>"}),
	})
	req := map[string]any{
		"model": "Qwen/Qwen3-8B", "messages": []any{driftSystem, driftUser},
		"return_token_ids": true, "logprobs": true,
	}
	if !row.history.textTools {
		req["tools"] = driftTools
	}
	if row.kwargs != nil {
		req["chat_template_kwargs"] = row.kwargs
	}
	status, resp1 := post(t, s, "/v1/chat/completions", req)
	if status != 200 {
		t.Fatalf("turn 1: %d %v", status, resp1)
	}
	p1 := ids(t, resp1["prompt_token_ids"])
	c1 := choice0(t, resp1)
	r1 := ids(t, c1["token_ids"])

	msg := c1["message"].(map[string]any)
	assistant := map[string]any{"role": "assistant", "content": msg["content"]}
	if content, ok := msg["content"].(string); ok && row.history.nullWhitespaceContent && strings.TrimSpace(content) == "" {
		assistant["content"] = nil
	}
	if calls, ok := msg["tool_calls"]; ok {
		assistant["tool_calls"] = calls
	}
	if r, ok := msg["reasoning"].(string); ok && row.history.sendReasoning {
		assistant["reasoning"] = r
	}
	messages := []any{driftSystem, driftUser, assistant}
	if row.history.textTools {
		messages = append(messages, map[string]any{"role": "user", "content": "Observation:\n" + driftObservation})
	} else {
		calls, _ := msg["tool_calls"].([]any)
		if len(calls) != 1 {
			t.Fatalf("turn 1 should hold one parsed tool call, got %v", msg)
		}
		id := calls[0].(map[string]any)["id"]
		messages = append(messages, map[string]any{"role": "tool", "tool_call_id": id, "content": driftObservation})
	}
	req["messages"] = messages
	status, resp2 := post(t, s, "/v1/chat/completions", req)
	if status != 200 {
		t.Fatalf("turn 2: %d %v", status, resp2)
	}
	p2 := ids(t, resp2["prompt_token_ids"])

	generated := append(append([]int32{}, p1...), r1...)
	if hasPrefix(p2, generated) {
		return true, "—"
	}
	i := firstMismatch(p2, generated)
	return false, describeMismatch(t, generated, p2, i)
}

// describeMismatch shows the first differing tokens as the generated and
// re-rendered sequences hold them.
func describeMismatch(t *testing.T, generated, rerendered []int32, i int) string {
	t.Helper()
	ctx := context.Background()
	window := func(seq []int32) string {
		end := min(i+2, len(seq))
		if i >= len(seq) {
			return "(end)"
		}
		strs, err := oracle.DecodeTokens(ctx, "qwen3", seq[i:end])
		if err != nil {
			t.Fatal(err)
		}
		q := make([]string, len(strs))
		for k, s := range strs {
			q[k] = fmt.Sprintf("%q", s)
		}
		return strings.Join(q, ", ")
	}
	return fmt.Sprintf("at %d: generated %s, re-rendered %s", i, window(generated), window(rerendered))
}
