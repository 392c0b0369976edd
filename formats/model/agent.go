package model

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/forkline/forkline/schemas"
)

// Agent episodes. An episode an agent harness ran (-policy agent; its row's
// agent column set) is exported as the harness had its conversation: the
// prompt is the first step's harness_input (the harness's system prompt,
// the instruction as it wrapped it, its reminders), then per step the
// model's reply — its text, its reasoning, its calls in the harness's own
// tool names as the model wrote them — followed by what the harness sent
// with its next call (the next step's harness_input: the tool results, and
// whatever it appended). The tools are the harness's, from the tools blob
// the first step names. A step whose history_cut is set starts another
// conversation: the export keeps the trajectory before the first cut, as
// the token record does, never a glued one.

// harnessMessage is one message of a harness_input column (docs/SCHEMA.md).
type harnessMessage struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	Reasoning string `json:"reasoning"`
	ToolCalls []struct {
		ID        string `json:"id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

// IsAgent reports whether an agent harness ran the episode.
func (e *Episode) IsAgent() bool { return e.Row.Agent != nil }

// AgentRecord is the episode's agent column, decoded; nil for an episode
// no harness ran.
func (e *Episode) AgentRecord() (*schemas.AgentRecord, error) {
	if e.Row.Agent == nil {
		return nil, nil
	}
	var r schemas.AgentRecord
	if err := json.Unmarshal([]byte(*e.Row.Agent), &r); err != nil {
		return nil, fmt.Errorf("model: episode %s: agent: %w", e.Row.EpisodeID, err)
	}
	return &r, nil
}

// harnessMessages decodes a step's harness_input into messages of step.
func harnessMessages(s *schemas.StepRow) ([]Message, error) {
	if s.HarnessInput == nil {
		return nil, fmt.Errorf("step %d of an agent episode has no harness_input", s.StepIndex)
	}
	var in []harnessMessage
	if err := json.Unmarshal([]byte(*s.HarnessInput), &in); err != nil {
		return nil, fmt.Errorf("step %d: harness_input: %w", s.StepIndex, err)
	}
	out := make([]Message, len(in))
	for i, m := range in {
		msg := Message{Role: m.Role, Content: m.Content, Reasoning: m.Reasoning, ToolCallID: m.ToolCallID, Step: int(s.StepIndex) - 1}
		if s.StepIndex == 0 || s.HistoryCut != nil {
			msg.Step = -1
		}
		for j, c := range m.ToolCalls {
			id := c.ID
			if id == "" {
				id = CallID(int(s.StepIndex)) + "_" + strconv.Itoa(j)
			}
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: id, Name: c.Name, Arguments: argumentsObject(c.Arguments), Text: c.Arguments})
		}
		out[i] = msg
	}
	return out, nil
}

// agentTrajectory is the steps before the first cut.
func (e *Episode) agentTrajectory() []schemas.StepRow {
	for i := range e.Steps {
		if i > 0 && e.Steps[i].HistoryCut != nil {
			return e.Steps[:i]
		}
	}
	return e.Steps
}

// agentPrompt is the harness's first call's messages.
func agentPrompt(e *Episode) ([]Message, error) {
	if len(e.Steps) == 0 {
		return nil, nil
	}
	return harnessMessages(&e.Steps[0])
}

// agentMessages is the harness's conversation up to the first cut.
func agentMessages(e *Episode, o Options) ([]Message, error) {
	if _, err := e.agentTools(); err != nil {
		return nil, err
	}
	var out []Message
	for i, s := range e.agentTrajectory() {
		where := func(err error) error {
			return fmt.Errorf("model: episode %s step %d: %w", e.Row.EpisodeID, s.StepIndex, err)
		}
		in, err := harnessMessages(&s)
		if err != nil {
			return nil, where(err)
		}
		out = append(out, in...)
		calls, err := stepCalls(&e.agentTrajectory()[i])
		if err != nil {
			return nil, where(err)
		}
		out = append(out, Message{Role: RoleAssistant, Content: deref(s.ModelText), Reasoning: deref(s.Reasoning),
			ToolCalls: calls, Step: int(s.StepIndex)})
	}
	applyReasoning(out, o.Reasoning, e.Conversation.SentReasoning())
	return out, nil
}

// agentTools is the harness's tools, from the blob the first step names.
func (e *Episode) agentTools() (json.RawMessage, error) {
	if len(e.Steps) == 0 || e.Steps[0].ToolsSHA256 == nil {
		return nil, nil
	}
	sum := *e.Steps[0].ToolsSHA256
	if e.Blob == nil {
		return nil, fmt.Errorf("model: episode %s: its tools (blob %s) cannot be read here", e.Row.EpisodeID, sum)
	}
	b, err := e.Blob(sum)
	if err != nil {
		return nil, fmt.Errorf("model: episode %s: tools blob %s: %w", e.Row.EpisodeID, sum, err)
	}
	if len(b) == 0 || !json.Valid(b) {
		return nil, fmt.Errorf("model: episode %s: tools blob %s is missing or not JSON", e.Row.EpisodeID, sum)
	}
	return b, nil
}
