package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/forkline/forkline/runtime"
)

// Continue implements policy.Continuer: the policy takes up history h, which
// it did not decide itself (a branch continuing its parent).
//
// From a live parent of this kind (a branch point in this process) it
// copies the parent's conversation exactly — every message as sent,
// native tool calls with the server's ids and arguments as the model wrote
// them — so the branch's next request is the one the parent would have
// sent, and a token record made from its turns extends the parent's ids.
// Its own configuration (the branch's sampling seed) is kept; the parent's
// must show the model the same conversation (system prompt, tool mode).
//
// From a record (parent nil: a branch re-made from a dataset) it rebuilds
// the conversation from h: each step that has a model turn becomes the
// assistant message the turn recorded (its text and, with native tools, a
// call of the step's action), followed by the step's result, as Decide
// would have shown it. A dataset does not keep the server's tool-call ids
// or the arguments' exact text, so a rebuilt call carries the canonical
// arguments and a call_<step>_0 id; a chat template that renders either
// differently from the model's own text makes the branch's first prompt
// differ from what the parent's would have been, and the token record says
// so (token_drift) rather than guessing. A step without a model turn is
// shown as a text tool call, as for any history the policy did not decide.
func (p *Policy) Continue(ctx context.Context, h runtime.History, parent runtime.Policy) error {
	if p.started {
		return fmt.Errorf("openai: Continue on a policy that has already decided")
	}
	if par, ok := parent.(*Policy); ok && par != nil {
		if par.system != p.system || par.cfg.ToolMode != p.cfg.ToolMode {
			return fmt.Errorf("openai: a branch's policy must show the model its parent's conversation (system prompt and tool mode differ)")
		}
		if par.observed > len(h.Steps) {
			return fmt.Errorf("openai: the parent's policy saw %d steps, the history holds %d", par.observed, len(h.Steps))
		}
		p.msgs = slices.Clone(par.msgs)
		p.started = par.started
		p.observed = par.observed
		p.answered = maps.Clone(par.answered)
		p.rebuilt = maps.Clone(par.rebuilt)
		// Token in, token out continues from the parent's ids exactly.
		p.ids = slices.Clone(par.ids)
		p.turnEnd = par.turnEnd
		if par.lastReply != nil {
			last := *par.lastReply
			p.lastReply = &last
		}
		return nil
	}
	p.msgs = []chatMessage{{Role: "system", Content: str(p.system)}, {Role: "user", Content: str(h.Instruction)}}
	p.started = true
	p.observed = 0
	for i, s := range h.Steps {
		if s.Model == nil || s.Action.Kind == "" {
			continue
		}
		reply := chatMessage{Role: "assistant"}
		if s.Model.RawText != "" {
			reply.Content = str(s.Model.RawText)
		}
		meta := turnMeta{native: p.cfg.ToolMode == ToolsNative}
		if meta.native {
			id := s.Model.ToolCallID
			if id == "" {
				id = fmt.Sprintf("call_%d_0", i)
			}
			args, err := callArguments(s.Action)
			if err != nil {
				return fmt.Errorf("openai: step %d: %w", s.Index, err)
			}
			reply.ToolCalls = []toolCall{{ID: id, Type: "function", Function: toolCallFunc{Name: string(s.Action.Kind), Arguments: args}}}
			meta.callIDs = []string{id}
		} else if reply.Content == nil {
			reply.Content = str("")
		}
		if p.rebuilt == nil {
			p.rebuilt = map[int]chatMessage{}
		}
		p.rebuilt[i] = reply
		p.answered[i] = meta
		// Token in, token out goes on from the ids the record holds: the
		// last turn's prompt and reply are the episode's ids so far, as the
		// server saw them, so nothing of the prefix is re-rendered.
		if m := s.Model; len(m.PromptIDs) > 0 && len(m.ResponseIDs) > 0 {
			p.ids = append(slices.Clone(m.PromptIDs), m.ResponseIDs...)
			p.turnEnd = m.ResponseIDs[len(m.ResponseIDs)-1]
			last := reply
			p.lastReply = &last
		} else {
			p.ids, p.lastReply = nil, nil
		}
	}
	return nil
}

// callArguments is an action's fields as the JSON string a tool call's
// arguments are sent as: {"cmd":"ls"} for exec ls.
func callArguments(a runtime.Action) (json.RawMessage, error) {
	canon, err := a.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(canon, &fields); err != nil {
		return nil, err
	}
	delete(fields, "kind")
	obj, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return json.Marshal(string(obj))
}
