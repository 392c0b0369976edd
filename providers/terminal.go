package providers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/forkline/forkline/runtime"
)

// The terminal of send_keys and read_screen is a tmux session on the host
// running TerminalArgv (local: a shell in the workspace; docker: `docker
// exec -it` into the container). Decision: tmux rather than
// github.com/creack/pty. A pty alone gives a byte stream; read_screen
// needs the screen those bytes paint (cursor moves, clears, an editor's
// redraws), which is a terminal emulator's job, and tmux is a complete
// one with a scrollback (capture-pane), it names the special keys the
// way the issue and Terminus-trained models do (C-c, Enter, Escape, Up,
// F1, M-x) and interprets them itself (send-keys), and it is one Debian
// package on the host: sandbox images need nothing (forkline/busybox has
// no tmux). Each sandbox's terminal has a tmux server of its own (its own
// socket in a private directory, no config file), so nothing is shared.

// TerminalSize is the terminal's size, columns by rows.
const (
	TerminalCols = 100
	TerminalRows = 30
)

// settle bounds read_screen's wait for the screen to stop changing.
var (
	settleQuiet = 300 * time.Millisecond
	settleMax   = 5 * time.Second
)

// ErrNoTmux is the failure of a terminal action on a host without tmux.
var ErrNoTmux = errors.New("the terminal actions need tmux on the host running forkline (Debian: apt-get install tmux)")

type tmuxTerm struct {
	dir  string
	sock string
}

func (tm *tmuxTerm) tmux(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "tmux", append([]string{"-S", tm.sock, "-f", "/dev/null"}, args...)...)
	cmd.Env = append(os.Environ()[:0:0], "PATH="+os.Getenv("PATH"), "HOME="+tm.dir, "TERM=xterm-256color")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("tmux %s: %v: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return out, nil
}

func (tm *tmuxTerm) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = tm.tmux(ctx, "kill-server")
	_ = os.RemoveAll(tm.dir)
}

// terminal returns the sandbox's terminal, starting it on first use.
func (t *Terminal) terminal(ctx context.Context) (*tmuxTerm, error) {
	if t.tty != nil {
		return t.tty, nil
	}
	if t.host.TerminalArgv == nil {
		return nil, fmt.Errorf("%s: %w: this sandbox has no terminal", t.host.Provider, errUnsupportedAction)
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		return nil, fmt.Errorf("%s: %w", t.host.Provider, ErrNoTmux)
	}
	dir, err := os.MkdirTemp("", "forkline-tty-")
	if err != nil {
		return nil, err
	}
	tm := &tmuxTerm{dir: dir, sock: filepath.Join(dir, "sock")}
	argv, env, wd := t.host.TerminalArgv(t.host.Mark())
	args := []string{"new-session", "-d", "-s", "t", "-x", strconv.Itoa(TerminalCols), "-y", strconv.Itoa(TerminalRows)}
	if wd != "" {
		args = append(args, "-c", wd)
	}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(args, "--")
	args = append(args, argv...)
	if _, err := tm.tmux(ctx, args...); err != nil {
		tm.close()
		return nil, fmt.Errorf("%s: starting the terminal: %w", t.host.Provider, err)
	}
	for _, o := range [][]string{{"status", "off"}, {"remain-on-exit", "on"}, {"history-limit", "10000"}} {
		if _, err := tm.tmux(ctx, "set-option", "-g", o[0], o[1]); err != nil {
			tm.close()
			return nil, fmt.Errorf("%s: starting the terminal: %w", t.host.Provider, err)
		}
	}
	if t.host.After != nil {
		pid, err := tm.tmux(ctx, "display-message", "-p", "-t", "t", "#{pane_pid}")
		if err == nil {
			var n int
			if n, err = strconv.Atoi(strings.TrimSpace(string(pid))); err == nil {
				err = t.host.After(n)
			}
		}
		if err != nil {
			tm.close()
			return nil, fmt.Errorf("%s: starting the terminal: %w", t.host.Provider, err)
		}
	}
	// Keys sent before the shell on the terminal reads them would be
	// echoed by the terminal and typed again later (docker exec -it sets
	// its terminal up only once attached): wait for a first screen (the
	// prompt) that stays put.
	if _, err := tm.settled(ctx, []string{"capture-pane", "-p", "-t", "t"}, true); err != nil {
		tm.close()
		return nil, fmt.Errorf("%s: starting the terminal: %w", t.host.Provider, err)
	}
	t.tty = tm
	return tm, nil
}

// settled captures the screen until it has not changed for settleQuiet
// (and, with nonEmpty, shows something), or settleMax passed.
func (tm *tmuxTerm) settled(ctx context.Context, args []string, nonEmpty bool) ([]byte, error) {
	var last []byte
	quiet := time.Now()
	limit := settleMax
	if nonEmpty {
		limit *= 2
	}
	deadline := time.Now().Add(limit)
	for {
		screen, err := tm.tmux(ctx, args...)
		if err != nil {
			return nil, err
		}
		switch {
		case !bytes.Equal(screen, last):
			last, quiet = screen, time.Now()
		case time.Now().After(deadline):
			return last, nil
		case time.Since(quiet) >= settleQuiet && (!nonEmpty || len(bytes.TrimSpace(screen)) > 0):
			return last, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

var errUnsupportedAction = errors.New("not supported")

// SendKeys sends a.Keys to the terminal the way tmux send-keys does with
// one argument: a tmux key name (Enter, C-c, Escape, Up, F1, M-x ...) is
// that key; anything else is typed as it is, a newline being Enter. The
// observation is empty; read_screen shows the effect.
func (t *Terminal) SendKeys(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tm, err := t.terminal(ctx)
	if err != nil {
		return t.termFailure(err)
	}
	if dead, code := tm.dead(ctx); dead {
		msg := fmt.Sprintf("the terminal's shell exited (status %d); nothing was sent", code)
		return Failure(runtime.ErrActionFail, msg), nil
	}
	if _, err := tm.tmux(ctx, "send-keys", "-t", "t", a.Keys); err != nil {
		return Failure(runtime.ErrActionFail, err.Error()), nil
	}
	return runtime.Observation{ExitCode: -1}, nil
}

// ReadScreen returns the terminal's visible text (and a.Scrollback lines
// above it) once it stopped changing for a moment (at most settleMax):
// rows without trailing spaces, trailing empty rows left out.
func (t *Terminal) ReadScreen(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tm, err := t.terminal(ctx)
	if err != nil {
		return t.termFailure(err)
	}
	args := []string{"capture-pane", "-p", "-t", "t"}
	if a.Scrollback > 0 {
		args = append(args, "-S", strconv.Itoa(-a.Scrollback))
	}
	last, err := tm.settled(ctx, args, false)
	if err != nil {
		if ctx.Err() != nil {
			return runtime.Observation{}, ctx.Err()
		}
		return Failure(runtime.ErrActionFail, err.Error()), nil
	}
	text := tidyScreen(last)
	return runtime.Observation{Output: text, OutputBytes: int64(len(text)), ExitCode: -1}, nil
}

func (t *Terminal) termFailure(err error) (runtime.Observation, error) {
	if errors.Is(err, errUnsupportedAction) || errors.Is(err, ErrNoTmux) {
		return Failure(runtime.ErrUnsupported, err.Error()), nil
	}
	return runtime.Observation{}, err
}

// dead reports whether the terminal's first process ended, and its status.
func (tm *tmuxTerm) dead(ctx context.Context) (bool, int) {
	out, err := tm.tmux(ctx, "display-message", "-p", "-t", "t", "#{pane_dead} #{pane_dead_status}")
	if err != nil {
		return false, 0
	}
	f := strings.Fields(string(out))
	if len(f) == 0 || f[0] != "1" {
		return false, 0
	}
	code := -1
	if len(f) > 1 {
		code, _ = strconv.Atoi(f[1])
	}
	return true, code
}

// tidyScreen drops trailing spaces of each row and trailing empty rows.
func tidyScreen(b []byte) []byte {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) == 0 {
		return []byte{}
	}
	return []byte(strings.Join(lines, "\n") + "\n")
}
