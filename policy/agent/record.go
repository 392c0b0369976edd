package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/gateway"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/runtime"
)

// recorder is one episode's gateway.Handler. It tells the harness's
// trajectory from its side calls, forwards every call through a thread of
// the openai policy, and queues each trajectory call for the episode's
// runner, which makes the steps.
//
// Which call is the trajectory's. The first call that offers tools starts
// it. A later call continues it when its messages extend the trajectory's
// conversation — every message the last call sent, then the reply as the
// harness got it back (compared by role, text, tool call ids and names:
// see sameMessage) — with the same tools. A call that does not extend it but
// keeps its system prompt or its tool names is the trajectory rewritten
// (compaction, a dropped turn, a changed system prompt or tools): it is a
// cut, and continues the trajectory from its whole conversation. Any other
// call is a side call: one without tools (a title, a summary) or with
// another system prompt and tool list (a sub-agent). Side calls are
// answered, recorded apart, and kept out of the steps.
type recorder struct {
	src      *source
	episode  string
	maxSteps int
	maxSide  int
	// sideModel makes the model of side call n.
	sideModel func(n int) (model, error)

	mainMu sync.Mutex // one trajectory call at a time
	main   model

	mu         sync.Mutex
	held       []gateway.Message // the trajectory's conversation: the last call's messages and the reply
	system     string
	toolNames  string
	toolsJSON  []byte
	calls      int
	api        string
	repliedAt  time.Time
	stop       *stopCause
	side       []sideCall
	dropped    []string
	refused    []string
	queue      []callEvent
	notify     chan struct{}
	lastAnswer string
}

// stopCause is why the episode must end before the harness exits.
type stopCause struct {
	exit   runtime.ExitReason
	detail string
	err    error
}

// callEvent is one trajectory call, for the runner: what the harness
// added, the cut, and the reply (nil when the model call failed).
type callEvent struct {
	index   int
	fresh   []gateway.Message
	cut     string
	tools   []byte
	arrived time.Time
	idle    time.Duration // since the previous reply: the harness's own time
	reply   *openai.ThreadReply
	took    time.Duration
}

// sideCall is one side call as the side-calls blob records it.
type sideCall struct {
	Kind        string            `json:"kind"` // untooled (no tools: a title, a summary) or subagent
	API         string            `json:"api"`
	Messages    []gateway.Message `json:"messages"`
	Tools       []string          `json:"tools,omitempty"`
	Reply       *gateway.Reply    `json:"reply,omitempty"`
	Error       string            `json:"error,omitempty"`
	PromptIDs   []int32           `json:"prompt_ids,omitempty"`
	ResponseIDs []int32           `json:"response_ids,omitempty"`
}

// model answers calls: a thread of the openai policy (the run's model
// server), or in a replay the recorded replies (recordedModel).
type model interface {
	Call(ctx context.Context, fresh []openai.ThreadMessage, tools []json.RawMessage, restart bool) (*openai.ThreadReply, error)
}

func newRecorder(src *source, episode string, maxSteps int, main model) *recorder {
	return &recorder{src: src, episode: episode, maxSteps: maxSteps, maxSide: maxSteps + 8, main: main, notify: make(chan struct{}, 1)}
}

// Call answers one call of the harness.
func (r *recorder) Call(ctx context.Context, c *gateway.Call) (*gateway.Reply, error) {
	if cause := r.stopped(); cause != nil {
		return nil, refusedCall("this episode is over: " + cause.detail)
	}
	if len(c.Tools) == 0 {
		return r.sideCall(ctx, c, "untooled")
	}
	r.mainMu.Lock()
	defer r.mainMu.Unlock()
	r.mu.Lock()
	cut, main := r.classify(c)
	if !main {
		r.mu.Unlock()
		return r.sideCall(ctx, c, "subagent")
	}
	if r.calls >= r.maxSteps {
		r.stopLocked(runtime.ExitMaxSteps, fmt.Sprintf("the harness's trajectory reached the step limit (%d model calls)", r.maxSteps), nil)
		r.mu.Unlock()
		return nil, refusedCall(fmt.Sprintf("the episode's step limit (%d model calls) is reached", r.maxSteps))
	}
	fresh := c.Messages
	if r.calls > 0 && cut == "" {
		fresh = c.Messages[len(r.held):]
	}
	ev := callEvent{index: r.calls, fresh: slices.Clone(fresh), cut: cut, arrived: time.Now()}
	if !r.repliedAt.IsZero() {
		ev.idle = ev.arrived.Sub(r.repliedAt)
	}
	if r.api == "" {
		r.api = c.API
	}
	r.noteDropped(c.Dropped)
	r.mu.Unlock()

	tools := chatTools(c.Tools)
	ev.tools = toolsArray(tools)
	began := time.Now()
	rep, err := r.main.Call(ctx, threadMessages(fresh), tools, cut != "")
	ev.took = time.Since(began)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.enqueueLocked(ev) // the results the call brought are the last step's observation
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.stopLocked(runtime.ExitPolicyError, "the model server failed a call of the harness: "+err.Error(), err)
		return nil, refusedCall("the model server failed: " + err.Error())
	}
	ev.reply = rep
	r.held = append(slices.Clone(c.Messages), replyMessage(rep))
	r.system, r.toolNames, r.toolsJSON = systemOf(c.Messages), toolNames(c.Tools), ev.tools
	r.calls++
	r.repliedAt = time.Now()
	r.lastAnswer = rep.Content
	r.enqueueLocked(ev)
	return gatewayReply(rep), nil
}

// classify says whether c is the trajectory's, and if so whether it is a
// cut (and why). Called with r.mu held.
func (r *recorder) classify(c *gateway.Call) (cut string, main bool) {
	if r.calls == 0 {
		return "", true
	}
	sameTools := bytes.Equal(toolsArray(chatTools(c.Tools)), r.toolsJSON)
	sameNames := toolNames(c.Tools) == r.toolNames
	sameSystem := systemOf(c.Messages) == r.system
	switch {
	case extends(r.held, c.Messages) && sameTools:
		return "", true
	case extends(r.held, c.Messages) && sameSystem:
		return runtime.ToolsChanged, true
	case sameSystem && sameNames:
		return runtime.HistoryRewritten, true
	case sameNames:
		return runtime.SystemChanged, true
	case sameSystem:
		return runtime.HistoryRewritten, true
	}
	return "", false
}

// sideCall answers a call outside the trajectory on a thread of its own
// and records it.
func (r *recorder) sideCall(ctx context.Context, c *gateway.Call, kind string) (*gateway.Reply, error) {
	r.mu.Lock()
	if len(r.side) >= r.maxSide {
		r.mu.Unlock()
		return nil, refusedCall(fmt.Sprintf("the episode's side calls (%d) are used up", r.maxSide))
	}
	n := len(r.side)
	r.side = append(r.side, sideCall{}) // reserve the slot
	r.noteDropped(c.Dropped)
	r.mu.Unlock()

	rec := sideCall{Kind: kind, API: c.API, Messages: c.Messages}
	for _, t := range c.Tools {
		rec.Tools = append(rec.Tools, t.Name)
	}
	th, err := r.sideModel(n)
	var rep *openai.ThreadReply
	if err == nil {
		rep, err = th.Call(ctx, threadMessages(c.Messages), chatTools(c.Tools), false)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		rec.Error = err.Error()
		r.side[n] = rec
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.stopLocked(runtime.ExitPolicyError, "the model server failed a side call of the harness: "+err.Error(), err)
		return nil, refusedCall("the model server failed: " + err.Error())
	}
	gr := gatewayReply(rep)
	rec.Reply, rec.PromptIDs, rec.ResponseIDs = gr, rep.Event.PromptIDs, rep.Event.ResponseIDs
	r.side[n] = rec
	return gr, nil
}

// Refused is told of a request the gateway could not translate: a model
// call the episode cannot go on without ends it as a policy error; a
// request to a route the gateway does not serve is only noted.
func (r *recorder) Refused(api string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused = append(r.refused, err.Error())
	if errors.Is(err, gateway.ErrUntranslatable) {
		r.stopLocked(runtime.ExitPolicyError, "the gateway could not translate a call of the harness ("+api+"): "+err.Error(), nil)
	}
}

func (r *recorder) stopLocked(exit runtime.ExitReason, detail string, err error) {
	if r.stop == nil {
		r.stop = &stopCause{exit: exit, detail: detail, err: err}
		r.signal()
	}
}

func (r *recorder) stopped() *stopCause {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stop
}

func (r *recorder) enqueueLocked(ev callEvent) {
	r.queue = append(r.queue, ev)
	r.signal()
}

func (r *recorder) signal() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// take returns the queued trajectory calls.
func (r *recorder) take() []callEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queue
	r.queue = nil
	return q
}

func (r *recorder) noteDropped(d []string) {
	for _, x := range d {
		if !slices.Contains(r.dropped, x) {
			r.dropped = append(r.dropped, x)
		}
	}
}

// refusedCall is the gateway's 400 for a call the episode does not take:
// harnesses do not retry a 400.
func refusedCall(why string) error {
	return &gateway.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "forkline: " + why}
}

// extends reports whether msgs is held followed by at least one message.
func extends(held, msgs []gateway.Message) bool {
	if len(msgs) <= len(held) {
		return false
	}
	for i := range held {
		if !sameMessage(held[i], msgs[i]) {
			return false
		}
	}
	return true
}

// sameMessage compares two messages as a harness echoes them: role, text
// (surrounding space aside), the call a result answers, and tool calls by
// id and name. A call's arguments are not compared: the id names the call
// the model made, and harnesses echo arguments re-encoded (Claude Code
// adds its schema's defaults, "replace_all": false), while the thread
// keeps them as the model wrote them. Reasoning is not compared either:
// harnesses drop it from their history, and the thread keeps it as
// generated.
func sameMessage(a, b gateway.Message) bool {
	if a.Role != b.Role || strings.TrimSpace(a.Content) != strings.TrimSpace(b.Content) || a.ToolCallID != b.ToolCallID || len(a.ToolCalls) != len(b.ToolCalls) {
		return false
	}
	for i := range a.ToolCalls {
		x, y := a.ToolCalls[i], b.ToolCalls[i]
		if x.ID != y.ID || x.Name != y.Name {
			return false
		}
	}
	return true
}

// systemOf is the conversation's leading system text.
func systemOf(msgs []gateway.Message) string {
	var parts []string
	for _, m := range msgs {
		if m.Role != gateway.RoleSystem {
			break
		}
		parts = append(parts, m.Content)
	}
	return strings.Join(parts, "\n")
}

func toolNames(tools []gateway.Tool) string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

func chatTools(tools []gateway.Tool) []json.RawMessage {
	out := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		out[i] = t.ChatJSON()
	}
	return out
}

// toolsArray is the tools as one JSON array (the tools blob).
func toolsArray(tools []json.RawMessage) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, t := range tools {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(t)
	}
	b.WriteByte(']')
	return b.Bytes()
}

func threadMessages(msgs []gateway.Message) []openai.ThreadMessage {
	out := make([]openai.ThreadMessage, len(msgs))
	for i, m := range msgs {
		tm := openai.ThreadMessage{Role: m.Role, Content: m.Content, Reasoning: m.Reasoning, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			tm.ToolCalls = append(tm.ToolCalls, runtime.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		}
		out[i] = tm
	}
	return out
}

// replyMessage is a reply as the trajectory's conversation holds it.
func replyMessage(rep *openai.ThreadReply) gateway.Message {
	m := gateway.Message{Role: gateway.RoleAssistant, Content: rep.Content, Reasoning: rep.Reasoning}
	for _, c := range rep.Calls {
		m.ToolCalls = append(m.ToolCalls, gateway.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return m
}

// gatewayReply is a reply as the gateway answers it.
func gatewayReply(rep *openai.ThreadReply) *gateway.Reply {
	g := &gateway.Reply{Content: rep.Content, Reasoning: rep.Reasoning, Finish: rep.Finish,
		PromptTokens: rep.Event.Usage.PromptTokens, CompletionTokens: rep.Event.Usage.CompletionTokens}
	if len(rep.Calls) > 0 {
		g.Content = strings.TrimSpace(rep.Content)
	}
	for _, c := range rep.Calls {
		g.Calls = append(g.Calls, gateway.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return g
}
