package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// OpenAI Chat Completions (https://platform.openai.com/docs/api-reference/chat):
// the canonical conversation's own shape. Content is a string or parts
// (text only here); an assistant message's reasoning comes back in
// reasoning_content or reasoning, as vLLM's and DeepSeek's clients send it.

type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []chatMessageIn   `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	Stream              bool              `json:"stream"`
	MaxTokens           int               `json:"max_tokens"`
	MaxCompletionTokens int               `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatMessageIn struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
	ToolCalls        []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// decodeChat translates a Chat Completions request.
func decodeChat(body []byte) (*Call, error) {
	var req chatRequest
	if err := decodeJSON("Chat Completions", body, &req); err != nil {
		return nil, err
	}
	c := &Call{Model: req.Model, Stream: req.Stream, MaxTokens: req.MaxTokens}
	c.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if req.MaxCompletionTokens > 0 {
		c.MaxTokens = req.MaxCompletionTokens
	}
	for i, m := range req.Messages {
		where := fmt.Sprintf("messages[%d]", i)
		text, err := chatText(m.Content, where)
		if err != nil {
			return nil, err
		}
		out := Message{Role: m.Role, Content: text, ToolCallID: m.ToolCallID}
		switch m.Role {
		case RoleSystem, RoleUser, RoleTool:
		case "developer":
			out.Role = RoleSystem
		case RoleAssistant:
			switch {
			case m.ReasoningContent != nil:
				out.Reasoning = *m.ReasoningContent
			case m.Reasoning != nil:
				out.Reasoning = *m.Reasoning
			}
			for _, tc := range m.ToolCalls {
				args := string(tc.Function.Arguments)
				var s string
				if json.Unmarshal(tc.Function.Arguments, &s) == nil {
					args = s
				}
				out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
			}
		default:
			return nil, untranslatable("%s: role %q", where, m.Role)
		}
		c.Messages = append(c.Messages, out)
	}
	for i, raw := range req.Tools {
		var t chatTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, untranslatable("tools[%d]: %v", i, err)
		}
		if t.Type != "function" {
			c.Dropped = append(c.Dropped, fmt.Sprintf("%s (a %s tool)", t.Function.Name, t.Type))
			continue
		}
		c.Tools = append(c.Tools, Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: json.RawMessage(compactJSON(t.Function.Parameters))})
	}
	return c, nil
}

// chatText is a message's content: null, a string, or text parts joined
// by "\n".
func chatText(raw json.RawMessage, where string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", untranslatable("%s: content is neither a string nor parts: %v", where, err)
	}
	var texts []string
	for _, p := range parts {
		if p.Type != "text" {
			return "", untranslatable("%s: a %s part (only text is translated)", where, p.Type)
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// writeChat answers a Chat Completions call.
func writeChat(st *stream, c *Call, rep *Reply, err error) {
	if err != nil {
		st.event("", marshal(openAIError(asError(err))))
		return
	}
	id := newID("chatcmpl-")
	created := time.Now().Unix()
	finish := rep.Finish
	if finish == "" {
		finish = FinishStop
	}
	usage := map[string]int{"prompt_tokens": rep.PromptTokens, "completion_tokens": rep.CompletionTokens,
		"total_tokens": rep.PromptTokens + rep.CompletionTokens}
	var calls []map[string]any
	for _, tc := range rep.Calls {
		calls = append(calls, map[string]any{"id": tc.ID, "type": "function",
			"function": map[string]string{"name": tc.Name, "arguments": tc.Arguments}})
	}
	if st.f == nil {
		msg := map[string]any{"role": "assistant", "content": rep.Content}
		if rep.Content == "" && len(calls) > 0 {
			msg["content"] = nil
		}
		if rep.Reasoning != "" {
			msg["reasoning_content"] = rep.Reasoning
		}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		writeJSON(st.w, 200, map[string]any{"id": id, "object": "chat.completion", "created": created, "model": c.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
			"usage":   usage})
		return
	}
	chunk := func(delta map[string]any, finish any) {
		st.event("", marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": c.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}}))
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	if rep.Reasoning != "" {
		chunk(map[string]any{"reasoning_content": rep.Reasoning}, nil)
	}
	if rep.Content != "" {
		chunk(map[string]any{"content": rep.Content}, nil)
	}
	for i, tc := range calls {
		tc["index"] = i
		chunk(map[string]any{"tool_calls": []any{tc}}, nil)
	}
	chunk(map[string]any{}, finish)
	if c.includeUsage {
		st.event("", marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": c.Model,
			"choices": []any{}, "usage": usage}))
	}
	st.event("", []byte("[DONE]"))
}
