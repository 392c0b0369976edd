package vllmsim

import (
	"encoding/json"
	"fmt"
	"strings"
)

// What vLLM does to a chat request before the template sees it. Read from
// vLLM's source (vllm/entrypoints/chat_utils.py: _parse_chat_message_content,
// _parse_chat_message_content_parts, _postprocess_messages;
// vllm/entrypoints/openai/chat_completion/protocol.py: ChatCompletionRequest,
// its _normalize_messages_before validator and build_chat_params,
// ChatCompletionToolsParam; vllm/entrypoints/generate/base/protocol.py:
// FunctionDefinition). The shape of the result is what the template gets.

// ContentFormat is how message content reaches the template (vLLM's
// --chat-template-content-format; vLLM detects it from the template).
type ContentFormat string

const (
	// ContentString joins the text parts of a content list with "\n" into
	// one string (what vLLM detects for Qwen3's template, which never loops
	// over content).
	ContentString ContentFormat = "string"
	// ContentOpenAI keeps content as a list of parts ({"type": "text",
	// "text": ...}, {"type": "image"}), for templates that loop over
	// content (Gemma 3's).
	ContentOpenAI ContentFormat = "openai"
)

// textPartTypes are the part types vLLM reads as text.
var textPartTypes = map[string]bool{"text": true, "input_text": true, "output_text": true, "refusal": true, "thinking": true}

// imagePartTypes are the part types vLLM reads as an image.
var imagePartTypes = map[string]bool{"image_url": true, "input_image": true, "image_pil": true, "image_embeds": true}

// templateMessages turns the request's messages into the conversation the
// template sees:
//   - content null or missing becomes "" (an empty parts list, joined);
//     a parts list becomes one string (ContentString) or a normalized parts
//     list (ContentOpenAI);
//   - only role, content, name and, per role, tool_calls, reasoning (both as
//     reasoning and reasoning_content) and tool_call_id are kept: any other
//     key a client sends never reaches the template;
//   - reasoning is read from "reasoning", or from "reasoning_content" when
//     "reasoning" is null (vLLM renames the deprecated field);
//   - an empty tool_calls list is dropped; each call's arguments, a JSON
//     string on the wire, is parsed into an object (an empty or null
//     string becomes {}).
func templateMessages(raw json.RawMessage, format ContentFormat) ([]object, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("messages: field required")
	}
	items, err := parseArray(raw)
	if err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	out := make([]object, 0, len(items))
	for i, item := range items {
		msg, err := parseObject(item)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		m, err := templateMessage(msg, format)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func templateMessage(msg object, format ContentFormat) (object, error) {
	rv, _ := msg.get("role")
	role, ok, err := str(rv)
	if err != nil || !ok {
		return nil, fmt.Errorf("role: a string is required")
	}
	cv, _ := msg.get("content")
	content, err := templateContent(cv, format)
	if err != nil {
		return nil, err
	}
	out := object{{"role", mustJSON(role)}, {"content", content}}
	switch role {
	case "assistant":
		if calls, ok := msg.get("tool_calls"); ok && !isNull(calls) {
			parsed, err := parseToolCalls(calls)
			if err != nil {
				return nil, err
			}
			if parsed != nil {
				out = out.set("tool_calls", parsed)
			}
		}
		reasoning, _ := msg.get("reasoning")
		if isNull(reasoning) {
			reasoning, _ = msg.get("reasoning_content")
		}
		if !isNull(reasoning) {
			if _, _, err := str(reasoning); err != nil {
				return nil, fmt.Errorf("reasoning: %w", err)
			}
			out = out.set("reasoning", reasoning).set("reasoning_content", reasoning)
		}
	case "tool":
		if id, ok := msg.get("tool_call_id"); ok {
			out = out.set("tool_call_id", id)
		}
	}
	if nv, ok := msg.get("name"); ok {
		if name, isStr, _ := str(nv); isStr {
			out = out.set("name", mustJSON(name))
		}
	}
	return out, nil
}

func templateContent(cv json.RawMessage, format ContentFormat) (json.RawMessage, error) {
	var parts []json.RawMessage
	switch {
	case isNull(cv):
		// An empty parts list.
	case strings.HasPrefix(strings.TrimSpace(string(cv)), `"`):
		s, _, err := str(cv)
		if err != nil {
			return nil, err
		}
		if format == ContentString {
			return mustJSON(s), nil
		}
		parts = []json.RawMessage{mustJSON(map[string]string{"type": "text", "text": s})}
	default:
		var err error
		if parts, err = parseArray(cv); err != nil {
			return nil, fmt.Errorf("content: a string or a list of parts is required")
		}
	}
	var texts []string
	var normalized []json.RawMessage
	for i, p := range parts {
		part, err := parseObject(p)
		if err != nil {
			return nil, fmt.Errorf("content[%d]: %w", i, err)
		}
		tv, _ := part.get("type")
		typ, _, _ := str(tv)
		switch {
		case textPartTypes[typ]:
			field := "text"
			if typ == "refusal" {
				field = "refusal"
			} else if typ == "thinking" {
				field = "thinking"
			}
			v, _ := part.get(field)
			text, ok, err := str(v)
			if err != nil || !ok {
				// vLLM skips a text part whose text is missing.
				continue
			}
			texts = append(texts, text)
			normalized = append(normalized, mustJSON(map[string]string{"type": "text", "text": text}))
		case imagePartTypes[typ] || typ == "image":
			if format == ContentString {
				// A text-only model's server refuses images; this simulator
				// serves text-only templates in string mode.
				return nil, fmt.Errorf("content[%d]: image parts need a multimodal template (ContentOpenAI)", i)
			}
			normalized = append(normalized, json.RawMessage(`{"type":"image"}`))
		default:
			return nil, fmt.Errorf("content[%d]: unknown part type %q", i, typ)
		}
	}
	if format == ContentString {
		return mustJSON(strings.Join(texts, "\n")), nil
	}
	if normalized == nil {
		normalized = []json.RawMessage{}
	}
	return mustJSON(normalized), nil
}

// parseToolCalls keeps each call as sent but with function.arguments parsed
// from its JSON string into the value (key order kept). It returns nil for
// an empty list, which vLLM drops.
func parseToolCalls(raw json.RawMessage) (json.RawMessage, error) {
	calls, err := parseArray(raw)
	if err != nil {
		return nil, fmt.Errorf("tool_calls: a list is required")
	}
	if len(calls) == 0 {
		return nil, nil
	}
	out := make([]json.RawMessage, 0, len(calls))
	for i, c := range calls {
		call, err := parseObject(c)
		if err != nil {
			return nil, fmt.Errorf("tool_calls[%d]: %w", i, err)
		}
		fv, _ := call.get("function")
		fn, err := parseObject(fv)
		if err != nil {
			return nil, fmt.Errorf("tool_calls[%d].function: %w", i, err)
		}
		args, _ := fn.get("arguments")
		switch a := strings.TrimSpace(string(args)); {
		case isNull(args) || a == `""`:
			fn = fn.set("arguments", json.RawMessage(`{}`))
		case strings.HasPrefix(a, `"`):
			s, _, _ := str(args)
			if !json.Valid([]byte(s)) {
				// json.loads raises inside vLLM's preprocessing.
				return nil, fmt.Errorf("tool_calls[%d].function.arguments is not valid JSON: %s", i, truncate(s, 60))
			}
			fn = fn.set("arguments", json.RawMessage(s))
		}
		out = append(out, call.set("function", fn.raw()).raw())
	}
	return mustJSON(out), nil
}

// templateTools is what model_dump() of vLLM's ChatCompletionToolsParam
// gives: type, then function{name, description, parameters} (description
// and parameters null when absent), each in pydantic's declaration order,
// whatever order the client sent. defer_loading is kept only when set;
// further keys of function follow in the order sent (the models allow extra
// fields); further keys of the tool itself are dropped (its serializer keeps
// only declared fields).
func templateTools(raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	items, err := parseArray(raw)
	if err != nil {
		return nil, fmt.Errorf("tools: a list is required")
	}
	out := make([]json.RawMessage, 0, len(items))
	for i, item := range items {
		tool, err := parseObject(item)
		if err != nil {
			return nil, fmt.Errorf("tools[%d]: %w", i, err)
		}
		typ := json.RawMessage(`"function"`)
		if tv, ok := tool.get("type"); ok && !isNull(tv) {
			if s, _, _ := str(tv); s != "function" {
				return nil, fmt.Errorf("tools[%d].type: only \"function\" is supported", i)
			}
			typ = tv
		}
		fv, _ := tool.get("function")
		fn, err := parseObject(fv)
		if err != nil {
			return nil, fmt.Errorf("tools[%d].function: %w", i, err)
		}
		if _, ok, _ := str(mustGet(fn, "name")); !ok {
			return nil, fmt.Errorf("tools[%d].function.name: field required", i)
		}
		dumped := object{
			{"name", mustGet(fn, "name")},
			{"description", orNull(fn, "description")},
			{"parameters", orNull(fn, "parameters")},
		}
		deferLoading := orNull(fn, "defer_loading")
		if isNull(deferLoading) {
			deferLoading = orNull(tool, "defer_loading")
		}
		if !isNull(deferLoading) {
			dumped = dumped.set("defer_loading", deferLoading)
		}
		for _, m := range fn {
			switch m.key {
			case "name", "description", "parameters", "defer_loading":
			default:
				dumped = dumped.set(m.key, m.value)
			}
		}
		dt := object{{"type", typ}, {"function", dumped.raw()}}
		if dl := orNull(tool, "defer_loading"); !isNull(dl) {
			dt = dt.set("defer_loading", dl)
		}
		out = append(out, dt.raw())
	}
	return mustJSON(out), nil
}

func mustGet(o object, key string) json.RawMessage {
	v, _ := o.get(key)
	return v
}

func orNull(o object, key string) json.RawMessage {
	if v, ok := o.get(key); ok && len(v) > 0 {
		return v
	}
	return json.RawMessage("null")
}
