package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/forkline/forkline/runtime"
)

// Tool is one function-calling tool in the OpenAI request shape.
type Tool struct {
	Type     string       `json:"type"` // always "function"
	Function ToolFunction `json:"function"`
}

// ToolFunction is a tool's name, description and JSON Schema of arguments.
type ToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// kindHelp tells the model what each canonical action does. Field names,
// types and which are required come from runtime, never from here.
var kindHelp = map[runtime.ActionKind]string{
	runtime.ActExec:       "Run a shell command in the task's working directory and see its exit code and output (stdout and stderr).",
	runtime.ActReadFile:   "Read a file. The path is relative to the working directory.",
	runtime.ActWriteFile:  "Create or overwrite a file with the given content. The path is relative to the working directory.",
	runtime.ActScreenshot: "Take a screenshot of the screen.",
	runtime.ActClick:      "Click at a screen position, in screenshot pixels.",
	runtime.ActType:       "Type text at the keyboard focus.",
	runtime.ActKey:        "Press a key or key combination.",
	runtime.ActScroll:     "Scroll by the given amounts, in pixels.",
	runtime.ActNavigate:   "Open a URL in the browser.",
	runtime.ActWait:       "Wait before acting again.",
	runtime.ActDone:       "Finish the task. Call it once the task is complete; give an answer if the task asks for one.",
}

// fieldHelp describes each action field, by its JSON name.
var fieldHelp = map[string]string{
	"cmd":        "The shell command line.",
	"timeout_ms": "Time limit for the command in milliseconds; omit for the default.",
	"path":       "File path, relative to the working directory.",
	"content":    "The file's complete new content.",
	"x":          "Horizontal position in pixels.",
	"y":          "Vertical position in pixels.",
	"button":     "Mouse button.",
	"text":       "The text to type.",
	"keys":       `Key or combination, e.g. "Enter" or "Control+a".`,
	"dx":         "Horizontal scroll in pixels.",
	"dy":         "Vertical scroll in pixels.",
	"url":        "The URL to open.",
	"ms":         "Milliseconds to wait.",
	"answer":     "The final answer or a short summary of what was done.",
}

// fieldEnum lists the allowed values of fields that have a fixed set.
var fieldEnum = map[string][]string{
	"button": {"left", "right", "middle"},
}

// fieldTypes returns the JSON Schema type of each field of kind, read from the
// canonical JSON encoding of a probe action with every field set: the types
// are whatever runtime encodes, so the schemas cannot drift from the actions.
// A field the probe cannot show (a type this package does not know how to
// fill) is an error, caught by the tests when runtime grows one.
func fieldTypes(kind runtime.ActionKind) (map[string]string, error) {
	probe := runtime.Action{Kind: kind, Cmd: "s", TimeoutMS: 1, Path: "s", Content: "s", X: 1, Y: 1,
		Button: "left", Text: "s", Keys: "s", DX: 1, DY: 1, URL: "s", MS: 1, Answer: "s"}
	b, err := probe.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var enc map[string]json.RawMessage
	if err := json.Unmarshal(b, &enc); err != nil {
		return nil, err
	}
	names, _, ok := runtime.ActionFieldNames(kind)
	if !ok {
		return nil, fmt.Errorf("openai: unknown action %q", kind)
	}
	out := map[string]string{}
	for _, n := range names {
		v, ok := enc[n]
		if !ok || len(v) == 0 {
			return nil, fmt.Errorf("openai: cannot derive the type of %s.%s", kind, n)
		}
		switch {
		case v[0] == '"':
			out[n] = "string"
		case v[0] == 't' || v[0] == 'f':
			out[n] = "boolean"
		case bytes.ContainsAny(v, ".eE"):
			out[n] = "number"
		default:
			out[n] = "integer"
		}
	}
	return out, nil
}

// ToolFor returns the function-calling tool of one canonical action: its name
// is the action's kind, its parameters the action's fields.
func ToolFor(kind runtime.ActionKind) (Tool, error) {
	names, required, ok := runtime.ActionFieldNames(kind)
	if !ok {
		return Tool{}, fmt.Errorf("openai: unknown action %q", kind)
	}
	types, err := fieldTypes(kind)
	if err != nil {
		return Tool{}, err
	}
	// Written by hand to keep the fields in canonical order, which is the
	// order a model reads them in.
	var b bytes.Buffer
	b.WriteString(`{"type":"object","properties":{`)
	var req []string
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		prop := map[string]any{"type": types[n]}
		if h := fieldHelp[n]; h != "" {
			prop["description"] = h
		}
		if e := fieldEnum[n]; e != nil {
			prop["enum"] = e
		}
		pb, _ := json.Marshal(prop)
		nb, _ := json.Marshal(n)
		b.Write(nb)
		b.WriteByte(':')
		b.Write(pb)
		if required[i] {
			req = append(req, n)
		}
	}
	b.WriteString(`},"required":`)
	if req == nil {
		req = []string{}
	}
	rb, _ := json.Marshal(req)
	b.Write(rb)
	b.WriteString(`,"additionalProperties":false}`)
	desc := kindHelp[kind]
	if desc == "" {
		desc = "The " + string(kind) + " action."
	}
	return Tool{Type: "function", Function: ToolFunction{Name: string(kind), Description: desc, Parameters: b.Bytes()}}, nil
}

// Tools returns the tools of the given actions, in the order given.
func Tools(kinds []runtime.ActionKind) ([]Tool, error) {
	out := make([]Tool, 0, len(kinds))
	for _, k := range kinds {
		t, err := ToolFor(k)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Call is one tool call a model made: natively (tool_calls) or written in
// its text.
type Call struct {
	ID   string // the server's tool call id; empty for text calls
	Name string
	// Arguments is a JSON object, or a JSON string holding one (the OpenAI
	// wire form); empty means no arguments.
	Arguments json.RawMessage
}

// ErrUnparsed is wrapped by every error for a tool call that does not make a
// canonical action: an unknown or unoffered tool, arguments that are not a
// JSON object, missing or mistyped fields, or a text tool call whose JSON is
// broken.
var ErrUnparsed = errors.New("openai: unparsable tool call")

// Action turns the call into a canonical action. offered, when not nil,
// limits the tools accepted. Arguments are decoded strictly (runtime's
// canonical form), except that an integer field may be written as an
// integral number (3.0) or a numeric string ("3"), which models often do.
func (c Call) Action(offered map[runtime.ActionKind]bool) (runtime.Action, error) {
	kind := runtime.ActionKind(c.Name)
	if _, _, ok := runtime.ActionFieldNames(kind); !ok || (offered != nil && !offered[kind]) {
		var known []runtime.ActionKind
		for _, k := range runtime.ActionKinds() {
			if offered == nil || offered[k] {
				known = append(known, k)
			}
		}
		return runtime.Action{}, fmt.Errorf("%w: unknown tool %q (tools: %s)", ErrUnparsed, c.Name, kindNames(known))
	}
	args := bytes.TrimSpace(c.Arguments)
	if len(args) > 0 && args[0] == '"' {
		var s string
		if err := json.Unmarshal(args, &s); err != nil {
			return runtime.Action{}, fmt.Errorf("%w: %s arguments: %v", ErrUnparsed, kind, err)
		}
		args = bytes.TrimSpace([]byte(s))
	}
	fields := map[string]json.RawMessage{}
	if len(args) > 0 && !bytes.Equal(args, []byte("null")) {
		if err := json.Unmarshal(args, &fields); err != nil {
			return runtime.Action{}, fmt.Errorf("%w: %s arguments are not a JSON object: %v", ErrUnparsed, kind, err)
		}
	}
	if k, ok := fields["kind"]; ok {
		var s string
		if json.Unmarshal(k, &s) != nil || s != c.Name {
			return runtime.Action{}, fmt.Errorf("%w: %s arguments name another kind: %s", ErrUnparsed, kind, k)
		}
	}
	types, err := fieldTypes(kind)
	if err != nil {
		return runtime.Action{}, err
	}
	for n, v := range fields {
		if types[n] == "integer" {
			fields[n] = integral(v)
		}
	}
	kb, _ := json.Marshal(string(kind))
	fields["kind"] = kb
	canon, err := json.Marshal(fields)
	if err != nil {
		return runtime.Action{}, fmt.Errorf("%w: %s: %v", ErrUnparsed, kind, err)
	}
	var a runtime.Action
	if err := json.Unmarshal(canon, &a); err != nil {
		return runtime.Action{}, fmt.Errorf("%w: %v", ErrUnparsed, err)
	}
	return a, nil
}

// integral rewrites 3.0 or "3" as 3 and leaves anything else to the strict
// decoder, which names the problem.
func integral(v json.RawMessage) json.RawMessage {
	s := strings.TrimSpace(string(v))
	if strings.HasPrefix(s, `"`) {
		var str string
		if json.Unmarshal(v, &str) != nil {
			return v
		}
		s = strings.TrimSpace(str)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return v
	}
	return json.RawMessage(strconv.FormatInt(int64(f), 10))
}
