package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/fielderr"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// Roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one chat message. Targets encode it in their own shape
// (EncodeMessage is the exact-keys JSON form most of them share).
type Message struct {
	Role    string
	Content string
	// Reasoning is the model's separate reasoning text on an assistant
	// message, "" when none or when the options leave it out (Options.Reasoning).
	Reasoning  string
	ToolCalls  []ToolCall // assistant, native tool mode: the calls of the turn, in order (the first ran)
	ToolCallID string     // tool: the call it answers
	// Step is the step the message comes from, -1 for the prompt.
	Step int
	// Failed marks an assistant turn that ended the episode without a valid
	// action (no tool call, an unparsable one, or an answer cut at the token
	// limit): targets with a per-turn weight leave it out of training.
	Failed bool
	// Images are the screenshots the model saw after this message's text,
	// in order, for a run whose policy showed images
	// (policy.Conversation.Observe); an image the policy no longer showed
	// (max_images) is not here but a note in Content, as the model had it.
	Images []ImageRef
}

// ImageRef is one screenshot of a conversation: its hash (a step's
// screenshot_sha256 or the episode's start_screenshot_sha256), its size,
// and the step whose observation it is (-1 for the start page).
type ImageRef struct {
	SHA256        string
	Width, Height int
	Step          int
	// URL, when a target sets it, is the image as a data URL
	// (data:image/png;base64,...): EncodeMessage then writes an image_url
	// part, else a {"type": "image"} part.
	URL string
}

// ToolCall is an assistant's call of an action tool.
type ToolCall struct {
	ID   string // the server's call id where the run recorded it, else "call_<step>"
	Name string // the tool (action kind) the model named
	// Arguments is the call's arguments as a JSON object with the keys in
	// the order the model wrote them, compact: the server's record where
	// the run has one (steps.tool_calls), else the canonical action's fields
	// (runtime's field order, no "kind"). Arguments the model wrote that are
	// not a JSON object (a broken call) are a JSON string holding the text.
	Arguments json.RawMessage
	// Text is the arguments as the model wrote them (the recorded string),
	// else the compact canonical object: what ArgsString writes.
	Text string
}

// ArgsEncoding is how tool-call arguments are written (-tool-args).
type ArgsEncoding string

// The encodings.
const (
	// ArgsObject writes arguments as a JSON object. Chat templates that
	// serialize arguments with tojson (Qwen2.5, Qwen3, Llama 3.1) render it
	// exactly once, which is why it is the default.
	ArgsObject ArgsEncoding = "object"
	// ArgsString writes the arguments as the model wrote them, a JSON
	// string: what OpenAI's fine-tuning format requires and templates that
	// concatenate the arguments (DeepSeek-V3) need.
	ArgsString ArgsEncoding = "string"
)

// CallContent is the content of an assistant message that holds tool calls
// and no text (-call-content).
type CallContent string

// The choices.
const (
	// ContentEmpty writes "" (the default): what vLLM hands its template
	// for a null content, and what Qwen's and Llama's templates need (they
	// concatenate or search content).
	ContentEmpty CallContent = "empty"
	// ContentNull writes null: DeepSeek-V3's template renders tool calls
	// only for a message whose content is none; OpenAI's format allows it.
	ContentNull CallContent = "null"
	// ContentSplit writes a message with text and tool calls as two
	// assistant messages, the text and then the calls (content null), and
	// a calls-only message with content null: DeepSeek-V3's template
	// renders the calls of a message only when its content is none, so
	// without the split it drops every call the model wrote after some
	// text. The price is an end of turn between the text and the calls
	// that the model did not write.
	ContentSplit CallContent = "split"
)

// Reasoning says which assistant messages keep the model's reasoning
// (-reasoning).
type Reasoning string

// The choices.
const (
	// ReasoningShown (the default) keeps reasoning where the model saw it:
	// on every assistant turn when its policy sent earlier reasoning back
	// (policy.Conversation.SendReasoning), else on the last assistant
	// message only — each turn was generated after a history without the
	// earlier turns' reasoning, which chat templates such as Qwen3's would
	// otherwise render back into every turn of the training sequence.
	ReasoningShown Reasoning = "shown"
	// ReasoningAll keeps every turn's reasoning.
	ReasoningAll Reasoning = "all"
	// ReasoningNone drops all reasoning.
	ReasoningNone Reasoning = "none"
)

// Options shape the conversation a target writes. The zero value is the
// defaults: object arguments, "" content beside calls, reasoning as shown.
type Options struct {
	Args        ArgsEncoding
	CallContent CallContent
	Reasoning   Reasoning
}

// ParseArgs reads -tool-args.
func ParseArgs(s string) (ArgsEncoding, error) {
	switch ArgsEncoding(s) {
	case ArgsObject, ArgsString:
		return ArgsEncoding(s), nil
	}
	return "", fielderr.Sentence("model", "ToolArgs", strconv.Quote(s), "(known: object, string)")
}

// ParseCallContent reads -call-content.
func ParseCallContent(s string) (CallContent, error) {
	switch CallContent(s) {
	case ContentEmpty, ContentNull, ContentSplit:
		return CallContent(s), nil
	}
	return "", fielderr.Sentence("model", "CallContent", strconv.Quote(s), "(known: empty, null, split)")
}

// ParseReasoning reads -reasoning.
func ParseReasoning(s string) (Reasoning, error) {
	switch Reasoning(s) {
	case ReasoningShown, ReasoningAll, ReasoningNone:
		return Reasoning(s), nil
	}
	return "", fielderr.Sentence("model", "Reasoning", strconv.Quote(s), "(known: shown, all, none)")
}

// WithDefaults fills the zero fields.
func (o Options) WithDefaults() Options {
	if o.Args == "" {
		o.Args = ArgsObject
	}
	if o.CallContent == "" {
		o.CallContent = ContentEmpty
	}
	if o.Reasoning == "" {
		o.Reasoning = ReasoningShown
	}
	return o
}

// Prompt returns the messages before the first step: the system prompt,
// when there is one, and the task's instruction; for an agent episode, the
// messages of the harness's first call.
func Prompt(ep *Episode) []Message {
	if ep.IsAgent() {
		// The harness's own first messages; an unreadable record is
		// Messages' error to report.
		msgs, _ := agentPrompt(ep)
		return msgs
	}
	var out []Message
	if sys := ep.Conversation.SystemPrompt; sys != "" {
		out = append(out, Message{Role: RoleSystem, Content: sys, Step: -1})
	}
	user := Message{Role: RoleUser, Content: ep.Instruction, Step: -1}
	if start, ok := ep.Start(); ok {
		// A GUI episode's first message showed the start page.
		st := aci.StartShown(start, ep.Conversation.Shows())
		if st.Text != "" {
			user.Content += "\n\n" + st.Text
		}
		if st.Image {
			user.Images = []ImageRef{{SHA256: *ep.Row.StartScreenHash, Width: int(ep.Row.StartScreenW), Height: int(ep.Row.StartScreenH), Step: -1}}
		}
	}
	return append(out, user)
}

// Start is the episode's first observation as its row keeps it (the start
// page of a GUI episode; its screenshot by size only), and false when it
// has none.
func (e *Episode) Start() (runtime.Observation, bool) {
	r := &e.Row
	if r.StartOutput == nil {
		return runtime.Observation{}, false
	}
	o := runtime.Observation{Output: []byte(*r.StartOutput), ExitCode: -1}
	if r.StartAXTree != nil {
		o.AXTree = *r.StartAXTree
	}
	if r.StartScreenHash != nil {
		o.Screenshot = &runtime.Screenshot{Width: int(r.StartScreenW), Height: int(r.StartScreenH)}
	}
	return o, true
}

// Image returns the bytes of one of the episode's screenshots by hash: a
// step's or the start page's, from the row that keeps them (pixels full)
// or the blob store (pixels hash).
func (e *Episode) Image(sha256 string) ([]byte, error) {
	if h := e.Row.StartScreenHash; h != nil && *h == sha256 && len(e.Row.StartScreenshot) > 0 {
		return e.Row.StartScreenshot, nil
	}
	for i := range e.Steps {
		if e.Steps[i].ScreenHash == sha256 && len(e.Steps[i].Screenshot) > 0 {
			return e.Steps[i].Screenshot, nil
		}
	}
	if e.Blob == nil {
		// Collected with pixels none: a VLM conversation cannot be
		// written without its images, and nothing may stand in for them.
		return nil, &Refusal{Reason: "screenshots kept by hash only (pixels none)"}
	}
	b, err := e.Blob(sha256)
	if err != nil {
		return nil, fmt.Errorf("model: episode %s: screenshot %s: %w", e.Row.EpisodeID, sha256, err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("model: episode %s: screenshot %s: not in blobs/", e.Row.EpisodeID, sha256)
	}
	return b, nil
}

// Images are the screenshots of msgs, in conversation order.
func Images(msgs []Message) []ImageRef {
	var out []ImageRef
	for _, m := range msgs {
		out = append(out, m.Images...)
	}
	return out
}

// keepLatestImages applies the policy's max_images to a conversation:
// only the last max images stay images, the ones before them become
// aci.ImageNote in their message's text, as the policy sent them in its
// last request.
func keepLatestImages(msgs []Message, max int) {
	n := len(Images(msgs))
	kept := aci.KeptImages(n, max)
	i := 0
	for j := range msgs {
		var keep []ImageRef
		for _, im := range msgs[j].Images {
			if kept(i) {
				keep = append(keep, im)
			} else {
				msgs[j].Content = aci.WithNote(msgs[j].Content, aci.ImageNote(im.Width, im.Height, max))
			}
			i++
		}
		msgs[j].Images = keep
	}
}

// Messages returns the episode's whole conversation as its policy had it
// (see the package documentation), reasoning kept as o says. It fails when
// a step's action JSON is not a canonical action or its recorded tool
// calls do not decode.
func Messages(ep *Episode, o Options) ([]Message, error) {
	o = o.WithDefaults()
	if ep.IsAgent() {
		return agentMessages(ep, o)
	}
	// Room for a call and its result a step: the slice is not regrown
	// step after step.
	out := slices.Grow(Prompt(ep), 2*len(ep.Steps)+1)
	text := ep.Conversation.TextToolCalls()
	for i := range ep.Steps {
		s := &ep.Steps[i]
		step := int(s.StepIndex)
		where := func(err error) error {
			return fmt.Errorf("model: episode %s step %d: %w", ep.Row.EpisodeID, s.StepIndex, err)
		}
		content, reasoning := deref(s.ModelText), deref(s.Reasoning)
		kind := runtime.ActionKind(s.ActionKind)
		// The step's action is decoded once and used by everything below
		// (the call's arguments, the text call, the observation shown).
		var act parsedAction
		if kind != "" {
			var err error
			if act, err = parseAction(s.ActionJSON); err != nil {
				return nil, where(err)
			}
		}
		if text {
			// The model's text holds its call as written; the observation
			// went back as a user message.
			if kind != "" && content == "" {
				c, err := textCall(act)
				if err != nil {
					return nil, where(err)
				}
				content = c
			}
			if kind == "" && content == "" && reasoning == "" {
				continue
			}
			out = append(out, Message{Role: RoleAssistant, Content: content, Reasoning: reasoning, Step: step, Failed: kind == ""})
			if kind != "" && kind != runtime.ActDone {
				result := shownStep(s, act.action, ep.Conversation)
				out = append(out, Message{Role: RoleUser, Content: result.Text, Step: step, Images: stepImage(s, result)})
			}
			continue
		}
		calls, err := stepCallsOf(s, act)
		if err != nil {
			return nil, where(err)
		}
		if kind == "" && len(calls) == 0 && content == "" && reasoning == "" {
			continue // a turn that produced nothing at all
		}
		if len(calls) > 0 && strings.TrimSpace(content) == "" {
			// What a reasoning parser leaves before a call may be only
			// whitespace (the "\n\n" after </think>); the openai policy
			// sends such a turn back without content, so the server
			// rendered none, and neither does the export.
			content = ""
		}
		out = append(out, Message{Role: RoleAssistant, Content: content, Reasoning: reasoning, ToolCalls: calls, Step: step, Failed: kind == ""})
		if kind == "" || kind == runtime.ActDone || len(calls) == 0 {
			// No result was shown: the episode ended on this turn.
			continue
		}
		result := shownStep(s, act.action, ep.Conversation)
		out = append(out, Message{Role: RoleTool, Content: result.Text, ToolCallID: calls[0].ID, Step: step})
		for _, c := range calls[1:] {
			out = append(out, Message{Role: RoleTool, Content: aci.NotRunResult, ToolCallID: c.ID, Step: step})
		}
		if result.Image {
			// Tool messages hold text: the policy sent the screenshot in
			// a user message after them.
			out = append(out, Message{Role: RoleUser, Content: aci.ImageCaption, Step: step, Images: stepImage(s, result)})
		}
	}
	if ep.Conversation.Shows().Images() {
		keepLatestImages(out, ep.Conversation.MaxImages)
	}
	applyReasoning(out, o.Reasoning, ep.Conversation.SentReasoning())
	if o.CallContent == ContentSplit {
		out = splitCalls(out)
	}
	return out, nil
}

// NullContent reports whether an assistant message with tool calls and no
// text has content null (ContentNull, ContentSplit) rather than "".
func (c CallContent) NullContent() bool { return c == ContentNull || c == ContentSplit }

// splitCalls writes each assistant message with both text and tool calls
// as two (ContentSplit): the text (with its reasoning), then the calls.
func splitCalls(msgs []Message) []Message {
	out := make([]Message, 0, len(msgs))
	for _, m := range msgs {
		if m.Role != RoleAssistant || m.Content == "" || len(m.ToolCalls) == 0 {
			out = append(out, m)
			continue
		}
		text, calls := m, m
		text.ToolCalls = nil
		calls.Content, calls.Reasoning = "", ""
		out = append(out, text, calls)
	}
	return out
}

// ShownResult is step s's observation as the run's policy showed it
// (aci.ObservationShown under the conversation's observe mode and cap).
func ShownResult(s *schemas.StepRow, conv policy.Conversation) (aci.Shown, error) {
	return shownResult(s, conv)
}

// shownResult is step s's observation as the policy showed it under the
// run's observe mode (aci.ObservationShown).
func shownResult(s *schemas.StepRow, conv policy.Conversation) (aci.Shown, error) {
	st, err := stepFromRow(s)
	if err != nil {
		return aci.Shown{}, err
	}
	return aci.ObservationShown(st, conv.ObservationCap, conv.Shows()), nil
}

// shownStep is shownResult for a step whose action is already decoded.
func shownStep(s *schemas.StepRow, a runtime.Action, conv policy.Conversation) aci.Shown {
	return aci.ObservationShown(stepWith(s, a), conv.ObservationCap, conv.Shows())
}

func stepImage(s *schemas.StepRow, shown aci.Shown) []ImageRef {
	if !shown.Image || s.ScreenHash == "" {
		return nil
	}
	return []ImageRef{{SHA256: s.ScreenHash, Width: int(s.ScreenW), Height: int(s.ScreenH), Step: int(s.StepIndex)}}
}

// applyReasoning clears the reasoning the policy r does not keep.
func applyReasoning(msgs []Message, r Reasoning, inHistory bool) {
	if r == ReasoningAll || (r == ReasoningShown && inHistory) {
		return
	}
	last := -1
	for i := range msgs {
		if msgs[i].Role == RoleAssistant {
			last = i
		}
	}
	for i := range msgs {
		if r == ReasoningNone || i != last {
			msgs[i].Reasoning = ""
		}
	}
}

// stepCalls returns a native step's tool calls: the ones the server
// returned, as the model wrote them, where the step recorded them
// (steps.tool_calls); else the step's action as one call with the
// canonical fields.
func stepCalls(s *schemas.StepRow) ([]ToolCall, error) {
	if s.ToolCalls != nil || s.ActionKind == "" {
		return stepCallsOf(s, parsedAction{})
	}
	act, err := parseAction(s.ActionJSON)
	if err != nil {
		return nil, err
	}
	return stepCallsOf(s, act)
}

// stepCallsOf is stepCalls with the step's action decoded (act is used only
// when the step recorded no tool calls and has an action).
func stepCallsOf(s *schemas.StepRow, act parsedAction) ([]ToolCall, error) {
	if s.ToolCalls != nil {
		var rec []runtime.ToolCall
		if err := json.Unmarshal([]byte(*s.ToolCalls), &rec); err != nil {
			return nil, fmt.Errorf("tool_calls: %w", err)
		}
		out := make([]ToolCall, len(rec))
		for i, c := range rec {
			id := c.ID
			if id == "" {
				id = CallID(int(s.StepIndex)) + "_" + strconv.Itoa(i)
			}
			out[i] = ToolCall{ID: id, Name: c.Name, Arguments: argumentsObject(c.Arguments), Text: c.Arguments}
		}
		return out, nil
	}
	if s.ActionKind == "" {
		return nil, nil
	}
	args, err := act.arguments()
	if err != nil {
		return nil, err
	}
	return []ToolCall{{ID: CallID(int(s.StepIndex)), Name: s.ActionKind, Arguments: args, Text: string(args)}}, nil
}

// argumentsObject is the model's arguments text as a compact JSON object in
// its own key order, or, when the text is not a JSON object (an empty
// string is {}), the text as a JSON string.
func argumentsObject(text string) json.RawMessage {
	t := strings.TrimSpace(text)
	if len(t) == 0 {
		return json.RawMessage("{}")
	}
	if t[0] == '{' {
		// Compact validates as it goes: it fails on what json.Valid
		// would refuse, so the text is scanned once.
		var b bytes.Buffer
		b.Grow(len(t))
		if json.Compact(&b, []byte(t)) == nil {
			return b.Bytes()
		}
	}
	s, _ := EncodeJSON(text)
	return s
}

// textCall writes a canonical action as the <tool_call> block of the text
// dialect, for a text-mode step that recorded no model text.
func textCall(act parsedAction) (string, error) {
	args, err := act.arguments()
	if err != nil {
		return "", err
	}
	call, err := EncodeJSON(struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}{string(act.action.Kind), args})
	if err != nil {
		return "", err
	}
	return "<tool_call>\n" + string(call) + "\n</tool_call>", nil
}

// CallID is the tool-call id of step i when the run recorded none.
func CallID(step int) string { return "call_" + strconv.Itoa(step) }

// Arguments returns the fields of a canonical action JSON as a JSON object,
// in canonical order, without "kind": {"kind":"exec","cmd":"ls"} gives
// {"cmd":"ls"}. It validates the action first.
func Arguments(actionJSON string) (json.RawMessage, error) {
	act, err := parseAction(actionJSON)
	if err != nil {
		return nil, err
	}
	return act.arguments()
}

// parsedAction is a step's action decoded once, for everything a step's
// messages take from it.
type parsedAction struct {
	action runtime.Action
}

// arguments is the action's arguments (Arguments). They are written only
// when asked for: a step that recorded the model's tool calls shows those,
// and writing the action's own for every step of such a run was a twentieth
// of a chat-jsonl export's CPU.
func (p parsedAction) arguments() (json.RawMessage, error) {
	return argumentsOf(p.action)
}

// parseAction decodes a canonical action JSON.
func parseAction(actionJSON string) (parsedAction, error) {
	var a runtime.Action
	// Its own decoder directly: json.Unmarshal would scan the text once
	// more before handing it over.
	if err := a.UnmarshalJSON([]byte(actionJSON)); err != nil {
		return parsedAction{}, fmt.Errorf("action_json: %w", err)
	}
	if a.Kind == "" {
		return parsedAction{}, fmt.Errorf("action_json %q holds no action", actionJSON)
	}
	return parsedAction{action: a}, nil
}

// argumentsOf is a's fields as Arguments writes them: the canonical form's
// fields, its strings quoted without HTML escaping (in string-encoded
// arguments \u003c would be what a model is trained to write).
func argumentsOf(a runtime.Action) (json.RawMessage, error) {
	return a.AppendArguments(nil, AppendJSONString)
}

// ToolResult is the text of step s's observation as the policy showed it
// to the model: aci.ObservationText of the step rebuilt from its row, with
// the observation cap limit (0 for none).
func ToolResult(s *schemas.StepRow, limit int) (string, error) {
	st, err := stepFromRow(s)
	if err != nil {
		return "", err
	}
	return aci.ObservationText(st, limit), nil
}

// stepFromRow rebuilds the step a row records, as far as a model was
// shown it (the screenshot by size only).
func stepFromRow(s *schemas.StepRow) (runtime.Step, error) {
	var a runtime.Action
	if err := json.Unmarshal([]byte(s.ActionJSON), &a); err != nil {
		return runtime.Step{}, fmt.Errorf("action_json: %w", err)
	}
	return stepWith(s, a), nil
}

// stepWith is stepFromRow with the row's action already decoded.
func stepWith(s *schemas.StepRow, a runtime.Action) runtime.Step {
	o := runtime.Observation{
		Output:      []byte(s.Output),
		OutputBytes: s.OutputBytes,
		Truncated:   s.Truncated,
		ExitCode:    int(s.ExitCode),
		Error:       s.IsError,
		ErrorKind:   runtime.ErrorKind(s.ErrorKind),
		TimedOut:    s.TimedOut,
		AXTree:      s.AXTree,
	}
	if s.ScreenHash != "" || len(s.Screenshot) > 0 {
		o.Screenshot = &runtime.Screenshot{Width: int(s.ScreenW), Height: int(s.ScreenH)}
	}
	return runtime.Step{Index: int(s.StepIndex), Action: a, Observation: o}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
