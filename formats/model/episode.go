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
// Messages rebuilds the conversation the policy had with its model:
//
//	system     the run's system prompt, when the manifest records one
//	user       the task's instruction
//	per step (native tool mode):
//	assistant  content = the model's text ("" when none), reasoning kept
//	           apart (Options.Reasoning); tool_calls = the calls the server
//	           returned, every one, as the model wrote them (steps.tool_calls;
//	           for runs without that record, the step's action with its
//	           canonical fields), the done call included
//	tool       per call, in order: the first call's observation as the
//	           policy showed it (aci.ObservationText, elided past the run's
//	           observation cap), aci.NotRunResult for the calls after it;
//	           none after done or after a turn that ended the episode
//	per step (text tool mode):
//	assistant  content = the model's text, which holds its call as written
//	user       the observation
//
// A turn that ended the episode without a valid action (no call, an
// unparsable one, an answer cut at the token limit) is an assistant message
// marked Failed. EncodeMessage writes a message with exactly the keys that
// apply to it. Text-mode runs list no tools: the model saw them in the
// system prompt, not as function tools.
package model

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/policy"
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
	Instruction string // the task's instruction: the user message
	VerifyCmd   string // the task's verify command, "" when it has none
	// Conversation is how the run's policy talked to its model (its system
	// prompt, tool mode, offered actions, observation cap, enable_thinking),
	// as manifest.Policy.Shown reads it from the manifest; the zero value for
	// a policy without a model (no system message, every action offered as
	// a function, whole observations).
	Conversation policy.Conversation

	// TaskActions are the actions the episode's task allows
	// (task.Spec.AllowedActions): the tools offered when the conversation
	// says each task was offered its own (policy.Conversation.TaskActions).
	// The episodes of a task may share it: read it, never change it.
	TaskActions []runtime.ActionKind
	// TaskShell is the episode's task's shell mode (task.Spec.Shell), as
	// aci.ExecShell gives it for the run's provider: the exec tool offered
	// said which (aci.ToolsFor).
	TaskShell string

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
		return nil, fmt.Errorf("model: episode %s step %d: screenshot %s: %w", e.Row.EpisodeID, i, s.ScreenHash, err)
	}
	return b, nil
}

// Tools returns, for an agent episode, the harness's tools as it offered
// them (the first step's tools blob: chat API tool objects); else the
// function tools the episode's policy offered
// (Conversation.Actions, every canonical action when none are recorded) as
// a JSON array in aci's key order (aci.OfferedToolsJSON, the order the policy sent
// them in), or nil when it offered none as functions (tool calls written in
// the text).
func (e *Episode) Tools() json.RawMessage {
	if e.IsAgent() {
		// The harness's own (an unreadable blob is Messages' error).
		t, _ := e.agentTools()
		return t
	}
	if e.Conversation.TextToolCalls() {
		return nil
	}
	return aci.OfferedToolsJSONFor(e.offered(), e.TaskShell)
}

// offered are the actions the episode's policy offered as tools.
func (e *Episode) offered() []runtime.ActionKind {
	if e.Conversation.TaskActions && len(e.Conversation.Actions) == 0 {
		return e.TaskActions
	}
	return e.Conversation.Actions
}

// ToolsKey identifies the episode's tool list, for caching its encoding.
func (e *Episode) ToolsKey() string {
	if e.IsAgent() {
		if len(e.Steps) > 0 && e.Steps[0].ToolsSHA256 != nil {
			return "agent:" + *e.Steps[0].ToolsSHA256
		}
		return "agent:none"
	}
	if e.Conversation.TextToolCalls() {
		return "text"
	}
	ks := make([]string, len(e.offered()))
	for i, k := range e.offered() {
		ks[i] = string(k)
	}
	key := "fn:" + strings.Join(ks, ",")
	if shell := e.TaskShell; shell == aci.ShellPersistent || shell == aci.ShellPersistentForked {
		// exec's description says the shell carries (aci.ToolsFor): another
		// list than a fresh shell's with the same kinds. A fresh shell's key
		// is the one it always was, so the group ids derived from it
		// (GroupID) stay what earlier exports wrote.
		key += ";shell:" + shell
	}
	return key
}

// GroupID is the episode's group: the episodes that started from the same
// state with the same prompt, which GRPO/RLOO compare with each other and
// preference pairs are drawn from. It is the episode row's group_id when
// the collector set one (branching), else derived: the first 16 bytes, in
// hex, of the sha256 of the task id, task spec hash, golden checkpoint id,
// the prompt messages (system prompt and instruction) and the tools offered
// — forked replicas of one task in one run share all of them.
func (e *Episode) GroupID() string {
	if e.Row.GroupID != nil && *e.Row.GroupID != "" {
		return *e.Row.GroupID
	}
	h := sha256.New()
	for _, part := range []string{e.Row.TaskID, e.Row.TaskHash, e.Row.GoldenID, e.Conversation.SystemPrompt, e.Instruction, e.ToolsKey()} {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ErrSelection is wrapped by the error a target's Close returns when the
// selected episodes, written together, cannot make a usable output (a
// verl-agent batch mixing rows with and without logprobs). The exporter
// reports it as bad input: a different selection fixes it, a retry does not.
var ErrSelection = errors.New("model: the selected episodes cannot be written together")

// Refusal is the error a target's Write returns for an episode it cannot
// represent without inventing data (verl-agent: no token record). The
// pipeline counts refusals by Reason, reports them and goes on.
type Refusal struct {
	Reason string // short and stable, e.g. "no token record"
}

func (r *Refusal) Error() string { return "refused: " + r.Reason }
