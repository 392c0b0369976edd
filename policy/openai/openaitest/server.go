// Package openaitest is a scripted OpenAI-compatible /v1/chat/completions
// server for tests, on loopback only. It answers in vLLM's documented shape
// (top-level prompt_token_ids, choices[].token_ids, logprobs.content[]) or
// SGLang's (prompt_token_ids per choice), from scripted turns, and can fail
// on cue (429 with Retry-After, 5xx storms, slow answers).
//
// Conversations are told apart by a scenario name written in the first user
// message ("scenario: NAME", typically a task's instruction), and the turn
// is the number of assistant messages in the request, so any number of
// episodes can run against one server at once. The server checks what a real
// one would reject: the path, the bearer key, and that every tool call of an
// assistant message is answered by a tool message before the next turn.
//
// It knows the wire format only, not forkline's packages.
package openaitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
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
}

// Message is a chat message as received.
type Message struct {
	Role       string           `json:"role"`
	Content    *string          `json:"content"`
	ToolCalls  []map[string]any `json:"tool_calls"`
	ToolCallID string           `json:"tool_call_id"`
}

// Server is a running scripted server.
type Server struct {
	// URL is the API root to configure a client with: http://127.0.0.1:PORT/v1.
	URL string
	// Key, when set, is the bearer key every request must carry.
	Key string

	srv       *httptest.Server
	mu        sync.Mutex
	scenarios map[string][]Turn
	failed    map[string]int // scenario/turn → failures answered
	requests  []Request
}

// New starts a server answering the scripted scenarios; it is closed when
// the test ends.
func New(t testing.TB, scenarios map[string][]Turn) *Server {
	s := &Server{scenarios: scenarios, failed: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
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

var scenarioRE = regexp.MustCompile(`scenario:\s*([A-Za-z0-9_-]+)`)

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		fail(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
		return
	}
	if s.Key != "" && r.Header.Get("Authorization") != "Bearer "+s.Key {
		fail(w, http.StatusUnauthorized, "missing or wrong API key")
		return
	}
	rawBody, err := io.ReadAll(r.Body)
	if err != nil {
		fail(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	var body map[string]any
	if err := json.Unmarshal(rawBody, &body); err != nil {
		fail(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	raw, _ := json.Marshal(body["messages"])
	var msgs []Message
	if err := json.Unmarshal(raw, &msgs); err != nil || len(msgs) == 0 {
		fail(w, http.StatusBadRequest, "messages missing or malformed")
		return
	}
	if err := wellFormed(msgs); err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	scenario := ""
	for _, m := range msgs {
		if m.Role == "user" && m.Content != nil {
			if sm := scenarioRE.FindStringSubmatch(*m.Content); sm != nil {
				scenario = sm[1]
			}
			break
		}
	}
	turn := 0
	for _, m := range msgs {
		if m.Role == "assistant" {
			turn++
		}
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Scenario: scenario, Turn: turn, Header: r.Header.Clone(), Body: body, Raw: rawBody, Messages: msgs})
	script, ok := s.scenarios[scenario]
	if !ok || turn >= len(script) {
		s.mu.Unlock()
		fail(w, http.StatusBadRequest, fmt.Sprintf("no scripted turn %d for scenario %q", turn, scenario))
		return
	}
	t := script[turn]
	key := fmt.Sprintf("%s/%d", scenario, turn)
	failNow := t.Fail != nil && (t.FailTimes < 0 || s.failed[key] < t.FailTimes)
	if failNow {
		s.failed[key]++
	}
	s.mu.Unlock()

	if failNow {
		f := t.Fail
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
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer(t, body))
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
