package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

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
