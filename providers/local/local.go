// Package local is forkline's embedded default provider, registered as
// "local": no daemon, no image, just directories and host processes.
//
// It owns sandboxes made of a workspace directory, checkpoints made of a
// frozen copy of one, and forks made from a checkpoint by an overlayfs mount
// or by a copy. It knows nothing of tasks, policies or datasets.
//
// # Not a security boundary
//
// Isolation is "none". Commands run as host processes with the provider's
// own user and privileges, and see the whole host filesystem and network.
// Processes that leave their process group (setsid, a daemon's double fork)
// are still found by the FORKLINE_EXEC mark in their environment and killed
// with the rest on a timeout, at Close and by Sweep; one that replaces its
// environment (env -i) escapes that and outlives the sandbox, unless the
// sandbox has a cgroup (below). Use providers/docker for untrusted code.
//
// # Process limit
//
// A fork bomb in a task must still not take the host down, so each sandbox's
// processes (threads included) are bounded by Spec.Resources.Pids, else the
// "pids" param, else DefaultPids, the cheapest way this process has
// (PidsLimit says which, and why not better):
//
//   - PidsCgroup, when it may write a pids cgroup (root on the host, or a
//     delegated cgroup; v1 or v2): the provider makes a cgroup named like its
//     directory under its own (v2: under its parent, as a v2 cgroup holding
//     processes cannot hand controllers down), and one child per sandbox
//     with pids.max set. Every command joins it before it runs, and Close and
//     Sweep kill every process in it, env -i daemons included.
//   - PidsRlimit, for other users: commands run with RLIMIT_NPROC. The kernel
//     counts every process of the user against it, so the limit is the
//     user's process count when the provider opened plus the sandbox's
//     limit: coarse, shared by all sandboxes, but it stops a fork bomb.
//   - PidsNone: root without a writable pids cgroup, where RLIMIT_NPROC
//     does not apply. Setting the "pids" param then fails New, since it
//     could not be honoured.
//
// A limited command's shell first waits on a pipe (a builtin read, see
// gatePrefix) while the provider puts it into the cgroup or sets its
// RLIMIT_NPROC, so none of its processes ever runs outside the limit; that
// costs a pipe per exec, no extra process.
// Memory and CPU are not bounded (Spec.Resources.MemoryMB and CPUs are
// ignored), nor are capabilities dropped (Spec.Resources.Capabilities is
// ignored: commands have the provider's own privileges); Spec.Image and
// Spec.Labels are ignored too.
//
// # Layout
//
// Each provider makes one directory, forkline-local-XXXX, under Options.Dir
// (default os.TempDir()), and removes it on Close. Inside it:
//
//	owner                the pid and start time of the process that owns it (for Sweep)
//	sb-ID/ws             a sandbox's workspace (an overlay mount point for overlay forks)
//	sb-ID/upper, work    the overlay upper and work directories of a fork
//	cp-ID/tree           a checkpoint: a frozen copy of a workspace, never written again
//	cp-ID/layer          a checkpoint of an overlay fork: its frozen upper layer, over its base's
//
// # Actions
//
// exec runs "/bin/sh -c CMD" in the workspace (a CMD longer than 32 KiB,
// past what one execve argument may safely be, is written to a file beside
// the workspace and sourced by that shell), in its own process group,
// with stdin /dev/null and stdout and stderr sharing one pipe, so the output
// is interleaved exactly as written and capped by a providers.CapBuffer
// (Spec.OutputCap). The environment is PATH (the host's), LANG=C.UTF-8,
// HOME and FORKLINE_WORKSPACE set to the workspace, then Spec.Env, then
// FORKLINE_EXEC, the exec's mark (see killMarked).
// The timeout is Action.TimeoutMS, else providers.DefaultExecTimeout; when it
// fires the whole process group, and every process carrying the exec's mark,
// is killed with SIGKILL and the observation is TimedOut with exit code -1.
// A cancelled ctx kills them too and Act returns ctx's error. A command killed by a signal it did not get from us
// reports 128+signal, as a shell would.
//
// Background jobs (cmd &) survive the exec that started them, until the
// sandbox is closed, which kills every process group the sandbox started
// and every process carrying one of its marks. Act
// waits at most PipeGrace after the shell exits for them to release the
// output pipe, then closes it: a background job should redirect its output
// (cmd >log 2>&1 &), or its next write to stdout fails.
//
// read_file and write_file resolve paths with providers.ResolvePath
// (relative to the workspace, or absolute under /workspace) and then go
// through an os.Root opened on the workspace, so no symlink can lead outside.
// write_file creates missing parent directories. read_file output is capped
// like exec output; files from Spec.Files and write_file get mode 0644 and
// new directories 0755. wait sleeps; done does nothing; every other kind (the
// GUI actions, and kinds runtime does not know) is answered with an
// ErrUnsupported observation. Actions that are not commands report exit
// code -1.
//
// # Checkpoint and fork
//
// Checkpoint of a sandbox made by Create (a golden) copies its current view
// into cp-ID/tree (once per task, so its O(size) cost is paid once); the
// sandbox stays usable and later writes to it do not reach the checkpoint.
// Quiesce background jobs first: a file being written during the copy is
// copied as it is at that moment. Forks inherit the checkpointed sandbox's
// Env and OutputCap; processes are not forked, only files.
//
// Checkpoint of an overlay fork — in the middle of an episode, to branch it
// — freezes only what the fork changed: its upper layer becomes cp-ID/layer,
// stacked on the checkpoint the fork came from, and forks of it mount the
// whole stack (layer over layer over the golden tree) as their lower
// layers. Its cost grows with the episode's diff, not with the workspace
// (Checkpoint.Bytes is the diff's size). When nothing holds the workspace
// (no process the fork started has its directory or a file there) the
// upper layer is frozen in place — unmount, rename, mount again over the new
// stack with a fresh upper layer: Method "layer", a constant cost whatever
// the diff; otherwise it is copied, whiteouts and overlay attributes kept
// (Method "layer-copy"), and a file being written meanwhile is copied as it
// is. A stack that would pass 64 layers, or whose mount options would not
// fit in a page, is flattened: the fork's view is copied into a tree
// (Method "tree"). A layer holds its base checkpoint until it is removed,
// so releasing a golden never breaks the branch points made over it.
//
// In copy mode there are no layers: a checkpoint of a fork copies the
// fork's whole workspace into a tree, as a golden's is, and its cost grows
// with the workspace (on XFS or btrfs, reflinks make it grow with the number
// of files instead).
//
// Fork uses one of two methods, chosen at Open by the "fork" param:
//
//   - overlay: an overlayfs mount with the checkpoint tree as lowerdir and a
//     fresh upperdir and workdir; its cost does not grow with the workspace.
//     It needs the right to mount: root, or a user namespace of our own. Open
//     probes this once by really mounting an overlay in its directory.
//   - copy: a recursive copy of the checkpoint tree, cloning each file with
//     the FICLONE ioctl (reflink) where the filesystem supports it, else a
//     plain copy. Modes, ownership (as root), symlinks, FIFOs and
//     modification times are kept; hard links become separate files, and
//     sockets and device nodes are skipped.
//
// The "fork" param is "auto" (default: overlay when the probe succeeds, else
// copy), "overlay" (Open fails with ErrOverlayUnavailable and the reason when
// the probe fails) or "copy". Capabilities().ForkMethod and SandboxInfo.Origin
// ("overlay", "copy", or "create") say which path ran. The only other param
// is "pids" (see Process limit); an unknown one fails Open.
//
// A released checkpoint accepts no more forks; its tree is removed once the
// last overlay fork that uses it is closed, since an overlay's lower layer
// must not change under it.
//
// # Cleanup
//
// Closing a sandbox kills its process groups, unmounts its overlay (lazily,
// MNT_DETACH, if it is busy) and removes its directory. Closing the provider
// does that for every sandbox and checkpoint left and removes its directory.
// A crashed process cannot clean up: call Sweep(dir) at start-up with the
// directory the providers used (Options.Dir, or os.TempDir()) to unmount and
// remove what dead processes left there. Provider.Leftovers
// (providertest.LeakChecker) lists what a provider still holds.
package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/providers"
)

// Name is the registry name of this provider.
const Name = "local"

// ParamFork is the Options.Params key that picks the fork method.
const ParamFork = "fork"

// The values of the "fork" param, and the fork methods reported in
// Capabilities().ForkMethod and SandboxInfo.Origin.
const (
	ForkAuto    = "auto"
	ForkOverlay = "overlay"
	ForkCopy    = "copy"
)

// OriginCreate is the SandboxInfo.Origin of a sandbox made by Create.
const OriginCreate = "create"

// PipeGrace is how long an exec waits, after its shell exited, for background
// jobs to release the output pipe before closing it.
const PipeGrace = 500 * time.Millisecond

// rootPrefix names every provider directory, so Sweep can recognise them.
const rootPrefix = "forkline-local-"

// ErrOverlayUnavailable is returned by New when the "fork" param is "overlay"
// and this process cannot mount an overlay in the provider's directory; the
// error says why.
var ErrOverlayUnavailable = errors.New("local: overlay mounts unavailable")

func init() {
	// New does no I/O that could block (a mkdir, an overlay mount probe), so
	// the context only stops a start-up that has not begun.
	providers.Register(Name, func(ctx context.Context, opts providers.Options) (providers.Provider, error) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("local: %w", err)
		}
		return New(opts)
	})
}

// Provider is the local provider. It is safe for concurrent use.
type Provider struct {
	root    string // our forkline-local-XXXX directory
	method  string // ForkOverlay or ForkCopy
	overlay string // extra overlay mount options found by the probe
	copier  *copier
	pids    *pidsLimiter
	// defaultPids is the process limit of a sandbox whose spec sets none.
	defaultPids int64

	mu          sync.Mutex
	closed      bool
	sandboxes   map[string]*sandbox
	checkpoints map[string]*checkpoint
}

// checkpoint is a frozen workspace: a tree (a copy of a workspace), or a
// layer (what one overlay fork changed) stacked on the checkpoint that
// fork came from. Neither is written after it is made. Guarded by
// Provider.mu.
type checkpoint struct {
	info providers.Checkpoint
	dir  string
	// layers are the directories a fork's overlay stacks, top first: the
	// tree alone, or the layer and then its base's layers.
	layers    []string
	base      *checkpoint // the checkpoint a layer is stacked on; it holds one use of it
	env       []string
	outputCap int
	pidsMax   int64
	shell     providers.ShellMode // forks start a shell of this mode (a new one)
	users     int                 // live overlay forks (and layers) stacked on it
	released  bool                // no more forks; remove when users drops to zero
}

// New opens a local provider. Options.Dir is where its directory is made
// (default os.TempDir()); Options.Params accepts "fork" and "pids" (see the
// package comment); Options.RunID is recorded in the owner file.
func New(opts providers.Options) (*Provider, error) {
	if err := providers.CheckParams(Name, opts.Params, ParamFork, ParamPids); err != nil {
		return nil, err
	}
	defaultPids := int64(DefaultPids)
	pidsParam, pidsSet := opts.Params[ParamPids]
	if pidsSet {
		n, err := strconv.ParseInt(pidsParam, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("local: param %s=%q: want a number > 0", ParamPids, pidsParam)
		}
		defaultPids = n
	}
	want := opts.Params[ParamFork]
	switch want {
	case "":
		want = ForkAuto
	case ForkAuto, ForkOverlay, ForkCopy:
	default:
		return nil, fmt.Errorf("local: param %s=%q (known: %s, %s, %s)", ParamFork, want, ForkAuto, ForkCopy, ForkOverlay)
	}
	base := opts.Dir
	if base == "" {
		base = os.TempDir()
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	root, err := os.MkdirTemp(base, rootPrefix)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	// Mount points in /proc/self/mountinfo are absolute and symlink-free.
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	if err := writeOwner(root, opts.RunID); err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	p := &Provider{
		root:        root,
		method:      ForkCopy,
		copier:      &copier{},
		pids:        newPidsLimiter(root),
		defaultPids: defaultPids,
		sandboxes:   map[string]*sandbox{},
		checkpoints: map[string]*checkpoint{},
	}
	if pidsSet && p.pids.mode == PidsNone {
		_ = removeTree(root)
		return nil, fmt.Errorf("local: param %s=%s cannot be enforced here (%s)", ParamPids, pidsParam, p.pids.reason)
	}
	if want != ForkCopy {
		extra, err := probeOverlay(root)
		switch {
		case err == nil:
			p.method, p.overlay = ForkOverlay, extra
		case want == ForkOverlay:
			_ = p.pids.close()
			_ = removeTree(root)
			return nil, fmt.Errorf("%w in %s: %v", ErrOverlayUnavailable, base, err)
		}
	}
	return p, nil
}

// Name returns "local".
func (p *Provider) Name() string { return Name }

// Capabilities reports checkpoint and fork support, no GUI, no isolation, and
// the fork method chosen at Open.
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{
		Checkpoint: true,
		Fork:       true,
		GUI:        false,
		Isolation:  "none",
		ForkMethod: p.method,
	}
}

// Dir returns the provider's own directory, which holds every sandbox and
// checkpoint it makes.
func (p *Provider) Dir() string { return p.root }

// PidsLimit says how the provider bounds its sandboxes' processes
// (PidsCgroup, PidsRlimit or PidsNone) and, when not with a cgroup, why.
func (p *Provider) PidsLimit() (mode, reason string) { return p.pids.mode, p.pids.reason }

// Create makes an empty workspace and writes spec.Files into it.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	if err := providers.RefuseServices("local", spec); err != nil {
		return nil, err
	}
	if spec.GUI != nil {
		return nil, fmt.Errorf("local: %w", providers.ErrNoGUI)
	}
	if spec.Build != nil {
		return nil, fmt.Errorf("local: %w: the local provider has no images, so it cannot build one from %s (use -provider docker)", providers.ErrNotSupported, spec.Build.Context)
	}
	if len(spec.Mounts) > 0 {
		return nil, fmt.Errorf("local: %w: the local provider's commands see the host's files, so it mounts nothing (%s)", providers.ErrNotSupported, spec.Mounts[0].Source)
	}
	files, err := specFiles(spec.Files)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id, dir, err := p.newDir("sb")
	if err != nil {
		return nil, err
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		_ = removeTree(dir)
		return nil, fmt.Errorf("local: %w", err)
	}
	pidsMax := spec.Resources.Pids
	if pidsMax <= 0 {
		pidsMax = p.defaultPids
	}
	s, err := newSandbox(p, id, dir, ws, OriginCreate, "", spec.Env, spec.OutputCap, pidsMax, spec.Shell, nil)
	if err != nil {
		_ = removeTree(dir)
		return nil, err
	}
	for _, f := range files {
		if err := s.writeFile(f.rel, f.data); err != nil {
			_ = s.destroy()
			return nil, fmt.Errorf("local: writing spec file %q: %w", f.rel, err)
		}
	}
	if err := p.add(s); err != nil {
		_ = s.destroy()
		return nil, err
	}
	return s, nil
}

type specFile struct {
	rel  string
	data []byte
}

// specFiles resolves the paths of spec.Files, in a stable order.
func specFiles(m map[string][]byte) ([]specFile, error) {
	out := make([]specFile, 0, len(m))
	for name, data := range m {
		rel, err := providers.ResolvePath(name)
		if err != nil {
			return nil, fmt.Errorf("local: spec file: %w", err)
		}
		if rel == "." {
			return nil, fmt.Errorf("local: spec file %q names the workspace itself", name)
		}
		out = append(out, specFile{rel, data})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, nil
}

// Checkpoint freezes sb: an overlay fork's changes become a layer stacked
// on the checkpoint it was forked from (see layer.go); any other sandbox's
// workspace is copied into a new checkpoint tree.
func (p *Provider) Checkpoint(ctx context.Context, sb providers.Sandbox, label string) (providers.Checkpoint, error) {
	s, err := p.own(sb)
	if err != nil {
		return providers.Checkpoint{}, err
	}
	if err := s.checkOpen(); err != nil {
		return providers.Checkpoint{}, err
	}
	if s.origin == ForkOverlay {
		if cp, ok, err := p.checkpointLayer(ctx, s, label); ok || err != nil {
			return cp, err
		}
	}
	return p.checkpointTree(ctx, s, label, MethodTree)
}

// checkpointTree copies s's workspace, as its commands see it, into a new
// checkpoint tree.
func (p *Provider) checkpointTree(ctx context.Context, s *sandbox, label, method string) (providers.Checkpoint, error) {
	began := time.Now()
	id, dir, err := p.newDir("cp")
	if err != nil {
		return providers.Checkpoint{}, err
	}
	tree := filepath.Join(dir, "tree")
	size, err := p.copier.copyTree(ctx, s.ws, tree)
	if err == nil {
		err = syncFS(tree)
	}
	if err != nil {
		_ = removeTree(dir)
		return providers.Checkpoint{}, fmt.Errorf("local: checkpoint of %s: %w", s.id, err)
	}
	cp := &checkpoint{
		info: providers.Checkpoint{
			ID: id, Label: label, Provider: Name, Bytes: size, Took: time.Since(began), Method: method,
		},
		dir: dir, layers: []string{tree},
		env:       append([]string(nil), s.spec.env...),
		outputCap: s.spec.outputCap,
		pidsMax:   s.spec.pidsMax,
		shell:     s.spec.shell,
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = removeTree(dir)
		return providers.Checkpoint{}, fmt.Errorf("local: checkpoint: %w", providers.ErrClosed)
	}
	p.checkpoints[id] = cp
	return cp.info, nil
}

// Fork makes a sandbox whose workspace starts equal to cp, by the provider's
// fork method.
func (p *Provider) Fork(ctx context.Context, cp providers.Checkpoint) (providers.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	overlay := p.method == ForkOverlay
	p.mu.Lock()
	c, err := p.liveCheckpoint(cp)
	if err == nil && overlay {
		c.users++ // held until the fork closes, so Release cannot pull the lower layer away
	}
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s, err := p.fork(ctx, c, overlay)
	if err != nil && overlay {
		p.dropUser(c)
	}
	return s, err
}

func (p *Provider) fork(ctx context.Context, c *checkpoint, overlay bool) (*sandbox, error) {
	id, dir, err := p.newDir("sb")
	if err != nil {
		return nil, err
	}
	ws := filepath.Join(dir, "ws")
	var origin string
	if overlay {
		origin = ForkOverlay
		err = mountOverlay(c.layers, dir, ws, p.overlay)
	} else {
		origin = ForkCopy
		// A copy-mode provider only makes trees (Checkpoint stacks layers
		// on overlay forks only), so this is the whole state.
		_, err = p.copier.copyTree(ctx, c.layers[0], ws)
	}
	if err != nil {
		_ = removeTree(dir)
		return nil, fmt.Errorf("local: fork of %s: %w", c.info.ID, err)
	}
	var uses *checkpoint
	if overlay {
		uses = c
	}
	s, err := newSandbox(p, id, dir, ws, origin, c.info.ID, c.env, c.outputCap, c.pidsMax, c.shell, uses)
	if err != nil {
		if overlay {
			_ = unmount(ws)
		}
		_ = removeTree(dir)
		return nil, err
	}
	if err := p.add(s); err != nil {
		s.uses = nil // the caller drops the user count
		_ = s.destroy()
		return nil, err
	}
	return s, nil
}

// Release deletes cp: at once when no overlay fork uses it, else when the
// last one closes. It is idempotent.
func (p *Provider) Release(ctx context.Context, cp providers.Checkpoint) error {
	if cp.Provider != "" && cp.Provider != Name {
		return fmt.Errorf("local: release: checkpoint %s belongs to provider %q", cp.ID, cp.Provider)
	}
	p.mu.Lock()
	c, ok := p.checkpoints[cp.ID]
	if !ok || c.released {
		p.mu.Unlock()
		return nil
	}
	c.released = true
	remove := c.users == 0
	if remove {
		delete(p.checkpoints, cp.ID)
	}
	p.mu.Unlock()
	if remove {
		return p.removeCheckpoint(c)
	}
	return nil
}

// removeCheckpoint removes c, no longer listed, and ends its use of its
// base.
func (p *Provider) removeCheckpoint(c *checkpoint) error {
	err := removeTree(c.dir)
	if c.base != nil {
		p.dropUser(c.base)
	}
	return err
}

// Close closes every sandbox, removes every checkpoint and the provider's
// directory. It is idempotent.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	sbs := make([]*sandbox, 0, len(p.sandboxes))
	for _, s := range p.sandboxes {
		sbs = append(sbs, s)
	}
	p.mu.Unlock()

	var errs []error
	for _, s := range sbs {
		errs = append(errs, s.Close(ctx))
	}
	p.mu.Lock()
	cps := p.checkpoints
	p.checkpoints = map[string]*checkpoint{}
	p.mu.Unlock()
	for _, c := range cps {
		errs = append(errs, removeTree(c.dir))
	}
	// A safety net for anything a failed sandbox close left mounted.
	errs = append(errs, p.pids.close(), unmountUnder(p.root), removeTree(p.root))
	return errors.Join(errs...)
}

// Leftovers lists what the provider still holds on the host: sandbox and
// checkpoint directories and mounts under its directory. After everything is
// closed, and after Close, it returns nothing. It implements
// providertest.LeakChecker.
func (p *Provider) Leftovers(ctx context.Context) ([]string, error) {
	var out []string
	entries, err := os.ReadDir(p.root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("local: %w", err)
	}
	for _, e := range entries {
		if e.Name() == ownerFile || e.Name() == cgroupFile {
			continue
		}
		out = append(out, "directory "+filepath.Join(p.root, e.Name()))
	}
	mounts, err := mountsUnder(p.root)
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		out = append(out, "mount "+m)
	}
	if p.pids.mode == PidsCgroup {
		out = append(out, p.pids.leftovers()...)
	}
	return out, nil
}

// newDir makes a fresh sb-ID or cp-ID directory.
func (p *Provider) newDir(kind string) (id, dir string, err error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return "", "", fmt.Errorf("local: %w", providers.ErrClosed)
	}
	for range 8 {
		id = kind + "-" + randomHex(6)
		dir = filepath.Join(p.root, id)
		err = os.Mkdir(dir, 0o700)
		if !errors.Is(err, os.ErrExist) {
			break
		}
	}
	if err != nil {
		return "", "", fmt.Errorf("local: %w", err)
	}
	return id, dir, nil
}

// add registers a new sandbox, unless the provider closed meanwhile.
func (p *Provider) add(s *sandbox) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("local: %w", providers.ErrClosed)
	}
	p.sandboxes[s.id] = s
	return nil
}

// forget is called by a closing sandbox.
func (p *Provider) forget(s *sandbox) {
	p.mu.Lock()
	delete(p.sandboxes, s.id)
	p.mu.Unlock()
	if s.uses != nil {
		p.dropUser(s.uses)
	}
}

// dropUser ends one overlay fork's use of c, removing c if it was released
// and this was the last user.
func (p *Provider) dropUser(c *checkpoint) {
	p.mu.Lock()
	c.users--
	remove := c.released && c.users == 0
	if remove && p.checkpoints[c.info.ID] == c {
		delete(p.checkpoints, c.info.ID)
	}
	p.mu.Unlock()
	if remove {
		_ = p.removeCheckpoint(c)
	}
}

// liveCheckpoint finds cp among ours. Called with p.mu held.
func (p *Provider) liveCheckpoint(cp providers.Checkpoint) (*checkpoint, error) {
	if p.closed {
		return nil, fmt.Errorf("local: fork: %w", providers.ErrClosed)
	}
	if cp.Provider != Name {
		return nil, fmt.Errorf("local: fork: checkpoint %s belongs to provider %q", cp.ID, cp.Provider)
	}
	c, ok := p.checkpoints[cp.ID]
	if !ok {
		return nil, fmt.Errorf("local: fork: unknown checkpoint %q (released, or from another provider instance)", cp.ID)
	}
	if c.released {
		return nil, fmt.Errorf("local: fork: checkpoint %s was released", cp.ID)
	}
	return c, nil
}

// own returns sb as one of our sandboxes.
func (p *Provider) own(sb providers.Sandbox) (*sandbox, error) {
	s, ok := sb.(*sandbox)
	if !ok || s.p != p {
		id := "<nil>"
		if sb != nil {
			id = sb.Info().ID
		}
		return nil, fmt.Errorf("local: sandbox %s does not belong to this provider", id)
	}
	return s, nil
}

// String describes the provider for logs.
func (p *Provider) String() string {
	return fmt.Sprintf("local(fork=%s, dir=%s)", p.method, p.root)
}

var _ providers.Provider = (*Provider)(nil)

func hasPathPrefix(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}
