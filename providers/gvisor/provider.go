package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/docker"
)

// Name is the registry name of this provider.
const Name = "gvisor"

// ForkMethod is Capabilities().ForkMethod and the SandboxInfo.Origin of a
// fork: a runsc restore of a checkpoint image.
const ForkMethod = "restore"

// OriginCreate is the SandboxInfo.Origin of a sandbox made by Create.
const OriginCreate = "create"

// MethodCheckpoint is the Checkpoint.Method of a runsc checkpoint of a
// running sandbox; MethodLink that of a checkpoint of a sandbox whose
// processes have not run since its last checkpoint: the same image, hard
// linked.
const (
	MethodCheckpoint = "runsc-checkpoint"
	MethodLink       = "link"
)

// workspaceDir is the workspace of a sandbox whose image sets no WORKDIR.
const workspaceDir = providers.WorkspaceRoot

// The Options.Params keys this provider accepts.
const (
	// ParamImage is the default image (default forkline/busybox), whose
	// files come through the Docker engine.
	ParamImage = "image"
	// ParamRootfs is a directory used as the root filesystem of every
	// sandbox whose spec names no image, instead of ParamImage: no Docker
	// engine needed. Nothing is ever written into it.
	ParamRootfs = "rootfs"
	// ParamNetwork is the default network: "none" (default) or "host".
	ParamNetwork = "network"
	// ParamPlatform is runsc's platform: "ptrace" (default) or "kvm".
	ParamPlatform = "platform"
	// ParamRunsc is the runsc binary (default: runsc on PATH).
	ParamRunsc = "runsc"
	// ParamSweep is "on" (default) or "off": whether Sweep removes what dead
	// runs left.
	ParamSweep = "sweep"
	// ParamBootTimeout bounds how long runsc may take to start or restore
	// a sandbox (default DefaultBootTimeout).
	ParamBootTimeout = "boot_timeout"
	// ParamGoldens is a directory that keeps goldens' checkpoint images
	// across runs (see goldens.go): a later or resumed run forks the stored
	// golden instead of running setup and start again.
	ParamGoldens = "goldens"
	// ParamDebugLog is a directory where runsc writes its debug logs (one
	// file per runsc process: runsc --debug --debug-log=DIR/), for a
	// sandbox that fails in a way forkline cannot explain.
	ParamDebugLog = "debug_log"
	// ParamPids, ParamMemoryMB and ParamCPUs change the default limits, as
	// on docker.
	ParamPids     = docker.ParamPids
	ParamMemoryMB = docker.ParamMemoryMB
	ParamCPUs     = docker.ParamCPUs
)

// The platforms runsc 20221219 has.
const (
	PlatformPtrace = "ptrace"
	PlatformKVM    = "kvm"
)

// Network modes a sandbox may have. "host" is gVisor's passthrough of the
// host's network (hostinet): runsc cannot checkpoint a sandbox on it, so
// such a sandbox is never a golden.
const (
	NetworkNone = "none"
	NetworkHost = "host"
)

// DefaultBootTimeout bounds a runsc run or restore: under heavy load a
// restore took about a second here, and the kvm platform has been seen to
// hang at boot instead of failing.
const DefaultBootTimeout = 2 * time.Minute

// removeTimeout bounds the removal of one container during cleanup.
const removeTimeout = time.Minute

// ownerFile, in the provider's directory, names the process that owns it.
const ownerFile = "owner"

// dirPrefix names a provider's directory under Options.Dir.
const dirPrefix = "forkline-gvisor-"

// rootfsCacheName is the directory, under Options.Dir, of the image files
// exported for sandboxes: one directory per image id, shared by runs.
const rootfsCacheName = "forkline-gvisor-rootfs"

func init() {
	providers.Register(Name, func(ctx context.Context, opts providers.Options) (providers.Provider, error) {
		return New(ctx, opts)
	})
	providers.Declare(Name, capabilities())
}

// Provider is the gvisor provider. It is safe for concurrent use.
type Provider struct {
	rs          *runsc
	runID       string
	owner       string // pid@hostname
	instance    string
	dir         string // this provider's directory (state, bundles, checkpoints)
	cacheDir    string // the rootfs cache
	image       string
	dirRootfs   *rootfs // the ParamRootfs directory, nil when not given
	network     string
	limits      limits
	sweep       bool
	bootTimeout time.Duration
	goldens     string // ParamGoldens, absolute; "" for none

	engineMu sync.Mutex
	docker   *docker.Provider // opened on first need of an image's files

	fsMu sync.Mutex
	fs   map[string]*rootfsEntry

	// closing tracks the deletions of closed sandboxes, which go on in
	// the background (see sandbox.Close); closeErrs are their failures,
	// returned by Close.
	closing   sync.WaitGroup
	closeErrs []error

	mu          sync.Mutex
	closed      bool
	seq         int
	sandboxes   map[string]*sandbox
	checkpoints map[string]*checkpoint
}

// noteCloseErr keeps the failure of a sandbox's deletion for Close.
func (p *Provider) noteCloseErr(err error) {
	p.mu.Lock()
	p.closeErrs = append(p.closeErrs, err)
	p.mu.Unlock()
}

// limits are a provider's default limits (docker's defaults, changed by
// the same params).
type limits struct {
	pids     int64
	memoryMB int64
	cpus     float64
}

// checkpoint is a checkpoint image and what its forks need. Guarded by
// Provider.mu.
type checkpoint struct {
	info     providers.Checkpoint
	dir      string // holds checkpoint.img
	spec     sandboxSpec
	released bool
}

// sandboxSpec is what a sandbox passes on to the forks of its checkpoints.
type sandboxSpec struct {
	fs        *rootfs
	env       []string // Spec.Env
	outputCap int
	cpus      float64
	memoryMB  int64
	pids      int64
	caps      []string // kept capabilities, canonical names
	network   string
	labels    map[string]string
	shell     providers.ShellMode // Spec.Shell; a fork goes on with the checkpointed shell (see shell.go)
}

// netRaw reports whether the sandbox keeps NET_RAW.
func (ss sandboxSpec) netRaw() bool { return slices.Contains(ss.caps, "NET_RAW") }

// New opens a gvisor provider. It finds runsc (ErrNoRunsc names the Debian
// package when it is missing) and checks the params; it starts nothing and
// removes nothing (see Sweep). Options.Dir is where the provider keeps its
// state, bundles and checkpoint images (a directory of its own, removed by
// Close) and the rootfs cache (default os.TempDir()).
func New(ctx context.Context, opts providers.Options) (*Provider, error) {
	if err := providers.CheckParams(Name, opts.Params, ParamImage, ParamRootfs, ParamNetwork, ParamPlatform, ParamRunsc,
		ParamSweep, ParamBootTimeout, ParamDebugLog, ParamGoldens, ParamPids, ParamMemoryMB, ParamCPUs); err != nil {
		return nil, err
	}
	lim, err := parseLimitParams(opts.Params)
	if err != nil {
		return nil, err
	}
	p := &Provider{
		runID: opts.RunID, image: docker.DefaultImage, network: NetworkNone, limits: lim, sweep: true,
		bootTimeout: DefaultBootTimeout, fs: map[string]*rootfsEntry{},
		sandboxes: map[string]*sandbox{}, checkpoints: map[string]*checkpoint{},
	}
	if v := opts.Params[ParamImage]; v != "" {
		p.image = v
	}
	if v, ok := opts.Params[ParamRootfs]; ok {
		if _, img := opts.Params[ParamImage]; img {
			return nil, fmt.Errorf("gvisor: params %s and %s both name the default root filesystem: give one", ParamRootfs, ParamImage)
		}
		if p.dirRootfs, err = dirRootfs(v); err != nil {
			return nil, err
		}
	}
	switch v := opts.Params[ParamNetwork]; v {
	case "":
	case NetworkNone, NetworkHost:
		p.network = v
	default:
		return nil, fmt.Errorf("gvisor: param %s=%q (known: %s, %s)", ParamNetwork, v, NetworkHost, NetworkNone)
	}
	platform := opts.Params[ParamPlatform]
	switch platform {
	case "":
		platform = PlatformPtrace
	case PlatformPtrace:
	case PlatformKVM:
		if _, err := os.Stat("/dev/kvm"); err != nil {
			return nil, fmt.Errorf("gvisor: param %s=%s needs /dev/kvm, which this host does not have (%v); use %s", ParamPlatform, PlatformKVM, err, PlatformPtrace)
		}
	default:
		return nil, fmt.Errorf("gvisor: param %s=%q (known: %s, %s)", ParamPlatform, platform, PlatformKVM, PlatformPtrace)
	}
	switch v := opts.Params[ParamSweep]; v {
	case "", "on":
	case "off":
		p.sweep = false
	default:
		return nil, fmt.Errorf("gvisor: param %s=%q (known: off, on)", ParamSweep, v)
	}
	if v, ok := opts.Params[ParamBootTimeout]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("gvisor: param %s=%q: want a duration > 0, e.g. 2m", ParamBootTimeout, v)
		}
		p.bootTimeout = d
	}
	if v := opts.Params[ParamGoldens]; v != "" {
		abs, err := filepath.Abs(v)
		if err == nil {
			err = os.MkdirAll(abs, 0o700)
		}
		if err != nil {
			return nil, fmt.Errorf("gvisor: param %s=%q: %w", ParamGoldens, v, err)
		}
		p.goldens = abs
	}
	bin, err := findRunsc(opts.Params[ParamRunsc])
	if err != nil {
		return nil, err
	}
	version, err := runscVersion(ctx, bin)
	if err != nil {
		return nil, err
	}
	if p.runID == "" {
		p.runID = "run-" + randomHex(6)
	}
	host, _ := os.Hostname()
	p.owner = strconv.Itoa(os.Getpid()) + "@" + host
	p.instance = randomHex(6)
	base := opts.Dir
	if base == "" {
		base = os.TempDir()
	}
	if base, err = filepath.Abs(base); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	p.cacheDir = filepath.Join(base, rootfsCacheName)
	p.dir = filepath.Join(base, dirPrefix+p.instance)
	if err := os.MkdirAll(filepath.Join(p.dir, "state"), 0o700); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	if err := os.WriteFile(filepath.Join(p.dir, ownerFile), []byte(p.owner+"\n"+p.runID+"\n"), 0o600); err != nil {
		_ = os.RemoveAll(p.dir)
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	p.rs = &runsc{path: bin, root: filepath.Join(p.dir, "state"), platform: platform, version: version}
	if v := opts.Params[ParamDebugLog]; v != "" {
		abs, err := filepath.Abs(v)
		if err == nil {
			err = os.MkdirAll(abs, 0o700)
		}
		if err != nil {
			_ = os.RemoveAll(p.dir)
			return nil, fmt.Errorf("gvisor: param %s=%q: %w", ParamDebugLog, v, err)
		}
		p.rs.debugLog = abs + "/"
	}
	return p, nil
}

// parseLimitParams reads the default-limit params; as on docker, zero,
// negative and non-finite values are refused.
func parseLimitParams(params map[string]string) (limits, error) {
	l := limits{pids: docker.DefaultPids, memoryMB: docker.DefaultMemoryMB, cpus: docker.DefaultCPUs}
	bad := func(key, v string) error {
		return fmt.Errorf("gvisor: param %s=%q: want a number > 0 (a task's limits override it per task; there is no unlimited)", key, v)
	}
	if v, ok := params[ParamPids]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > 1<<22 {
			return limits{}, bad(ParamPids, v)
		}
		l.pids = n
	}
	if v, ok := params[ParamMemoryMB]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > 1<<40 {
			return limits{}, bad(ParamMemoryMB, v)
		}
		l.memoryMB = n
	}
	if v, ok := params[ParamCPUs]; ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return limits{}, bad(ParamCPUs, v)
		}
		l.cpus = f
	}
	return l, nil
}

// Name returns "gvisor".
func (p *Provider) Name() string { return Name }

// Capabilities: checkpoints are runsc checkpoint images of the whole
// sandbox — processes, memory and files — and forks restore them.
func (p *Provider) Capabilities() providers.Capabilities { return capabilities() }

func capabilities() providers.Capabilities {
	return providers.Capabilities{Checkpoint: true, Fork: true, Isolation: "container", ForkMethod: ForkMethod, ForksMemory: true}
}

// RunscVersion is what the runsc binary said of its version.
func (p *Provider) RunscVersion() string { return p.rs.version }

// Platform is runsc's platform (ParamPlatform).
func (p *Provider) Platform() string { return p.rs.platform }

// Dir is the provider's own directory on the host.
func (p *Provider) Dir() string { return p.dir }

// StateRoot is the runsc state directory of the provider's containers
// (runsc --root), for tools that run runsc on them (benchmarks/gvisor).
func (p *Provider) StateRoot() string { return p.rs.root }

// ContainerID is the runsc container a sandbox of this provider runs as
// now: it changes when a checkpointed sandbox is restored. ok is false for
// a sandbox this provider did not make.
func (p *Provider) ContainerID(sb providers.Sandbox) (id string, ok bool) {
	s, ok := sb.(*sandbox)
	if !ok || s.p != p {
		return "", false
	}
	return s.cidNow(), true
}

func (p *Provider) checkOpen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("gvisor: %w", providers.ErrClosed)
	}
	return nil
}

// resolveSpec turns a Spec into what the sandbox runs with: its rootfs,
// limits (the spec's, else the provider's defaults), capabilities (docker's
// default set plus the spec's) and network.
func (p *Provider) resolveSpec(ctx context.Context, spec providers.Spec, progress io.Writer) (sandboxSpec, string, error) {
	caps, err := providers.CanonicalCapabilities(spec.Resources.Capabilities)
	if err != nil {
		return sandboxSpec{}, "", fmt.Errorf("gvisor: %w", err)
	}
	kept := slices.Clone(docker.DefaultCapabilities)
	for _, c := range caps {
		if !slices.Contains(kept, c) {
			kept = append(kept, c)
		}
	}
	slices.Sort(kept)
	ss := sandboxSpec{
		env: slices.Clone(spec.Env), outputCap: spec.OutputCap, cpus: spec.Resources.CPUs, memoryMB: spec.Resources.MemoryMB,
		pids: spec.Resources.Pids, caps: kept, network: spec.Resources.Network, labels: copyLabels(spec.Labels),
		shell: spec.Shell,
	}
	if _, err := providers.ParseShellMode(string(spec.Shell)); err != nil {
		return sandboxSpec{}, "", fmt.Errorf("gvisor: %w", err)
	}
	if ss.outputCap <= 0 {
		ss.outputCap = providers.DefaultOutputCap
	}
	if ss.cpus <= 0 {
		ss.cpus = p.limits.cpus
	}
	if ss.memoryMB <= 0 {
		ss.memoryMB = p.limits.memoryMB
	}
	if ss.pids <= 0 {
		ss.pids = p.limits.pids
	}
	if ss.network == "" {
		ss.network = p.network
	}
	setup := spec.SetupNetwork
	if setup == "" {
		setup = ss.network
	}
	for _, n := range []string{ss.network, setup} {
		if err := checkNetwork(n); err != nil {
			return sandboxSpec{}, "", err
		}
	}
	if setup != ss.network {
		return sandboxSpec{}, "", fmt.Errorf("gvisor: %w: a setup network (%s) apart from the episodes' (%s): the golden is a memory checkpoint, which cannot change network, and runsc cannot checkpoint a sandbox on the host's network; run setup on the episodes' network or use -provider docker",
			providers.ErrCannotPrepare, setup, ss.network)
	}
	if ss.fs, err = p.rootfsOf(ctx, spec, progress); err != nil {
		return sandboxSpec{}, "", err
	}
	return ss, setup, nil
}

// checkNetwork refuses a mode this provider does not have.
func checkNetwork(n string) error {
	switch n {
	case NetworkNone, NetworkHost:
		return nil
	}
	return fmt.Errorf("gvisor: %w: network %q: a gvisor sandbox has network %s (loopback only) or %s (the host's, through gVisor's kernel; never checkpointed)",
		providers.ErrCannotPrepare, n, NetworkNone, NetworkHost)
}

// Prepare gets every spec's root filesystem ready before the first episode
// (providers.Preparer): images pulled or built on the Docker engine and
// their files exported (once per image id, cached across runs), networks
// checked. A spec that cannot be served — a missing image, a rootfs that
// cannot be had, a network this provider does not have, a GUI — fails the
// whole call, naming each, wrapping providers.ErrCannotPrepare.
func (p *Provider) Prepare(ctx context.Context, specs []providers.Spec, progress io.Writer) error {
	if err := p.checkOpen(); err != nil {
		return err
	}
	var errs []error
	if err := p.checkStore(); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if s.GUI != nil {
			errs = append(errs, fmt.Errorf("gvisor: %w: %w", providers.ErrCannotPrepare, providers.ErrNoGUI))
			continue
		}
		if err := refuseMounts(s); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", providers.ErrCannotPrepare, err))
			continue
		}
		if err := s.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("gvisor: %w: %w", providers.ErrCannotPrepare, err))
			continue
		}
		key := s.Image
		if s.Build != nil {
			key = "build:" + s.Build.Context + "\x00" + s.Build.Dockerfile
		}
		key += "\x00" + s.Resources.Network + "\x00" + s.SetupNetwork
		if seen[key] {
			continue
		}
		seen[key] = true
		if _, _, err := p.resolveSpec(ctx, s, progress); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, providers.ErrCannotPrepare) {
				err = fmt.Errorf("%w: %w", providers.ErrCannotPrepare, err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// nextID returns a new container id.
func (p *Provider) nextID() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return "", fmt.Errorf("gvisor: %w", providers.ErrClosed)
	}
	p.seq++
	// Fixed width: see containerID.
	return fmt.Sprintf("forkline-%s-%08d", p.instance, p.seq), nil
}

// annotations are put on every sandbox's OCI spec, for the people who look
// at runsc's state (runsc --root DIR list).
func (p *Provider) annotations(ss sandboxSpec, origin, sandboxID string) map[string]string {
	a := map[string]string{"forkline.run": p.runID, "forkline.owner": p.owner, "forkline.instance": p.instance,
		"forkline.origin": origin, "forkline.sandbox": sandboxID}
	for k, v := range ss.labels {
		a[k] = v
	}
	return a
}

// Create boots a sandbox of spec's rootfs (the image's files, or the
// "rootfs" param's directory) and writes spec.Files into its workspace.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	if err := providers.RefuseServices("gvisor", spec); err != nil {
		return nil, err
	}
	if spec.GUI != nil {
		return nil, fmt.Errorf("gvisor: %w", providers.ErrNoGUI)
	}
	if err := refuseMounts(spec); err != nil {
		return nil, err
	}
	files, err := specFiles(spec.Files)
	if err != nil {
		return nil, err
	}
	if err := p.checkOpen(); err != nil {
		return nil, err
	}
	ss, setup, err := p.resolveSpec(ctx, spec, nil)
	if err != nil {
		return nil, err
	}
	id, err := p.nextID()
	if err != nil {
		return nil, err
	}
	sb := newSandbox(p, id, OriginCreate, "", ss)
	sb.ownNetwork = setup
	if err := p.register(sb); err != nil {
		return nil, err
	}
	if err := sb.boot(ctx, sb.cidNow(), setup, ""); err != nil {
		_ = sb.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := sb.upload(ctx, ss.fs.workdir, files, true); err != nil {
		_ = sb.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("gvisor: writing the spec's files into %s: %w", id, err)
	}
	return sb, nil
}

// register tracks sb until it is closed.
func (p *Provider) register(sb *sandbox) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("gvisor: %w", providers.ErrClosed)
	}
	p.sandboxes[sb.id] = sb
	return nil
}

func (p *Provider) forget(sb *sandbox) {
	p.mu.Lock()
	delete(p.sandboxes, sb.id)
	p.mu.Unlock()
}

// Checkpoint writes a runsc checkpoint image of sb: its processes, their
// memory and its files (which live in the sandbox's memory). runsc stops
// a sandbox it checkpoints (its --leave-running re-creates the container
// and waits for it instead of returning, in the Debian release), so sb is
// restored from the same image before its next action: it goes on with
// every process as it was. A sandbox that has not acted since its last
// checkpoint is checkpointed by a hard link of that image.
func (p *Provider) Checkpoint(ctx context.Context, sb providers.Sandbox, label string) (providers.Checkpoint, error) {
	s, ok := sb.(*sandbox)
	if !ok || s.p != p {
		return providers.Checkpoint{}, errors.New("gvisor: Checkpoint of a sandbox this provider did not make")
	}
	if err := s.checkOpen(); err != nil {
		return providers.Checkpoint{}, err
	}
	if s.spec.network == NetworkHost || s.ownNetwork == NetworkHost {
		return providers.Checkpoint{}, fmt.Errorf("gvisor: %w: sandbox %s is on the host's network, and runsc cannot checkpoint a sandbox that uses the host's network stack", providers.ErrNotSupported, s.id)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return providers.Checkpoint{}, fmt.Errorf("gvisor: %w", providers.ErrClosed)
	}
	p.seq++
	cpID := fmt.Sprintf("cp-%s-%d", p.instance, p.seq)
	p.mu.Unlock()
	dir := filepath.Join(p.dir, "checkpoints", cpID)
	began := time.Now()
	method, err := s.checkpoint(ctx, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return providers.Checkpoint{}, err
	}
	took := time.Since(began)
	var size int64 = -1
	if st, err := os.Stat(filepath.Join(dir, imageFile)); err == nil {
		size = st.Size()
	}
	cp := providers.Checkpoint{ID: cpID, Label: label, Provider: Name, Bytes: size, Took: took, Method: method}
	if p.goldens != "" && s.origin == OriginCreate {
		// A golden: kept for later runs, as the goldens param asks.
		if err := p.storeGolden(label, s.spec, dir); err != nil {
			_ = os.RemoveAll(dir)
			return providers.Checkpoint{}, fmt.Errorf("gvisor: keeping the golden %s in %s (param %s): %w", label, p.goldens, ParamGoldens, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = os.RemoveAll(dir)
		return providers.Checkpoint{}, fmt.Errorf("gvisor: %w", providers.ErrClosed)
	}
	p.checkpoints[cpID] = &checkpoint{info: cp, dir: dir, spec: s.spec}
	return cp, nil
}

// Fork restores cp into a new sandbox: its processes run on from where
// they were checkpointed, with their memory and files.
func (p *Provider) Fork(ctx context.Context, cp providers.Checkpoint) (providers.Sandbox, error) {
	p.mu.Lock()
	c, ok := p.checkpoints[cp.ID]
	closed := p.closed
	p.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("gvisor: %w", providers.ErrClosed)
	case !ok || c.released:
		return nil, fmt.Errorf("gvisor: fork of unknown or released checkpoint %q", cp.ID)
	}
	id, err := p.nextID()
	if err != nil {
		return nil, err
	}
	sb := newSandbox(p, id, ForkMethod, cp.ID, c.spec)
	if err := p.register(sb); err != nil {
		return nil, err
	}
	if err := sb.boot(ctx, sb.cidNow(), c.spec.network, c.dir); err != nil {
		_ = sb.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return sb, nil
}

// Release deletes cp's image. Forks restored from it do not need it.
func (p *Provider) Release(ctx context.Context, cp providers.Checkpoint) error {
	p.mu.Lock()
	c, ok := p.checkpoints[cp.ID]
	if ok {
		delete(p.checkpoints, cp.ID)
		c.released = true
	}
	p.mu.Unlock()
	if !ok {
		return nil
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("gvisor: releasing %s: %w", cp.ID, err)
	}
	return nil
}

// Close closes every sandbox, releases every checkpoint, closes the docker
// provider it got images through and removes its own directory. The rootfs
// cache stays, shared by runs. It is idempotent.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	sbs := make([]*sandbox, 0, len(p.sandboxes))
	for _, sb := range p.sandboxes {
		sbs = append(sbs, sb)
	}
	p.checkpoints = map[string]*checkpoint{}
	p.mu.Unlock()
	for _, sb := range sbs {
		_ = sb.Close(ctx) // their deletions run in parallel; waited for below
	}
	p.closing.Wait()
	p.mu.Lock()
	errs := append([]error(nil), p.closeErrs...)
	p.closeErrs = nil
	p.mu.Unlock()
	// Containers nobody tracked (a Create that failed half-way).
	if ids, err := p.rs.list(context.WithoutCancel(ctx)); err == nil {
		for _, id := range ids {
			errs = append(errs, p.rs.deleteContainer(ctx, id))
		}
	}
	p.engineMu.Lock()
	if p.docker != nil {
		errs = append(errs, p.docker.Close(ctx))
	}
	p.engineMu.Unlock()
	if err := os.RemoveAll(p.dir); err != nil {
		errs = append(errs, fmt.Errorf("gvisor: removing %s: %w", p.dir, err))
	}
	return errors.Join(errs...)
}

// Leftovers lists what the provider still holds on the host
// (providertest.LeakChecker): containers runsc still knows, checkpoint
// images, sandbox directories, and, once closed, its own directory.
func (p *Provider) Leftovers(ctx context.Context) ([]string, error) {
	p.closing.Wait() // closed sandboxes are deleted in the background
	var out []string
	if _, err := os.Stat(p.rs.root); err == nil {
		ids, err := p.rs.list(ctx)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			out = append(out, "container "+id)
		}
	}
	for _, sub := range []string{"checkpoints", "sandboxes"} {
		ents, err := os.ReadDir(filepath.Join(p.dir, sub))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		for _, e := range ents {
			out = append(out, sub+"/"+e.Name())
		}
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if _, err := os.Stat(p.dir); err == nil && closed {
		out = append(out, "directory "+p.dir)
	}
	return out, nil
}

func copyLabels(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// specFiles checks Spec.Files as the other providers do (paths under the
// workspace, no path given twice, no file that is also a directory) and
// returns them as upload files.
func specFiles(files map[string][]byte) ([]providers.File, error) {
	out := make([]providers.File, 0, len(files))
	seen := map[string]bool{}
	for name, data := range files {
		rel, err := providers.ResolvePath(name)
		if err != nil {
			return nil, fmt.Errorf("gvisor: spec file %q: %w", name, err)
		}
		if rel == "." {
			return nil, fmt.Errorf("gvisor: spec file %q is the workspace directory", name)
		}
		if seen[rel] {
			return nil, fmt.Errorf("gvisor: spec files %q and another name the same path %s", name, rel)
		}
		seen[rel] = true
		out = append(out, providers.File{Path: rel, Data: data, Mode: 0o644})
	}
	for _, f := range out {
		for d := filepath.Dir(f.Path); d != "."; d = filepath.Dir(d) {
			if seen[d] {
				return nil, fmt.Errorf("gvisor: spec file %s is also the parent directory of %s", d, f.Path)
			}
		}
	}
	slices.SortFunc(out, func(a, b providers.File) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// refuseMounts refuses host paths bound into a sandbox (Spec.Mounts, how
// the agent policy brings a harness, the relay and the gateway's socket
// into docker sandboxes). They are not taken into a gvisor sandbox yet:
// its checkpoint images would have to re-bind them on every restore, and a
// unix socket to the host needs runsc's host-UDS support, neither tried
// here. Refused by name rather than run without them.
func refuseMounts(s providers.Spec) error {
	if len(s.Mounts) == 0 {
		return nil
	}
	targets := make([]string, len(s.Mounts))
	for i, m := range s.Mounts {
		targets[i] = m.Target
	}
	return fmt.Errorf("gvisor: %w: host paths bound into a sandbox (%s) are not supported on this provider; the agent policy runs on local and docker", providers.ErrNotSupported, strings.Join(targets, ", "))
}
