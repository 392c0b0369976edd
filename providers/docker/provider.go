package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/providers"
)

// Name is the registry name of this provider.
const Name = "docker"

// WorkspaceDir is the workspace inside every sandbox: the working directory
// of commands and the root of file actions.
const WorkspaceDir = providers.WorkspaceRoot

// ForkMethod is Capabilities().ForkMethod and the SandboxInfo.Origin of a
// fork: a commit to an image, then create + start.
const ForkMethod = "image"

// OriginCreate is the SandboxInfo.Origin of a sandbox made by Create.
const OriginCreate = "create"

// MethodCommit is the Checkpoint.Method of every checkpoint: a commit of
// the container (paused while the engine writes its diff) to an image.
const MethodCommit = "commit"

// The labels forkline puts on engine objects.
const (
	// LabelRun carries Options.RunID on every container and checkpoint image.
	LabelRun = "forkline.run"
	// LabelOwner carries "pid@hostname" of the process that made the object,
	// so Sweep can tell a crashed run from a live one.
	LabelOwner = "forkline.owner"
	// LabelInstance identifies the Provider value that made the object;
	// Close and Leftovers act on it, so two providers sharing a RunID never
	// remove each other's sandboxes.
	LabelInstance = "forkline.instance"
	// LabelKind is "sandbox" on containers and "checkpoint" on images.
	LabelKind = "forkline.kind"
	// LabelCheckpoint is the checkpoint id a fork was made from.
	LabelCheckpoint = "forkline.checkpoint"
	// LabelCheckpointLabel is the label given to Checkpoint.
	LabelCheckpointLabel = "forkline.checkpoint.label"
	// LabelImage marks the base images EnsureImages builds. They are shared
	// between runs and carry no run label, so no sweep removes them.
	LabelImage = "forkline.image"
)

// The Options.Params keys this provider accepts.
const (
	// ParamImage is the default image of Create (default DefaultImage).
	ParamImage = "image"
	// ParamNetwork is the default network mode (default "none"); a Spec's
	// Resources.Network wins.
	ParamNetwork = "network"
	// ParamInit is "auto" (default), "on" or "off": whether containers run
	// under the engine's init (docker-init, tini) to reap orphans.
	ParamInit = "init"
	// ParamSweep is "on" (default) or "off": whether Provider.Sweep removes
	// what dead owners on this host left. "off" makes Sweep a no-op, for
	// hosts where another tool owns that cleanup; New never sweeps.
	ParamSweep = "sweep"
	// ParamRuntime is the OCI runtime of the engine that runs the
	// containers (docker run --runtime), e.g. "runsc" for gVisor once the
	// engine has it registered (dockerd --add-runtime runsc=/usr/bin/runsc).
	// Default: the engine's default runtime. Checkpoints stay commits:
	// files, never processes (the gvisor provider forks those).
	ParamRuntime = "runtime"
)

// The values of ParamInit.
const (
	InitAuto = "auto"
	InitOn   = "on"
	InitOff  = "off"
)

// keeperSeconds is how long the keeper process sleeps: about 68 years, far
// longer than any run, and a plain integer every sleep(1) accepts.
const keeperSeconds = "2147483647"

// reaperKeeper is the container's main process when it runs without an
// init: a shell that reaps every child reparented to it. While it waits for
// its own sleep, busybox ash and dash call wait(2) for any child, so orphans
// never stay zombies for long. It exits on SIGTERM.
const reaperKeeper = `trap 'exit 0' TERM; while :; do sleep ` + keeperSeconds + ` & wait $!; done`

// removeTimeout bounds the removal of one object during cleanup, which runs
// with a context detached from the caller's (a cancelled episode must still
// clean up).
const removeTimeout = 30 * time.Second

// cleanupTimeout bounds a whole cleanup (Close, Sweep).
const cleanupTimeout = 5 * time.Minute

func init() {
	providers.Register(Name, func(ctx context.Context, opts providers.Options) (providers.Provider, error) {
		return New(ctx, opts)
	})
}

// Provider is the docker provider. It is safe for concurrent use.
type Provider struct {
	cli      *client.Client
	runID    string
	owner    string
	instance string
	image    string
	network  string
	limits   limits // defaults for what a Spec leaves zero
	sweep    bool   // ParamSweep is on
	runtime  string // ParamRuntime, "" for the engine's default
	// runtimeNoNetwork: the engine registered the runtime with
	// --network=none in its arguments (gVisor's runsc, where it cannot
	// take the engine's network namespace): its containers have no
	// network whatever they ask, so another network is refused.
	runtimeNoNetwork bool
	dir              string // Options.Dir, where output directories live

	// probeEvery and probeTimeout pace the engine watch (see watch).
	probeEvery, probeTimeout time.Duration
	out                      *outputFIFOs

	pull         string // ParamPull
	pullAttempts int
	pullBackoff  time.Duration
	imgs         images

	initMu     sync.Mutex
	useInit    bool
	initBinary string

	mu          sync.Mutex
	closed      bool
	seq         int
	sandboxes   map[string]*sandbox
	checkpoints map[string]*checkpoint
}

// checkpoint is a committed image and what its forks need. Guarded by
// Provider.mu.
type checkpoint struct {
	info     providers.Checkpoint
	ref      string // the unique tag, e.g. forkline/checkpoint:RUN-3
	spec     sandboxSpec
	released bool
	// serviceImages are the committed images of the services of a
	// compose environment.
	serviceImages []string
}

// sandboxSpec is what a sandbox passes on to the forks of its checkpoints.
type sandboxSpec struct {
	env       []string
	outputCap int
	res       providers.Resources
	network   string            // the network of the sandbox's forks (Resources.Network, else the default)
	labels    map[string]string // Spec.Labels
	// workdir is the workspace: the working directory of commands and the
	// root of file actions — the image's WORKDIR, or WorkspaceDir when the
	// image sets none (or sets /).
	workdir string
	// mounts are Spec.Mounts, bound read-only into the sandbox and its
	// forks.
	mounts []providers.Mount
	// services are Spec.Services; a checkpoint's have its committed
	// images (see compose.go).
	services []providers.Service
	// composeNet, set only while the main container of a compose
	// environment is made, is its network, where it is aliased
	// providers.MainService.
	composeNet string
	// shell is Spec.Shell: forks keep the mode and start a new shell.
	shell providers.ShellMode
}

// New opens a docker provider on the engine named by the environment (see
// Connect). Options.Params accepts ParamImage, ParamNetwork, ParamInit,
// ParamSweep, ParamPids, ParamMemoryMB, ParamCPUs and ParamOutput; an
// unknown key fails. Options.RunID labels every object (a random id is made
// when it is empty). Options.Dir is where the sandboxes' output directories
// go (default os.TempDir()). ctx bounds connecting to the engine (and at
// most pingTimeout); New removes nothing: call Sweep for that.
func New(ctx context.Context, opts providers.Options) (*Provider, error) {
	if err := providers.CheckParams(Name, opts.Params, ParamImage, ParamNetwork, ParamInit, ParamSweep,
		ParamPids, ParamMemoryMB, ParamCPUs, ParamOutput, ParamPull, ParamRuntime); err != nil {
		return nil, err
	}
	pull := opts.Params[ParamPull]
	switch pull {
	case "":
		pull = PullMissing
	case PullMissing, PullAlways, PullNever:
	default:
		return nil, fmt.Errorf("docker: param %s=%q (known: %s, %s, %s)", ParamPull, pull, PullAlways, PullMissing, PullNever)
	}
	out, err := newOutputFIFOs(opts.Params[ParamOutput], opts.Dir)
	if err != nil {
		return nil, err
	}
	lim, err := parseLimitParams(opts.Params)
	if err != nil {
		return nil, err
	}
	p := &Provider{
		runID:        opts.RunID,
		image:        DefaultImage,
		network:      "none",
		limits:       lim,
		out:          out,
		probeEvery:   defaultProbeEvery,
		probeTimeout: defaultProbeTimeout,
		sandboxes:    map[string]*sandbox{},
		checkpoints:  map[string]*checkpoint{},
		pull:         pull,
		pullAttempts: defaultPullAttempts,
		pullBackoff:  defaultPullBackoff,
		imgs:         images{entries: map[string]*imageEntry{}},
	}
	if v := opts.Params[ParamImage]; v != "" {
		p.image = v
	}
	if v := opts.Params[ParamNetwork]; v != "" {
		p.network = v
	}
	initMode := opts.Params[ParamInit]
	switch initMode {
	case "":
		initMode = InitAuto
	case InitAuto, InitOn, InitOff:
	default:
		return nil, fmt.Errorf("docker: param %s=%q (known: %s, %s, %s)", ParamInit, initMode, InitAuto, InitOff, InitOn)
	}
	switch v := opts.Params[ParamSweep]; v {
	case "", "on":
		p.sweep = true
	case "off":
	default:
		return nil, fmt.Errorf("docker: param %s=%q (known: off, on)", ParamSweep, v)
	}
	p.dir = opts.Dir
	if p.runID == "" {
		p.runID = "run-" + randomHex(6)
	}
	host, _ := os.Hostname()
	p.owner = strconv.Itoa(os.Getpid()) + "@" + host
	p.instance = randomHex(8)

	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	cli, err := Connect(ctx)
	if err != nil {
		return nil, err
	}
	p.cli = cli
	p.runtime = opts.Params[ParamRuntime]
	if initMode != InitOff || p.runtime != "" {
		info, err := cli.Info(ctx, client.InfoOptions{})
		if err != nil {
			_ = cli.Close()
			return nil, fmt.Errorf("docker: engine info: %w", err)
		}
		rt, ok := info.Info.Runtimes[p.runtime]
		if p.runtime != "" && !ok {
			_ = cli.Close()
			known := make([]string, 0, len(info.Info.Runtimes))
			for name := range info.Info.Runtimes {
				known = append(known, name)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("docker: param %s=%s: the engine has no such runtime (it has: %s); register it (dockerd --add-runtime %s=PATH, or a \"runtimes\" entry in /etc/docker/daemon.json) and restart the engine",
				ParamRuntime, p.runtime, strings.Join(known, ", "), p.runtime)
		}
		p.runtimeNoNetwork = p.runtime != "" && slices.Contains(rt.Args, "--network=none")
		if p.runtime != "" && path.Base(rt.Path) == "runsc" && !slices.Contains(rt.Args, "--file-access=shared") {
			// File actions copy through the engine into the container's
			// files; gVisor's default (exclusive) file access caches them
			// and would not see those writes.
			_ = cli.Close()
			return nil, fmt.Errorf("docker: param %s=%s: the engine runs gVisor (%s) without --file-access=shared in its runtimeArgs, so the sandbox would not see the files the engine writes into it (write_file, hidden test files); add it to the runtime's \"runtimeArgs\" in /etc/docker/daemon.json and restart the engine",
				ParamRuntime, p.runtime, rt.Path)
		}
		if initMode != InitOff {
			p.initBinary = info.Info.InitBinary
			p.useInit = p.initBinary != ""
			if initMode == InitOn && !p.useInit {
				_ = cli.Close()
				return nil, fmt.Errorf("docker: param %s=%s but the engine reports no init binary", ParamInit, InitOn)
			}
		}
	}
	return p, nil
}

var _ providers.Sweeper = (*Provider)(nil)

// Sweep implements providers.Sweeper: it removes the containers and
// checkpoint images whose owner is a dead process of this host (see the
// package function Sweep with DeadOwners), then the output directories of
// dead providers under Options.Dir. Live runs, this one included, are left
// alone. With the "sweep" param off it does nothing. ctx cancels it; it
// also stops after cleanupTimeout.
func (p *Provider) Sweep(ctx context.Context) error {
	if !p.sweep {
		return nil
	}
	if err := p.checkOpen(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	_, err := Sweep(ctx, p.cli, SweepOptions{DeadOwners: true})
	if err == nil {
		err = sweepOutputDirs(p.dir)
	}
	if err != nil {
		if gerr := p.gone(ctx, "sweeping what dead runs left", err); gerr != nil {
			return gerr
		}
		return fmt.Errorf("docker: sweeping what dead runs left (set param %s=off to skip): %w", ParamSweep, err)
	}
	return nil
}

// Name returns "docker".
func (p *Provider) Name() string { return Name }

// Capabilities: checkpoints are image commits, forks start from them, the
// isolation is a container.
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{Checkpoint: true, Fork: true, Isolation: "container", ForkMethod: ForkMethod, Services: true}
}

// OutputPath says how command output reaches the provider: OutputFIFO,
// OutputStream (and why not FIFOs), or "unknown" before the first sandbox.
func (p *Provider) OutputPath() (path, why string) { return p.out.path() }

// RunID returns the run id that labels every object of this provider.
func (p *Provider) RunID() string { return p.runID }

// Client returns the engine client the provider uses. It stays owned by the
// provider and is closed by Close.
func (p *Provider) Client() *client.Client { return p.cli }

// Create makes a container from spec.Image (else the "image" param, else
// DefaultImage), starts it, and copies spec.Files into the workspace.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	if spec.GUI != nil {
		return nil, fmt.Errorf("docker: %w", providers.ErrNoGUI)
	}
	wctx, stop := p.watch(ctx)
	defer stop()
	sb, err := p.create(wctx, spec)
	return sb, cause(wctx, err)
}

func (p *Provider) create(ctx context.Context, spec providers.Spec) (providers.Sandbox, error) {
	files, err := filesTar(spec.Files)
	if err != nil {
		return nil, err
	}
	img, err := p.imageOf(spec)
	if err != nil {
		return nil, err
	}
	entry, err := p.ensure(ctx, img, nil)
	if err != nil {
		return nil, err
	}
	ss := sandboxSpec{
		env:       append([]string(nil), spec.Env...),
		outputCap: spec.OutputCap,
		res:       spec.Resources,
		network:   spec.Resources.Network,
		labels:    copyLabels(spec.Labels),
		workdir:   workspaceOf(entry.workdir),
		mounts:    append([]providers.Mount(nil), spec.Mounts...),
		shell:     spec.Shell,
		services:  append([]providers.Service(nil), spec.Services...),
	}
	if len(spec.Services) > 0 {
		if p.runtimeNoNetwork {
			return nil, fmt.Errorf("docker: %w: a compose environment needs a network, and the engine runs runtime %s with --network=none", providers.ErrNotSupported, p.runtime)
		}
		if spec.SetupNetwork != "" && spec.SetupNetwork != "none" {
			return nil, fmt.Errorf("docker: %w: a compose environment runs on a network of its own; SetupNetwork %q is not allowed", providers.ErrNotSupported, spec.SetupNetwork)
		}
		if ss.services, err = p.resolveServices(ctx, spec.Services); err != nil {
			return nil, err
		}
	}
	if ss.network == "" {
		ss.network = p.network
	}
	if ss.outputCap <= 0 {
		ss.outputCap = providers.DefaultOutputCap
	}
	// The sandbox Create makes runs on the setup's network; its forks get
	// ss.network (it is what the checkpoint passes on).
	own := ss
	if spec.SetupNetwork != "" {
		own.network = spec.SetupNetwork
	}
	for _, n := range []string{own.network, ss.network} {
		if p.runtimeNoNetwork && n != "none" {
			return nil, fmt.Errorf("docker: network %q: the engine runs runtime %s with --network=none, so its containers have no network", n, p.runtime)
		}
	}
	sb, err := p.startSandbox(ctx, entry.ref, own, OriginCreate, "")
	if err != nil {
		return nil, err
	}
	sb.spec.network = ss.network
	if files != nil {
		if _, err := p.cli.CopyToContainer(ctx, sb.id, client.CopyToContainerOptions{
			DestinationPath: ss.workdir, Content: files,
		}); err != nil {
			_ = sb.Close(ctx)
			if gerr := p.gone(ctx, "copying spec files into "+sb.short(), err); gerr != nil {
				return nil, gerr
			}
			return nil, fmt.Errorf("docker: copying spec files into %s: %w", sb.short(), err)
		}
	}
	return sb, nil
}

// startSandbox creates and starts one container and registers it. On any
// failure nothing is left behind.
func (p *Provider) startSandbox(ctx context.Context, image string, ss sandboxSpec, origin, cpID string) (*sandbox, error) {
	if err := p.checkOpen(); err != nil {
		return nil, err
	}
	run := ss
	var env *composeEnv
	if len(ss.services) > 0 {
		var err error
		if env, err = p.startServices(ctx, ss, cpID); err != nil {
			return nil, err
		}
		run.network, run.composeNet = env.netName, env.netName
	}
	st, err := p.startContainer(ctx, image, run, cpID)
	if err != nil {
		_ = p.removeEnv(ctx, env)
		return nil, err
	}
	sb := newSandbox(p, st, origin, cpID, ss)
	sb.env = env
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = sb.Close(ctx)
		return nil, fmt.Errorf("docker: %w", providers.ErrClosed)
	}
	p.sandboxes[st.id] = sb
	p.mu.Unlock()
	if err := p.out.probe(ctx, sb); err != nil {
		_ = sb.Close(ctx)
		return nil, err
	}
	return sb, nil
}

// started is a container that runs, and the host directory bind-mounted
// at OutputDir in it ("" when none).
type started struct {
	id, outDir string
}

// startContainer creates and starts a container; it falls back to running
// without init once if the engine's init binary turns out to be missing.
// It also makes the container's output directory, and goes on without one
// when the engine refuses the bind mount (its host has no such path: a
// remote engine).
func (p *Provider) startContainer(ctx context.Context, image string, ss sandboxSpec, cpID string) (started, error) {
	outDir, err := p.out.newDir()
	if err != nil {
		return started{}, err
	}
	p.initMu.Lock()
	useInit := p.useInit
	p.initMu.Unlock()
	id, err := p.createAndStart(ctx, image, ss, cpID, useInit, outDir)
	if err != nil && outDir != "" && cerrdefs.IsInvalidArgument(err) && strings.Contains(err.Error(), "bind source path does not exist") {
		_ = os.RemoveAll(outDir)
		outDir = ""
		if ferr := p.out.fail(fmt.Errorf("the engine cannot bind-mount this host's directories (%v)", err)); ferr != nil {
			return started{}, ferr
		}
		id, err = p.createAndStart(ctx, image, ss, cpID, useInit, "")
	}
	if err != nil && useInit && p.initBinary != "" && strings.Contains(err.Error(), p.initBinary) {
		p.initMu.Lock()
		p.useInit = false
		p.initMu.Unlock()
		id, err = p.createAndStart(ctx, image, ss, cpID, false, outDir)
	}
	if err != nil {
		if outDir != "" {
			_ = os.RemoveAll(outDir)
		}
		return started{}, err
	}
	return started{id: id, outDir: outDir}, nil
}

func (p *Provider) createAndStart(ctx context.Context, image string, ss sandboxSpec, cpID string, useInit bool, outDir string) (string, error) {
	labels := copyLabels(ss.labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelRun] = p.runID
	labels[LabelOwner] = p.owner
	labels[LabelInstance] = p.instance
	labels[LabelKind] = "sandbox"
	if cpID != "" {
		labels[LabelCheckpoint] = cpID
	}
	cmd := []string{"sleep", keeperSeconds}
	if !useInit {
		cmd = []string{"sh", "-c", reaperKeeper}
	}
	env := []string{"LANG=C.UTF-8", "FORKLINE_WORKSPACE=" + ss.workdir}
	if ss.workdir == WorkspaceDir {
		// forkline's own workspace is also HOME, as on the local provider;
		// an image with a WORKDIR of its own keeps its own HOME.
		env = append(env, "HOME="+WorkspaceDir)
	}
	env = append(env, ss.env...)
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(ss.network),
		Init:        &useInit,
		Runtime:     p.runtime,
	}
	if err := p.applyLimits(hc, ss.res); err != nil {
		return "", err
	}
	if outDir != "" {
		hc.Mounts = []mount.Mount{{Type: mount.TypeBind, Source: outDir, Target: OutputDir, ReadOnly: true}}
	}
	for _, m := range ss.mounts {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: true})
	}
	var nc *network.NetworkingConfig
	if ss.composeNet != "" {
		nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			ss.composeNet: {Aliases: []string{providers.MainService}},
		}}
	}
	created, err := p.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:      image,
			Cmd:        cmd,
			Entrypoint: []string{},
			WorkingDir: ss.workdir,
			Env:        env,
			Labels:     labels,
		},
		HostConfig:       hc,
		NetworkingConfig: nc,
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", missingImage(image, err)
		}
		if gerr := p.gone(ctx, "creating a container from "+image, err); gerr != nil {
			return "", gerr
		}
		return "", fmt.Errorf("docker: creating a container from %s: %w", image, err)
	}
	if _, err := p.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		_ = p.removeContainer(ctx, created.ID)
		if gerr := p.gone(ctx, "starting a container from "+image, err); gerr != nil {
			return "", gerr
		}
		return "", fmt.Errorf("docker: starting a container from %s: %w", image, err)
	}
	return created.ID, nil
}

// workspaceOf is the workspace of a sandbox of an image whose WORKDIR is
// workdir: that directory, or WorkspaceDir when the image sets none (or /,
// where a workspace of its own is safer for file actions).
func workspaceOf(workdir string) string {
	if workdir == "" || workdir == "/" || !strings.HasPrefix(workdir, "/") {
		return WorkspaceDir
	}
	return path.Clean(workdir)
}

// ErrImageMissing is wrapped by the error of Create (and Prepare) when its
// image is not on the engine and cannot be pulled.
var ErrImageMissing = errors.New("image not on the engine")

func missingImage(image string, err error) error {
	how := "build it with make images (forkline images)"
	base, _, _ := strings.Cut(image, ":")
	switch base {
	case ImageBusybox:
	case ImageDebian:
		how = "build it with make images-debian (forkline images -image " + ImageDebian + ")"
	case ImageChromium:
		how = "build it with make images-browser (forkline images -image " + ImageChromium + ")"
	default:
		how = "pull, load or import it; forkline's own images are built with forkline images"
	}
	return fmt.Errorf("docker: %w: %w: %q: %s (engine said: %v)", providers.ErrCannotPrepare, ErrImageMissing, image, how, err)
}

// Checkpoint commits sb to an image tagged forkline/checkpoint:RUN-N and
// labelled with the run, this provider and label. The container is paused
// during the commit, so the image is a consistent filesystem state; its
// processes are not part of it. Bytes is the size of the committed diff
// (image size minus the size of the image the sandbox started from).
func (p *Provider) Checkpoint(ctx context.Context, sb providers.Sandbox, label string) (providers.Checkpoint, error) {
	wctx, stop := p.watch(ctx)
	defer stop()
	cp, err := p.checkpoint(wctx, sb, label)
	return cp, cause(wctx, err)
}

func (p *Provider) checkpoint(ctx context.Context, sb providers.Sandbox, label string) (providers.Checkpoint, error) {
	s, ok := sb.(*sandbox)
	if !ok || s.p != p {
		return providers.Checkpoint{}, fmt.Errorf("docker: Checkpoint of a sandbox this provider did not make")
	}
	if err := s.checkOpen(); err != nil {
		return providers.Checkpoint{}, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return providers.Checkpoint{}, fmt.Errorf("docker: %w", providers.ErrClosed)
	}
	p.seq++
	ref := fmt.Sprintf("forkline/checkpoint:%s-%d", tagSafe(p.runID), p.seq)
	p.mu.Unlock()

	began := time.Now()
	spec := s.spec
	var serviceImages []string
	if s.env != nil {
		services, images, err := p.commitServices(ctx, s, ref, label)
		if err != nil {
			return providers.Checkpoint{}, err
		}
		spec.services, serviceImages = services, images
	}
	res, err := p.cli.ContainerCommit(ctx, s.id, client.ContainerCommitOptions{
		Reference: ref,
		Comment:   "forkline checkpoint " + label,
		Config: &container.Config{Labels: map[string]string{
			LabelKind: "checkpoint", LabelCheckpointLabel: label,
			LabelRun: p.runID, LabelOwner: p.owner, LabelInstance: p.instance,
		}},
	})
	if err != nil {
		for _, im := range serviceImages {
			p.removeImage(ctx, im)
		}
		return providers.Checkpoint{}, s.infraError(ctx, "commit", err)
	}
	took := time.Since(began)
	s.waitUnpaused(ctx)
	cp := providers.Checkpoint{ID: res.ID, Label: label, Provider: Name, Took: took, Bytes: p.diffBytes(ctx, s.id, res.ID), Method: MethodCommit}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.removeImage(ctx, res.ID)
		for _, im := range serviceImages {
			p.removeImage(ctx, im)
		}
		return providers.Checkpoint{}, fmt.Errorf("docker: %w", providers.ErrClosed)
	}
	p.checkpoints[cp.ID] = &checkpoint{info: cp, ref: ref, spec: spec, serviceImages: serviceImages}
	p.mu.Unlock()
	return cp, nil
}

// diffBytes is the size the commit added: the new image's size minus that of
// the image the container was made from. -1 when the engine does not say.
func (p *Provider) diffBytes(ctx context.Context, containerID, imageID string) int64 {
	ci, err := p.cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil {
		return -1
	}
	parent, err := p.cli.ImageInspect(ctx, ci.Container.Image)
	if err != nil {
		return -1
	}
	img, err := p.cli.ImageInspect(ctx, imageID)
	if err != nil {
		return -1
	}
	return max(img.Size-parent.Size, 0)
}

// Fork starts a container from cp's image with the spec of the sandbox cp
// was made from (env, resources, network, output cap, labels). Forks ready
// ahead of time are the pool's business (pool.Config.Standby), the same for
// every provider.
func (p *Provider) Fork(ctx context.Context, cp providers.Checkpoint) (providers.Sandbox, error) {
	wctx, stop := p.watch(ctx)
	defer stop()
	sb, err := p.fork(wctx, cp)
	return sb, cause(wctx, err)
}

func (p *Provider) fork(ctx context.Context, cp providers.Checkpoint) (providers.Sandbox, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("docker: %w", providers.ErrClosed)
	}
	ck, ok := p.checkpoints[cp.ID]
	if !ok || ck.released {
		p.mu.Unlock()
		return nil, fmt.Errorf("docker: fork of unknown or released checkpoint %q", cp.ID)
	}
	p.mu.Unlock()
	return p.startSandbox(ctx, ck.info.ID, ck.spec, ForkMethod, ck.info.ID)
}

// Release removes cp's image. Forks still running keep
// working: the engine only untags an image that containers use, and Close
// removes it after them. Release is idempotent.
func (p *Provider) Release(ctx context.Context, cp providers.Checkpoint) error {
	p.mu.Lock()
	ck, ok := p.checkpoints[cp.ID]
	if !ok || ck.released {
		p.mu.Unlock()
		return nil
	}
	ck.released = true
	p.mu.Unlock()
	for _, im := range ck.serviceImages {
		// An image a fork's service still runs stays until Close (or a
		// sweep) removes it by its labels.
		if err := p.removeImageErr(ctx, im); err != nil && !cerrdefs.IsConflict(err) {
			if gerr := p.gone(ctx, "releasing checkpoint "+shortID(cp.ID), err); gerr != nil {
				return gerr
			}
		}
	}
	err := p.removeImageErr(ctx, ck.info.ID)
	if err != nil && cerrdefs.IsConflict(err) {
		// Forks of cp still run: untag it so it is gone by name; Close (or a
		// sweep) removes the image once those forks are gone.
		_, err = p.cli.ImageRemove(context.WithoutCancel(ctx), ck.ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		if err != nil && cerrdefs.IsNotFound(err) {
			err = nil
		}
	}
	if err != nil {
		if gerr := p.gone(ctx, "releasing checkpoint "+shortID(cp.ID), err); gerr != nil {
			return gerr
		}
		return fmt.Errorf("docker: releasing checkpoint %s: %w", shortID(cp.ID), err)
	}
	p.mu.Lock()
	delete(p.checkpoints, cp.ID)
	p.mu.Unlock()
	return nil
}

// Close removes every container and image this provider made, including
// ones it lost track of (found by LabelInstance), and closes the client. It
// is idempotent.
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
	p.mu.Unlock()

	// Cleanup runs to the end even when ctx is already cancelled: a
	// cancelled run must not leak its containers.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	forEachParallel(len(sbs), 4, func(i int) {
		_ = sbs[i].Close(ctx)
	})
	if _, err := removeLabelled(ctx, p.cli, LabelInstance+"="+p.instance, func(map[string]string) bool { return true }); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, p.cli.Close(), p.out.close())
	return errors.Join(errs...)
}

// Leftovers lists the containers and images of this provider still on the
// engine (providertest.LeakChecker). After Close it must be empty.
func (p *Provider) Leftovers(ctx context.Context) ([]string, error) {
	cli, err := Connect(ctx) // the provider's own client may be closed
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	left, err := listLabelled(ctx, cli, LabelInstance+"="+p.instance)
	return append(left, p.out.leftovers(p.isClosed())...), err
}

func (p *Provider) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Provider) checkOpen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("docker: %w", providers.ErrClosed)
	}
	return nil
}

// forget drops a closed sandbox.
func (p *Provider) forget(s *sandbox) {
	p.mu.Lock()
	delete(p.sandboxes, s.id)
	p.mu.Unlock()
}

// removeContainer force-removes a container, detached from ctx's
// cancellation; a container already gone is not an error.
func (p *Provider) removeContainer(ctx context.Context, id string) error {
	rctx, cancel := detach(ctx, removeTimeout)
	defer cancel()
	_, err := p.cli.ContainerRemove(rctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: removing container %s: %w", shortID(id), err)
	}
	return nil
}

func (p *Provider) removeImage(ctx context.Context, id string) { _ = p.removeImageErr(ctx, id) }

// removeImageErr removes an image and its untagged parents; an image already
// gone is not an error.
func (p *Provider) removeImageErr(ctx context.Context, id string) error {
	rctx, cancel := detach(ctx, removeTimeout)
	defer cancel()
	_, err := p.cli.ImageRemove(rctx, id, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	if err != nil && cerrdefs.IsNotFound(err) {
		return nil
	}
	return err
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var tagUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// tagSafe makes s usable in an image tag ([A-Za-z0-9_.-], at most 100
// characters so a sequence number still fits in the 128 allowed).
func tagSafe(s string) string {
	s = tagUnsafe.ReplaceAllString(s, "_")
	s = strings.TrimLeft(s, ".-")
	if s == "" {
		s = "run"
	}
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}

// shortID is the 12-hex form of an engine id, for messages.
func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// forEachParallel calls f(0..n-1) with at most limit calls at a time.
func forEachParallel(n, limit int, f func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}(i)
	}
	wg.Wait()
}
