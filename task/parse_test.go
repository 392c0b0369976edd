package task

import (
	"context"
	"encoding/json"
	"errors"
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
		{"unknown top-level field", "id: a\ninstruction: x\nsetpu: [ls]\n", []string{"bad.yaml:3:1", "field setpu", "unknown field", "known: browser, env, files"}},
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
