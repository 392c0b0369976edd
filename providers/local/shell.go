package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/forkline/forkline/providers"
)

// shellHost gives the sandbox's Terminal its persistent shell and its
// terminal: both run as the sandbox's commands do (the workspace, its
// environment, a mark of the sandbox's, its process limit), so Close,
// Sweep and the limit treat them like any command.
func (s *sandbox) shellHost() providers.ShellHost {
	return providers.ShellHost{
		Provider:   "local",
		OutputCap:  s.spec.outputCap,
		Mark:       func() string { return s.mark + strconv.FormatInt(s.execs.Add(1), 10) },
		KillMarked: func(_ context.Context, mark string) { killMarked(mark, false) },
		Start:      s.startShell,
		TerminalArgv: func(mark string) ([]string, []string, string) {
			env := append(s.env[:len(s.env):len(s.env)], execMarker+"="+mark, "TERM=xterm-256color")
			return []string{"/bin/sh", "-i"}, env, s.ws
		},
		After: func(pid int) error {
			if s.limit == nil || s.limit.l.mode == PidsNone {
				return nil
			}
			return s.limit.limit(pid)
		},
	}
}

// startShell starts the persistent shell: /bin/sh reading stdin, in a
// process group of its own (registered, so Close kills it), under the
// sandbox's process limit before it reads a command.
func (s *sandbox) startShell(ctx context.Context, mark string) (*providers.ShellProc, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	argv, gated := s.limit.command("exec /bin/sh")
	cmd := exec.Command(argv[0], argv[1:]...)
	var gate, release *os.File
	if gated {
		var err error
		if gate, release, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("local: shell in %s: %w", s.id, err)
		}
		defer release.Close()
		cmd.ExtraFiles = []*os.File{gate}
	}
	cmd.Dir = s.ws
	cmd.Env = append(s.env[:len(s.env):len(s.env)], execMarker+"="+mark)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	w.Close()
	if gate != nil {
		gate.Close()
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("local: shell in %s: %w", s.id, err)
	}
	pgid := cmd.Process.Pid
	if gated {
		if err := s.limit.limit(pgid); err != nil {
			_ = killGroup(pgid)
			_ = cmd.Wait()
			r.Close()
			return nil, err
		}
		_, _ = release.Write([]byte("\n"))
	}
	s.mu.Lock()
	s.groups[pgid] = true
	s.mu.Unlock()
	exited := make(chan struct{})
	code := -1
	go func() {
		werr := cmd.Wait()
		s.groupDone(pgid)
		var ee *exec.ExitError
		if werr == nil || errors.As(werr, &ee) {
			code = exitCode(cmd.ProcessState)
		}
		close(exited)
	}()
	return &providers.ShellProc{
		In:  in,
		Out: r,
		Kill: func(int) {
			_ = killGroup(pgid)
			// The shell's mark is on what the shell started outside a
			// command (each command exports a mark of its own, which a
			// timeout kills by). Where the sandbox's cgroup holds every
			// process, one that left the shell's group dies with the
			// sandbox's cgroup at Close, as the escapees of every
			// command do; only without one is it looked for here, by a
			// scan of every process's environment in /proc. That scan,
			// run as each episode's shell closed, was half the
			// collector's CPU with persistent shells at 256 replicas
			// (benchmarks/scale).
			if !s.limit.holdsEveryProcess() {
				killMarked(mark, false)
			}
		},
		Exited: exited,
		Code:   func() int { <-exited; return code },
	}, nil
}
