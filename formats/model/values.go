package model

import (
	"encoding/json"
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

// Member is one extra key of an encoded message (chat-jsonl's weight).
type Member struct {
	Key   string
	Value json.RawMessage
}

// EncodeMessage is m as a JSON object with exactly the keys that apply to
// it, in this order: role; content (a string; null for an assistant
// message with tool calls and no text under ContentNull or ContentSplit); reasoning_content
// when the message keeps reasoning (the key chat templates read);
// tool_calls when it has any, each {"id", "type": "function", "function":
// {"name", "arguments"}} with arguments per o.Args; tool_call_id on a tool
// message; then extra. No key is ever null except content under
// ContentNull: templates that test 'tool_calls' in message (Llama 3.1,
// DeepSeek-V3) and TRL 1.x, which no longer drops None keys, see messages
// as a chat client sends them.
func EncodeMessage(m Message, o Options, extra ...Member) json.RawMessage {
	return AppendMessage(nil, m, o, extra...)
}

// AppendMessage appends EncodeMessage's object to b: a target writing many
// messages appends them to one buffer instead of allocating each.
func AppendMessage(b []byte, m Message, o Options, extra ...Member) []byte {
	o = o.WithDefaults()
	b = AppendJSONString(append(b, `{"role":`...), m.Role)
	b = append(b, `,"content":`...)
	switch {
	case len(m.Images) > 0:
		b = appendContentParts(b, m)
	case m.Role == RoleAssistant && m.Content == "" && len(m.ToolCalls) > 0 && o.CallContent.NullContent():
		b = append(b, "null"...)
	default:
		b = AppendJSONString(b, m.Content)
	}
	if m.Reasoning != "" {
		b = AppendJSONString(append(b, `,"reasoning_content":`...), m.Reasoning)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSONString(append(b, `{"id":`...), tc.ID)
			b = AppendJSONString(append(b, `,"type":"function","function":{"name":`...), tc.Name)
			b = append(tc.appendArguments(append(b, `,"arguments":`...), o.Args), `}}`...)
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = AppendJSONString(append(b, `,"tool_call_id":`...), m.ToolCallID)
	}
	for _, e := range extra {
		b = AppendJSONString(append(b, ','), e.Key)
		b = append(append(b, ':'), e.Value...)
	}
	return append(b, '}')
}

// appendContentParts appends the content of a message with images: a text part
// (when it has text), then one part per image — image_url with its data URL
// when the target set one (OpenAI's chat and fine-tuning format), else
// {"type": "image"}, the placeholder part TRL's VLM collator and the chat
// templates of VLMs (Gemma 3, Qwen2.5-VL) read, the image itself being the
// row's images column, in the same order.
func appendContentParts(b []byte, m Message) []byte {
	b = append(b, '[')
	if m.Content != "" {
		b = AppendJSONString(append(b, `{"type":"text","text":`...), m.Content)
		b = append(b, '}')
	}
	for i, im := range m.Images {
		if i > 0 || m.Content != "" {
			b = append(b, ',')
		}
		if im.URL != "" {
			b = AppendJSONString(append(b, `{"type":"image_url","image_url":{"url":`...), im.URL)
			b = append(b, `}}`...)
		} else {
			b = append(b, `{"type":"image"}`...)
		}
	}
	return append(b, ']')
}

// EncodeMessages is msgs as a JSON array of EncodeMessage objects.
func EncodeMessages(msgs []Message, o Options) json.RawMessage {
	b := []byte{'['}
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendMessage(b, m, o)
	}
	return append(b, ']')
}

// appendArguments appends the call's arguments as enc writes them: the
// object (the model's key order), or the model's text as a JSON string.
func (tc ToolCall) appendArguments(b []byte, enc ArgsEncoding) []byte {
	if enc == ArgsString {
		return AppendJSONString(b, tc.Text)
	}
	return append(b, tc.Arguments...)
}

// ValidJSON is a JSON value its producer guarantees valid (EncodeMessage's
// output): a JSON feature takes it as is, without checking it again.
type ValidJSON json.RawMessage

// Mask8 converts a 0/1 token mask to the int8 values of a mask column.
func Mask8(m []int32) []int8 {
	out := make([]int8, len(m))
	for i, v := range m {
		out[i] = int8(v)
	}
	return out
}
