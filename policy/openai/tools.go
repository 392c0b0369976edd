package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/runtime"
)

// Tools returns the function-calling tools of the given actions, in the
// order given, for a task whose shell mode is shell. The schemas are package aci's, the same ones exporters write,
// in aci's one key order (aci.ToolKeyOrder), so a dataset names exactly the
// tools the model was offered and a template renders them as it did.
func Tools(kinds []runtime.ActionKind, shell string) ([]aci.Tool, error) {
	tools, err := aci.ToolsFor(kinds, shell)
	if err != nil {
		return nil, fmt.Errorf("openai: %w", err)
	}
	return tools, nil
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
// JSON object, missing, unknown or mistyped fields, or a text tool call whose
// JSON is broken.
var ErrUnparsed = errors.New("openai: unparsable tool call")

// Action turns the call into a canonical action: the tool name is the kind,
// the arguments its fields. offered, when not nil, limits the tools
// accepted. Arguments are decoded strictly (runtime's canonical form), except
// that an integer field may be written as an integral number (3.0) or a
// numeric string ("3"), which models often do.
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
	for n, v := range fields {
		if typ, _ := aci.FieldType(n); typ == "integer" {
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

// toolListing is the tools as text, one line each, for a system prompt.
func toolListing(tools []aci.Tool) string {
	var b strings.Builder
	for i, t := range tools {
		params, _ := marshalNoEscape(t.Function.Parameters)
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "- %s: %s Arguments: %s", t.Function.Name, t.Function.Description, params)
	}
	return b.String()
}
