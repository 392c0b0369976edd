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
	"syscall"
	"time"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// execWrapper runs inside the sandbox as
//
//	sh -c 'eval "$FORKLINE_EXEC_WRAPPER"' forkline-exec SECONDS CMD MARK
//
// It is the docker provider's wrapper (providers/docker, execWrapper) with
// the output always on the exec's own stdout, and the same reasons: runsc
// exec forwards no signal to a process without a terminal and killing the
// runsc exec process leaves its command running, so the timeout is enforced
// inside the sandbox. CMD runs in a session of its own with stdin
// /dev/null, stderr joined to stdout and FORKLINE_EXEC=MARK in its
// environment; a timer in another session kills CMD's group with SIGKILL
// after SECONDS, then every process still marked MARK (those that left the
// group). Every process the timer needs exists before CMD runs, so a fork
// bomb at the pids limit cannot stop it. It reports on stderr:
//
//	forkline-pgid N      the process group of CMD, first
//	forkline-timeout     the timer fired (before it kills)
//	forkline-exit RC     CMD ended with RC (128+9 after the timer's kill)
//
// MARK holds the sandbox's id, so a process a golden's start command left
// running, which every fork restores with the golden's mark, is never
// taken for one of a fork's own commands.
const execWrapper = `k=$FORKLINE_KILL_MARKED
unset FORKLINE_EXEC_WRAPPER FORKLINE_KILL_MARKED
FORKLINE_EXEC="$3" setsid sh -c 'kill -STOP $$; exec sh -c "$1" forkline-cmd' forkline-cmd "$2" </dev/null 2>&1 &
p=$!
while read -r _ _ st _ <"/proc/$p/stat" && [ "$st" != T ]; do :; done 2>/dev/null
echo "forkline-pgid $p" >&2
killer='kill -KILL "-$1"; m=$2; eval "$3"'
setsid sh -c 'sleep "$1" & s=$!; kill -CONT "$2"; wait "$s" && trap "" TERM && echo forkline-timeout && kill -KILL "-$2" 2>/dev/null; setsid sh -c "$5" forkline-killer "$2" "$3" "$4" </dev/null >/dev/null 2>&1' forkline-timer "$1" "$p" "$3" "$k" "$killer" </dev/null >&2 2>/dev/null &
w=$!
wait "$p"; rc=$?
kill -TERM "$w" 2>/dev/null; kill -TERM "-$w" 2>/dev/null
wait "$w" 2>/dev/null
echo "forkline-exit $rc" >&2
exit "$rc"
`

// killMarkedScript kills, with SIGKILL, every process in the sandbox whose
// environment holds FORKLINE_EXEC=$m, scanning until a scan finds nobody
// (at most 8 times). It needs tr and grep.
const killMarkedScript = `want="FORKLINE_EXEC=$m"
for round in 1 2 3 4 5 6 7 8; do
  hit=
  for f in /proc/[0-9]*/environ; do
    if tr '\0' '\n' <"$f" 2>/dev/null | grep -qxF -- "$want"; then
      d=${f%/environ}
      kill -KILL "${d#/proc/}" 2>/dev/null && hit=1
    fi
  done
  [ -z "$hit" ] && break
done
`

// execBackstop is how long after its own timeout a command may still run
// before the provider gives up on it: the in-sandbox timer failed, and the
// sandbox is declared broken.
const execBackstop = 10 * time.Second

// drainGrace is how long output is still read once the command's wrapper
// has exited. Everything the command wrote is in the pipe by then; a
// background job it left holding the pipe must not keep the action open.
const drainGrace = 100 * time.Millisecond

// diagCap bounds what is kept of the wrapper's own stderr.
const diagCap = 16 << 10

// exec runs a.Cmd under the wrapper and turns the result into an
// observation.
func (s *sandbox) exec(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	timeout := providers.DefaultExecTimeout
	if a.TimeoutMS > 0 {
		timeout = time.Duration(a.TimeoutMS) * time.Millisecond
	}
	ms := timeout.Milliseconds()
	secs := fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
	out := providers.NewCapBuffer(s.spec.outputCap)
	diag := providers.NewCapBuffer(diagCap)
	mark := s.id + "." + strconv.FormatInt(s.execs.Add(1), 10)
	cmd := a.Cmd
	if len(cmd) > inlineCommandBytes {
		file, err := s.commandFile(ctx, mark, cmd)
		if err != nil {
			return runtime.Observation{}, err
		}
		defer s.removeCommandFile(ctx, file)
		cmd = ". " + file
	}
	code, err := s.run(ctx, []string{"sh", "-c", `eval "$FORKLINE_EXEC_WRAPPER"`, "forkline-exec", secs, cmd, mark},
		[]string{"FORKLINE_EXEC_WRAPPER=" + execWrapper, "FORKLINE_KILL_MARKED=" + killMarkedScript}, nil, out, diag, timeout+execBackstop)
	rep := parseDiag(diag.Bytes())
	if err != nil {
		if rep.pgid > 0 {
			s.killGroup(ctx, rep.pgid, mark)
		}
		return runtime.Observation{}, err
	}
	obs := runtime.Observation{Output: out.Bytes(), OutputBytes: out.Total(), Truncated: out.Truncated()}
	switch {
	case rep.timedOut:
		obs.ExitCode, obs.Error, obs.ErrorKind, obs.TimedOut = -1, true, runtime.ErrTimeout, true
	case rep.exited:
		obs.ExitCode = rep.exitCode
		if obs.ExitCode != 0 {
			obs.Error, obs.ErrorKind = true, runtime.ErrExitStatus
		}
	default:
		// The wrapper ended without a word: runsc could not run it (the
		// sandbox is gone), or something killed it.
		if derr := s.deadErr(ctx, "a command", errors.New(strings.TrimSpace(string(diag.Bytes())))); derr != nil {
			return runtime.Observation{}, derr
		}
		if rep.pgid > 0 {
			s.killGroup(ctx, rep.pgid, mark)
		}
		msg := fmt.Sprintf("\n[forkline: the command's wrapper ended with exit code %d without reporting: %s]\n",
			code, strings.TrimSpace(string(diag.Bytes())))
		_, _ = out.Write([]byte(msg))
		obs = runtime.Observation{Output: out.Bytes(), OutputBytes: out.Total(), Truncated: out.Truncated(),
			ExitCode: code, Error: true, ErrorKind: runtime.ErrActionFail}
	}
	return obs, nil
}

// diagReport is what the wrapper said on its stderr.
type diagReport struct {
	pgid     int
	exited   bool
	exitCode int
	timedOut bool
}

func parseDiag(b []byte) diagReport {
	var r diagReport
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "forkline-pgid":
			r.pgid, _ = strconv.Atoi(f[1])
		case len(f) == 2 && f[0] == "forkline-exit":
			if n, err := strconv.Atoi(f[1]); err == nil {
				r.exited, r.exitCode = true, n
			}
		case len(f) == 1 && f[0] == "forkline-timeout":
			r.timedOut = true
		}
	}
	return r
}

// run executes argv in the sandbox with runsc exec (working directory the
// workspace, env added to the sandbox's), stdin from stdin (/dev/null when
// nil), copying its stdout to stdout and its stderr to stderr, and returns
// runsc exec's exit code. ctx cancels it (the runsc exec process is killed;
// the command in the sandbox is the caller's to kill); limit is a host-side
// deadline on the whole exec. Errors mean the sandbox failed (or ctx
// ended), never the command.
func (s *sandbox) run(ctx context.Context, argv, env []string, stdin io.Reader, stdout, stderr io.Writer, limit time.Duration) (int, error) {
	args := s.p.rs.base()
	if s.spec.netRaw() {
		args = append(args, "--net-raw") // else runsc exec strips NET_RAW
	}
	args = append(args, "exec", "--cwd", s.spec.fs.workdir)
	for _, kv := range env {
		args = append(args, "--env", kv)
	}
	args = append(args, s.cidNow())
	args = append(args, argv...)
	cmd := exec.Command(s.p.rs.path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if stdout == stderr {
		// One writer for both streams (as os/exec allows): the two drains
		// below take turns at it.
		lw := &lockedWriter{w: stdout}
		stdout, stderr = lw, lw
	}
	var drains sync.WaitGroup
	var readers, writers []*os.File
	for _, w := range []io.Writer{stdout, stderr} {
		r, pw, err := os.Pipe()
		if err != nil {
			return 0, fmt.Errorf("gvisor: %w", err)
		}
		defer r.Close()
		defer pw.Close()
		readers, writers = append(readers, r), append(writers, pw)
		drains.Go(func() { _, _ = io.Copy(w, r) })
	}
	cmd.Stdout, cmd.Stderr = writers[0], writers[1]
	if err := cmd.Start(); err != nil {
		for _, r := range readers {
			_ = r.SetReadDeadline(time.Now())
		}
		drains.Wait()
		return 0, fmt.Errorf("gvisor: runsc exec: %w", err)
	}
	// The sandbox holds the write ends now; ours would keep the reads open.
	for _, w := range writers {
		_ = w.Close()
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	backstop := time.NewTimer(limit)
	defer backstop.Stop()
	var werr error
	select {
	case werr = <-waited:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-waited
		for _, r := range readers {
			_ = r.SetReadDeadline(time.Now())
		}
		drains.Wait()
		return 0, ctx.Err()
	case <-backstop.C:
		_ = cmd.Process.Kill()
		<-waited
		for _, r := range readers {
			_ = r.SetReadDeadline(time.Now())
		}
		drains.Wait()
		if derr := s.deadErr(ctx, "a command", errors.New("it ran past its deadline")); derr != nil {
			return 0, derr
		}
		return 0, fmt.Errorf("%w: a command in %s was still running %s after its deadline: the in-sandbox timeout failed; the sandbox is unusable", ErrSandboxDied, s.id, execBackstop)
	}
	deadline := time.Now().Add(drainGrace)
	for _, r := range readers {
		_ = r.SetReadDeadline(deadline)
	}
	drains.Wait()
	code := 0
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			return 0, fmt.Errorf("gvisor: runsc exec: %w", werr)
		}
		code = ee.ExitCode()
	}
	return code, nil
}

// killGroup kills process group pgid in the sandbox and every process
// marked with mark, best effort, with a context detached from ctx (which
// may be the reason for the kill).
func (s *sandbox) killGroup(ctx context.Context, pgid int, mark string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, _ = s.run(kctx, []string{"sh", "-c", `kill -KILL "-$1"; m=$2; eval "$3"`, "forkline-kill", strconv.Itoa(pgid), mark, killMarkedScript},
		nil, nil, io.Discard, io.Discard, 30*time.Second)
}

// inlineCommandBytes is the longest command passed to the wrapper as an
// argument, as on docker: Linux caps one execve argument at 128 KiB, and
// runsc exec passes the command on as one. A longer one (a model's long
// heredoc) is written into the sandbox as a file that the shell sources:
// "." reads it in the same shell, so $0, the arguments and the exit status
// are those of a short command.
const inlineCommandBytes = 32 << 10

// commandFile writes cmd into the sandbox as /.forkline-cmd-MARK.sh
// (through a runsc exec's stdin, so no argument carries it) and returns
// its path.
func (s *sandbox) commandFile(ctx context.Context, mark, cmd string) (string, error) {
	file := "/.forkline-cmd-" + mark + ".sh"
	var diag bytes.Buffer
	code, err := s.run(ctx, []string{"sh", "-c", `umask 022; cat > "$1"`, "forkline-cmd", file}, nil, strings.NewReader(cmd), io.Discard, &diag, fileTimeout)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return "", fmt.Errorf("gvisor: exec: writing a long command to %s: exit %d: %s", file, code, strings.TrimSpace(diag.String()))
	}
	return file, nil
}

// lockedWriter lets two goroutines write to one writer in turn.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// removeCommandFile removes a command file once its command ended, so
// that no checkpoint holds it.
func (s *sandbox) removeCommandFile(ctx context.Context, file string) {
	var out bytes.Buffer
	_, _ = s.run(context.WithoutCancel(ctx), []string{"rm", "-f", "--", file}, nil, nil, &out, &out, execBackstop)
}
