package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkline/forkline/gateway"
)

// echo answers every call with a fixed reply and keeps the calls.
type echo struct {
	mu      sync.Mutex
	reply   gateway.Reply
	calls   []*gateway.Call
	refused []error
	wait    time.Duration
}

func (e *echo) Call(ctx context.Context, c *gateway.Call) (*gateway.Reply, error) {
	if e.wait > 0 {
		select {
		case <-time.After(e.wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, c)
	r := e.reply
	return &r, nil
}

func (e *echo) Refused(_ string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.refused = append(e.refused, err)
}

func serve(t *testing.T, cfg gateway.Config) (*gateway.Server, string) {
	gw := gateway.New(cfg)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return gw, srv.URL
}

func post(t *testing.T, url, key, body string, header ...string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// sse splits an event stream into (event, data) pairs, comments left out.
func sse(t *testing.T, body []byte) [][2]string {
	t.Helper()
	var out [][2]string
	var ev, data string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data != "" {
				out = append(out, [2]string{ev, data})
			}
			ev, data = "", ""
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			ev = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

var toolReply = gateway.Reply{Reasoning: "think", Content: "Let me look.",
	Calls:  []gateway.ToolCall{{ID: "call_1", Name: "Bash", Arguments: `{"command":"ls -la"}`}},
	Finish: gateway.FinishToolCalls, PromptTokens: 11, CompletionTokens: 7}

// The request shapes below are the APIs' documented examples (Anthropic's
// Messages reference with tool use; OpenAI's Responses and Chat
// Completions references with function calling).
func TestTranslatesEachAPIsConversation(t *testing.T) {
	gw, url := serve(t, gateway.Config{})
	h := &echo{reply: toolReply}
	key, _ := gw.Register(h)
	cases := []struct {
		name, path, body string
		want             []gateway.Message
		tools            []string
		dropped          int
	}{
		{"messages", "/v1/messages?beta=true", `{"model":"claude-x","max_tokens":1024,
			"system":[{"type":"text","text":"You are terse."},{"type":"text","text":"Use tools.","cache_control":{"type":"ephemeral"}}],
			"tools":[{"name":"get_weather","description":"Get the weather","input_schema":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}},
			         {"type":"web_search_20250305","name":"web_search"},{"name":"Later","input_schema":{"type":"object"},"defer_loading":true}],
			"messages":[{"role":"user","content":"Weather in Paris?"},
			 {"role":"assistant","content":[{"type":"thinking","thinking":"call it","signature":"s"},{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"location":"Paris"}}]},
			 {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"15 C"}]},{"type":"text","text":"<reminder>be brief</reminder>"}]},
			 {"role":"system","content":"Mid-conversation note."}]}`,
			[]gateway.Message{{Role: "system", Content: "You are terse.\nUse tools."}, {Role: "user", Content: "Weather in Paris?"},
				{Role: "assistant", Content: "Checking.", Reasoning: "call it", ToolCalls: []gateway.ToolCall{{ID: "toolu_1", Name: "get_weather", Arguments: `{"location":"Paris"}`}}},
				{Role: "tool", ToolCallID: "toolu_1", Content: "15 C"}, {Role: "user", Content: "<reminder>be brief</reminder>"},
				{Role: "system", Content: "Mid-conversation note."}},
			[]string{"get_weather"}, 2},
		{"responses", "/v1/responses", `{"model":"gpt-x","instructions":"Be terse.","store":false,
			"tools":[{"type":"function","name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"location":{"type":"string"}}},"strict":false},{"type":"web_search"}],
			"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"Sandbox: none."}]},
			 {"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in Paris?"}]},
			 {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"call it"}],"encrypted_content":null},
			 {"type":"function_call","call_id":"call_9","name":"get_weather","arguments":"{\"location\":\"Paris\"}"},
			 {"type":"function_call_output","call_id":"call_9","output":"15 C"}]}`,
			[]gateway.Message{{Role: "system", Content: "Be terse."}, {Role: "system", Content: "Sandbox: none."}, {Role: "user", Content: "Weather in Paris?"},
				{Role: "assistant", Reasoning: "call it", ToolCalls: []gateway.ToolCall{{ID: "call_9", Name: "get_weather", Arguments: `{"location":"Paris"}`}}},
				{Role: "tool", ToolCallID: "call_9", Content: "15 C"}},
			[]string{"get_weather"}, 1},
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"system","content":"Be terse."},
			 {"role":"user","content":[{"type":"text","text":"Weather"},{"type":"text","text":"in Paris?"}]},
			 {"role":"assistant","content":null,"reasoning_content":"call it","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}]},
			 {"role":"tool","tool_call_id":"c1","content":"15 C"}],
			"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`,
			[]gateway.Message{{Role: "system", Content: "Be terse."}, {Role: "user", Content: "Weather\nin Paris?"},
				{Role: "assistant", Reasoning: "call it", ToolCalls: []gateway.ToolCall{{ID: "c1", Name: "get_weather", Arguments: `{"location":"Paris"}`}}},
				{Role: "tool", ToolCallID: "c1", Content: "15 C"}},
			[]string{"get_weather"}, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, url+tc.path, key, tc.body)
			if code != 200 {
				t.Fatalf("status %d: %s", code, body)
			}
			h.mu.Lock()
			c := h.calls[i]
			h.mu.Unlock()
			if !equalMessages(c.Messages, tc.want) {
				t.Errorf("messages:\n got %+v\nwant %+v", c.Messages, tc.want)
			}
			var names []string
			for _, tl := range c.Tools {
				names = append(names, tl.Name)
				if !json.Valid(tl.ChatJSON()) {
					t.Errorf("tool %s: ChatJSON is not JSON: %s", tl.Name, tl.ChatJSON())
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.tools, ",") || len(c.Dropped) != tc.dropped {
				t.Errorf("tools %v dropped %v, want %v and %d dropped", names, c.Dropped, tc.tools, tc.dropped)
			}
		})
	}
}

func equalMessages(a, b []gateway.Message) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// The replies, non-streaming, in each API's documented response shape.
func TestAnswersInEachAPIsShape(t *testing.T) {
	gw, url := serve(t, gateway.Config{})
	key, _ := gw.Register(&echo{reply: toolReply})

	_, b := post(t, url+"/v1/messages", key, `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	var msg struct {
		Content []struct {
			Type, Text, Thinking, ID, Name string
			Input                          map[string]any
		} `json:"content"`
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &msg); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	_ = json.Unmarshal(b, &raw)
	if raw["stop_reason"] != "tool_use" || len(msg.Content) != 3 || msg.Content[0].Type != "thinking" || msg.Content[1].Text != "Let me look." ||
		msg.Content[2].Type != "tool_use" || msg.Content[2].ID != "call_1" || msg.Content[2].Input["command"] != "ls -la" || msg.Usage.InputTokens != 11 {
		t.Errorf("Messages answer: %s", b)
	}

	_, b = post(t, url+"/v1/responses", key, `{"model":"gpt-x","input":"hi"}`)
	var resp struct {
		Object, Status string
		Output         []map[string]any
		Usage          map[string]any
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Object != "response" || resp.Status != "completed" || len(resp.Output) != 3 || resp.Output[0]["type"] != "reasoning" ||
		resp.Output[2]["type"] != "function_call" || resp.Output[2]["call_id"] != "call_1" || resp.Output[2]["arguments"] != `{"command":"ls -la"}` {
		t.Errorf("Responses answer: %s", b)
	}

	_, b = post(t, url+"/v1/chat/completions", key, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	var chat struct {
		Object  string
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content   *string
				ToolCalls []struct {
					ID       string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
		}
	}
	if err := json.Unmarshal(b, &chat); err != nil {
		t.Fatal(err)
	}
	if chat.Object != "chat.completion" || chat.Choices[0].FinishReason != "tool_calls" || chat.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"command":"ls -la"}` {
		t.Errorf("Chat answer: %s", b)
	}
}

// Streams end with the API's closing event and carry the same content.
func TestStreamsEachAPIsEvents(t *testing.T) {
	gw, url := serve(t, gateway.Config{KeepAlive: 20 * time.Millisecond})
	key, _ := gw.Register(&echo{reply: toolReply, wait: 80 * time.Millisecond})
	_, b := post(t, url+"/v1/messages", key, `{"model":"c","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if !bytes.Contains(b, []byte(": keep-alive")) {
		t.Errorf("no keep-alive comment while the model worked:\n%s", b)
	}
	evs := sse(t, b)
	var names []string
	partial := ""
	for _, e := range evs {
		names = append(names, e[0])
		var d struct {
			Delta struct{ Type, PartialJSON string } `json:"delta"`
		}
		_ = json.Unmarshal([]byte(e[1]), &d)
		if d.Delta.Type == "input_json_delta" {
			var x struct {
				Delta struct {
					PartialJSON string `json:"partial_json"`
				} `json:"delta"`
			}
			_ = json.Unmarshal([]byte(e[1]), &x)
			partial += x.Delta.PartialJSON
		}
	}
	if names[0] != "message_start" || names[len(names)-1] != "message_stop" || names[len(names)-2] != "message_delta" || partial != `{"command":"ls -la"}` {
		t.Errorf("Messages stream: %v, input %q", names, partial)
	}

	_, b = post(t, url+"/v1/responses", key, `{"model":"g","stream":true,"input":"hi"}`)
	evs = sse(t, b)
	last := evs[len(evs)-1]
	var done struct {
		Response struct {
			Status string
			Output []map[string]any
		}
	}
	_ = json.Unmarshal([]byte(last[1]), &done)
	if evs[0][0] != "response.created" || last[0] != "response.completed" || done.Response.Status != "completed" || len(done.Response.Output) != 3 {
		t.Errorf("Responses stream ends %v: %s", last[0], last[1])
	}

	_, b = post(t, url+"/v1/chat/completions", key, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	evs = sse(t, b)
	if evs[len(evs)-1][1] != "[DONE]" || !strings.Contains(evs[len(evs)-2][1], `"usage"`) {
		t.Errorf("Chat stream ends: %v", evs[len(evs)-2:])
	}
}

// Only a registered credential reaches a handler, and only its own.
func TestCredentialsKeepEpisodesApart(t *testing.T) {
	gw, url := serve(t, gateway.Config{})
	a, b := &echo{reply: gateway.Reply{Content: "a"}}, &echo{reply: gateway.Reply{Content: "b"}}
	ka, unregA := gw.Register(a)
	kb, _ := gw.Register(b)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, key := range []string{"", "sk-real-key", gateway.CredentialPrefix + "0000"} {
		if code, _ := post(t, url+"/v1/chat/completions", key, body); code != 401 {
			t.Errorf("key %q: status %d, want 401", key, code)
		}
	}
	post(t, url+"/v1/chat/completions", ka, body)
	post(t, url+"/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "x-api-key", kb)
	if len(a.calls) != 1 || len(b.calls) != 1 {
		t.Fatalf("calls: a %d, b %d", len(a.calls), len(b.calls))
	}
	unregA()
	if code, _ := post(t, url+"/v1/chat/completions", ka, body); code != 401 {
		t.Errorf("an unregistered credential answered %d", code)
	}
}

// What cannot be translated is refused with a 400 naming it, and the
// episode is told; a body over the bound is refused with a 413.
func TestRefusesWhatItCannotTranslate(t *testing.T) {
	gw, url := serve(t, gateway.Config{MaxRequestBytes: 4096})
	h := &echo{}
	key, _ := gw.Register(h)
	cases := []struct{ path, body, want string }{
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}}]}]}`, "image block"},
		{"/v1/responses", `{"model":"m","previous_response_id":"resp_1","input":"hi"}`, "previous_response_id"},
		{"/v1/responses", `{"model":"m","input":[{"type":"compaction","encrypted_content":"x"}]}`, "compaction item"},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:"}}]}]}`, "image_url part"},
		{"/v1/chat/completions", `{"model":`, "not valid JSON"},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, "over 4096 bytes"},
	}
	for _, tc := range cases {
		code, b := post(t, url+tc.path, key, tc.body)
		if code/100 != 4 || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s %.60s: %d %s, want a 4xx naming %q", tc.path, tc.body, code, b, tc.want)
		}
	}
	if len(h.refused) != len(cases) || len(h.calls) != 0 {
		t.Fatalf("refused %d, calls %d", len(h.refused), len(h.calls))
	}
	for _, err := range h.refused {
		if !errors.Is(err, gateway.ErrUntranslatable) {
			t.Errorf("refusal %v does not wrap ErrUntranslatable", err)
		}
	}
	code, b := post(t, url+"/v1/embeddings", key, `{}`)
	if code != 404 || !strings.Contains(string(b), "/v1/responses") {
		t.Errorf("unknown route: %d %s", code, b)
	}
}

// The relay carries a loopback TCP connection to the gateway's unix
// socket, both ways.
func TestRelayCarriesConnectionsToTheSocket(t *testing.T) {
	gw := gateway.New(gateway.Config{Models: []string{"m1"}})
	sock := filepath.Join(t.TempDir(), "gw.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	go gw.Serve(ul)
	key, _ := gw.Register(&echo{reply: gateway.Reply{Content: "via the relay"}})
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- gateway.Relay(ctx, tl, sock) }()
	code, b := post(t, "http://"+tl.Addr().String()+"/v1/chat/completions", key, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 || !strings.Contains(string(b), "via the relay") {
		t.Fatalf("through the relay: %d %s", code, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
