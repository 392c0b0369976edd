package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The signal handling is tested in a real process: this test binary,
// started again with helperEnv set, runs an app whose "wait" subcommand
// waits for its context to end. Mode "returns" then exits
// ExitInterrupted; mode "stuck" then blocks where no context reaches, as a
// command waiting on a file that never opens would.
const helperEnv = "FORKLINE_CLI_SIGNAL_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperApp(mode).Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func helperApp(mode string) *App {
	wait := &Command{Name: "wait", Summary: "wait for a signal",
		Setup: func(f *FlagSet) Runner {
			var hook bool
			f.Bool(&hook, "hook", "say what is left behind on the second signal")
			return func(ctx context.Context, inv *Invocation) int {
				if hook {
					inv.OnSecondSignal(func() { io.WriteString(inv.Stderr, "hook: the sandboxes stay behind\n") })
				}
				io.WriteString(inv.Stdout, "ready\n")
				<-ctx.Done()
				io.WriteString(inv.Stdout, "cancelled\n")
				if mode == "stuck" {
					select {}
				}
				return ExitInterrupted
			}
		}}
	return &App{Name: "forkline", Summary: "signal helper", Commands: []*Command{wait}}
}

// startHelper starts the helper and waits until its command runs.
func startHelper(t *testing.T, mode string, args ...string) (*exec.Cmd, *bufio.Reader, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"wait"}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper did not start: %q %v", line, err)
	}
	return cmd, r, &stderr
}

// waitExit waits (bounded) for the process and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the process did not exit")
		return -1
	}
}

func TestFirstSignalCancelsTheContext(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd, out, stderr := startHelper(t, "returns")
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if line, _ := out.ReadString('\n'); line != "cancelled\n" {
			t.Errorf("%v: the context was not cancelled: %q", sig, line)
		}
		if code := waitExit(t, cmd); code != ExitInterrupted {
			t.Errorf("%v: exit %d, want %d", sig, code, ExitInterrupted)
		}
		if !strings.Contains(stderr.String(), "forkline wait: "+sig.String()+": stopping (signal again to stop at once)") {
			t.Errorf("%v: stderr %q", sig, stderr.String())
		}
	}
}

// A command stuck after the first signal (ignoring its context) is ended
// by the second: at once, exit 130, saying so.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		args []string
		say  string
	}{
		{nil, "forkline wait: second signal: exiting now"},
		{[]string{"-hook"}, "hook: the sandboxes stay behind"},
	} {
		cmd, out, stderr := startHelper(t, "stuck", tc.args...)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if line, _ := out.ReadString('\n'); line != "cancelled\n" {
			t.Fatalf("the context was not cancelled: %q", line)
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, cmd); code != ExitInterrupted {
			t.Errorf("exit %d, want %d", code, ExitInterrupted)
		}
		if !strings.Contains(stderr.String(), tc.say) {
			t.Errorf("stderr %q does not say %q", stderr.String(), tc.say)
		}
	}
}
