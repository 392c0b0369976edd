package vllmsim

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/forkline/forkline/internal/oracle"
)

// splitReasoning is vLLM's qwen3 reasoning parser on a whole (non-streamed)
// output (vllm/reasoning/qwen3_reasoning_parser.py, extract_reasoning):
//   - text up to and including a generated <think> is dropped;
//   - with </think> present, what precedes it is the reasoning and what
//     follows the content (nil when empty);
//   - without </think>: all content when thinking was disabled
//     (chat_template_kwargs enable_thinking=false); else, when a <tool_call>
//     followed by <function=...> (Qwen3.5's XML calls) ends the reasoning
//     implicitly, split there; else the output was cut and all of it is
//     reasoning.
func splitReasoning(output string, thinkingEnabled bool) (reasoning, content *string) {
	if _, after, found := strings.Cut(output, "<think>"); found {
		output = after
	}
	if r, c, found := strings.Cut(output, "</think>"); found {
		return &r, nonEmpty(c)
	}
	if !thinkingEnabled {
		return nil, &output
	}
	if i := strings.Index(output, "<tool_call>"); i >= 0 {
		after := strings.TrimLeft(output[i+len("<tool_call>"):], " \t\n\r\f\v")
		if functionOpen.MatchString(after) {
			return nonEmpty(output[:i]), nonEmpty(output[i:])
		}
	}
	return &output, nil
}

var functionOpen = regexp.MustCompile(`^<function[\s=]`)

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// toolCallPattern is the hermes parser's: a complete call, or an opened one
// running to the end of the output.
var toolCallPattern = regexp.MustCompile(`(?s)<tool_call>(.*?)</tool_call>|<tool_call>(.*)`)

// ToolCall is a parsed call as the response carries it.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is a call's name and its arguments as a JSON string.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// parseToolCallsHermes is vLLM's hermes tool parser on a whole output
// (vllm/tool_parsers/hermes_tool_parser.py, extract_tool_calls): every
// <tool_call> region is json.loads'ed; the arguments are re-dumped with
// json.dumps(..., ensure_ascii=False) (by Python itself, through the
// oracle); the content is the text before the first <tool_call>, nil when
// empty. Any failure (a cut call whose JSON is incomplete, a missing name)
// means no tool calls and the whole output as content.
func parseToolCallsHermes(ctx context.Context, output string, newID func() string) (calls []ToolCall, content *string, err error) {
	if !strings.Contains(output, "<tool_call>") {
		return nil, &output, nil
	}
	for _, m := range toolCallPattern.FindAllStringSubmatch(output, -1) {
		body := m[1]
		if body == "" {
			body = m[2]
		}
		call, ok, err := hermesCall(ctx, body)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, &output, nil
		}
		call.ID = newID()
		calls = append(calls, call)
	}
	return calls, nonEmpty(output[:strings.Index(output, "<tool_call>")]), nil
}

// hermesCall decodes one call body; ok is false where Python's json.loads
// or the key lookups would raise.
func hermesCall(ctx context.Context, body string) (ToolCall, bool, error) {
	trimmed := strings.TrimSpace(body)
	if !json.Valid([]byte(trimmed)) {
		return ToolCall{}, false, nil
	}
	obj, err := parseObject(json.RawMessage(trimmed))
	if err != nil {
		return ToolCall{}, false, nil
	}
	name, ok, err := str(mustGet(obj, "name"))
	if err != nil || !ok {
		return ToolCall{}, false, nil
	}
	args, present := obj.get("arguments")
	if !present {
		return ToolCall{}, false, nil
	}
	dumped, err := oracle.PyJSON(ctx, string(args))
	if err != nil {
		if oracle.Available() != nil {
			return ToolCall{}, false, err
		}
		return ToolCall{}, false, nil
	}
	return ToolCall{Type: "function", Function: FunctionCall{Name: name, Arguments: dumped}}, true, nil
}
