package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/agenttest"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/schemas"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func readRun(t *testing.T, dir string) ([]schemas.EpisodeRow, map[string][]schemas.StepRow, map[string]schemas.RewardRow, map[string]schemas.BlobRow) {
	t.Helper()
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	var eps []schemas.EpisodeRow
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		eps = append(eps, e)
	}
	steps := map[string][]schemas.StepRow{}
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		steps[s.EpisodeID] = append(steps[s.EpisodeID], s)
	}
	rewards := map[string]schemas.RewardRow{}
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		rewards[r.EpisodeID] = r
	}
	blobs := map[string]schemas.BlobRow{}
	for b, err := range ds.Blobs() {
		require.NoError(t, err)
		blobs[b.SHA256] = b
	}
	return eps, steps, rewards, blobs
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// twoTasks writes two tasks that each run the fake harness in another mode
// (their env says which).
func twoTasks(t *testing.T, modes ...string) string {
	var b strings.Builder
	for i, m := range modes {
		if i > 0 {
			b.WriteString("---\n")
		}
		fmt.Fprintf(&b, "id: task-%s\ninstruction: Do the %s thing.\nenv: {FAKE_MODE: %s}\nverify: {cmd: 'true', reward: exit}\nlimits: {max_steps: 10}\n", m, m, m)
	}
	p := filepath.Join(t.TempDir(), "tasks.yaml")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

// collectFake runs collect with harness=command running the fake harness.
func collectFake(t *testing.T, sim *vllmsim.Server, tasks string) (string, string, error) {
	t.Helper()
	fake := agenttest.FakeHarness(t)
	log := &lockedBuffer{}
	cfg := collect.Config{
		Tasks: tasks, Out: filepath.Join(t.TempDir(), "run"), Provider: "local", WorkDir: t.TempDir(),
		Replicas: 2, Repeats: 1, Policy: "agent", Capture: capture.DefaultPolicy(),
		PolicyOptions: map[string]string{"harness": "command", "cmd": fake + ` "$FAKE_MODE"`,
			"base_url": sim.URL + "/v1", "model": "Qwen/Qwen3-8B", "max_tokens": "200"},
		Shards: shard.Config{Compression: "none"}, Logger: slog.New(slog.NewTextHandler(log, nil)), Progress: log,
	}
	_, err := collect.Run(context.Background(), cfg)
	return cfg.Out, log.String(), err
}

// runCall is the fake harness's tool, called as Qwen3 writes calls.
var runCall = vllmsim.Reply{Text: "<think>\nok\n</think>\n\n" + agenttest.HermesCall("run", `{"cmd": "ls"}`)}

// TestRewrittenHistoryIsCutAndFlagged: a harness that drops its earlier
// turns for a summary, then changes its system prompt, gives steps flagged
// history_rewritten and system_changed, each holding its whole new
// conversation; the token record is cut before the first (the server's
// ids of the two calls before it, exactly), and the exported conversation
// is the trajectory before it: never glued.
func TestRewrittenHistoryIsCutAndFlagged(t *testing.T) {
	sim := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true,
		Respond: func(vllmsim.Turn) (vllmsim.Reply, error) { return runCall, nil }})
	out, log, err := collectFake(t, sim, twoTasks(t, "rewrite"))
	require.NoError(t, err, log)
	eps, steps, _, blobs := readRun(t, out)
	require.Len(t, eps, 1)
	ep := eps[0]
	require.Equal(t, "done", ep.ExitReason, ep.Detail)
	st := steps[ep.EpisodeID]
	require.Len(t, st, 4)
	require.Nil(t, st[0].HistoryCut)
	require.Nil(t, st[1].HistoryCut)
	require.Equal(t, "history_rewritten", deref(st[2].HistoryCut))
	require.Equal(t, "system_changed", deref(st[3].HistoryCut))
	require.Contains(t, *st[2].HarnessInput, "Summary of the work so far", "a cut step holds the whole new conversation")
	require.True(t, strings.HasPrefix(*st[2].HarnessInput, `[{"role":"system"`))
	require.Contains(t, *st[3].HarnessInput, "You are a careful test harness.")
	require.JSONEq(t, `[{"role":"tool","content":"ok: {\"cmd\": \"ls\"}","tool_call_id":"`+firstCallID(t, st[0])+`"}]`, *st[1].HarnessInput,
		"a step that continues holds only what the harness added: the previous call's result")

	require.True(t, ep.TokenDrift)
	require.Equal(t, "history_rewritten", deref(ep.TokenCut))
	require.EqualValues(t, 2, ep.TokenTurns)
	gens := []vllmsim.Received{}
	for _, r := range sim.Requests() {
		if r.Reply != nil {
			gens = append(gens, r)
		}
	}
	require.Len(t, gens, 4)
	require.Equal(t, gens[0].PromptIDs, ep.PromptIDs)
	rest := gens[1].PromptIDs[len(gens[0].PromptIDs)+len(gens[0].GeneratedIDs):]
	want := append(append(append([]int32{}, gens[0].GeneratedIDs...), rest...), gens[1].GeneratedIDs...)
	require.Equal(t, want, ep.ResponseIDs, "the record holds the two calls before the cut, as the server saw them")
	require.False(t, slices.Equal(gens[2].PromptIDs[:len(gens[0].PromptIDs)], gens[0].PromptIDs), "the rewritten call was rendered afresh")

	e := &model.Episode{Row: ep, Steps: st, Blob: func(h string) ([]byte, error) { return blobs[h].Data, nil }}
	msgs, err := model.Messages(e, model.Options{})
	require.NoError(t, err)
	for _, m := range msgs {
		require.NotContains(t, m.Content, "Summary of the work so far", "the export stops at the cut")
		require.NotContains(t, m.Content, "careful test harness")
	}
	require.Equal(t, []string{"system", "user", "assistant", "tool", "assistant"}, roles(msgs))
	require.JSONEq(t, `[`+string(runTool)+`]`, string(e.Tools()))
}

var runTool = []byte(`{"type":"function","function":{"name":"run","description":"Run a command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}}`)

func roles(msgs []model.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Role
	}
	return out
}

func firstCallID(t *testing.T, s schemas.StepRow) string {
	var calls []struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(*s.ToolCalls), &calls))
	return calls[0].ID
}

// TestSideCallsAreRecordedApart: a call without tools (a title) is
// answered, kept in the side-calls blob, and is no step.
func TestSideCallsAreRecordedApart(t *testing.T) {
	sim := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true, Respond: func(tr vllmsim.Turn) (vllmsim.Reply, error) {
		if !strings.Contains(tr.Prompt, "<tools>") {
			return vllmsim.Reply{Text: "<think>\nt\n</think>\n\nA title"}, nil
		}
		return runCall, nil
	}})
	out, log, err := collectFake(t, sim, twoTasks(t, "title"))
	require.NoError(t, err, log)
	eps, steps, _, blobs := readRun(t, out)
	ep := eps[0]
	require.Equal(t, "done", ep.ExitReason, ep.Detail)
	require.Len(t, steps[ep.EpisodeID], 2, "the title call is no step")
	require.False(t, ep.TokenDrift)
	var rec schemas.AgentRecord
	require.NoError(t, json.Unmarshal([]byte(*ep.Agent), &rec))
	require.Equal(t, 1, rec.SideCalls)
	require.Equal(t, 2, rec.Calls)
	side := blobs[rec.SideCallsSHA256]
	require.Equal(t, schemas.MediaNDJSON, side.Media)
	var call struct {
		Kind  string
		Reply struct{ Content string }
	}
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(side.Data), &call))
	require.Equal(t, "untooled", call.Kind)
	require.Contains(t, call.Reply.Content, "A title")
}

// TestUntranslatableCallIsTheEpisodesPolicyError: a call the gateway
// cannot translate (an image) ends its episode as a policy error saying
// so; the run's other episode goes on.
func TestUntranslatableCallIsTheEpisodesPolicyError(t *testing.T) {
	sim := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true,
		Respond: func(vllmsim.Turn) (vllmsim.Reply, error) { return runCall, nil }})
	out, log, err := collectFake(t, sim, twoTasks(t, "image", "rewrite"))
	require.NoError(t, err, log)
	eps, _, _, _ := readRun(t, out)
	require.Len(t, eps, 2)
	for _, ep := range eps {
		switch ep.TaskID {
		case "task-image":
			require.Equal(t, "policy_error", ep.ExitReason)
			require.Contains(t, ep.Detail, "could not translate")
			require.Contains(t, ep.Detail, "image_url")
			var rec schemas.AgentRecord
			require.NoError(t, json.Unmarshal([]byte(*ep.Agent), &rec))
			require.Len(t, rec.Refused, 1)
		case "task-rewrite":
			require.Equal(t, "done", ep.ExitReason, ep.Detail)
		}
	}
}

// TestModelServerGoneMidRunIsTheRunsFailure: a model server that stops
// answering after the harness's first call ends the run as unavailable;
// the episode is not kept, so a resume runs it whole.
func TestModelServerGoneMidRunIsTheRunsFailure(t *testing.T) {
	sim := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true,
		Respond: func(vllmsim.Turn) (vllmsim.Reply, error) { return runCall, nil }})
	target, err := url.Parse(sim.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewUnstartedServer(nil)
	front.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxy.ServeHTTP(w, r)
		if r.URL.Path == "/v1/completions" || r.URL.Path == "/v1/chat/completions" {
			go front.Close() // gone after the first generation
		}
	})
	front.Start()
	defer front.Close()
	fake := agenttest.FakeHarness(t)
	log := &lockedBuffer{}
	cfg := collect.Config{
		Tasks: twoTasks(t, "rewrite"), Out: filepath.Join(t.TempDir(), "run"), Provider: "local", WorkDir: t.TempDir(),
		Replicas: 1, Repeats: 1, Policy: "agent", Capture: capture.DefaultPolicy(),
		PolicyOptions: map[string]string{"harness": "command", "cmd": fake + ` "$FAKE_MODE"`,
			"base_url": front.URL + "/v1", "model": "Qwen/Qwen3-8B", "max_tokens": "200", "retries": "0"},
		Logger: slog.New(slog.NewTextHandler(log, nil)), Progress: log,
	}
	_, err = collect.Run(context.Background(), cfg)
	require.ErrorIs(t, err, collect.ErrUnavailable, log.String())
	require.Contains(t, log.String(), "of task-rewrite not kept: policy_error", "the episode ran, and lost its server")
	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		t.Fatalf("episode %s (%s) was kept", e.EpisodeID, e.ExitReason)
	}
}

// TestConcurrentEpisodesKeepTheirCalls: 16 episodes of one real harness
// (Codex) run at once against one gateway; every call reaches its own
// episode: each episode's answer names the directory its own pwd printed,
// and the server answered exactly two calls per episode.
func TestConcurrentEpisodesKeepTheirCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 16 agent harnesses")
	}
	const n = 16
	h := "codex"
	agenttest.Require(t, h)
	sim := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true, Respond: agenttest.WhereAmI(h)})
	log := &lockedBuffer{}
	_, file, _, _ := goruntime.Caller(0)
	cfg := collect.Config{
		Tasks: filepath.Join(filepath.Dir(file), "..", "..", "examples", "tasks", "fix-sum.yaml"), Out: filepath.Join(t.TempDir(), "run"),
		Provider: "local", WorkDir: t.TempDir(), Replicas: n, Repeats: n, Policy: "agent", Capture: capture.DefaultPolicy(),
		PolicyOptions: map[string]string{"harness": h, "base_url": sim.URL + "/v1", "model": "Qwen/Qwen3-8B", "max_tokens": "200"},
		Logger:        slog.New(slog.NewTextHandler(log, nil)), Progress: log,
	}
	// The verifier fails (nothing fixed sum.sh): every episode ends done
	// with reward 0, which is no scaffold loss.
	_, err := collect.Run(context.Background(), cfg)
	require.NoError(t, err, log.String())
	eps, steps, _, _ := readRun(t, cfg.Out)
	require.Len(t, eps, n)
	cwd := regexp.MustCompile(`<cwd>([^<]+)</cwd>`)
	seen := map[string]string{}
	for _, e := range eps {
		require.Equal(t, "done", e.ExitReason, e.Detail)
		st := steps[e.EpisodeID]
		require.Len(t, st, 2, "episode %s", e.EpisodeID)
		m := cwd.FindStringSubmatch(*st[0].HarnessInput)
		require.NotNil(t, m, "step 0's input names the harness's working directory")
		dir := m[1]
		require.Contains(t, st[0].Output, dir, "the pwd this episode ran printed its own directory")
		require.Equal(t, "workspace: "+dir, strings.TrimSpace(*st[1].ModelText), "the answer to this episode's own prompt")
		require.NotContains(t, seen, dir, "two episodes in one directory")
		seen[dir] = e.EpisodeID
	}
	calls := 0
	for _, r := range sim.Requests() {
		if r.Reply != nil && strings.Contains(r.Prompt, "<tools>") {
			calls++
		}
	}
	require.Equal(t, 2*n, calls, "two model calls per episode, none lost or doubled")
}
