package aci

import (
	"bytes"
	"encoding/json"

	"github.com/forkline/forkline/runtime"
)

// The one key order of a tool object wherever it leaves forkline: in the
// openai policy's requests and in every export. It is pydantic's
// declaration order as vLLM (and SGLang) hand tools to the chat template —
// type, then function{name, description, parameters} — which a server
// applies whatever order a client sends; inside parameters, which servers
// pass on as sent, forkline's own order: type, properties, required,
// additionalProperties, the properties in the action's canonical field
// order (runtime.ActionFieldNames), each {type, description, enum}. A
// template's tojson writes keys in the order it receives them, so training
// data encoded this way renders the system prompt the model saw.
//
// ToolSchema's maps carry the same content; encoding/json would sort their
// keys, so anything that serializes tools uses ToolJSON or ToolsJSON.

// ToolJSON is the function-tool object of one action kind (ToolSchema's
// content) as JSON in the order above, without HTML escaping. It panics
// for a kind runtime does not know.
func ToolJSON(kind runtime.ActionKind) json.RawMessage {
	names, required, ok := runtime.ActionFieldNames(kind)
	if !ok {
		panic("aci: unknown action kind " + string(kind))
	}
	desc := descriptions[kind]
	if desc == "" {
		desc = "The " + string(kind) + " action."
	}
	var b bytes.Buffer
	b.WriteString(`{"type":"function","function":{"name":`)
	writeJSON(&b, string(kind))
	b.WriteString(`,"description":`)
	writeJSON(&b, desc)
	b.WriteString(`,"parameters":{"type":"object","properties":{`)
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSON(&b, name)
		b.WriteByte(':')
		writeFieldJSON(&b, name)
	}
	b.WriteString(`},"required":[`)
	n := 0
	for i, name := range names {
		if required[i] {
			if n > 0 {
				b.WriteByte(',')
			}
			writeJSON(&b, name)
			n++
		}
	}
	b.WriteString(`],"additionalProperties":false}}}`)
	return b.Bytes()
}

// ToolsJSON is the JSON array of the tools of kinds, in the order given
// (every canonical action, in runtime.ActionKinds order, when kinds is
// empty), each encoded as ToolJSON.
func ToolsJSON(kinds []runtime.ActionKind) json.RawMessage {
	if len(kinds) == 0 {
		kinds = runtime.ActionKinds()
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, k := range kinds {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(ToolJSON(k))
	}
	b.WriteByte(']')
	return b.Bytes()
}

func writeFieldJSON(b *bytes.Buffer, name string) {
	f, ok := fields[name]
	if !ok {
		b.WriteString(`{"type":"string"}`)
		return
	}
	b.WriteString(`{"type":`)
	writeJSON(b, f.typ)
	b.WriteString(`,"description":`)
	writeJSON(b, f.desc)
	if len(f.enum) > 0 {
		b.WriteString(`,"enum":[`)
		for i, v := range f.enum {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, v)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
}

// writeJSON writes a string as JSON without HTML escaping, as a model is
// shown it.
func writeJSON(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
}

// NotRunResult is the tool result a policy sends for each tool call of a
// turn after the first, which forkline does not run (one action per turn);
// exports write the same text, so the conversation is the one the model
// had.
const NotRunResult = "[forkline: not run: one action per turn; only the first tool call ran]"
