package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forkline/forkline/runtime"
)

// files is the smallest Session: a map of files, acted on by read_file and
// write_file. A failed action is an Observation with Error set, never a Go
// error (that would mean the session itself broke).
type files map[string]string

func (f files) Act(_ context.Context, a runtime.Action) (runtime.Observation, error) {
	switch a.Kind {
	case runtime.ActWriteFile:
		f[a.Path] = a.Content
		return runtime.Observation{ExitCode: -1}, nil
	case runtime.ActReadFile:
		content, ok := f[a.Path]
		if !ok {
			return runtime.Observation{ExitCode: -1, Error: true, ErrorKind: runtime.ErrNotFound, Output: []byte("no such file")}, nil
		}
		return runtime.Observation{ExitCode: -1, Output: []byte(content), OutputBytes: int64(len(content))}, nil
	}
	return runtime.Observation{ExitCode: -1, Error: true, ErrorKind: runtime.ErrUnsupported}, nil
}

func (f files) Close(context.Context) error { return nil }

// plan is a Policy that takes its actions in order, then says done.
type plan []runtime.Action

func (p plan) Decide(_ context.Context, h runtime.History) (runtime.Decision, error) {
	if len(h.Steps) < len(p) {
		return runtime.Decision{Action: p[len(h.Steps)]}, nil
	}
	return runtime.Decision{Action: runtime.Action{Kind: runtime.ActDone, Answer: "copied"}}, nil
}

// Rollout drives a Session with a Policy and streams each step to a sink
// as it happens: here a sink that prints them.
func ExampleRollout() {
	env := files{"in.txt": "hello"}
	policy := plan{
		{Kind: runtime.ActReadFile, Path: "in.txt"},
		{Kind: runtime.ActWriteFile, Path: "out.txt", Content: "hello"},
		{Kind: runtime.ActReadFile, Path: "missing.txt"},
	}
	sink := runtime.StepSinkFunc(func(_ context.Context, s runtime.Step) error {
		fmt.Printf("step %d %s error=%v %q\n", s.Index, s.Action, s.Observation.Error, s.Observation.Output)
		return nil
	})
	res, err := runtime.Rollout(context.Background(), env, policy, runtime.History{Instruction: "Copy in.txt to out.txt."},
		runtime.Limits{MaxSteps: 10}, sink)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Exit, res.Steps, res.Answer, res.Exit.ScaffoldLoss())
	fmt.Println(env["out.txt"])
	// Output:
	// step 0 {"kind":"read_file","path":"in.txt"} error=false "hello"
	// step 1 {"kind":"write_file","path":"out.txt","content":"hello"} error=false ""
	// step 2 {"kind":"read_file","path":"missing.txt"} error=true "no such file"
	// step 3 {"kind":"done","answer":"copied"} error=false ""
	// done 4 copied false
	// hello
}

// An Action's JSON form is fixed and checked: unknown kinds and fields
// are refused by name.
func ExampleAction_UnmarshalJSON() {
	var a runtime.Action
	err := json.Unmarshal([]byte(`{"kind":"exec","cmd":"ls -la","timeout_ms":5000}`), &a)
	fmt.Println(a.Kind, a.Cmd, a.TimeoutMS, err)

	err = json.Unmarshal([]byte(`{"kind":"exec","command":"ls"}`), &a)
	fmt.Println(errors.Is(err, runtime.ErrInvalidAction))
	// Output:
	// exec ls -la 5000 <nil>
	// true
}

// Exit reasons keep the outcomes of the work apart from scaffold losses,
// which a training set should leave out.
func ExampleExitReason_ScaffoldLoss() {
	for _, r := range []runtime.ExitReason{runtime.ExitDone, runtime.ExitMaxSteps, runtime.ExitPolicyError, runtime.ExitEnvError} {
		fmt.Println(r, r.ScaffoldLoss())
	}
	// Output:
	// done false
	// max_steps false
	// policy_error true
	// env_error true
}
