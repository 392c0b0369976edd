// Package openaitest is a scripted OpenAI-compatible /v1/chat/completions
// server for tests, on loopback only. It answers in vLLM's documented shape
// (top-level prompt_token_ids, choices[].token_ids, logprobs.content[]) or
// SGLang's (prompt_token_ids per choice), from scripted turns or from a
// Model the test writes, and can fail on cue (429 with Retry-After, 5xx
// storms, slow answers).
//
// Conversations are told apart by a scenario name written in the first user
// message ("scenario: NAME", typically a task's instruction), and the turn
// is the number of assistant messages in the request, so any number of
// episodes can run against one server at once. A Model instead decides each
// turn from the request itself (a model that reads the page it was shown).
//
// The server reads a request as vLLM's chat-completions protocol does and
// checks what a real one would reject: the path, the bearer key, every tool
// call of an assistant message answered by a tool message before the next
// turn, content as a string or a list of parts ("text" and "image_url"),
// each image a base64 data URL (RFC 2397; the only form vLLM decodes
// without fetching) whose bytes are a PNG, JPEG or GIF, images in user
// messages only (OpenAI's message types give system, tool and assistant
// messages text parts only), and tools of type "function" with a name.
// What a request carried is kept parsed (Request.Messages with their Parts
// and Images, Request.Tools with their schemas) for the test to assert on;
// what the server refused is kept too (Refusals).
//
// It knows the wire format only, not forkline's packages.
package openaitest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	_ "image/gif" // the formats image.Decode sniffs
	_ "image/jpeg"
	_ "image/png"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Shapes of the answer.
const (
	VLLM   = "vllm"   // prompt_token_ids at the top level (the default)
	SGLang = "sglang" // prompt_token_ids in each choice
)

// Turn is the server's answer to one model turn.
type Turn struct {
	Content   string
	Reasoning string
	ToolCalls []ToolCall
	// Finish is the finish_reason; empty means "tool_calls" when there are
	// tool calls, else "stop".
	Finish      string
	PromptIDs   []int32
	ResponseIDs []int32
	Logprobs    []float64 // one per response id; nil sends no logprobs
	Shape       string    // VLLM (default) or SGLang
	// Fail is answered instead of the turn, FailTimes times (-1: always),
	// before the turn is answered.
	Fail      *Failure
	FailTimes int
}

// ToolCall is a native tool call; Args is the JSON arguments string.
type ToolCall struct {
	ID, Name, Args string
}

// Failure is an error answer.
type Failure struct {
	Status     int
	Body       string
	RetryAfter string        // Retry-After header value, when set
	Delay      time.Duration // wait this long first (or until the client gives up)
	// EchoAuth appends the request's Authorization header to Body, the way
	// a careless proxy might, to test that clients never record it.
	EchoAuth bool
}

// Request is one request the server received.
type Request struct {
	Scenario string
	Turn     int
	Header   http.Header
	Body     map[string]any
	Raw      []byte // the body as received (key order kept)
	Messages []Message
	// Tools are the function tools the request offered, in order; nil
	// when it offered none.
	Tools []Tool
}

// Images returns the images of every message, in order.
func (r Request) Images() []Image {
	var out []Image
	for _, m := range r.Messages {
		out = append(out, m.Images()...)
	}
	return out
}

// ToolNames returns the names of the tools offered, in order.
func (r Request) ToolNames() []string {
	var out []string
	for _, t := range r.Tools {
		out = append(out, t.Name)
	}
	return out
}

// FirstUserText returns the text of the first user message ("" when none).
func (r Request) FirstUserText() string {
	for _, m := range r.Messages {
		if m.Role == "user" {
			return m.Text()
		}
	}
	return ""
}

// Message is a chat message as received.
type Message struct {
	Role string `json:"role"`
	// Content is the content when it was sent as a string; nil when it
	// was null, absent or a list of parts.
	Content *string `json:"content"`
	// Parts is the content when it was sent as a list of parts.
	Parts      []Part           `json:"-"`
	ToolCalls  []map[string]any `json:"tool_calls"`
	ToolCallID string           `json:"tool_call_id"`
}

// Text returns the message's text: its string content, or its text parts
// joined as sent (with nothing between them).
func (m Message) Text() string {
	if m.Content != nil {
		return *m.Content
	}
	var b strings.Builder
	for _, p := range m.Parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// Images returns the message's image parts, in order.
func (m Message) Images() []Image {
	var out []Image
	for _, p := range m.Parts {
		if p.Image != nil {
			out = append(out, *p.Image)
		}
	}
	return out
}

// Part is one content part: Type "text" with Text, or "image_url" with
// Image.
type Part struct {
	Type  string
	Text  string
	Image *Image
}

// Image is an image_url part's image, decoded.
type Image struct {
	URL       string // the data URL as sent
	Detail    string // image_url.detail as sent ("" when absent)
	MediaType string // the media type the data URL names, e.g. "image/png"
	Format    string // the format the bytes are: "png", "jpeg" or "gif"
	Data      []byte // the decoded bytes
	SHA256    string // hex of Data
	Width     int
	Height    int
}

// Tool is a function tool a request offered.
type Tool struct {
	Name        string
	Description string
	// Parameters is the function's JSON Schema; nil when the tool sent none.
	Parameters map[string]any
	Strict     *bool
}

// Model decides a turn from the request, for a test whose model must read
// what it was sent (a page to click on, the tools offered). It is called
// for requests that passed the server's checks, from the server's
// goroutines (so at once for concurrent episodes). An error is answered
// as a 400 whose message is the error, and kept in Refusals. A turn with
// Fail is answered with the failure; FailTimes is for scripts (a Model
// decides each request anew) and a Model's turn that sets it is refused.
type Model func(Request) (Turn, error)

// Options configure Start.
type Options struct {
	// Scenarios are the scripted turns by scenario name (see the package
	// comment). Ignored when Model is set.
	Scenarios map[string][]Turn
	// Model, when set, answers every request instead of Scenarios.
	Model Model
}

// Server is a running scripted server.
type Server struct {
	// URL is the API root to configure a client with: http://127.0.0.1:PORT/v1.
	URL string
	// Key, when set, is the bearer key every request must carry.
	Key string

	srv       *httptest.Server
	model     Model
	mu        sync.Mutex
	scenarios map[string][]Turn
	failed    map[string]int // scenario/turn → failures answered
	requests  []Request
	refusals  []string
	conns     atomic.Int64 // connections accepted
}

// Connections is how many connections the server has accepted so far.
func (s *Server) Connections() int64 { return s.conns.Load() }

// New starts a server answering the scripted scenarios; it is closed when
// the test ends.
func New(t testing.TB, scenarios map[string][]Turn) *Server {
	return Start(t, Options{Scenarios: scenarios})
}

// Start starts a server with the options; it is closed when the test ends.
func Start(t testing.TB, o Options) *Server {
	s := &Server{scenarios: o.Scenarios, model: o.Model, failed: map[string]int{}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.handle))
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.Start()
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(s.srv.Close)
	return s
}

// Requests returns the requests of a scenario received so far, in order.
func (s *Server) Requests(scenario string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if r.Scenario == scenario {
			out = append(out, r)
		}
	}
	return out
}

// Received returns every request that passed the server's checks, in the
// order received.
func (s *Server) Received() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Refusals returns why each chat-completions request the server refused
// was refused (a wrong key, a bad body, message, part, image or tool, no
// scripted turn, or a Model's error), in order. Scripted Failures are not
// refusals, nor 404s for routes the server does not serve.
func (s *Server) Refusals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refusals...)
}

var scenarioRE = regexp.MustCompile(`scenario:\s*([A-Za-z0-9_-]+)`)

// refuse answers a request the server will not serve, and keeps why.
func (s *Server) refuse(w http.ResponseWriter, status int, msg string) {
	s.mu.Lock()
	s.refusals = append(s.refusals, msg)
	s.mu.Unlock()
	fail(w, status, msg)
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		// Not a refusal: clients probe routes (GET /v1/models, /props) and
		// a server that does not serve one answers 404, as vLLM does.
		fail(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
		return
	}
	if s.Key != "" && r.Header.Get("Authorization") != "Bearer "+s.Key {
		s.refuse(w, http.StatusUnauthorized, "missing or wrong API key")
		return
	}
	rawBody, err := io.ReadAll(r.Body)
	if err != nil {
		s.refuse(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	var body map[string]any
	if err := json.Unmarshal(rawBody, &body); err != nil {
		s.refuse(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	msgs, err := readMessages(rawBody)
	if err != nil {
		s.refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := wellFormed(msgs); err != nil {
		s.refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	tools, err := readTools(rawBody)
	if err != nil {
		s.refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	req := Request{Header: r.Header.Clone(), Body: body, Raw: rawBody, Messages: msgs, Tools: tools}
	if sm := scenarioRE.FindStringSubmatch(req.FirstUserText()); sm != nil {
		req.Scenario = sm[1]
	}
	for _, m := range msgs {
		if m.Role == "assistant" {
			req.Turn++
		}
	}
	if s.model != nil {
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
		t, err := s.model(req)
		switch {
		case err != nil:
			s.refuse(w, http.StatusBadRequest, fmt.Sprintf("turn %d: %v", req.Turn, err))
		case t.FailTimes != 0:
			s.refuse(w, http.StatusInternalServerError, fmt.Sprintf("turn %d: a Model's turn sets FailTimes, which only scripts use", req.Turn))
		case t.Fail != nil:
			failWith(w, r, t.Fail)
		default:
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(answer(t, body))
		}
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	script, ok := s.scenarios[req.Scenario]
	if !ok || req.Turn >= len(script) {
		s.mu.Unlock()
		s.refuse(w, http.StatusBadRequest, fmt.Sprintf("no scripted turn %d for scenario %q", req.Turn, req.Scenario))
		return
	}
	t := script[req.Turn]
	key := fmt.Sprintf("%s/%d", req.Scenario, req.Turn)
	failNow := t.Fail != nil && (t.FailTimes < 0 || s.failed[key] < t.FailTimes)
	if failNow {
		s.failed[key]++
	}
	s.mu.Unlock()

	if failNow {
		failWith(w, r, t.Fail)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer(t, body))
}

// failWith answers a scripted failure.
func failWith(w http.ResponseWriter, r *http.Request, f *Failure) {
	if f.Delay > 0 {
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
			return
		}
	}
	b := f.Body
	if f.EchoAuth {
		b += " (request had Authorization: " + r.Header.Get("Authorization") + ")"
	}
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	fail(w, f.Status, b)
}

// readMessages reads the request's messages as vLLM's chat protocol takes
// them (vllm/entrypoints/chat_utils.py): content is null, a string, or a
// list of parts; a part is {"type": "text", "text": ...} or {"type":
// "image_url", "image_url": {"url": ..., "detail": ...}}.
func readMessages(raw []byte) ([]Message, error) {
	var req struct {
		Messages []struct {
			Role       string           `json:"role"`
			Content    json.RawMessage  `json:"content"`
			ToolCalls  []map[string]any `json:"tool_calls"`
			ToolCallID string           `json:"tool_call_id"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &req); err != nil || len(req.Messages) == 0 {
		return nil, fmt.Errorf("messages missing or malformed")
	}
	out := make([]Message, len(req.Messages))
	for i, wm := range req.Messages {
		m := Message{Role: wm.Role, ToolCalls: wm.ToolCalls, ToolCallID: wm.ToolCallID}
		content := bytes.TrimSpace(wm.Content)
		switch {
		case len(content) == 0 || string(content) == "null":
		case content[0] == '"':
			var str string
			if err := json.Unmarshal(content, &str); err != nil {
				return nil, fmt.Errorf("message %d: content: %v", i, err)
			}
			m.Content = &str
		case content[0] == '[':
			parts, err := readParts(m.Role, content)
			if err != nil {
				return nil, fmt.Errorf("message %d: %v", i, err)
			}
			m.Parts = parts
		default:
			return nil, fmt.Errorf("message %d: content is neither a string, null nor a list of parts: %.40s", i, content)
		}
		out[i] = m
	}
	return out, nil
}

func readParts(role string, raw []byte) ([]Part, error) {
	var wire []struct {
		Type     *string `json:"type"`
		Text     *string `json:"text"`
		ImageURL *struct {
			URL    *string `json:"url"`
			Detail string  `json:"detail"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &wire); err != nil {
		return nil, fmt.Errorf("content parts: %v", err)
	}
	out := make([]Part, len(wire))
	for j, p := range wire {
		if p.Type == nil {
			return nil, fmt.Errorf("part %d: no type", j)
		}
		switch *p.Type {
		case "text":
			if p.Text == nil {
				return nil, fmt.Errorf("part %d: a text part without text", j)
			}
			out[j] = Part{Type: "text", Text: *p.Text}
		case "image_url":
			if role != "user" {
				return nil, fmt.Errorf("part %d: an image in a %s message (images go in user messages)", j, role)
			}
			if p.ImageURL == nil || p.ImageURL.URL == nil {
				return nil, fmt.Errorf("part %d: an image_url part without image_url.url", j)
			}
			img, err := readImage(*p.ImageURL.URL)
			if err != nil {
				return nil, fmt.Errorf("part %d: %v", j, err)
			}
			img.Detail = p.ImageURL.Detail
			out[j] = Part{Type: "image_url", Image: &img}
		default:
			return nil, fmt.Errorf("part %d: unknown content part type %q (this server takes text and image_url)", j, *p.Type)
		}
	}
	return out, nil
}

// readImage decodes a data URL (RFC 2397: data:[<mediatype>][;<param>]*;base64,<data>)
// the way vLLM's MediaConnector does: base64 is the only encoding taken,
// strictly, and the bytes are opened as whatever image they are (vLLM's
// ImageMediaIO hands them to PIL, which sniffs the format and ignores the
// media type named). This server sniffs the formats the standard library
// decodes: PNG, JPEG and GIF.
func readImage(url string) (Image, error) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return Image{}, fmt.Errorf("image url %.32q is not a data URL (a loopback test server fetches nothing)", url)
	}
	spec, data, ok := strings.Cut(rest, ",")
	if !ok {
		return Image{}, fmt.Errorf("data URL %.32q has no ',' separator", url)
	}
	i := strings.LastIndex(spec, ";")
	if i < 0 || spec[i+1:] != "base64" {
		return Image{}, fmt.Errorf("data URL %.32q is not base64 (the only encoding vLLM takes)", url)
	}
	mediaType, _, _ := strings.Cut(spec[:i], ";")
	raw, err := base64.StdEncoding.Strict().DecodeString(data)
	if err != nil {
		return Image{}, fmt.Errorf("data URL base64: %v", err)
	}
	_, format, err := image.Decode(bytes.NewReader(raw))
	if err != nil {
		return Image{}, fmt.Errorf("image (named %q) does not decode as PNG, JPEG or GIF: %v", mediaType, err)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		return Image{}, fmt.Errorf("image: %v", err)
	}
	sum := sha256.Sum256(raw)
	return Image{URL: url, MediaType: mediaType, Format: format, Data: raw, SHA256: hex.EncodeToString(sum[:]),
		Width: cfg.Width, Height: cfg.Height}, nil
}

// readTools reads the request's tools as vLLM's ChatCompletionToolsParam
// takes them: type "function" (the default when absent) and a function
// with a name, an optional description and optional parameters (a JSON
// Schema object).
func readTools(raw []byte) ([]Tool, error) {
	var req struct {
		Tools []struct {
			Type     *string `json:"type"`
			Function *struct {
				Name        *string        `json:"name"`
				Description *string        `json:"description"`
				Parameters  map[string]any `json:"parameters"`
				Strict      *bool          `json:"strict"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, fmt.Errorf("tools: %v", err)
	}
	var out []Tool
	for i, t := range req.Tools {
		if t.Type != nil && *t.Type != "function" {
			return nil, fmt.Errorf("tool %d: type %q (this server takes function tools)", i, *t.Type)
		}
		if t.Function == nil || t.Function.Name == nil || *t.Function.Name == "" {
			return nil, fmt.Errorf("tool %d: a function tool without function.name", i)
		}
		tl := Tool{Name: *t.Function.Name, Parameters: t.Function.Parameters, Strict: t.Function.Strict}
		if t.Function.Description != nil {
			tl.Description = *t.Function.Description
		}
		out = append(out, tl)
	}
	return out, nil
}

// answer renders a turn in the vLLM or SGLang shape.
func answer(t Turn, req map[string]any) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "reasoning": nil, "tool_calls": []any{}}
	if t.Content != "" || len(t.ToolCalls) == 0 {
		msg["content"] = t.Content
	}
	if t.Reasoning != "" {
		msg["reasoning"] = t.Reasoning
	}
	var calls []any
	for _, c := range t.ToolCalls {
		calls = append(calls, map[string]any{"id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": c.Args}})
	}
	if calls != nil {
		msg["tool_calls"] = calls
	}
	finish := t.Finish
	if finish == "" {
		finish = "stop"
		if len(t.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	choice := map[string]any{"index": 0, "message": msg, "finish_reason": finish, "stop_reason": nil, "logprobs": nil}
	if t.Logprobs != nil && req["logprobs"] == true {
		var content []any
		for i, lp := range t.Logprobs {
			tok := "?"
			if i < len(t.ResponseIDs) {
				tok = fmt.Sprintf("token_id:%d", t.ResponseIDs[i])
			}
			content = append(content, map[string]any{"token": tok, "logprob": lp, "bytes": nil, "top_logprobs": []any{}})
		}
		choice["logprobs"] = map[string]any{"content": content}
	}
	resp := map[string]any{
		"id": "chatcmpl-openaitest", "object": "chat.completion", "created": 1700000000, "model": "openaitest-model",
		"choices": []any{choice},
		"usage":   map[string]any{"prompt_tokens": len(t.PromptIDs), "completion_tokens": len(t.ResponseIDs), "total_tokens": len(t.PromptIDs) + len(t.ResponseIDs)},
	}
	if req["return_token_ids"] == true {
		choice["token_ids"] = t.ResponseIDs
		if t.Shape == SGLang {
			if req["return_prompt_token_ids"] == true {
				choice["prompt_token_ids"] = t.PromptIDs
			}
		} else {
			resp["prompt_token_ids"] = t.PromptIDs
			resp["prompt_logprobs"] = nil
		}
	}
	return resp
}

// wellFormed checks what OpenAI-compatible servers reject: a tool call left
// unanswered, or a tool message answering no call.
func wellFormed(msgs []Message) error {
	pending := map[string]bool{}
	for i, m := range msgs {
		switch m.Role {
		case "assistant":
			if len(pending) > 0 {
				return fmt.Errorf("message %d: assistant turn while tool calls %v are unanswered", i, keys(pending))
			}
			for _, c := range m.ToolCalls {
				id, _ := c["id"].(string)
				if id == "" {
					return fmt.Errorf("message %d: tool call without id", i)
				}
				pending[id] = true
			}
		case "tool":
			if !pending[m.ToolCallID] {
				return fmt.Errorf("message %d: tool message for unknown call %q", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
		case "user", "system":
			if len(pending) > 0 {
				return fmt.Errorf("message %d: %s message while tool calls %v are unanswered", i, m.Role, keys(pending))
			}
		default:
			return fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	return nil
}

func keys(m map[string]bool) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return strings.Join(out, ",")
}

func fail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"object": "error", "message": msg, "type": http.StatusText(status), "code": status})
}
