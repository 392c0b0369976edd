package aci

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"

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
// shell (see ToolsFor). The bytes are shared between callers asking for the
// same tools and must not be modified: an export asks once per episode, and
// encoding the list each time was a fifth of a chat-jsonl export's CPU.
func OfferedToolsJSONFor(kinds []runtime.ActionKind, shell string) json.RawMessage {
	if len(kinds) == 0 {
		kinds = runtime.ActionKinds()
	}
	key := offeredKey(kinds, shell)
	offered.mu.Lock()
	raw, ok := offered.m[key]
	offered.mu.Unlock()
	if ok {
		return raw
	}
	raw, err := ToolsJSONFor(kinds, shell)
	if err != nil {
		panic(err)
	}
	// Capacity clipped: a caller's append copies instead of writing into
	// what the next caller gets.
	raw = slices.Clip(raw)
	offered.mu.Lock()
	// Bounded: the lists come from tasks and conversations, a handful per
	// run; past the bound a list is encoded each time, as before.
	if len(offered.m) < offeredCacheMax {
		offered.m[key] = raw
	}
	offered.mu.Unlock()
	return raw
}

// offeredCacheMax bounds OfferedToolsJSONFor's cache.
const offeredCacheMax = 256

// offered caches OfferedToolsJSONFor by offeredKey.
var offered = struct {
	mu sync.Mutex
	m  map[string]json.RawMessage
}{m: map[string]json.RawMessage{}}

// offeredKey identifies a tool list: the shell mode and the kinds in order
// (kinds are identifiers, never holding the separators).
func offeredKey(kinds []runtime.ActionKind, shell string) string {
	var b strings.Builder
	b.WriteString(shell)
	for _, k := range kinds {
		b.WriteByte('|')
		b.WriteString(string(k))
	}
	return b.String()
}

// NotRunResult is the tool result a policy sends for each tool call of a
// turn after the first, which forkline does not run (one action per turn);
// exports write the same text, so the conversation is the one the model
// had.
const NotRunResult = "[forkline: not run: one action per turn; only the first tool call ran]"
