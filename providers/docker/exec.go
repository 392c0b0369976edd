package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// execWrapper runs inside the container as
//
//	sh -c 'eval "$FORKLINE_EXEC_WRAPPER"' forkline-exec SECONDS CMD MARK FIFO GATE
//
// with the script (and killMarkedScript) in the environment rather than in
// the arguments, so a ps in the sandbox shows the command, not the script;
// the script unsets both variables before it starts CMD.
//
// It starts CMD in a session (and so a process group) of its own, with
// stdin /dev/null, stdout going to FIFO (the exec's stdout when FIFO is
// empty or cannot be opened; see output.go), stderr joined to stdout and
// FORKLINE_EXEC=MARK in its environment, and a timer in another session that, after SECONDS, kills
// CMD's whole group with SIGKILL and then every process still marked MARK:
// the ones that left the group with setsid or a double fork. Docker has no
// API to kill an exec, and closing the stream does not stop it, so the
// timeout has to be enforced in the container. The wrapper and its timer
// report on the exec's stderr, which the provider reads apart from the
// command's output:
//
//	forkline-pgid N      the process group of CMD, first
//	forkline-timeout     the timer fired (it says so before it kills)
//	forkline-exit RC     CMD ended with RC (128+9 after the timer's kill).
//
// A command may fill the sandbox's pids limit at once (a fork bomb), after
// which nothing in the sandbox can fork. So every process the timeout needs
// exists before CMD runs: CMD's shell waits at a gate before it execs CMD,
// and the timer starts its sleep and only then opens the gate. The gate is
// GATE, a FIFO the provider made next to the output FIFO: CMD's shell
// blocks reading it (read, a builtin) and the timer writes a line into it
// (echo, a builtin); the wrapper holds it open read-write from before CMD's
// shell starts until CMD ends, so neither open ever waits for the other
// side and the line cannot be lost. Without a FIFO (GATE empty or not
// openable: the output goes through the exec stream) CMD's shell stops
// itself instead (kill -STOP $$, a builtin), the wrapper waits until /proc
// says it is stopped, and the timer lets it go on with SIGCONT. That wait
// is a busy loop, which under CPU contention burns as much as the stop
// takes to be scheduled (BenchmarkShellCPU measured tens of milliseconds of
// the container's CPU per exec), so it is only the fallback. When the timer fires it kills CMD's group with the builtin
// kill, which needs no fork either, then ignores SIGTERM and runs the scan
// for marked processes (which forks) in a session of its own. When CMD
// ends, the wrapper sends SIGTERM to the timer, pid first, then group: a
// timer still sleeping dies with its sleep, so none survives to hold the
// exec's stream open; one that fired finishes its kill and scan, and the
// wrapper waits for it. After CMD starts the wrapper itself uses builtins
// only.
//
// Background jobs of a CMD that ended on its own are left running, as on the
// local provider; the container's removal ends them.
const execWrapper = `k=$FORKLINE_KILL_MARKED
unset FORKLINE_EXEC_WRAPPER FORKLINE_KILL_MARKED
if [ -n "$4" ] && true 2>/dev/null >"$4"; then exec 5>"$4"; else exec 5>&1; fi
g=
if [ -n "$5" ] && true 2>/dev/null <>"$5"; then exec 6<>"$5"; g=$5; fi
if [ -n "$g" ]; then
FORKLINE_EXEC="$3" setsid sh -c 'read -r _ <"$2"; exec sh -c "$1" forkline-cmd' forkline-cmd "$2" "$g" </dev/null >&5 2>&1 5>&- 6>&- &
p=$!
exec 5>&-
else
FORKLINE_EXEC="$3" setsid sh -c 'kill -STOP $$; exec sh -c "$1" forkline-cmd' forkline-cmd "$2" </dev/null >&5 2>&1 5>&- &
p=$!
exec 5>&-
while read -r _ _ st _ <"/proc/$p/stat" && [ "$st" != T ]; do :; done 2>/dev/null
fi
echo "forkline-pgid $p" >&2
killer='kill -KILL "-$1"; m=$2; eval "$3"'
setsid sh -c 'sleep "$1" & s=$!; if [ -n "$6" ]; then echo >"$6"; else kill -CONT "$2"; fi; wait "$s" && trap "" TERM && echo forkline-timeout && kill -KILL "-$2" 2>/dev/null; setsid sh -c "$5" forkline-killer "$2" "$3" "$4" </dev/null >/dev/null 2>&1' forkline-timer "$1" "$p" "$3" "$k" "$killer" "$g" </dev/null >&2 2>/dev/null 6>&- &
w=$!
wait "$p"; rc=$?
[ -n "$g" ] && exec 6>&-
kill -TERM "$w" 2>/dev/null; kill -TERM "-$w" 2>/dev/null
wait "$w" 2>/dev/null
echo "forkline-exit $rc" >&2
exit "$rc"
`

// killMarkedScript kills, with SIGKILL, every process in the container
// whose environment holds FORKLINE_EXEC=$m, scanning until a scan finds
// nobody (at most 8 times), so a process forked during a scan is caught by
// the next. It needs tr and grep; in an image without them only the group
// kill happens. A process that replaced its environment is not found.
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

// execBackstop is how long after its own timeout an exec may still be
// streaming before the provider gives up on it: the in-container timer
// failed, so the sandbox is declared broken.
const execBackstop = 5 * time.Second

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
	mark := strconv.FormatInt(s.execs.Add(1), 10)
	var f *fifo
	inside, gate := "", ""
	if s.p.out.usable(s) {
		// Without a FIFO the output takes the exec stream, slower but the
		// same bytes; a host that cannot make one now is no reason to fail.
		if f, _ = openFIFO(s.outDir); f != nil {
			inside = f.inside
			// Without a gate the wrapper falls back to its busy wait.
			if g, err := makeGate(s.outDir); err == nil && !noGate {
				defer g.remove()
				gate = g.inside
			}
		}
	}
	drained := make(chan struct{})
	if f != nil {
		f.drain(out, drained)
	}
	cmd := a.Cmd
	if len(cmd) > inlineCommandBytes {
		file, err := s.commandFile(ctx, mark, cmd)
		if err != nil {
			if f != nil {
				f.finish(drained)
			}
			return runtime.Observation{}, err
		}
		defer s.removeCommandFile(ctx, file)
		cmd = ". " + file
	}
	r, err := s.run(ctx, []string{"sh", "-c", `eval "$FORKLINE_EXEC_WRAPPER"`, "forkline-exec", secs, cmd, mark, inside, gate},
		[]string{"FORKLINE_EXEC_WRAPPER=" + execWrapper, "FORKLINE_KILL_MARKED=" + killMarkedScript}, out, diag, timeout+execBackstop)
	rep := parseDiag(diag.Bytes())
	if err != nil {
		if rep.pgid > 0 {
			s.killGroup(ctx, rep.pgid, mark)
		}
		if f != nil {
			f.finish(drained)
		}
		return runtime.Observation{}, err
	}
	if f != nil {
		f.finish(drained)
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
		// The wrapper itself died without a word: the sandbox was closed or
		// the container went away under it, or something killed it (the
		// memory limit).
		if err := s.checkOpen(); err != nil {
			return runtime.Observation{}, err
		}
		if gerr := s.p.gone(ctx, "the command's wrapper in "+s.short()+" ended without a word", nil); gerr != nil {
			return runtime.Observation{}, gerr
		}
		if state := s.settledDeadState(ctx); state != "" {
			return runtime.Observation{}, fmt.Errorf("%w: %s (%s) while running a command", ErrSandboxDied, s.short(), state)
		}
		if rep.pgid > 0 {
			s.killGroup(ctx, rep.pgid, mark)
		}
		msg := fmt.Sprintf("\n[forkline: the command's wrapper ended with exit code %d without reporting: %s]\n",
			r.exitCode, strings.TrimSpace(string(diag.Bytes())))
		_, _ = out.Write([]byte(msg))
		obs = runtime.Observation{Output: out.Bytes(), OutputBytes: out.Total(), Truncated: out.Truncated(),
			ExitCode: r.exitCode, Error: true, ErrorKind: runtime.ErrActionFail}
	}
	return obs, nil
}

// noGate makes every exec use the wrapper's fallback (stop and busy wait),
// for BenchmarkExecGate's comparison in one run.
var noGate bool

// inlineCommandBytes is the longest command passed to the wrapper as an
// argument. Linux caps one execve argument at 128 KiB, and the command
// travels as one (twice: to the wrapper, then to its shell); a longer one
// (a model's long heredoc) is copied into the container as a file that
// the shell sources: "." reads it in the same shell, so $0, the arguments
// and the exit status are those of a short command.
const inlineCommandBytes = 32 << 10

// commandFile copies cmd into the container as /.forkline-cmd-MARK.sh,
// readable by any user the image runs commands as, and returns its path.
func (s *sandbox) commandFile(ctx context.Context, mark, cmd string) (string, error) {
	name := ".forkline-cmd-" + mark + ".sh"
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(cmd)), ModTime: time.Now(), Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	if _, err := tw.Write([]byte(cmd)); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if _, err := s.p.cli.CopyToContainer(ctx, s.id, client.CopyToContainerOptions{DestinationPath: "/", Content: &b}); err != nil {
		return "", s.infraError(ctx, "exec: copying a long command", err)
	}
	return "/" + name, nil
}

// removeCommandFile removes a command file once its command ended, so
// that no checkpoint (a commit of the container) holds it.
func (s *sandbox) removeCommandFile(ctx context.Context, file string) {
	var out bytes.Buffer
	_, _ = s.run(context.WithoutCancel(ctx), []string{"rm", "-f", "--", file}, nil, &out, &out, execBackstop)
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

// runResult is how an exec ended.
type runResult struct {
	exitCode int
}

// run executes cmd in the container and copies its stdout to stdout and its
// stderr to stderr until the stream ends, then waits for the exec to be
// reported finished and returns its exit code. It follows the engine's
// rules: drain the hijacked stream to EOF first, inspect afterwards (an exec
// inspected too early looks finished with code 0), close the stream always.
// ctx cancels the wait (the stream is closed; the process keeps running
// until the caller kills it); limit is a host-side deadline on the whole
// exec, a backstop for the in-container timeout. Errors mean the sandbox
// or the engine failed, never the command.
func (s *sandbox) run(ctx context.Context, cmd, env []string, stdout, stderr io.Writer, limit time.Duration) (runResult, error) {
	ec, err := s.p.cli.ExecCreate(ctx, s.id, client.ExecCreateOptions{
		Cmd: cmd, Env: env, AttachStdout: true, AttachStderr: true, WorkingDir: s.spec.workdir,
	})
	if err != nil {
		return runResult{}, s.infraError(ctx, "exec create", err)
	}
	at, err := s.p.cli.ExecAttach(ctx, ec.ID, client.ExecAttachOptions{})
	if err != nil {
		return runResult{}, s.infraError(ctx, "exec start", err)
	}
	var closeOnce sync.Once
	closeConn := func() { closeOnce.Do(at.Close) }
	defer closeConn()
	var overran atomic.Bool
	backstop := time.AfterFunc(limit, func() { overran.Store(true); closeConn() })
	stopCtx := context.AfterFunc(ctx, closeConn)
	_, copyErr := stdcopy.StdCopy(stdout, stderr, at.Reader)
	backstop.Stop()
	stopCtx()
	closeConn()
	switch {
	case ctx.Err() != nil:
		return runResult{}, fmt.Errorf("docker: exec in %s: %w", s.short(), cause(ctx, context.Cause(ctx)))
	case overran.Load():
		if gerr := s.p.gone(ctx, "an exec stream that went silent in "+s.short(), nil); gerr != nil {
			return runResult{}, gerr
		}
		return runResult{}, fmt.Errorf("docker: exec in %s still running %s after its deadline: the in-container timeout failed; the sandbox is unusable", s.short(), execBackstop)
	case copyErr != nil:
		return runResult{}, s.infraError(ctx, "exec stream", copyErr)
	}
	code, err := s.waitExec(ctx, ec.ID)
	if err != nil {
		return runResult{}, s.infraError(ctx, "exec inspect", err)
	}
	return runResult{exitCode: code}, nil
}

// waitExec polls ExecInspect until the exec is no longer running. After the
// stream's EOF that is normally the first answer.
func (s *sandbox) waitExec(ctx context.Context, execID string) (int, error) {
	delay := time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for {
		ins, err := s.p.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil {
			return 0, err
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if time.Now().After(deadline) {
			return 0, errors.New("exec still reported running 30s after its output ended")
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}

// settledDeadState is deadState after the wrapper vanished without a word:
// the stream of a killed container can end before the engine has marked
// the container stopped, so it asks a few times before it believes that the
// container still runs.
func (s *sandbox) settledDeadState(ctx context.Context) string {
	for i := 0; ; i++ {
		if state := s.deadState(ctx); state != "" || i == 10 {
			return state
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// killGroup kills process group pgid in the container, best effort, with a
// context detached from ctx (which may be the reason for the kill).
func (s *sandbox) killGroup(ctx context.Context, pgid int, mark string) {
	kctx, cancel := detach(ctx, 5*time.Second)
	defer cancel()
	ec, err := s.p.cli.ExecCreate(kctx, s.id, client.ExecCreateOptions{
		Cmd: []string{"sh", "-c", `kill -KILL "-$1"; m=$2; eval "$3"`, "forkline-kill", strconv.Itoa(pgid), mark, killMarkedScript},
	})
	if err != nil {
		return
	}
	_, _ = s.p.cli.ExecStart(kctx, ec.ID, client.ExecStartOptions{Detach: true})
}
