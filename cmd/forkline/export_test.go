package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// The pipeline is tested in package export; these tests cover the flags,
// the printed summary and the exit codes.

func exportArgs(t *testing.T, ctx context.Context, args ...string) result {
	t.Helper()
	return execute(ctx, append([]string{"export"}, args...)...)
}

// writeRun writes a run of two episodes of one task, neither with a token
// record.
func writeRun(t *testing.T) string {
	t.Helper()
	spec := task.Spec{ID: "shell", Instruction: "Count the files."}.WithDefaults()
	tasks, err := json.Marshal([]map[string]any{{"id": spec.ID, "hash": spec.Hash(), "spec": spec}})
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "run")
	w, err := shard.Create(dir, shard.Manifest{RunID: "r", Tasks: tasks}, shard.DefaultConfig())
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		require.NoError(t, w.Commit(t.Context(), shard.EpisodeBatch{
			Episode: schemas.EpisodeRow{EpisodeID: id, RunID: "r", TaskID: "shell", ExitReason: "done", Steps: 1},
			Steps:   []schemas.StepRow{{EpisodeID: id, TaskID: "shell", ActionKind: "done", ActionJSON: `{"kind":"done"}`, ExitCode: -1}},
		}))
	}
	require.NoError(t, w.Close(shard.StatusComplete))
	return dir
}

func TestWritten(t *testing.T) {
	run := writeRun(t)
	r := exportArgs(t, t.Context(), "-in", run, "-to", "jsonl", "-out", "-")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Equal(t, 2, bytes.Count([]byte(r.stdout), []byte("\n")))
	// A stderr that is not a terminal gets plain progress lines, the last
	// one when the export ends, then the report.
	progressLine, rest, _ := strings.Cut(r.stderr, "\n")
	assert.Regexp(t, `^export: 2/2 episodes \([0-9.]+/s\), \d+s elapsed$`, progressLine)
	assert.Equal(t, "export: -in "+run+" (run r, complete): 2 episodes read, 2 selected\n"+
		"export: 2 episodes written to - (train 2), 0 filtered out\n", rest)

	out := filepath.Join(t.TempDir(), "out")
	r = exportArgs(t, t.Context(), "-in", run, "-to", "chat-jsonl", "-out", out, "-split", "train=0.5,test=0.5", "-where", "episode_id=a", "-json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var rep export.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.Equal(t, int64(2), rep.Read)
	assert.Equal(t, int64(1), rep.Filtered)
	assert.Equal(t, int64(1), rep.Written["train"]+rep.Written["test"])
	assert.Contains(t, r.stderr, "1 filtered out")
	// The split without the episode is not written, and the note says so;
	// the episode has no reward, and SFT trains on it: the note says that
	// too, with the flag that leaves it out.
	empty := "test"
	if rep.Written["test"] == 1 {
		empty = "train"
	}
	assert.Contains(t, r.stderr, "export: split "+empty+" got nothing and is not written (an empty split does not load in datasets or verl)")
	assert.NoFileExists(t, filepath.Join(out, empty+".jsonl"))
	assert.Equal(t, int64(1), rep.Unsuccessful)
	assert.Contains(t, r.stderr, "1 of the 1 episodes written did not end in done or have a reward below 1 (or none); SFT trains on them too: add -min-reward 1")
}

func TestRefusedEveryEpisode(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	r := exportArgs(t, t.Context(), "-in", writeRun(t), "-to", "verl-agent", "-out", out)
	assert.Equal(t, cli.ExitBadInput, r.code)
	// The refusal says how to get what is missing.
	assert.Contains(t, r.stderr, "export: refused by verl-agent: 2 no token record (only a -policy openai run against a server that returns token ids, vLLM or SGLang, with capture tokens keep, has one; a script run has none)\n")
	assert.Contains(t, r.stderr, "refused every one of the 2 selected episodes")
	assert.NoDirExists(t, out)
}

func TestFailed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	r := exportArgs(t, t.Context(), "-in", writeRun(t), "-to", "jsonl", "-out", filepath.Join(file, "out.jsonl"))
	assert.Equal(t, cli.ExitFailed, r.code, r.stderr)
	assert.Contains(t, r.stderr, "not a directory")
}

func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	out := filepath.Join(t.TempDir(), "out")
	r := exportArgs(t, ctx, "-in", writeRun(t), "-to", "hf", "-out", out)
	assert.Equal(t, cli.ExitInterrupted, r.code, r.stderr)
	assert.Contains(t, r.stderr, "export: interrupted; nothing was written to "+out)
	assert.NoDirExists(t, out)
}

func TestFlagErrors(t *testing.T) {
	in := filepath.Join(t.TempDir(), "run")
	out := filepath.Join(t.TempDir(), "out")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-to", "hf", "-out", out}, "-in, -to and -out are required (see -h)"},
		{[]string{"-in", in, "-to", "hf", "-out", out, "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-in", in, "-to", "parquet", "-out", out}, `unknown target "parquet" (known: atif, chat-jsonl, dpo, hf, hf-disk, jsonl, sft-tokens, verl-agent, verl-sft)`},
		{[]string{"-in", in, "-to", "verl-rl", "-out", out}, "-to verl-rl was removed"},
		{[]string{"-in", in, "-to", "hf", "-out", out, "-split", "train=0.5"}, "sum to 0.5"},
		{[]string{"-in", in, "-to", "verl-sft", "-out", out, "-rows", "episode"}, "-rows is for hf, hf-disk, sft-tokens and verl-agent"},
		{[]string{"-in", in, "-to", "verl-agent", "-out", out, "-tool-args", "string"}, "-tool-args is for atif, chat-jsonl, dpo, hf, hf-disk and verl-sft"},
		{[]string{"-in", in, "-to", "hf", "-out", out, "-rows", "turn"}, `-rows "turn" for hf (known: episode, step)`},
		{[]string{"-in", in, "-to", "chat-jsonl", "-out", out, "-pairs", "all"}, "-pairs is for dpo"},
		{[]string{"-in", in, "-to", "verl-agent", "-out", out, "-advantage", "ppo"}, `-advantage "ppo" (known: none, grpo, rloo)`},
		{[]string{"-in", in, "-to", "hf", "-out", out, "-license", "MIT License"}, `-license "MIT License"`},
		{[]string{"-in", in, "-to", "hf", "-out", out, "-where", "color=red"}, `unknown column "color"`},
		{[]string{"-in", in, "-to", "hf", "-out", out, "-min-reward", "high"}, `-min-reward "high" is not a number`},
		{[]string{"-in", in, "-to", "jsonl", "-out", "-", "-split", "train=0.5,test=0.5"}, "writes one file"},
		{[]string{"-in", in, "-to", "hf", "-out", "-"}, "-out - is for jsonl only"},
		{[]string{"-in", in, "-to", "jsonl", "-out", "-", "-json"}, "-json prints on stdout"},
		{[]string{"-in", in, "-to", "hf", "-out", out}, "no dataset"},
		{[]string{"-bogus"}, "flag provided but not defined"},
	} {
		r := exportArgs(t, t.Context(), tc.args...)
		assert.Equal(t, cli.ExitBadInput, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.msg, tc.args)
	}
	assert.NoDirExists(t, out)
	// The help goes to stdout (it was asked for); words are compared with
	// the help's line wrapping undone.
	r := exportArgs(t, t.Context(), "-h")
	assert.Equal(t, cli.ExitOK, r.code)
	help := strings.Join(strings.Fields(r.stdout), " ")
	for _, target := range export.Targets() {
		info, err := export.Describe(target)
		require.NoError(t, err)
		assert.Contains(t, help, fmt.Sprintf(" %s %s → ", target, strings.Join(strings.Fields(exportFlags.words(info.Summary)), " ")))
	}
	for _, code := range []string{"0 written", "1 failed", "2 bad input", "130 interrupted"} {
		assert.Contains(t, help, code)
	}
}

// -min-reward is a finite number: NaN would keep every episode (it compares
// false with every reward) and ±Inf would keep all or none.
func TestMinRewardMustBeFinite(t *testing.T) {
	in := writeRun(t)
	for _, v := range []string{"NaN", "nan", "Inf", "-Inf", "+inf"} {
		out := filepath.Join(t.TempDir(), "out")
		r := exportArgs(t, t.Context(), "-in", in, "-to", "jsonl", "-out", out, "-min-reward", v)
		assert.Equal(t, cli.ExitBadInput, r.code, "%s: %s", v, r.stderr)
		assert.Contains(t, r.stderr, `-min-reward "`+v+`": want a finite number`)
		assert.NoFileExists(t, out)
	}
}

// An export to a lines target collects less often, and puts the collector
// back as it was after; a GOGC or GOMEMLIMIT the user set is left alone.
func TestExportGCKeepsTheUsersSetting(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	restore := exportGC()
	assert.Equal(t, exportGCPercent, debug.SetGCPercent(exportGCPercent))
	assert.Equal(t, int64(exportMemoryLimit), debug.SetMemoryLimit(-1))
	restore()
	assert.Equal(t, 100, debug.SetGCPercent(100), "put back")

	t.Setenv("GOGC", "50")
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetGCPercent(50)
	limit := debug.SetMemoryLimit(-1)
	restore = exportGC()
	assert.Equal(t, 50, debug.SetGCPercent(50), "the user's GOGC")
	assert.Equal(t, limit, debug.SetMemoryLimit(-1), "the user's GOMEMLIMIT")
	restore()
}
