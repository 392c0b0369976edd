package openai

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/internal/oracle"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/policy/openai/openaitest"
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
		if v == "" {
			delete(all, k) // "" leaves the option out
		}
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

// Choosing token in, token out is a note, not a warning: with an info
// channel (collect's info records) the choice goes there, and the warnings
// channel stays for what warns. It was a WARN record of every run.
func TestTheTokenPathChoiceIsANote(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true,
		Respond: vllmsim.Replies(vllmsim.Reply{Text: think + qwenDone})})
	cfg, err := ParseOptions(map[string]string{"base_url": s.URL + "/v1", "actions": "exec,done", "max_tokens": "200"})
	require.NoError(t, err)
	warn, info := &lines{}, &lines{}
	cfg.Logf, cfg.Infof = warn.logf, info.logf
	p, err := New(cfg)
	require.NoError(t, err)
	_, err = p.Decide(context.Background(), runtime.History{Instruction: "List the files in the working directory."})
	require.NoError(t, err)
	require.Empty(t, warn.l, "nothing to warn of")
	require.Len(t, info.l, 2)
	require.Contains(t, info.l[0], "tokens=auto: token in, token out")
}

// Without max_tokens, a token-in-token-out turn on a plain vLLM asks
// /v1/completions for what the prompt leaves of the context (max_model_len,
// which /v1/models and /tokenize report, minus the prompt), since vLLM
// generates 16 tokens when max_tokens is absent or null; with max_tokens,
// that cap, bounded by the same. Before, the policy sent null and every
// reply longer than 16 tokens was cut (output_truncated at step 0).
func TestTITOAsksForTheRestOfTheContext(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true, MaxModelLen: 4096,
		Respond: vllmsim.Replies(vllmsim.Reply{Text: think + qwenCall}, vllmsim.Reply{Text: think + qwenDone},
			vllmsim.Reply{Text: think + qwenDone})})
	p, _ := simPolicy(t, s, map[string]string{"max_tokens": ""})
	ds := simEpisode(t, p, "a.txt\nb.txt\n")
	require.Len(t, ds, 2, "no reply was cut")
	require.Equal(t, runtime.ActDone, ds[1].Action.Kind)
	for _, g := range generations(s) {
		var body struct {
			MaxTokens *int `json:"max_tokens"`
		}
		require.NoError(t, json.Unmarshal(g.Body, &body))
		require.NotNil(t, body.MaxTokens, "a number, never null")
		require.Equal(t, 4096-len(g.PromptIDs), *body.MaxTokens)
	}

	// A cap larger than what is left is bounded by it.
	p, _ = simPolicy(t, s, map[string]string{"max_tokens": "100000"})
	d, err := p.Decide(context.Background(), runtime.History{Instruction: "List the files in the working directory."})
	require.NoError(t, err)
	require.Equal(t, runtime.ActDone, d.Action.Kind)
	gens := generations(s)
	var body struct {
		MaxTokens int `json:"max_tokens"`
	}
	require.NoError(t, json.Unmarshal(gens[len(gens)-1].Body, &body))
	require.Equal(t, 4096-len(gens[len(gens)-1].PromptIDs), body.MaxTokens)
}

// TestTITOOverScaleOutRoutes: a vLLM started with --enable-scale-out
// renders with its render route and generates with /inference/v1/generate;
// the text for the client-side parsers comes from /detokenize, or, with
// tool_parser=server, the server's own parsers read the ids (derender).
func TestTITOOverScaleOutRoutes(t *testing.T) {
	for _, tc := range []struct {
		parser    string
		endpoints []string
	}{
		{"hermes", []string{"/v1/chat/completions/render", "/inference/v1/generate", "/detokenize"}},
		{"server", []string{"/v1/chat/completions/render", "/inference/v1/generate", "/v1/chat/completions/derender"}},
	} {
		t.Run(tc.parser, func(t *testing.T) {
			// (vLLM's qwen3 parser calls a reply with no </think> all
			// reasoning when thinking is on: both replies think.)
			s := vllmsim.Start(t, vllmsim.Config{EnableScaleOut: true, ReasoningParser: true, ToolParser: true,
				Respond: vllmsim.Replies(vllmsim.Reply{Text: think + qwenCall}, vllmsim.Reply{Text: think + qwenDone})})
			p, logs := simPolicy(t, s, map[string]string{"tokens": "tito", "tool_parser": tc.parser})
			ds := simEpisode(t, p, "a.txt\n")
			require.Len(t, ds, 2)
			require.Equal(t, runtime.Action{Kind: runtime.ActExec, Cmd: "ls -la"}, ds[0].Action)
			require.Equal(t, "\nI should list the files.\n", ds[0].Model.Reasoning)
			require.Equal(t, runtime.ActDone, ds[1].Action.Kind)
			gens := generations(s)
			require.Len(t, gens, 2)
			for i, g := range gens {
				require.Equal(t, "/inference/v1/generate", g.Path)
				require.Equal(t, g.PromptIDs, ds[i].Model.PromptIDs)
				require.Equal(t, g.GeneratedIDs, ds[i].Model.ResponseIDs)
				require.Equal(t, tc.endpoints, ds[i].Model.Provenance.Endpoints)
				require.Len(t, ds[i].Model.Logprobs, len(g.GeneratedIDs))
			}
			require.True(t, slices.Equal(gens[1].PromptIDs[:len(gens[0].PromptIDs)+len(gens[0].GeneratedIDs)],
				append(slices.Clone(gens[0].PromptIDs), gens[0].GeneratedIDs...)))
			require.Empty(t, logs.l, "tokens=tito chosen, scale-out routes served: nothing to say")
		})
	}
}

// TestTITOWithSGLang: an SGLang server (it names itself in /v1/models)
// generates with its native /generate from input_ids; the template is
// rendered by a separate renderer (render_url), which never gets the API
// key of the model server.
func TestTITOWithSGLang(t *testing.T) {
	engine := vllmsim.Start(t, vllmsim.Config{OwnedBy: "sglang", ToolParser: true, APIKey: "sk-engine",
		Respond: vllmsim.Replies(vllmsim.Reply{Text: qwenCall}, vllmsim.Reply{Text: qwenDone})})
	renderer := vllmsim.Start(t, vllmsim.Config{ToolParser: true})
	t.Setenv("ENGINE_KEY", "sk-engine")
	p, _ := simPolicy(t, engine, map[string]string{"tokens": "tito", "render_url": renderer.URL, "api_key_env": "ENGINE_KEY", "seed": "5"})
	ds := simEpisode(t, p, "a.txt\n")
	require.Len(t, ds, 2)
	gens := generations(engine)
	require.Len(t, gens, 2)
	for i, g := range gens {
		require.Equal(t, "/generate", g.Path)
		require.Equal(t, g.PromptIDs, ds[i].Model.PromptIDs)
		require.Equal(t, g.GeneratedIDs, ds[i].Model.ResponseIDs)
		require.Equal(t, []string{"/tokenize", "/generate"}, ds[i].Model.Provenance.Endpoints)
		var body struct {
			SamplingParams map[string]any `json:"sampling_params"`
		}
		require.NoError(t, json.Unmarshal(g.Body, &body))
		require.EqualValues(t, 200, body.SamplingParams["max_new_tokens"])
		require.NotNil(t, body.SamplingParams["sampling_seed"], "the seed goes as SGLang names it")
		require.NotContains(t, body.SamplingParams, "seed", "SGLang refuses fields its SamplingParams does not declare")
	}
	for _, r := range renderer.Requests() {
		require.Empty(t, r.Header.Get("Authorization"), "the renderer is another host: no key for %s", r.Path)
	}
	var tokenizes int
	for _, r := range engine.Requests() {
		if r.Path == "/v1/models" {
			require.Equal(t, "Bearer sk-engine", r.Header.Get("Authorization"))
		}
		if r.Path == "/tokenize" {
			tokenizes++
		}
	}
	require.Zero(t, tokenizes, "rendering goes to render_url")
}

// TestTITORefusedWhenTheServerCannotRender: tokens=tito against a server
// that renders no template for clients stops the run (ErrUnavailable) with
// what it saw, rather than recording chat turns as tito ones; auto falls
// back to chat and says so once; tool_parser=server needs the derender
// route.
func TestTITORefusedWhenTheServerCannotRender(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{"x": {{ToolCalls: []openaitest.ToolCall{call("c", "done", `{}`)}}}})
	p := newPolicy(t, srv, map[string]string{"tokens": "tito"})
	_, err := p.Decide(context.Background(), runtime.History{Instruction: "scenario: x"})
	require.ErrorIs(t, err, runtime.ErrUnavailable)
	require.ErrorContains(t, err, "tokens=tito needs a server that renders the chat template")
	require.ErrorContains(t, err, "POST /tokenize answered 404")
	require.Empty(t, srv.Requests("x"), "no chat request was made in its place")

	pa := newPolicy(t, srv, map[string]string{"tokens": "auto"})
	l := &lines{}
	pa.client.cfg.Logf = l.logf
	d, err := pa.Decide(context.Background(), runtime.History{Instruction: "scenario: x"})
	require.NoError(t, err)
	require.Equal(t, "chat", d.Model.Provenance.Path)
	require.Len(t, l.l, 1)
	require.Contains(t, l.l[0], "tokens=auto: chat mode")

	s := vllmsim.Start(t, vllmsim.Config{ToolParser: true})
	ps, _ := simPolicy(t, s, map[string]string{"tokens": "tito", "tool_parser": "server"})
	_, err = ps.Decide(context.Background(), runtime.History{Instruction: "go"})
	require.ErrorIs(t, err, runtime.ErrUnavailable)
	require.ErrorContains(t, err, "tool_parser=server needs the server's derender route")
}

// TestProbeOncePerRun: the policies of one Source share one probe.
func TestProbeOncePerRun(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{ToolParser: true, Respond: func(vllmsim.Turn) (vllmsim.Reply, error) {
		return vllmsim.Reply{Text: qwenDone}, nil
	}})
	src, err := Open(policy.Options{Params: map[string]string{"base_url": s.URL + "/v1", "actions": "exec,done", "max_tokens": "50"}})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 {
		pol, err := src.NewPolicy(policy.Episode{ID: "e", Instruction: "go"})
		require.NoError(t, err)
		wg.Go(func() {
			d, err := pol.Decide(context.Background(), runtime.History{Instruction: "go"})
			if err != nil || d.Action.Kind != runtime.ActDone {
				t.Errorf("decide: %v %+v", err, d)
			}
		})
	}
	wg.Wait()
	models := 0
	for _, r := range s.Requests() {
		if r.Path == "/v1/models" {
			models++
		}
	}
	require.Equal(t, 1, models)
}

// TestChatModeFixes: against vLLM with Qwen3's template, chat mode sends the
// tools in aci's key order (vLLM's own preprocessing leaves them as sent),
// chat_template_kwargs reach the template, nothing vLLM would ignore is
// sent, the reasoning goes back in the field the server used (here the
// pre-0.11 reasoning_content) with null content where only whitespace was
// left — so turn 2's prompt extends turn 1's ids — and with
// send_reasoning=false it does not.
func TestChatModeFixes(t *testing.T) {
	for _, send := range []bool{true, false} {
		t.Run(fmt.Sprint("send_reasoning=", send), func(t *testing.T) {
			s := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true, ReasoningField: "reasoning_content",
				Respond: vllmsim.Replies(vllmsim.Reply{Text: think + qwenCall}, vllmsim.Reply{Text: think + qwenDone})})
			p, _ := simPolicy(t, s, map[string]string{"tokens": "chat", "chat_template_kwargs": `{"truncate_history_thinking": false}`,
				"send_reasoning": fmt.Sprint(send)})
			ds := simEpisode(t, p, "a.txt\n")
			require.Len(t, ds, 2)
			gens := generations(s)
			require.Len(t, gens, 2)
			want, err := aci.ToolsJSON([]runtime.ActionKind{runtime.ActExec, runtime.ActDone})
			require.NoError(t, err)
			for _, g := range gens {
				require.Equal(t, string(want), string(g.Tools), "the tools reach the template as sent, in aci's order")
				require.Equal(t, false, g.TemplateKwargs["truncate_history_thinking"])
				require.Empty(t, g.Warnings)
			}
			var body struct {
				Messages []map[string]any `json:"messages"`
			}
			require.NoError(t, json.Unmarshal(gens[1].Body, &body))
			reply := body.Messages[2]
			require.Nil(t, reply["content"], "only whitespace was left before the call")
			extends := slices.Equal(gens[1].PromptIDs[:len(gens[0].PromptIDs)+len(gens[0].GeneratedIDs)],
				append(slices.Clone(gens[0].PromptIDs), gens[0].GeneratedIDs...))
			if send {
				require.Equal(t, "\nI should list the files.\n", reply["reasoning_content"])
				require.NotContains(t, reply, "reasoning")
				require.True(t, extends, "with the reasoning back, the history re-renders as generated")
			} else {
				require.NotContains(t, reply, "reasoning_content")
				require.False(t, extends, "Qwen3's template drops the turn's thinking")
			}
			require.Equal(t, runtime.Provenance{Path: "chat", Endpoints: []string{"/v1/chat/completions"}}, ds[0].Model.Provenance)
		})
	}
}

// TestChatTemplateHashFromProps: a server that reports its chat template
// (llama.cpp's GET /props) has its sha256 recorded on every turn.
func TestChatTemplateHashFromProps(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{ToolParser: true, ServeProps: true, Respond: vllmsim.Replies(vllmsim.Reply{Text: qwenDone}, vllmsim.Reply{Text: qwenDone})})
	src, err := oracle.TemplateSource(context.Background(), "qwen3")
	require.NoError(t, err)
	for _, mode := range []string{"chat", "tito"} {
		p, _ := simPolicy(t, s, map[string]string{"tokens": mode})
		d, err := p.Decide(context.Background(), runtime.History{Instruction: "go"})
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%x", sha256.Sum256([]byte(src))), d.Model.Provenance.TemplateSHA256, mode)
	}
}

// TestCutToolCallIsNotExecuted: vLLM reports finish_reason tool_calls for a
// call cut at max_tokens before </tool_call>; chat mode stops the episode
// as output_truncated instead of running it, and so does tito on its
// finish_reason length.
func TestCutToolCallIsNotExecuted(t *testing.T) {
	for _, mode := range []string{"chat", "tito"} {
		s := vllmsim.Start(t, vllmsim.Config{ToolParser: true, Respond: vllmsim.Replies(vllmsim.Reply{Text: qwenCall})})
		// Cut right after the call's JSON, before </tool_call>: vLLM's
		// hermes parser still finds the call there.
		ids, err := oracle.Tokenize(context.Background(), "qwen3", qwenCall)
		require.NoError(t, err)
		n := len(ids)
		for ; n > 0; n-- {
			text, err := oracle.Decode(context.Background(), "qwen3", ids[:n])
			require.NoError(t, err)
			if !strings.Contains(text, "</tool_call>") && strings.HasSuffix(strings.TrimSpace(text), "}}") {
				break
			}
		}
		p, _ := simPolicy(t, s, map[string]string{"tokens": mode, "max_tokens": fmt.Sprint(n)})
		d, err := p.Decide(context.Background(), runtime.History{Instruction: "go"})
		require.NoError(t, err)
		require.Equal(t, runtime.ExitOutputTruncated, d.Stop, mode)
		require.Empty(t, d.Action.Kind)
		// The cut reply is recorded as generated — the call the parser
		// read from it, never run — so that the message exports write it
		// as the last assistant turn, as the token exports keep its ids.
		require.Len(t, d.Model.ToolCalls, 1, "%s: the cut call is recorded", mode)
		require.Equal(t, "exec", d.Model.ToolCalls[0].Name, mode)
		require.Empty(t, d.Model.Actions, "%s: and not as an action", mode)
		if mode == "chat" {
			g := generations(s)[0]
			require.Contains(t, string(g.Response), `"finish_reason":"tool_calls"`, "the server reports the cut call as a call")
		}
	}
}

// TestClientParsersReadAsVLLMDoes: on the texts a model writes, the
// client-side parsers of tito turns find the same content, reasoning and
// calls as vLLM's qwen3 reasoning parser and hermes tool parser do on a chat
// reply (here, the simulator's, built from vLLM's source) — except the one
// documented difference: a reply with no think tags at all is content to
// the client, reasoning to vLLM's parser when thinking is on.
func TestClientParsersReadAsVLLMDoes(t *testing.T) {
	texts := []string{
		think + qwenCall,
		"<think>\n\n</think>\n\n" + qwenCall,
		think + "I will list the files.\n" + qwenCall,
		think + "Let me look.\n" + qwenCall + "\n" + qwenDone,
		think + "<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls\"\n</tool_call>", // broken JSON: no calls, all content
		think + "<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls\"}}",             // open at the end: still a call
		think + "The answer is 42.",
		"<think>\ncut while thinking",
	}
	for _, text := range texts {
		s := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true, Respond: vllmsim.Replies(vllmsim.Reply{Text: text})})
		p, _ := simPolicy(t, s, map[string]string{"tokens": "chat"})
		d, err := p.Decide(context.Background(), runtime.History{Instruction: "go"})
		require.NoError(t, err)
		g := generations(s)[0]
		var resp chatResponse
		require.NoError(t, json.Unmarshal(g.Response, &resp))
		server := resp.Choices[0].Message

		reasoning, content := splitThink(text)
		var calls []toolCall
		if content != nil {
			if c, before := parseHermes(*content); c != nil {
				calls, content = c, before
			}
		}
		require.Equal(t, server.Reasoning, reasoning, "%q: reasoning", text)
		require.Equal(t, server.Content, content, "%q: content", text)
		require.Len(t, calls, len(server.ToolCalls), "%q: calls", text)
		for i := range calls {
			require.Equal(t, server.ToolCalls[i].Function.Name, calls[i].Function.Name)
			var a, b any
			var sa, sb string
			require.NoError(t, json.Unmarshal(server.ToolCalls[i].Function.Arguments, &sa))
			require.NoError(t, json.Unmarshal(calls[i].Function.Arguments, &sb))
			require.NoError(t, json.Unmarshal([]byte(sa), &a))
			require.NoError(t, json.Unmarshal([]byte(sb), &b))
			require.Equal(t, a, b, "%q: call %d arguments", text, i)
		}
		_ = d
	}
	// The difference: no think tags.
	r, c := splitThink(qwenCall)
	require.Nil(t, r)
	require.Equal(t, qwenCall, *c)
}
