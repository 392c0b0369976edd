package ui

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/manifest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// render decodes testdata/NAME.json into the type its name says and writes
// it as the commands print it. The inputs are the JSON forms of values the
// libraries produced (inspect's of its test fixture datasets, collect's and
// serve's summaries built to reach every line); an unknown field fails, so a
// field renamed in a library shows here.
func render(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var b bytes.Buffer
	switch kind, _, _ := strings.Cut(name, "-"); kind {
	case "collect":
		var r manifest.Collect
		require.NoError(t, dec.Decode(&r), name)
		dataset := ""
		if strings.HasSuffix(name, "-dataset") {
			dataset = "/data/run"
		}
		WriteCollect(&b, r, dataset)
	case "serve":
		var s manifest.Serve
		require.NoError(t, dec.Decode(&s), name)
		WriteServe(&b, &s)
	case "summary":
		var s inspect.Summary
		require.NoError(t, dec.Decode(&s), name)
		WriteSummary(&b, &s)
	case "transcript":
		var tr inspect.Transcript
		require.NoError(t, dec.Decode(&tr), name)
		WriteTranscript(&b, &tr)
	case "list":
		var l inspect.EpisodeList
		require.NoError(t, dec.Decode(&l), name)
		WriteListHeader(&b)
		for _, e := range l.Episodes {
			WriteEntry(&b, e)
		}
		WriteListFooter(&b, len(l.Episodes), l.Matched, l.Offset)
	default:
		t.Fatalf("testdata/%s.json: no rendering for %q", name, kind)
	}
	return b.String()
}

// Every rendering against its golden file, byte for byte. The golden files
// were first written by the Print and WriteText methods this package
// replaced (manifest.Collect.Print, manifest.Serve.Print,
// inspect.Summary.WriteText, inspect.Transcript.WriteText), so the commands
// print what they printed.
func TestRenderingsMatchTheirGoldenFiles(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			got := render(t, name)
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "go test ./internal/ui -run TestRenderingsMatchTheirGoldenFiles -update writes it")
			assert.Equal(t, string(want), got)
		})
	}
}

func TestInspectSummaryText(t *testing.T) {
	text := render(t, "summary-fixture")
	for _, want := range []string{
		"status    complete (run run-fixture",
		"plan      6 episodes (2 tasks × 3 repeats), seed 7; 4 replicas, reset auto",
		"steps     3 shards",
		"provider  local (fork=copy)",
		"policy    openai (base_url=http://127.0.0.1:8000/v1, model=m)",
		"conversation: actions=exec,done, enable_thinking=false, observation_cap=12, observe=text,\n                          system_prompt=You are careful., tool_mode=native",
		"capture   a11y full, pixels hash, text full, tokens keep",
		"verify    ok",
		"episodes: 6, 8 steps; scaffold losses: 1",
		"shell                           4       4  0.5          done=2 max_steps=1 env_error*=1",
		`reward "verify" (episode level): 4 values, mean 0.625, min 0, max 1; 1 verifications gave no value`,
		`other reward "shaped": 0 episode-level, 1 step-level rows`,
		"fork/overlay         p50      2.000   p95      3.000   n=3",
		"tokens: 2 of 6 episodes have a token record (3 model turns); 1 flagged with token drift",
		"bytes on disk (zstd Parquet):",
		"    shell                  done s-done-1, max_steps s-max, env_error s-lost\n",
	} {
		assert.Contains(t, text, want)
	}

	assert.Contains(t, render(t, "summary-histogram"), "[0.9, 1]", "the last bin closes at max")

	empty := render(t, "summary-empty")
	assert.Contains(t, empty, "episodes: 0, 0 steps")
	assert.Contains(t, empty, `reward "verify" (episode level): none`)
	assert.NotContains(t, empty, "NaN")

	problems := render(t, "summary-problems")
	assert.Contains(t, problems, "problems: 2 (the dataset does not match its manifest; its readers refuse it)")
	assert.NotContains(t, problems, "verify    ok")
	assert.NotContains(t, problems, "episodes:", "a dataset with problems has no row sections")

	mixed := render(t, "summary-mixed")
	for _, want := range []string{
		"1 flagged with token drift (missing_ids 1)",
		"  model turns by token source (path, endpoints, model, chat template):",
		"    tito  /tokenize,/v1/completions                    Qwen/Qwen3-8B            4 turns",
		"    chat  /v1/chat/completions                         llama-3.1-8b             1 turn  template e10ca381b1cc",
		"this dataset mixes 2 token sources",
	} {
		assert.Contains(t, mixed, want)
	}
}

func TestTranscriptText(t *testing.T) {
	assert.Contains(t, render(t, "transcript-nopixels"), "pixels not kept (capture pixels=none)")

	mixed := render(t, "transcript-mixed")
	assert.Contains(t, mixed, "  tokens: chat via /v1/chat/completions (llama-3.1-8b)\n")
	assert.NotContains(t, mixed[strings.Index(mixed, "[step 1]"):], "tokens:", "a step without a model turn has no source")

	// A branch names its parent and the prefix it does not hold, and shows
	// its root's tree with each branch's reward, itself pointed out.
	out := render(t, "transcript-branch")
	assert.Contains(t, out, "[steps 0-1: the prefix, stored once in its parent root-aaaaaaaaaaaa")
	assert.Contains(t, out, "[branching tree of root root-aaaaaaaaaaaa]")
	var treeLines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "branch 0 at step 2") || strings.Contains(l, "branch 1 at step 2") {
			treeLines = append(treeLines, l)
		}
	}
	require.Len(t, treeLines, 2)
	assert.Contains(t, treeLines[0], "reward verify=1")
	assert.Contains(t, treeLines[1], "reward verify=0")
	assert.Contains(t, treeLines[1], "<- this episode")

	// An agent harness's steps: what it sent, its tool calls, a restart.
	agent := render(t, "transcript-agent")
	assert.NotContains(t, agent, "[user: the task's instruction]", "a harness sends its own instruction")
	assert.Contains(t, agent, "  [result of t1, as the harness sent it back]\n")
	assert.Contains(t, agent, "  the harness started over (compaction): its whole conversation now\n")
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4321: "-4,321"} {
		assert.Equal(t, want, thousands(n))
	}
	assert.True(t, strings.HasPrefix(bar(1, 40), "#"))
}
