package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/export/loadertest"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/oracle"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/internal/testenv"
)

// End to end against a server that renders like vLLM with Qwen3's real
// template and tokenizer: collect with -policy openai, export, and compare
// what a trainer renders from the export with what the server rendered for
// the model — the prompt ids it returned, decoded by the real tokenizer.

const countTask = `id: count
instruction: Write the number of files in this directory to out.txt, then call done.
files:
  a.txt: "a\n"
  b.txt: "b\n"
verify:
  cmd: test "$(cat out.txt)" = 2
  reward: exit
limits: {max_steps: 6}
`

// call is a Qwen3/hermes tool call as the model writes it.
func call(name, args string) string {
	return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>"
}

// collectAgainst runs one collect of task against srv and returns the run.
func collectAgainst(t *testing.T, srv *vllmsim.Server, task string, repeats int, policyOpts ...string) string {
	t.Helper()
	tasks := filepath.Join(t.TempDir(), "task.yaml")
	require.NoError(t, os.WriteFile(tasks, []byte(task), 0o644))
	out := filepath.Join(t.TempDir(), "run")
	var code int
	var extra []string
	for _, kv := range policyOpts {
		extra = append(extra, "-policy-opt", kv)
	}
	printed := captureOutput(t, func() {
		code = collectInProcess(append([]string{"-tasks", tasks, "-out", out, "-workdir", t.TempDir(), "-replicas", "1",
			"-repeats", fmt.Sprint(repeats), "-policy", "openai", "-base-url", srv.URL + "/v1", "-model", srv.Config().Model,
			// Chat mode: these tests are about exports of what a chat
			// server rendered (tokens=auto picks tito against vLLM).
			"-policy-opt", "tokens=chat", "-quiet"}, extra...))
	})
	require.Equal(t, cli.ExitOK, code, "%s", printed)
	return out
}

// turns are the server's chat completions, in order.
func turns(srv *vllmsim.Server) []vllmsim.Received {
	var out []vllmsim.Received
	for _, r := range srv.Requests() {
		if r.Path == "/v1/chat/completions" {
			out = append(out, r)
		}
	}
	return out
}

// exportedConversation exports run to target and loads its one episode's
// conversation as the target's consumer does.
func exportedConversation(t *testing.T, run, target string) loadertest.Conversation {
	t.Helper()
	out := filepath.Join(t.TempDir(), target)
	r := exportArgs(t, t.Context(), "-in", run, "-to", target, "-out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	switch target {
	case "chat-jsonl":
		lines, err := loadertest.LoadJSONL(filepath.Join(out, "train.jsonl"))
		require.NoError(t, err)
		require.Len(t, lines, 1)
		c, err := loadertest.SFTConversation(lines[0]["messages"], lines[0]["tools"])
		require.NoError(t, err)
		return c
	case "hf":
		splits, err := loadertest.LoadHF(out)
		require.NoError(t, err)
		require.Len(t, splits["train"], 1)
		c, err := loadertest.SFTConversation(splits["train"][0]["messages"], splits["train"][0]["tools"])
		require.NoError(t, err)
		return c
	case "verl-sft":
		convs, err := loadertest.VerlSFT(t.Context(), filepath.Join(out, "train.parquet"), nil)
		require.NoError(t, err)
		require.Len(t, convs, 1)
		return convs[0]
	}
	t.Fatalf("no loader for %s", target)
	return loadertest.Conversation{}
}

// checkPromptsAsServed renders, for each model turn k, the exported
// conversation before the k-th assistant message with the generation
// prompt, and requires it to equal the server's prompt for that turn, both
// as the server rendered it and as its prompt ids decode.
func checkPromptsAsServed(t *testing.T, conv loadertest.Conversation, served []vllmsim.Received) {
	t.Helper()
	var msgs []json.RawMessage
	require.NoError(t, json.Unmarshal(conv.Messages, &msgs))
	var assistant []int
	for i, m := range msgs {
		var r struct{ Role string }
		require.NoError(t, json.Unmarshal(m, &r))
		if r.Role == "assistant" {
			assistant = append(assistant, i)
		}
	}
	require.Len(t, assistant, len(served), "one assistant message per model turn")
	for k, at := range assistant {
		rendered, err := oracle.Render(t.Context(), "qwen3", oracle.RenderRequest{
			Messages: json.RawMessage("[" + joinRaw(msgs[:at]) + "]"), Tools: json.RawMessage(conv.Tools), AddGenerationPrompt: true})
		require.NoError(t, err)
		decoded, err := oracle.Decode(t.Context(), "qwen3", served[k].PromptIDs)
		require.NoError(t, err)
		require.Equal(t, served[k].Prompt, decoded, "the server's ids decode to its render")
		assert.Equal(t, decoded, rendered, "turn %d: the export renders the prompt the model was given", k)
	}
}

func joinRaw(ms []json.RawMessage) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = string(m)
	}
	return strings.Join(parts, ",")
}

func requireOracle(t *testing.T) {
	oracle.Require(t)
	testenv.Need(t, testenv.Templates, loadertest.PythonAvailable)
}

// The first turns and every later one: what chat-jsonl, hf and verl-sft
// render is the prompt the server rendered for the model — the same system
// prompt, tools in the order sent, calls (the parallel one with its "not
// run" result), observations.
func TestExportsRenderWhatTheServerRendered(t *testing.T) {
	requireOracle(t)
	srv := vllmsim.Start(t, vllmsim.Config{ToolParser: true, Respond: vllmsim.Replies(
		vllmsim.Reply{Text: call("exec", `{"cmd": "ls -1 *.txt | wc -l"}`)},
		vllmsim.Reply{Text: call("write_file", `{"path": "out.txt", "content": "2\n"}`) + "\n" + call("read_file", `{"path": "out.txt"}`)},
		vllmsim.Reply{Text: call("done", `{"answer": "2"}`)},
	)})
	run := collectAgainst(t, srv, countTask, 1)
	served := turns(srv)
	require.Len(t, served, 3)
	for _, target := range []string{"chat-jsonl", "hf", "verl-sft"} {
		t.Run(target, func(t *testing.T) {
			conv := exportedConversation(t, run, target)
			checkPromptsAsServed(t, conv, served)
			// And the done call is the last assistant target, encoded once.
			rendered, err := oracle.Render(t.Context(), "qwen3", oracle.RenderRequest{Messages: conv.Messages, Tools: json.RawMessage(conv.Tools)})
			require.NoError(t, err)
			assert.True(t, strings.HasSuffix(rendered, call("done", `{"answer": "2"}`)+"<|im_end|>\n"), "%s", rendered[max(0, len(rendered)-200):])
		})
	}
}

// An episode whose history drifted (Qwen3's reasoning parser on, the
// reasoning not sent back: every turn after the first re-renders without
// the think block the model generated) has no exact episode record, so
// verl-agent refuses it by default; -rows turn gives each turn exactly the
// ids the server reported, and sft-tokens -rows turn the same.
func TestTurnRowsOfADriftedEpisodeAreTheServersIDs(t *testing.T) {
	requireOracle(t)
	srv := vllmsim.Start(t, vllmsim.Config{ToolParser: true, ReasoningParser: true, Respond: vllmsim.Replies(
		vllmsim.Reply{Text: "<think>\nCount them.\n</think>\n\n" + call("exec", `{"cmd": "ls -1 *.txt | wc -l"}`)},
		vllmsim.Reply{Text: "<think>\nTwo.\n</think>\n\n" + call("write_file", `{"path": "out.txt", "content": "2\n"}`)},
		vllmsim.Reply{Text: "<think>\nWritten.\n</think>\n\n" + call("done", `{"answer": "2"}`)},
	)})
	run := collectAgainst(t, srv, countTask, 1, "send_reasoning=false")
	served := turns(srv)
	require.Len(t, served, 3)
	ds, err := shard.Open(run)
	require.NoError(t, err)
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.True(t, e.TokenDrift, "the run drifts, as Qwen3's template does without reasoning sent back")
	}

	out := filepath.Join(t.TempDir(), "verl")
	r := exportArgs(t, t.Context(), "-in", run, "-to", "verl-agent", "-out", out)
	require.Equal(t, cli.ExitBadInput, r.code)
	assert.Contains(t, r.stderr, "token record cut by retokenization drift (export -rows turn keeps its turns)")

	r = exportArgs(t, t.Context(), "-in", run, "-to", "verl-agent", "-rows", "turn", "-out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	rows, err := loadertest.LoadParquetFile(filepath.Join(out, "train.parquet"))
	require.NoError(t, err)
	require.Len(t, rows, 3)
	for k, row := range rows {
		assert.Equal(t, ints(served[k].PromptIDs), row["prompt_ids"], "turn %d: the prompt ids the server reported", k)
		assert.Equal(t, ints(served[k].GeneratedIDs), row["response_ids"], "turn %d: the ids the model generated", k)
		mask := row["response_mask"].([]any)
		for _, m := range mask {
			assert.Equal(t, int64(1), m)
		}
		lp := row["response_logprobs"].([]any)
		require.Len(t, lp, len(served[k].GeneratedIDs))
		for i, id := range served[k].GeneratedIDs {
			assert.InDelta(t, vllmsim.Logprob(i, id), lp[i], 1e-6, "turn %d token %d: the server's logprob", k, i)
		}
		_, err := loadertest.RLHFRow(row)
		require.NoError(t, err)
	}

	toks := filepath.Join(t.TempDir(), "tokens")
	r = exportArgs(t, t.Context(), "-in", run, "-to", "sft-tokens", "-rows", "turn", "-out", toks)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	splits, err := loadertest.LoadHF(toks)
	require.NoError(t, err)
	require.Len(t, splits["train"], 3)
	for k, row := range splits["train"] {
		want := append(ints(served[k].PromptIDs), ints(served[k].GeneratedIDs)...)
		assert.Equal(t, want, row["input_ids"], "turn %d", k)
		// What TRL trains on: the labels it builds from the mask are -100
		// over the prompt and exactly the generated ids after it.
		labels, err := loadertest.TRLLabels(row, false)
		require.NoError(t, err)
		wantLabels := make([]int64, 0, len(want))
		for range served[k].PromptIDs {
			wantLabels = append(wantLabels, loadertest.IgnoreIndex)
		}
		for _, id := range served[k].GeneratedIDs {
			wantLabels = append(wantLabels, int64(id))
		}
		assert.Equal(t, wantLabels, labels, "turn %d: TRL's labels are the model's tokens only", k)
	}

	// The conversation export of the drifted run still renders each turn's
	// prompt as served: reasoning is kept only on the last turn, where the
	// model saw it.
	checkPromptsAsServed(t, exportedConversation(t, run, "chat-jsonl"), served)
}

func ints(ids []int32) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// dpo draws pairs from replicas of one task whose rewards differ; on a run
// whose rewards are all equal it writes nothing and exits 2 saying why.
func TestDPOPairsOrNone(t *testing.T) {
	requireOracle(t)
	srv := vllmsim.Start(t, vllmsim.Config{ToolParser: true, Respond: vllmsim.Replies(
		vllmsim.Reply{Text: call("write_file", `{"path": "out.txt", "content": "2\n"}`)},
		vllmsim.Reply{Text: call("done", `{"answer": "2"}`)},
		vllmsim.Reply{Text: call("write_file", `{"path": "out.txt", "content": "3\n"}`)},
		vllmsim.Reply{Text: call("done", `{"answer": "3"}`)},
	)})
	mixed := collectAgainst(t, srv, countTask, 2)
	out := filepath.Join(t.TempDir(), "dpo")
	r := exportArgs(t, t.Context(), "-in", mixed, "-to", "dpo", "-out", out)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "export: 1 pair written to "+out+" (train 1)")
	lines, err := loadertest.LoadJSONL(filepath.Join(out, "train.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 1)
	assert.JSONEq(t, "1", string(lines[0]["chosen_reward"]))
	assert.JSONEq(t, "0", string(lines[0]["rejected_reward"]))
	assert.Contains(t, string(lines[0]["chosen"]), `"content":"2\n"`)
	assert.Contains(t, string(lines[0]["rejected"]), `"content":"3\n"`)

	r = exportArgs(t, t.Context(), "-in", mixed, "-to", "dpo", "-dpo-format", "openai", "-out", filepath.Join(t.TempDir(), "openai"))
	require.Equal(t, cli.ExitOK, r.code, r.stderr)

	srv2 := vllmsim.Start(t, vllmsim.Config{ToolParser: true, Respond: vllmsim.Replies(
		vllmsim.Reply{Text: call("write_file", `{"path": "out.txt", "content": "2\n"}`)},
		vllmsim.Reply{Text: call("done", `{"answer": "2"}`)},
		vllmsim.Reply{Text: call("write_file", `{"path": "out.txt", "content": "2\n"}`)},
		vllmsim.Reply{Text: call("done", `{"answer": "two"}`)},
	)})
	uniform := collectAgainst(t, srv2, countTask, 2)
	none := filepath.Join(t.TempDir(), "none")
	r = exportArgs(t, t.Context(), "-in", uniform, "-to", "dpo", "-out", none)
	require.Equal(t, cli.ExitBadInput, r.code, r.stderr)
	assert.Contains(t, r.stderr, "-to dpo found no preference pair among the 2 selected episodes (2 in a group whose rewards are all equal)")
	assert.NoDirExists(t, none)
}

// A reply cut at max_tokens (output_truncated) is the episode's last model
// turn in every export, by one rule (docs/exports.md): the token exports
// keep its ids, the message exports write it as the last assistant message
// — here the call vLLM's hermes parser read from the cut text, never run
// and answered by no result. chat-jsonl, hf and verl-sft wrote system and
// user only before.
func TestACutReplyIsTheLastTurnOfEveryExport(t *testing.T) {
	requireOracle(t)
	text := call("exec", `{"cmd": "ls -1 *.txt | wc -l"}`)
	ids, err := oracle.Tokenize(t.Context(), "qwen3", text)
	require.NoError(t, err)
	n := len(ids)
	for ; n > 0; n-- {
		s, err := oracle.Decode(t.Context(), "qwen3", ids[:n])
		require.NoError(t, err)
		if !strings.Contains(s, "</tool_call>") && strings.HasSuffix(strings.TrimSpace(s), "}}") {
			break
		}
	}
	srv := vllmsim.Start(t, vllmsim.Config{ToolParser: true, Respond: vllmsim.Replies(vllmsim.Reply{Text: text})})
	tasks := filepath.Join(t.TempDir(), "task.yaml")
	require.NoError(t, os.WriteFile(tasks, []byte(countTask), 0o644))
	run := filepath.Join(t.TempDir(), "run")
	var code int
	printed := captureOutput(t, func() {
		code = collectInProcess([]string{"-tasks", tasks, "-out", run, "-workdir", t.TempDir(), "-replicas", "1", "-repeats", "1",
			"-policy", "openai", "-base-url", srv.URL + "/v1", "-model", srv.Config().Model, "-policy-opt", "tokens=chat",
			"-policy-opt", fmt.Sprintf("max_tokens=%d", n), "-quiet"})
	})
	require.Equal(t, cli.ExitLosses, code, "every episode is a scaffold loss: %s", printed)
	for _, target := range []string{"chat-jsonl", "hf", "verl-sft"} {
		t.Run(target, func(t *testing.T) {
			conv := exportedConversation(t, run, target)
			var msgs []struct {
				Role      string `json:"role"`
				ToolCalls []struct {
					Function struct {
						Name string `json:"name"`
					} `json:"function"`
				} `json:"tool_calls"`
			}
			require.NoError(t, json.Unmarshal(conv.Messages, &msgs))
			last := msgs[len(msgs)-1]
			require.Equal(t, "assistant", last.Role, "the cut reply is the last message")
			require.Len(t, last.ToolCalls, 1)
			assert.Equal(t, "exec", last.ToolCalls[0].Function.Name)
		})
	}
	for _, target := range []string{"sft-tokens", "verl-agent"} {
		r := exportArgs(t, t.Context(), "-in", run, "-to", target, "-out", filepath.Join(t.TempDir(), target))
		assert.Equal(t, cli.ExitOK, r.code, "%s keeps the cut reply's ids: %s", target, r.stderr)
	}
}
