package model

import (
	"bytes"
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
	o = o.WithDefaults()
	var b bytes.Buffer
	b.WriteString(`{"role":`)
	b.Write(mustJSON(m.Role))
	b.WriteString(`,"content":`)
	switch {
	case len(m.Images) > 0:
		b.Write(contentParts(m))
	case m.Role == RoleAssistant && m.Content == "" && len(m.ToolCalls) > 0 && o.CallContent.NullContent():
		b.WriteString("null")
	default:
		b.Write(mustJSON(m.Content))
	}
	if m.Reasoning != "" {
		b.WriteString(`,"reasoning_content":`)
		b.Write(mustJSON(m.Reasoning))
	}
	if len(m.ToolCalls) > 0 {
		b.WriteString(`,"tool_calls":[`)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"id":`)
			b.Write(mustJSON(tc.ID))
			b.WriteString(`,"type":"function","function":{"name":`)
			b.Write(mustJSON(tc.Name))
			b.WriteString(`,"arguments":`)
			b.Write(tc.Encoded(o.Args))
			b.WriteString(`}}`)
		}
		b.WriteByte(']')
	}
	if m.ToolCallID != "" {
		b.WriteString(`,"tool_call_id":`)
		b.Write(mustJSON(m.ToolCallID))
	}
	for _, e := range extra {
		b.WriteByte(',')
		b.Write(mustJSON(e.Key))
		b.WriteByte(':')
		b.Write(e.Value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// contentParts is the content of a message with images: a text part
// (when it has text), then one part per image — image_url with its data URL
// when the target set one (OpenAI's chat and fine-tuning format), else
// {"type": "image"}, the placeholder part TRL's VLM collator and the chat
// templates of VLMs (Gemma 3, Qwen2.5-VL) read, the image itself being the
// row's images column, in the same order.
func contentParts(m Message) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('[')
	if m.Content != "" {
		b.WriteString(`{"type":"text","text":`)
		b.Write(mustJSON(m.Content))
		b.WriteString(`}`)
	}
	for i, im := range m.Images {
		if i > 0 || m.Content != "" {
			b.WriteByte(',')
		}
		if im.URL != "" {
			b.WriteString(`{"type":"image_url","image_url":{"url":`)
			b.Write(mustJSON(im.URL))
			b.WriteString(`}}`)
		} else {
			b.WriteString(`{"type":"image"}`)
		}
	}
	b.WriteByte(']')
	return b.Bytes()
}

// EncodeMessages is msgs as a JSON array of EncodeMessage objects.
func EncodeMessages(msgs []Message, o Options) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(EncodeMessage(m, o))
	}
	b.WriteByte(']')
	return b.Bytes()
}

// Encoded is the call's arguments as enc writes them: the object (the
// model's key order), or the model's text as a JSON string.
func (tc ToolCall) Encoded(enc ArgsEncoding) json.RawMessage {
	if enc == ArgsString {
		return mustJSON(tc.Text)
	}
	return tc.Arguments
}

// mustJSON encodes a string (which cannot fail) without HTML escaping.
func mustJSON(s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			b, _ := EncodeJSON(s)
			return b
		}
	}
	// Printable ASCII without a quote or a backslash: encoding/json
	// (HTML escaping off) writes it as it is, quoted.
	b := make([]byte, 0, len(s)+2)
	return append(append(append(b, '"'), s...), '"')
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
