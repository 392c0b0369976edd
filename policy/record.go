package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
)

// Record is the policy as a dataset's manifest records it (the "policy"
// entry): which policy, opened how, and the conversation it had. A resume
// compares the run's Record with this command's; exporters read the
// conversation from it (Shown).
type Record struct {
	Name string `json:"name"`
	// ScriptFile is Options.ScriptFile as given, "" for none.
	ScriptFile string `json:"script_file"`
	// ScriptSHA256 is the hex sha256 of ScriptFile's content, "" without a
	// file; nil in manifests written before it was recorded. A resume
	// compares the actions, not the file's name.
	ScriptSHA256 *string `json:"script_sha256"`
	// Options are Options.Params as given (never nil once made by
	// NewRecord).
	Options map[string]string `json:"options"`
	// Conversation is what the policy's Source reported (Conversational),
	// nil for a policy that talks to no model, and in manifests written
	// before it was recorded.
	Conversation *Conversation `json:"conversation,omitempty"`

	// recorded are the conversation's keys as the manifest held them, so
	// that Shown can tell a recorded field from one left out.
	recorded map[string]json.RawMessage
}

// NewRecord is the record of the policy name opened with opts as src: the
// options as given, the script file's digest, and src's conversation when
// it has one.
func NewRecord(name string, opts Options, src Source) (Record, error) {
	sum := ""
	if opts.ScriptFile != "" {
		data, err := os.ReadFile(opts.ScriptFile)
		if err != nil {
			return Record{}, fmt.Errorf("policy: -script: %w", err)
		}
		h := sha256.Sum256(data)
		sum = hex.EncodeToString(h[:])
	}
	params := maps.Clone(opts.Params)
	if params == nil {
		params = map[string]string{}
	}
	r := Record{Name: name, ScriptFile: opts.ScriptFile, ScriptSHA256: &sum, Options: params}
	if c, ok := src.(Conversational); ok {
		conv, err := c.Conversation()
		if err != nil {
			return Record{}, fmt.Errorf("policy: %s: %w", name, err)
		}
		r.Conversation = &conv
	}
	return r, nil
}

// DecodeRecord reads a manifest's policy entry, in the form this build
// writes or the one collectors wrote before the conversation was typed (see
// Conversation.UnmarshalJSON).
func DecodeRecord(raw []byte) (Record, error) {
	var r Record
	err := json.Unmarshal(raw, &r)
	return r, err
}

// UnmarshalJSON decodes either form of the entry and remembers which
// conversation keys it recorded.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record // without this method
	var raw struct {
		plain
		Conversation json.RawMessage `json:"conversation"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("policy: manifest policy entry: %w", err)
	}
	*r = Record(raw.plain)
	if len(raw.Conversation) == 0 || isNull(raw.Conversation) {
		return nil
	}
	if err := json.Unmarshal(raw.Conversation, &r.recorded); err != nil {
		return fmt.Errorf("policy: manifest policy conversation: %w", err)
	}
	conv, err := decodeConversation(r.recorded)
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
func (r Record) Shown() (Conversation, error) {
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
		// Made by NewRecord, not decoded: its fields are what the manifest
		// will hold.
		b, _ := json.Marshal(r.Conversation)
		_ = json.Unmarshal(b, &recorded)
	}
	for k, v := range recorded {
		fields[k] = v
	}
	return decodeConversation(fields)
}
