package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Anthropic Messages (https://docs.anthropic.com/en/api/messages and its
// streaming page): a request's system prompt is a string or text blocks;
// messages alternate user and assistant (Claude Code also sends system
// messages between them), each content a string or blocks — text, image,
// tool_use (assistant), tool_result (user), thinking and redacted_thinking
// (assistant); tools are {name, description, input_schema}.

type anthropicRequest struct {
	Model     string             `json:"model"`
	System    json.RawMessage    `json:"system"`
	Messages  []anthropicMessage `json:"messages"`
	Tools     []json.RawMessage  `json:"tools"`
	MaxTokens int                `json:"max_tokens"`
	Stream    bool               `json:"stream"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type anthropicTool struct {
	Type         string          `json:"type"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	DeferLoading bool            `json:"defer_loading"`
}

// decodeMessages translates a Messages request.
func decodeMessages(body []byte) (*Call, error) {
	var req anthropicRequest
	if err := decodeJSON("Messages", body, &req); err != nil {
		return nil, err
	}
	c := &Call{Model: req.Model, Stream: req.Stream, MaxTokens: req.MaxTokens}
	if len(req.System) > 0 && string(req.System) != "null" {
		sys, err := anthropicText(req.System, "system")
		if err != nil {
			return nil, err
		}
		c.Messages = append(c.Messages, Message{Role: RoleSystem, Content: sys})
	}
	for i, m := range req.Messages {
		msgs, err := anthropicMessages(m)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		c.Messages = append(c.Messages, msgs...)
	}
	for i, raw := range req.Tools {
		var t anthropicTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, untranslatable("tools[%d]: %v", i, err)
		}
		switch {
		case t.Type != "" && t.Type != "custom":
			c.Dropped = append(c.Dropped, fmt.Sprintf("%s (a hosted tool, %s)", t.Name, t.Type))
		case t.DeferLoading:
			c.Dropped = append(c.Dropped, t.Name+" (deferred until the harness loads it)")
		default:
			c.Tools = append(c.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: json.RawMessage(compactJSON(t.InputSchema))})
		}
	}
	return c, nil
}

// anthropicText is a string or text blocks as one text (blocks joined by
// "\n"); any other block cannot be translated.
func anthropicText(raw json.RawMessage, where string) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", untranslatable("%s: neither a string nor content blocks: %v", where, err)
	}
	var parts []string
	for _, b := range blocks {
		if b.Type != "text" {
			return "", untranslatable("%s: a %s block (only text is translated)", where, b.Type)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n"), nil
}

// anthropicMessages translates one message: a user message's tool results
// become tool messages, in order, and its text blocks user messages
// between them; an assistant message's thinking, text and tool_use blocks
// one assistant message.
func anthropicMessages(m anthropicMessage) ([]Message, error) {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		role := m.Role
		if role != RoleUser && role != RoleAssistant && role != RoleSystem {
			return nil, untranslatable("role %q", m.Role)
		}
		return []Message{{Role: role, Content: s}}, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, untranslatable("content is neither a string nor blocks: %v", err)
	}
	switch m.Role {
	case RoleAssistant:
		out := Message{Role: RoleAssistant}
		var text, thinking []string
		for _, b := range blocks {
			switch b.Type {
			case "text":
				text = append(text, b.Text)
			case "thinking":
				thinking = append(thinking, b.Thinking)
			case "redacted_thinking":
				// Encrypted reasoning of another model: nothing to show.
			case "tool_use":
				out.ToolCalls = append(out.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: compactJSON(b.Input)})
			default:
				return nil, untranslatable("an assistant %s block (text, thinking and tool_use are translated)", b.Type)
			}
		}
		out.Content, out.Reasoning = strings.Join(text, "\n"), strings.Join(thinking, "\n")
		return []Message{out}, nil
	case RoleUser, RoleSystem:
		var out []Message
		var text []string
		flush := func() {
			if len(text) > 0 {
				out = append(out, Message{Role: m.Role, Content: strings.Join(text, "\n")})
				text = nil
			}
		}
		for _, b := range blocks {
			switch b.Type {
			case "text":
				text = append(text, b.Text)
			case "tool_result":
				if m.Role != RoleUser {
					return nil, untranslatable("a tool_result in a %s message", m.Role)
				}
				flush()
				res := ""
				if len(b.Content) > 0 && string(b.Content) != "null" {
					var err error
					if res, err = anthropicText(b.Content, "tool_result "+b.ToolUseID); err != nil {
						return nil, err
					}
				}
				out = append(out, Message{Role: RoleTool, ToolCallID: b.ToolUseID, Content: res, IsError: b.IsError})
			default:
				return nil, untranslatable("a %s block in a %s message (text and tool_result are translated)", b.Type, m.Role)
			}
		}
		flush()
		return out, nil
	}
	return nil, untranslatable("role %q", m.Role)
}

// writeMessages answers a Messages call.
func writeMessages(st *stream, c *Call, rep *Reply, err error) {
	if err != nil {
		// Only a stream gets here with an error: its headers are out.
		st.event("error", marshal(anthropicError(asError(err))))
		return
	}
	id := newID("msg_")
	stop := "end_turn"
	switch rep.Finish {
	case FinishToolCalls:
		stop = "tool_use"
	case FinishLength:
		stop = "max_tokens"
	}
	if len(rep.Calls) > 0 && rep.Finish != FinishLength {
		stop = "tool_use"
	}
	var blocks []map[string]any
	if rep.Reasoning != "" {
		blocks = append(blocks, map[string]any{"type": "thinking", "thinking": rep.Reasoning, "signature": thinkingSignature})
	}
	if rep.Content != "" || (len(rep.Calls) == 0 && rep.Reasoning == "") {
		blocks = append(blocks, map[string]any{"type": "text", "text": rep.Content})
	}
	for _, tc := range rep.Calls {
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": argumentsObject(tc.Arguments)})
	}
	usage := map[string]int{"input_tokens": rep.PromptTokens, "output_tokens": rep.CompletionTokens,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	msg := map[string]any{"id": id, "type": "message", "role": "assistant", "model": c.Model,
		"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": usage}
	if st.f == nil {
		writeJSON(st.w, 200, msg)
		return
	}
	start := map[string]any{"id": id, "type": "message", "role": "assistant", "model": c.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": rep.PromptTokens, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
	st.event("message_start", marshal(map[string]any{"type": "message_start", "message": start}))
	for i, b := range blocks {
		var open map[string]any
		var delta map[string]any
		switch b["type"] {
		case "thinking":
			open = map[string]any{"type": "thinking", "thinking": "", "signature": ""}
			delta = map[string]any{"type": "thinking_delta", "thinking": b["thinking"]}
		case "text":
			open = map[string]any{"type": "text", "text": ""}
			delta = map[string]any{"type": "text_delta", "text": b["text"]}
		case "tool_use":
			open = map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}
			delta = map[string]any{"type": "input_json_delta", "partial_json": string(b["input"].(json.RawMessage))}
		}
		st.event("content_block_start", marshal(map[string]any{"type": "content_block_start", "index": i, "content_block": open}))
		st.event("content_block_delta", marshal(map[string]any{"type": "content_block_delta", "index": i, "delta": delta}))
		if b["type"] == "thinking" {
			st.event("content_block_delta", marshal(map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "signature_delta", "signature": thinkingSignature}}))
		}
		st.event("content_block_stop", marshal(map[string]any{"type": "content_block_stop", "index": i}))
	}
	st.event("message_delta", marshal(map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": rep.CompletionTokens}}))
	st.event("message_stop", marshal(map[string]any{"type": "message_stop"}))
}

// thinkingSignature signs the thinking blocks the gateway sends: Anthropic
// signs its own so that they can be sent back; harnesses send back what
// they got, and the gateway needs no signature to trust its own record.
const thinkingSignature = "forkline-gateway"
