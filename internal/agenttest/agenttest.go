// Package agenttest is what tests of agent harnesses share: the installed
// harnesses (skipped with the reason, or failed in CI, when missing: the
// "agents" component of FORKLINE_REQUIRE), a statically linked forkline
// built for the relay inside docker sandboxes, and each harness's own
// tools as a scripted model calls them.
package agenttest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/forkline/forkline/harness"
	"github.com/forkline/forkline/internal/testenv"
)

// Require returns the install of harness name, or skips (fails in CI) when
// it is not installed.
func Require(t testing.TB, name string) harness.Installed {
	t.Helper()
	in, err := harness.Find(name, "")
	if err != nil {
		testenv.Missing(t, testenv.Agents, err.Error()+" (.ci/agents-up.sh installs every harness)")
	}
	return in
}

// StaticForkline builds forkline with cgo off (a static binary, as make
// build makes it) into a test directory and returns its path.
func StaticForkline(t testing.TB) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "forkline")
	cmd := exec.Command("go", "build", "-o", out, "github.com/forkline/forkline/cmd/forkline")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	_, file, _, _ := runtime.Caller(0)
	cmd.Dir = filepath.Dir(file)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building a static forkline: %v\n%s", err, b)
	}
	return out
}

// Shell is harness h's shell tool called with cmd: its name and arguments
// as the harness defines them (Claude Code's Bash, Codex's exec_command,
// opencode's bash).
func Shell(h, cmd string) (name, args string) {
	switch h {
	case harness.ClaudeCode:
		return "Bash", marshal(map[string]string{"command": cmd, "description": "Run a command"})
	case harness.Codex:
		return "exec_command", marshal(map[string]string{"cmd": cmd})
	case harness.OpenCode:
		return "bash", marshal(map[string]string{"command": cmd, "description": "Run a command"})
	}
	panic("agenttest: no shell tool for " + h)
}

// Read and Edit are the harness's file tools (Claude Code's Read and
// Edit, opencode's read and edit, with absolute paths); Codex edits
// through its shell (ok false).
func Read(h, path string) (name, args string, ok bool) {
	switch h {
	case harness.ClaudeCode:
		return "Read", marshal(map[string]string{"file_path": path}), true
	case harness.OpenCode:
		return "read", marshal(map[string]string{"filePath": path}), true
	}
	return "", "", false
}

// Edit replaces old by new in the file at path with the harness's edit
// tool.
func Edit(h, path, old, new string) (name, args string, ok bool) {
	switch h {
	case harness.ClaudeCode:
		return "Edit", marshal(map[string]string{"file_path": path, "old_string": old, "new_string": new}), true
	case harness.OpenCode:
		return "edit", marshal(map[string]string{"filePath": path, "oldString": old, "newString": new}), true
	}
	return "", "", false
}

func marshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// HermesCall is a tool call as Qwen3 writes it (the hermes format vLLM's
// parser and forkline's read back).
func HermesCall(name, args string) string {
	return fmt.Sprintf("<tool_call>\n{\"name\": %q, \"arguments\": %s}\n</tool_call>", name, args)
}

// Quote is harness.Quote (sh single quotes).
func Quote(s string) string { return harness.Quote(s) }

// Contains reports whether s contains every part.
func Contains(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
