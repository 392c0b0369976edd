// Package gvisor is forkline's sandbox that forks running processes,
// registered as "gvisor": a sandbox is an OCI bundle run by runsc (gVisor,
// Debian's runsc package), a checkpoint is a runsc checkpoint image of the
// whole sandbox — processes, their memory, and its files — and a fork is a
// runsc restore of one. What a golden's start commands leave running (a
// server, a REPL, a database) runs in every fork with its memory, started
// once (Capabilities().ForksMemory; see pool).
//
// It owns runsc containers, their bundles, checkpoint images, the rootfs
// cache of image files, and their cleanup (Close, Sweep). It knows nothing
// of tasks, policies or datasets. It gets images through the docker
// provider (pull, build, then an export of a container's files), and needs
// no Docker engine when given a root filesystem directory.
//
// # Sandboxes
//
// Every sandbox runs with runsc --network=none (unless the spec or the
// "network" param says host) and --overlay2=root:memory: the root
// filesystem is a host directory that nothing writes to, and the sandbox's
// file changes live in its own memory, so one checkpoint image holds
// processes and files together and forks never share a byte they could
// write. The root filesystem is an image's files — the spec's image, the
// image its Build makes, else the "image" param (default forkline/busybox)
// — exported once through the Docker engine into a cache keyed by image id
// (forkline-gvisor-rootfs under Options.Dir, shared by runs, never pruned
// by forkline), or the "rootfs" param's directory for a spec that names no
// image. The workspace is the image's WORKDIR, else /workspace. The
// container's first process is a shell that reaps orphans (see
// reaperKeeper). Commands see LANG=C.UTF-8, HOME=/workspace (with forkline's
// own workspace), FORKLINE_WORKSPACE, the image's environment, then
// Spec.Env; nothing of forkline's own environment.
//
// # Safe by default
//
// Limits are docker's defaults (1 core, 2048 MiB, 1024 processes; the
// "cpus", "memory_mb" and "pids" params change them) unless the spec sets
// its own, and go into the OCI spec: memory and CPU as the sandbox's host
// cgroup (linux.resources), processes as RLIMIT_NPROC, which gVisor's own
// kernel enforces on every task of the sandbox (with a host pids limit far
// above it as a backstop: gVisor needs several host threads per task). The
// memory limit bounds gVisor's kernel and everything in it, the sandbox's
// file changes included (they live in its memory): that is how a sandbox's
// disk is bounded. A sandbox that passes it is killed whole by the host
// (ErrSandboxDied; the episode is env_error), where docker kills the one
// process that asked and reports 137. Capabilities are docker's
// (DefaultCapabilities: CHOWN, DAC_OVERRIDE, FOWNER, KILL) plus the spec's,
// all others dropped, with no_new_privs.
//
// What gVisor isolates: commands run on gVisor's kernel (the Sentry), a
// user-space kernel that implements Linux's system calls itself and uses a
// small, seccomp-filtered set of the host's; the sandbox sees its own
// processes, its own /proc, its own network stack (loopback only by
// default) and its own files. What it does not: it is not a virtual machine
// (the ptrace platform runs the sandbox's code as host processes traced by
// the Sentry; a kernel bug in the Sentry or in the host system calls it
// uses could still be an escape), the host's CPU caches and timing are
// shared (side channels), a sandbox on the host's network reaches
// everything the host reaches, and files given as the "rootfs" param are
// read by the sandbox (never written).
//
// # Actions
//
// exec runs sh -c CMD with runsc exec through the docker provider's
// wrapper (see execWrapper): its own session and process group, stdin
// /dev/null, stderr joined to stdout, a timer in the sandbox that kills the
// group and every process marked with the exec's mark on timeout. read_file
// and write_file take paths through providers.ResolvePath and walk them
// inside the sandbox with readlink -f per symlink (see fileScript): a
// target outside the workspace is refused (ErrPathRefused), one inside is
// followed, as on the other providers. Upload extracts a tar stream with
// the sandbox's tar. With Spec.Shell persistent, exec runs in one shell
// that lives in the sandbox and goes on across checkpoints: the sandbox
// itself after its checkpoint and every fork continue it (see shell.go).
//
// # Checkpoint and fork
//
// Checkpoint runs runsc checkpoint: the image (checkpoint.img, compressed)
// holds every process, its memory, the sandbox's files and its network
// stack. runsc stops the sandbox it checkpoints — its --leave-running
// re-creates the container and waits on it in the release Debian ships —
// so the checkpointed sandbox is restored from the same image, under the
// same id, before its next action (a golden, which the pool closes at
// once, is never restored). Fork is runsc restore of the image into a new
// container with the checkpointed sandbox's spec: every process runs on
// from where it was. Release deletes the image; forks do not need it.
//
// A restore cannot carry what lies outside the sandbox: connections to
// other hosts (none with network none; runsc refuses to checkpoint a
// sandbox on the host's network at all), host files a process holds open
// through a descriptor it was given (the stdio of a runsc exec that ended:
// a background job's output to the exec that started it goes nowhere in a
// fork), and wall-clock time (a restored process sees the clock jump).
//
// # Cleanup
//
// A provider keeps its state root, bundles and images in
// forkline-gvisor-INSTANCE under Options.Dir, with an owner file. A
// sandbox's Close makes it unusable at once and deletes it in the
// background (runsc waits about a second for gVisor's kernel to exit);
// the provider's Close waits for those deletions, deletes every sandbox
// left and removes the directory; Sweep deletes the
// sandboxes of directories whose owner process is dead (a run killed with
// SIGKILL leaves its sandboxes running) and removes them. Leftovers (the
// providertest LeakChecker) lists containers, images and sandbox
// directories still held.
//
// # Params
//
//	image         default image (default forkline/busybox), through the Docker engine
//	rootfs        a directory: the root filesystem of sandboxes whose spec names no image
//	network       none (default) or host
//	platform      ptrace (default) or kvm
//	runsc         the runsc binary (default: runsc on PATH)
//	boot_timeout  bound on one runsc run or restore (default 2m)
//	sweep         on (default), off
//	pids          default process limit per sandbox (default 1024)
//	memory_mb     default memory limit per sandbox, MiB (default 2048)
//	cpus          default CPU limit per sandbox, cores (default 1)
//
// Any other key fails New with the list of these.
package gvisor
