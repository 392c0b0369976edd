package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/ui"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/policy/openai/openaitest"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"

	_ "github.com/forkline/forkline/providers/all"
)

// The API key of the end-to-end runs. Nothing a run writes may contain it.
const apiKey = "sk-forkline-e2e-3f9c1d7a5b2e8f4c6a0d"

// canary is model text that must reach the dataset, so the key search below
// is shown to see into the Parquet files it searches.
const canary = "canary-5e1f: I think the answer is 42."

func call(id, name, args string) openaitest.ToolCall {
	return openaitest.ToolCall{ID: id, Name: name, Args: args}
}

// scenarios is one episode per entry: its turns as the server answers them.
// Token ids are scripted so that each prompt extends the previous prompt and
// response (an append-only chat template), except in "drift".
func scenarios() map[string][]openaitest.Turn {
	return map[string][]openaitest.Turn{
		"three-turn": {
			{ToolCalls: []openaitest.ToolCall{call("call_a", "exec", `{"cmd":"echo hi"}`)},
				PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{10, 11}, Logprobs: []float64{-0.1, -0.2}},
			// Text dialect in native mode: the parser falls back to the content.
			{Content: "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\", \"content\": \"x\"}}\n</tool_call>",
				PromptIDs: []int32{1, 2, 3, 10, 11, 50, 51, 52}, ResponseIDs: []int32{12}, Logprobs: []float64{-0.3}},
			{ToolCalls: []openaitest.ToolCall{call("call_c", "done", `{"answer":"ok"}`)},
				PromptIDs: []int32{1, 2, 3, 10, 11, 50, 51, 52, 12, 60}, ResponseIDs: []int32{13, 14}, Logprobs: []float64{-0.4, -0.5}},
		},
		"drift": {
			{ToolCalls: []openaitest.ToolCall{call("d1", "exec", `{"cmd":"true"}`)},
				PromptIDs: []int32{1, 2}, ResponseIDs: []int32{10}, Logprobs: []float64{-1}},
			// The template re-rendered the first answer as 99: no prefix.
			{ToolCalls: []openaitest.ToolCall{call("d2", "done", `{}`)},
				PromptIDs: []int32{1, 2, 99, 7}, ResponseIDs: []int32{11}, Logprobs: []float64{-2}},
		},
		"ratelimit": {
			{ToolCalls: []openaitest.ToolCall{call("r1", "done", `{}`)}, PromptIDs: []int32{5}, ResponseIDs: []int32{6}, Logprobs: []float64{-0.5},
				Fail: &openaitest.Failure{Status: 429, Body: "rate limited", RetryAfter: "0"}, FailTimes: 1},
		},
		"storm": {
			{Fail: &openaitest.Failure{Status: 500, Body: "engine overloaded", EchoAuth: true}, FailTimes: -1},
		},
		"truncated": {
			{Content: `<tool_call>{"name": "exec", "arguments": {"cmd": "find / -name`, Finish: "length",
				PromptIDs: []int32{1, 2}, ResponseIDs: []int32{20, 21, 22}, Logprobs: []float64{-1, -1, -1}},
		},
		"prose": {
			{Content: canary, PromptIDs: []int32{1}, ResponseIDs: []int32{30}, Logprobs: []float64{-0.25}},
		},
		"unparsed": {
			{ToolCalls: []openaitest.ToolCall{call("u1", "rm_rf", `{"path":"/"}`)}, PromptIDs: []int32{3}, ResponseIDs: []int32{4}, Logprobs: []float64{-0.7}},
		},
		"sglang": {
			{ToolCalls: []openaitest.ToolCall{call("s1", "exec", `{"cmd":"echo sg"}`)}, Shape: openaitest.SGLang,
				PromptIDs: []int32{7, 8}, ResponseIDs: []int32{9}, Logprobs: []float64{-0.9}},
			{ToolCalls: []openaitest.ToolCall{call("s2", "done", `{}`)}, Shape: openaitest.SGLang,
				PromptIDs: []int32{7, 8, 9, 40, 41}, ResponseIDs: []int32{42}, Logprobs: []float64{-0.8}},
		},
	}
}

// writeTasks writes one task per scenario; the instruction names it.
func writeTasks(t *testing.T, names []string) string {
	dir := t.TempDir()
	for _, n := range names {
		spec := fmt.Sprintf("id: %s\ninstruction: |\n  scenario: %s\n  Do what the scenario says.\nlimits:\n  max_steps: 6\n  action_timeout: 20s\n", n, n)
		require.NoError(t, os.WriteFile(filepath.Join(dir, n+".yaml"), []byte(spec), 0o644))
	}
	return dir
}

// lockedBuffer is a log sink shared by concurrent episodes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b.Bytes()...)
}

func runCollect(t *testing.T, srv *openaitest.Server, names []string, tokens string) (string, *collect.Summary, []byte) {
	t.Helper()
	t.Setenv("FORKLINE_E2E_KEY", apiKey)
	log := &lockedBuffer{}
	pc := capture.DefaultPolicy()
	pc.Tokens = capture.Tokens(tokens)
	cfg := collect.Config{
		Tasks: writeTasks(t, names), Out: filepath.Join(t.TempDir(), "run"), Provider: "local", WorkDir: t.TempDir(),
		Replicas: 4, Repeats: 1, Policy: "openai", Capture: pc,
		PolicyOptions: map[string]string{"base_url": srv.URL, "model": "openaitest-model", "api_key_env": "FORKLINE_E2E_KEY",
			"retries": "2", "backoff": "1ms", "backoff_max": "5ms", "timeout": "10s"},
		// Uncompressed, so that searching the files' bytes means something.
		Shards: shard.Config{Compression: "none"},
		Logger: slog.New(slog.NewTextHandler(log, nil)), Progress: log,
	}
	sum, err := collect.Run(context.Background(), cfg)
	require.NoError(t, err)
	return cfg.Out, sum, log.Bytes()
}

func readRun(t *testing.T, dir string) (map[string]schemas.EpisodeRow, map[string][]schemas.StepRow) {
	t.Helper()
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	eps := map[string]schemas.EpisodeRow{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		eps[e.TaskID] = e
	}
	steps := map[string][]schemas.StepRow{}
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		steps[s.TaskID] = append(steps[s.TaskID], s)
	}
	return eps, steps
}

func names(m map[string][]openaitest.Turn) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return out
}

func TestCollectWithOpenAIPolicy(t *testing.T) {
	sc := scenarios()
	srv := openaitest.New(t, sc)
	srv.Key = apiKey
	out, sum, logged := runCollect(t, srv, names(sc), "keep")
	eps, steps := readRun(t, out)
	require.Len(t, eps, len(sc))

	// Exit reasons match the scripted turns and failures.
	wantExit := map[string]runtime.ExitReason{
		"three-turn": runtime.ExitDone, "drift": runtime.ExitDone, "ratelimit": runtime.ExitDone, "sglang": runtime.ExitDone,
		"storm": runtime.ExitPolicyError, "truncated": runtime.ExitOutputTruncated, "prose": runtime.ExitNoAction,
		"unparsed": runtime.ExitUnparsedAction,
	}
	for name, want := range wantExit {
		require.Equal(t, string(want), eps[name].ExitReason, "%s: %s", name, eps[name].Detail)
		require.Len(t, steps[name], int(eps[name].Steps))
	}
	rep := sum.Report()
	require.Equal(t, 4, rep.ByExit["done"])

	// Invariants of every token record, per episode and per step.
	for name, e := range eps {
		require.Equal(t, len(e.ResponseIDs), len(e.ResponseMask), name)
		if len(e.ResponseIDs) > 0 {
			require.Equal(t, len(e.ResponseIDs), len(e.ResponseLogprobs), name)
		}
		for _, s := range steps[name] {
			require.Equal(t, len(s.ResponseIDs), len(s.ResponseMask), name)
			require.Equal(t, len(s.ResponseIDs), len(s.ResponseLogprobs), name)
			require.NotEmpty(t, s.PromptIDs, "%s step %d", name, s.StepIndex)
		}
	}

	// The 3-turn episode's record is the concatenation, token for token:
	// first prompt; then response 0 (mask 1), the environment's tokens
	// between turns (mask 0, logprob 0), response 1, and so on.
	e := eps["three-turn"]
	require.False(t, e.TokenDrift)
	require.EqualValues(t, 3, e.TokenTurns)
	require.Equal(t, []int32{1, 2, 3}, e.PromptIDs)
	require.Equal(t, []int32{10, 11, 50, 51, 52, 12, 60, 13, 14}, e.ResponseIDs)
	require.Equal(t, []int32{1, 1, 0, 0, 0, 1, 0, 1, 1}, e.ResponseMask)
	require.Equal(t, []float32{-0.1, -0.2, 0, 0, 0, -0.3, 0, -0.4, -0.5}, e.ResponseLogprobs)
	require.Equal(t, "ok", e.Answer)
	st := steps["three-turn"]
	require.Equal(t, `{"kind":"exec","cmd":"echo hi"}`, st[0].ActionJSON)
	require.Equal(t, "hi\n", st[0].Output)
	require.Equal(t, `{"kind":"write_file","path":"a.txt","content":"x"}`, st[1].ActionJSON)
	require.Equal(t, "tool_calls", *st[0].FinishReason)
	require.Equal(t, "openaitest-model", *st[0].Model)
	require.Equal(t, []int32{12}, st[1].ResponseIDs)
	require.Equal(t, []int32{1}, st[1].ResponseMask)
	require.Equal(t, []float32{-0.3}, st[1].ResponseLogprobs)

	// What the model was sent: the exec result as a tool message answering
	// its call, the text-dialect call's result as a user message.
	reqs := srv.Requests("three-turn")
	require.Len(t, reqs, 3)
	m := reqs[1].Messages
	require.Equal(t, "tool", m[3].Role)
	require.Equal(t, "call_a", m[3].ToolCallID)
	require.Equal(t, "exit code: 0\nhi\n", *m[3].Content)
	require.Equal(t, "user", reqs[2].Messages[5].Role)
	for _, r := range reqs {
		require.Equal(t, true, r.Body["return_token_ids"])
		require.Equal(t, true, r.Body["logprobs"])
	}

	// A prefix break is flagged, not masked: the record keeps the turns
	// before it, and the steps keep every turn's own ids.
	d := eps["drift"]
	require.True(t, d.TokenDrift)
	require.EqualValues(t, 1, d.TokenTurns)
	require.Equal(t, []int32{1, 2}, d.PromptIDs)
	require.Equal(t, []int32{10}, d.ResponseIDs)
	require.Equal(t, []int32{1}, d.ResponseMask)
	require.Equal(t, []float32{-1}, d.ResponseLogprobs)
	require.Equal(t, []int32{1, 2, 99, 7}, steps["drift"][1].PromptIDs)

	// SGLang's per-choice prompt ids assemble the same way.
	s := eps["sglang"]
	require.False(t, s.TokenDrift)
	require.Equal(t, []int32{7, 8}, s.PromptIDs)
	require.Equal(t, []int32{9, 40, 41, 42}, s.ResponseIDs)
	require.Equal(t, []int32{1, 0, 0, 1}, s.ResponseMask)
	require.Equal(t, []float32{-0.9, 0, 0, -0.8}, s.ResponseLogprobs)

	// 429 then success; a 500 storm exhausts 1 + 2 retries.
	require.Len(t, srv.Requests("ratelimit"), 2)
	require.Len(t, srv.Requests("storm"), 3)
	require.Contains(t, eps["storm"].Detail, "retries exhausted after 3 attempts")
	require.Contains(t, eps["storm"].Detail, "500")
	require.Contains(t, eps["storm"].Detail, "[redacted]", "the server echoed the key back; it was redacted")
	require.Empty(t, steps["storm"])
	require.Contains(t, string(logged), "429 Too Many Requests")

	// The final turn of a stopped episode is kept.
	tr := steps["truncated"]
	require.Len(t, tr, 1)
	require.Equal(t, "length", *tr[0].FinishReason)
	require.Equal(t, "null", tr[0].ActionJSON)
	require.Equal(t, []int32{20, 21, 22}, eps["truncated"].ResponseIDs)
	require.Equal(t, canary, *steps["prose"][0].ModelText)
	require.Contains(t, eps["unparsed"].Detail, `unknown tool "rm_rf"`)

	// The manifest records the options, with the key's variable, not the key.
	ds, err := shard.Open(out)
	require.NoError(t, err)
	var pol struct {
		Name    string            `json:"name"`
		Options map[string]string `json:"options"`
	}
	require.NoError(t, json.Unmarshal(ds.Manifest().Policy, &pol))
	require.Equal(t, "openai", pol.Name)
	require.Equal(t, "FORKLINE_E2E_KEY", pol.Options["api_key_env"])
	vr, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, vr.OK(), "%+v", vr)

	// The key is nowhere: not in any file of the dataset (Parquet bytes
	// included), not in the log, not in the report, not in the decoded rows.
	sawCanary := false
	require.NoError(t, filepath.WalkDir(out, func(p string, de fs.DirEntry, err error) error {
		require.NoError(t, err)
		if de.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NotContains(t, string(b), apiKey, "the API key leaked into %s", p)
		require.NotContains(t, string(b), apiKey[3:], "part of the API key leaked into %s", p)
		sawCanary = sawCanary || bytes.Contains(b, []byte(canary))
		return nil
	}))
	require.True(t, sawCanary, "the search must see into the Parquet files: the model's text is there in plain bytes")
	require.NotContains(t, string(logged), apiKey)
	var report bytes.Buffer
	ui.WriteCollect(&report, rep, out)
	repJSON, _ := json.Marshal(rep)
	require.NotContains(t, report.String()+string(repJSON), apiKey)
	rows, _ := json.Marshal([]any{eps, steps})
	require.NotContains(t, string(rows), apiKey)
}

// With -tokens drop, neither steps nor episodes keep token columns, and the
// episodes are otherwise the same.
func TestCollectDropsTokens(t *testing.T) {
	sc := scenarios()
	srv := openaitest.New(t, sc)
	out, _, _ := runCollect(t, srv, []string{"three-turn"}, "drop")
	eps, steps := readRun(t, out)
	e := eps["three-turn"]
	require.Equal(t, string(runtime.ExitDone), e.ExitReason)
	require.Empty(t, e.PromptIDs)
	require.Empty(t, e.ResponseIDs)
	require.Empty(t, e.ResponseMask)
	require.Empty(t, e.ResponseLogprobs)
	require.Zero(t, e.TokenTurns)
	require.Len(t, steps["three-turn"], 3)
	for _, s := range steps["three-turn"] {
		require.Empty(t, s.PromptIDs)
		require.Empty(t, s.ResponseIDs)
		require.Empty(t, s.ResponseLogprobs)
	}
}

// TestExportedConversationMatchesWhatTheModelSaw: the manifest records the
// effective conversation settings, so a chat export of an openai run starts
// with the system prompt the model was really sent.
func TestExportedConversationMatchesWhatTheModelSaw(t *testing.T) {
	sc := scenarios()
	one := map[string][]openaitest.Turn{"three-turn": sc["three-turn"]}
	srv := openaitest.New(t, one)
	srv.Key = apiKey
	out, _, _ := runCollect(t, srv, names(one), "keep")

	want, err := openai.DefaultConfig().Conversation()
	require.NoError(t, err)
	require.Contains(t, want.SystemPrompt, "sandboxed computer")

	dir := filepath.Join(t.TempDir(), "chat")
	_, err = export.Run(context.Background(), export.Options{Inputs: []string{out}, Target: "chat-jsonl", Out: dir})
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(dir, "train.jsonl"))
	require.NoError(t, err)
	var line struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(bytes.SplitN(data, []byte("\n"), 2)[0], &line))
	require.NotEmpty(t, line.Messages)
	require.Equal(t, "system", line.Messages[0].Role)
	require.Equal(t, want.SystemPrompt, line.Messages[0].Content)
}
