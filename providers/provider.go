// Package providers owns the sandbox contract: the Provider interface and its
// Capabilities, the Spec a sandbox is created from, the registry that maps
// provider names to factories, the rules every backend shares (workspace
// path resolution, output capping), and how optional abilities (Sweeper) are
// found through decorators (Unwrapper, As). Backends live in
// sub-packages named after what they talk to (providers/local,
// providers/docker); providers/all registers every backend; providertest is
// the conformance suite and reset benchmark every backend must pass.
//
// It knows sessions and actions (runtime) and nothing about tasks, policies,
// rewards or datasets: setup and start commands are run by the pool through a
// Sandbox's Act like any other action.
package providers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/forkline/forkline/internal/linuxcap"
	"github.com/forkline/forkline/runtime"
)

// Provider creates sandboxes, freezes them into checkpoints and forks
// replicas from checkpoints. Implementations are safe for concurrent use.
type Provider interface {
	// Name is the registry name, e.g. "local" or "docker".
	Name() string
	// Capabilities says what the provider can really do. A provider that
	// cannot checkpoint says so here; callers then recreate instead, and
	// nobody fakes a fork.
	Capabilities() Capabilities
	// Create makes a fresh sandbox from spec: an empty workspace with
	// spec.Files written into it.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Checkpoint freezes the current filesystem state of sb under label.
	// sb stays usable and later changes to it do not reach the checkpoint.
	// sb may be any live sandbox: one made by Create (a golden), or a fork
	// in the middle of an episode, whose checkpoint forks start from the
	// fork's state at that moment (branching). Memory state — processes
	// sb runs — is part of it only when Capabilities().ForksMemory: then
	// every fork runs sb's processes as they were, with their memory.
	// Returns ErrNotSupported when Capabilities().Checkpoint is false.
	Checkpoint(ctx context.Context, sb Sandbox, label string) (Checkpoint, error)
	// Fork makes a new sandbox whose filesystem starts equal to cp (and
	// whose processes are cp's, when Capabilities().ForksMemory). Writes in
	// a fork are invisible to cp and to every other fork.
	Fork(ctx context.Context, cp Checkpoint) (Sandbox, error)
	// Release deletes cp. It is idempotent. Forks made from cp may or may not
	// outlive it, per provider; callers release checkpoints last.
	Release(ctx context.Context, cp Checkpoint) error
	// Close releases everything the provider still holds (sandboxes,
	// checkpoints, mounts) and is idempotent.
	Close(ctx context.Context) error
}

// Sandbox is a live environment: a runtime.Session with an identity.
// Close destroys it and everything it made; Close is idempotent.
type Sandbox interface {
	runtime.Session
	Info() SandboxInfo
}

// SandboxInfo describes how a sandbox came to be.
type SandboxInfo struct {
	ID       string
	Provider string
	// Origin is how the sandbox was made: "create", or the fork method the
	// provider used ("overlay", "copy", "image" ...), so reports can say which
	// path really ran.
	Origin string
	// Checkpoint is the id of the checkpoint it was forked from, if any.
	Checkpoint string
	// Workspace is the path of the workspace as commands see it.
	Workspace string
	// GUI reports that this sandbox really has a GUI beside it: GUI
	// actions (navigate, click, type, key, scroll, screenshot, wait) reach
	// it. It is true only for a sandbox made from a Spec with GUI (or forked
	// from one), never because the provider could host one.
	GUI bool
}

// Checkpoint is a frozen state that forks start from: the sandbox's files,
// and its processes too on a provider whose Capabilities().ForksMemory.
type Checkpoint struct {
	ID       string
	Label    string
	Provider string
	// Bytes is the size of what the checkpoint froze when the provider
	// knows it (local: the workspace copied, or the layer of changes
	// frozen; docker: the committed diff).
	Bytes int64
	// Took is how long the checkpoint took to make.
	Took time.Duration
	// Method says how the provider froze the state, so reports can say
	// which path ran: local "tree" (a copy of the workspace), "layer" (the
	// fork's own changes frozen in place, stacked on its checkpoint),
	// "layer-copy" (those changes copied, when the fork was busy);
	// docker "commit".
	Method string
}

// Capabilities lists what a provider can do.
type Capabilities struct {
	Checkpoint bool   `json:"checkpoint"`  // can freeze a sandbox's filesystem
	Fork       bool   `json:"fork"`        // can start sandboxes from a checkpoint
	GUI        bool   `json:"gui"`         // can host a GUI beside a sandbox that asks for one (Spec.GUI); SandboxInfo.GUI says which sandboxes have one
	Isolation  string `json:"isolation"`   // "none" (host processes) or "container"; never claim more than is true
	ForkMethod string `json:"fork_method"` // how Fork works here, e.g. "overlay", "copy", "image", "restore"
	// ForksMemory says a checkpoint holds the sandbox's processes and their
	// memory, not only its files: every fork goes on running what the
	// checkpointed sandbox ran (gvisor). Callers then run a template's start
	// commands once, in the golden before its checkpoint, instead of in
	// every fork, and nothing in a branch (see pool).
	ForksMemory bool `json:"forks_memory"`
	// Services says the provider starts a Spec's Services beside its
	// sandbox, each on a network of the sandbox's own, commits them with
	// every checkpoint and starts them again in every fork (docker). A
	// provider without it refuses a Spec with Services.
	Services bool `json:"services,omitempty"`
}

// Spec describes a sandbox to create.
type Spec struct {
	// Image names the base image for providers that use one (docker).
	// Providers without images ignore it and say so in their docs.
	Image string
	// Files are written into the workspace before anything runs, keyed by
	// workspace-relative path.
	Files map[string][]byte
	// Env is extra environment for every command, as KEY=VALUE.
	Env []string
	// Resources bound the sandbox where the provider can enforce it.
	Resources Resources
	// OutputCap bounds the bytes kept of one action's output; zero means
	// DefaultOutputCap.
	OutputCap int
	// Labels are attached to every object the provider makes for this
	// sandbox, where the backend has labels. They are for the people who
	// look at those objects; no provider reads meaning into them.
	Labels map[string]string
	// GUI, when set, asks for a GUI beside the sandbox. A provider whose
	// Capabilities().GUI is false refuses such a Spec with ErrNoGUI.
	GUI *GUI
	// Build, when set, makes the sandbox's image from a Dockerfile; Image
	// is then empty. Providers with images build it once per distinct
	// build (Preparer); providers without images refuse a Spec with Build
	// (ErrNotSupported).
	Build *Build
	// Mounts are host paths bound read-only into the sandbox and every
	// fork of it (an agent harness's install, forkline's relay and its
	// model gateway's socket). Providers whose sandboxes see the host's
	// filesystem (local) refuse a Spec with mounts (ErrNotSupported): the
	// host path is already there.
	Mounts []Mount
	// SetupNetwork is the network of a sandbox made by Create, which is set
	// up and becomes a golden checkpoint; forks of its checkpoints get
	// Resources.Network. "" = Resources.Network. A golden may then install
	// packages while its episodes stay offline. A sandbox made by Create
	// that runs an episode itself must not have one (the pool refuses it).
	SetupNetwork string
	// Services run beside the sandbox, in this order (each after those it
	// depends on), on a network only the sandbox and they are on, where
	// each is reached by its name (and the sandbox by MainService). A
	// checkpoint holds every service's files; a fork starts every service
	// again from them, on a network of the fork's own. Providers whose
	// Capabilities().Services is false refuse a Spec with Services
	// (ErrNotSupported). Resources.Network must then be "" or "none".
	Services []Service

	// Shell is how exec runs commands: ShellFresh ("" too) or
	// ShellPersistent (one shell per sandbox; see Terminal). Forks keep
	// the mode; they start a new shell, or, on a provider whose
	// checkpoints hold processes (Capabilities().ForksMemory), go on with
	// the checkpointed one. A provider without a persistent shell refuses
	// ShellPersistent with ErrNotSupported.
	Shell ShellMode
}

// MainService is the name the sandbox of a Spec with Services is reached by
// from its services (Harbor's name for the agent's container).
const MainService = "main"

// Service is a container started beside a sandbox (a compose service).
type Service struct {
	Name  string
	Image string
	// Command and Entrypoint replace the image's; nil keeps the image's.
	Command, Entrypoint []string
	Env                 []string // KEY=VALUE
	WorkingDir, User    string
	// Health, when set, is the service's healthcheck, run by the provider's
	// engine.
	Health *Health
	// DependsOn maps each service this one waits for to
	// ConditionStarted or ConditionHealthy.
	DependsOn map[string]string
	// Resources bound the service like a sandbox (zero = the provider's
	// defaults); Network is not used.
	Resources Resources
	// Build, when set, makes the service's image from a Dockerfile (as
	// Spec.Build does the sandbox's); Image is then empty. A provider with
	// images builds it once per distinct build.
	Build *Build
	// Copies are host files or directories copied into the service's
	// container before its first start (a compose bind of the task's own
	// files): the service owns its copy, which its checkpoints carry, so
	// no two forks share a host file. The services of a checkpoint's forks
	// have none: their copies are in the committed image.
	Copies []Copy
}

// Copy is a host path (a file or a directory) copied to Target, an
// absolute path in a service's container.
type Copy struct {
	Source string
	Target string
}

// Health is a service's healthcheck: Test in the engine's form (["CMD",
// ...] or ["CMD-SHELL", "..."]); zero durations and retries take the
// engine's defaults.
type Health struct {
	Test                           []string
	Interval, Timeout, StartPeriod time.Duration
	Retries                        int
}

// The conditions a Service may wait for another in.
const (
	ConditionStarted = "service_started"
	ConditionHealthy = "service_healthy"
)

// Mount is a host path bound read-only at Target, an absolute path in
// the sandbox.
type Mount struct {
	Source string // absolute host path: a directory, a file or a socket
	Target string
}

// Build says how to build a sandbox's image from a Dockerfile.
type Build struct {
	// Context is the build context, a directory on the host.
	Context string
	// Dockerfile is its path inside Context; "" is "Dockerfile".
	Dockerfile string
	// Args are build arguments (ARG), Target the stage to build.
	Args   map[string]string
	Target string
	// Timeout bounds the build; zero is the provider's default.
	Timeout time.Duration
}

// GUI describes the GUI a sandbox asks for: today a headless browser
// (providers/browser), its viewport, start page and what its observations
// carry. Providers learn that a sandbox wants a GUI and what it looks like,
// never which task it serves.
type GUI struct {
	// Width and Height are the viewport in CSS pixels at device scale 1:
	// screenshots are exactly this size and clicks use the same space.
	// Zero takes the host's default.
	Width, Height int
	// Start is the page opened when the GUI starts: a workspace-relative
	// path, a loopback http(s) URL or about:blank; "" takes the host's
	// default.
	Start string
	// Screenshots and A11y say what every GUI observation carries: a
	// screenshot, an accessibility tree (a screenshot action always carries
	// a screenshot). Both false observes neither.
	Screenshots, A11y bool
	// LoadTimeout bounds a page load; zero takes the host's default.
	LoadTimeout time.Duration
}

// Resources are limits on one sandbox. A zero limit means the provider's
// default, never "unlimited": every provider documents its defaults (see
// docs/providers.md), so a task that sets none still cannot take the host
// down where the provider can enforce limits at all.
type Resources struct {
	CPUs     float64 // cores; 0 = provider default
	MemoryMB int64   // memory (and swap) in MiB; 0 = provider default
	Pids     int64   // processes and threads; 0 = provider default
	Network  string  // "none" (default) or a provider-specific mode
	// Capabilities are Linux capabilities (capabilities(7), named without
	// the CAP_ prefix: "NET_RAW") the sandbox's commands may use on top of
	// the provider's default set. Providers that cannot grant or withhold
	// capabilities (local) say so in their docs.
	Capabilities []string
}

// Validate refuses a spec no provider can run: an Env entry that is not
// KEY=VALUE or holds a NUL byte (no process environment can carry one, so
// every command would fail), negative or non-finite limits, and capability
// names Linux does not have. Providers call it first in Create, so bad input
// fails there, naming the entry, instead of breaking each command later.
func (s Spec) Validate() error {
	var errs []error
	for i, kv := range s.Env {
		key, _, ok := strings.Cut(kv, "=")
		switch {
		case strings.IndexByte(kv, 0) >= 0:
			errs = append(errs, fmt.Errorf("providers: Env[%d] %q holds a NUL byte, which no process environment can carry", i, key))
		case !ok:
			errs = append(errs, fmt.Errorf("providers: Env[%d] %q is not KEY=VALUE", i, kv))
		case key == "":
			errs = append(errs, fmt.Errorf("providers: Env[%d] has an empty name (it starts with =)", i))
		}
	}
	r := s.Resources
	if r.CPUs < 0 || math.IsNaN(r.CPUs) || math.IsInf(r.CPUs, 0) {
		errs = append(errs, fmt.Errorf("providers: Resources.CPUs %v: want a finite number >= 0 (0 = the provider's default)", r.CPUs))
	}
	if r.MemoryMB < 0 {
		errs = append(errs, fmt.Errorf("providers: Resources.MemoryMB %d: want >= 0 (0 = the provider's default)", r.MemoryMB))
	}
	if r.Pids < 0 {
		errs = append(errs, fmt.Errorf("providers: Resources.Pids %d: want >= 0 (0 = the provider's default)", r.Pids))
	}
	if _, err := CanonicalCapabilities(r.Capabilities); err != nil {
		errs = append(errs, err)
	}
	if s.OutputCap < 0 {
		errs = append(errs, fmt.Errorf("providers: OutputCap %d: want >= 0 (0 = DefaultOutputCap)", s.OutputCap))
	}
	for i, m := range s.Mounts {
		if !strings.HasPrefix(m.Source, "/") || !strings.HasPrefix(m.Target, "/") || m.Target == "/" {
			errs = append(errs, fmt.Errorf("providers: Mounts[%d] %s -> %s: want an absolute host path and an absolute target below /", i, m.Source, m.Target))
		}
	}
	if s.Build != nil && s.Image != "" {
		errs = append(errs, fmt.Errorf("providers: a Spec gives Image (%s) or Build, not both", s.Image))
	}
	if s.Build != nil && s.Build.Context == "" {
		errs = append(errs, errors.New("providers: Build.Context is empty"))
	}
	errs = append(errs, s.validateServices()...)
	return errors.Join(errs...)
}

// CanonicalCapabilities returns caps in their canonical spelling ("NET_RAW"
// for "cap_net_raw"), sorted, refusing an unknown name (the error lists the
// known ones) and a name given twice.
func CanonicalCapabilities(caps []string) ([]string, error) {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		name, err := linuxcap.Canonical(c)
		if err != nil {
			return nil, fmt.Errorf("providers: Resources.Capabilities: %w", err)
		}
		if slices.Contains(out, name) {
			return nil, fmt.Errorf("providers: Resources.Capabilities: %s is listed twice", name)
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

// DefaultOutputCap is the per-action output cap when a Spec sets none.
const DefaultOutputCap = 1 << 20

// DefaultExecTimeout bounds an exec whose action and session set no timeout,
// so no command hangs an episode for ever.
const DefaultExecTimeout = 10 * time.Minute

// ErrNotSupported is returned by Checkpoint and Fork on providers whose
// Capabilities say they cannot.
var ErrNotSupported = errors.New("providers: not supported by this provider")

// ErrNoGUI is returned by Create, wrapped, for a Spec with GUI on a provider
// whose Capabilities().GUI is false. It wraps ErrNotSupported: the provider
// says it cannot, it does not hand out a sandbox without the GUI asked for.
var ErrNoGUI = fmt.Errorf("%w: no GUI can be hosted beside this provider's sandboxes (wrap it with providers/browser)", ErrNotSupported)

// ErrClosed is returned by operations on a closed sandbox or provider.
var ErrClosed = errors.New("providers: closed")

// Preparer is implemented by providers that must get something ready
// before a sandbox of a Spec can be made — images pulled or built — and can
// check, before anything is spent, that they will be able to make it.
// Collectors find it with As and call Prepare once, with the Spec of every
// template the run will use, before the first episode: the distinct images
// are got ready in parallel (bounded), so that no episode waits for one,
// and a Spec the provider cannot serve (an image that cannot be had, a
// network it does not have) fails the whole call, naming each. Progress
// lines (a pull's layers and bytes, a build's steps) go to progress when
// it is not nil. Prepare is idempotent and safe for concurrent use.
type Preparer interface {
	Prepare(ctx context.Context, specs []Spec, progress io.Writer) error
}

// ErrCannotPrepare is wrapped by the error of Prepare when something a
// Spec needs cannot be had (a missing image that may not be pulled, a
// failing build, refused credentials, a missing network): the run's input
// is wrong, and retrying it unchanged will not help. Errors of an engine
// that went away wrap runtime.ErrUnavailable instead.
var ErrCannotPrepare = errors.New("providers: cannot prepare")

// Uploader is implemented by sandboxes that can place files anywhere in
// their own filesystem in one operation (docker: one tar stream copied into
// the container). Hidden verifier files use it: they go in after the
// episode, so the agent could neither read nor rewrite them.
type Uploader interface {
	// Upload writes files under dir: an absolute path inside the sandbox,
	// or "" (or a relative path) for the workspace. dir and the files'
	// parents are created; existing files are replaced. A provider whose
	// sandboxes share the host's filesystem (local) refuses an absolute
	// dir with an error wrapping ErrPathEscapes.
	Upload(ctx context.Context, dir string, files []File) error
}

// File is one file Upload places.
type File struct {
	Path string // slash-separated, relative to the upload's dir
	Data []byte
	Mode fs.FileMode // permission bits; 0 is 0644
}

// Sweeper is implemented by providers that can find and remove what crashed
// runs left behind (mounts, directories, containers, images) — objects whose
// owning process is gone. Open never sweeps; collectors and replay find the
// Sweeper with As and call Sweep once after Open, before making sandboxes.
// Sweep must never touch objects of live runs (this provider's included),
// and returns early with ctx's error when ctx is done.
type Sweeper interface {
	Sweep(ctx context.Context) error
}

// GoldenStore is implemented by providers that keep golden checkpoints
// across runs (gvisor with its "goldens" param): a golden made once — its
// setup, and on a provider that forks memory its start commands — is
// forked by later runs and resumed ones without being made again. The pool
// finds it with As and asks before it builds a golden.
type GoldenStore interface {
	// StoredGolden returns a checkpoint of the golden stored for a sandbox
	// of spec under label (the pool's template key, which names the task
	// and its spec's hash), registered with the provider like one made by
	// Checkpoint (fork it, release it). ok is false when none is stored.
	// An error means a stored golden exists and cannot be used.
	StoredGolden(ctx context.Context, spec Spec, label string) (cp Checkpoint, ok bool, err error)
}

// validateServices checks Services: unique names other than MainService,
// an image each, known conditions on services started before.
func (s Spec) validateServices() []error {
	var errs []error
	if len(s.Services) > 0 && s.Resources.Network != "" && s.Resources.Network != "none" {
		errs = append(errs, fmt.Errorf("providers: a Spec with Services runs on a network of its own; Resources.Network %q is not allowed", s.Resources.Network))
	}
	seen := map[string]bool{}
	for i, svc := range s.Services {
		switch {
		case svc.Name == "" || svc.Name == MainService:
			errs = append(errs, fmt.Errorf("providers: Services[%d]: name %q is not allowed", i, svc.Name))
		case seen[svc.Name]:
			errs = append(errs, fmt.Errorf("providers: Services[%d]: %s is listed twice", i, svc.Name))
		case svc.Image == "" && svc.Build == nil:
			errs = append(errs, fmt.Errorf("providers: Services[%d] %s has no image and no build", i, svc.Name))
		case svc.Image != "" && svc.Build != nil:
			errs = append(errs, fmt.Errorf("providers: Services[%d] %s gives Image (%s) or Build, not both", i, svc.Name, svc.Image))
		case svc.Build != nil && svc.Build.Context == "":
			errs = append(errs, fmt.Errorf("providers: Services[%d] %s: Build.Context is empty", i, svc.Name))
		}
		for j, c := range svc.Copies {
			if !strings.HasPrefix(c.Source, "/") || !strings.HasPrefix(c.Target, "/") || c.Target == "/" {
				errs = append(errs, fmt.Errorf("providers: Services[%d] %s: Copies[%d] %s -> %s: want an absolute host path and an absolute target below /", i, svc.Name, j, c.Source, c.Target))
			}
		}
		for dep, cond := range svc.DependsOn {
			if !seen[dep] {
				errs = append(errs, fmt.Errorf("providers: Services[%d] %s depends on %s, which is not a service listed before it", i, svc.Name, dep))
			}
			if cond != ConditionStarted && cond != ConditionHealthy {
				errs = append(errs, fmt.Errorf("providers: Services[%d] %s: condition %q is not known (known: %s, %s)", i, svc.Name, cond, ConditionStarted, ConditionHealthy))
			}
		}
		for j, kv := range svc.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
				errs = append(errs, fmt.Errorf("providers: Services[%d] %s: Env[%d] is not KEY=VALUE without NUL bytes", i, svc.Name, j))
			}
		}
		if _, err := CanonicalCapabilities(svc.Resources.Capabilities); err != nil {
			errs = append(errs, err)
		}
		seen[svc.Name] = true
	}
	return errs
}

// RefuseServices is the error of a provider without Capabilities().Services
// for a Spec with Services, naming them and the provider that runs them.
func RefuseServices(provider string, spec Spec) error {
	if len(spec.Services) == 0 {
		return nil
	}
	names := make([]string, len(spec.Services))
	for i, s := range spec.Services {
		names[i] = s.Name
	}
	return fmt.Errorf("%s: %w: a multi-container environment (services %s) runs on the docker provider (-provider docker)", provider, ErrNotSupported, strings.Join(names, ", "))
}
