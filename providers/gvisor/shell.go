package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/forkline/forkline/providers"
)

// The persistent shell (Spec.Shell = ShellPersistent) lives in the sandbox
// with everything it needs to be reached, so that a checkpoint holds it
// and every restore of the checkpoint — the sandbox itself after its
// checkpoint, and each fork — goes on with it: the same process, its
// directory, variables, functions and background jobs.
//
// Decision: the shell's channel is a set of FIFOs in the sandbox's own
// files (shellDir), not a runsc exec's stdio. A runsc exec's stdin and
// stdout are host pipes handed to gVisor's kernel as host descriptors; a
// restore re-creates the process but not the host end of its pipes, so a
// shell reading the stdin of the exec that started it would read nothing
// in a fork, and write its output nowhere. Here a keeper process holds
// the shell (sh reading shellDir/in, writing shellDir/out, both opened
// read-write so that neither ever sees an end of file when nobody is
// connected), and the host connects to it and lets go of it again:
//
//   - attachScript, run by a long-lived runsc exec, starts the keeper and
//     its shell when there is none (or the last one ended), then copies
//     shellDir/out to its stdout (the host's ShellProc.Out) until the
//     keeper ends, and reports the shell's exit status on its stderr;
//   - each command's script is written into shellDir/in by a short runsc
//     exec (ShellProc.In), with the script on its stdin (no argv limit);
//   - before a checkpoint the sandbox lets go of the connection
//     (Terminal.Detach: the attaching processes are killed, so no image
//     holds a process whose stdio is a host pipe), and the next command,
//     in the restored sandbox or in a fork, attaches again.
//
// Output a background job prints while nobody is connected waits in the
// FIFO (a full FIFO blocks the job until the next command reads it), and
// comes with the next command's output, as between commands.
const shellDir = "/.forkline-shell"

// keeperScript ($1 the directory, $2 the shell's mark) holds fd 9 on
// shellDir/alive, so that a reader of it sees its end when the keeper
// ends, runs the shell with shellDir/in and shellDir/out, and writes its
// exit status.
const keeperScript = `exec 9<>"$1/alive"
echo $$ >"$1/keeper.new" && mv "$1/keeper.new" "$1/keeper"
FORKLINE_EXEC="$2" sh 0<>"$1/in" 1<>"$1/out" 2>&1 9>&-
echo $? >"$1/status"
`

// attachScript ($1 the directory, $2 the mark of a new shell, $3
// keeperScript) ends an earlier connection (one a checkpoint cut), starts
// a shell when none runs, and copies its output to stdout until the
// keeper ends. It says on stderr
//
//	forkline-shell-ready      connected: the shell reads its FIFO
//	forkline-shell-exit RC    the shell ended with RC (-1: unknown)
const attachScript = `d=$1
if [ -f "$d/attach" ]; then kill -KILL $(cat "$d/attach") 2>/dev/null; rm -f "$d/attach"; fi
k=
if [ -f "$d/keeper" ] && [ ! -e "$d/status" ]; then
  k=$(cat "$d/keeper")
  kill -0 "$k" 2>/dev/null || k=
fi
if [ -z "$k" ]; then
  rm -rf "$d"
  if ! { mkdir -m 700 "$d" && mkfifo "$d/in" "$d/out" "$d/alive"; }; then
    echo "forkline-shell-error cannot make $d" >&2; exit 125
  fi
  printf '%s\n' "$2" >"$d/mark"
  setsid sh -c "$3" forkline-keeper "$d" "$2" </dev/null >/dev/null 2>&1 &
  i=0
  while [ ! -s "$d/keeper" ]; do
    i=$((i+1))
    if [ $i -gt 3000 ]; then echo "forkline-shell-error the shell did not start" >&2; exit 125; fi
    sleep 0.01
  done
fi
cat "$d/out" &
r=$!
cat "$d/alive" >/dev/null &
a=$!
echo "$$ $r $a" >"$d/attach"
echo forkline-shell-ready >&2
wait "$a"
sleep 0.2
kill -KILL "$r" 2>/dev/null
rm -f "$d/attach"
echo "forkline-shell-exit $(cat "$d/status" 2>/dev/null || echo -1)" >&2
`

// deliverScript writes its stdin (a command's script) into the shell's
// FIFO, opened read-write so that it never waits for a reader.
const deliverScript = `[ -p "$1/in" ] || { echo "no shell at $1" >&2; exit 3; }
cat 1<>"$1/in"`

// detachScript kills the processes of the current connection.
const detachScript = `if [ -f "$1/attach" ]; then kill -KILL $(cat "$1/attach") 2>/dev/null; rm -f "$1/attach"; fi`

// shellKillScript ($1 the directory, $2 the shell's pid, $3
// killMarkedScript) kills the shell and every process still marked with
// its mark, and waits (at most 5 s) for its keeper to record its end, so
// that the next attach starts a new shell.
const shellKillScript = `d=$1
kill -KILL "$2" 2>/dev/null
m=$(cat "$d/mark" 2>/dev/null)
if [ -n "$m" ]; then eval "$3"; fi
k=$(cat "$d/keeper" 2>/dev/null)
i=0
while [ -n "$k" ] && [ ! -e "$d/status" ] && kill -0 "$k" 2>/dev/null && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
`

// shellCallTimeout bounds one of the short runsc execs of the shell.
const shellCallTimeout = time.Minute

// shellHost gives the sandbox's Terminal its persistent shell. There is no
// terminal (send_keys, read_screen) on this provider.
func (s *sandbox) shellHost() providers.ShellHost {
	return providers.ShellHost{
		Provider:   Name,
		OutputCap:  s.spec.outputCap,
		Mark:       func() string { return s.id + "." + strconv.FormatInt(s.execs.Add(1), 10) },
		KillMarked: s.killMarked,
		Start:      s.attachShell,
	}
}

// killMarked kills every process marked mark in the sandbox.
func (s *sandbox) killMarked(ctx context.Context, mark string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shellCallTimeout)
	defer cancel()
	_, _ = s.run(kctx, []string{"sh", "-c", `m=$1; eval "$2"`, "forkline-kill", mark, killMarkedScript},
		nil, nil, io.Discard, io.Discard, shellCallTimeout)
}

// shellCall runs one of the shell's short scripts with stdin.
func (s *sandbox) shellCall(ctx context.Context, stdin io.Reader, script string, args ...string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shellCallTimeout)
	defer cancel()
	var diag bytes.Buffer
	argv := append([]string{"sh", "-c", script, "forkline-shell", shellDir}, args...)
	code, err := s.run(cctx, argv, nil, stdin, io.Discard, &diag, shellCallTimeout)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("gvisor: persistent shell of %s: exit %d: %s", s.id, code, strings.TrimSpace(diag.String()))
	}
	return nil
}

// attachShell connects to the sandbox's shell, starting it (marked mark)
// when there is none: the ShellProc's Out is what the shell prints, its In
// delivers scripts to it.
func (s *sandbox) attachShell(ctx context.Context, mark string) (*providers.ShellProc, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	ctx = context.WithoutCancel(ctx) // the connection outlives the command that made it
	args := s.p.rs.base()
	if s.spec.netRaw() {
		args = append(args, "--net-raw")
	}
	args = append(args, "exec", "--cwd", s.spec.fs.workdir, s.cidNow(), "sh", "-c", attachScript, "forkline-attach", shellDir, mark, keeperScript)
	cmd := exec.Command(s.p.rs.path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	diag := &lockedBuffer{ready: make(chan struct{})}
	ready := false
	cmd.Stdout, cmd.Stderr = outW, diag
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		_ = outR.Close()
		_ = outW.Close()
		return nil, fmt.Errorf("gvisor: runsc exec (persistent shell): %w", err)
	}
	_ = outW.Close()
	exited := make(chan struct{})
	defer func() {
		if !ready {
			_ = cmd.Process.Kill()
		}
	}()
	go func() {
		_ = cmd.Wait()
		// What the shell printed is in the pipe by now; a descriptor the
		// sandbox still holds must not keep the reader open.
		_ = outR.SetReadDeadline(time.Now().Add(drainGrace))
		close(exited)
	}()
	select {
	case <-diag.ready:
		ready = true
	case <-exited:
		return nil, s.closedOr(fmt.Errorf("gvisor: the persistent shell of %s did not start: %s", s.id, lastLine([]byte(diag.String()))))
	case <-time.After(shellCallTimeout):
		return nil, fmt.Errorf("gvisor: the persistent shell of %s did not start in %s: %s", s.id, shellCallTimeout, lastLine([]byte(diag.String())))
	}
	var detached sync.Once
	var isDetached atomic.Bool
	letGo := func(kill bool, pid int) {
		detached.Do(func() {
			isDetached.Store(!kill)
			if s.checkOpen() == nil {
				if kill {
					_ = s.shellCall(ctx, nil, shellKillScript, strconv.Itoa(pid), killMarkedScript)
				} else {
					_ = s.shellCall(ctx, nil, detachScript)
				}
			}
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	code := func() int {
		<-exited
		for _, line := range strings.Split(diag.String(), "\n") {
			if rc, ok := strings.CutPrefix(line, "forkline-shell-exit "); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(rc)); err == nil {
					return n
				}
			}
		}
		return -1
	}
	return &providers.ShellProc{
		In:     shellInput{s: s, ctx: ctx},
		Out:    outR,
		Kill:   func(pid int) { letGo(true, pid) },
		Exited: exited,
		Code:   code,
		Err: func() error {
			<-exited
			said := diag.String()
			if isDetached.Load() || strings.Contains(said, "forkline-shell-exit ") {
				return nil
			}
			if derr := s.deadErr(ctx, "the persistent shell", errors.New(strings.TrimSpace(said))); derr != nil {
				return derr
			}
			return fmt.Errorf("gvisor: the persistent shell's connection in %s ended without its report: %s", s.id, lastLine([]byte(said)))
		},
		Detach: func() { letGo(false, 0) },
	}, nil
}

// shellInput delivers what is written to it to the shell, one runsc exec
// per write (the Terminal writes a command's whole script at once).
type shellInput struct {
	s   *sandbox
	ctx context.Context
}

func (in shellInput) Write(p []byte) (int, error) {
	if err := in.s.shellCall(in.ctx, bytes.NewReader(p), deliverScript); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (in shellInput) Close() error { return nil }

// lockedBuffer is a bytes.Buffer written by os/exec's copier and read by
// others.
type lockedBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	ready chan struct{} // closed at the line "forkline-shell-ready"
	seen  bool
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > diagCap {
		return len(p), nil
	}
	n, err := l.b.Write(p)
	if !l.seen && bytes.Contains(l.b.Bytes(), []byte("forkline-shell-ready\n")) {
		l.seen = true
		close(l.ready)
	}
	return n, err
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
