// Package docker is forkline's container provider, registered as "docker":
// a sandbox is a Docker container, a checkpoint is a commit of one to an
// image, and a fork is a new container started from that image. It talks to
// the Engine API through github.com/moby/moby/client with the API version
// negotiated, so Debian's Engine 20.10 (API 1.41) and newer engines work.
//
// It owns containers, checkpoint images, the base images it builds
// (EnsureImages), the labels on all of them and their cleanup (Close,
// Sweep). It knows nothing of tasks, policies or datasets.
//
// # Engine and images
//
// New connects to the engine named by DOCKER_HOST (the default socket when
// unset); an engine that does not answer fails with ErrNoEngine and a
// message naming the address and how to start one. No registry is needed:
// EnsureImages builds forkline/busybox (Debian's static busybox with a
// symlink per applet, /workspace, /tmp, /etc/passwd with root; about 2 MB)
// by ImageImport of a generated root filesystem, and forkline/debian from
// debootstrap --variant=minbase bookworm on request, and forkline/chromium
// (that plus Debian's chromium) for browser tasks. forkline images runs it
// (make images, make images-debian, make images-browser). A Create whose
// image is missing fails with ErrImageMissing, naming the image and how to
// build it. Any image with sh, setsid, sleep and kill (busybox, or
// Debian's coreutils and util-linux) works; with tr and grep too, a timeout
// also kills the processes of the command that left its process group (see
// execWrapper).
//
// # Sandboxes
//
// A container runs a keeper process (sleep) under the engine's init
// (docker-init, which is tini) so orphans are reaped: a timed-out command's
// children become zombies only until init waits for them. When the engine
// has no init binary (Info reports none, or starting with it fails naming
// it) or the "init" param is "off", the keeper is a shell loop that waits
// for its own sleep, and busybox ash and dash reap any child while they
// wait, orphans included. Network is "none" unless Spec.Resources.Network or
// the "network" param says otherwise. Commands see LANG=C.UTF-8,
// HOME=/workspace, FORKLINE_WORKSPACE=/workspace, the image's PATH, then
// Spec.Env. Spec.Files are copied into /workspace as one tar stream. Create
// first refuses a spec providers.Spec.Validate refuses (a NUL byte in Env,
// an unknown capability name, negative limits).
//
// # Compose environments
//
// A Spec with Services is a compose environment (see compose.go): every
// service is a container of its own beside the sandbox, on an internal
// bridge network made for that sandbox alone, where each service's name
// (and providers.MainService for the sandbox) resolves through the
// engine's DNS; services start in depends_on order and the sandbox is
// handed over once every healthcheck passes. A checkpoint commits every
// service with the sandbox; a fork makes a new network and starts every
// service from its committed image, so forks never share a service.
// Services are bounded and capability-dropped like sandboxes
// (ServiceCapabilities added), labelled (LabelService), and removed with
// their network by Close, Sweep and the sandbox's Close. Prepare starts
// each distinct environment's services once to check they get ready.
// A service's Build is built as a sandbox's is (BuildTag, kept); its
// Copies go into its container before its first start and are committed
// with it. A service image that declares a VOLUME is refused: a commit
// does not carry a volume's contents.
//
// # Safe by default
//
// Every sandbox is bounded, whether its spec sets limits or not: Resources
// CPUs, MemoryMB and Pids become NanoCPUs, Memory (and MemorySwap, equal to
// it: no swap beyond the limit) and PidsLimit; a zero means the provider's
// default (DefaultCPUs = 1 core, DefaultMemoryMB = 2048, DefaultPids = 1024,
// changed per provider by the "cpus", "memory_mb" and "pids" params), never
// unlimited. The container drops every Linux capability (CapDrop ALL) but
// DefaultCapabilities (CHOWN, DAC_OVERRIDE, FOWNER, KILL: what shell work
// as root on the workspace's files needs; see there why each) and those
// Resources.Capabilities names, and runs with no-new-privileges, so no
// setuid binary or file capability raises a process above that. A fork
// bomb then fills the pids limit and is killed by the action's timeout (the
// timer needs no fork to kill: see execWrapper); a memory hog is killed by
// the kernel and the command reports 137; both are observations, and the
// sandbox works afterwards.
//
// # Actions
//
// exec runs sh -c CMD through a small wrapper script, in a session and
// process group of its own, with stdin /dev/null and stderr joined to stdout
// (one stream, interleaved as written, capped by a providers.CapBuffer of
// Spec.OutputCap). On an engine on this host the output goes through a FIFO
// in a read-only directory bind-mounted at OutputDir, at the speed of a
// local pipe, instead of through the engine's exec stream (several times
// slower); the first sandbox probes whether that works, and the "output"
// param can force either (see output.go). A command holding a NUL byte is a
// failed observation (no argv can carry one); nothing runs. The timeout (Action.TimeoutMS, else
// providers.DefaultExecTimeout) is enforced inside the container, because
// the engine has no way to kill an exec: a timer kills the command's whole
// process group with SIGKILL and says so, and the observation is TimedOut
// with exit code -1. The provider drains the exec's stream to EOF before it
// asks the engine for the exit code, and closes the stream always; a
// host-side deadline (timeout + 5 s) is a backstop that declares the
// sandbox broken. A cancelled ctx closes the stream, kills the group and
// returns ctx's error. Background jobs survive the exec that started them;
// one that keeps the output open delays the end of the exec by the engine's
// own grace (about 2 s), so redirect it (cmd >log 2>&1 &).
//
// read_file and write_file take paths through providers.ResolvePath
// (relative to /workspace, or absolute under it), then walk them component
// by component with the engine's path stat (HEAD on the archive endpoint,
// about a millisecond each), which evaluates a symlink's target fully and
// scoped to the container's root, as readlink -f in the container would: a
// target outside /workspace is refused (ErrPathRefused), one inside is
// followed, as local's os.Root does. The content then moves as a tar stream
// (CopyFromContainer, CopyToContainer). write_file creates missing parent
// directories (0755) and keeps the mode of a file it overwrites (new files
// get 0644). A background job could swap a directory for a symlink between
// the walk and the copy; the engine confines the copy to the container
// either way. The engine copies files of a stopped container too, so file
// actions first check that the container runs. wait sleeps; done
// is a no-op; other kinds (the GUI actions) get an ErrUnsupported
// observation.
//
// Act returns a Go error only when the sandbox itself failed: the container
// stopped or vanished (ErrSandboxDied, with its state), the engine failed,
// or the sandbox was closed (providers.ErrClosed). The episode then ends as
// env_error.
//
// # The engine going away
//
// When the engine stops answering — connections refused or reset, its socket
// gone, or a call in flight while /_ping gets no answer (the provider pings
// every 10 s while any call of an operation is in flight, and gives the
// engine 5 s to answer) — Create, Fork, Checkpoint, Release and Act fail with
// an error wrapping ErrEngineGone, which matches runtime.ErrUnavailable: the
// run's failure, which a resumed run redoes, not the episode's. A sandbox
// that died under an episode (killed, out of memory, removed behind the
// provider's back) is ErrSandboxDied and never ErrUnavailable: the engine
// answered. An error the engine itself returned (an API error) proves it
// alive without a ping. ErrNoEngine (from New) matches ErrUnavailable too.
//
// # Checkpoint and fork
//
// Checkpoint commits the container (paused during the commit, so the image
// is a consistent filesystem state; processes are not captured) to an image
// tagged forkline/checkpoint:RUN-N. Checkpoint.Took is the commit time and
// Bytes the size of the committed diff. Fork creates and starts a container
// from the image with the spec of the checkpointed sandbox (Env, Resources,
// OutputCap, Labels). Release removes the image and its untagged parents;
// forks still running keep working (the image is only untagged) and are
// removed by Close.
//
// Forks ready ahead of time are not this package's: the pool keeps them
// (pool.Config.Standby, collect -standby) for every provider alike, with the
// task's start commands already run. A standby fork is a running container
// whose only process sleeps: handing it out costs nothing, where a paused
// one would cost an unpause round trip (benchmarks/docker measures both).
// The "standby" param this provider once had is gone with its own standby.
//
// # Labels and cleanup
//
// A sandbox's output directory lives under Options.Dir (default
// os.TempDir()), in a forkline-docker-* directory of the provider that Close
// removes and Sweep removes when its process is dead.
//
// Every container and checkpoint image carries forkline.run (Options.RunID,
// random when empty), forkline.owner (pid@hostname) and forkline.instance
// (this Provider value), plus Spec.Labels. Close removes every container
// and image of its instance, tracked or not. Leftovers (the providertest
// LeakChecker) lists them. Sweep removes the objects of a run, or of owners
// that are dead processes on this host. Provider.Sweep (providers.Sweeper,
// which collectors and replay call right after opening the provider) sweeps
// dead owners unless the "sweep" param is "off"; New never sweeps, so
// opening a provider removes nothing. Base images carry forkline.image and
// no run label; no sweep removes them.
//
// # Params
//
//	image      default image (default forkline/busybox)
//	network    default network mode (default none)
//	init       auto (default), on, off
//	sweep      on (default), off: whether Provider.Sweep removes anything
//	pids       default process limit per sandbox (default 1024)
//	memory_mb  default memory limit per sandbox, MiB (default 2048)
//	cpus       default CPU limit per sandbox, cores (default 1)
//	output     auto (default), fifo, stream: how command output reaches the provider
//	runtime    the engine's OCI runtime for the containers, e.g. runsc (gVisor) once
//	           registered (dockerd --add-runtime runsc=/usr/bin/runsc); default the engine's
//
// Any other key fails New with the list of these.
package docker
