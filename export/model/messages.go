package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// Roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one chat message. Targets encode it in their own shape.
type Message struct {
	Role       string
	Content    string
	Reasoning  string     // assistant: the model's separate reasoning text, "" when none
	ToolCalls  []ToolCall // assistant: at most one per step
	ToolCallID string     // tool: the call it answers
}

// ToolCall is an assistant's call of an action tool.
type ToolCall struct {
	ID   string // "call_<step index>"
	Name string // the action kind
	// Arguments is the action's fields as a JSON object in canonical field
	// order (the action's canonical JSON without "kind"), "{}" when none.
	Arguments json.RawMessage
}

// Prompt returns the messages before the first step: the system prompt,
// when there is one, and the task's instruction.
func Prompt(ep *Episode) []Message {
	var out []Message
	if sys := ep.Conversation.SystemPrompt; sys != "" {
		out = append(out, Message{Role: RoleSystem, Content: sys})
	}
	return append(out, Message{Role: RoleUser, Content: ep.Instruction})
}

// Messages returns the episode's whole conversation (see the package
// documentation). It fails when a step's action JSON is not a canonical
// action.
func Messages(ep *Episode) ([]Message, error) {
	out := Prompt(ep)
	for i := range ep.Steps {
		s := &ep.Steps[i]
		text := deref(s.ModelText)
		reasoning := deref(s.Reasoning)
		switch runtime.ActionKind(s.ActionKind) {
		case "":
			if text != "" || reasoning != "" {
				out = append(out, Message{Role: RoleAssistant, Content: text, Reasoning: reasoning})
			}
		case runtime.ActDone:
			a, err := action(ep, s)
			if err != nil {
				return nil, err
			}
			content := a.Answer
			if content == "" {
				content = text
			}
			out = append(out, Message{Role: RoleAssistant, Content: content, Reasoning: reasoning})
		default:
			args, err := Arguments(s.ActionJSON)
			if err != nil {
				return nil, fmt.Errorf("model: episode %s step %d: %w", ep.Row.EpisodeID, s.StepIndex, err)
			}
			result, err := ToolResult(s, ep.Conversation.ObservationCap)
			if err != nil {
				return nil, fmt.Errorf("model: episode %s step %d: %w", ep.Row.EpisodeID, s.StepIndex, err)
			}
			if ep.Conversation.TextToolCalls() {
				out = append(out,
					Message{Role: RoleAssistant, Content: text, Reasoning: reasoning},
					Message{Role: RoleUser, Content: result})
				continue
			}
			id := CallID(int(s.StepIndex))
			out = append(out,
				Message{Role: RoleAssistant, Content: text, Reasoning: reasoning,
					ToolCalls: []ToolCall{{ID: id, Name: s.ActionKind, Arguments: args}}},
				Message{Role: RoleTool, Content: result, ToolCallID: id})
		}
	}
	return out, nil
}

// CallID is the tool-call id of step i.
func CallID(step int) string { return "call_" + strconv.Itoa(step) }

func action(ep *Episode, s *schemas.StepRow) (runtime.Action, error) {
	var a runtime.Action
	if err := json.Unmarshal([]byte(s.ActionJSON), &a); err != nil {
		return a, fmt.Errorf("model: episode %s step %d: action_json: %w", ep.Row.EpisodeID, s.StepIndex, err)
	}
	return a, nil
}

// Arguments returns the fields of a canonical action JSON as a JSON object,
// in canonical order, without "kind": {"kind":"exec","cmd":"ls"} gives
// {"cmd":"ls"}. It validates the action first.
func Arguments(actionJSON string) (json.RawMessage, error) {
	var a runtime.Action
	if err := json.Unmarshal([]byte(actionJSON), &a); err != nil {
		return nil, fmt.Errorf("action_json: %w", err)
	}
	if a.Kind == "" {
		return nil, fmt.Errorf("action_json %q holds no action", actionJSON)
	}
	canon, err := a.MarshalJSON()
	if err != nil {
		return nil, err
	}
	// The canonical form starts with the kind (runtime.Action.MarshalJSON);
	// what follows it is the fields.
	kind, _ := json.Marshal(string(a.Kind))
	head := append([]byte(`{"kind":`), kind...)
	rest, ok := bytes.CutPrefix(canon, head)
	if !ok {
		return nil, fmt.Errorf("canonical action %s does not start with its kind", canon)
	}
	if bytes.Equal(rest, []byte("}")) {
		return json.RawMessage("{}"), nil
	}
	return unescapeHTML(append([]byte("{"), rest[1:]...))
}

// unescapeHTML re-encodes a flat JSON object without the HTML escapes
// encoding/json adds (\u003c for <, ...): in string-encoded arguments they
// would be what a model is trained to write.
func unescapeHTML(obj []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	out := []byte{'{'}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		kb, err := EncodeJSON(k)
		if err != nil {
			return nil, err
		}
		vb, err := EncodeJSON(v)
		if err != nil {
			return nil, err
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, kb...), ':'), vb...)
	}
	return append(out, '}'), nil
}

// ToolResult is the text of step s's observation as the policy showed it
// to the model: aci.ObservationText of the step rebuilt from its row, with
// the observation cap limit (0 for none).
func ToolResult(s *schemas.StepRow, limit int) (string, error) {
	var a runtime.Action
	if err := json.Unmarshal([]byte(s.ActionJSON), &a); err != nil {
		return "", fmt.Errorf("action_json: %w", err)
	}
	o := runtime.Observation{
		Output:      []byte(s.Output),
		OutputBytes: s.OutputBytes,
		Truncated:   s.Truncated,
		ExitCode:    int(s.ExitCode),
		Error:       s.IsError,
		ErrorKind:   runtime.ErrorKind(s.ErrorKind),
		TimedOut:    s.TimedOut,
		AXTree:      s.AXTree,
	}
	if s.ScreenHash != "" || len(s.Screenshot) > 0 {
		o.Screenshot = &runtime.Screenshot{Width: int(s.ScreenW), Height: int(s.ScreenH)}
	}
	return aci.ObservationText(runtime.Step{Action: a, Observation: o}, limit), nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
