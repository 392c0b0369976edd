package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"

	"github.com/forkline/forkline/policy"
)

// Policy is the manifest's "policy" entry: which policy, opened how, and
// the conversation it had, whose settings are of any JSON type (strings,
// numbers, booleans, lists, objects: policy.Conversation). A resume compares
// the run's Policy with this command's; exporters and inspect read the
// conversation from it (Shown).
type Policy struct {
	Name string `json:"name"`
	// ScriptFile is Options.ScriptFile as given, "" for none.
	ScriptFile string `json:"script_file"`
	// ScriptSHA256 is the hex sha256 of ScriptFile's content, "" without a
	// file; nil in manifests written before it was recorded. A resume
	// compares the actions, not the file's name.
	ScriptSHA256 *string `json:"script_sha256"`
	// Options are Options.Params as given (never nil once made by
	// NewPolicy).
	Options map[string]string `json:"options"`
	// Conversation is what the policy's Source reported (Conversational),
	// nil for a policy that talks to no model, and in manifests written
	// before it was recorded.
	Conversation *policy.Conversation `json:"conversation,omitempty"`
	// Source and SourceRunID name the dataset a replay -record re-ran
	// (its policy "replay"); "" otherwise.
	Source      string `json:"source,omitempty"`
	SourceRunID string `json:"source_run_id,omitempty"`

	// recorded are the conversation's keys as the manifest held them, so
	// that Shown can tell a recorded field from one left out.
	recorded map[string]json.RawMessage
}

// NewPolicy is the record of the policy name opened with opts as src: the
// options as given, the script file's digest, and src's conversation when
// it has one.
func NewPolicy(name string, opts policy.Options, src policy.Source) (Policy, error) {
	sum := ""
	if opts.ScriptFile != "" {
		data, err := os.ReadFile(opts.ScriptFile)
		if err != nil {
			return Policy{}, fmt.Errorf("policy: -script: %w", err)
		}
		h := sha256.Sum256(data)
		sum = hex.EncodeToString(h[:])
	}
	params := maps.Clone(opts.Params)
	if params == nil {
		params = map[string]string{}
	}
	r := Policy{Name: name, ScriptFile: opts.ScriptFile, ScriptSHA256: &sum, Options: params}
	if c, ok := src.(policy.Conversational); ok {
		conv, err := c.Conversation()
		if err != nil {
			return Policy{}, fmt.Errorf("policy: %s: %w", name, err)
		}
		r.Conversation = &conv
	}
	return r, nil
}

// Encode is the entry's JSON.
func (r Policy) Encode() json.RawMessage { return mustEncode(r) }

// DecodePolicy reads a manifest's policy entry, in the form this build
// writes or the one collectors wrote before the conversation was typed (see
// policy.Conversation.UnmarshalJSON).
func DecodePolicy(raw []byte) (Policy, error) {
	var r Policy
	err := json.Unmarshal(raw, &r)
	return r, err
}

// UnmarshalJSON decodes either form of the entry and remembers which
// conversation keys it recorded.
func (r *Policy) UnmarshalJSON(b []byte) error {
	type plain Policy // without this method
	var raw struct {
		plain
		Conversation json.RawMessage `json:"conversation"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("policy: manifest policy entry: %w", err)
	}
	*r = Policy(raw.plain)
	if len(raw.Conversation) == 0 || isNull(raw.Conversation) {
		return nil
	}
	if err := json.Unmarshal(raw.Conversation, &r.recorded); err != nil {
		return fmt.Errorf("policy: manifest policy conversation: %w", err)
	}
	conv, err := policy.DecodeConversation(r.recorded)
	if err != nil {
		return err
	}
	r.Conversation = &conv
	return nil
}

// Shown is the conversation as exporters rebuild it. It is the recorded
// Conversation where the manifest has one; for what it leaves out — a
// manifest written before the conversation was recorded, or by another
// tool — the options of the same name stand in (system_prompt, or its
// older name system; tool_mode; actions; observation_cap;
// enable_thinking; tokens; tool_parser; reasoning_parser;
// chat_template_kwargs; send_reasoning). What neither records keeps its
// neutral value: no system message, function calls, every action, whole
// observations, enable_thinking unknown, no token mode, parsers or kwargs
// recorded, reasoning not sent back, sorted tool keys (ToolOrder). A value that cannot be read is an error, never a
// silent default.
func (r Policy) Shown() (policy.Conversation, error) {
	fields := map[string]json.RawMessage{}
	for k, v := range r.Options {
		b, _ := json.Marshal(v)
		fields[k] = b
	}
	if _, ok := fields["system_prompt"]; !ok || r.Options["system_prompt"] == "" {
		if sys, ok := fields["system"]; ok {
			fields["system_prompt"] = sys
		}
	}
	recorded := r.recorded
	if recorded == nil && r.Conversation != nil {
		// Made by NewPolicy, not decoded: its fields are what the manifest
		// will hold.
		b, _ := json.Marshal(r.Conversation)
		_ = json.Unmarshal(b, &recorded)
	}
	for k, v := range recorded {
		fields[k] = v
	}
	return policy.DecodeConversation(fields)
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }
