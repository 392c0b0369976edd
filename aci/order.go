package aci

import (
	"encoding/json"

	"github.com/forkline/forkline/runtime"
)

// OfferedToolsJSON is ToolsJSON of the kinds a conversation offered, every
// canonical action (in runtime.ActionKinds order) when kinds is empty: what
// an exporter writes as the tools the model was shown. It panics on a kind
// runtime does not know, which a decoded policy.Conversation never holds
// (its actions are checked when it is read).
func OfferedToolsJSON(kinds []runtime.ActionKind) json.RawMessage {
	return OfferedToolsJSONFor(kinds, "")
}

// OfferedToolsJSONFor is OfferedToolsJSON for a task whose shell mode is
// shell (see ToolsFor).
func OfferedToolsJSONFor(kinds []runtime.ActionKind, shell string) json.RawMessage {
	if len(kinds) == 0 {
		kinds = runtime.ActionKinds()
	}
	raw, err := ToolsJSONFor(kinds, shell)
	if err != nil {
		panic(err)
	}
	return raw
}

// NotRunResult is the tool result a policy sends for each tool call of a
// turn after the first, which forkline does not run (one action per turn);
// exports write the same text, so the conversation is the one the model
// had.
const NotRunResult = "[forkline: not run: one action per turn; only the first tool call ran]"
