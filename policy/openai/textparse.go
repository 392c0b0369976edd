package openai

import (
	"encoding/json"
	"regexp"
	"strings"
)

// The client-side parsers of token-in-token-out turns. They mirror what
// vLLM's parsers do to a chat reply, so that a turn records the same
// content, reasoning and tool calls whichever path produced it.

// splitThink splits a <think>...</think> block off generated text (the
// qwen3 reasoning parser): with </think>, the reasoning is what precedes
// it, after a leading <think> if the model wrote one (Qwen3 writes it;
// thinking-only templates put it in the generation prompt), and the content
// is what follows, nil when empty. A <think> never closed is a reply cut
// while thinking: all reasoning. Text with neither tag is all content:
// unlike vLLM's parser, which calls such a reply reasoning when thinking is
// on, a reply that did not think is taken as it reads, so that its tool
// calls still count.
func splitThink(text string) (reasoning, content *string) {
	if r, c, found := strings.Cut(text, "</think>"); found {
		if _, after, open := strings.Cut(r, "<think>"); open {
			r = after
		}
		return &r, nonEmpty(c)
	}
	if _, after, open := strings.Cut(text, "<think>"); open {
		return &after, nil
	}
	return nil, &text
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// hermesCallRE is vLLM's hermes parser's: complete calls, or an opened one
// running to the end of the text.
var hermesCallRE = regexp.MustCompile(`(?s)<tool_call>(.*?)</tool_call>|<tool_call>(.*)`)

// parseHermes reads <tool_call>{"name": ..., "arguments": {...}}</tool_call>
// blocks the way vLLM's hermes parser does: every block must decode, with a
// name and arguments, or none counts and the whole text stays content; the
// content is the text before the first block, nil when empty. Arguments are
// kept as written (an object, re-encoded as the JSON string of the wire
// form).
func parseHermes(text string) (calls []toolCall, content *string) {
	if !strings.Contains(text, "<tool_call>") {
		return nil, &text
	}
	for _, m := range hermesCallRE.FindAllStringSubmatch(text, -1) {
		body := m[1]
		if body == "" {
			body = m[2]
		}
		var call struct {
			Name      *string         `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &call); err != nil || call.Name == nil || len(call.Arguments) == 0 {
			return nil, &text
		}
		args, _ := json.Marshal(string(call.Arguments))
		calls = append(calls, toolCall{Type: "function", Function: toolCallFunc{Name: *call.Name, Arguments: args}})
	}
	return calls, nonEmpty(text[:strings.Index(text, "<tool_call>")])
}
