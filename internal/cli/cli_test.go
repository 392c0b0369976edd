package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// demoOptions is the options struct of the test app's "demo" subcommand.
type demoOptions struct {
	tasks    string
	out      string
	replicas int
	seed     int64
	grace    time.Duration
	force    bool
	task     []string
	in       []string
	opts     map[string]string
	frac     float64
}

// testApp is an app with one subcommand whose flags cover every kind, and
// whose runner reports what it was given.
func testApp(got *demoOptions, inv **Invocation) *App {
	demo := &Command{
		Name: "demo", Summary: "a demo", About: "Does nothing.\n\nReally nothing.",
		Args: "[ARG...]", MaxArgs: -1,
		Examples: []string{"forkline demo -tasks t -out o"},
		Exits:    []Exit{{ExitOK, "fine"}, {ExitBadInput, "bad"}},
		Setup: func(f *FlagSet) Runner {
			o := &demoOptions{replicas: 4, opts: map[string]string{}}
			f.Group("plan", "-replicas 2 -seed 7")
			f.String(&o.tasks, "tasks", "FILE|DIR", "task specs").Require()
			f.Int(&o.replicas, "replicas", "N", "in parallel")
			f.Int64(&o.seed, "seed", "S", "the seed")
			f.Duration(&o.grace, "grace", "D", "grace")
			f.List(&o.task, "task", "ID,...", "only these tasks")
			f.Group("output", "")
			f.String(&o.out, "out", "DIR", "where").Require()
			f.Bool(&o.force, "force", "replace")
			f.Strings(&o.in, "in", "DIR", "inputs")
			f.KeyValues(o.opts, "opt", "key=value", "settings")
			f.Float64(&o.frac, "frac", "F", "a fraction")
			f.Renamed("tasks-from", "-tasks-from is now -tasks")
			return func(ctx context.Context, i *Invocation) int {
				*got = *o
				*inv = i
				return ExitOK
			}
		},
	}
	return &App{Name: "forkline", Summary: "test", Commands: []*Command{demo}}
}

func execute(t *testing.T, a *App, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := a.Execute(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestFlagsAndPositionalArgumentsInAnyOrder(t *testing.T) {
	var got demoOptions
	var inv *Invocation
	a := testApp(&got, &inv)
	code, _, stderr := execute(t, a, "demo", "first", "-tasks", "t.yaml", "second", "-out=o", "-replicas", "2", "-seed", "-3",
		"-grace", "1m", "-task", "a,b", "-task", " c ,", "-in", "x,y", "-in", "z", "-opt", "k=v", "-opt", "k2=", "-force",
		"-frac", "0.5", "-json", "third", "--", "-not-a-flag")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := demoOptions{tasks: "t.yaml", out: "o", replicas: 2, seed: -3, grace: time.Minute, force: true,
		task: []string{"a", "b", "c"}, in: []string{"x,y", "z"}, opts: map[string]string{"k": "v", "k2": ""}, frac: 0.5}
	if got.tasks != want.tasks || got.out != want.out || got.replicas != want.replicas || got.seed != want.seed ||
		got.grace != want.grace || !got.force || got.frac != want.frac ||
		strings.Join(got.task, "|") != "a|b|c" || strings.Join(got.in, "|") != "x,y|z" ||
		len(got.opts) != 2 || got.opts["k"] != "v" || got.opts["k2"] != "" {
		t.Errorf("parsed %+v, want %+v", got, want)
	}
	if strings.Join(inv.Args, "|") != "first|second|third|-not-a-flag" {
		t.Errorf("positional arguments %q", inv.Args)
	}
	if !inv.JSON || inv.Quiet {
		t.Errorf("-json %v -quiet %v", inv.JSON, inv.Quiet)
	}
	if !inv.Given("replicas") || inv.Given("quiet") {
		t.Errorf("Given is wrong")
	}
}

func TestOptionsDoNotLeakBetweenInvocations(t *testing.T) {
	var got demoOptions
	var inv *Invocation
	a := testApp(&got, &inv)
	execute(t, a, "demo", "-tasks", "t", "-out", "o", "-task", "a", "-opt", "k=v")
	execute(t, a, "demo", "-tasks", "t", "-out", "o")
	if len(got.task) != 0 || len(got.opts) != 0 || got.replicas != 4 {
		t.Errorf("the second invocation saw the first one's values: %+v", got)
	}
}

func TestBadFlagsAreRefusedWithTheKnownOnes(t *testing.T) {
	var got demoOptions
	var inv *Invocation
	a := testApp(&got, &inv)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"demo", "-tasks", "t", "-out", "o", "-bogus"}, []string{
			"forkline demo: flag provided but not defined: -bogus (known: -force, -frac, -grace, -in, -json, -opt, -out, -quiet, -replicas, -seed, -task, -tasks)"}},
		{[]string{"demo", "-tasks", "t", "-out", "o", "-replica", "2"}, []string{"-replica; did you mean -replicas?"}},
		{[]string{"demo", "-tasks-from", "x"}, []string{"forkline demo: flag provided but not defined: -tasks-from: -tasks-from is now -tasks"}},
		{[]string{"demo", "-tasks", "t", "-out", "o", "-replicas", "two"}, []string{`invalid value "two" for flag -replicas: not an integer`}},
		{[]string{"demo", "-tasks", "t", "-out", "o", "-grace", "soon"}, []string{`flag -grace: not a duration`}},
		{[]string{"demo", "-tasks", "t", "-out", "o", "-opt", "nokey"}, []string{`want key=value, got "nokey"`}},
		{[]string{"demo", "-tasks", "t", "-out"}, []string{"flag needs an argument: -out"}},
		{[]string{"demo", "-out", "o"}, []string{"forkline demo: -tasks and -out are required (see -h); -tasks is missing"}},
		{[]string{"demo"}, []string{"-tasks and -out are missing"}},
	} {
		code, stdout, stderr := execute(t, a, tc.args...)
		if code != ExitBadInput {
			t.Errorf("%q: exit %d, want %d", tc.args, code, ExitBadInput)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%q: stderr %q does not say %q", tc.args, stderr, w)
			}
		}
		if stdout != "" {
			t.Errorf("%q: printed on stdout: %q", tc.args, stdout)
		}
	}
}

func TestTopLevel(t *testing.T) {
	var got demoOptions
	var inv *Invocation
	a := testApp(&got, &inv)
	a.VersionCommand = "demo"

	code, stdout, stderr := execute(t, a)
	if code != ExitBadInput || stdout != "" || !strings.Contains(stderr, "  demo      a demo\n") || !strings.Contains(stderr, "  help      ") {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = execute(t, a, "help")
	if code != ExitOK || stdout != a.Overview() || !strings.Contains(stdout, "exit codes: 0 ok, 1 failed, 2 bad input, 3 scaffold losses, 4 a service unavailable, 130 interrupted") {
		t.Errorf("help: exit %d: %q", code, stdout)
	}
	code, stdout, _ = execute(t, a, "--help")
	if code != ExitOK || stdout != a.Overview() {
		t.Errorf("--help: exit %d", code)
	}
	code, _, stderr = execute(t, a, "demp")
	if code != ExitBadInput || !strings.Contains(stderr, `forkline: unknown subcommand "demp"; did you mean demo? (known: demo, help)`) {
		t.Errorf("unknown subcommand: exit %d: %q", code, stderr)
	}
	code, _, stderr = execute(t, a, "help", "nope")
	if code != ExitBadInput || !strings.Contains(stderr, `unknown subcommand "nope"`) {
		t.Errorf("help nope: exit %d: %q", code, stderr)
	}
	code, _, stderr = execute(t, a, "-json")
	if code != ExitBadInput || !strings.Contains(stderr, "forkline: unknown flag -json: give a subcommand first") {
		t.Errorf("-json first: exit %d: %q", code, stderr)
	}
	// --version runs the version command (here: demo, which wants its flags).
	code, _, stderr = execute(t, a, "--version")
	if code != ExitBadInput || !strings.Contains(stderr, "forkline demo: -tasks and -out are required") {
		t.Errorf("--version did not run the version command: %d %q", code, stderr)
	}
}

func TestHelp(t *testing.T) {
	var got demoOptions
	var inv *Invocation
	a := testApp(&got, &inv)
	code, stdout, _ := execute(t, a, "demo", "-h")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	text, err := a.Help("demo")
	if err != nil || text != stdout {
		t.Fatalf("Help differs from -h: %v", err)
	}
	for _, h := range [][]string{{"help", "demo"}, {"demo", "--help"}, {"demo", "-help"}, {"demo", "-tasks", "x", "-h"}} {
		if _, out, _ := execute(t, a, h...); out != stdout {
			t.Errorf("%q prints another help", h)
		}
	}
	want := `forkline demo: a demo

usage: forkline demo -tasks FILE|DIR -out DIR [flags] [ARG...]

  Does nothing.

  Really nothing.

required:
  -tasks FILE|DIR         task specs
  -out DIR                where

plan:
  -replicas N             in parallel (default 4)
  -seed S                 the seed
  -grace D                grace
  -task ID,...            only these tasks [repeatable]
    e.g. -replicas 2 -seed 7

output:
  -force                  replace
  -in DIR                 inputs [repeatable]
  -opt key=value          settings [repeatable]
  -frac F                 a fraction

common:
  -json                   print the result as one JSON document on stdout
  -quiet                  no progress or notes on stderr (errors are still printed)

examples:
  forkline demo -tasks t -out o

exit codes:
  0    fine
  2    bad
`
	if stdout != want {
		t.Errorf("help:\n%s\nwant:\n%s", stdout, want)
	}

	code, stdout, _ = execute(t, a, "help", "-json")
	if code != ExitOK {
		t.Fatalf("help -json: exit %d", code)
	}
	var refs []Reference
	if err := json.Unmarshal([]byte(stdout), &refs); err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 || refs[0].Name != "demo" || refs[1].Name != "help" {
		t.Fatalf("references %+v", refs)
	}
	if f := refs[0].Flags[0]; f.Name != "tasks" || !f.Required || f.Group != RequiredGroup {
		t.Errorf("first flag %+v", f)
	}
	if refs[0].Usage != "forkline demo -tasks FILE|DIR -out DIR [flags] [ARG...]" {
		t.Errorf("usage %q", refs[0].Usage)
	}
}

func TestHelpWrapsLongLines(t *testing.T) {
	var b bytes.Buffer
	writeEntry(&b, "-a-rather-long-flag-name VALUE", strings.Repeat("word ", 40))
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if lines[0] != "  -a-rather-long-flag-name VALUE" {
		t.Errorf("a long head takes its own line: %q", lines[0])
	}
	for _, l := range lines {
		if len(l) > helpWidth {
			t.Errorf("line longer than %d: %q", helpWidth, l)
		}
	}
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, strings.Repeat(" ", flagColumn)+"word") {
			t.Errorf("continuation not aligned: %q", l)
		}
	}
}

func TestDocumentedExitCodesOnly(t *testing.T) {
	if err := checkExits("x", []Exit{{7, "lucky"}}); err == nil {
		t.Error("exit code 7 accepted")
	}
	for _, c := range Codes() {
		if CodeName(c) == "" {
			t.Errorf("code %d has no name", c)
		}
	}
}

func TestArgumentCounts(t *testing.T) {
	one := &Command{Name: "one", Summary: "s", Args: "DIR", ArgsFirst: true, MinArgs: 1, MaxArgs: 1,
		Setup: func(f *FlagSet) Runner { return func(context.Context, *Invocation) int { return ExitOK } }}
	none := &Command{Name: "none", Summary: "s",
		Setup: func(f *FlagSet) Runner { return func(context.Context, *Invocation) int { return ExitOK } }}
	a := &App{Name: "forkline", Summary: "s", Commands: []*Command{one, none}}
	if code, _, stderr := execute(t, a, "one"); code != ExitBadInput || !strings.Contains(stderr, "forkline one: missing DIR (usage: forkline one DIR)") {
		t.Errorf("missing: %d %q", code, stderr)
	}
	if code, _, stderr := execute(t, a, "one", "a", "b"); code != ExitBadInput || !strings.Contains(stderr, `forkline one: unexpected arguments ["b"]`) {
		t.Errorf("too many: %d %q", code, stderr)
	}
	if code, _, stderr := execute(t, a, "none", "extra"); code != ExitBadInput || !strings.Contains(stderr, `forkline none: unexpected arguments ["extra"]`) {
		t.Errorf("none: %d %q", code, stderr)
	}
	if code, _, _ := execute(t, a, "one", "a"); code != ExitOK {
		t.Errorf("one: %d", code)
	}
}

// The required flags come first; the positional arguments follow them,
// before the other groups.
func TestHelpOrder(t *testing.T) {
	c := &Command{Name: "m", Summary: "s", Args: "[PART...]", MaxArgs: -1,
		Arguments: []Argument{{Name: "PART...", Usage: "the parts"}},
		Setup: func(f *FlagSet) Runner {
			var out string
			var in []string
			f.Group("input", "")
			f.Strings(&in, "in", "PART", "a part")
			f.Group("output", "")
			f.String(&out, "out", "DIR", "where").Require()
			return func(context.Context, *Invocation) int { return ExitOK }
		}}
	a := &App{Name: "forkline", Summary: "s", Commands: []*Command{c}}
	text, err := a.Help("m")
	if err != nil {
		t.Fatal(err)
	}
	req, args, input, common := strings.Index(text, "\nrequired:\n"), strings.Index(text, "\narguments:\n"),
		strings.Index(text, "\ninput:\n"), strings.Index(text, "\ncommon:\n")
	if !(req >= 0 && req < args && args < input && input < common) {
		t.Errorf("sections out of order (required %d, arguments %d, input %d, common %d):\n%s", req, args, input, common, text)
	}
	if strings.Contains(text, "\noutput:\n") {
		t.Errorf("a group whose only flag is required is not shown again:\n%s", text)
	}
}

// -quiet leaves stderr to errors, as its help says: warnings too are
// silenced (they were still printed), errors are not.
func TestQuietLogsErrorsOnly(t *testing.T) {
	logs := &Command{Name: "logs", Summary: "logs", About: "Logs.", Examples: []string{"forkline logs"},
		Exits: []Exit{{ExitOK, "fine"}},
		Setup: func(f *FlagSet) Runner {
			f.Logging()
			return func(ctx context.Context, i *Invocation) int {
				i.Logger().Info("an info record")
				i.Logger().Warn("a warning record")
				i.Logger().Error("an error record")
				return ExitOK
			}
		}}
	a := &App{Name: "forkline", Summary: "test", Commands: []*Command{logs}}
	_, _, stderr := execute(t, a, "logs")
	for _, want := range []string{"an info record", "a warning record", "an error record"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("without -quiet, %q is logged: %s", want, stderr)
		}
	}
	_, _, stderr = execute(t, a, "logs", "-quiet")
	if strings.Contains(stderr, "info record") || strings.Contains(stderr, "warning record") || !strings.Contains(stderr, "an error record") {
		t.Errorf("-quiet logs errors only: %s", stderr)
	}
}

// Log records and plain writes to stderr from many goroutines at once
// reach a caller's buffer one at a time (the race run found progress lines
// and records colliding in forkline collect's in-process tests).
func TestStreamsTakeConcurrentWritesOneAtATime(t *testing.T) {
	busy := &Command{Name: "busy", Summary: "busy", About: "Writes.", Examples: []string{"forkline busy"},
		Exits: []Exit{{ExitOK, "fine"}},
		Setup: func(f *FlagSet) Runner {
			f.Logging()
			return func(ctx context.Context, i *Invocation) int {
				var wg sync.WaitGroup
				for range 8 {
					wg.Add(2)
					go func() {
						defer wg.Done()
						for range 25 {
							i.Logger().Info("record")
						}
					}()
					go func() {
						defer wg.Done()
						for range 25 {
							fmt.Fprintln(i.Stderr, "plain line")
							fmt.Fprintln(i.Stdout, "out line")
						}
					}()
				}
				wg.Wait()
				return ExitOK
			}
		}}
	a := &App{Name: "forkline", Summary: "test", Commands: []*Command{busy}}
	_, stdout, stderr := execute(t, a, "busy")
	if n := strings.Count(stderr, "\n"); n != 400 {
		t.Errorf("stderr has %d lines, want 400", n)
	}
	if n := strings.Count(stdout, "out line\n"); n != 200 {
		t.Errorf("stdout has %d lines, want 200", n)
	}
}
