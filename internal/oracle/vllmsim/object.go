package vllmsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// object is a JSON object that keeps its keys in the order received. The
// server must never round-trip request JSON through Go maps: Python's
// json.loads keeps key order and the chat template writes tools and tool-call
// arguments with tojson in that order, so a sorted map would render a prompt
// the real server does not.
type object []member

type member struct {
	key   string
	value json.RawMessage
}

// parseObject reads raw as one JSON object, keeping key order; a repeated
// key keeps its first position and its last value, as a Python dict does.
func parseObject(raw json.RawMessage) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var o object
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := kt.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o = o.set(key, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	return o, nil
}

// parseArray reads raw as a JSON array of raw elements.
func parseArray(raw json.RawMessage) ([]json.RawMessage, error) {
	var a []json.RawMessage
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, err
	}
	return a, nil
}

func (o object) get(key string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.key == key {
			return m.value, true
		}
	}
	return nil, false
}

// has reports whether key is present with a non-null value.
func (o object) has(key string) bool {
	v, ok := o.get(key)
	return ok && !isNull(v)
}

func (o object) set(key string, v json.RawMessage) object {
	for i, m := range o {
		if m.key == key {
			o[i].value = v
			return o
		}
	}
	return append(o, member{key, v})
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		if len(m.value) == 0 {
			b.WriteString("null")
		} else {
			b.Write(m.value)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (o object) raw() json.RawMessage {
	b, _ := o.MarshalJSON()
	return b
}

func isNull(v json.RawMessage) bool {
	return len(bytes.TrimSpace(v)) == 0 || string(bytes.TrimSpace(v)) == "null"
}

// str decodes a JSON string value; ok is false for null or a missing value,
// err set for any other type.
func str(v json.RawMessage) (s string, ok bool, err error) {
	if isNull(v) {
		return "", false, nil
	}
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false, fmt.Errorf("want a string, got %s", truncate(string(v), 40))
	}
	return s, true, nil
}

// mustJSON encodes v without HTML escaping, as Python's json.dumps and
// FastAPI's responses write JSON (`<tool_call>` stays readable).
func mustJSON(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
