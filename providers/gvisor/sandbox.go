package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// ErrSandboxDied is wrapped by the error Act returns when the sandbox is no
// longer running: gVisor's kernel was killed (the host's out-of-memory
// killer, when the sandbox's memory — files included — passed its limit)
// or the sandbox was deleted behind the provider's back. The session is
// unusable; the episode becomes env_error.
var ErrSandboxDied = errors.New("gvisor: sandbox is not running")

// imageFile is the file runsc checkpoint writes in its --image-path.
const imageFile = "checkpoint.img"

// sandbox is one runsc sandbox. Its id stays the same across the
// checkpoint-and-restore of Provider.Checkpoint; the runsc container under
// it is a new one after each restore (cid), so that the stopped one can be
// deleted in the background instead of on the way to the next action.
type sandbox struct {
	p          *Provider
	id         string
	cidMu      sync.Mutex
	cid        string // the runsc container id now (containerID); guarded by cidMu, changed under life held alone
	boots      int    // restores in place so far; guarded by life
	dir        string // per container: a bundle (config.json) and runsc's log; the image to resume from
	origin     string
	cpID       string
	spec       sandboxSpec
	ownNetwork string // the network the sandbox itself runs on (a golden's setup network)
	done       chan struct{}
	execs      atomic.Int64 // numbers the execs: FORKLINE_EXEC marks
	// term is the persistent shell (spec.shell persistent), nil otherwise.
	term *providers.Terminal

	// life guards the container: Act holds it shared; checkpoint, resume
	// and the end of Close hold it alone.
	life sync.RWMutex
	// suspended is the directory of the image the sandbox is checkpointed
	// in, stopped, until its next action restores it; "" when it runs.
	suspended string

	// retired are containers left stopped by a checkpoint, being deleted
	// in the background; Close waits for them.
	retired sync.WaitGroup

	mu     sync.Mutex
	closed bool
	acts   sync.WaitGroup
	once   sync.Once
}

func newSandbox(p *Provider, id, origin, cpID string, ss sandboxSpec) *sandbox {
	s := &sandbox{p: p, id: id, cid: containerID(id, 0), dir: filepath.Join(p.dir, "sandboxes", id), origin: origin, cpID: cpID, spec: ss,
		ownNetwork: ss.network, done: make(chan struct{})}
	if ss.shell == providers.ShellPersistent {
		s.term = providers.NewTerminal(s.shellHost(), ss.shell)
	}
	return s
}

// Info describes the sandbox. ID is the runsc container id; Workspace is
// the path inside the sandbox.
func (s *sandbox) Info() providers.SandboxInfo {
	return providers.SandboxInfo{ID: s.id, Provider: Name, Origin: s.origin, Checkpoint: s.cpID, Workspace: s.spec.fs.workdir}
}

func (s *sandbox) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("gvisor: sandbox %s: %w", s.id, providers.ErrClosed)
	}
	return nil
}

// boot writes the bundle of container cid and starts it on network: runsc
// run, or runsc restore of the image in imageDir when it is not empty. Each
// container has its own bundle and cgroup.
func (s *sandbox) boot(ctx context.Context, cid, network, imageDir string) error {
	bundle := filepath.Join(s.dir, cid)
	if err := writeBundle(bundle, s.spec.spec("/forkline-gvisor/"+cid, s.p.annotations(s.spec, s.origin, s.id))); err != nil {
		return err
	}
	args := s.p.rs.global(network, s.spec.netRaw())
	if imageDir == "" {
		args = append(args, "run", "--detach", "--bundle", bundle, cid)
	} else {
		args = append(args, "restore", "--detach", "--bundle", bundle, "--image-path", imageDir, cid)
	}
	if err := s.p.rs.detached(ctx, filepath.Join(bundle, "runsc.log"), s.p.bootTimeout, args...); err != nil {
		if imageDir != "" {
			return fmt.Errorf("gvisor: restoring %s from %s: %w", s.id, imageDir, err)
		}
		return fmt.Errorf("gvisor: starting %s on %s: %w", s.id, s.spec.fs.what, err)
	}
	if err := s.checkOpen(); err != nil {
		// Closed while it booted: Close's delete may have come first.
		_ = s.p.rs.deleteContainer(ctx, cid)
		return err
	}
	return nil
}

// checkpoint writes the sandbox's image into dir and leaves it suspended
// there: stopped, restored at its next action. A suspended sandbox's image
// is linked into dir instead: nothing ran since.
func (s *sandbox) checkpoint(ctx context.Context, dir string) (string, error) {
	s.life.Lock()
	defer s.life.Unlock()
	if err := s.checkOpen(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("gvisor: %w", err)
	}
	if s.suspended != "" {
		if err := os.Link(filepath.Join(s.suspended, imageFile), filepath.Join(dir, imageFile)); err != nil {
			return "", fmt.Errorf("gvisor: checkpoint of suspended %s: %w", s.id, err)
		}
		return MethodLink, nil
	}
	if err := os.Remove(dir); err != nil { // runsc makes it, and refuses an existing image
		return "", fmt.Errorf("gvisor: %w", err)
	}
	// The persistent shell goes into the image; its connection to the
	// host does not (see shell.go).
	s.term.Detach()
	if _, err := s.p.rs.simple(ctx, "checkpoint", "--image-path", dir, s.cidNow()); err != nil {
		if dead := s.deadErr(ctx, "checkpoint", err); dead != nil {
			return "", dead
		}
		return "", fmt.Errorf("gvisor: checkpoint of %s: %w", s.id, err)
	}
	// The sandbox keeps its own link to the image, so it can resume
	// whatever becomes of the checkpoint.
	own := filepath.Join(s.dir, "suspended")
	_ = os.RemoveAll(own)
	if err := os.MkdirAll(own, 0o700); err != nil {
		return "", fmt.Errorf("gvisor: %w", err)
	}
	if err := os.Link(filepath.Join(dir, imageFile), filepath.Join(own, imageFile)); err != nil {
		return "", fmt.Errorf("gvisor: %w", err)
	}
	s.suspended = own
	return MethodCheckpoint, nil
}

// running makes sure the sandbox runs, restoring a suspended one, and
// returns with life held shared; the caller releases it.
func (s *sandbox) running(ctx context.Context) error {
	for {
		s.life.RLock()
		if s.suspended == "" {
			return nil
		}
		s.life.RUnlock()
		if err := s.resume(ctx); err != nil {
			return err
		}
	}
}

// resume restores a suspended sandbox from the image it was checkpointed
// in, into a new container; the stopped one is deleted in the background.
func (s *sandbox) resume(ctx context.Context) error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.suspended == "" {
		return nil
	}
	if err := s.checkOpen(); err != nil {
		return err
	}
	s.boots++
	cid := containerID(s.id, s.boots)
	if err := s.boot(ctx, cid, s.ownNetwork, s.suspended); err != nil {
		_ = s.p.rs.deleteContainer(ctx, cid)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %w", ErrSandboxDied, err)
	}
	s.cidMu.Lock()
	old := s.cid
	s.cid = cid
	s.cidMu.Unlock()
	s.retired.Go(func() {
		_ = s.p.rs.deleteContainer(context.WithoutCancel(ctx), old)
		_ = os.RemoveAll(filepath.Join(s.dir, old))
	})
	_ = os.RemoveAll(s.suspended)
	s.suspended = ""
	return nil
}

// Act performs a. See the package comment for what each kind does.
func (s *sandbox) Act(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return runtime.Observation{}, fmt.Errorf("gvisor: sandbox %s: %w", s.id, providers.ErrClosed)
	}
	s.acts.Add(1)
	s.mu.Unlock()
	defer s.acts.Done()
	if err := ctx.Err(); err != nil {
		return runtime.Observation{}, err
	}
	if acts(a.Kind) {
		if err := s.running(ctx); err != nil {
			return runtime.Observation{}, s.closedOr(err)
		}
		defer s.life.RUnlock()
	}
	return providers.Shell(ctx, a, providers.ShellOps{
		Provider:  Name,
		Exec:      s.exec,
		ReadFile:  s.readFile,
		WriteFile: s.writeFile,
		Term:      s.term,
		Closed:    s.done,
		ClosedErr: func() error { return fmt.Errorf("gvisor: sandbox %s: %w", s.id, providers.ErrClosed) },
	})
}

// acts reports whether an action of kind touches the sandbox: those wake a
// suspended one.
func acts(kind runtime.ActionKind) bool {
	switch kind {
	case runtime.ActExec, runtime.ActReadFile, runtime.ActWriteFile:
		return true
	}
	return false
}

// closedOr is ErrClosed when the sandbox was closed meanwhile, else err.
func (s *sandbox) closedOr(err error) error {
	if cerr := s.checkOpen(); cerr != nil {
		return cerr
	}
	return err
}

// deadErr says whether a failed runsc call means the sandbox is gone: ctx's
// error when ctx ended, ErrClosed when it was closed, ErrSandboxDied when
// runsc no longer reports it running. nil means the sandbox runs.
func (s *sandbox) deadErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if cerr := s.checkOpen(); cerr != nil {
		return cerr
	}
	state, serr := s.p.rs.containerState(ctx, s.cidNow())
	switch {
	case serr != nil:
		return fmt.Errorf("%w: %s (%v) during %s: %v", ErrSandboxDied, s.id, serr, what, err)
	case state != "running":
		return fmt.Errorf("%w: %s is %s, during %s: %v", ErrSandboxDied, s.id, state, what, err)
	}
	return nil
}

// Close kills and deletes the sandbox. It is idempotent and safe to call
// concurrently with Act, which then fails with ErrClosed. The sandbox is
// unusable when Close returns; its deletion — runsc waits for gVisor's
// kernel to exit, about a second on a busy machine — goes on in the
// background, so that an episode's replica slot is free at once. The
// provider's Leftovers and Close wait for it, and Close returns what it
// failed to delete.
func (s *sandbox) Close(ctx context.Context) error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.done)
		s.p.closing.Go(func() {
			if err := s.teardown(context.WithoutCancel(ctx)); err != nil {
				s.p.noteCloseErr(err)
			}
			s.p.forget(s)
		})
	})
	return nil
}

// teardown deletes the sandbox's containers and directory.
func (s *sandbox) teardown(ctx context.Context) error {
	first := s.cidNow()
	err := s.p.rs.deleteContainer(ctx, first)
	s.acts.Wait()
	s.term.Detach() // the container is gone: only the host's side is left
	// A checkpoint or resume under way ends first; a boot that ends after
	// the delete above deletes its container itself (see boot).
	s.life.Lock()
	if cid := s.cidNow(); cid != first {
		err = errors.Join(err, s.p.rs.deleteContainer(ctx, cid))
	}
	s.suspended = ""
	s.life.Unlock()
	s.retired.Wait()
	if rerr := os.RemoveAll(s.dir); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return fmt.Errorf("gvisor: closing sandbox %s: %w", s.id, err)
	}
	return nil
}

// cidNow is the runsc container id the sandbox runs as now.
func (s *sandbox) cidNow() string {
	s.cidMu.Lock()
	defer s.cidMu.Unlock()
	return s.cid
}

// containerID is the runsc container id of a sandbox's boot-th container
// (0 for the first). runsc takes an id that is a prefix of another
// container's for an abbreviation and refuses it as ambiguous, even when
// one matches exactly, so every id of a provider has the same length: the
// sandbox's id (fixed width) and the boot number, also fixed width.
func containerID(sandboxID string, boot int) string {
	return fmt.Sprintf("%s-%05d", sandboxID, boot)
}
