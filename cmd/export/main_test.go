package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// The pipeline is tested in package export; these tests cover the flags,
// the printed summary and the exit codes.

type result struct {
	code           int
	stdout, stderr string
}

func runExport(t *testing.T, ctx context.Context, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return result{code, out.String(), errb.String()}
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
	r := runExport(t, t.Context(), "-in", run, "-to", "jsonl", "-out", "-")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, 2, bytes.Count([]byte(r.stdout), []byte("\n")))
	assert.Equal(t, "export: -in "+run+" (run r, complete): 2 episodes read, 2 selected\n"+
		"export: 2 episodes written to - (train 2), 0 filtered out\n", r.stderr)

	out := filepath.Join(t.TempDir(), "out")
	r = runExport(t, t.Context(), "-in", run, "-to", "chat-jsonl", "-out", out, "-split", "train=0.5,test=0.5", "-where", "episode_id=a", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep export.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.Equal(t, int64(2), rep.Read)
	assert.Equal(t, int64(1), rep.Filtered)
	assert.Equal(t, int64(1), rep.Written["train"]+rep.Written["test"])
	assert.Contains(t, r.stderr, "1 filtered out")
}

func TestRefusedEveryEpisode(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	r := runExport(t, t.Context(), "-in", writeRun(t), "-to", "verl-agent", "-out", out)
	assert.Equal(t, exitBadInput, r.code)
	assert.Contains(t, r.stderr, "export: refused by verl-agent: 2 no token record\n")
	assert.Contains(t, r.stderr, "refused every one of the 2 selected episodes")
	assert.NoDirExists(t, out)
}

func TestFailed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	r := runExport(t, t.Context(), "-in", writeRun(t), "-to", "jsonl", "-out", filepath.Join(file, "out.jsonl"))
	assert.Equal(t, exitFailed, r.code, r.stderr)
	assert.Contains(t, r.stderr, "not a directory")
}

func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	out := filepath.Join(t.TempDir(), "out")
	r := runExport(t, ctx, "-in", writeRun(t), "-to", "hf", "-out", out)
	assert.Equal(t, exitCancelled, r.code, r.stderr)
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
		{[]string{"-in", in, "-to", "parquet", "-out", out}, `unknown target "parquet" (known: chat-jsonl, hf, hf-disk, jsonl, verl-agent, verl-rl, verl-sft)`},
		{[]string{"-in", in, "-to", "hf", "-out", out, "-split", "train=0.5"}, "sum to 0.5"},
		{[]string{"-in", in, "-to", "verl-rl", "-out", out, "-rows", "episode"}, "-rows is for hf and hf-disk"},
		{[]string{"-in", in, "-to", "hf", "-out", out, "-tool-args", "string"}, "-tool-args is for chat-jsonl"},
		{[]string{"-in", in, "-to", "hf", "-out", out, "-rows", "turn"}, `rows "turn"`},
		{[]string{"-in", in, "-to", "hf", "-out", out, "-where", "color=red"}, `unknown column "color"`},
		{[]string{"-in", in, "-to", "hf", "-out", out, "-min-reward", "high"}, `-min-reward "high" is not a number`},
		{[]string{"-in", in, "-to", "jsonl", "-out", "-", "-split", "train=0.5,test=0.5"}, "writes one file"},
		{[]string{"-in", in, "-to", "hf", "-out", "-"}, "-out - is for jsonl only"},
		{[]string{"-in", in, "-to", "jsonl", "-out", "-", "-json"}, "-json prints on stdout"},
		{[]string{"-in", in, "-to", "hf", "-out", out}, "no dataset"},
		{[]string{"-bogus"}, "flag provided but not defined"},
	} {
		r := runExport(t, t.Context(), tc.args...)
		assert.Equal(t, exitBadInput, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.msg, tc.args)
	}
	assert.NoDirExists(t, out)
	r := runExport(t, t.Context(), "-h")
	assert.Equal(t, exitOK, r.code)
	for _, target := range export.Targets() {
		info, err := export.Describe(target)
		require.NoError(t, err)
		assert.Contains(t, r.stderr, fmt.Sprintf("  %-11s %s\n", target, info.Summary))
	}
	assert.Contains(t, r.stderr, "Exit codes: 0 written, 1 failed, 2 bad input, 130 interrupted.")
}

// -min-reward is a finite number: NaN would keep every episode (it compares
// false with every reward) and ±Inf would keep all or none.
func TestMinRewardMustBeFinite(t *testing.T) {
	in := writeRun(t)
	for _, v := range []string{"NaN", "nan", "Inf", "-Inf", "+inf"} {
		out := filepath.Join(t.TempDir(), "out")
		r := runExport(t, t.Context(), "-in", in, "-to", "jsonl", "-out", out, "-min-reward", v)
		assert.Equal(t, exitBadInput, r.code, "%s: %s", v, r.stderr)
		assert.Contains(t, r.stderr, `-min-reward "`+v+`": want a finite number`)
		assert.NoFileExists(t, out)
	}
}
