package aci

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/forkline/forkline/runtime"
)

// ToolKeyOrder names the one key order in which forkline writes tool
// schemas, wherever a chat template may render them (a policy's requests,
// an export's tools column): Tool's. A manifest records it (policy
// Conversation.ToolKeyOrder) so that an exporter renders the tools exactly
// as the model was shown them; a manifest without it was written by a
// policy that sent Go maps, whose keys came out sorted (ToolKeyOrderSorted).
//
// Why one fixed order: vLLM re-orders the top of a tool (pydantic's
// model_dump gives type, then function{name, description, parameters}) but
// passes parameters through as sent, and chat templates write tools with
// tojson in the order they get them. Two writers with two orders render two
// different prompts for the same tools.
const ToolKeyOrder = "canonical"

// ToolKeyOrderSorted is the order of tools sent as Go maps (every object's
// keys sorted), which policies used before ToolKeyOrder.
const ToolKeyOrderSorted = "sorted"

// Tool is one function tool in the canonical key order (ToolKeyOrder):
//
//	{"type": "function",
//	 "function": {"name": KIND, "description": ...,
//	              "parameters": {"type": "object",
//	                             "properties": {FIELD: {"type": ..., "description": ..., "enum": [...]}, ...},
//	                             "required": [...],
//	                             "additionalProperties": false}}}
//
// The properties follow the action's canonical field order
// (runtime.ActionFieldNames), required lists them in the same order, and a
// property writes type, description, then enum when it has one. Its JSON
// encoding is that order, byte for byte; a decoded Tool (UnmarshalJSON)
// keeps the order it was written in.
type Tool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function is a tool's function object.
type Function struct {
	Name        string     `json:"name"`
	Description string     `json:"description"`
	Parameters  Parameters `json:"parameters"`
}

// Parameters is the JSON Schema of a tool's arguments.
type Parameters struct {
	Type                 string     `json:"type"`
	Properties           Properties `json:"properties"`
	Required             []string   `json:"required"`
	AdditionalProperties bool       `json:"additionalProperties"`
}

// Properties are the argument fields, in order; they encode as one JSON
// object whose keys keep that order.
type Properties []Property

// Property is one argument field.
type Property struct {
	Name        string   `json:"-"`
	Type        string   `json:"type"`
	Description string   `json:"description,omitempty"`
	Enum        []string `json:"enum,omitempty"`
}

// MarshalJSON writes the properties as one object, in order.
func (ps Properties) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshalNoEscape(p.Name)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		v, err := marshalNoEscape(p)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object of properties, keeping its key order.
func (ps *Properties) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("aci: tool properties: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("aci: tool properties are not a JSON object")
	}
	out := Properties{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return fmt.Errorf("aci: tool properties: %w", err)
		}
		var p Property
		if err := dec.Decode(&p); err != nil {
			return fmt.Errorf("aci: tool property %v: %w", kt, err)
		}
		p.Name, _ = kt.(string)
		out = append(out, p)
	}
	*ps = out
	return nil
}

// marshalNoEscape encodes v as Python's json.dumps and vLLM's responses do,
// without HTML escaping, so that descriptions holding < > & read the same
// wherever they are rendered.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// Tools returns the tools of kinds, in the order given, in the canonical
// key order, for a task whose shell is fresh. An unknown kind is an error
// naming the known ones.
func Tools(kinds []runtime.ActionKind) ([]Tool, error) { return ToolsFor(kinds, "") }

// ShellPersistent is the task shell mode (task.Spec.Shell) whose exec tool
// says that state carries from one command to the next.
const ShellPersistent = "persistent"

// ShellPersistentForked is not a task's shell mode but how exec is
// described for a persistent shell on a provider whose forks and branches
// go on with the shell (Capabilities().ForksMemory: gvisor): the shell
// setup ran in, with its state. ExecShell chooses it.
const ShellPersistentForked = "persistent-forked"

// ExecShell is the shell argument of ToolsFor for a task whose shell mode
// is shell on a provider that forks memory (forksMemory) or not: a
// persistent shell there is ShellPersistentForked, anything else shell
// itself, so the descriptions of local and docker are unchanged.
func ExecShell(shell string, forksMemory bool) string {
	if shell == ShellPersistent && forksMemory {
		return ShellPersistentForked
	}
	return shell
}

// ToolsFor is Tools for a task whose shell mode is shell ("" or "fresh":
// a shell per command; "persistent": one shell per episode;
// ShellPersistentForked: one that forks go on with, see ExecShell). Only exec's
// description depends on it: a model told its commands share a shell
// when they do not reads a lost cd or export as done, so the tool says
// which. The fresh description is the one every dataset before the
// persistent shell was offered, unchanged, so their exports still write
// the tools their models saw.
func ToolsFor(kinds []runtime.ActionKind, shell string) ([]Tool, error) {
	out := make([]Tool, 0, len(kinds))
	for _, k := range kinds {
		t, ok := tool(k)
		if ok && k == runtime.ActExec && shell == ShellPersistent {
			t.Function.Description = persistentExec
		}
		if ok && k == runtime.ActExec && shell == ShellPersistentForked {
			t.Function.Description = forkedExec
		}
		if !ok {
			return nil, fmt.Errorf("aci: unknown action kind %q (known: %v)", k, runtime.ActionKinds())
		}
		out = append(out, t)
	}
	return out, nil
}

// ToolsJSON is Tools encoded: the exact bytes a policy sends as "tools"
// and an exporter writes, in the canonical key order.
func ToolsJSON(kinds []runtime.ActionKind) (json.RawMessage, error) {
	return ToolsJSONFor(kinds, "")
}

// ToolsJSONFor is ToolsFor encoded.
func ToolsJSONFor(kinds []runtime.ActionKind, shell string) (json.RawMessage, error) {
	tools, err := ToolsFor(kinds, shell)
	if err != nil {
		return nil, err
	}
	return marshalNoEscape(tools)
}

func tool(kind runtime.ActionKind) (Tool, bool) {
	names, required, ok := runtime.ActionFieldNames(kind)
	if !ok {
		return Tool{}, false
	}
	params := Parameters{Type: "object", Properties: Properties{}, Required: []string{}}
	for i, name := range names {
		f, known := fields[name]
		p := Property{Name: name, Type: "string"}
		if known {
			p.Type, p.Description, p.Enum = f.typ, f.desc, append([]string(nil), f.enum...)
		}
		params.Properties = append(params.Properties, p)
		if required[i] {
			params.Required = append(params.Required, name)
		}
	}
	desc := descriptions[kind]
	if desc == "" {
		desc = "The " + string(kind) + " action."
	}
	return Tool{Type: "function", Function: Function{Name: string(kind), Description: desc, Parameters: params}}, true
}
