package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/runtime"
)

// ToolMode is how a model was offered the actions.
type ToolMode string

// Tool modes.
const (
	// ToolsNative offers the actions as function-calling tools; the model's
	// tool calls come back as structured calls and observations go back as
	// tool messages.
	ToolsNative ToolMode = "native"
	// ToolsText describes the actions in the system prompt; the model
	// writes its calls in its text and observations go back as user
	// messages.
	ToolsText ToolMode = "text"
)

// Conversation is how a policy talked to its model, with defaults applied:
// everything an exporter needs, besides the recorded steps, to rebuild the
// exact messages the model was shown. The JSON names are the manifest's
// keys, the same as the openai policy's option names where one exists.
type Conversation struct {
	// SystemPrompt is the system message as sent (templates rendered); ""
	// for none.
	SystemPrompt string `json:"system_prompt"`
	// ToolMode is native function calls or calls written in the text. A
	// mode this build does not know is kept as recorded and exports as
	// native, as before it was typed.
	ToolMode ToolMode `json:"tool_mode,omitempty"`
	// Actions are the actions offered as tools, in order; nil offered every
	// canonical action.
	Actions []runtime.ActionKind `json:"actions,omitempty"`
	// ObservationCap is the most bytes of an observation's text the model
	// was shown (aci.ObservationText's limit); 0 showed all.
	ObservationCap int `json:"observation_cap"`
	// EnableThinking is the chat template's enable_thinking the model ran
	// with, nil when unknown (the openai policy does not set it; manifests
	// of other tools may).
	EnableThinking *bool `json:"enable_thinking,omitempty"`
	// ReasoningInHistory reports that the policy sent each earlier turn's
	// reasoning back to the model with the history; false (the openai
	// policy today) means every turn was generated after a history without
	// it, and exports keep reasoning on the last turn only by default.
	ReasoningInHistory bool `json:"reasoning_in_history,omitempty"`
}

// TextToolCalls reports whether the model wrote its tool calls in its text
// (ToolsText) rather than as function calls.
func (c Conversation) TextToolCalls() bool { return c.ToolMode == ToolsText }

// conversationKeys are the JSON names of Conversation's fields, in order.
var conversationKeys = []string{"system_prompt", "tool_mode", "actions", "observation_cap", "enable_thinking", "reasoning_in_history"}

// Diff returns the JSON names of the fields in which c and o differ, in
// field order: what a resume names when a run's conversation is not this
// command's.
func (c Conversation) Diff(o Conversation) []string {
	var out []string
	differs := []bool{
		c.SystemPrompt != o.SystemPrompt,
		c.ToolMode != o.ToolMode,
		!slices.Equal(c.Actions, o.Actions),
		c.ObservationCap != o.ObservationCap,
		(c.EnableThinking == nil) != (o.EnableThinking == nil) ||
			(c.EnableThinking != nil && *c.EnableThinking != *o.EnableThinking),
		c.ReasoningInHistory != o.ReasoningInHistory,
	}
	for i, d := range differs {
		if d {
			out = append(out, conversationKeys[i])
		}
	}
	return out
}

// UnmarshalJSON reads both manifest forms of a conversation: the typed one
// MarshalJSON writes (actions a list, observation_cap a number,
// enable_thinking a boolean) and the one collectors before it wrote, where
// every value was a string ("exec,read_file", "16384", "true"). Unknown
// keys are ignored, as readers of manifests always did.
func (c *Conversation) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return fmt.Errorf("policy: manifest policy conversation: %w", err)
	}
	got, err := decodeConversation(fields)
	if err != nil {
		return err
	}
	*c = got
	return nil
}

// decodeConversation reads the fields of either form (see UnmarshalJSON).
func decodeConversation(fields map[string]json.RawMessage) (Conversation, error) {
	var c Conversation
	var errs []error
	bad := func(key string, raw json.RawMessage, want string) {
		errs = append(errs, fmt.Errorf("policy: manifest policy %s=%s is not %s", key, raw, want))
	}
	if raw, ok := fields["system_prompt"]; ok {
		if err := json.Unmarshal(raw, &c.SystemPrompt); err != nil {
			bad("system_prompt", raw, "a string")
		}
	}
	if raw, ok := fields["tool_mode"]; ok {
		if err := json.Unmarshal(raw, &c.ToolMode); err != nil {
			bad("tool_mode", raw, "a string")
		}
	}
	if raw, ok := fields["actions"]; ok {
		kinds, err := decodeActions(raw)
		if err != nil {
			errs = append(errs, err)
		}
		c.Actions = kinds
	}
	if raw, ok := fields["observation_cap"]; ok {
		n, err := decodeNumberOrString(raw)
		if err != nil || n < 0 {
			bad("observation_cap", raw, "a byte count")
		}
		c.ObservationCap = n
	}
	if raw, ok := fields["enable_thinking"]; ok && !isNull(raw) {
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				bad("enable_thinking", raw, "a boolean")
			} else if v, err = strconv.ParseBool(s); err != nil {
				bad("enable_thinking", raw, "a boolean")
			}
		}
		c.EnableThinking = &v
	}
	if raw, ok := fields["reasoning_in_history"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &c.ReasoningInHistory); err != nil {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				bad("reasoning_in_history", raw, "a boolean")
			} else if c.ReasoningInHistory, err = strconv.ParseBool(s); err != nil {
				bad("reasoning_in_history", raw, "a boolean")
			}
		}
	}
	return c, errors.Join(errs...)
}

// decodeActions reads ["exec","done"] or the older "exec,done", refusing
// an action runtime does not know.
func decodeActions(raw json.RawMessage) ([]runtime.ActionKind, error) {
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		var joined string
		if json.Unmarshal(raw, &joined) != nil {
			return nil, fmt.Errorf("policy: manifest policy actions=%s is not a list of actions", raw)
		}
		list = strings.Split(joined, ",")
	}
	var out []runtime.ActionKind
	for _, k := range list {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if _, _, ok := runtime.ActionFieldNames(runtime.ActionKind(k)); !ok {
			return nil, fmt.Errorf("policy: manifest policy actions names unknown action %q", k)
		}
		out = append(out, runtime.ActionKind(k))
	}
	return out, nil
}

// decodeNumberOrString reads 16384 or "16384".
func decodeNumberOrString(raw json.RawMessage) (int, error) {
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		return n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }
