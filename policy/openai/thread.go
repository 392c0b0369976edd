package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

// A Thread is a conversation whose messages and tools belong to someone
// else — an agent harness running in a sandbox, whose model calls reach
// forkline's gateway — sent to the model server through this package's
// machinery: the run's server, model and sampling parameters, the probe
// its policies share, the token path (token in, token out where the
// server offers it: the thread keeps its ids and has the server render
// only what each call adds), the parsers, the retries and the key. The
// caller says what each call adds to the conversation; the thread keeps
// every reply exactly as the model produced it, so a harness that echoes
// a reply back re-serialized (its tool call arguments as a parsed object,
// say) changes nothing the model is shown.
//
// A Thread is used by one goroutine at a time.
type Thread struct {
	p *Policy
	// started: a call was made; the next one continues it unless restarted.
	started bool
}

// ThreadMessage is one message a Thread's caller adds: the roles of the
// chat API (system, user, assistant, tool), text content, and for an
// assistant message its reasoning and tool calls (arguments as the JSON
// text of the call), for a tool message the call it answers.
type ThreadMessage struct {
	Role       string
	Content    string
	Reasoning  string
	ToolCalls  []runtime.ToolCall
	ToolCallID string
}

// ThreadReply is the model's answer to one call.
type ThreadReply struct {
	// Content and Reasoning are the answer's text and its separate
	// reasoning, "" when none.
	Content   string
	Reasoning string
	// Calls are its tool calls, each with an id (the server's, or one made
	// up when it gave none) and its arguments as the model wrote them.
	Calls []runtime.ToolCall
	// Finish is "stop", "tool_calls" or "length" (the answer was cut at
	// the token limit).
	Finish string
	// Event is the turn's record: token ids, logprobs, provenance, usage.
	Event *runtime.ModelEvent
}

// ErrThreadTools is wrapped by the error of a Thread made under tool_mode
// text: a harness's tools are its own schemas, offered natively.
var ErrThreadTools = errors.New("openai: a thread offers its caller's tools as native function tools; tool_mode=text cannot")

// NewThread returns a thread for one episode (episodeID mixes into the
// sampling seed, as NewPolicy does), sharing the source's probe. src must
// be this package's Source (Open's).
func NewThread(src policy.Source, episodeID string) (*Thread, error) {
	s, ok := src.(source)
	if !ok {
		return nil, fmt.Errorf("openai: NewThread needs the openai policy's source, not %T", src)
	}
	cfg := s.cfg
	if cfg.ToolMode != ToolsNative {
		return nil, ErrThreadTools
	}
	if cfg.Seed != nil && episodeID != "" {
		seed := episodeSeed(*cfg.Seed, episodeID)
		cfg.Seed = &seed
	}
	// The caller brings its own tools; the canonical ones a policy is made
	// with are never sent (wireTools is replaced by every call's).
	cfg.Actions = []runtime.ActionKind{runtime.ActDone}
	p, err := newPolicyWith(cfg, s.probe)
	if err != nil {
		return nil, err
	}
	p.wireTools = nil
	return &Thread{p: p}, nil
}

// Call sends one model call: fresh are the messages the caller added since
// the thread's last reply (the whole conversation on the first call), and
// tools the tools it offers, each a chat API tool object as JSON. With
// restart the conversation starts over from fresh (the caller rewrote its
// history): in token-in-token-out mode the ids held so far are dropped and
// the whole conversation is rendered again. The reply is appended to the
// conversation as the model produced it. An error is the server's, as
// Decide returns them (wrapping runtime.ErrUnavailable when nothing
// answered at its address).
func (t *Thread) Call(ctx context.Context, fresh []ThreadMessage, tools []json.RawMessage, restart bool) (*ThreadReply, error) {
	p := t.p
	info, err := p.probe.get(ctx, p.client)
	if err != nil {
		return nil, err
	}
	if restart || !t.started {
		p.msgs, p.ids, p.lastReply, p.turnEnd = nil, nil, nil, 0
	}
	if len(fresh) == 0 {
		return nil, errors.New("openai: thread: a call adds no message to the conversation")
	}
	before := len(p.msgs)
	for _, m := range fresh {
		p.msgs = append(p.msgs, threadChat(m))
	}
	p.wireTools = tools
	var tr *turn
	if info.mode == policy.TokensTITO {
		tr, err = p.titoTurn(ctx, info, p.msgs[before:])
	} else {
		tr, err = p.chatTurn(ctx, info)
	}
	if err != nil {
		// The conversation is as it was: a retried call adds fresh again.
		p.msgs = p.msgs[:before]
		return nil, err
	}
	t.started = true
	reply := p.replyMessage(tr, info, true, len(p.msgs))
	p.msgs = append(p.msgs, reply)
	p.lastReply = &reply
	ev := tr.ev
	out := &ThreadReply{Event: ev, Finish: ev.FinishReason}
	if tr.content != nil {
		out.Content = *tr.content
	}
	if tr.reasoning != nil {
		out.Reasoning = *tr.reasoning
	}
	if len(reply.ToolCalls) > 0 {
		out.Calls = recordCalls(reply.ToolCalls)
		ev.ToolCalls = out.Calls
		ev.ToolCallID = out.Calls[0].ID
		if strings.TrimSpace(out.Content) == "" {
			out.Content = ""
		}
	}
	switch {
	case tr.truncated != "":
		out.Finish = "length"
	case len(out.Calls) > 0:
		out.Finish = "tool_calls"
	default:
		out.Finish = "stop"
	}
	return out, nil
}

// Mode is the token path the thread's calls take (policy.TokensTITO or
// TokensChat), once the server was asked; "" before.
func (t *Thread) Mode(ctx context.Context) (policy.TokenMode, error) {
	info, err := t.p.probe.get(ctx, t.p.client)
	return info.mode, err
}

// threadChat is m as the chat API carries it: a tool call's arguments as
// a JSON string, content null beside calls when empty.
func threadChat(m ThreadMessage) chatMessage {
	c := chatMessage{Role: m.Role, Content: str(m.Content), ToolCallID: m.ToolCallID}
	if m.Reasoning != "" {
		c.Reasoning = str(m.Reasoning)
	}
	for _, tc := range m.ToolCalls {
		args, _ := json.Marshal(tc.Arguments)
		c.ToolCalls = append(c.ToolCalls, toolCall{ID: tc.ID, Type: "function", Function: toolCallFunc{Name: tc.Name, Arguments: args}})
	}
	if len(c.ToolCalls) > 0 && m.Content == "" {
		c.Content = nil
	}
	return c
}
