// Package chat turns native episodes into chat conversations — system and
// user prompt, then per step an assistant message with one tool call and a
// tool message with what the environment returned — and writes them as
// OpenAI/TRL fine-tuning JSON Lines (target chat-jsonl).
//
// It also defines Episode, the unit every export target consumes: one
// native episode with its steps, its rewards and what the export knows
// around it (the task's instruction from the run's manifest, the selected
// reward, the split). formats/verl and formats/hf build on it.
//
// It knows the native row types, the canonical actions (runtime) and their
// tool schemas (aci). It does not read datasets (formats/shard), select or
// split episodes (package export), or know Parquet.
//
// # Conversation
//
//	system     the run's system prompt, when the manifest records one
//	user       the task's instruction
//	per step:
//	assistant  content = the model's text (model_text) or "", reasoning kept
//	           apart; one tool call: name = action kind, id = "call_<step>",
//	           arguments = the action's fields (its canonical JSON minus "kind")
//	tool       tool_call_id = "call_<step>", content = aci.ObservationText:
//	           the text a policy shows the model ("exit code: N" for
//	           commands, timeout, error and screenshot notes, the output,
//	           elided past the run's observation cap)
//	a done action becomes a plain assistant message whose content is the
//	answer (the model's text when the answer is empty); a step without an
//	action becomes an assistant message with the model's text, if any.
//
// A run whose policy wrote its tool calls as text (TextToolCalls) exports as
// it ran: each assistant message is the model's text, which holds the call,
// and each observation goes back as a user message; no tools are listed,
// since the model saw them in the system prompt, not as function tools.
//
// # chat-jsonl layout
//
//	DIR/<split>.jsonl   one conversation per line, per split (train.jsonl, ...)
//
// Each line is an OpenAI chat fine-tuning example:
// {"messages": [...], "tools": [...], "parallel_tool_calls": false}, tools
// as the run's policy offered them (Episode.Tools; no "tools" key for a
// run with text tool calls). Tool-call arguments are JSON-encoded strings, as
// OpenAI requires (ArgsString), or JSON objects (ArgsObject) for chat
// templates that apply tojson to them (TRL's Qwen 2.5 template). An
// assistant message with tool calls and no text has no "content" key.
// Reasoning is not written: OpenAI's format has no field for it.
package chat

import (
	"fmt"
	"strings"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// Episode is one native episode as export targets see it. The pipeline
// fills it; targets must not keep it (or its slices) after Write returns.
type Episode struct {
	Row     schemas.EpisodeRow
	Steps   []schemas.StepRow   // in step order
	Rewards []schemas.RewardRow // all of the episode's reward rows

	// From the run's manifest.
	Instruction    string // the task's instruction: the user message
	VerifyCmd      string // the task's verify command, "" when it has none
	System         string // the policy's system prompt, "" when none is recorded
	EnableThinking *bool  // the policy's enable_thinking setting, nil when unknown
	// Actions are the action tools the policy offered, in order; nil means
	// every canonical action.
	Actions []runtime.ActionKind
	// TextToolCalls: the policy had the model write tool calls in its text
	// (and showed observations as user messages) instead of function calls.
	TextToolCalls bool
	// ObservationCap is the most bytes of an observation's text the policy
	// showed (aci.ObservationText's limit); 0 shows all.
	ObservationCap int

	// RewardName selects the reward rows Reward and StepReward return.
	RewardName string
	// Split is the split the episode was assigned to ("train", "test", ...).
	Split string
	// Blob returns a blob's bytes by hex sha256 (screenshots stored by
	// hash); nil when the source has none.
	Blob func(sha256 string) ([]byte, error)
}

// Reward returns the value of the episode-level reward row named
// RewardName (the first one, if there are several), or nil when there is
// none or its value is null.
func (e *Episode) Reward() *float64 {
	for i := range e.Rewards {
		r := &e.Rewards[i]
		if r.StepIndex == nil && r.Name == e.RewardName {
			return r.Value
		}
	}
	return nil
}

// StepReward returns the value of the reward row named RewardName attached
// to step i, or nil.
func (e *Episode) StepReward(i int) *float64 {
	for j := range e.Rewards {
		r := &e.Rewards[j]
		if r.StepIndex != nil && int(*r.StepIndex) == i && r.Name == e.RewardName {
			return r.Value
		}
	}
	return nil
}

// Screenshot returns step i's PNG: the bytes kept in the step row, or the
// blob its hash names. It returns nil, nil when the step has no screenshot
// or only its hash was recorded (capture policy pixels=none).
func (e *Episode) Screenshot(i int) ([]byte, error) {
	s := &e.Steps[i]
	if len(s.Screenshot) > 0 {
		return s.Screenshot, nil
	}
	if s.ScreenHash == "" || e.Blob == nil {
		return nil, nil
	}
	b, err := e.Blob(s.ScreenHash)
	if err != nil {
		return nil, fmt.Errorf("chat: episode %s step %d: screenshot %s: %w", e.Row.EpisodeID, i, s.ScreenHash, err)
	}
	return b, nil
}

// Tools returns the function tools the episode's policy offered (see
// Actions), or nil when it offered none as functions (TextToolCalls).
func (e *Episode) Tools() []map[string]any {
	if e.TextToolCalls {
		return nil
	}
	if len(e.Actions) == 0 {
		return aci.ToolSchemas()
	}
	out := make([]map[string]any, len(e.Actions))
	for i, k := range e.Actions {
		out[i] = aci.ToolSchema(k)
	}
	return out
}

// ToolsKey identifies the episode's tool list, for caching its encoding.
func (e *Episode) ToolsKey() string {
	if e.TextToolCalls {
		return "text"
	}
	ks := make([]string, len(e.Actions))
	for i, k := range e.Actions {
		ks[i] = string(k)
	}
	return "fn:" + strings.Join(ks, ",")
}

// Refusal is the error a target's Write returns for an episode it cannot
// represent without inventing data (verl-agent: no token record). The
// pipeline counts refusals by Reason, reports them and goes on.
type Refusal struct {
	Reason string // short and stable, e.g. "no token record"
}

func (r *Refusal) Error() string { return "refused: " + r.Reason }
