package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// OpenAI Responses (https://platform.openai.com/docs/api-reference/responses
// and its streaming events): instructions and input (a string, or items:
// messages with input_text/output_text parts, reasoning, function_call and
// function_call_output) make the conversation; tools are flat
// {type: function, name, description, parameters}. Codex sends every call
// whole (store: false), so previous_response_id is not followed.

type responsesRequest struct {
	Model              string            `json:"model"`
	Instructions       string            `json:"instructions"`
	Input              json.RawMessage   `json:"input"`
	Tools              []json.RawMessage `json:"tools"`
	Stream             bool              `json:"stream"`
	MaxOutputTokens    int               `json:"max_output_tokens"`
	PreviousResponseID string            `json:"previous_response_id"`
}

type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Summary   []responsesPart `json:"summary"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

type responsesPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// decodeResponses translates a Responses request. Consecutive reasoning,
// assistant message and function_call items make one assistant message.
func decodeResponses(body []byte) (*Call, error) {
	var req responsesRequest
	if err := decodeJSON("Responses", body, &req); err != nil {
		return nil, err
	}
	if req.PreviousResponseID != "" {
		return nil, untranslatable("previous_response_id: the gateway keeps no responses; send the whole input (store: false)")
	}
	c := &Call{Model: req.Model, Stream: req.Stream, MaxTokens: req.MaxOutputTokens}
	if req.Instructions != "" {
		c.Messages = append(c.Messages, Message{Role: RoleSystem, Content: req.Instructions})
	}
	var s string
	if json.Unmarshal(req.Input, &s) == nil {
		c.Messages = append(c.Messages, Message{Role: RoleUser, Content: s})
	} else if len(req.Input) > 0 && string(req.Input) != "null" {
		var items []responsesItem
		if err := json.Unmarshal(req.Input, &items); err != nil {
			return nil, untranslatable("input is neither a string nor items: %v", err)
		}
		var cur *Message // the assistant message being built
		flush := func() {
			if cur != nil {
				c.Messages = append(c.Messages, *cur)
				cur = nil
			}
		}
		for i, it := range items {
			switch it.Type {
			case "message", "":
				text, err := responsesText(it.Content, fmt.Sprintf("input[%d]", i))
				if err != nil {
					return nil, err
				}
				switch it.Role {
				case RoleAssistant:
					if cur != nil && (cur.Content != "" || len(cur.ToolCalls) > 0) {
						flush()
					}
					if cur == nil {
						cur = &Message{Role: RoleAssistant}
					}
					cur.Content = text
				case RoleUser, RoleSystem, "developer":
					flush()
					role := it.Role
					if role == "developer" {
						// Chat templates know system, not developer.
						role = RoleSystem
					}
					c.Messages = append(c.Messages, Message{Role: role, Content: text})
				default:
					return nil, untranslatable("input[%d]: a message of role %q", i, it.Role)
				}
			case "reasoning":
				if cur != nil && (cur.Content != "" || len(cur.ToolCalls) > 0 || cur.Reasoning != "") {
					flush()
				}
				if cur == nil {
					cur = &Message{Role: RoleAssistant}
				}
				cur.Reasoning = responsesReasoning(it)
			case "function_call":
				if cur == nil {
					cur = &Message{Role: RoleAssistant}
				}
				cur.ToolCalls = append(cur.ToolCalls, ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments})
			case "function_call_output":
				flush()
				out, err := responsesOutput(it.Output, fmt.Sprintf("input[%d]", i))
				if err != nil {
					return nil, err
				}
				c.Messages = append(c.Messages, Message{Role: RoleTool, ToolCallID: it.CallID, Content: out})
			default:
				return nil, untranslatable("input[%d]: a %s item (messages, reasoning, function_call and function_call_output are translated)", i, it.Type)
			}
		}
		flush()
	}
	for i, raw := range req.Tools {
		var t responsesTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, untranslatable("tools[%d]: %v", i, err)
		}
		if t.Type != "function" {
			name := t.Name
			if name == "" {
				name = t.Type
			}
			c.Dropped = append(c.Dropped, fmt.Sprintf("%s (a %s tool, which a chat model cannot call)", name, t.Type))
			continue
		}
		c.Tools = append(c.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: json.RawMessage(compactJSON(t.Parameters))})
	}
	return c, nil
}

// responsesText is a message's content: a string, or text parts joined by
// "\n".
func responsesText(raw json.RawMessage, where string) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []responsesPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", untranslatable("%s: content is neither a string nor parts: %v", where, err)
	}
	var texts []string
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			texts = append(texts, p.Text)
		default:
			return "", untranslatable("%s: a %s part (only text is translated)", where, p.Type)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// responsesOutput is a function_call_output's output: a string or text
// parts.
func responsesOutput(raw json.RawMessage, where string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	return responsesText(raw, where+" output")
}

// responsesReasoning is a reasoning item's text: its content
// (reasoning_text parts), else its summaries.
func responsesReasoning(it responsesItem) string {
	var parts []responsesPart
	_ = json.Unmarshal(it.Content, &parts)
	var texts []string
	for _, p := range parts {
		texts = append(texts, p.Text)
	}
	if len(texts) == 0 {
		for _, p := range it.Summary {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// writeResponses answers a Responses call.
func writeResponses(st *stream, c *Call, rep *Reply, err error) {
	id := newID("resp_")
	created := time.Now().Unix()
	base := func(status string, output []any) map[string]any {
		return map[string]any{"id": id, "object": "response", "created_at": created, "status": status,
			"model": c.Model, "output": output, "error": nil, "incomplete_details": nil,
			"parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{}}
	}
	if err != nil {
		e := asError(err)
		r := base("failed", []any{})
		r["error"] = map[string]string{"code": e.Type, "message": e.Message}
		st.seqEvent("response.failed", map[string]any{"type": "response.failed", "response": r})
		return
	}
	var items []map[string]any
	if rep.Reasoning != "" {
		items = append(items, map[string]any{"type": "reasoning", "id": newID("rs_"), "summary": []any{},
			"content": []any{map[string]string{"type": "reasoning_text", "text": rep.Reasoning}}})
	}
	if rep.Content != "" || len(rep.Calls) == 0 {
		items = append(items, map[string]any{"type": "message", "id": newID("msg_"), "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": rep.Content, "annotations": []any{}}}})
	}
	for _, tc := range rep.Calls {
		items = append(items, map[string]any{"type": "function_call", "id": newID("fc_"), "call_id": tc.ID,
			"name": tc.Name, "arguments": tc.Arguments, "status": "completed"})
	}
	output := make([]any, len(items))
	for i, it := range items {
		output[i] = it
	}
	status := "completed"
	final := base(status, output)
	if rep.Finish == FinishLength {
		status = "incomplete"
		final["status"] = status
		final["incomplete_details"] = map[string]string{"reason": "max_output_tokens"}
	}
	final["usage"] = map[string]any{"input_tokens": rep.PromptTokens, "output_tokens": rep.CompletionTokens,
		"total_tokens":         rep.PromptTokens + rep.CompletionTokens,
		"input_tokens_details": map[string]int{"cached_tokens": 0}, "output_tokens_details": map[string]int{"reasoning_tokens": 0}}
	if st.f == nil {
		writeJSON(st.w, 200, final)
		return
	}
	st.seqEvent("response.created", map[string]any{"type": "response.created", "response": base("in_progress", []any{})})
	st.seqEvent("response.in_progress", map[string]any{"type": "response.in_progress", "response": base("in_progress", []any{})})
	for i, it := range items {
		itemID := it["id"]
		open := map[string]any{}
		for k, v := range it {
			open[k] = v
		}
		switch it["type"] {
		case "message":
			open["status"], open["content"] = "in_progress", []any{}
		case "function_call":
			open["status"], open["arguments"] = "in_progress", ""
		case "reasoning":
			open["content"] = []any{}
		}
		st.seqEvent("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": i, "item": open})
		switch it["type"] {
		case "message":
			part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
			st.seqEvent("response.content_part.added", map[string]any{"type": "response.content_part.added", "item_id": itemID, "output_index": i, "content_index": 0, "part": part})
			st.seqEvent("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": itemID, "output_index": i, "content_index": 0, "delta": rep.Content, "logprobs": []any{}})
			st.seqEvent("response.output_text.done", map[string]any{"type": "response.output_text.done", "item_id": itemID, "output_index": i, "content_index": 0, "text": rep.Content, "logprobs": []any{}})
			st.seqEvent("response.content_part.done", map[string]any{"type": "response.content_part.done", "item_id": itemID, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": rep.Content, "annotations": []any{}}})
		case "function_call":
			st.seqEvent("response.function_call_arguments.delta", map[string]any{"type": "response.function_call_arguments.delta", "item_id": itemID, "output_index": i, "delta": it["arguments"]})
			st.seqEvent("response.function_call_arguments.done", map[string]any{"type": "response.function_call_arguments.done", "item_id": itemID, "output_index": i, "name": it["name"], "arguments": it["arguments"]})
		case "reasoning":
			st.seqEvent("response.reasoning_text.delta", map[string]any{"type": "response.reasoning_text.delta", "item_id": itemID, "output_index": i, "content_index": 0, "delta": rep.Reasoning})
			st.seqEvent("response.reasoning_text.done", map[string]any{"type": "response.reasoning_text.done", "item_id": itemID, "output_index": i, "content_index": 0, "text": rep.Reasoning})
		}
		st.seqEvent("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": i, "item": it})
	}
	if status == "incomplete" {
		st.seqEvent("response.incomplete", map[string]any{"type": "response.incomplete", "response": final})
		return
	}
	st.seqEvent("response.completed", map[string]any{"type": "response.completed", "response": final})
}

// seqEvent writes a Responses event named by its type, with its
// sequence_number.
func (st *stream) seqEvent(name string, ev map[string]any) {
	ev["sequence_number"] = st.seq
	st.seq++
	st.event(name, marshal(ev))
}
