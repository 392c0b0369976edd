// Package openai is the LLM policy: it drives a model behind any
// OpenAI-compatible /v1/chat/completions server (vLLM, SGLang, llama.cpp
// server, hosted APIs) and records each turn token-exact, as the server
// reports it: prompt ids, response ids and one logprob per generated token
// (vLLM ≥ 0.10.2 return_token_ids with top-level prompt_token_ids; SGLang's
// per-choice prompt_token_ids), never a re-tokenization.
//
// The canonical actions are offered as function-calling tools (package aci's
// schemas, derived from runtime's action definitions); a tool call becomes a
// canonical Action. For models without native tool calling, ParseText reads
// the common text dialects. One action is taken per turn: when the model
// makes several tool calls, the first runs, all are recorded in
// ModelEvent.Actions, and the others are answered "not run" so the
// conversation stays well-formed.
//
// Turns end an episode as follows: no tool call → runtime.ExitNoAction; a
// tool call that does not make a canonical action → ExitUnparsedAction;
// finish_reason "length" → ExitOutputTruncated (a cut answer is never
// executed); a server that still fails after the retries → an error, which
// runtime.Rollout records as ExitPolicyError — wrapping runtime.ErrUnavailable
// when nothing could be reached at the server's address at all, so that a
// collector treats a server that is gone as the run's failure, not the
// episode's.
//
// Reasoning the server reports apart (message.reasoning, reasoning_content)
// is recorded in ModelEvent.Reasoning but not sent back: chat templates drop
// earlier turns' reasoning, and servers differ in how they would accept it.
// Observations go back as text only, their middle elided beyond
// Config.ObservationCap.
//
// A Policy holds one episode's conversation; build one per episode. The API
// key is read from the environment at request time and never stored in a
// Config, a message, an error or a log line.
//
// It knows runtime, aci and HTTP only: not tasks, datasets or token assembly
// (package tokens does that from the ModelEvents).
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

// Policy is an LLM policy for one episode. It is not safe for concurrent use:
// Rollout calls Decide from one goroutine.
type Policy struct {
	cfg     Config
	client  *client
	tools   []map[string]any
	offered map[runtime.ActionKind]bool
	system  string

	msgs     []chatMessage
	started  bool
	observed int              // history steps whose result is in msgs
	answered map[int]turnMeta // step index → how this policy answered it
	// rebuilt are the assistant messages Continue rebuilt from a record
	// for steps of the history it was started on, by step index; catchUp
	// shows them before the steps' results.
	rebuilt map[int]chatMessage
}

// turnMeta remembers how an action was asked for, to answer it the same way.
type turnMeta struct {
	native  bool     // a native tool call: results go in tool messages
	callIDs []string // every tool call of the answer; the first one ran
}

// New returns a policy for one episode. cfg is validated.
func New(cfg Config) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	tools, err := Tools(cfg.Actions)
	if err != nil {
		return nil, err
	}
	p := &Policy{cfg: cfg, client: c, tools: tools, offered: map[runtime.ActionKind]bool{}, answered: map[int]turnMeta{}}
	for _, k := range cfg.Actions {
		p.offered[k] = true
	}
	p.system = systemPrompt(cfg, tools)
	return p, nil
}

// Decide sends the conversation so far and turns the answer into a decision.
func (p *Policy) Decide(ctx context.Context, h runtime.History) (runtime.Decision, error) {
	if !p.started {
		p.msgs = []chatMessage{{Role: "system", Content: str(p.system)}, {Role: "user", Content: str(h.Instruction)}}
		p.started = true
	}
	p.catchUp(h.Steps)

	res, err := p.client.complete(ctx, p.request())
	if err != nil {
		return runtime.Decision{}, p.hint(err)
	}
	resp := res.resp
	ch := resp.Choices[0]
	ev := modelEvent(resp, &ch)
	ev.Latency = res.latency
	if ev.Model == "" {
		ev.Model = p.cfg.Model
	}
	stop := func(exit runtime.ExitReason, detail string) (runtime.Decision, error) {
		return runtime.Decision{Stop: exit, Model: ev, Detail: detail}, nil
	}

	if ch.FinishReason == "length" {
		return stop(runtime.ExitOutputTruncated, "openai: the answer hit the token limit (finish_reason length) and is not executed")
	}
	calls, native, err := p.calls(&ch)
	if err != nil {
		return stop(runtime.ExitUnparsedAction, err.Error())
	}
	if len(calls) == 0 {
		return stop(runtime.ExitNoAction, "openai: the model answered without a tool call")
	}
	first, err := calls[0].Action(p.offered)
	if err != nil {
		return stop(runtime.ExitUnparsedAction, err.Error())
	}
	ev.Actions = []runtime.Action{first}
	for _, c := range calls[1:] {
		if a, err := c.Action(p.offered); err == nil {
			ev.Actions = append(ev.Actions, a)
		}
	}

	meta := turnMeta{native: native}
	reply := chatMessage{Role: "assistant", Content: ch.Message.Content}
	if native {
		for i, tc := range ch.Message.ToolCalls {
			if tc.ID == "" {
				// The tool message must name its call; invent a stable id
				// when the server gave none.
				tc.ID = fmt.Sprintf("call_%d_%d", len(h.Steps), i)
			}
			if tc.Type == "" {
				tc.Type = "function"
			}
			if len(tc.Function.Arguments) == 0 {
				tc.Function.Arguments = json.RawMessage(`"{}"`)
			}
			reply.ToolCalls = append(reply.ToolCalls, tc)
			meta.callIDs = append(meta.callIDs, tc.ID)
		}
		ev.ToolCallID = meta.callIDs[0]
	} else if reply.Content == nil {
		reply.Content = str("")
	}
	p.msgs = append(p.msgs, reply)
	p.answered[len(h.Steps)] = meta
	return runtime.Decision{Action: first, Model: ev}, nil
}

// calls returns the answer's tool calls: native ones when the server parsed
// them, else those written in the text.
func (p *Policy) calls(ch *chatChoice) ([]Call, bool, error) {
	if p.cfg.ToolMode == ToolsNative && len(ch.Message.ToolCalls) > 0 {
		out := make([]Call, len(ch.Message.ToolCalls))
		for i, tc := range ch.Message.ToolCalls {
			out[i] = Call{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
		}
		return out, true, nil
	}
	if ch.Message.Content == nil {
		return nil, false, nil
	}
	calls, err := ParseText(*ch.Message.Content)
	return calls, false, err
}

// catchUp appends the results of steps not yet shown to the model. A step
// this policy did not decide (a history it was started on) is shown as a
// text tool call first.
func (p *Policy) catchUp(steps []runtime.Step) {
	for i := p.observed; i < len(steps); i++ {
		s := steps[i]
		meta, ours := p.answered[i]
		if reply, ok := p.rebuilt[i]; ok {
			p.msgs = append(p.msgs, reply)
		} else if !ours {
			p.msgs = append(p.msgs, chatMessage{Role: "assistant", Content: str(textCall(s.Action))})
		}
		obs := aci.ObservationText(s, p.cfg.ObservationCap)
		if !meta.native {
			p.msgs = append(p.msgs, chatMessage{Role: "user", Content: str(obs)})
			continue
		}
		p.msgs = append(p.msgs, chatMessage{Role: "tool", ToolCallID: meta.callIDs[0], Content: str(obs)})
		for _, id := range meta.callIDs[1:] {
			p.msgs = append(p.msgs, chatMessage{Role: "tool", ToolCallID: id,
				Content: str("[forkline: not run: one action per turn; only the first tool call ran]")})
		}
	}
	p.observed = len(steps)
}

func (p *Policy) request() *chatRequest {
	r := &chatRequest{
		Model:       p.cfg.Model,
		Messages:    append([]chatMessage(nil), p.msgs...),
		Temperature: p.cfg.Temperature,
		TopP:        p.cfg.TopP,
		MaxTokens:   p.cfg.MaxTokens,
		Seed:        p.cfg.Seed,
	}
	if p.cfg.ToolMode == ToolsNative {
		r.Tools = p.tools
	}
	if p.cfg.Logprobs {
		zero := 0
		r.Logprobs, r.TopLogprobs = true, &zero
	}
	if p.cfg.TokenIDs {
		r.ReturnTokenIDs, r.ReturnPromptTokenIDs = true, true
	}
	return r
}

// hint adds advice to errors with a likely cause.
func (p *Policy) hint(err error) error {
	var se *StatusError
	if errors.As(err, &se) && se.Code == 400 && p.cfg.ToolMode == ToolsNative && strings.Contains(strings.ToLower(se.Body), "tool") {
		return fmt.Errorf("%w (if the server has no tool calling, use tool_mode=text)", err)
	}
	return err
}

// modelEvent records a turn as the server reported it. Token fields are
// filled only when they are consistent: response mask 1 per response id,
// logprobs only when there is exactly one per response id (else none, rather
// than misaligned ones).
func modelEvent(resp *chatResponse, ch *chatChoice) *runtime.ModelEvent {
	ev := &runtime.ModelEvent{Model: resp.Model, FinishReason: ch.FinishReason}
	if ch.Message.Content != nil {
		ev.RawText = *ch.Message.Content
	}
	switch {
	case ch.Message.Reasoning != nil:
		ev.Reasoning = *ch.Message.Reasoning
	case ch.Message.ReasoningContent != nil:
		ev.Reasoning = *ch.Message.ReasoningContent
	}
	if resp.Usage != nil {
		ev.Usage = runtime.Usage{PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens}
	}
	ev.PromptIDs = ch.PromptTokenIDs // SGLang
	if len(ev.PromptIDs) == 0 {
		ev.PromptIDs = resp.PromptTokenIDs // vLLM
	}
	if len(ch.TokenIDs) > 0 {
		ev.ResponseIDs = ch.TokenIDs
		ev.ResponseMask = make([]int8, len(ch.TokenIDs))
		for i := range ev.ResponseMask {
			ev.ResponseMask[i] = 1
		}
		if ch.Logprobs != nil && len(ch.Logprobs.Content) == len(ch.TokenIDs) {
			ev.Logprobs = make([]float32, len(ch.TokenIDs))
			for i, c := range ch.Logprobs.Content {
				ev.Logprobs[i] = float32(c.Logprob)
			}
		}
	}
	return ev
}

// textCall writes an action in the <tool_call> dialect.
func textCall(a runtime.Action) string {
	if a.Kind == "" {
		return ""
	}
	canon, _ := a.MarshalJSON()
	var fields map[string]json.RawMessage
	json.Unmarshal(canon, &fields)
	delete(fields, "kind")
	args, _ := json.Marshal(fields)
	call, _ := json.Marshal(struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}{string(a.Kind), args})
	return "<tool_call>\n" + string(call) + "\n</tool_call>"
}

const defaultSystem = `You are an agent working in a sandboxed computer to complete the user's task.
Act by calling exactly one tool per reply; you will see its result before you act again.
Paths and commands are relative to the task's working directory.
When the task is complete, call done (with an answer if the task asks for one).`

const textDialect = `

To call a tool, reply with exactly one block of this form:
<tool_call>
{"name": "TOOL", "arguments": {ARGUMENTS}}
</tool_call>

Tools (with the JSON Schema of their arguments):
{{tools}}`

// systemPrompt is the configured or default prompt, with {{tools}} replaced.
func systemPrompt(cfg Config, tools []map[string]any) string {
	s := cfg.SystemPrompt
	if s == "" {
		s = defaultSystem
		if cfg.ToolMode == ToolsText {
			s += textDialect
		}
	}
	if !strings.Contains(s, "{{tools}}") {
		return s
	}
	return strings.ReplaceAll(s, "{{tools}}", toolListing(tools))
}

func str(s string) *string { return &s }

// Conversation is, with defaults applied, what shapes the conversation
// this configuration produces — the rendered system prompt, the tool mode,
// the actions offered and the observation cap — for the manifest, so
// exported SFT data holds the same messages the model was shown. The
// policy sets no chat template kwargs, so EnableThinking stays unknown.
func (c Config) Conversation() (policy.Conversation, error) {
	tools, err := Tools(c.Actions)
	if err != nil {
		return policy.Conversation{}, err
	}
	return policy.Conversation{
		SystemPrompt:   systemPrompt(c, tools),
		ToolMode:       c.ToolMode,
		Actions:        slices.Clone(c.Actions),
		ObservationCap: c.ObservationCap,
	}, nil
}
