package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/policy/openai/openaitest"
	"github.com/forkline/forkline/runtime"
)

// newPolicy builds a policy against srv with tiny backoffs.
func newPolicy(t *testing.T, srv *openaitest.Server, opts map[string]string) *Policy {
	t.Helper()
	all := map[string]string{"base_url": srv.URL, "backoff": "1ms", "backoff_max": "4ms", "retries": "3"}
	for k, v := range opts {
		all[k] = v
	}
	cfg, err := ParseOptions(all)
	require.NoError(t, err)
	p, err := New(cfg)
	require.NoError(t, err)
	return p
}

// episode drives p like runtime.Rollout does, answering every action with
// output, and returns the decisions.
func episode(t *testing.T, p *Policy, instruction string, output string) []runtime.Decision {
	t.Helper()
	h := runtime.History{Instruction: instruction}
	var out []runtime.Decision
	for range 10 {
		d, err := p.Decide(context.Background(), h)
		require.NoError(t, err)
		out = append(out, d)
		if d.Stop != "" || d.Action.Kind == runtime.ActDone {
			return out
		}
		h.Steps = append(h.Steps, runtime.Step{Index: len(h.Steps), Action: d.Action, Model: d.Model,
			Observation: runtime.Observation{Output: []byte(output), ExitCode: 0}})
	}
	t.Fatal("episode did not end")
	return nil
}

func call(id, name, args string) openaitest.ToolCall {
	return openaitest.ToolCall{ID: id, Name: name, Args: args}
}

func TestNativeConversationAndTokens(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{"native": {
		{ToolCalls: []openaitest.ToolCall{call("call_a", "exec", `{"cmd":"echo hi"}`)}, Reasoning: "list first",
			PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{10, 11}, Logprobs: []float64{-0.1, -0.2}},
		{ToolCalls: []openaitest.ToolCall{call("call_b", "done", `{"answer":"ok"}`)},
			PromptIDs: []int32{1, 2, 3, 10, 11, 50}, ResponseIDs: []int32{12}, Logprobs: []float64{-0.3}},
	}})
	srv.Key = "sk-unit-test-key"
	t.Setenv("UNIT_KEY", srv.Key)
	p := newPolicy(t, srv, map[string]string{"api_key_env": "UNIT_KEY", "model": "m", "temperature": "0.7", "max_tokens": "256", "seed": "7"})
	ds := episode(t, p, "scenario: native. Say hi.", "hi\n")
	require.Len(t, ds, 2)

	first := ds[0]
	require.Equal(t, runtime.Action{Kind: runtime.ActExec, Cmd: "echo hi"}, first.Action)
	ev := first.Model
	require.Equal(t, "openaitest-model", ev.Model)
	require.Equal(t, "call_a", ev.ToolCallID)
	require.Equal(t, "list first", ev.Reasoning)
	require.Equal(t, "tool_calls", ev.FinishReason)
	require.Equal(t, []int32{1, 2, 3}, ev.PromptIDs)
	require.Equal(t, []int32{10, 11}, ev.ResponseIDs)
	require.Equal(t, []int8{1, 1}, ev.ResponseMask)
	require.Equal(t, []float32{-0.1, -0.2}, ev.Logprobs)
	require.Equal(t, runtime.Usage{PromptTokens: 3, CompletionTokens: 2}, ev.Usage)
	require.Equal(t, []runtime.Action{first.Action}, ev.Actions)
	require.Equal(t, runtime.ActDone, ds[1].Action.Kind)
	require.Equal(t, "ok", ds[1].Action.Answer)

	reqs := srv.Requests("native")
	require.Len(t, reqs, 2)
	body := reqs[0].Body
	require.Equal(t, true, body["logprobs"])
	require.EqualValues(t, 0, body["top_logprobs"])
	require.Equal(t, true, body["return_token_ids"])
	require.Equal(t, true, body["return_prompt_token_ids"])
	require.Equal(t, "m", body["model"])
	require.EqualValues(t, 0.7, body["temperature"])
	require.EqualValues(t, 256, body["max_tokens"])
	require.EqualValues(t, 7, body["seed"])
	require.Len(t, body["tools"], len(runtime.ActionKinds()))
	require.Equal(t, "Bearer sk-unit-test-key", reqs[0].Header.Get("Authorization"))

	m := reqs[1].Messages
	require.Len(t, m, 4)
	require.Equal(t, []string{"system", "user", "assistant", "tool"}, []string{m[0].Role, m[1].Role, m[2].Role, m[3].Role})
	require.Nil(t, m[2].Content, "a tool-only answer is sent back with null content")
	require.Len(t, m[2].ToolCalls, 1)
	require.Equal(t, `{"cmd":"echo hi"}`, m[2].ToolCalls[0]["function"].(map[string]any)["arguments"], "arguments go back as the server sent them")
	require.Equal(t, "call_a", m[3].ToolCallID)
	require.Equal(t, "exit code: 0\nhi\n", *m[3].Content)
}

func TestSeveralToolCallsRunTheFirst(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{"multi": {
		{ToolCalls: []openaitest.ToolCall{call("c1", "exec", `{"cmd":"ls"}`), call("c2", "read_file", `{"path":"a"}`), call("c3", "bogus", `{}`)}},
		{ToolCalls: []openaitest.ToolCall{call("c4", "done", `{}`)}},
	}})
	ds := episode(t, newPolicy(t, srv, nil), "scenario: multi", "a\n")
	require.Equal(t, runtime.Action{Kind: runtime.ActExec, Cmd: "ls"}, ds[0].Action)
	require.Equal(t, []runtime.Action{{Kind: runtime.ActExec, Cmd: "ls"}, {Kind: runtime.ActReadFile, Path: "a"}}, ds[0].Model.Actions,
		"every call that parses is recorded; the unparsable third is not")
	m := srv.Requests("multi")[1].Messages
	require.Len(t, m, 6, "every call is answered so the conversation stays valid")
	require.Equal(t, "c1", m[3].ToolCallID)
	require.Contains(t, *m[3].Content, "a\n")
	require.Equal(t, "c2", m[4].ToolCallID)
	require.Contains(t, *m[4].Content, "not run")
	require.Equal(t, "c3", m[5].ToolCallID)
	require.Equal(t, []runtime.ToolCall{{ID: "c1", Name: "exec", Arguments: `{"cmd":"ls"}`},
		{ID: "c2", Name: "read_file", Arguments: `{"path":"a"}`}, {ID: "c3", Name: "bogus", Arguments: `{}`}}, ds[0].Model.ToolCalls,
		"every call is recorded as the server returned it, for the exports")
	require.Equal(t, aci.NotRunResult, *m[4].Content, "the text exports write for a call that did not run")
}

// The tools go out in aci's key order (ToolsJSON), the order exports write:
// what a server renders into the system prompt is what training renders.
func TestToolsAreSentInTheExportOrder(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{"order": {{ToolCalls: []openaitest.ToolCall{call("c1", "done", `{}`)}}}})
	episode(t, newPolicy(t, srv, map[string]string{"actions": "exec,done"}), "scenario: order", "")
	raw := srv.Requests("order")[0].Raw
	var body struct {
		Tools json.RawMessage `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(raw, &body))
	want, err := aci.ToolsJSON([]runtime.ActionKind{runtime.ActExec, runtime.ActDone})
	require.NoError(t, err)
	require.Equal(t, string(want), string(body.Tools))
}

func TestTextModeConversation(t *testing.T) {
	text := "I'll check.\n<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"pwd\"}}\n</tool_call>"
	srv := openaitest.New(t, map[string][]openaitest.Turn{"text": {
		{Content: text},
		{Content: "```json\n{\"name\": \"done\", \"arguments\": {\"answer\": \"/w\"}}\n```"},
	}})
	p := newPolicy(t, srv, map[string]string{"tool_mode": "text", "actions": "exec,done", "token_ids": "false", "logprobs": "false"})
	ds := episode(t, p, "scenario: text", "/w\n")
	require.Equal(t, runtime.Action{Kind: runtime.ActExec, Cmd: "pwd"}, ds[0].Action)
	require.Equal(t, text, ds[0].Model.RawText)
	require.Empty(t, ds[0].Model.ToolCallID)
	require.Equal(t, "/w", ds[1].Action.Answer)

	reqs := srv.Requests("text")
	require.NotContains(t, reqs[0].Body, "tools")
	require.NotContains(t, reqs[0].Body, "logprobs")
	require.NotContains(t, reqs[0].Body, "return_token_ids")
	sys := *reqs[0].Messages[0].Content
	require.Contains(t, sys, "<tool_call>")
	require.Contains(t, sys, "- exec: ")
	require.NotContains(t, sys, "- click: ", "only the offered actions are listed")
	m := reqs[1].Messages
	require.Equal(t, "assistant", m[2].Role)
	require.Equal(t, text, *m[2].Content, "the raw text goes back unchanged")
	require.Equal(t, "user", m[3].Role)
	require.Equal(t, "exit code: 0\n/w\n", *m[3].Content)
}

func TestStops(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{
		"truncated": {{Content: `<tool_call>{"name":"exec","arguments":{"cmd":"ech`, Finish: "length",
			PromptIDs: []int32{1}, ResponseIDs: []int32{5, 6}, Logprobs: []float64{-1, -2}}},
		"prose":    {{Content: "The answer is 42."}},
		"unparsed": {{ToolCalls: []openaitest.ToolCall{call("x", "exec", `{"command":"ls"}`)}}},
		"broken":   {{Content: `<tool_call>{"name": "exec", "arguments": {"cmd": "ls"</tool_call>`}},
	})
	cases := []struct {
		scenario string
		exit     runtime.ExitReason
		detail   string
	}{
		{"truncated", runtime.ExitOutputTruncated, "finish_reason length"},
		{"prose", runtime.ExitNoAction, "without a tool call"},
		{"unparsed", runtime.ExitUnparsedAction, `exec needs field "cmd"`},
		{"broken", runtime.ExitUnparsedAction, "<tool_call> block 1"},
	}
	for _, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			ds := episode(t, newPolicy(t, srv, nil), "scenario: "+c.scenario, "")
			require.Len(t, ds, 1)
			require.Equal(t, c.exit, ds[0].Stop)
			require.Contains(t, ds[0].Detail, c.detail)
			require.NotNil(t, ds[0].Model, "the final turn is recorded")
		})
	}
	ds := episode(t, newPolicy(t, srv, nil), "scenario: truncated", "")
	require.Equal(t, []int32{5, 6}, ds[0].Model.ResponseIDs)
	require.Equal(t, "length", ds[0].Model.FinishReason)
}

func TestTokenFieldsStayConsistent(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{
		"sglang":     {{Content: "done?", Shape: openaitest.SGLang, PromptIDs: []int32{7, 8}, ResponseIDs: []int32{9}, Logprobs: []float64{-0.5}}},
		"misaligned": {{Content: "x", PromptIDs: []int32{1}, ResponseIDs: []int32{2, 3}, Logprobs: []float64{-1}}},
		"no-ids":     {{Content: "x", Logprobs: []float64{-1}}},
	})
	ev := episode(t, newPolicy(t, srv, nil), "scenario: sglang", "")[0].Model
	require.Equal(t, []int32{7, 8}, ev.PromptIDs, "SGLang's per-choice prompt ids")
	require.Equal(t, []int32{9}, ev.ResponseIDs)
	require.Equal(t, []float32{-0.5}, ev.Logprobs)

	ev = episode(t, newPolicy(t, srv, nil), "scenario: misaligned", "")[0].Model
	require.Equal(t, []int32{2, 3}, ev.ResponseIDs)
	require.Equal(t, []int8{1, 1}, ev.ResponseMask)
	require.Nil(t, ev.Logprobs, "one logprob for two ids is dropped, not padded")

	ev = episode(t, newPolicy(t, srv, nil), "scenario: no-ids", "")[0].Model
	require.Empty(t, ev.ResponseIDs)
	require.Empty(t, ev.ResponseMask)
	require.Nil(t, ev.Logprobs, "logprobs without ids would break the row invariants")
}

type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, fmt.Sprintf(format, args...))
}

func TestRetries(t *testing.T) {
	const key = "sk-retry-secret-0123456789"
	ok := openaitest.Turn{Content: "fine"}
	srv := openaitest.New(t, map[string][]openaitest.Turn{
		"429":     {{Content: "fine", Fail: &openaitest.Failure{Status: 429, Body: "slow down", RetryAfter: "0"}, FailTimes: 2}},
		"storm":   {{Fail: &openaitest.Failure{Status: 500, Body: "overloaded", EchoAuth: true}, FailTimes: -1}},
		"400":     {{Fail: &openaitest.Failure{Status: 400, Body: "bad tool spec"}, FailTimes: -1}},
		"404":     {{Fail: &openaitest.Failure{Status: 404, Body: "no such model"}, FailTimes: -1}},
		"slow":    {{Content: "fine", Fail: &openaitest.Failure{Status: 200, Delay: 5 * time.Second}, FailTimes: 1}},
		"healthy": {ok},
	})
	srv.Key = key
	t.Setenv("RETRY_KEY", key)
	opts := map[string]string{"api_key_env": "RETRY_KEY", "timeout": "100ms", "tokens": "chat"}

	run := func(scenario string) (*lines, error) {
		l := &lines{}
		p := newPolicy(t, srv, opts)
		p.client.cfg.Logf = l.logf
		_, err := p.Decide(context.Background(), runtime.History{Instruction: "scenario: " + scenario})
		return l, err
	}

	l, err := run("429")
	require.NoError(t, err)
	require.Len(t, srv.Requests("429"), 3)
	require.Len(t, l.l, 2)
	require.Contains(t, l.l[0], "429 Too Many Requests: ")
	require.Contains(t, l.l[0], "retry 1 of 3")

	l, err = run("storm")
	require.ErrorIs(t, err, ErrRetriesExhausted)
	var se *StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 500, se.Code)
	require.Len(t, srv.Requests("storm"), 4, "1 attempt + 3 retries")
	require.Contains(t, err.Error(), "after 4 attempts")
	require.Contains(t, err.Error(), "[redacted]", "the server echoed the key")
	require.NotContains(t, err.Error(), key)
	require.NotContains(t, strings.Join(l.l, "\n"), key)

	for _, code := range []string{"400", "404"} {
		l, err = run(code)
		require.ErrorAs(t, err, &se)
		require.NotErrorIs(t, err, ErrRetriesExhausted)
		require.Len(t, srv.Requests(code), 1, "a %s is never retried", code)
		require.Empty(t, l.l)
	}
	require.ErrorContains(t, err, "no such model")

	l, err = run("slow")
	require.NoError(t, err, "a timed-out attempt is retried")
	require.Len(t, srv.Requests("slow"), 2)
	require.Contains(t, l.l[0], "no answer within 100ms")

	// Connection refused is retried, then reported.
	cfg := DefaultConfig()
	cfg.BaseURL, cfg.Retries, cfg.Backoff, cfg.BackoffMax = "http://127.0.0.1:1/v1", 1, time.Millisecond, time.Millisecond
	p, err := New(cfg)
	require.NoError(t, err)
	_, err = p.Decide(context.Background(), runtime.History{Instruction: "x"})
	require.ErrorIs(t, err, ErrRetriesExhausted)
}

func TestCancellationStopsRetrying(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{
		"storm": {{Fail: &openaitest.Failure{Status: 503}, FailTimes: -1}},
		"hang":  {{Fail: &openaitest.Failure{Status: 200, Delay: time.Minute}, FailTimes: -1}},
	})
	for _, scenario := range []string{"storm", "hang"} {
		p := newPolicy(t, srv, map[string]string{"backoff": "1m", "backoff_max": "1m", "timeout": "1m"})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		began := time.Now()
		_, err := p.Decide(ctx, runtime.History{Instruction: "scenario: " + scenario})
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, ErrRetriesExhausted)
		require.Less(t, time.Since(began), 30*time.Second, "ctx ends the wait, not the backoff or the request timeout")
	}
}

func TestBackoffIsExponentialBoundedAndHonoursRetryAfter(t *testing.T) {
	c := &client{cfg: Config{Backoff: 100 * time.Millisecond, BackoffMax: time.Second}}
	c.jitter = func(n int64) int64 { return n - 1 } // the most jitter allows
	var got []time.Duration
	for a := range 6 {
		got = append(got, c.backoff(a, 0))
	}
	require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}, got)
	c.jitter = func(int64) int64 { return 0 } // the least
	require.Equal(t, 50*time.Millisecond, c.backoff(0, 0), "equal jitter: never below half")
	require.Equal(t, time.Second, c.backoff(0, time.Hour), "Retry-After, within backoff_max")
	require.Equal(t, 300*time.Millisecond, c.backoff(0, 300*time.Millisecond))
	require.Equal(t, 500*time.Millisecond, c.backoff(200, 0), "no overflow: half of backoff_max at least")
}

func localBase() string { return "http://127.0.0.1:8000/v1" }

func TestParseOptions(t *testing.T) {
	c, err := ParseOptions(map[string]string{"base_url": "http://127.0.0.1:8000/v1"})
	require.NoError(t, err)
	def := DefaultConfig()
	def.BaseURL = "http://127.0.0.1:8000/v1"
	require.Equal(t, def, c)

	t.Setenv("SET_KEY", "k")
	c, err = ParseOptions(map[string]string{"base_url": "https://api.example.com/v1/", "api_key_env": "SET_KEY",
		"top_p": "0.9", "timeout": "30s", "retries": "0", "tool_mode": "text", "actions": "exec, done",
		"observation_cap": "0", "token_ids": "false"})
	require.NoError(t, err)
	require.Equal(t, []runtime.ActionKind{runtime.ActExec, runtime.ActDone}, c.Actions)
	require.Equal(t, 30*time.Second, c.Timeout)

	// done is always offered (docs/TASKS.md): a list without it gets it,
	// last, rather than every episode ending no_action.
	withDone, err := ParseOptions(map[string]string{"base_url": "http://127.0.0.1:8000/v1", "actions": "exec,read_file,write_file"})
	require.NoError(t, err)
	require.Equal(t, []runtime.ActionKind{runtime.ActExec, runtime.ActReadFile, runtime.ActWriteFile, runtime.ActDone}, withDone.Actions)
	require.Zero(t, c.Retries)
	require.False(t, c.TokenIDs)
	require.True(t, c.Logprobs)

	c, err = ParseOptions(map[string]string{"base_url": localBase(), "tokens": "tito", "tool_parser": "server", "reasoning_parser": "none",
		"chat_template_kwargs": `{"enable_thinking": false, "truncate_history_thinking": true}`, "send_reasoning": "false",
		"server": "sglang", "render_url": "http://127.0.0.1:8001"})
	require.NoError(t, err)
	require.Equal(t, policy.TokensTITO, c.Tokens)
	require.Equal(t, map[string]any{"enable_thinking": false, "truncate_history_thinking": true}, c.ChatTemplateKwargs)
	require.False(t, c.SendReasoning)
	conv, err := c.Conversation()
	require.NoError(t, err)
	require.Equal(t, false, *conv.EnableThinking, "enable_thinking recorded from the kwargs")
	require.Equal(t, "server", conv.ToolParser)
	require.Equal(t, "canonical", conv.ToolKeyOrder)
	require.False(t, conv.SentReasoning())

	base := "http://127.0.0.1:8000/v1"
	cases := []struct {
		name string
		opts map[string]string
		want string
	}{
		{"unknown key", map[string]string{"base_url": base, "temprature": "1"}, `unknown option "temprature" (known: actions, api_key_env, backoff,`},
		{"no base url", map[string]string{}, "base_url is required"},
		{"not http", map[string]string{"base_url": "ftp://h/v1"}, "want an http or https URL"},
		{"no host", map[string]string{"base_url": "http:///v1"}, "no host"},
		{"credentials in the url", map[string]string{"base_url": "https://user:sk-123@h/v1"}, "carries credentials"},
		{"key variable unset", map[string]string{"base_url": base, "api_key_env": "SURELY_UNSET_FORKLINE_VAR"}, "SURELY_UNSET_FORKLINE_VAR, which is not set"},
		{"temperature range", map[string]string{"base_url": base, "temperature": "3"}, "not within 0..2"},
		{"top_p zero", map[string]string{"base_url": base, "top_p": "0"}, "greater than 0"},
		{"max_tokens", map[string]string{"base_url": base, "max_tokens": "0"}, "at least 1"},
		{"timeout", map[string]string{"base_url": base, "timeout": "soon"}, "not a duration"},
		{"retries", map[string]string{"base_url": base, "retries": "-1"}, "at least 0"},
		{"backoff order", map[string]string{"base_url": base, "backoff": "1m", "backoff_max": "1s"}, "backoff <= backoff_max"},
		{"tool mode", map[string]string{"base_url": base, "tool_mode": "xml"}, `tool_mode "xml" is not known (known: native, text)`},
		{"actions", map[string]string{"base_url": base, "actions": "exec,teleport"}, `action "teleport" is not canonical`},
		{"no actions", map[string]string{"base_url": base, "actions": ","}, "no actions"},
		{"prompt file", map[string]string{"base_url": base, "system_prompt_file": "/nonexistent/prompt.txt"}, "system_prompt_file"},
		{"bool", map[string]string{"base_url": base, "logprobs": "maybe"}, `logprobs="maybe"`},
		{"token mode", map[string]string{"base_url": base, "tokens": "telepathy"}, `tokens "telepathy" is not known (known: auto, tito, chat)`},
		{"tito without ids", map[string]string{"base_url": base, "tokens": "tito", "token_ids": "false"}, "tokens=tito keeps the episode's token ids, and token_ids=false asks for none"},
		{"tool parser", map[string]string{"base_url": base, "tool_parser": "mistral"}, `tool_parser "mistral" is not known (known: hermes, server)`},
		{"reasoning parser", map[string]string{"base_url": base, "reasoning_parser": "deepseek"}, `reasoning_parser "deepseek" is not known (known: qwen3, none)`},
		{"parser with chat", map[string]string{"base_url": base, "tokens": "chat", "tool_parser": "hermes"}, "tool_parser applies to token-in-token-out turns only"},
		{"render url with chat", map[string]string{"base_url": base, "tokens": "chat", "render_url": base}, "render_url applies to token-in-token-out turns only"},
		{"render url credentials", map[string]string{"base_url": base, "render_url": "http://u:p@h"}, "render_url carries credentials"},
		{"kwargs not an object", map[string]string{"base_url": base, "chat_template_kwargs": "[true]"}, `chat_template_kwargs="[true]": [true] is not a JSON object`},
		{"kwargs not json", map[string]string{"base_url": base, "chat_template_kwargs": "enable_thinking=false"}, "is not a JSON object"},
		{"server kind", map[string]string{"base_url": base, "server": "tgi"}, `server "tgi" is not known (known: auto, vllm, sglang, other)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseOptions(c.opts)
			require.ErrorIs(t, err, ErrOption)
			require.ErrorContains(t, err, c.want)
		})
	}

	for in, want := range map[string]string{
		"http://127.0.0.1:8000/v1":                   "http://127.0.0.1:8000/v1/chat/completions",
		"http://127.0.0.1:8000/v1/":                  "http://127.0.0.1:8000/v1/chat/completions",
		"https://h/openai/v1/chat/completions":       "https://h/openai/v1/chat/completions",
		"https://h/v1?api-version=2024-06-01":        "https://h/v1/chat/completions?api-version=2024-06-01",
		"http://localhost:30000":                     "http://localhost:30000/chat/completions",
		"https://inference.example.com:443/serve/v1": "https://inference.example.com:443/serve/v1/chat/completions",
	} {
		got, err := parseServerURL(in, "base_url")
		require.NoError(t, err)
		require.Equal(t, want, got.api("/chat/completions"))
	}
}

func TestSystemPromptFile(t *testing.T) {
	path := t.TempDir() + "/prompt.txt"
	require.NoError(t, os.WriteFile(path, []byte("Be brief.\nTools:\n{{tools}}\n"), 0o644))
	c, err := ParseOptions(map[string]string{"base_url": "http://127.0.0.1:1/v1", "system_prompt_file": path, "actions": "done"})
	require.NoError(t, err)
	p, err := New(c)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(p.system, "Be brief.\nTools:\n- done: "))
	require.NotContains(t, p.system, "{{tools}}")
}

func TestObservationText(t *testing.T) {
	step := func(kind runtime.ActionKind, o runtime.Observation) runtime.Step {
		return runtime.Step{Action: runtime.Action{Kind: kind, Cmd: "x", Path: "x"}, Observation: o}
	}
	require.Equal(t, "exit code: 0\n(no output)", aci.ObservationText(step(runtime.ActExec, runtime.Observation{}), 0))
	require.Equal(t, "exit code: -1\n[forkline: the action timed out and was killed]\npartial",
		aci.ObservationText(step(runtime.ActExec, runtime.Observation{ExitCode: -1, TimedOut: true, Error: true, ErrorKind: runtime.ErrTimeout, Output: []byte("partial")}), 0))
	require.Equal(t, "error: not_found\nno such file",
		aci.ObservationText(step(runtime.ActReadFile, runtime.Observation{Error: true, ErrorKind: runtime.ErrNotFound, Output: []byte("no such file")}), 0))
	require.Equal(t, "exit code: 2\nfailed", aci.ObservationText(step(runtime.ActExec, runtime.Observation{ExitCode: 2, Error: true, ErrorKind: runtime.ErrExitStatus, Output: []byte("failed")}), 0))

	big := strings.Repeat("a", 100) + strings.Repeat("é", 200) + strings.Repeat("z", 100)
	got := aci.ObservationText(step(runtime.ActReadFile, runtime.Observation{Output: []byte(big)}), 100)
	require.True(t, strings.HasPrefix(got, strings.Repeat("a", 50)+"\n[... forkline: "))
	require.True(t, strings.HasSuffix(got, "bytes elided from the middle of this output ...]\n"+strings.Repeat("z", 50)))
	require.Contains(t, got, fmt.Sprintf("%d bytes elided", len(big)-100))
	odd := aci.ObservationText(step(runtime.ActReadFile, runtime.Observation{Output: []byte(strings.Repeat("é", 100))}), 50)
	require.True(t, strings.HasPrefix(odd, strings.Repeat("é", 12)+"\n"), "a cut never splits a UTF-8 sequence: %q", odd[:30])
	require.True(t, strings.HasSuffix(odd, "]\n"+strings.Repeat("é", 12)))
}

func TestStatusErrorHint(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{
		"notools": {{Fail: &openaitest.Failure{Status: 400, Body: `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`}, FailTimes: -1}},
	})
	_, err := newPolicy(t, srv, nil).Decide(context.Background(), runtime.History{Instruction: "scenario: notools"})
	require.ErrorContains(t, err, "use tool_mode=text")
	var se *StatusError
	require.True(t, errors.As(err, &se))
}

// A server that cannot be reached at all — nothing listens, no route, a
// name that does not resolve — is unavailable (runtime.ErrUnavailable), the
// run's failure; anything a live server answers, or a connection it breaks,
// is the episode's policy_error and never wraps it.
func TestUnreachableServerIsUnavailable(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{
		"storm": {{Fail: &openaitest.Failure{Status: 503, Body: "busy"}, FailTimes: -1}},
		"400":   {{Fail: &openaitest.Failure{Status: 400, Body: "bad request"}, FailTimes: -1}},
		"slow":  {{Fail: &openaitest.Failure{Status: 200, Delay: 5 * time.Second}, FailTimes: -1}},
	})
	// An address where nothing listens: a port just released.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String() + "/v1"
	require.NoError(t, l.Close())
	// A server that accepts and then drops every connection.
	dropper := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	t.Cleanup(dropper.Close)
	dialing := func(err error) *http.Client {
		return &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, err
		}}}
	}

	cases := []struct {
		name, url, scenario string
		client              *http.Client
		unavailable         bool
	}{
		{"connection refused", closed, "x", nil, true},
		{"name does not resolve", "http://model.example/v1", "x",
			dialing(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "model.example", IsNotFound: true}}), true},
		{"no route to host", "http://10.255.255.1/v1", "x",
			dialing(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}), true},
		{"network unreachable", "http://10.255.255.1/v1", "x",
			dialing(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}), true},
		{"5xx storm", srv.URL, "storm", nil, false},
		{"4xx", srv.URL, "400", nil, false},
		{"no answer in time", srv.URL, "slow", nil, false},
		{"connection dropped", dropper.URL + "/v1", "x", nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.BaseURL, cfg.Retries, cfg.Backoff, cfg.BackoffMax = c.url, 1, time.Millisecond, time.Millisecond
			cfg.Timeout, cfg.HTTPClient = 200*time.Millisecond, c.client
			p, err := New(cfg)
			require.NoError(t, err)
			_, err = p.Decide(context.Background(), runtime.History{Instruction: "scenario: " + c.scenario})
			require.Error(t, err)
			if c.unavailable {
				require.ErrorIs(t, err, runtime.ErrUnavailable)
				require.ErrorIs(t, err, ErrRetriesExhausted, "after its retries")
				require.Contains(t, err.Error(), "cannot be reached")
			} else {
				require.NotErrorIs(t, err, runtime.ErrUnavailable, "%v", err)
			}
		})
	}
}
