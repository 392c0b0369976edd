package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// sandbox is one workspace and the process groups started in it.
type sandbox struct {
	p      *Provider
	id     string
	dir    string // sb-ID
	ws     string // the workspace
	origin string
	cpID   string
	uses   *checkpoint // the lower layer of an overlay fork
	root   *os.Root    // the workspace, for file actions
	spec   sandboxSpec
	env    []string // the full environment of commands
	mark   string   // execMarker's value for this sandbox, less the exec number
	limit  *sandboxLimit
	term   *providers.Terminal // the persistent shell and the terminal
	execs  atomic.Int64
	done   chan struct{}

	mu     sync.Mutex
	closed bool
	groups map[int]bool   // process groups that may have members: true while their leader runs
	acts   sync.WaitGroup // Acts in flight
	active int            // Acts in flight, counted under mu (a freeze needs none)
	once   sync.Once
	err    error // of the one real Close
}

// sandboxSpec is what a sandbox passes on to its checkpoints' forks.
type sandboxSpec struct {
	env       []string
	outputCap int
	pidsMax   int64
	shell     providers.ShellMode
}

func newSandbox(p *Provider, id, dir, ws, origin, cpID string, env []string, outputCap int, pidsMax int64, shell providers.ShellMode, uses *checkpoint) (*sandbox, error) {
	limit, err := p.pids.forSandbox(id, pidsMax)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		_ = limit.killAll()
		return nil, fmt.Errorf("local: %w", err)
	}
	if outputCap <= 0 {
		outputCap = providers.DefaultOutputCap
	}
	pathEnv := os.Getenv("PATH")
	if pathEnv == "" {
		pathEnv = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	full := []string{"PATH=" + pathEnv, "LANG=C.UTF-8", "HOME=" + ws, "FORKLINE_WORKSPACE=" + ws}
	full = append(full, env...) // later entries win in os/exec
	s := &sandbox{
		p: p, id: id, dir: dir, ws: ws, origin: origin, cpID: cpID, uses: uses, root: root,
		spec:   sandboxSpec{env: append([]string(nil), env...), outputCap: outputCap, pidsMax: pidsMax, shell: shell},
		limit:  limit,
		env:    full,
		mark:   filepath.Base(p.root) + "/" + id + "/",
		done:   make(chan struct{}),
		groups: map[int]bool{},
	}
	s.term = providers.NewTerminal(s.shellHost(), shell)
	return s, nil
}

// Info describes the sandbox; Workspace is a host path.
func (s *sandbox) Info() providers.SandboxInfo {
	return providers.SandboxInfo{
		ID: s.id, Provider: Name, Origin: s.origin, Checkpoint: s.cpID, Workspace: s.ws,
	}
}

func (s *sandbox) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("local: sandbox %s: %w", s.id, providers.ErrClosed)
	}
	return nil
}

// Act performs a. See the package comment for what each kind does.
func (s *sandbox) Act(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return runtime.Observation{}, fmt.Errorf("local: sandbox %s: %w", s.id, providers.ErrClosed)
	}
	s.acts.Add(1)
	s.active++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		s.mu.Unlock()
		s.acts.Done()
	}()
	if err := ctx.Err(); err != nil {
		return runtime.Observation{}, err
	}

	return providers.Shell(ctx, a, providers.ShellOps{
		Provider:  "local",
		Exec:      s.exec,
		Term:      s.term,
		ReadFile:  func(_ context.Context, p string) (runtime.Observation, error) { return s.readFileAction(p), nil },
		WriteFile: func(_ context.Context, p, c string) (runtime.Observation, error) { return s.writeFileAction(p, c), nil },
		Closed:    s.done,
		ClosedErr: func() error { return fmt.Errorf("local: sandbox %s: %w", s.id, providers.ErrClosed) },
	})
}

func (s *sandbox) exec(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	timeout := providers.DefaultExecTimeout
	if a.TimeoutMS > 0 {
		timeout = time.Duration(a.TimeoutMS) * time.Millisecond
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	out := providers.NewCapBuffer(s.spec.outputCap)
	n := strconv.FormatInt(s.execs.Add(1), 10)
	mark := s.mark + n
	script := a.Cmd
	if len(script) > inlineCommandBytes {
		// A command line longer than one execve argument may be (a model
		// may emit one: a long heredoc, a file pasted into an echo) runs
		// from a file beside the workspace, read by the same shell.
		file := filepath.Join(s.dir, "cmd-"+n+".sh")
		if err := os.WriteFile(file, []byte(a.Cmd), 0o600); err != nil {
			return runtime.Observation{}, fmt.Errorf("local: exec in %s: the command's file: %w", s.id, err)
		}
		defer os.Remove(file)
		script = ". " + shellQuote(file)
	}
	argv, gated := s.limit.command(script)
	cmd := exec.CommandContext(tctx, argv[0], argv[1:]...)
	var gate, release *os.File
	if gated {
		var err error
		if gate, release, err = os.Pipe(); err != nil {
			return runtime.Observation{}, fmt.Errorf("local: exec in %s: %w", s.id, err)
		}
		defer release.Close()
		cmd.ExtraFiles = []*os.File{gate} // descriptor 3, read by gatePrefix
	}
	cmd.Dir = s.ws
	cmd.Env = append(s.env[:len(s.env):len(s.env)], execMarker+"="+mark)
	pipe, err := newOutputPipe(out)
	if err != nil {
		return runtime.Observation{}, fmt.Errorf("local: exec in %s: %w", s.id, err)
	}
	cmd.Stdout, cmd.Stderr = pipe.w, pipe.w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = PipeGrace
	err = cmd.Start()
	if gate != nil {
		gate.Close() // the child has its own copy
	}
	if err != nil {
		pipe.abandon()
		return runtime.Observation{}, fmt.Errorf("local: exec in %s: %w", s.id, err)
	}
	pipe.started()
	pgid := cmd.Process.Pid
	if gated {
		// The command's shell waits on the gate: nothing of it runs before
		// it is under the sandbox's process limit.
		if err := s.limit.limit(pgid); err != nil {
			_ = killGroup(pgid)
			_ = cmd.Wait()
			pipe.finish(0)
			return runtime.Observation{}, err
		}
		_, _ = release.Write([]byte("\n"))
		release.Close()
	}
	s.mu.Lock()
	s.groups[pgid] = true
	closing := s.closed
	s.mu.Unlock()
	if closing { // Close ran between our start and our registration
		_ = killGroup(pgid)
	}

	werr := cmd.Wait()
	ps := cmd.ProcessState
	timedOut := tctx.Err() != nil && ctx.Err() == nil && (ps == nil || !ps.Exited())
	if timedOut || ctx.Err() != nil {
		_ = killGroup(pgid)     // members that escaped the first kill by forking
		killMarked(mark, false) // and those that left the group (setsid)
	}
	pipe.finish(PipeGrace)
	s.groupDone(pgid)

	if ctx.Err() != nil {
		return runtime.Observation{}, fmt.Errorf("local: exec in %s: %w", s.id, ctx.Err())
	}
	if err := s.checkOpen(); err != nil { // Close killed the command
		return runtime.Observation{}, err
	}
	var exitErr *exec.ExitError
	if werr != nil && !errors.Is(werr, exec.ErrWaitDelay) && !errors.As(werr, &exitErr) {
		return runtime.Observation{}, fmt.Errorf("local: exec in %s: %w", s.id, werr)
	}
	obs := runtime.Observation{
		Output:      out.Bytes(),
		OutputBytes: out.Total(),
		Truncated:   out.Truncated(),
	}
	switch {
	case timedOut:
		obs.ExitCode, obs.Error, obs.ErrorKind, obs.TimedOut = -1, true, runtime.ErrTimeout, true
	case ps == nil:
		return runtime.Observation{}, fmt.Errorf("local: exec in %s: no process state", s.id)
	default:
		obs.ExitCode = exitCode(ps)
		if obs.ExitCode != 0 {
			obs.Error, obs.ErrorKind = true, runtime.ErrExitStatus
		}
	}
	return obs, nil
}

// inlineCommandBytes is the longest command passed as the shell's -c
// argument. Linux caps one execve argument at 128 KiB (MAX_ARG_STRLEN) and
// all of them, with the environment, at a quarter of the stack limit; a
// longer command is written to a file that the shell sources ("." reads it
// in the same shell: $0, the arguments and the exit status are as with -c;
// only error messages name the file instead of "sh"). Well under the cap,
// so that a task's environment still fits beside it.
const inlineCommandBytes = 32 << 10

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// exitCode is the shell's view of ps: the exit status, or 128+signal.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// killGroup sends SIGKILL to every process of group pgid.
func killGroup(pgid int) error {
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// groupDone records that the leader of pgid was reaped, and stops tracking
// the group when nothing is left in it.
func (s *sandbox) groupDone(pgid int) {
	empty := errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
	s.mu.Lock()
	if empty {
		delete(s.groups, pgid)
	} else {
		s.groups[pgid] = false
	}
	s.mu.Unlock()
}

// killGroups kills the sandbox's process groups. The group of a running
// command is certainly ours. For a finished one, whose leader was reaped,
// only if no process now has the leader's pid: the kernel never hands out a
// pid still in use as a process group id, so a process with that pid means
// our group emptied and the id went to someone else, who must not be hit.
func killGroups(groups map[int]bool) []error {
	var errs []error
	for g, running := range groups {
		if !running {
			if _, err := os.Stat("/proc/" + strconv.Itoa(g)); err == nil {
				continue
			}
		}
		if err := killGroup(g); err != nil {
			errs = append(errs, fmt.Errorf("local: killing process group %d: %w", g, err))
		}
	}
	return errs
}

func (s *sandbox) readFileAction(p string) runtime.Observation {
	rel, err := providers.ResolvePath(p)
	if err != nil {
		return pathFailure(runtime.ActReadFile, p, err)
	}
	f, err := s.root.Open(rel)
	if err != nil {
		return pathFailure(runtime.ActReadFile, p, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("read_file: %q is a directory", p))
	}
	out := providers.NewCapBuffer(s.spec.outputCap)
	if _, err := io.Copy(out, f); err != nil {
		return pathFailure(runtime.ActReadFile, p, err)
	}
	return runtime.Observation{
		Output: out.Bytes(), OutputBytes: out.Total(), Truncated: out.Truncated(), ExitCode: -1,
	}
}

func (s *sandbox) writeFileAction(p, content string) runtime.Observation {
	rel, err := providers.ResolvePath(p)
	if err != nil {
		return pathFailure(runtime.ActWriteFile, p, err)
	}
	if rel == "." {
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("write_file: %q is the workspace directory", p))
	}
	if err := s.writeFile(rel, []byte(content)); err != nil {
		return pathFailure(runtime.ActWriteFile, p, err)
	}
	msg := fmt.Sprintf("wrote %d bytes to %s", len(content), rel)
	return runtime.Observation{Output: []byte(msg), OutputBytes: int64(len(msg)), ExitCode: -1}
}

// writeFile writes data to the workspace-relative path rel, making its
// parent directories.
func (s *sandbox) writeFile(rel string, data []byte) error {
	if dir := path.Dir(rel); dir != "." {
		if err := s.root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return s.root.WriteFile(rel, data, 0o644)
}

// Upload writes files into the workspace (providers.Uploader): dir must be
// "" or relative to the workspace, since a local sandbox's absolute paths
// are the host's. Paths go through the workspace's os.Root, so no symlink
// the episode left can lead a file outside.
func (s *sandbox) Upload(ctx context.Context, dir string, files []providers.File) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	base := "."
	if dir != "" {
		rel, err := providers.ResolvePath(dir)
		if err != nil || path.IsAbs(dir) {
			return fmt.Errorf("local: upload to %q: %w (a local sandbox has no filesystem of its own)", dir, providers.ErrPathEscapes)
		}
		base = rel
	}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := providers.ResolvePath(path.Join(base, f.Path))
		if err != nil {
			return fmt.Errorf("local: upload: %w", err)
		}
		mode := f.Mode.Perm()
		if mode == 0 {
			mode = 0o644
		}
		if err := s.writeFile(rel, f.Data); err != nil {
			return fmt.Errorf("local: upload of %s: %w", rel, unwrapPath(err))
		}
		if err := s.root.Chmod(rel, mode); err != nil {
			return fmt.Errorf("local: upload of %s: %w", rel, unwrapPath(err))
		}
	}
	return nil
}

// pathFailure turns the error of a file action into its observation.
func pathFailure(kind runtime.ActionKind, p string, err error) runtime.Observation {
	switch {
	case errors.Is(err, providers.ErrPathEscapes):
		return providers.Failure(runtime.ErrPathRefused, fmt.Sprintf("%s: refused: %q %s", kind, p, providers.ErrPathEscapes))
	case escapesRoot(err):
		return providers.Failure(runtime.ErrPathRefused, fmt.Sprintf("%s: refused: %q %s (through a symlink)", kind, p, providers.ErrPathEscapes))
	case errors.Is(err, fs.ErrNotExist):
		return providers.Failure(runtime.ErrNotFound, fmt.Sprintf("%s: %q: no such file or directory", kind, p))
	}
	return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: %v", kind, p, unwrapPath(err)))
}

// escapesRoot reports whether err is os.Root refusing a path that leads out
// of its directory. The os package does not export that error, only its text.
func escapesRoot(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}

// unwrapPath drops the host path from a PathError, which would only leak the
// provider's layout into the observation.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Close kills the sandbox's process groups, unmounts and removes its
// directory. It is idempotent and safe to call concurrently with Act.
func (s *sandbox) Close(ctx context.Context) error {
	s.once.Do(func() { s.err = s.destroy() })
	return s.err
}

// destroy is the body of Close.
func (s *sandbox) destroy() error {
	s.mu.Lock()
	s.closed = true
	groups := maps.Clone(s.groups)
	s.mu.Unlock()
	close(s.done)
	errs := killGroups(groups)
	if !s.limit.holdsEveryProcess() {
		// Without a cgroup, the marked environment is how the processes
		// that left their group (setsid) are found: a scan of /proc.
		killMarked(s.mark, true)
	}
	errs = append(errs, s.limit.killAll())
	s.acts.Wait()
	s.term.Close() // after the Acts: an exec in the shell holds it
	errs = append(errs, s.root.Close())
	if s.origin == ForkOverlay {
		if err := unmount(s.ws); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeTree(s.dir))
	s.p.forget(s)
	return errors.Join(errs...)
}
