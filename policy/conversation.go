package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/aci"
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

// TokenMode is how a policy obtained its turns' token ids.
type TokenMode string

// Token modes.
const (
	// TokensChat sends the conversation's messages each turn and records
	// the ids the server reports: the server renders the chat template over
	// the whole history again, which may re-render earlier turns
	// differently from how they were generated (the record then stops,
	// flagged as drift).
	TokensChat TokenMode = "chat"
	// TokensTITO is token in, token out: the policy keeps the episode's ids
	// itself, has the server render only each new turn, and sends the whole
	// id sequence as the prompt, so the record is exact by construction.
	TokensTITO TokenMode = "tito"
	// TokensAuto is TokensTITO when the server offers the endpoints it
	// needs, else TokensChat, decided once per run; each step's token_path
	// says which.
	TokensAuto TokenMode = "auto"
)

// TokenModes lists the token modes.
func TokenModes() []TokenMode { return []TokenMode{TokensAuto, TokensTITO, TokensChat} }

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
	// canonical action, unless TaskActions is set.
	Actions []runtime.ActionKind `json:"actions,omitempty"`
	// TaskActions reports that each episode was offered the actions its
	// task allows (task.Spec.AllowedActions: a shell task the shell
	// actions, a browser task the GUI ones and the shell ones it lists),
	// not one list for the run; Actions is then nil.
	TaskActions bool `json:"task_actions,omitempty"`
	// ObservationCap is the most bytes of an observation's text the model
	// was shown (aci.ObservationText's limit); 0 showed all.
	ObservationCap int `json:"observation_cap"`
	// Observe is what the model was shown of GUI observations and the
	// start page (aci.Observe); "" in manifests written before it was
	// recorded, whose policies showed text only (aci.ObserveText).
	Observe aci.Observe `json:"observe,omitempty"`
	// MaxImages is how many of the latest screenshots stayed images in
	// the context, older ones shown as aci.ImageNote; 0 kept all.
	MaxImages int `json:"max_images,omitempty"`
	// EnableThinking is the chat template's enable_thinking the model ran
	// with, nil when unknown: the openai policy sets it from
	// chat_template_kwargs, and leaves it nil when they do not say (the
	// server's default then applied).
	EnableThinking *bool `json:"enable_thinking,omitempty"`

	// Tokens is the token mode; "" in manifests written before it was
	// recorded, whose policies always used chat.
	Tokens TokenMode `json:"tokens,omitempty"`
	// ToolParser and ReasoningParser name how the policy itself parsed a
	// token-in-token-out turn's generated text into tool calls ("hermes":
	// <tool_call>{json}</tool_call> blocks, or "server": the server's own
	// parsers through its derender endpoint) and reasoning ("qwen3":
	// <think>...</think>, or "none"). Chat turns are parsed by the server.
	// "" where not recorded.
	ToolParser      string `json:"tool_parser,omitempty"`
	ReasoningParser string `json:"reasoning_parser,omitempty"`
	// ChatTemplateKwargs are the extra chat template variables sent with
	// every request (vLLM's and SGLang's chat_template_kwargs); nil for none.
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
	// SendReasoning reports whether assistant turns carried the reasoning
	// the server had split off back to it (chat mode), so that a template
	// that keeps recent reasoning renders it; nil in manifests written
	// before it was recorded, whose policies never sent it.
	SendReasoning *bool `json:"send_reasoning,omitempty"`
	// ToolKeyOrder is the key order the tools were sent in
	// (aci.ToolKeyOrder); "" in manifests written before it was recorded,
	// whose policies sent sorted keys (see ToolOrder).
	ToolKeyOrder string `json:"tool_key_order,omitempty"`
}

// ToolOrder is the key order the tools were sent in: ToolKeyOrder, or
// aci.ToolKeyOrderSorted for a manifest that predates it.
func (c Conversation) ToolOrder() string {
	if c.ToolKeyOrder == "" {
		return aci.ToolKeyOrderSorted
	}
	return c.ToolKeyOrder
}

// Shows is the observe mode the model was shown observations in:
// Observe, or aci.ObserveText for a manifest that predates it.
func (c Conversation) Shows() aci.Observe {
	if c.Observe == "" {
		return aci.ObserveText
	}
	return c.Observe
}

// SentReasoning reports whether assistant turns carried their reasoning
// back (false when not recorded).
func (c Conversation) SentReasoning() bool { return c.SendReasoning != nil && *c.SendReasoning }

// TextToolCalls reports whether the model wrote its tool calls in its text
// (ToolsText) rather than as function calls.
func (c Conversation) TextToolCalls() bool { return c.ToolMode == ToolsText }

// conversationKeys are the JSON names of Conversation's fields, in order.
var conversationKeys = []string{"system_prompt", "tool_mode", "actions", "observation_cap", "enable_thinking",
	"tokens", "tool_parser", "reasoning_parser", "chat_template_kwargs", "send_reasoning", "tool_key_order",
	"observe", "max_images", "task_actions"}

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
		!equalBool(c.EnableThinking, o.EnableThinking),
		c.Tokens != o.Tokens,
		c.ToolParser != o.ToolParser,
		c.ReasoningParser != o.ReasoningParser,
		!equalJSON(c.ChatTemplateKwargs, o.ChatTemplateKwargs),
		!equalBool(c.SendReasoning, o.SendReasoning),
		c.ToolKeyOrder != o.ToolKeyOrder,
		c.Shows() != o.Shows(),
		c.MaxImages != o.MaxImages,
		c.TaskActions != o.TaskActions,
	}
	for i, d := range differs {
		if d {
			out = append(out, conversationKeys[i])
		}
	}
	return out
}

func equalBool(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// equalJSON compares two values by their JSON encoding (maps encode with
// sorted keys), so 1 and 1.0 from two decodings compare equal.
func equalJSON(a, b map[string]any) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
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
	got, err := DecodeConversation(fields)
	if err != nil {
		return err
	}
	*c = got
	return nil
}

// DecodeConversation reads the fields of either form (see UnmarshalJSON):
// a manifest's recorded conversation, or (manifest.Policy.Shown) the
// options that stand in for what it leaves out.
func DecodeConversation(fields map[string]json.RawMessage) (Conversation, error) {
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
		v, err := decodeBool(raw)
		if err != nil {
			bad("enable_thinking", raw, "a boolean")
		}
		c.EnableThinking = &v
	}
	strField := func(key string, out *string) {
		if raw, ok := fields[key]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, out); err != nil {
				bad(key, raw, "a string")
			}
		}
	}
	var tokens string
	strField("tokens", &tokens)
	if tokens != "" && !slices.Contains(TokenModes(), TokenMode(tokens)) {
		errs = append(errs, fmt.Errorf("policy: manifest policy tokens=%q is not a token mode (known: auto, tito, chat)", tokens))
	}
	c.Tokens = TokenMode(tokens)
	strField("tool_parser", &c.ToolParser)
	strField("reasoning_parser", &c.ReasoningParser)
	strField("tool_key_order", &c.ToolKeyOrder)
	var observe string
	strField("observe", &observe)
	if _, err := aci.ParseObserve(observe); err != nil {
		errs = append(errs, fmt.Errorf("policy: manifest policy %w", err))
	}
	c.Observe = aci.Observe(observe)
	if raw, ok := fields["task_actions"]; ok && !isNull(raw) {
		v, err := decodeBool(raw)
		if err != nil {
			bad("task_actions", raw, "a boolean")
		}
		c.TaskActions = v
	}
	if raw, ok := fields["max_images"]; ok && !isNull(raw) {
		n, err := decodeNumberOrString(raw)
		if err != nil || n < 0 {
			bad("max_images", raw, "an image count")
		}
		c.MaxImages = n
	}
	if raw, ok := fields["chat_template_kwargs"]; ok && !isNull(raw) {
		kw, err := DecodeTemplateKwargs(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy: manifest policy chat_template_kwargs: %w", err))
		}
		if len(kw) > 0 { // {} sends nothing: none, as the typed form writes it
			c.ChatTemplateKwargs = kw
		}
	}
	if raw, ok := fields["send_reasoning"]; ok && !isNull(raw) {
		v, err := decodeBool(raw)
		if err != nil {
			bad("send_reasoning", raw, "a boolean")
		}
		c.SendReasoning = &v
	}
	return c, errors.Join(errs...)
}

// DecodeTemplateKwargs reads chat template kwargs: a JSON object, or (the
// option's form) a string holding one. An empty string is none.
func DecodeTemplateKwargs(raw json.RawMessage) (map[string]any, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return nil, nil
		}
		raw = json.RawMessage(s)
	}
	var kw map[string]any
	if err := json.Unmarshal(raw, &kw); err != nil || kw == nil {
		return nil, fmt.Errorf("%s is not a JSON object", raw)
	}
	return kw, nil
}

// decodeBool reads true or "true".
func decodeBool(raw json.RawMessage) (bool, error) {
	var v bool
	if err := json.Unmarshal(raw, &v); err == nil {
		return v, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return false, err
	}
	return strconv.ParseBool(s)
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
