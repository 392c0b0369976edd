// Package model is the export model: what every export target is built
// from, so that the targets (formats/chat, formats/hf, formats/verl,
// formats/jsonl) are peers over it and never import each other.
//
// It owns Episode — one native episode with its steps, rewards and what
// the export knows around it: the task's instruction and verify command,
// the conversation its policy had (policy.Conversation, from the run's
// manifest), the selected reward, the split, the blob store — and what
// targets derive from it: the conversation as messages (Prompt, Messages,
// ToolCall arguments, tool results as the model saw them), the tools the
// policy offered, screenshots, and Refusal, the error a target returns for
// an episode it cannot represent. It also owns the typed table (Features,
// TableWriter) the Parquet and Arrow targets write through, so every
// Parquet file forkline exports carries Hugging Face datasets' features
// and loads with exact types.
//
// It knows the native row types (schemas), the canonical actions
// (runtime), their tool schemas and observation text (aci) and the
// policy's conversation record (policy), and the Arrow/Parquet libraries.
// It does not read datasets (formats/shard), select or split episodes
// (package export), or know any target's file layout.
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
// A run whose policy wrote its tool calls as text (policy.ToolsText)
// exports as it ran: each assistant message is the model's text, which
// holds the call, and each observation goes back as a user message; no
// tools are listed, since the model saw them in the system prompt, not as
// function tools.
package model

import (
	"fmt"
	"strings"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/schemas"
)

// Episode is one native episode as export targets see it. The pipeline
// fills it; targets must not keep it (or its slices) after Write returns.
type Episode struct {
	Row     schemas.EpisodeRow
	Steps   []schemas.StepRow   // in step order
	Rewards []schemas.RewardRow // all of the episode's reward rows

	// From the run's manifest.
	Instruction string // the task's instruction: the user message
	VerifyCmd   string // the task's verify command, "" when it has none
	// Conversation is how the run's policy talked to its model (its system
	// prompt, tool mode, offered actions, observation cap, enable_thinking),
	// as policy.Record.Shown reads it from the manifest; the zero value for
	// a policy without a model (no system message, every action offered as
	// a function, whole observations).
	Conversation policy.Conversation

	// RewardName selects the reward rows Reward and StepReward return.
	RewardName string
	// Split is the split the episode was assigned to ("train", "test", ...).
	Split string
	// Group is the episode's group: the trajectories that share a prefix
	// and differ after it (the row's group_id; for a row without one, the
	// episodes of its task spec). GroupSize is how many trajectories of
	// the input are in it, so a target that pairs or groups siblings knows
	// when it has seen them all. PrefixSteps is how many of Steps are the
	// shared prefix (the row's branch_step, 0 for a root).
	Group       string
	GroupSize   int
	PrefixSteps int
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
		return nil, fmt.Errorf("model: episode %s step %d: screenshot %s: %w", e.Row.EpisodeID, i, s.ScreenHash, err)
	}
	return b, nil
}

// Tools returns the function tools the episode's policy offered
// (Conversation.Actions, every canonical action when none are recorded), or
// nil when it offered none as functions (tool calls written in the text).
func (e *Episode) Tools() []map[string]any {
	if e.Conversation.TextToolCalls() {
		return nil
	}
	actions := e.Conversation.Actions
	if len(actions) == 0 {
		return aci.ToolSchemas()
	}
	out := make([]map[string]any, len(actions))
	for i, k := range actions {
		out[i] = aci.ToolSchema(k)
	}
	return out
}

// ToolsKey identifies the episode's tool list, for caching its encoding.
func (e *Episode) ToolsKey() string {
	if e.Conversation.TextToolCalls() {
		return "text"
	}
	ks := make([]string, len(e.Conversation.Actions))
	for i, k := range e.Conversation.Actions {
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
