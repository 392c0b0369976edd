package providers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/runtime"
)

// ShellMode says how exec runs commands in a sandbox.
type ShellMode string

// The shell modes. Fresh (the default, also "") runs every command in a
// shell of its own: nothing but files carries from one command to the
// next. Persistent runs an episode's commands one after another in one
// long-lived shell, so the working directory, variables, functions and
// background jobs carry too.
const (
	ShellFresh      ShellMode = "fresh"
	ShellPersistent ShellMode = "persistent"
)

// ShellModes lists the modes by name.
func ShellModes() []ShellMode { return []ShellMode{ShellFresh, ShellPersistent} }

// ParseShellMode reads a mode name; "" is ShellFresh.
func ParseShellMode(s string) (ShellMode, error) {
	switch ShellMode(s) {
	case "", ShellFresh:
		return ShellFresh, nil
	case ShellPersistent:
		return ShellPersistent, nil
	}
	return "", fmt.Errorf("unknown shell mode %q (known: fresh, persistent)", s)
}

// ShellProc is a long-lived shell started by a ShellHost: /bin/sh reading
// commands from In, in the workspace, with the sandbox's environment, its
// stdout and stderr joined on Out.
type ShellProc struct {
	In  io.WriteCloser
	Out io.Reader
	// Kill ends the shell and every process it started, at once; pid is
	// the shell's process id as the shell sees it ($$).
	Kill func(pid int)
	// Exited is closed when the shell process ended (Out may stay open:
	// a background job holds it); Code is then its exit status (-1 when
	// it is not known).
	Exited <-chan struct{}
	Code   func() int
	// Err, when set, says after Exited whether the connection ended for
	// another reason than the shell's end (the sandbox died): that error
	// is then Exec's. nil Err, or a nil error, means the shell ended.
	Err func() error
	// Detach, when set, lets go of a shell that lives on in the sandbox
	// without ending it (a provider whose sandbox is checkpointed and
	// restored with its processes): the next Start reaches the same shell.
	Detach func()
}

// ShellHost is what a sandbox gives its Terminal.
type ShellHost struct {
	Provider string // for messages
	// Start starts a shell whose processes carry mark in FORKLINE_EXEC.
	Start func(ctx context.Context, mark string) (*ShellProc, error)
	// KillMarked kills every process whose FORKLINE_EXEC is mark.
	KillMarked func(ctx context.Context, mark string)
	// Mark returns a fresh mark for the next command.
	Mark func() string
	// OutputCap bounds the bytes kept of one command's output.
	OutputCap int
	// TerminalArgv is the host command that runs an interactive shell in
	// the sandbox on the terminal it is started on, with its environment
	// (see Terminal); nil when the sandbox has no terminal. After starts,
	// the terminal's first process is told by its host pid (local puts it
	// under the sandbox's process limit); nil when nothing is needed.
	TerminalArgv func(mark string) (argv, env []string, dir string)
	After        func(pid int) error
}

// ShellGrace is how long a persistent shell has to report after its timed
// out command's processes were killed before the shell itself is killed.
var ShellGrace = 2 * time.Second

// Terminal holds what a shell-only sandbox keeps between actions: the
// persistent shell (in ShellPersistent mode) and the pseudo-terminal of
// send_keys and read_screen. Both start on first use and live as long as
// the sandbox: a fork or a branch of it gets a Terminal of its own, so on
// providers that fork files only (local, docker) it starts new shells —
// the files carry, the shell's state (directory, variables, jobs, the
// program on the terminal) does not. On a provider whose shell lives in
// the sandbox and whose checkpoints hold its processes (gvisor), the
// fork's Terminal reaches the checkpointed shell (Detach, ShellProc.Detach)
// and the shell goes on in every fork.
type Terminal struct {
	host ShellHost
	mode ShellMode

	mu  sync.Mutex
	sh  *pshell
	tty *tmuxTerm
	// held is what a detached shell printed after its last frame: the
	// next command's output begins with it (see Detach).
	held []byte
}

// NewTerminal returns the Terminal of a sandbox in mode.
func NewTerminal(h ShellHost, mode ShellMode) *Terminal {
	if mode == "" {
		mode = ShellFresh
	}
	return &Terminal{host: h, mode: mode}
}

// Detach lets go of the persistent shell without ending it, when its
// ShellProc can (ShellProc.Detach), else ends it: the next Exec starts the
// shell again, which on a provider whose shell lives on in the sandbox is
// the same shell, with its state. Output the shell printed after its last
// frame comes with this Terminal's next command, as it would have without
// the detach; a fork's Terminal does not have it.
func (t *Terminal) Detach() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sh == nil {
		return
	}
	if t.sh.proc.Detach != nil {
		t.sh.proc.Detach()
		held := append(t.held, t.sh.carry...)
		// The connection is gone: what was still on its way ends soon.
		drain := time.After(ShellGrace)
	read:
		for {
			select {
			case b, ok := <-t.sh.chunk:
				if !ok {
					break read
				}
				held = append(held, b...)
			case <-drain:
				go func(ch chan []byte) {
					for range ch {
					}
				}(t.sh.chunk)
				break read
			}
		}
		t.held = held
	} else {
		t.sh.kill()
	}
	t.sh = nil
}

// Persistent reports whether exec runs in the persistent shell.
func (t *Terminal) Persistent() bool { return t != nil && t.mode == ShellPersistent }

// Close ends the shell and the terminal.
func (t *Terminal) Close() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sh != nil {
		t.sh.kill()
		t.sh = nil
	}
	if t.tty != nil {
		t.tty.close()
		t.tty = nil
	}
}

// pshell is one running persistent shell.
type pshell struct {
	proc  *ShellProc
	pid   int
	tag   string        // random, so no output can forge a frame
	n     int           // commands written
	chunk chan []byte   // what the shell printed, closed at its end
	carry []byte        // printed after the last frame (a background job's output)
	ended chan struct{} // closed when chunk is
}

// frame is what ends a command's output: the shell prints it after the
// command, with the command's exit status and a newline.
func (p *pshell) frame(n int) []byte { return []byte(p.tag + ":" + strconv.Itoa(n) + ":") }

// Exec runs a.Cmd in the persistent shell, starting one when there is
// none. The command runs through `command eval` (a syntax error is its
// exit status 2, not the shell's end) with stdin /dev/null, and the shell
// then prints a frame: a random tag, the command's number and its exit
// status. Output is every byte before the frame, exactly; the frame is never
// part of it. Bytes a background job prints between commands come with
// the next command's output, as on a terminal.
//
// A command still running at its timeout has its processes killed (those
// marked with its FORKLINE_EXEC; background jobs of earlier commands are
// not); when the shell then reports within ShellGrace it goes on. When it
// does not (the shell itself is busy: a builtin loop, a read), the shell
// is killed and the observation says the next command starts a new one.
// A shell that exits (exit, set -e, a signal) is the observation of the
// command that ended it, with its status and the same note.
func (t *Terminal) Exec(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := NewCapBuffer(t.host.OutputCap)
	if t.sh == nil {
		sh, err := t.start(ctx)
		if err != nil {
			return runtime.Observation{}, err
		}
		t.sh = sh
	}
	sh := t.sh
	timeout := DefaultExecTimeout
	if a.TimeoutMS > 0 {
		timeout = time.Duration(a.TimeoutMS) * time.Millisecond
	}
	mark := t.host.Mark()
	rc, state, err := sh.run(ctx, "FORKLINE_EXEC="+shellQuote(mark)+"; export FORKLINE_EXEC\n", a.Cmd, out, timeout, func() {
		t.host.KillMarked(context.WithoutCancel(ctx), mark)
	})
	if err != nil {
		sh.kill()
		t.sh = nil
		return runtime.Observation{}, err
	}
	obs := runtime.Observation{ExitCode: rc}
	lost := "; the next command starts a new shell: the working directory, variables and background jobs are lost]\n"
	switch state {
	case frameSeen:
		if rc != 0 {
			obs.Error, obs.ErrorKind = true, runtime.ErrExitStatus
		}
	case frameTimedOut:
		_, _ = fmt.Fprintf(out, "\n[forkline: the command timed out after %s; its processes were killed; the shell goes on]\n", timeout)
		obs.ExitCode, obs.Error, obs.ErrorKind, obs.TimedOut = -1, true, runtime.ErrTimeout, true
	case shellBusy:
		sh.kill()
		t.sh = nil
		_, _ = fmt.Fprintf(out, "\n[forkline: the command timed out after %s and the shell itself did not come back (a builtin loop or read holds it), so the shell was killed"+lost, timeout)
		obs.ExitCode, obs.Error, obs.ErrorKind, obs.TimedOut = -1, true, runtime.ErrTimeout, true
	case shellEnded:
		<-sh.proc.Exited
		if sh.proc.Err != nil {
			if err := sh.proc.Err(); err != nil {
				sh.kill()
				t.sh = nil
				return runtime.Observation{}, err
			}
		}
		code := sh.proc.Code()
		sh.kill()
		t.sh = nil
		_, _ = fmt.Fprintf(out, "\n[forkline: the shell exited with status %d"+lost, code)
		obs.ExitCode, obs.Error, obs.ErrorKind = code, true, runtime.ErrExitStatus
		if code == 0 {
			obs.ErrorKind = runtime.ErrActionFail
		}
	}
	obs.Output, obs.OutputBytes, obs.Truncated = out.Bytes(), out.Total(), out.Truncated()
	return obs, nil
}

func (t *Terminal) start(ctx context.Context) (*pshell, error) {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	proc, err := t.host.Start(ctx, t.host.Mark())
	if err != nil {
		return nil, err
	}
	sh := &pshell{proc: proc, tag: "forkline-" + hex.EncodeToString(raw[:]), chunk: make(chan []byte, 16), ended: make(chan struct{})}
	go func() {
		defer close(sh.chunk)
		// One read buffer for the shell's life; each chunk is a copy of
		// what was read (a step's few bytes, not a fresh 32 KiB each read).
		b := make([]byte, 32<<10)
		for {
			n, err := proc.Out.Read(b)
			if n > 0 {
				sh.chunk <- append([]byte(nil), b[:n]...)
			}
			if err != nil {
				return
			}
		}
	}()
	// The first frame carries the shell's pid, for Kill. A shell that was
	// there already (Detach) may have printed before it: that output comes
	// with the next command's.
	var pid bytes.Buffer
	_, state, err := sh.run(ctx, "", "printf 'pid:%d' $$", &pid, 30*time.Second, func() {})
	if err == nil && state == shellEnded && proc.Err != nil {
		<-proc.Exited
		err = proc.Err()
	}
	if err == nil && state != frameSeen {
		err = fmt.Errorf("%s: the persistent shell did not start (%s)", t.host.Provider, strings.TrimSpace(pid.String()))
	}
	if err == nil {
		said := pid.String()
		i := strings.LastIndex(said, "pid:")
		if i < 0 {
			i = len(said)
		}
		sh.carry = append(append(t.held, said[:i]...), sh.carry...)
		t.held = nil
		sh.pid, err = strconv.Atoi(strings.TrimPrefix(said[i:], "pid:"))
	}
	if err != nil {
		sh.kill()
		return nil, err
	}
	return sh, nil
}

type frameState int

const (
	frameSeen     frameState = iota // the command ended and the shell reported
	frameTimedOut                   // the same, after its timeout killed it
	shellBusy                       // timed out and the shell never reported
	shellEnded                      // the shell's output ended before the frame
)

// run writes prefix, cmd (quoted for command eval) and the frame's printf
// to the shell, copies what the shell prints to out until the frame, and
// returns the command's exit status. At timeout it calls interrupt and
// waits ShellGrace more. Errors are ctx's or a write to a shell that is
// gone being something else than its end.
func (sh *pshell) run(ctx context.Context, prefix, cmd string, out io.Writer, timeout time.Duration, interrupt func()) (int, frameState, error) {
	sh.n++
	fr := sh.frame(sh.n)
	script := prefix + "command eval " + shellQuote(cmd) + " </dev/null 2>&1\nprintf '%s%d\\n' '" + string(fr) + "' \"$?\"\n"
	// A write to a shell that is gone fails; its output's end says how.
	_, _ = io.WriteString(sh.proc.In, script)
	pending := sh.carry
	sh.carry = nil
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	timedOut := false
	for {
		if i := bytes.Index(pending, fr); i >= 0 {
			if j := bytes.IndexByte(pending[i+len(fr):], '\n'); j >= 0 {
				_, _ = out.Write(pending[:i])
				rc, _ := strconv.Atoi(string(pending[i+len(fr) : i+len(fr)+j]))
				sh.carry = append([]byte(nil), pending[i+len(fr)+j+1:]...)
				if timedOut {
					return rc, frameTimedOut, nil
				}
				return rc, frameSeen, nil
			}
		} else if keep := len(fr) - 1; len(pending) > keep {
			// What cannot be the start of a frame is output.
			_, _ = out.Write(pending[:len(pending)-keep])
			pending = append(pending[:0:0], pending[len(pending)-keep:]...)
		}
		select {
		case b, ok := <-sh.chunk:
			if !ok {
				_, _ = out.Write(pending)
				return -1, shellEnded, nil
			}
			pending = append(pending, b...)
		case <-sh.proc.Exited:
			// What it printed last may still be in the pipe.
			for {
				select {
				case b, ok := <-sh.chunk:
					if ok {
						pending = append(pending, b...)
						continue
					}
				case <-time.After(50 * time.Millisecond):
				}
				break
			}
			if i := bytes.Index(pending, fr); i >= 0 && bytes.IndexByte(pending[i:], '\n') >= 0 {
				continue // it reported, then ended: the frame is read above
			}
			_, _ = out.Write(pending)
			return -1, shellEnded, nil
		case <-timer.C:
			if timedOut {
				_, _ = out.Write(pending)
				return -1, shellBusy, nil
			}
			timedOut = true
			interrupt()
			timer.Reset(ShellGrace)
		case <-ctx.Done():
			return -1, 0, ctx.Err()
		}
	}
}

// kill ends the shell and drains its output so its reader ends.
func (sh *pshell) kill() {
	sh.proc.Kill(sh.pid)
	_ = sh.proc.In.Close()
	go func() {
		for range sh.chunk {
		}
	}()
}

// shellQuote quotes s as one word for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
