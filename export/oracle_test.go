package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/export/loadertest"
	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/oracle"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/schemas"
)

// The oracle: every conversation export, loaded the way its consumer loads
// it (export/loadertest: datasets, verl through docs/verl_sft_dataset.py,
// TRL), rendered with the chat templates models really ship
// (internal/oracle: Python Jinja2 set up as transformers sets it up). What
// must hold, per template: the render succeeds; the assistant targets hold
// the model's tool calls as it made them — every parallel call, the done
// call — with the arguments encoded once; no key renders as null; and every
// target renders the same text, which is the chat-jsonl export's. The
// rendered assistant targets of one episode per template are goldens in
// testdata/render/.

// oracleRun writes the runs the oracle renders: "native" (function tools:
// episodes o-good with reasoning, a sentence before a call, two parallel
// calls and a done call with an answer after text; o-bad, the same task and
// golden state, call-only turns, a lower reward) and "text" (tool calls
// written in the text, observations as user messages).
func oracleRun(t *testing.T) (native, text string) {
	t.Helper()
	dir := t.TempDir()
	calls := func(cs ...string) *string {
		s := "[" + strings.Join(cs, ",") + "]"
		return &s
	}
	call := func(id, name, args string) string {
		b, _ := json.Marshal(map[string]string{"id": id, "name": name, "arguments": args})
		return string(b)
	}
	step := func(id string, i int, kind, actionJSON, output string) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, StepIndex: int32(i), TaskID: "shell", ActionKind: kind, ActionJSON: actionJSON, Output: output, ExitCode: 0}
	}
	good := "o-good"
	gs := []schemas.StepRow{
		step(good, 0, "exec", `{"kind":"exec","cmd":"ls -1"}`, "a.txt\nb.txt\n"),
		step(good, 1, "read_file", `{"kind":"read_file","path":"a.txt"}`, "hello <world> & more\n"),
		step(good, 2, "done", `{"kind":"done","answer":"2 files"}`, ""),
	}
	gs[0].Reasoning, gs[0].ToolCalls = ptr("list the directory first"), calls(call("chatcmpl-tool-a1", "exec", `{"cmd": "ls -1"}`))
	gs[1].ModelText = ptr("Let me look at both.")
	gs[1].ToolCalls = calls(call("chatcmpl-tool-a2", "read_file", `{"path": "a.txt"}`), call("chatcmpl-tool-a3", "exec", `{"cmd": "wc -l a.txt b.txt"}`))
	gs[2].ModelText, gs[2].Reasoning = ptr("There are 2 files."), ptr("two lines in the listing")
	gs[2].ToolCalls = calls(call("chatcmpl-tool-a4", "done", `{"answer": "2 files"}`))
	bad := "o-bad"
	bs := []schemas.StepRow{
		step(bad, 0, "exec", `{"kind":"exec","cmd":"ls -1"}`, "a.txt\nb.txt\n"),
		step(bad, 1, "exec", `{"kind":"exec","cmd":"cat b.txt","timeout_ms":5000}`, "bye\n"),
		step(bad, 2, "done", `{"kind":"done","answer":"3 files"}`, ""),
	}
	bs[0].ToolCalls = calls(call("chatcmpl-tool-b1", "exec", `{"cmd": "ls -1"}`))
	bs[1].ToolCalls = calls(call("chatcmpl-tool-b2", "exec", `{"cmd": "cat b.txt", "timeout_ms": 5000}`))
	bs[2].ToolCalls = calls(call("chatcmpl-tool-b3", "done", `{"answer": "3 files"}`))
	ep := func(id string, steps []schemas.StepRow, reward float64) shard.EpisodeBatch {
		return shard.EpisodeBatch{
			Episode: schemas.EpisodeRow{EpisodeID: id, TaskID: "shell", TaskHash: "h", GoldenID: "g1", ExitReason: "done", Steps: int32(len(steps))},
			Steps:   steps,
			Rewards: []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: &reward, Source: "verify"}},
		}
	}
	policy := map[string]any{"name": "openai", "options": map[string]string{}, "conversation": map[string]any{
		"system_prompt": "You are an agent in a sandbox. Call exactly one tool per reply.", "tool_mode": "native",
		"actions": []string{"exec", "read_file", "done"}, "observation_cap": 16384}}
	native = writeRun(t, dir, runSpec{runID: "native", policy: policy, episodes: []shard.EpisodeBatch{ep(good, gs, 1), ep(bad, bs, 0)}})

	tx := "o-text"
	ts := []schemas.StepRow{
		step(tx, 0, "exec", `{"kind":"exec","cmd":"ls -1"}`, "a.txt\nb.txt\n"),
		step(tx, 1, "done", `{"kind":"done","answer":"2 files"}`, ""),
	}
	ts[0].ModelText = ptr("<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls -1\"}}\n</tool_call>")
	ts[1].ModelText = ptr("Two files.\n<tool_call>\n{\"name\": \"done\", \"arguments\": {\"answer\": \"2 files\"}}\n</tool_call>")
	textPolicy := map[string]any{"name": "openai", "options": map[string]string{}, "conversation": map[string]any{
		"system_prompt": "You are an agent. To call a tool, reply with a <tool_call> block.", "tool_mode": "text", "observation_cap": 16384}}
	text = writeRun(t, dir, runSpec{runID: "text", policy: textPolicy, episodes: []shard.EpisodeBatch{ep(tx, ts, 1)}})
	return native, text
}

// loaded is one export, loaded as its consumer loads it: per episode id,
// what the chat template is given.
type loaded map[string]loadertest.Conversation

// loadConversations exports in to target with opts and loads the result.
func loadConversations(t *testing.T, in, target string, opts Options) loaded {
	t.Helper()
	out := filepath.Join(t.TempDir(), target)
	opts.Inputs, opts.Target, opts.Out = []string{in}, target, out
	exportOK(t, opts)
	got := loaded{}
	switch target {
	case "chat-jsonl":
		lines, err := loadertest.LoadJSONL(filepath.Join(out, "train.jsonl"))
		require.NoError(t, err)
		ids := episodeIDs(t, in)
		for i, l := range lines {
			c, err := loadertest.SFTConversation(dropWeights(t, l["messages"]), optional(l["tools"]))
			require.NoError(t, err)
			got[ids[i]] = c
		}
	case "hf", "hf-disk":
		var splits map[string][]loadertest.Row
		var err error
		if target == "hf" {
			splits, err = loadertest.LoadHF(out)
		} else {
			splits, err = loadertest.LoadFromDisk(out)
		}
		require.NoError(t, err)
		for _, r := range splits["train"] {
			c, err := loadertest.SFTConversation(r["messages"], r["tools"])
			require.NoError(t, err)
			got[r["episode_id"].(string)] = c
		}
	case "verl-sft":
		config := map[string]any{}
		if opts.ToolArgs == model.ArgsString {
			config["forkline_tool_args"] = "string"
		}
		convs, err := loadertest.VerlSFT(t.Context(), filepath.Join(out, "train.parquet"), config)
		require.NoError(t, err)
		for i, id := range episodeIDs(t, in) {
			got[id] = convs[i]
		}
	default:
		t.Fatalf("no loader for %s", target)
	}
	return got
}

func optional(v json.RawMessage) any {
	if v == nil {
		return nil
	}
	return v
}

// dropWeights removes chat-jsonl's per-turn weight (OpenAI's key, which
// templates ignore) so the messages compare with the other targets'.
func dropWeights(t *testing.T, raw json.RawMessage) json.RawMessage {
	var msgs []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &msgs))
	var b bytes.Buffer
	b.WriteByte('[')
	var items []json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &items))
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(withoutKey(t, it, "weight"))
	}
	b.WriteByte(']')
	return b.Bytes()
}

// withoutKey re-writes a JSON object without one key, the others in order.
func withoutKey(t *testing.T, obj json.RawMessage, key string) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(obj))
	_, err := dec.Token()
	require.NoError(t, err)
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for dec.More() {
		k, err := dec.Token()
		require.NoError(t, err)
		var v json.RawMessage
		require.NoError(t, dec.Decode(&v))
		if k == key {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(v)
		n++
	}
	b.WriteByte('}')
	return b.Bytes()
}

// episodeIDs lists a run's episode ids in the order exports write them.
func episodeIDs(t *testing.T, in string) []string {
	ds, err := shard.Open(in)
	require.NoError(t, err)
	var ids []string
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		ids = append(ids, e.EpisodeID)
	}
	return ids
}

// templateCase is one template with the export options its family needs
// and what it is known to do with each conversation.
type templateCase struct {
	name string
	opts Options
	// args is how the template writes a call's arguments: "tojson" (the
	// object through json.dumps), "text" (the string as given), or "" when
	// it renders no function calls at all.
	args string
	// fails names conversations the template refuses, with the error's text.
	fails map[string]string
	// drops names conversations whose calls the template leaves out of the
	// render, and why (asserted, and documented in docs/exports.md).
	drops map[string]string
	// golden is the conversation whose assistant targets are its golden.
	golden string
}

var templateCases = []templateCase{
	{name: "qwen3", args: "tojson", golden: "o-good"},
	{name: "qwen2_5", args: "tojson", golden: "o-good"},
	{name: "llama3_1_tools", args: "tojson", golden: "o-bad",
		fails: map[string]string{"o-good": "This model only supports single tool-calls at once!"}},
	// The template renders a message's calls only when its content is
	// none: -call-content split gives the calls after text a message of
	// their own (TestDeepSeekV3DefaultsDropTheCalls shows the loss
	// without it).
	{name: "deepseek_v3", args: "text", golden: "o-good",
		opts: Options{ToolArgs: model.ArgsString, CallContent: model.ContentSplit}},
	{name: "llama3_1", golden: "o-text",
		drops: map[string]string{"o-good": "the template knows no tools", "o-bad": "the template knows no tools"}},
	{name: "gemma3", golden: "o-text",
		fails: map[string]string{"o-good": "Conversation roles must alternate", "o-bad": "Conversation roles must alternate"}},
}

// expectedCalls are the calls the model made, per conversation, with the
// arguments as it wrote them.
var expectedCalls = map[string][][2]string{
	"o-good": {{"exec", `{"cmd": "ls -1"}`}, {"read_file", `{"path": "a.txt"}`}, {"exec", `{"cmd": "wc -l a.txt b.txt"}`}, {"done", `{"answer": "2 files"}`}},
	"o-bad":  {{"exec", `{"cmd": "ls -1"}`}, {"exec", `{"cmd": "cat b.txt", "timeout_ms": 5000}`}, {"done", `{"answer": "3 files"}`}},
}

func TestConversationExportsUnderRealTemplates(t *testing.T) {
	oracle.Require(t)
	testenv.Need(t, testenv.Templates, loadertest.PythonAvailable)
	native, text := oracleRun(t)
	for _, tc := range templateCases {
		t.Run(tc.name, func(t *testing.T) {
			// Every target's conversations, loaded by its consumer.
			byTarget := map[string]loaded{}
			for _, target := range []string{"chat-jsonl", "hf", "hf-disk", "verl-sft"} {
				got := loadConversations(t, native, target, tc.opts)
				for id, c := range loadConversations(t, text, target, tc.opts) {
					got[id] = c
				}
				byTarget[target] = got
			}
			ref := byTarget["chat-jsonl"]
			for _, id := range []string{"o-good", "o-bad", "o-text"} {
				conv := ref[id]
				req := oracle.RenderRequest{Messages: conv.Messages, Tools: rawOrNil(conv.Tools)}
				rendered, err := oracle.Render(t.Context(), tc.name, req)
				if want, ok := tc.fails[id]; ok {
					require.Error(t, err, "%s: %s is known to refuse this conversation", tc.name, id)
					assert.True(t, oracle.IsTemplateError(err), "%v", err)
					assert.Contains(t, err.Error(), want)
					continue
				}
				require.NoError(t, err, "%s renders %s", tc.name, id)

				// Every target gives the template the same conversation.
				for target, got := range byTarget {
					r, err := oracle.Render(t.Context(), tc.name, oracle.RenderRequest{Messages: got[id].Messages, Tools: rawOrNil(got[id].Tools)})
					require.NoError(t, err, "%s: %s from %s", tc.name, id, target)
					assert.Equal(t, rendered, r, "%s: %s renders differently from %s than from chat-jsonl", tc.name, id, target)
				}

				assert.NotContains(t, rendered, "null", "%s: %s: finding 2/3, no key renders as null", tc.name, id)
				if id == "o-text" {
					assert.Contains(t, rendered, `{"name": "done", "arguments": {"answer": "2 files"}}`, "finding 1: the done call as the model wrote it")
					continue
				}
				// Every call the model made appears in the rendered text,
				// where the template renders calls at all: rendering
				// without an error is not enough.
				for _, c := range expectedCalls[id] {
					wantArgs := pyJSON(t, c[1])
					if tc.args == "text" {
						wantArgs = c[1]
					}
					doubled := pyJSON(t, mustJSONString(c[1]))
					if _, dropped := tc.drops[id]; dropped || tc.args == "" {
						continue
					}
					assert.Contains(t, rendered, wantArgs, "%s: %s: the %s call's arguments, encoded once", tc.name, id, c[0])
					assert.NotContains(t, rendered, doubled, "finding 4: arguments encoded twice")
					assert.Contains(t, rendered, c[0])
				}
				if why, dropped := tc.drops[id]; dropped {
					assert.NotContains(t, rendered, `"answer"`, "%s: %s: %s", tc.name, id, why)
				}
			}
			golden(t, filepath.Join("render", tc.name+".golden"), assistantTargets(t, tc.name, ref[tc.golden]))
		})
	}
}

// DeepSeek-V3's template drops every call of an export with the default
// options (object arguments, content "" beside the calls: it renders calls
// only for a message whose content is none, and concatenates arguments as
// text), and with -call-content null the calls written after text; with
// -tool-args string -call-content split every call is in the render. This
// is what docs/exports.md's table says the template needs.
func TestDeepSeekV3DefaultsDropTheCalls(t *testing.T) {
	oracle.Require(t)
	if err := loadertest.PythonAvailable(); err != nil {
		testenv.Missing(t, testenv.Templates, err.Error())
	}
	native, _ := oracleRun(t)
	render := func(opts Options) string {
		conv := loadConversations(t, native, "chat-jsonl", opts)["o-good"]
		r, err := oracle.Render(t.Context(), "deepseek_v3", oracle.RenderRequest{Messages: conv.Messages, Tools: rawOrNil(conv.Tools)})
		require.NoError(t, err)
		return r
	}
	present := func(r string) (n int) {
		for _, c := range expectedCalls["o-good"] {
			if strings.Contains(r, c[1]) {
				n++
			}
		}
		return n
	}
	all := len(expectedCalls["o-good"])
	assert.Zero(t, present(render(Options{})), "the defaults: every call is dropped")
	null := present(render(Options{ToolArgs: model.ArgsString, CallContent: model.ContentNull}))
	assert.Less(t, null, all, "-call-content null: the calls after text are dropped")
	assert.Equal(t, all, present(render(Options{ToolArgs: model.ArgsString, CallContent: model.ContentSplit})), "-call-content split: every call")
}

// The same conversation before the fixes: what the audit found, shown to
// fail under the templates (so the assertions above can fail).
func TestTheAssertionsCatchTheAuditsFindings(t *testing.T) {
	oracle.Require(t)
	bad := []struct {
		name, template, messages, tools, msg string
	}{
		{"done lost (F1)", "qwen3", `[{"role":"user","content":"go"},{"role":"assistant","content":"2 files"}]`, ``, `"done"`},
		{"union nulls (F2)", "qwen3", `[{"role":"user","content":"go"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"exec","arguments":{"cmd":"ls","path":null}}}]}]`, ``, "null"},
		{"double-encoded (F4)", "qwen2_5", `[{"role":"user","content":"go"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"exec","arguments":"{\"cmd\": \"ls\"}"}}]}]`, ``, `"{\"cmd\": \"ls\"}"`},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			req := oracle.RenderRequest{Messages: json.RawMessage(b.messages)}
			if b.tools != "" {
				req.Tools = json.RawMessage(b.tools)
			}
			r, err := oracle.Render(t.Context(), b.template, req)
			require.NoError(t, err)
			switch b.name {
			case "done lost (F1)":
				assert.NotContains(t, r, b.msg, "the call is gone: the check would fail")
			default:
				assert.Contains(t, r, b.msg, "the defect shows in the render: the check would fail")
			}
		})
	}
	// Every key on every message (F3) crashes Llama 3.1's template.
	_, err := oracle.Render(t.Context(), "llama3_1_tools", oracle.RenderRequest{Messages: json.RawMessage(
		`[{"role":"user","content":"go","tool_calls":null,"tool_call_id":null},{"role":"assistant","content":"ok","reasoning_content":null,"tool_calls":null,"tool_call_id":null}]`),
		Tools: json.RawMessage(`[]`)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NoneType")
}

func rawOrNil(r json.RawMessage) any {
	if r == nil {
		return nil
	}
	return r
}

func pyJSON(t *testing.T, text string) string {
	s, err := oracle.PyJSON(t.Context(), text)
	require.NoError(t, err)
	return s
}

func mustJSONString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// assistantTargets renders each assistant message's training target as
// trainers compute it: the render of the conversation through that message
// minus the render of what came before it with the generation prompt (what
// TRL's assistant masks and verl's per-turn loss cover).
func assistantTargets(t *testing.T, template string, conv loadertest.Conversation) string {
	var msgs []json.RawMessage
	require.NoError(t, json.Unmarshal(conv.Messages, &msgs))
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: one episode exported with -to chat-jsonl, loaded as TRL loads it and rendered with the model's template\n\n", template)
	whole, err := oracle.Render(t.Context(), template, oracle.RenderRequest{Messages: conv.Messages, Tools: rawOrNil(conv.Tools)})
	require.NoError(t, err)
	b.WriteString("# The whole conversation: one SFT training sequence\n\n")
	b.WriteString(whole)
	b.WriteString("\n\n# Each assistant message as the model generated it: rendered after the conversation before it and the generation prompt\n")
	for k, m := range msgs {
		var role struct{ Role string }
		require.NoError(t, json.Unmarshal(m, &role))
		if role.Role != "assistant" {
			continue
		}
		prefix, err := oracle.Render(t.Context(), template, oracle.RenderRequest{Messages: rawArray(msgs[:k]), Tools: rawOrNil(conv.Tools), AddGenerationPrompt: true})
		require.NoError(t, err)
		full, err := oracle.Render(t.Context(), template, oracle.RenderRequest{Messages: rawArray(msgs[:k+1]), Tools: rawOrNil(conv.Tools)})
		require.NoError(t, err)
		fmt.Fprintf(&b, "\n## message %d\n", k)
		target, ok := strings.CutPrefix(full, prefix)
		if !ok {
			b.WriteString("(the template renders the history differently once this message follows)\n")
			target = full[commonPrefix(full, prefix):]
		}
		b.WriteString(target)
		if !strings.HasSuffix(target, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func rawArray(items []json.RawMessage) json.RawMessage {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = string(it)
	}
	return json.RawMessage("[" + strings.Join(parts, ",") + "]")
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// dpo on a group whose rewards differ writes the pair, and TRL's
// DPOTrainer (trl/trainer/dpo_trainer.py tokenize_fn, TRL 1.x) trains it as
// meant under the real templates: it renders the prompt with the
// generation prompt and prompt+chosen, prompt+rejected whole, with the
// row's tools, and trains on what follows the prompt. That must be a
// prefix, and what follows it the model's message at the divergence — its
// calls with the arguments encoded once, no tool result (TRL gives every
// completion token to the loss).
func TestDPOPairsUnderTheTemplate(t *testing.T) {
	oracle.Require(t)
	native, _ := oracleRun(t)
	out := filepath.Join(t.TempDir(), "dpo")
	rep := exportOK(t, Options{Inputs: []string{native}, Target: "dpo", Out: out})
	assert.Equal(t, map[string]int64{"train": 1}, rep.Written)
	assert.Equal(t, "pairs", rep.Unit)
	lines, err := loadertest.LoadJSONL(filepath.Join(out, "train.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 1)
	l := lines[0]
	var ids struct {
		Chosen   string `json:"chosen_episode_id"`
		Rejected string `json:"rejected_episode_id"`
	}
	b, _ := json.Marshal(l)
	require.NoError(t, json.Unmarshal(b, &ids))
	assert.Equal(t, "o-good", ids.Chosen)
	assert.Equal(t, "o-bad", ids.Rejected)
	var prompt []map[string]any
	require.NoError(t, json.Unmarshal(l["prompt"], &prompt))
	require.Len(t, prompt, 4, "system, user, the shared first call and its result")
	want := map[string][]string{
		"chosen":   {`{"name": "read_file", "arguments": {"path": "a.txt"}}`, `{"name": "exec", "arguments": {"cmd": "wc -l a.txt b.txt"}}`},
		"rejected": {`{"name": "exec", "arguments": {"cmd": "cat b.txt", "timeout_ms": 5000}}`},
	}
	for _, template := range []string{"qwen3", "qwen2_5"} {
		promptText, err := oracle.Render(t.Context(), template, oracle.RenderRequest{Messages: l["prompt"], Tools: rawOrNil(l["tools"]), AddGenerationPrompt: true})
		require.NoError(t, err)
		for _, side := range []string{"chosen", "rejected"} {
			whole, err := oracle.Render(t.Context(), template, oracle.RenderRequest{Messages: rawConcat(t, l["prompt"], l[side]), Tools: rawOrNil(l["tools"])})
			require.NoError(t, err)
			completion, ok := strings.CutPrefix(whole, promptText)
			require.True(t, ok, "%s %s: TRL's prompt render is a prefix of prompt+%s", template, side, side)
			for _, call := range want[side] {
				assert.Contains(t, completion, call, "%s %s: the model's calls, arguments encoded once", template, side)
			}
			assert.NotContains(t, completion, "tool_response", "%s %s: no tool result in the trained completion", template, side)
			assert.NotContains(t, completion, "null", template)
		}
	}
}

func rawConcat(t *testing.T, a, b json.RawMessage) json.RawMessage {
	var x, y []json.RawMessage
	require.NoError(t, json.Unmarshal(a, &x))
	require.NoError(t, json.Unmarshal(b, &y))
	return rawArray(append(x, y...))
}

// The loader checks, on every directory target: each export loads the way
// its consumer loads it (split resolution, recorded sizes, features against
// the files' Arrow types, no empty split; verl's RLHFDataset columns and
// the documented agent loop; verl's MultiTurnSFTDataset through the
// documented dataset class).
func TestConsumersLoadEveryExport(t *testing.T) {
	testenv.Need(t, testenv.Templates, loadertest.PythonAvailable)
	f := newFixture(t)
	for _, target := range append(slices.Clone(dirTargets), "hf/step", "hf-disk/step", "verl-agent/turn", "sft-tokens/turn") {
		t.Run(strings.ReplaceAll(target, "/", "-"), func(t *testing.T) {
			to, rows, _ := strings.Cut(target, "/")
			out := filepath.Join(t.TempDir(), "out")
			o := Options{Inputs: []string{f.runA, f.runB}, Target: to, Out: out, Split: split(t, "train=0.5,validation=0.4,test=0.1"), Rows: rows}
			if to == "verl-agent" {
				o.Where = []Where{where(t, "has_logprobs=true")}
			}
			rep := exportOK(t, o)
			n := 0
			switch to {
			case "hf", "sft-tokens":
				splits, err := loadertest.LoadHF(out)
				require.NoError(t, err)
				for s, rs := range splits {
					n += len(rs)
					if to == "hf" && rows == "" {
						assert.Equal(t, rep.Written[s], int64(len(rs)), s)
					}
					if to != "sft-tokens" {
						continue
					}
					// TRL builds labels from assistant_masks: one per token,
					// and some of them trained.
					for _, r := range rs {
						labels, err := loadertest.TRLLabels(r, false)
						require.NoError(t, err)
						assert.Len(t, labels, len(r["input_ids"].([]any)), "a mask as long as the ids")
						assert.NotEqual(t, slices.Repeat([]int64{loadertest.IgnoreIndex}, len(labels)), labels, "a row with nothing to train")
					}
				}
			case "hf-disk":
				splits, err := loadertest.LoadFromDisk(out)
				require.NoError(t, err)
				for s, rs := range splits {
					n += len(rs)
					if rows == "" {
						assert.Equal(t, rep.Written[s], int64(len(rs)), s)
					}
				}
			case "chat-jsonl", "dpo":
				for _, name := range files(t, out) {
					lines, err := loadertest.LoadJSONL(filepath.Join(out, name))
					require.NoError(t, err)
					n += len(lines)
				}
			case "verl-sft":
				for _, name := range files(t, out) {
					convs, err := loadertest.VerlSFT(t.Context(), filepath.Join(out, name), nil)
					require.NoError(t, err)
					for _, c := range convs {
						var msgs []map[string]any
						require.NoError(t, json.Unmarshal(c.Messages, &msgs))
						for _, m := range msgs {
							for k, v := range m {
								assert.True(t, v != nil || k == "content", "message key %s is None", k)
							}
						}
					}
					n += len(convs)
				}
			case "verl-agent":
				for _, name := range files(t, out) {
					rows, err := loadertest.LoadParquetFile(filepath.Join(out, name))
					require.NoError(t, err)
					var kwargs []map[string]any
					for _, r := range rows {
						kw, err := loadertest.RLHFRow(r)
						require.NoError(t, err)
						kwargs = append(kwargs, kw)
					}
					// A short rollout: the loop left-truncates the prompt and
					// cuts the response, as verl's own loops do.
					outs, err := loadertest.VerlAgentReplay(t.Context(), kwargs, 3, 4)
					require.NoError(t, err)
					for i, o := range outs {
						var prompt, resp, mask []int
						require.NoError(t, json.Unmarshal(o["prompt_ids"], &prompt))
						require.NoError(t, json.Unmarshal(o["response_ids"], &resp))
						require.NoError(t, json.Unmarshal(o["response_mask"], &mask))
						want := kwargs[i]["prompt_ids"].([]any)
						assert.Len(t, prompt, min(3, len(want)))
						assert.EqualValues(t, want[len(want)-len(prompt)], prompt[0], "left-truncated: the end is kept")
						assert.LessOrEqual(t, len(resp), 4)
						assert.Len(t, mask, len(resp))
						assert.NotEqual(t, "null", string(o["reward_score"]))
					}
					n += len(outs)
				}
			}
			assert.Positive(t, n)
		})
	}
}

// The loader checks can fail: an empty split, split sizes that do not
// match, and a features/type mismatch are what datasets refuses.
func TestLoadersRefuseWhatConsumersRefuse(t *testing.T) {
	f := newFixture(t)
	out := filepath.Join(t.TempDir(), "out")
	exportOK(t, Options{Inputs: []string{f.runB}, Target: "hf", Out: out})
	readme := filepath.Join(out, "README.md")
	card, err := os.ReadFile(readme)
	require.NoError(t, err)
	edit := func(old, new string) {
		t.Helper()
		require.Contains(t, string(card), old)
		require.NoError(t, os.Chmod(readme, 0o644))
		require.NoError(t, os.WriteFile(readme, []byte(strings.Replace(string(card), old, new, 1)), 0o644))
	}
	edit("    num_examples: 4\n", "    num_examples: 5\n")
	_, err = loadertest.LoadHF(out)
	assert.ErrorContains(t, err, "NonMatchingSplitsSizesError")
	edit("  - split: train\n    path: data/train-*\n", "  - split: train\n    path: data/train-*\n  - split: test\n    path: data/test-*\n")
	_, err = loadertest.LoadHF(out)
	assert.ErrorContains(t, err, "Unable to find 'data/test-*'")
	edit("  - name: messages\n    list: json\n", "  - name: messages\n    list: string\n")
	_, err = loadertest.LoadHF(out)
	assert.ErrorContains(t, err, "do not match the file's Arrow types")
}
