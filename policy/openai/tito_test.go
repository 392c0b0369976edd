package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/oracle"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

const (
	qwenCall = "<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls -la\"}}\n</tool_call>"
	qwenDone = "<tool_call>\n{\"name\": \"done\", \"arguments\": {\"answer\": \"a.txt b.txt\"}}\n</tool_call>"
	think    = "<think>\nI should list the files.\n</think>\n\n"
)

// simPolicy is a policy against a simulator with tiny backoffs; its log
// lines are collected.
func simPolicy(t *testing.T, s *vllmsim.Server, opts map[string]string) (*Policy, *lines) {
	t.Helper()
	all := map[string]string{"base_url": s.URL + "/v1", "backoff": "1ms", "backoff_max": "4ms", "retries": "1",
		"actions": "exec,done", "max_tokens": "200"}
	for k, v := range opts {
		all[k] = v
	}
	cfg, err := ParseOptions(all)
	require.NoError(t, err)
	l := &lines{}
	cfg.Logf = l.logf
	p, err := New(cfg)
	require.NoError(t, err)
	return p, l
}

// simEpisode drives p like runtime.Rollout does, every action observed as
// output, and returns the decisions.
func simEpisode(t *testing.T, p *Policy, output string) []runtime.Decision {
	t.Helper()
	h := runtime.History{Instruction: "List the files in the working directory."}
	var out []runtime.Decision
	for range 6 {
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

// generations are the generation requests the server answered, in order.
func generations(s *vllmsim.Server) []vllmsim.Received {
	var out []vllmsim.Received
	for _, r := range s.Requests() {
		if r.Reply != nil && r.Status == 200 {
			out = append(out, r)
		}
	}
	return out
}

// TestTITOOverTokenizeAndCompletions: with a vLLM that serves /tokenize and
// /v1/completions (and not the scale-out routes), tokens=auto goes token in,
// token out, says so once, and every turn's prompt is exactly the previous
// prompt, the ids generated and the new turn; a turn's event records the
// ids the server saw and generated, logprobs aligned, and its provenance.
func TestTITOOverTokenizeAndCompletions(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true,
		Respond: vllmsim.Replies(vllmsim.Reply{Text: think + qwenCall}, vllmsim.Reply{Text: think + qwenDone})})
	p, logs := simPolicy(t, s, nil)
	ds := simEpisode(t, p, "a.txt\nb.txt\n")
	require.Len(t, ds, 2)
	require.Equal(t, runtime.Action{Kind: runtime.ActExec, Cmd: "ls -la"}, ds[0].Action)
	require.Equal(t, runtime.ActDone, ds[1].Action.Kind)
	require.Equal(t, "\nI should list the files.\n", ds[0].Model.Reasoning)
	require.Equal(t, "\n\n", ds[0].Model.RawText, "the content before the call, as vLLM's parsers report it")

	gens := generations(s)
	require.Len(t, gens, 2)
	for i, g := range gens {
		require.Equal(t, "/v1/completions", g.Path)
		ev := ds[i].Model
		require.Equal(t, g.PromptIDs, ev.PromptIDs, "turn %d: the prompt the server saw", i)
		require.Equal(t, g.GeneratedIDs, ev.ResponseIDs, "turn %d: the ids it generated", i)
		require.Len(t, ev.Logprobs, len(ev.ResponseIDs))
		for j, id := range ev.ResponseIDs {
			require.Equal(t, float32(vllmsim.Logprob(j, id)), ev.Logprobs[j])
		}
		require.Equal(t, runtime.Provenance{Path: "tito", Endpoints: []string{"/tokenize", "/v1/completions"}}, ev.Provenance)
		require.Equal(t, "Qwen/Qwen3-8B", ev.Model)
		require.Empty(t, g.Warnings, "nothing vLLM would ignore")
	}
	require.True(t, slices.Equal(gens[1].PromptIDs[:len(gens[0].PromptIDs)+len(gens[0].GeneratedIDs)],
		append(slices.Clone(gens[0].PromptIDs), gens[0].GeneratedIDs...)), "turn 2 extends turn 1 exactly")
	require.Len(t, logs.l, 2)
	require.Contains(t, logs.l[0], "tokens=auto: token in, token out, rendering new turns with /tokenize and generating with /v1/completions")
	require.Contains(t, logs.l[1], "the scale-out routes are not served (POST /v1/chat/completions/render answered 404)")
}

var (
	_ = fmt.Sprintf
	_ = json.Marshal
	_ = strings.Contains
	_ = oracle.Require
	_ = policy.TokensTITO
	_ sync.Mutex
)
