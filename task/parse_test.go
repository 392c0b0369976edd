package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/runtime"
)

const good = `id: fix-greeting
instruction: Make greet.sh print hello.
files:
  greet.sh: |
    echo helo
setup:
  - chmod +x greet.sh
verify:
  cmd: test "$(sh greet.sh)" = hello
limits:
  max_steps: 5
  action_timeout: 3s
solution:
  - {kind: write_file, path: greet.sh, content: "echo hello\n"}
  - {kind: exec, cmd: sh greet.sh, timeout_ms: 1000}
  - {kind: done, answer: fixed}
`

func TestParseGood(t *testing.T) {
	specs, err := Parse("good.yaml", []byte(good))
	require.NoError(t, err)
	require.Len(t, specs, 1)
	s := specs[0]
	require.Equal(t, "fix-greeting", s.ID)
	require.Equal(t, "echo helo\n", s.Files["greet.sh"])
	require.Equal(t, []string{"chmod +x greet.sh"}, s.Setup)
	require.Equal(t, "exit", s.WithDefaults().Verify.Reward)
	require.Equal(t, 5, s.Limits.MaxSteps)
	require.Equal(t, 3*time.Second, time.Duration(s.Limits.ActionTimeout))
	require.Equal(t, []runtime.Action{
		{Kind: runtime.ActWriteFile, Path: "greet.sh", Content: "echo hello\n"},
		{Kind: runtime.ActExec, Cmd: "sh greet.sh", TimeoutMS: 1000},
		{Kind: runtime.ActDone, Answer: "fixed"},
	}, s.Solution)
	require.Equal(t, "good.yaml:1", s.Source)
}

func TestParseErrorsNameFileLineField(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top-level field", "id: a\ninstruction: x\nsetpu: [ls]\n", []string{"bad.yaml:3:1", "field setpu", "unknown field", "known: actions, branch_start, browser, build, env, files"}},
		{"unknown limits field", "id: a\ninstruction: x\nlimits:\n  max_step: 3\n", []string{"bad.yaml:4:3", "limits.max_step", "known: action_timeout"}},
		{"wrong type", "id: a\ninstruction: x\nlimits:\n  max_steps: many\n", []string{"bad.yaml:4:14", "limits.max_steps", "many"}},
		{"bad duration", "id: a\ninstruction: x\nlimits:\n  action_timeout: 3 seconds\n", []string{"bad.yaml:4", "limits.action_timeout", "positive duration"}},
		{"missing id", "instruction: x\n", []string{"bad.yaml:1:1", "field id", "missing"}},
		{"missing instruction", "id: a\n", []string{"field instruction", "missing"}},
		{"setup not a list", "id: a\ninstruction: x\nsetup: ls\n", []string{"bad.yaml:3:8", "field setup", "list of commands"}},
		{"bad action kind", "id: a\ninstruction: x\nsolution:\n  - {kind: exce, cmd: ls}\n", []string{"bad.yaml:4:5", "solution[0]", `unknown kind "exce"`, "known: click"}},
		{"action missing field", "id: a\ninstruction: x\nsolution:\n  - kind: exec\n", []string{"bad.yaml:4", "solution[0]", `needs field "cmd"`}},
		{"action extra field", "id: a\ninstruction: x\nsolution:\n  - {kind: exec, cmd: ls, path: x}\n", []string{"solution[0]", `no field "path"`}},
		{"bad reward rule", "id: a\ninstruction: x\nverify: {cmd: 'true', reward: bool}\n", []string{"bad.yaml:3", "verify.reward", "known: exit, number"}},
		{"syntax error", "id: a\ninstruction: [x\n", []string{"bad.yaml:"}},
		{"escaping file", "id: a\ninstruction: x\nfiles:\n  ../evil: x\n", []string{"bad.yaml:4:3", "files.../evil", "inside the workspace"}},
		{"bad id", "id: 'a b'\ninstruction: x\n", []string{"bad.yaml:1:5", "field id"}},
		{"duplicate field", "id: a\nid: b\ninstruction: x\n", []string{"bad.yaml:2:1"}},
		{"browser not a mapping", "id: a\ninstruction: x\nbrowser: chromium\n", []string{"bad.yaml:3:10", "field browser", "must be a mapping"}},
		{"unknown browser field", "id: a\ninstruction: x\nbrowser:\n  viewpot: 800x600\n", []string{"bad.yaml:4:3", "browser.viewpot", "known: load_timeout, observe, start, viewport"}},
		{"bad viewport", "id: a\ninstruction: x\nbrowser: {viewport: 1280*800}\n", []string{"bad.yaml:3:21", "browser.viewport", "WIDTHxHEIGHT"}},
		{"viewport too small", "id: a\ninstruction: x\nbrowser: {viewport: 10x800}\n", []string{"browser.viewport", "out of range"}},
		{"viewport not a string", "id: a\ninstruction: x\nbrowser:\n  viewport: [1280, 800]\n", []string{"bad.yaml:4:13", "browser.viewport", "must be a string"}},
		{"bad observe", "id: a\ninstruction: x\nbrowser: {observe: pixels}\n", []string{"browser.observe", `"pixels" is not known`, "known: screenshot+a11y, screenshot, a11y, none"}},
		{"start off the loopback", "id: a\ninstruction: x\nbrowser: {start: 'https://example.com/'}\n", []string{"browser.start", "not a loopback URL"}},
		{"start outside the workspace", "id: a\ninstruction: x\nbrowser: {start: ../index.html}\n", []string{"browser.start", "inside the workspace"}},
		{"absolute start", "id: a\ninstruction: x\nbrowser: {start: /etc/passwd}\n", []string{"browser.start", "relative to the workspace"}},
		{"start with a scheme", "id: a\ninstruction: x\nbrowser: {start: 'file:///etc/passwd'}\n", []string{"browser.start", "workspace-relative path"}},
		{"bad load timeout", "id: a\ninstruction: x\nbrowser: {load_timeout: soon}\n", []string{"browser.load_timeout", "positive duration"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(c.yaml))
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrSpec), "error %v does not wrap ErrSpec", err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseBrowser(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       *Browser // after WithDefaults
	}{
		{"absent", "", nil},
		{"empty mapping takes every default", "browser: {}\n",
			&Browser{Width: 1280, Height: 800, Start: "about:blank", Observe: "screenshot+a11y", LoadTimeout: Duration(10 * time.Second)}},
		{"null takes every default", "browser:\n",
			&Browser{Width: 1280, Height: 800, Start: "about:blank", Observe: "screenshot+a11y", LoadTimeout: Duration(10 * time.Second)}},
		{"every field", "browser:\n  viewport: 800x600\n  start: app/index.html?tab=2#top\n  observe: a11y\n  load_timeout: 3s\n",
			&Browser{Width: 800, Height: 600, Start: "app/index.html?tab=2#top", Observe: "a11y", LoadTimeout: Duration(3 * time.Second)}},
		{"loopback start", "browser: {start: 'http://127.0.0.1:8080/form'}\n",
			&Browser{Width: 1280, Height: 800, Start: "http://127.0.0.1:8080/form", Observe: "screenshot+a11y", LoadTimeout: Duration(10 * time.Second)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			specs, err := Parse("b.yaml", []byte("id: a\ninstruction: x\n"+c.yaml))
			require.NoError(t, err)
			require.Equal(t, c.want, specs[0].WithDefaults().Browser)
		})
	}
}

func TestBrowserSectionKeepsOtherHashes(t *testing.T) {
	a, err := Parse("a.yaml", []byte(good))
	require.NoError(t, err)
	b, err := Parse("b.yaml", []byte(good+"browser: {}\n"))
	require.NoError(t, err)
	require.NotEqual(t, a[0].Hash(), b[0].Hash(), "a browser section is part of the task")
	require.NotContains(t, string(mustJSON(t, a[0].WithDefaults())), "browser", "tasks without one keep their old JSON, so their hashes and episode ids stay")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestLoadDirRejectsDuplicateIDs(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("id: same\ninstruction: x\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.yml"), []byte("id: other\ninstruction: y\n---\nid: same\ninstruction: z\n"), 0o644))
	_, err := Load(dir)
	require.Error(t, err)
	require.Contains(t, err.Error(), `"same" already defined at `+filepath.Join(dir, "a.yaml")+":1")
}

func TestHashIgnoresSourceAndFormatting(t *testing.T) {
	a, err := Parse("a.yaml", []byte(good))
	require.NoError(t, err)
	b, err := Parse("b.yaml", []byte(strings.ReplaceAll(good, "max_steps: 5", "max_steps:   5   # comment")))
	require.NoError(t, err)
	require.Equal(t, a[0].Hash(), b[0].Hash())
	c, err := Parse("c.yaml", []byte(strings.ReplaceAll(good, "echo helo", "echo hallo")))
	require.NoError(t, err)
	require.NotEqual(t, a[0].Hash(), c[0].Hash())
}

type fakeExec struct {
	out  string
	code int
}

func (f fakeExec) Act(_ context.Context, a runtime.Action) (runtime.Observation, error) {
	return runtime.Observation{Output: []byte(f.out), ExitCode: f.code, Error: f.code != 0}, nil
}
func (fakeExec) Close(context.Context) error { return nil }

func TestVerifyRewardRules(t *testing.T) {
	ctx := context.Background()
	val := func(r Reward) any {
		if r.Value == nil {
			return nil
		}
		return *r.Value
	}
	r, err := Verify{Cmd: "x", Reward: "exit"}.Run(ctx, fakeExec{code: 0})
	require.NoError(t, err)
	require.Equal(t, 1.0, val(r))
	r, _ = Verify{Cmd: "x", Reward: "exit"}.Run(ctx, fakeExec{code: 2, out: "FAIL"})
	require.Equal(t, 0.0, val(r))
	require.Equal(t, 2, r.ExitCode)
	r, _ = Verify{Cmd: "x", Reward: "number"}.Run(ctx, fakeExec{out: "passed 3 of 4\nscore: 0.75\n"})
	require.Equal(t, 0.75, val(r))
	r, _ = Verify{Cmd: "x", Reward: "number"}.Run(ctx, fakeExec{out: "no digits here"})
	require.Nil(t, r.Value)
	require.Contains(t, r.Detail, "no number")
}

// head starts every spec of the tables below, so their own lines start at 3.
const head = "id: a\ninstruction: x\n"

// TestParseRefusesWhatBreaksLater holds specs that were accepted and then
// panicked (hashing), broke every replica at run time, or lost part of
// what the file says. Each must be refused at parse time, naming the file,
// line, column and field.
func TestParseRefusesWhatBreaksLater(t *testing.T) {
	long := strings.Repeat("a", MaxArgBytes+1)
	var bigEnv strings.Builder // 11 entries of 100 kB: each fits, all together do not
	bigEnv.WriteString("env:\n")
	for v := range 11 {
		fmt.Fprintf(&bigEnv, "  V%d: %s\n", v, strings.Repeat("v", 100_000))
	}
	cases := []struct {
		name, yaml string
		want       []string
	}{
		// Non-finite and out-of-range limits.
		{"cpus .inf", "limits:\n  cpus: .inf\n", []string{"bad.yaml:4:9", "field limits.cpus", "not a finite number"}},
		{"cpus .nan", "limits: {cpus: .nan}\n", []string{"bad.yaml:3:16", "field limits.cpus", "not a finite number"}},
		{"cpus -.inf", "limits: {cpus: -.Inf}\n", []string{"bad.yaml:3:16", "limits.cpus", "not a finite number"}},
		{"cpus too few for docker", "limits: {cpus: 0.001}\n", []string{"bad.yaml:3:16", "limits.cpus", "out of range (0.01 to 1024 cores)"}},
		{"cpus overflow nano-cpus", "limits: {cpus: 1e12}\n", []string{"limits.cpus", "out of range"}},
		{"memory_mb overflows bytes", "limits: {memory_mb: 9223372036854775807}\n", []string{"bad.yaml:3:21", "field limits.memory_mb", "out of range (6 to 16777216 MB)"}},
		{"memory_mb under docker's minimum", "limits: {memory_mb: 4}\n", []string{"limits.memory_mb", "out of range"}},
		{"pids huge", "limits: {pids: 1e18}\n", []string{"bad.yaml:3:16", "field limits.pids", "out of range (1 to 4194304 processes)"}},
		{"max_steps beyond int32 step indexes", "limits: {max_steps: 3000000000}\n", []string{"bad.yaml:3:21", "limits.max_steps", "out of range (1 to 1000000 steps)"}},
		{"output_cap huge", "limits: {output_cap: 4611686018427387904}\n", []string{"limits.output_cap", "out of range"}},
		// Durations: overflow, near-overflow (the rollout adds a grace
		// period), and sub-millisecond (rounds to 0 ms, which means the
		// default).
		{"action_timeout overflows int64", "limits:\n  action_timeout: 9999999999h\n", []string{"bad.yaml:4:19", "field limits.action_timeout", `"9999999999h" is out of range (from 1ms to 168h)`}},
		{"action_timeout near overflow", "limits: {action_timeout: 2562047h}\n", []string{"bad.yaml:3:26", "limits.action_timeout", "out of range"}},
		{"action_timeout under a millisecond", "limits: {action_timeout: 500us}\n", []string{"limits.action_timeout", "out of range"}},
		{"episode_timeout overflows", "limits: {episode_timeout: 999999999h}\n", []string{"limits.episode_timeout", "out of range"}},
		{"verify.timeout overflows", "verify: {cmd: 'true', timeout: 9999999999h}\n", []string{"bad.yaml:3:32", "field verify.timeout", "out of range"}},
		{"verify.timeout rounds to 0 ms", "verify: {cmd: 'true', timeout: 999us}\n", []string{"verify.timeout", "out of range"}},
		{"load_timeout overflows", "browser: {load_timeout: 9999999999h}\n", []string{"bad.yaml:3:25", "field browser.load_timeout", "out of range"}},
		{"negative duration (refused before too)", "limits: {action_timeout: -5s}\n", []string{"limits.action_timeout", "positive duration"}},
		// NUL bytes.
		{"NUL in an env value", "env: {A: \"x\\0y\"}\n", []string{"bad.yaml:3:10", "field env.A", "NUL byte"}},
		{"NUL in an env name", "env: {\"A\\0B\": x}\n", []string{"bad.yaml:3:7", "field env.A\x00B", "NUL byte"}},
		{"NUL in image", "image: \"busybox\\0\"\n", []string{"bad.yaml:3:8", "field image", "NUL byte"}},
		{"NUL in setup", "setup: [ls, \"echo \\0\"]\n", []string{"bad.yaml:3:13", "field setup[1]", "NUL byte"}},
		{"NUL in start", "start:\n  - \"rm \\0\"\n", []string{"bad.yaml:4:5", "field start[0]", "NUL byte"}},
		{"NUL in verify cmd", "verify: {cmd: \"test \\0\"}\n", []string{"bad.yaml:3:15", "field verify.cmd", "NUL byte"}},
		{"NUL in a bare verify", "verify: \"test \\0\"\n", []string{"bad.yaml:3:9", "field verify.cmd", "NUL byte"}},
		{"NUL in a file name", "files: {\"a\\0b\": x}\n", []string{"bad.yaml:3:9", "NUL byte"}},
		{"NUL in a scripted command", "solution:\n  - {kind: exec, cmd: \"ls\\0\"}\n", []string{"bad.yaml:4:23", "field solution[0].cmd", "NUL byte"}},
		{"NUL in a scripted path", "solution: [{kind: read_file, path: \"a\\0\"}]\n", []string{"bad.yaml:3:36", "field solution[0].path", "NUL byte"}},
		{"NUL in a scripted url", "solution: [{kind: navigate, url: \"a\\0\"}]\n", []string{"solution[0].url", "NUL byte"}},
		{"NUL in the browser start", "browser: {start: \"index.html\\0\"}\n", []string{"bad.yaml:3:18", "field browser.start", "NUL byte"}},
		// Environment names.
		{"env name with =", "env: {'A=B': x}\n", []string{"bad.yaml:3:7", "field env.A=B", `holds "="`}},
		{"empty env name", "env: {'': x}\n", []string{"bad.yaml:3:7", "field env:", "name is empty"}},
		{"null env name", "env: {~: x}\n", []string{"bad.yaml:3:7", "field env:", "not null"}},
		{"env name a list", "env: {? [a]: x}\n", []string{"bad.yaml:3:9", "field env:", "not a list"}},
		{"env value a list", "env: {A: [x]}\n", []string{"bad.yaml:3:10", "field env.A", "must be a string"}},
		// Duplicates, with both lines.
		{"duplicate files key", "files:\n  a.txt: one\n  a.txt: two\n", []string{"bad.yaml:5:3", "field files.a.txt", "appears twice (first at line 4)"}},
		{"duplicate env key", "env:\n  A: one\n  A: two\n", []string{"bad.yaml:5:3", "field env.A", "appears twice (first at line 4)"}},
		{"duplicate top-level key", "setup: [ls]\nsetup: [pwd]\n", []string{"bad.yaml:4:1", "field setup", "appears twice (first at line 3)"}},
		{"duplicate action field", "solution:\n  - kind: exec\n    cmd: ls\n    cmd: pwd\n", []string{"bad.yaml:6:5", "field solution[0].cmd", "appears twice (first at line 5)"}},
		{"duplicate key inside an action value", "solution:\n  - {kind: exec, cmd: {a: 1, a: 2}}\n", []string{"solution[0]", "already defined at line 4"}},
		// File names that are not one canonical workspace path.
		{"dot-dot segment", "files: {a/../../b: x}\n", []string{"bad.yaml:3:9", "field files.a/../../b", `".." segment`, "inside the workspace"}},
		{"dot segment", "files: {a/./b: x}\n", []string{"field files.a/./b", `"." segment`}},
		{"doubled slash", "files: {a//b: x}\n", []string{"field files.a//b", "empty segment"}},
		{"trailing slash", "files: {a/: x}\n", []string{"field files.a/", "empty segment"}},
		{"absolute", "files: {/etc/passwd: x}\n", []string{"field files./etc/passwd", "relative to the workspace"}},
		{"backslash", "files: {'dir\\file.txt': x}\n", []string{`field files.dir\file.txt`, "backslash"}},
		{"empty name", "files: {'': x}\n", []string{"bad.yaml:3:9", "field files:", "path is empty"}},
		{"segment over NAME_MAX", "files: {" + strings.Repeat("n", 256) + ": x}\n", []string{"is 256 bytes; at most 255"}},
		{"file then directory", "files:\n  a: x\n  a/b: y\n", []string{"bad.yaml:5:3", "field files.a/b", "files.a (line 4) makes it a file"}},
		{"directory then file", "files:\n  a/b/c: x\n  a/b: y\n", []string{"bad.yaml:5:3", "field files.a/b", "is a directory already (files.a/b/c, line 4)"}},
		{"binary name", "files: {? !!binary Li4v : x}\n", []string{"bad.yaml:3:11", "field files", "not !!binary"}},
		// Text JSON cannot keep exactly.
		{"binary file content", "files: {a.bin: !!binary /w==}\n", []string{"bad.yaml:3:16", "field files.a.bin", "not valid UTF-8"}},
		{"binary instruction", "id: a\ninstruction: !!binary /w==\n", []string{"bad.yaml:2:14", "field instruction", "not valid UTF-8"}},
		{"binary write_file content", "solution: [{kind: write_file, path: a, content: !!binary /w==}]\n", []string{"bad.yaml:3:49", "field solution[0].content", "not valid UTF-8"}},
		// Sizes execve refuses.
		{"setup command over execve's limit", "setup: [" + long + "]\n", []string{"bad.yaml:3:9", "field setup[0]", "at most 131071"}},
		{"scripted command over execve's limit", "solution: [{kind: exec, cmd: " + long + "}]\n", []string{"field solution[0].cmd", "at most 131071"}},
		{"verify command over execve's limit", "verify: " + long + "\n", []string{"field verify.cmd", "at most 131071"}},
		{"env entry over execve's limit", "env: {A: " + long + "}\n", []string{"bad.yaml:3:10", "field env.A", "NAME=value is 131074 bytes"}},
		{"whole env too big", bigEnv.String(), []string{"bad.yaml:4:3", "field env:", "environment is 1100045 bytes; at most 1048576"}},
		// Scripted actions that can never run as written.
		{"exec timeout_ms overflows", "solution: [{kind: exec, cmd: ls, timeout_ms: 9223372036854775807}]\n", []string{"bad.yaml:3:46", "field solution[0].timeout_ms", "out of range"}},
		{"wait ms beyond the limit", "solution: [{kind: wait, ms: 999999999999}]\n", []string{"field solution[0].ms", "out of range"}},
		{"negative click", "solution: [{kind: click, x: 5, y: -1}]\n", []string{"bad.yaml:3:35", "field solution[0].y", "negative"}},
		{"click outside the viewport", "browser: {viewport: 800x600}\nsolution:\n  - {kind: click, x: 800, y: 10}\n", []string{"bad.yaml:5:22", "field solution[0].x", "outside the 800x600 viewport"}},
		{"click outside the default viewport", "solution: [{kind: click, x: 10, y: 800}]\nbrowser: {}\n", []string{"bad.yaml:3:36", "field solution[0].y", "outside the 1280x800 viewport"}},
		{"click from a merge key", "solution: [{<<: {kind: click, x: 9000, y: 1}}]\nbrowser: {}\n", []string{"bad.yaml:3:12", "field solution[0].x", "outside"}},
		// Other values that mean nothing.
		{"empty image", "image: ''\n", []string{"bad.yaml:3:8", "field image", "is empty"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := head + c.yaml
			if strings.HasPrefix(c.yaml, "id:") { // a case that needs its own head
				src = c.yaml
			}
			_, err := Parse("bad.yaml", []byte(src))
			require.Error(t, err)
			require.ErrorIs(t, err, ErrSpec)
			var se *SpecError
			require.ErrorAs(t, err, &se)
			require.Equal(t, "bad.yaml", se.File)
			require.Positive(t, se.Line, "every refusal names a line")
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestParseAcceptsTheEdges: what the refusals above must not catch.
func TestParseAcceptsTheEdges(t *testing.T) {
	cases := []struct {
		name, yaml string
		check      func(t *testing.T, s Spec)
	}{
		{"dots inside a name", "files: {a..b.txt: x, ..hidden: y, dir/.env: z, 'x...': w}\n", func(t *testing.T, s Spec) {
			require.Equal(t, map[string]string{"a..b.txt": "x", "..hidden": "y", "dir/.env": "z", "x...": "w"}, s.Files)
		}},
		{"sibling files in one directory", "files: {d/a: x, d/b: y, d/e/f: z}\n", func(t *testing.T, s Spec) {
			require.Len(t, s.Files, 3)
		}},
		{"limits at their bounds", "limits: {max_steps: 1000000, action_timeout: 168h, episode_timeout: 1ms, output_cap: 1073741824, cpus: 0.01, memory_mb: 6, pids: 4194304}\n", func(t *testing.T, s Spec) {
			require.Equal(t, Limits{MaxSteps: 1000000, ActionTimeout: Duration(MaxTimeout), EpisodeTimeout: Duration(time.Millisecond),
				OutputCap: 1 << 30, CPUs: 0.01, MemoryMB: 6, Pids: 1 << 22}, s.Limits)
		}},
		{"verify timeout of 1ms", "verify: {cmd: 'true', timeout: 1ms}\n", func(t *testing.T, s Spec) {
			require.Equal(t, int64(1), s.Verify.TimeoutMS)
		}},
		{"env names a shell cannot expand, empty values", "env: {npm_config_cache: /tmp, JAVA.OPTS: '-Xmx1g', EMPTY: '', NULLED: }\n", func(t *testing.T, s Spec) {
			require.Equal(t, map[string]string{"npm_config_cache": "/tmp", "JAVA.OPTS": "-Xmx1g", "EMPTY": "", "NULLED": ""}, s.Env)
		}},
		{"command of exactly execve's limit", "setup: [" + strings.Repeat("a", MaxArgBytes) + "]\n", func(t *testing.T, s Spec) {
			require.Len(t, s.Setup[0], MaxArgBytes)
		}},
		{"NUL in data, not in commands", "files: {a: \"x\\0y\"}\nsolution: [{kind: write_file, path: b, content: \"\\0\"}, {kind: done, answer: \"\\0\"}]\n", func(t *testing.T, s Spec) {
			require.Equal(t, "x\x00y", s.Files["a"])
		}},
		{"binary that is UTF-8", "files: {a: !!binary aGk=}\n", func(t *testing.T, s Spec) {
			require.Equal(t, "hi", s.Files["a"])
		}},
		{"click inside the viewport", "browser: {viewport: 800x600}\nsolution: [{kind: click, x: 799, y: 599}]\n", func(t *testing.T, s Spec) {
			require.Equal(t, 799, s.Solution[0].X)
		}},
		{"click without a browser section", "solution: [{kind: click, x: 5000, y: 5000}]\n", func(t *testing.T, s Spec) {
			require.Equal(t, 5000, s.Solution[0].X, "a provider with its own GUI may have another screen")
		}},
		{"exec timeout_ms of a week", "solution: [{kind: exec, cmd: ls, timeout_ms: 604800000}, {kind: wait, ms: 0}]\n", func(t *testing.T, s Spec) {
			require.Equal(t, int64(604800000), s.Solution[0].TimeoutMS)
		}},
		{"trailing document separator", "---\n", func(t *testing.T, s Spec) {
			require.Equal(t, "a", s.ID)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			specs, err := Parse("ok.yaml", []byte(head+c.yaml))
			require.NoError(t, err)
			require.Len(t, specs, 1)
			c.check(t, specs[0])
			require.Len(t, specs[0].Hash(), 64)
		})
	}
}

// TestActionsFitTheTask: a shell task allows the shell actions, a browser
// task the GUI actions and the shell ones it lists; the list is strict.
func TestActionsFitTheTask(t *testing.T) {
	parse := func(yaml string) (Spec, error) {
		specs, err := Parse("a.yaml", []byte(yaml))
		if err != nil {
			return Spec{}, err
		}
		return specs[0], nil
	}
	shell, err := parse("id: s\ninstruction: x\n")
	require.NoError(t, err)
	require.Equal(t, []runtime.ActionKind{"done", "exec", "read_file", "write_file"}, shell.AllowedActions())
	narrow, err := parse("id: s\ninstruction: x\nactions: [exec]\n")
	require.NoError(t, err)
	require.Equal(t, []runtime.ActionKind{"done", "exec"}, narrow.AllowedActions())
	web, err := parse("id: w\ninstruction: x\nbrowser: {}\n")
	require.NoError(t, err)
	require.Equal(t, []runtime.ActionKind{"click", "done", "key", "navigate", "screenshot", "scroll", "type", "wait"}, web.AllowedActions())
	webExec, err := parse("id: w\ninstruction: x\nbrowser: {}\nactions: [read_file, exec]\n")
	require.NoError(t, err)
	require.Equal(t, []runtime.ActionKind{"click", "done", "exec", "key", "navigate", "read_file", "screenshot", "scroll", "type", "wait"}, webExec.AllowedActions())
	require.NotEqual(t, web.Hash(), webExec.Hash(), "the actions are part of the task")
	require.Equal(t, shell.Hash(), func() string { s, _ := parse("id: s\ninstruction: x\n"); return s.Hash() }())
	for name, tc := range map[string]struct{ yaml, want string }{
		"gui action":   {"id: s\ninstruction: x\nactions: [click]\n", "a.yaml:3:11: field actions[0]: click is a GUI action"},
		"done":         {"id: s\ninstruction: x\nactions: [done]\n", "done is allowed in every task"},
		"unknown":      {"id: s\ninstruction: x\nactions: [exce]\n", `"exce" is not a shell action (known: exec, read_file, write_file, send_keys, read_screen)`},
		"twice":        {"id: s\ninstruction: x\nactions: [exec, exec]\n", "exec is listed twice"},
		"not a list":   {"id: s\ninstruction: x\nactions: exec\n", "must be a list of shell actions"},
		"empty, shell": {"id: s\ninstruction: x\nactions: []\n", "a task without a browser has no other actions"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parse(tc.yaml)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
