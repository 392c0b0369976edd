package docker

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/moby/moby/api/types/container"

	"github.com/forkline/forkline/providers"
)

// The limits of a sandbox whose Spec.Resources leave them zero. A task that
// sets no limits must not be able to take the host down with a fork bomb, a
// memory hog or a busy loop, so zero means these, never "unlimited". The
// "pids", "memory_mb" and "cpus" params change them for one provider (a
// whole run); a task's own limits win over both.
const (
	// DefaultPids bounds processes plus threads. Shell work, compilers and
	// test runners stay far below it; Chromium in a sandbox uses about a
	// hundred.
	DefaultPids = 1024
	// DefaultMemoryMB bounds memory and swap together (MemorySwap is set
	// equal to Memory, so a sandbox cannot spill into the host's swap).
	DefaultMemoryMB = 2048
	// DefaultCPUs is one core: a busy loop in one sandbox cannot starve the
	// collector or the other replicas on the same host.
	DefaultCPUs = 1.0
)

// DefaultCapabilities are the Linux capabilities every sandbox keeps; the
// engine drops all others (CapDrop ALL), and Resources.Capabilities adds
// more. Commands run as root in the container, and these are what ordinary
// shell work as root on files in the workspace needs, nothing about the
// network, devices, mounts, other users or the kernel:
//
//   - CHOWN: tar, cp -a, git and package tools extract files with their
//     recorded owners; without it, tar x as root fails.
//   - DAC_OVERRIDE: files handed in or unpacked may belong to another uid
//     (a tarball's 1000:1000); root must still read and write them, as it
//     would on any Linux host.
//   - FOWNER: chmod, touch -d and utime on such files (chmod +x on an
//     unpacked script).
//   - KILL: the provider's own timeout kill must reach every process of a
//     command, also one that switched user (in a task granted SETUID). It
//     reaches only processes in the sandbox's own pid namespace.
//
// Docker's own default set also has NET_RAW (raw sockets, ping), MKNOD
// (device nodes), SYS_CHROOT, SETUID/SETGID (su, setpriv), SETPCAP,
// SETFCAP, NET_BIND_SERVICE (not needed: the engine lets any user bind low
// ports in a container's network namespace), FSETID and AUDIT_WRITE; a
// task that needs one asks for it by name (limits.capabilities).
var DefaultCapabilities = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"}

// noNewPrivileges is the security option that stops setuid binaries and
// file capabilities from raising a process's privileges: what a sandbox
// holds is the most any of its processes can ever hold.
const noNewPrivileges = "no-new-privileges"

// The Options.Params keys that change the default limits (see DefaultPids,
// DefaultMemoryMB and DefaultCPUs).
const (
	ParamPids     = "pids"
	ParamMemoryMB = "memory_mb"
	ParamCPUs     = "cpus"
)

// limits are a provider's default limits.
type limits struct {
	pids     int64
	memoryMB int64
	cpus     float64
}

var defaultLimits = limits{pids: DefaultPids, memoryMB: DefaultMemoryMB, cpus: DefaultCPUs}

// parseLimitParams reads the default-limit params. Zero, negative and
// non-finite values are refused: a default exists so that no sandbox runs
// unbounded.
func parseLimitParams(params map[string]string) (limits, error) {
	l := defaultLimits
	bad := func(key, v string) error {
		return fmt.Errorf("docker: param %s=%q: want a number > 0 (a task's limits override it per task; there is no unlimited)", key, v)
	}
	if v, ok := params[ParamPids]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
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

// applyLimits puts res into hc: the spec's limits, else the provider's
// defaults; every capability dropped but DefaultCapabilities and the
// spec's; no-new-privileges.
func (p *Provider) applyLimits(hc *container.HostConfig, res providers.Resources) error {
	caps, err := providers.CanonicalCapabilities(res.Capabilities)
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	cpus := res.CPUs
	if cpus <= 0 {
		cpus = p.limits.cpus
	}
	memMB := res.MemoryMB
	if memMB <= 0 {
		memMB = p.limits.memoryMB
	}
	pids := res.Pids
	if pids <= 0 {
		pids = p.limits.pids
	}
	hc.NanoCPUs = int64(cpus * 1e9)
	hc.Memory = memMB << 20
	hc.MemorySwap = hc.Memory
	hc.PidsLimit = &pids
	hc.CapDrop = []string{"ALL"}
	add := slices.Clone(DefaultCapabilities)
	for _, c := range caps {
		if !slices.Contains(add, c) {
			add = append(add, c)
		}
	}
	hc.CapAdd = add
	hc.SecurityOpt = append(hc.SecurityOpt, noNewPrivileges)
	return nil
}
