package runtime

import (
	"context"
	"errors"
	"fmt"
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fakeSession runs nothing: exec of "sleep" blocks until ctx ends, "boom"
// breaks the session, anything else echoes the command.
type fakeSession struct{ acted []Action }

func (f *fakeSession) Act(ctx context.Context, a Action) (Observation, error) {
	f.acted = append(f.acted, a)
	switch a.Cmd {
	case "sleep":
		<-ctx.Done()
		return Observation{}, ctx.Err()
	case "boom":
		return Observation{}, errors.New("sandbox vanished")
	}
	return Observation{Output: []byte(a.Cmd)}, nil
}
func (f *fakeSession) Close(context.Context) error { return nil }

type listPolicy []Decision

func (l listPolicy) Decide(ctx context.Context, h History) (Decision, error) {
	if len(h.Steps) >= len(l) {
		return Decision{Stop: ExitNoAction}, nil
	}
	d := l[len(h.Steps)]
	if d.Detail == "fail" {
		return Decision{}, errors.New("server down")
	}
	return d, nil
}

func exec(cmd string) Decision { return Decision{Action: Action{Kind: ActExec, Cmd: cmd}} }

func TestRolloutExits(t *testing.T) {
	cases := []struct {
		name   string
		policy listPolicy
		lim    Limits
		cancel bool
		exit   ExitReason
		steps  int
	}{
		{"done", listPolicy{exec("a"), {Action: Action{Kind: ActDone, Answer: "ok"}}}, Limits{}, false, ExitDone, 2},
		{"max steps", listPolicy{exec("a"), exec("b"), exec("c")}, Limits{MaxSteps: 2}, false, ExitMaxSteps, 2},
		{"no action", listPolicy{exec("a")}, Limits{}, false, ExitNoAction, 1},
		{"policy error", listPolicy{exec("a"), {Detail: "fail"}}, Limits{}, false, ExitPolicyError, 1},
		{"env error keeps the step", listPolicy{exec("a"), exec("boom")}, Limits{}, false, ExitEnvError, 2},
		{"episode timeout", listPolicy{exec("sleep")}, Limits{EpisodeTimeout: 50 * time.Millisecond}, false, ExitTimeout, 1},
		{"cancelled", listPolicy{exec("sleep")}, Limits{}, true, ExitCancelled, 1},
		{"invalid action", listPolicy{{Action: Action{Kind: ActExec}, Model: &ModelEvent{RawText: "exec"}}}, Limits{}, false, ExitUnparsedAction, 1},
		{"stop with model turn recorded", listPolicy{exec("a"), {Stop: ExitOutputTruncated, Model: &ModelEvent{FinishReason: "length"}}}, Limits{}, false, ExitOutputTruncated, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.cancel {
				time.AfterFunc(30*time.Millisecond, cancel)
			}
			var got []Step
			sink := StepSinkFunc(func(ctx context.Context, s Step) error {
				if ctx.Err() != nil {
					t.Error("sink got a dead context")
				}
				got = append(got, s)
				return nil
			})
			res, err := Rollout(ctx, &fakeSession{}, c.policy, History{Instruction: "x"}, c.lim, sink)
			if err != nil {
				t.Fatal(err)
			}
			if res.Exit != c.exit || res.Steps != c.steps || len(got) != c.steps {
				t.Fatalf("exit %s steps %d (sunk %d), want %s %d: %+v", res.Exit, res.Steps, len(got), c.exit, c.steps, res)
			}
			for i, s := range got {
				if s.Index != i {
					t.Fatalf("step %d has index %d", i, s.Index)
				}
			}
		})
	}
}

func TestRolloutPassesEffectiveTimeoutToExec(t *testing.T) {
	s := &fakeSession{}
	p := listPolicy{{Action: Action{Kind: ActExec, Cmd: "a", TimeoutMS: 60_000}}, exec("b")}
	res, err := Rollout(context.Background(), s, p, History{}, Limits{ActionTimeout: 2 * time.Second}, nil)
	if err != nil || res.Exit != ExitNoAction {
		t.Fatal(res, err)
	}
	if s.acted[0].TimeoutMS != 2000 || s.acted[1].TimeoutMS != 2000 {
		t.Fatalf("timeouts passed: %d %d", s.acted[0].TimeoutMS, s.acted[1].TimeoutMS)
	}
}

func TestRolloutSinkErrorStops(t *testing.T) {
	sink := StepSinkFunc(func(context.Context, Step) error { return errors.New("disk full") })
	_, err := Rollout(context.Background(), &fakeSession{}, listPolicy{exec("a"), exec("b")}, History{}, Limits{}, sink)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v", err)
	}
}

// TestWaistKnowsNoPolicy enforces DESIGN rule 1: runtime imports only the
// standard library and names no task, reward or file format.
func TestWaistKnowsNoPolicy(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range append(pkg.Imports, pkg.TestImports...) {
		if strings.Contains(strings.Split(imp, "/")[0], ".") {
			t.Errorf("runtime imports %s: only the standard library is allowed", imp)
		}
	}
	forbidden := regexp.MustCompile(`(?i)\b(task|reward|score|parquet|arrow|dataset|jsonl|verl|manifest)s?\b`)
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// The package comment may say what the waist does not know.
		text := string(data)
		if f == "doc.go" {
			continue
		}
		for i, line := range strings.Split(text, "\n") {
			if m := forbidden.FindString(line); m != "" {
				t.Errorf("%s:%d names %q: the waist must know no policy", f, i+1, m)
			}
		}
	}
}

// unavailableSession fails every action the way a backend that stopped
// answering does.
type unavailableSession struct{ fakeSession }

func (u *unavailableSession) Act(context.Context, Action) (Observation, error) {
	return Observation{}, fmt.Errorf("engine gone: %w", ErrUnavailable)
}

func TestRolloutPassesTheEndingError(t *testing.T) {
	res, err := Rollout(context.Background(), &unavailableSession{}, listPolicy{exec("a")}, History{}, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Exit != ExitEnvError || !errors.Is(res.Err, ErrUnavailable) {
		t.Fatalf("exit %s, err %v: want env_error wrapping ErrUnavailable", res.Exit, res.Err)
	}
	res, _ = Rollout(context.Background(), &fakeSession{}, listPolicy{exec("a"), {Detail: "fail"}}, History{}, Limits{}, nil)
	if res.Exit != ExitPolicyError || res.Err == nil || errors.Is(res.Err, ErrUnavailable) {
		t.Fatalf("exit %s, err %v: want policy_error with its own error", res.Exit, res.Err)
	}
	res, _ = Rollout(context.Background(), &fakeSession{}, listPolicy{exec("a")}, History{}, Limits{}, nil)
	if res.Err != nil {
		t.Fatalf("a no_action episode carries err %v", res.Err)
	}
}
