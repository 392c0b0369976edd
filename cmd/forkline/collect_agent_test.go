package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/model/tabletest"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/harness"
	"github.com/forkline/forkline/internal/agenttest"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/schemas"
)

// agentRun is one collect of fix-sum with -policy agent, through the
// binary, and what it left.
type agentRun struct {
	out            string
	stdout, stderr string
	ep             schemas.EpisodeRow
	steps          []schemas.StepRow
	reward         *float64
	blobs          map[string]schemas.BlobRow
	rec            schemas.AgentRecord
	files          [][]byte // every file of the dataset, raw
	rows           []byte   // every row, as JSON
	manifestRunID  string
}

// collectFixSum collects examples/tasks/fix-sum.yaml once with -policy agent
// harness=h on provider prov, against sim (whose key is key, handed over
// in FORKLINE_TEST_MODEL_KEY), and reads the run back.
func collectFixSum(t *testing.T, prov, h string, sim *vllmsim.Server, key string, extra ...string) agentRun {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"-tasks", "../../examples/tasks/fix-sum.yaml", "-out", out, "-provider", prov, "-workdir", t.TempDir(),
		"-policy", "agent", "-policy-opt", "harness=" + h, "-base-url", sim.URL + "/v1", "-model", "Qwen/Qwen3-8B",
		"-api-key-env", "FORKLINE_TEST_MODEL_KEY", "-max-tokens", "400"}
	if prov == "docker" {
		args = append(args, "-provider-opt", "image="+agentImage(h))
	}
	cmd := collectProcess(append(args, extra...)...)
	cmd.Env = append(os.Environ(), "FORKLINE_TEST_MODEL_KEY="+key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitCode(cmd.Run())
	require.Equal(t, cli.ExitOK, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	r := agentRun{out: out, stdout: stdout.String(), stderr: stderr.String(), blobs: map[string]schemas.BlobRow{}}
	ds, err := shard.Open(out)
	require.NoError(t, err)
	m := ds.Manifest()
	require.Equal(t, shard.StatusComplete, m.Status)
	r.manifestRunID = m.RunID
	var rows bytes.Buffer
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		r.ep = e
		b, _ := json.Marshal(e)
		rows.Write(b)
	}
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		r.steps = append(r.steps, s)
		b, _ := json.Marshal(s)
		rows.Write(b)
	}
	for w, err := range ds.Rewards() {
		require.NoError(t, err)
		r.reward = w.Value
	}
	for b, err := range ds.Blobs() {
		require.NoError(t, err)
		r.blobs[b.SHA256] = b
		rows.Write(b.Data)
	}
	r.rows = rows.Bytes()
	require.NoError(t, filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, rerr := os.ReadFile(p)
			require.NoError(t, rerr)
			r.files = append(r.files, b)
		}
		return err
	}))
	require.NotNil(t, r.ep.Agent, "the episode row has no agent record")
	require.NoError(t, json.Unmarshal([]byte(*r.ep.Agent), &r.rec))
	return r
}

// agentImage is the image a harness runs in on docker: Codex's executable
// is static (busybox will do), Claude Code's and opencode's need glibc.
func agentImage(h string) string {
	if h == harness.Codex {
		return "forkline/busybox"
	}
	return "forkline/debian"
}

// mainGenerations are the generation requests of the harness's trajectory
// (their prompt offers tools; a title call's does not), in order.
func mainGenerations(sim *vllmsim.Server) []vllmsim.Received {
	var out []vllmsim.Received
	for _, r := range sim.Requests() {
		if r.Reply != nil && r.Status == 200 && strings.Contains(r.Prompt, "<tools>") {
			out = append(out, r)
		}
	}
	return out
}

// The harness's tools, by the step FixSum calls them at.
var fixSumTools = map[string][]string{
	harness.ClaudeCode: {"Bash", "Read", "Edit", "Bash"},
	harness.Codex:      {"exec_command", "exec_command", "exec_command", "exec_command"},
	harness.OpenCode:   {"bash", "read", "edit", "bash"},
}

// TestAgentHarnessesFixSum: each of the three real harnesses, installed from
// npm, fixes examples/tasks/fix-sum.yaml in forks on local and on docker,
// against a vLLM-like server with Qwen3's real template and tokenizer (its
// token routes: the gateway goes token in, token out) whose scripted model
// answers with the harness's own shell and edit tools. The episode is
// verified (reward 1); every model call is a step with the harness's tool
// names and the results it sent back; the token record is the server's
// ids, turn after turn, with the mask on generated tokens only; the
// model server's key is in no sandbox, file or log; every export target
// writes the episode.
func TestAgentHarnessesFixSum(t *testing.T) {
	if testing.Short() {
		t.Skip("runs agent harnesses")
	}
	for _, prov := range []string{"local", "docker"} {
		for _, h := range harness.Installable() {
			t.Run(prov+"/"+h, func(t *testing.T) {
				agenttest.Require(t, h)
				if prov == "docker" {
					if agentImage(h) == "forkline/debian" {
						requireDockerDebian(t)
					} else {
						requireDocker(t)
					}
				}
				var kb [16]byte
				_, _ = rand.Read(kb[:])
				key := "sk-model-server-" + hex.EncodeToString(kb[:])
				sim := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true, APIKey: key, Respond: agenttest.FixSum(h)})
				r := collectFixSum(t, prov, h, sim, key)

				require.Equal(t, "done", r.ep.ExitReason, r.ep.Detail)
				require.NotNil(t, r.reward)
				require.Equal(t, 1.0, *r.reward, "the verifier's reward")
				require.Equal(t, h, r.rec.Harness)
				require.Equal(t, 0, r.rec.ExitCode)
				require.Empty(t, r.rec.Refused)
				require.Len(t, r.steps, 5, "five model calls: probe, read, edit, run, answer")

				// The steps: the harness's tools, the results it sent back.
				for i, want := range fixSumTools[h] {
					s := r.steps[i]
					require.NotNil(t, s.ToolCalls, "step %d", i)
					var calls []struct{ ID, Name, Arguments string }
					require.NoError(t, json.Unmarshal([]byte(*s.ToolCalls), &calls))
					require.Len(t, calls, 1)
					require.Equal(t, want, calls[0].Name, "step %d", i)
					require.Empty(t, s.ActionKind, "the harness ran the tool, not forkline")
					require.NotNil(t, r.steps[i+1].HarnessInput)
					require.Contains(t, *r.steps[i+1].HarnessInput, calls[0].ID, "step %d's result comes back under its call id", i+1)
				}
				require.Contains(t, r.steps[0].Output, "HOME=", "the probe's output is step 0's observation")
				require.Contains(t, r.steps[1].Output, `-lt "$n"`, "the file as read")
				require.Regexp(t, regexp.MustCompile(`(?m)^\s*6\s*$`), r.steps[3].Output, "sh sum.sh 3 prints 6 after the edit")
				require.Nil(t, r.steps[4].ToolCalls)
				require.Contains(t, *r.steps[4].ModelText, "Fixed the loop bound")
				require.NotNil(t, r.steps[0].ToolsSHA256)
				tools := r.blobs[*r.steps[0].ToolsSHA256]
				require.Equal(t, schemas.MediaJSON, tools.Media)
				require.Contains(t, string(tools.Data), `"name":"`+fixSumTools[h][0]+`"`, "the harness's tools, once, as a blob")

				// The token record: the server's ids, exactly.
				gens := mainGenerations(sim)
				require.Len(t, gens, 5)
				wantPrompt := gens[0].PromptIDs
				var wantResp []int32
				var wantMask []int32
				seen := slices.Clone(gens[0].PromptIDs)
				for i, g := range gens {
					require.Equal(t, g.PromptIDs, r.steps[i].PromptIDs, "step %d: the prompt the server saw", i)
					require.Equal(t, g.GeneratedIDs, r.steps[i].ResponseIDs, "step %d: the ids it generated", i)
					require.Equal(t, "tito", *r.steps[i].TokenPath)
					if i > 0 {
						require.True(t, slices.Equal(g.PromptIDs[:len(seen)], seen), "call %d's prompt extends the ids before it", i)
						for _, id := range g.PromptIDs[len(seen):] {
							wantResp, wantMask = append(wantResp, id), append(wantMask, 0)
						}
						seen = append(seen, g.PromptIDs[len(seen):]...)
					}
					for _, id := range g.GeneratedIDs {
						wantResp, wantMask = append(wantResp, id), append(wantMask, 1)
					}
					seen = append(seen, g.GeneratedIDs...)
				}
				require.False(t, r.ep.TokenDrift)
				require.Equal(t, wantPrompt, r.ep.PromptIDs)
				require.Equal(t, wantResp, r.ep.ResponseIDs)
				require.Equal(t, wantMask, r.ep.ResponseMask)
				require.EqualValues(t, 5, r.ep.TokenTurns)

				// The model server's key: nowhere but in the request to it.
				require.NotContains(t, r.steps[0].Output, key, "the sandbox's environment and the harness's configuration")
				require.NotContains(t, r.stdout+r.stderr, key, "the collector's output")
				require.NotContains(t, string(r.rows), key, "the dataset's rows and blobs")
				for _, f := range r.files {
					require.False(t, bytes.Contains(f, []byte(key)), "a dataset file holds the key")
				}
				if prov == "local" {
					// What a dataset holds does not depend on the
					// provider: read back once per harness.
					checkAgentExports(t, r, h)
					checkAgentTranscript(t, r, h)
				}
				if prov == "docker" {
					require.Empty(t, labelled(t, r.manifestRunID), "containers or images of the run are left")
				}
			})
		}
	}
}

// checkAgentExports exports the agent episode to every target: the
// conversation targets write the harness's messages and tools, the token
// targets the record.
func checkAgentExports(t *testing.T, r agentRun, h string) {
	t.Helper()
	name := fixSumTools[h][0]
	for _, target := range []string{"chat-jsonl", "verl-sft", "hf", "hf-disk", "jsonl", "verl-agent", "sft-tokens"} {
		dir := filepath.Join(t.TempDir(), target)
		if target == "jsonl" {
			dir += ".jsonl"
		}
		res := execute(t.Context(), "export", "-in", r.out, "-to", target, "-out", dir, "-quiet")
		require.Equal(t, cli.ExitOK, res.code, "export -to %s: %s%s", target, res.stdout, res.stderr)
		var all bytes.Buffer
		require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, _ := os.ReadFile(p)
				all.Write(b)
			}
			return err
		}))
		switch target {
		case "chat-jsonl":
			var line struct {
				Messages []map[string]any `json:"messages"`
				Tools    []map[string]any `json:"tools"`
			}
			require.NoError(t, json.Unmarshal(bytes.SplitN(all.Bytes(), []byte("\n"), 2)[0], &line))
			require.NotEmpty(t, line.Tools)
			require.Equal(t, "system", line.Messages[0]["role"], "the harness's own system prompt opens the conversation")
			var names []string
			for _, m := range line.Messages {
				if calls, ok := m["tool_calls"].([]any); ok {
					for _, c := range calls {
						names = append(names, c.(map[string]any)["function"].(map[string]any)["name"].(string))
					}
				}
			}
			require.Equal(t, fixSumTools[h], names, "the calls in the harness's tool names")
			last := line.Messages[len(line.Messages)-1]
			require.Equal(t, "assistant", last["role"])
		case "verl-sft", "hf", "hf-disk":
			require.True(t, bytes.Contains(all.Bytes(), []byte(name)), "%s holds the harness's tool %s", target, name)
		case "verl-agent":
			// verl's AgentLoopOutput: the episode's record, the server's
			// ids, mask 1 on generated tokens only.
			var rows []map[string]any
			for _, split := range []string{"train", "test"} {
				if tab, err := tabletest.ReadParquetFile(filepath.Join(dir, split+".parquet")); err == nil {
					rows = append(rows, tab.Rows...)
				}
			}
			require.Len(t, rows, 1)
			require.Equal(t, int32s(r.ep.PromptIDs), rows[0]["prompt_ids"])
			require.Equal(t, int32s(r.ep.ResponseIDs), rows[0]["response_ids"])
			require.Equal(t, int32s(r.ep.ResponseMask), rows[0]["response_mask"])
		case "sft-tokens":
			require.NotZero(t, all.Len())
		case "jsonl":
			require.True(t, bytes.Contains(all.Bytes(), []byte(`"harness_input"`)))
		}
		require.False(t, bytes.Contains(all.Bytes(), []byte("sk-model-server-")), "export %s holds the model server's key", target)
	}
}

// int32s is ids as tabletest reads a list of int32 back.
func int32s(ids []int32) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// checkAgentTranscript reads the episode back with inspect: the harness,
// each call in its tool's name, the results it sent back.
func checkAgentTranscript(t *testing.T, r agentRun, h string) {
	t.Helper()
	res := execute(t.Context(), "inspect", r.out, "-episode", r.ep.EpisodeID[:12])
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "agent harness "+h)
	for _, name := range fixSumTools[h] {
		require.Contains(t, res.stdout, "tool call: "+name+" ")
	}
	require.Contains(t, res.stdout, "as the harness sent it back")
	res = execute(t.Context(), "inspect", r.out, "-episode", r.ep.EpisodeID[:12], "-json")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	var tr []struct {
		Agent struct{ Harness string } `json:"agent"`
		Steps []struct {
			ToolCalls    json.RawMessage `json:"tool_calls"`
			HarnessInput json.RawMessage `json:"harness_input"`
			Observation  string          `json:"observation"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &tr), res.stdout)
	require.Equal(t, h, tr[0].Agent.Harness)
	require.Len(t, tr[0].Steps, 5)
	require.Contains(t, tr[0].Steps[1].Observation, `-lt "$n"`)
	require.NotEmpty(t, tr[0].Steps[0].HarnessInput)
}

// TestAgentEpisodeReplays: forkline replay runs an agent episode's harness
// again in a fresh fork against the record; its tool results match the
// recorded ones under the normalized comparison (with masks for what
// differs from run to run: Codex's wall time, output chunk id and token
// count, and in the probe step's environment the gateway's port and the
// ids of the run), and the verifier's reward is the same.
func TestAgentEpisodeReplays(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an agent harness")
	}
	h := harness.Codex
	agenttest.Require(t, h)
	sim := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true, Respond: agenttest.FixSum(h)})
	r := collectFixSum(t, "local", h, sim, "sk-unused")
	gens := len(sim.Requests())
	res := execute(t.Context(), "replay", "-in", r.out, "-workdir", t.TempDir(), "-compare", "normalized",
		"-mask", `wall=Wall time: [0-9.]+ seconds`, "-mask", `chunk=Chunk ID: \w+`, "-mask", `count=Original token count: \d+`,
		// The probe step prints the environment and the harness's
		// configuration: the gateway's port, the harness's PATH and the
		// ids Codex makes per run differ from run to run.
		"-mask", `env=(?m)^([A-Z_]*(ID|SESSION)[A-Z_]*|PATH|FORKLINE_EXEC)=.*$`, "-mask", `port=127\.0\.0\.1:\d+`, "-json")
	require.Equal(t, cli.ExitOK, res.code, "%s\n%s", res.stdout, res.stderr)
	var rep struct {
		Identical int
		Episodes  []struct {
			Status  string
			Matched int                    `json:"steps_matched"`
			First   *struct{ Diff string } `json:"first_divergence"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep), res.stdout)
	require.Len(t, rep.Episodes, 1)
	require.Equal(t, 1, rep.Identical, "%+v", rep.Episodes[0].First)
	require.Equal(t, 5, rep.Episodes[0].Matched)
	require.Len(t, sim.Requests(), gens, "the replay asked the model server nothing")
}
