package model

import (
	"encoding/json"
	"fmt"
)

// EncodeJSON is json.Marshal without HTML escaping: <, > and & stay as
// they are in commands and outputs, which is what a model is trained to
// write. Every target encodes JSON with it.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytesBuffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	b := buf.b
	return b[:len(b)-1], nil // Encode appends a newline
}

type bytesBuffer struct{ b []byte }

func (b *bytesBuffer) Write(p []byte) (int, error) { b.b = append(b.b, p...); return len(p), nil }

// MessageValues converts messages into Row values of OpenAI's message
// shape (role, content, reasoning_content, tool_calls, tool_call_id), with
// tool-call arguments as JSON strings: one Arrow type for every tool.
func MessageValues(msgs []Message) []any {
	out, _ := MessageValuesWith(msgs, func(raw json.RawMessage) (any, error) { return string(raw), nil })
	return out
}

// MessageValuesWith is MessageValues with each tool call's arguments turned
// into a value by args (a struct of the union of every action's fields for
// verl-sft, say).
func MessageValuesWith(msgs []Message, args func(json.RawMessage) (any, error)) ([]any, error) {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		v := map[string]any{"role": m.Role, "content": m.Content}
		if m.Reasoning != "" {
			v["reasoning_content"] = m.Reasoning
		}
		if m.ToolCallID != "" {
			v["tool_call_id"] = m.ToolCallID
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]any, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				a, err := args(tc.Arguments)
				if err != nil {
					return nil, fmt.Errorf("tool call %s: %w", tc.ID, err)
				}
				calls[j] = map[string]any{"id": tc.ID, "type": "function",
					"function": map[string]any{"name": tc.Name, "arguments": a}}
			}
			v["tool_calls"] = calls
		}
		out[i] = v
	}
	return out, nil
}

// Mask8 converts a 0/1 token mask to the int8 values of a mask column.
func Mask8(m []int32) []int8 {
	out := make([]int8, len(m))
	for i, v := range m {
		out[i] = int8(v)
	}
	return out
}
