package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// ErrSandboxDied is wrapped by the error Act returns when the sandbox's
// container is no longer running (killed, out of memory, removed behind our
// back). The session is unusable; the episode becomes env_error.
var ErrSandboxDied = errors.New("docker: sandbox container is not running")

// sandbox is one running container.
type sandbox struct {
	p      *Provider
	id     string // container id
	outDir string // host directory mounted at OutputDir, "" when none
	origin string
	cpID   string
	spec   sandboxSpec
	env    *composeEnv // the services and network of a compose environment, nil without
	done   chan struct{}
	execs  atomic.Int64 // numbers the execs: FORKLINE_EXEC marks
	term   *providers.Terminal

	mu     sync.Mutex
	closed bool
	acts   sync.WaitGroup
	once   sync.Once
	err    error
}

func newSandbox(p *Provider, st started, origin, cpID string, ss sandboxSpec) *sandbox {
	s := &sandbox{p: p, id: st.id, outDir: st.outDir, origin: origin, cpID: cpID, spec: ss, done: make(chan struct{})}
	s.term = providers.NewTerminal(s.shellHost(), ss.shell)
	return s
}

func (s *sandbox) short() string { return shortID(s.id) }

// Info describes the sandbox. ID is the container id; Workspace is the
// path inside the container.
func (s *sandbox) Info() providers.SandboxInfo {
	return providers.SandboxInfo{
		ID: s.id, Provider: Name, Origin: s.origin, Checkpoint: s.cpID, Workspace: s.spec.workdir,
	}
}

func (s *sandbox) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("docker: sandbox %s: %w", s.short(), providers.ErrClosed)
	}
	return nil
}

// Act performs a. See the package comment for what each kind does.
func (s *sandbox) Act(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return runtime.Observation{}, fmt.Errorf("docker: sandbox %s: %w", s.short(), providers.ErrClosed)
	}
	s.acts.Add(1)
	s.mu.Unlock()
	defer s.acts.Done()
	if err := ctx.Err(); err != nil {
		return runtime.Observation{}, err
	}

	wctx, stop := s.p.watch(ctx)
	defer stop()
	obs, err := providers.Shell(wctx, a, providers.ShellOps{
		Provider:  "docker",
		Exec:      s.exec,
		Term:      s.term,
		ReadFile:  s.readFile,
		WriteFile: s.writeFile,
		Closed:    s.done,
		ClosedErr: func() error { return fmt.Errorf("docker: sandbox %s: %w", s.short(), providers.ErrClosed) },
	})
	return obs, cause(wctx, err)
}

// infraError turns an engine error met while acting into the error Act
// returns: see broken; when none of those applies, the engine's error.
func (s *sandbox) infraError(ctx context.Context, what string, err error) error {
	if berr := s.broken(ctx, what, err); berr != nil {
		return berr
	}
	return fmt.Errorf("docker: %s in %s: %w", what, s.short(), err)
}

// broken says whether an engine error met while acting means the action
// cannot go on: ctx's error (or the engine watch's cause) when ctx ended,
// ErrClosed when the sandbox was closed meanwhile, ErrEngineGone when the
// engine does not answer, ErrSandboxDied (with the container's state) when
// the container stopped. It returns nil when the engine answered and the
// sandbox runs: the failure is then the action's own.
func (s *sandbox) broken(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("docker: %s in %s: %w", what, s.short(), cause(ctx, context.Cause(ctx)))
	}
	if cerr := s.checkOpen(); cerr != nil {
		return cerr
	}
	if gerr := s.p.gone(ctx, what+" in "+s.short(), err); gerr != nil {
		return gerr
	}
	if state := s.deadState(ctx); state != "" {
		return fmt.Errorf("%w: %s (%s) during %s: %v", ErrSandboxDied, s.short(), state, what, err)
	}
	return nil
}

// deadState describes the container when it is not running, and is empty
// when it runs.
func (s *sandbox) deadState(ctx context.Context) string {
	ictx, cancel := detach(ctx, 10*time.Second)
	defer cancel()
	ci, err := s.p.cli.ContainerInspect(ictx, s.id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "removed"
		}
		return ""
	}
	st := ci.Container.State
	if st == nil || (st.Running && !st.Paused) {
		return ""
	}
	if st.Paused {
		return "paused"
	}
	desc := fmt.Sprintf("%s, exit code %d", st.Status, st.ExitCode)
	if st.OOMKilled {
		desc += ", killed for using too much memory"
	}
	if st.Error != "" {
		desc += ", " + st.Error
	}
	return desc
}

// waitUnpaused waits (up to 2 s) until the engine no longer reports the
// container paused. Commit pauses and unpauses it, and Engine 20.10 also
// sets the paused state from containerd's events, which can arrive after
// the commit returned; an exec into a container marked paused fails.
func (s *sandbox) waitUnpaused(ctx context.Context) {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		ci, err := s.p.cli.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
		if err != nil || ci.Container.State == nil || !ci.Container.State.Paused {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Close removes the container. It is idempotent and safe to call
// concurrently with Act, which then fails with ErrClosed.
func (s *sandbox) Close(ctx context.Context) error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.done)
		s.err = s.p.removeContainer(ctx, s.id)
		s.err = errors.Join(s.err, s.p.removeEnv(ctx, s.env))
		s.acts.Wait()
		s.term.Close() // after the Acts: an exec in the shell holds it
		if s.outDir != "" {
			s.err = errors.Join(s.err, os.RemoveAll(s.outDir))
		}
		s.p.forget(s)
	})
	return s.err
}
