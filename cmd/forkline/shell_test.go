package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/forkline/forkline/formats/model/tabletest"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
)

// A persistent-shell task with the terminal actions, collected on local
// through the binary: inspect shows the new kinds and the state carried
// between commands, and the chat-jsonl export writes them.
func TestPersistentShellAndTerminalThroughTheBinary(t *testing.T) {
	testenv.NeedTmux(t)
	dir := t.TempDir()
	taskFile := filepath.Join(dir, "t.yaml")
	require.NoError(t, os.WriteFile(taskFile, []byte(`id: shell-state
instruction: keep state
shell: persistent
actions: [exec, send_keys, read_screen]
solution:
  - {kind: exec, cmd: "cd /tmp && export X=1"}
  - {kind: exec, cmd: "pwd; echo $X"}
  - {kind: send_keys, keys: "echo $((6*7))\n"}
  - {kind: read_screen}
  - {kind: done}
`), 0o644))
	out := filepath.Join(dir, "out")
	code, _, stderr := runBin(t, 3*time.Minute, "collect", "-tasks", taskFile, "-out", out, "-policy", "script")
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr := runBin(t, time.Minute, "inspect", out)
	require.Equal(t, 0, code, stderr)
	id := regexp.MustCompile(`shell-state +done ([0-9a-f]{32})`).FindStringSubmatch(stdout)
	require.NotNil(t, id, stdout)
	code, stdout, stderr = runBin(t, time.Minute, "inspect", out, "-episode", id[1])
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `send_keys {"keys":"echo $((6*7))\n"}`)
	assert.Contains(t, stdout, "read_screen")
	assert.Contains(t, stdout, "/tmp\n    1\n", "the second exec saw the first one's cd and export")
	assert.Contains(t, stdout, "\n    42\n", "the screen shows the command's output")
	code, _, stderr = runBin(t, time.Minute, "export", "-in", out, "-to", "chat-jsonl", "-out", filepath.Join(dir, "chat"))
	require.Equal(t, 0, code, stderr)
}

// A python3 REPL driven through send_keys and read_screen across steps,
// beside a persistent shell, and the episode replayed: the same keys give
// the same screens and the same outputs (identical, not diverged).
func TestPythonREPLOnTheTerminalReplaysIdentically(t *testing.T) {
	testenv.NeedTmux(t)
	// The REPL is Debian's python3, which the validators component
	// installs (and checks for).
	testenv.NeedValidators(t)
	dir := t.TempDir()
	taskFile := filepath.Join(dir, "t.yaml")
	// The sleeps let a loaded machine start the interpreter before a screen
	// is read: read_screen returns once the screen is still, and a REPL
	// that has not printed its prompt yet is still too.
	require.NoError(t, os.WriteFile(taskFile, []byte(`id: repl
instruction: use the REPL
shell: persistent
actions: [exec, send_keys, read_screen]
solution:
  - {kind: exec, cmd: "cd /tmp && export GREETING=hello"}
  - {kind: send_keys, keys: "python3 -q\n"}
  - {kind: exec, cmd: "sleep 2"}
  - {kind: read_screen}
  - {kind: send_keys, keys: "x = 6 * 7\n"}
  - {kind: send_keys, keys: "print(x, x + 1)\n"}
  - {kind: exec, cmd: "sleep 1"}
  - {kind: read_screen}
  - {kind: send_keys, keys: "C-d"}
  - {kind: exec, cmd: "sleep 1"}
  - {kind: exec, cmd: "echo $GREETING; pwd"}
  - {kind: done}
`), 0o644))
	out := filepath.Join(dir, "out")
	code, _, stderr := runBin(t, 3*time.Minute, "collect", "-tasks", taskFile, "-out", out, "-policy", "script", "-workdir", t.TempDir())
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr := runBin(t, time.Minute, "inspect", out)
	require.Equal(t, 0, code, stderr)
	id := regexp.MustCompile(`repl +done ([0-9a-f]{32})`).FindStringSubmatch(stdout)
	require.NotNil(t, id, stdout)
	code, stdout, stderr = runBin(t, time.Minute, "inspect", out, "-episode", id[1])
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, ">>> ", "the interpreter's prompt is on the screen")
	assert.Contains(t, stdout, "42 43", "the REPL kept x from one step to the next")
	assert.Contains(t, stdout, "hello\n    /tmp\n", "the shell's state outlived the REPL's steps")

	code, stdout, stderr = runBin(t, 5*time.Minute, "replay", "-in", out, "-workdir", t.TempDir(), "-quiet")
	require.Equal(t, cli.ExitOK, code, "%s\n%s", stdout, stderr)
	require.Regexp(t, `: 1 identical, 0 diverged, 0 errored`, stdout)
}

// A branch of a persistent-shell episode starts a new shell on local: the
// files the parent wrote are carried, its shell's state (a variable) is not
// (docs/providers.md, "The shell").
func TestPersistentShellBranchCarriesFilesNotShellState(t *testing.T) {
	dir := t.TempDir()
	taskFile := filepath.Join(dir, "t.yaml")
	require.NoError(t, os.WriteFile(taskFile, []byte(`id: shell-branch
instruction: keep state
shell: persistent
solution:
  - {kind: exec, cmd: "export X=1; echo carried > f"}
  - {kind: exec, cmd: "echo ${X:-unset}; cat f"}
  - {kind: done}
`), 0o644))
	out := filepath.Join(dir, "out")
	code, _, stderr := runBin(t, 3*time.Minute, "collect", "-tasks", taskFile, "-out", out, "-branch", "at=1,width=2", "-workdir", t.TempDir(), "-quiet")
	require.Equal(t, 0, code, stderr)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	branches := map[string]bool{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		if e.ParentEpisodeID != nil && *e.ParentEpisodeID != "" {
			branches[e.EpisodeID] = true
		}
	}
	require.Len(t, branches, 2)
	seen := 0
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		if branches[s.EpisodeID] && s.StepIndex == 1 {
			require.Equal(t, "unset\ncarried\n", s.Output, "a branch's shell is new; the parent's files are there")
			seen++
		}
	}
	require.Equal(t, 2, seen)
}

// Two tasks offering the same actions, one with a persistent shell and one
// without, exported together: every row carries the exec description its
// own task's model was offered. The Parquet targets keep one encoding of a
// tool list per list, and a key that left out the shell gave every row the
// first task's list.
func TestEachRowHasItsOwnTasksShellTools(t *testing.T) {
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks")
	require.NoError(t, os.Mkdir(tasks, 0o755))
	for name, shell := range map[string]string{"kept": "shell: persistent\n", "fresh": ""} {
		require.NoError(t, os.WriteFile(filepath.Join(tasks, name+".yaml"), []byte("id: "+name+`
instruction: count
`+shell+`actions: [exec, write_file]
solution:
  - {kind: exec, cmd: "echo 1"}
  - {kind: done}
`), 0o644))
	}
	out := filepath.Join(dir, "out")
	code, _, stderr := runBin(t, 3*time.Minute, "collect", "-tasks", tasks, "-out", out, "-policy", "script", "-repeats", "2")
	require.Equal(t, 0, code, stderr)

	// What the task's exec says: the persistent shell's description names
	// the shell that keeps its state, the fresh one does not.
	persistent := "persistent shell"
	check := func(target, task string, tools any) {
		t.Helper()
		// verl-sft's tools are one JSON string, hf's a list of them.
		var s string
		switch v := tools.(type) {
		case string:
			s = v
		case []any:
			for _, item := range v {
				s += item.(string)
			}
		default:
			t.Fatalf("%s %s: tools %T", target, task, tools)
		}
		require.Contains(t, s, `"exec"`, "%s %s: %s", target, task, s)
		if task == "kept" {
			assert.Contains(t, s, persistent, "%s: the persistent-shell task's row", target)
		} else {
			assert.NotContains(t, s, persistent, "%s: the fresh-shell task's row", target)
		}
	}
	seen := map[string]map[string]int{}
	count := func(target, task string) {
		if seen[target] == nil {
			seen[target] = map[string]int{}
		}
		seen[target][task]++
	}

	for _, target := range []string{"hf", "verl-sft"} {
		d := filepath.Join(dir, target)
		code, _, stderr = runBin(t, time.Minute, "export", "-in", out, "-to", target, "-out", d, "-quiet")
		require.Equal(t, 0, code, stderr)
		file := filepath.Join(d, "train.parquet")
		if target == "hf" {
			file = filepath.Join(d, "data", "train-00000-of-00001.parquet")
		}
		tab, err := tabletest.ReadParquetFile(file)
		require.NoError(t, err)
		require.Len(t, tab.Rows, 4)
		for _, row := range tab.Rows {
			task := row["task_id"].(string)
			check(target, task, row["tools"])
			count(target, task)
		}
	}
	for _, target := range []string{"hf", "verl-sft"} {
		assert.Equal(t, map[string]int{"kept": 2, "fresh": 2}, seen[target], target)
	}
}
