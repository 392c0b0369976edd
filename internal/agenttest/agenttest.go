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
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/forkline/forkline/harness"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/internal/testenv"
)

// Require returns the install of harness name, or skips naming the agents
// component (fails when FORKLINE_REQUIRE names it) when it is not
// installed or FORKLINE_HIDE hides it.
func Require(t testing.TB, name string) harness.Installed {
	t.Helper()
	var in harness.Installed
	testenv.Need(t, testenv.Agents, func() (err error) {
		in, err = harness.Find(name, "")
		return err
	})
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

// Title is what the script answers a call without tools (opencode's
// title call).
const Title = "Fix the sum script"

// workdirs are where each harness's prompt names its working directory.
var workdirs = []*regexp.Regexp{
	regexp.MustCompile(`Primary working directory: (\S+)`), // Claude Code
	regexp.MustCompile(`<cwd>([^<]+)</cwd>`),               // Codex
	regexp.MustCompile(`Working directory: (\S+)`),         // opencode
}

// Workdir is the working directory a harness's rendered prompt names, ""
// when it names none.
func Workdir(prompt string) string {
	for _, re := range workdirs {
		if m := re.FindStringSubmatch(prompt); m != nil {
			return strings.TrimSpace(m[1])
		}
	}
	return ""
}

// Probe is the first command FixSum runs: what the harness's tools see of
// the sandbox's environment and the harness's configuration files (a key
// that leaked into the sandbox would be there).
const Probe = `env; cat "$HOME/.codex/config.toml" "$HOME/.config/opencode/opencode.json" 2>/dev/null; true`

// FixSum is a scripted Qwen3 that solves examples/tasks/fix-sum.yaml with
// harness h's own tools, one call per turn, reading which turn it is from
// the rendered prompt (the tool results in it): it runs Probe, reads
// sum.sh, edits its loop bound, runs it, and answers (five model calls).
// A call without tools in its prompt (a title) gets Title. Its replies
// think first (<think>), as Qwen3 does.
func FixSum(h string) vllmsim.Responder {
	return func(t vllmsim.Turn) (vllmsim.Reply, error) {
		if !strings.Contains(t.Prompt, "<tools>") {
			return vllmsim.Reply{Text: "<think>\nA short title.\n</think>\n\n" + Title}, nil
		}
		n := strings.Count(t.Prompt, "<tool_response>")
		ws := Workdir(t.Prompt)
		think := fmt.Sprintf("<think>\nStep %d of fixing sum.sh.\n</think>\n\n", n+1)
		var name, args string
		switch n {
		case 0:
			name, args = Shell(h, Probe)
		case 1:
			name, args = Shell(h, "cat sum.sh")
			if rn, ra, ok := Read(h, filepath.Join(ws, "sum.sh")); ok && ws != "" {
				name, args = rn, ra
			}
		case 2:
			name, args = Shell(h, `sed -i 's/-lt "$n"/-le "$n"/' sum.sh`)
			if en, ea, ok := Edit(h, filepath.Join(ws, "sum.sh"), `-lt "$n"`, `-le "$n"`); ok && ws != "" {
				name, args = en, ea
			}
		case 3:
			name, args = Shell(h, "sh sum.sh 3")
		default:
			return vllmsim.Reply{Text: think + "Fixed the loop bound in sum.sh (-lt -> -le): sh sum.sh 3 prints 6."}, nil
		}
		return vllmsim.Reply{Text: think + HermesCall(name, args)}, nil
	}
}

// FakeHarness builds internal/agenttest/fakeharness (statically) into a
// test directory and returns its path.
func FakeHarness(t testing.TB) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "fakeharness")
	cmd := exec.Command("go", "build", "-o", out, "github.com/forkline/forkline/internal/agenttest/fakeharness")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	_, file, _, _ := runtime.Caller(0)
	cmd.Dir = filepath.Dir(file)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fakeharness: %v\n%s", err, b)
	}
	return out
}

// WhereAmI is a scripted Qwen3 for concurrency tests: harness h's first
// call runs pwd with its shell tool; its second answers with the working
// directory its own prompt names. An episode whose calls were mixed up
// with another's would hold two directories.
func WhereAmI(h string) vllmsim.Responder {
	return func(t vllmsim.Turn) (vllmsim.Reply, error) {
		if !strings.Contains(t.Prompt, "<tools>") {
			return vllmsim.Reply{Text: "<think>\nt\n</think>\n\n" + Title}, nil
		}
		think := "<think>\nWhere am I?\n</think>\n\n"
		if strings.Count(t.Prompt, "<tool_response>") == 0 {
			name, args := Shell(h, "pwd")
			return vllmsim.Reply{Text: think + HermesCall(name, args)}, nil
		}
		return vllmsim.Reply{Text: think + "workspace: " + Workdir(t.Prompt)}, nil
	}
}
