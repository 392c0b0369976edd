package docker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/providers"
)

// shellHost gives the sandbox's Terminal its persistent shell (an exec of
// sh in the container with its stdin attached, kept for the sandbox's
// life) and its terminal (`docker exec -it` into the container, run by
// tmux on the host, so the docker CLI must be on the host's PATH).
func (s *sandbox) shellHost() providers.ShellHost {
	return providers.ShellHost{
		Provider:   "docker",
		OutputCap:  s.spec.outputCap,
		Mark:       func() string { return "sh" + strconv.FormatInt(s.execs.Add(1), 10) },
		KillMarked: s.killMarked,
		Start:      s.startShell,
		TerminalArgv: func(mark string) ([]string, []string, string) {
			argv := []string{"docker", "exec", "-it", "-w", s.spec.workdir, "-e", execMarkEnv + "=" + mark, "-e", "TERM=xterm-256color", s.id, "sh"}
			var env []string
			for _, k := range []string{"DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_API_VERSION", "DOCKER_CONFIG", "DOCKER_CONTEXT"} {
				if v, ok := os.LookupEnv(k); ok {
					env = append(env, k+"="+v)
				}
			}
			if _, err := exec.LookPath("docker"); err != nil {
				argv = []string{"sh", "-c", "echo 'forkline: the terminal of a docker sandbox needs the docker CLI on the host running forkline' >&2; exit 127"}
			}
			return argv, env, ""
		},
	}
}

// killMarked kills the processes marked mark in the container (see
// killMarkedScript) and returns when the scan is done.
func (s *sandbox) killMarked(ctx context.Context, mark string) {
	kctx, cancel := detach(ctx, execBackstop)
	defer cancel()
	_, _ = s.run(kctx, []string{"sh", "-c", `m=$1; eval "$2"`, "forkline-kill", mark, killMarkedScript}, nil, io.Discard, io.Discard, execBackstop)
}

// execMarkEnv marks the processes of a command (see execWrapper).
const execMarkEnv = "FORKLINE_EXEC"

// startShell starts sh in the container with stdin attached: the stream
// ends when the shell does.
func (s *sandbox) startShell(ctx context.Context, mark string) (*providers.ShellProc, error) {
	ec, err := s.p.cli.ExecCreate(ctx, s.id, client.ExecCreateOptions{
		Cmd: []string{"sh"}, Env: []string{execMarkEnv + "=" + mark},
		AttachStdin: true, AttachStdout: true, AttachStderr: true, WorkingDir: s.spec.workdir,
	})
	if err != nil {
		return nil, s.infraError(ctx, "shell create", err)
	}
	at, err := s.p.cli.ExecAttach(ctx, ec.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, s.infraError(ctx, "shell start", err)
	}
	pr, pw := io.Pipe()
	exited := make(chan struct{})
	code := -1
	go func() {
		// stdout and stderr joined, in the order the engine sends them.
		_, cerr := stdcopy.StdCopy(pw, pw, at.Reader)
		at.Close()
		if cerr == nil {
			if c, err := s.waitExec(context.WithoutCancel(ctx), ec.ID); err == nil {
				code = c
			}
		}
		close(exited)
		pw.CloseWithError(io.EOF)
	}()
	var once sync.Once
	return &providers.ShellProc{
		In:  at.Conn,
		Out: pr,
		Kill: func(pid int) {
			once.Do(func() {
				if pid > 0 {
					kctx, cancel := detach(ctx, execBackstop)
					defer cancel()
					_, _ = s.run(kctx, []string{"kill", "-KILL", strconv.Itoa(pid)}, nil, io.Discard, io.Discard, execBackstop)
				}
				s.killMarked(ctx, mark)
				at.Close()
			})
		},
		Exited: exited,
		Code:   func() int { <-exited; return code },
	}, nil
}
