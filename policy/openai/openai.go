// Package openai is the LLM policy: it drives a model behind any
// OpenAI-compatible server (vLLM, SGLang, llama.cpp server, hosted APIs) and
// records each turn token-exact, from the server's own ids, never a
// re-tokenization.
//
// Two token paths (Config.Tokens). Chat mode sends the conversation's
// messages to /v1/chat/completions each turn and records the ids the server
// reports (vLLM ≥ 0.10.2 return_token_ids with top-level prompt_token_ids;
// SGLang's per-choice prompt_token_ids): the server re-renders the whole
// history with its chat template each turn, and where the template writes
// an earlier turn differently from how it was generated, the record is cut
// and flagged by the assembler (package tokens). Token in, token out (tito)
// keeps the episode's ids itself, has the server render only each new turn
// (vLLM's /tokenize with messages, or its render route), generates from the
// whole id sequence (/v1/completions with a token-id prompt, vLLM's
// /inference/v1/generate, SGLang's /generate with input_ids) and parses the
// reply's tool calls and reasoning itself (hermes <tool_call> blocks,
// qwen3 <think> blocks) or with the server's parsers (derender): the record
// is exact by construction. The default, auto, asks the server once per
// run what it serves (a prober shared by the run's policies) and takes tito
// when it can, saying which in the log and in every step's provenance.
//
// The canonical actions are offered as function-calling tools (package aci's
// schemas, in aci's one key order); a tool call becomes a canonical Action.
// For models without native tool calling, ParseText reads the common text
// dialects. One action is taken per turn: when the model makes several tool
// calls, the first runs, all are recorded in ModelEvent.Actions, and the
// others are answered "not run" so the conversation stays well-formed.
//
// Turns end an episode as follows: no tool call → runtime.ExitNoAction; a
// tool call that does not make a canonical action → ExitUnparsedAction; a
// reply cut at max_tokens (finish_reason "length", or "tool_calls" with all
// of max_tokens used, which vLLM reports for a call cut before
// </tool_call>) → ExitOutputTruncated: a cut answer is never executed; a
// server that still fails after the retries → an error, which
// runtime.Rollout records as ExitPolicyError — wrapping
// runtime.ErrUnavailable when nothing could be reached at the server's
// address at all, or when tokens=tito meets a server without the endpoints
// it needs, so that a collector treats it as the run's failure, not the
// episode's.
//
// In chat mode the reasoning a server splits off (message.reasoning,
// reasoning_content) goes back on its assistant turn in the same field
// (Config.SendReasoning), and content the parsers left as only whitespace
// goes back as null: Qwen3's template then re-renders a reasoning-parser
// turn exactly as generated. Observations go back as text only, their
// middle elided beyond Config.ObservationCap.
//
// A Policy holds one episode's conversation; build one per episode. The API
// key is read from the environment at request time, sent only to base_url's
// host, and never stored in a Config, a message, an error or a log line.
//
// It knows runtime, aci and HTTP only: not tasks, datasets or token assembly
// (package tokens does that from the ModelEvents).
package openai

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

// Policy is an LLM policy for one episode. It is not safe for concurrent use:
// Rollout calls Decide from one goroutine.
type Policy struct {
	cfg    Config
	client *client
	probe  *prober
	tools  []aci.Tool
	// wireTools are the tools as requests carry them: tools, encoded
	// once, or a Thread's caller's own schemas.
	wireTools []json.RawMessage
	offered   map[runtime.ActionKind]bool
	system    string

	msgs     []chatMessage
	started  bool
	observed int              // history steps whose result is in msgs
	answered map[int]turnMeta // step index → how this policy answered it
	// images are the screenshots the conversation holds, in order, each
	// on the message that carries it; an image older than the last
	// MaxImages drops its bytes, for it is never shown again.
	images []shownImage

	// Token in, token out: the episode's ids as the server saw them (the
	// first prompt, every reply, every new turn), the last reply as a chat
	// client would send it back, and the id that reply ended with.
	ids       []int32
	lastReply *chatMessage
	turnEnd   int32

	// rebuilt are the assistant messages Continue rebuilt from a record
	// for steps of the history it was started on, by step index; catchUp
	// shows them before the steps' results.
	rebuilt map[int]chatMessage
}

// shownImage is one screenshot of the conversation: the message it
// follows the text of, its data URL (cleared once it is no longer shown),
// hash and size.
type shownImage struct {
	msg           int
	url           string
	sha256        string
	width, height int
}

// turnMeta remembers how an action was asked for, to answer it the same way.
type turnMeta struct {
	native  bool     // a native tool call: results go in tool messages
	callIDs []string // every tool call of the answer; the first one ran
}

// New returns a policy for one episode. cfg is validated. A policy made by
// New asks its server what it offers on its first Decide; the policies of
// one Source (Open) share that answer.
func New(cfg Config) (*Policy, error) { return newPolicyWith(cfg, &prober{}) }

func newPolicyWith(cfg Config, pr *prober) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Actions == nil {
		cfg.Actions = runtime.ActionKinds()
	}
	tools, err := Tools(cfg.Actions, cfg.shell)
	if err != nil {
		return nil, err
	}
	wire, err := encodeTools(tools)
	if err != nil {
		return nil, err
	}
	p := &Policy{cfg: cfg, client: c, probe: pr, tools: tools, wireTools: wire, offered: map[runtime.ActionKind]bool{}, answered: map[int]turnMeta{}}
	for _, k := range cfg.Actions {
		p.offered[k] = true
	}
	p.system = systemPrompt(cfg, tools)
	return p, nil
}

// turn is one model call's answer, whichever path produced it.
type turn struct {
	ev        *runtime.ModelEvent
	content   *string
	reasoning *string
	// reasoningField is the field the server returned the reasoning in
	// ("reasoning" or "reasoning_content"); it goes back in the same one.
	reasoningField string
	calls          []toolCall // native calls: the server's, or parsed from the text
	// truncated, when set, says why the reply is cut and must not be
	// executed.
	truncated string
	// lost, when set, says why the turn's token ids are lost and the
	// episode cannot go on (token in, token out).
	lost string
}

// Decide sends the conversation so far, or in token-in-token-out mode the
// episode's token ids, and turns the answer into a decision.
func (p *Policy) Decide(ctx context.Context, h runtime.History) (runtime.Decision, error) {
	info, err := p.probe.get(ctx, p.client)
	if err != nil {
		return runtime.Decision{}, err
	}
	if !p.started {
		p.msgs = []chatMessage{{Role: "system", Content: str(p.system)}, {Role: "user", Content: str(h.Instruction)}}
		if h.Start != nil {
			// A GUI episode's first message shows the start page with
			// the instruction.
			st := aci.StartShown(*h.Start, p.cfg.Observe)
			if st.Text != "" {
				p.msgs[1].Content = str(h.Instruction + "\n\n" + st.Text)
			}
			if st.Image {
				p.addImage(1, h.Start.Screenshot)
			}
		}
		p.started = true
	}
	before := len(p.msgs)
	p.catchUp(h.Steps)
	var t *turn
	if info.mode == policy.TokensTITO {
		t, err = p.titoTurn(ctx, info, p.msgs[before:])
	} else {
		t, err = p.chatTurn(ctx, info)
	}
	if err != nil {
		return runtime.Decision{}, p.hint(err)
	}
	return p.decision(h, info, t)
}

// chatTurn sends the whole conversation to /v1/chat/completions.
func (p *Policy) chatTurn(ctx context.Context, info serverInfo) (*turn, error) {
	req := p.request(info)
	var images []string
	req.Messages, images = p.withImages(req.Messages)
	res, err := p.client.complete(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := res.resp
	ch := resp.Choices[0]
	ev := modelEvent(resp, &ch)
	ev.PromptImages = images
	ev.Latency = res.latency
	if ev.Model == "" {
		ev.Model = p.cfg.Model
	}
	ev.Provenance = runtime.Provenance{Path: runtime.TokenPathChat, Endpoints: []string{pathOf(p.client.url)}, TemplateSHA256: info.templateSHA}
	t := &turn{ev: ev, content: ch.Message.Content, calls: ch.Message.ToolCalls}
	switch {
	case ch.Message.Reasoning != nil:
		t.reasoning, t.reasoningField = ch.Message.Reasoning, "reasoning"
	case ch.Message.ReasoningContent != nil:
		t.reasoning, t.reasoningField = ch.Message.ReasoningContent, "reasoning_content"
	}
	switch {
	case ch.FinishReason == "length":
		t.truncated = "openai: the answer hit the token limit (finish_reason length) and is not executed"
	case ch.FinishReason == "tool_calls" && p.cfg.MaxTokens > 0 && completionTokens(resp, &ch) >= p.cfg.MaxTokens:
		// vLLM reports tool_calls whenever its parser found a call, also
		// one cut at max_tokens before </tool_call>.
		t.truncated = fmt.Sprintf("openai: the answer used all max_tokens (%d) and its tool call may be cut (the server still reports finish_reason tool_calls); it is not executed", p.cfg.MaxTokens)
	}
	return t, nil
}

// completionTokens is how many tokens the reply generated: the usage
// report, else its token ids.
func completionTokens(resp *chatResponse, ch *chatChoice) int {
	if resp.Usage != nil {
		return resp.Usage.CompletionTokens
	}
	return len(ch.TokenIDs)
}

// decision turns a model turn into the episode's next decision, and
// appends the reply to the conversation as a chat client sends it back.
func (p *Policy) decision(h runtime.History, info serverInfo, t *turn) (runtime.Decision, error) {
	ev := t.ev
	stop := func(exit runtime.ExitReason, detail string) (runtime.Decision, error) {
		return runtime.Decision{Stop: exit, Model: ev, Detail: detail}, nil
	}
	if t.lost != "" {
		return stop(runtime.ExitPolicyError, t.lost)
	}
	if t.truncated != "" {
		// Never run, but recorded as generated: a call the parser read
		// from the cut reply is kept on the event (not as an action), so
		// the message exports write the cut turn as the token exports keep
		// its ids (docs/exports.md).
		if p.cfg.ToolMode == ToolsNative && len(t.calls) > 0 {
			ev.ToolCalls = recordCalls(t.calls)
		}
		return stop(runtime.ExitOutputTruncated, t.truncated)
	}
	calls, native, err := p.calls(t)
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
	reply := p.replyMessage(t, info, native, len(h.Steps))
	if native {
		for _, tc := range reply.ToolCalls {
			meta.callIDs = append(meta.callIDs, tc.ID)
		}
		ev.ToolCallID = meta.callIDs[0]
		ev.ToolCalls = recordCalls(reply.ToolCalls) // with the ids the history carries
	}
	p.msgs = append(p.msgs, reply)
	p.lastReply = &reply
	p.answered[len(h.Steps)] = meta
	return runtime.Decision{Action: first, Model: ev}, nil
}

// replyMessage is a turn's answer as a chat client sends it back: its
// native calls (when native) with an id each (invented, stable, from step,
// when the server gave none), a type and arguments; content null beside
// calls when the parsers left only whitespace, "" for a text answer
// without content; and, in chat mode with SendReasoning, the reasoning in
// the field the server returned it in.
func (p *Policy) replyMessage(t *turn, info serverInfo, native bool, step int) chatMessage {
	reply := chatMessage{Role: "assistant", Content: t.content}
	if native {
		for i, tc := range t.calls {
			if tc.ID == "" {
				// The tool message must name its call; invent a stable id
				// when the server gave none.
				tc.ID = fmt.Sprintf("call_%d_%d", step, i)
			}
			if tc.Type == "" {
				tc.Type = "function"
			}
			if len(tc.Function.Arguments) == 0 {
				tc.Function.Arguments = json.RawMessage(`"{}"`)
			}
			reply.ToolCalls = append(reply.ToolCalls, tc)
		}
		// What the parsers left before the call may be only whitespace
		// (the "\n\n" after </think>): a template writes "" and null the
		// same way, but a blank string as text before the call.
		if len(reply.ToolCalls) > 0 && reply.Content != nil && strings.TrimSpace(*reply.Content) == "" {
			reply.Content = nil
		}
	}
	if reply.Content == nil && len(reply.ToolCalls) == 0 {
		reply.Content = str("")
	}
	if p.cfg.SendReasoning && t.reasoning != nil && info.mode == policy.TokensChat {
		// Chat templates that keep recent reasoning (Qwen3's, for the
		// turns after the last user message) re-render it from here.
		if t.reasoningField == "reasoning_content" {
			reply.ReasoningContent = t.reasoning
		} else {
			reply.Reasoning = t.reasoning
		}
	}
	return reply
}

// calls returns the answer's tool calls: native ones when the server (or
// the hermes parser) found them, else those written in the text.
func (p *Policy) calls(t *turn) ([]Call, bool, error) {
	if p.cfg.ToolMode == ToolsNative && len(t.calls) > 0 {
		out := make([]Call, len(t.calls))
		for i, tc := range t.calls {
			out[i] = Call{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
		}
		return out, true, nil
	}
	if t.content == nil {
		return nil, false, nil
	}
	calls, err := ParseText(*t.content)
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
		obs := aci.ObservationShown(s, p.cfg.ObservationCap, p.cfg.Observe)
		if !meta.native {
			p.msgs = append(p.msgs, chatMessage{Role: "user", Content: str(obs.Text)})
			if obs.Image {
				p.addImage(len(p.msgs)-1, s.Observation.Screenshot)
			}
			continue
		}
		p.msgs = append(p.msgs, chatMessage{Role: "tool", ToolCallID: meta.callIDs[0], Content: str(obs.Text)})
		for _, id := range meta.callIDs[1:] {
			p.msgs = append(p.msgs, chatMessage{Role: "tool", ToolCallID: id,
				Content: str(aci.NotRunResult)})
		}
		if obs.Image {
			// OpenAI's tool messages hold text only: the screenshot
			// follows them in a user message.
			p.msgs = append(p.msgs, chatMessage{Role: "user", Content: str(aci.ImageCaption)})
			p.addImage(len(p.msgs)-1, s.Observation.Screenshot)
		}
	}
	p.observed = len(steps)
}

// addImage puts a screenshot on message i, after its text, and forgets
// the bytes of the images it pushes out of the last MaxImages.
func (p *Policy) addImage(i int, sc *runtime.Screenshot) {
	sum := sha256.Sum256(sc.PNG)
	p.images = append(p.images, shownImage{msg: i, url: "data:image/png;base64," + base64.StdEncoding.EncodeToString(sc.PNG),
		sha256: hex.EncodeToString(sum[:]), width: sc.Width, height: sc.Height})
	kept := aci.KeptImages(len(p.images), p.cfg.MaxImages)
	for j := range p.images {
		if !kept(j) {
			p.images[j].url = ""
		}
	}
}

// withImages returns msgs with the conversation's images as content
// parts — the last MaxImages as image_url parts after their message's
// text, older ones as aci.ImageNote appended to it — and the hashes of
// the images shown, in order.
func (p *Policy) withImages(msgs []chatMessage) ([]chatMessage, []string) {
	if len(p.images) == 0 {
		return msgs, nil
	}
	kept := aci.KeptImages(len(p.images), p.cfg.MaxImages)
	var shown []string
	for j, im := range p.images {
		m := msgs[im.msg]
		text := ""
		if m.Content != nil {
			text = *m.Content
		}
		if !kept(j) {
			m.Content = str(aci.WithNote(text, aci.ImageNote(im.width, im.height, p.cfg.MaxImages)))
			msgs[im.msg] = m
			continue
		}
		if m.Parts == nil && text != "" {
			tp, _ := json.Marshal(map[string]string{"type": "text", "text": text})
			m.Parts = append(m.Parts, tp)
		}
		ip, _ := json.Marshal(map[string]any{"type": "image_url", "image_url": map[string]string{"url": im.url}})
		m.Parts = append(m.Parts, ip)
		msgs[im.msg] = m
		shown = append(shown, im.sha256)
	}
	return msgs, shown
}

// offeredTools are the tools sent with a request: none in text mode, where
// the system prompt describes them.
func (p *Policy) offeredTools() []json.RawMessage {
	if p.cfg.ToolMode == ToolsNative {
		return p.wireTools
	}
	return nil
}

// encodeTools is tools as requests carry them, each encoded once the way a
// request encodes its body (no HTML escaping), so a request's bytes are
// the ones encoding the tools in place would give.
func encodeTools(tools []aci.Tool) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		b, err := marshalNoEscape(t)
		if err != nil {
			return nil, fmt.Errorf("openai: encoding tool %s: %w", t.Function.Name, err)
		}
		out[i] = b
	}
	return out, nil
}

func (p *Policy) request(info serverInfo) *chatRequest {
	r := &chatRequest{
		Model:              p.cfg.Model,
		Messages:           append([]chatMessage(nil), p.msgs...),
		Tools:              p.offeredTools(),
		Temperature:        p.cfg.Temperature,
		TopP:               p.cfg.TopP,
		MaxTokens:          p.cfg.MaxTokens,
		Seed:               p.cfg.Seed,
		ChatTemplateKwargs: p.cfg.ChatTemplateKwargs,
	}
	if p.cfg.Logprobs {
		zero := 0
		r.Logprobs, r.TopLogprobs = true, &zero
	}
	if p.cfg.TokenIDs {
		r.ReturnTokenIDs = true
		// SGLang's field; vLLM logs a warning for it on every request, so
		// only a server that may be SGLang gets it (one that did not say
		// what it is may be).
		r.ReturnPromptTokenIDs = info.kind == ServerSGLang || info.kind == ServerOther || info.kind == ""
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

// recordCalls is the server's tool calls as the model wrote them, for the
// step record (runtime.ModelEvent.ToolCalls): arguments as the text the
// server sent (the value of a JSON string, or the JSON itself otherwise).
func recordCalls(calls []toolCall) []runtime.ToolCall {
	out := make([]runtime.ToolCall, len(calls))
	for i, tc := range calls {
		args := string(tc.Function.Arguments)
		var s string
		if json.Unmarshal(tc.Function.Arguments, &s) == nil {
			args = s
		}
		out[i] = runtime.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args}
	}
	return out
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
func systemPrompt(cfg Config, tools []aci.Tool) string {
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
// the actions offered, the observation cap, the token mode and parsers, the
// chat template kwargs, whether reasoning goes back, the tool key order —
// for the manifest, so exported SFT data holds the same messages the model
// was shown. EnableThinking is chat_template_kwargs' enable_thinking when
// it is a boolean there, else unknown (the server's default applied).
func (c Config) Conversation() (policy.Conversation, error) {
	kinds := c.Actions
	if kinds == nil {
		kinds = runtime.ActionKinds()
	}
	tools, err := Tools(kinds, c.shell)
	if err != nil {
		return policy.Conversation{}, err
	}
	conv := policy.Conversation{
		SystemPrompt:       systemPrompt(c, tools),
		ToolMode:           c.ToolMode,
		Actions:            slices.Clone(c.Actions),
		TaskActions:        c.Actions == nil,
		ObservationCap:     c.ObservationCap,
		Observe:            c.Observe,
		MaxImages:          c.MaxImages,
		Tokens:             c.Tokens,
		ChatTemplateKwargs: maps.Clone(c.ChatTemplateKwargs),
		SendReasoning:      &c.SendReasoning,
		ToolKeyOrder:       aci.ToolKeyOrder,
	}
	if c.Tokens != policy.TokensChat {
		conv.ToolParser, conv.ReasoningParser = c.ToolParser, c.ReasoningParser
	}
	if v, ok := c.ChatTemplateKwargs["enable_thinking"].(bool); ok {
		conv.EnableThinking = &v
	}
	return conv, nil
}
