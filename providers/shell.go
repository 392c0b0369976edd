package providers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/forkline/forkline/runtime"
)

// ShellOps are the actions a shell-only backend implements itself; Shell
// does the rest of Act the same way for every such backend.
type ShellOps struct {
	Provider  string // for messages, e.g. "local"
	Exec      func(ctx context.Context, a runtime.Action) (runtime.Observation, error)
	ReadFile  func(ctx context.Context, path string) (runtime.Observation, error)
	WriteFile func(ctx context.Context, path, content string) (runtime.Observation, error)
	// Term, when set, is the sandbox's persistent shell and terminal: exec
	// goes to it when its mode is persistent, send_keys and read_screen
	// always (without it they are ErrUnsupported observations).
	Term *Terminal
	// Closed, when closed, ends a wait early with ClosedErr.
	Closed    <-chan struct{}
	ClosedErr func() error
}

// Shell performs one action on a shell-only sandbox: an action that is not
// canonical is a failed observation (ErrUnsupported for an unknown kind,
// ErrActionFail otherwise), and so is an exec whose command holds a NUL
// byte; exec, read_file and write_file go to ops (exec to ops.Term in a
// persistent shell), send_keys and read_screen to ops.Term; wait
// sleeps (ended by ctx or by the sandbox closing); done does nothing; GUI
// actions are ErrUnsupported observations. The observation is timed.
// Actions that are not commands report exit code -1.
func Shell(ctx context.Context, a runtime.Action, ops ShellOps) (runtime.Observation, error) {
	began := time.Now()
	var obs runtime.Observation
	var err error
	if verr := a.Validate(); verr != nil {
		kind := runtime.ErrActionFail
		if _, _, known := runtime.ActionFieldNames(a.Kind); !known {
			kind = runtime.ErrUnsupported
		}
		obs = Failure(kind, verr.Error())
	} else {
		switch a.Kind {
		case runtime.ActExec:
			if i := strings.IndexByte(a.Cmd, 0); i >= 0 {
				// A model can emit a NUL; no command line (argv) can carry
				// one, so no provider could start it. It is the action's
				// failure, never the sandbox's.
				obs = Failure(runtime.ErrActionFail, fmt.Sprintf("%s: exec: the command holds a NUL byte at offset %d; a command line cannot carry one, so nothing ran", ops.Provider, i))
				break
			}
			if ops.Term.Persistent() {
				obs, err = ops.Term.Exec(ctx, a)
			} else {
				obs, err = ops.Exec(ctx, a)
			}
		case runtime.ActSendKeys, runtime.ActReadScreen:
			if ops.Term == nil {
				obs = Failure(runtime.ErrUnsupported, fmt.Sprintf("%s: %s is not supported: this sandbox has no terminal", ops.Provider, a.Kind))
			} else if a.Kind == runtime.ActSendKeys {
				obs, err = ops.Term.SendKeys(ctx, a)
			} else {
				obs, err = ops.Term.ReadScreen(ctx, a)
			}
		case runtime.ActReadFile:
			obs, err = ops.ReadFile(ctx, a.Path)
		case runtime.ActWriteFile:
			obs, err = ops.WriteFile(ctx, a.Path, a.Content)
		case runtime.ActWait:
			obs, err = wait(ctx, time.Duration(a.MS)*time.Millisecond, ops)
		case runtime.ActDone:
			obs = runtime.Observation{ExitCode: -1}
		default:
			obs = Failure(runtime.ErrUnsupported, fmt.Sprintf("%s: %s is not supported: %s sandboxes are shell-only (no GUI)", ops.Provider, a.Kind, ops.Provider))
		}
	}
	if err != nil {
		return runtime.Observation{}, err
	}
	obs.Duration = time.Since(began)
	return obs, nil
}

func wait(ctx context.Context, d time.Duration, ops ShellOps) (runtime.Observation, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return runtime.Observation{ExitCode: -1}, nil
	case <-ctx.Done():
		return runtime.Observation{}, ctx.Err()
	case <-ops.Closed:
		return runtime.Observation{}, ops.ClosedErr()
	}
}

// Failure is the observation of an action that failed for the given reason.
func Failure(kind runtime.ErrorKind, msg string) runtime.Observation {
	return runtime.Observation{
		Output: []byte(msg), OutputBytes: int64(len(msg)),
		ExitCode: -1, Error: true, ErrorKind: kind,
	}
}
