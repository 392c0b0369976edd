package gvisor

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// The OCI runtime spec (config.json) as far as forkline writes it: the
// fields runsc reads for a sandbox of one container. Written by hand rather
// than with github.com/opencontainers/runtime-spec, which would be a new
// dependency for a dozen fields.
type ociSpec struct {
	OCIVersion  string            `json:"ociVersion"`
	Process     ociProcess        `json:"process"`
	Root        ociRoot           `json:"root"`
	Hostname    string            `json:"hostname"`
	Mounts      []ociMount        `json:"mounts"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Linux       ociLinux          `json:"linux"`
}

type ociProcess struct {
	Terminal        bool            `json:"terminal"`
	User            ociUser         `json:"user"`
	Args            []string        `json:"args"`
	Env             []string        `json:"env"`
	Cwd             string          `json:"cwd"`
	Capabilities    ociCapabilities `json:"capabilities"`
	Rlimits         []ociRlimit     `json:"rlimits"`
	NoNewPrivileges bool            `json:"noNewPrivileges"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type ociCapabilities struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Inheritable []string `json:"inheritable"`
	Permitted   []string `json:"permitted"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	Namespaces  []ociNamespace `json:"namespaces"`
	CgroupsPath string         `json:"cgroupsPath"`
	Resources   ociResources   `json:"resources"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

type ociResources struct {
	Memory ociMemory `json:"memory"`
	CPU    ociCPU    `json:"cpu"`
	Pids   ociPids   `json:"pids"`
}

type ociMemory struct {
	Limit int64 `json:"limit"`
	Swap  int64 `json:"swap"`
}

type ociCPU struct {
	Quota  int64  `json:"quota"`
	Period uint64 `json:"period"`
}

type ociPids struct {
	Limit int64 `json:"limit"`
}

// cpuPeriod is the CFS period the CPU quota is given over (100 ms, as the
// Docker engine uses).
const cpuPeriod = 100000

// keeperSeconds is how long the keeper sleeps: about 68 years.
const keeperSeconds = "2147483647"

// reaperKeeper is the container's first process: a shell that reaps every
// child reparented to it (busybox ash and dash wait for any child while
// they wait for their sleep), so a killed command's orphans do not stay
// zombies. It exits on SIGTERM.
const reaperKeeper = `trap 'exit 0' TERM; while :; do sleep ` + keeperSeconds + ` & wait $!; done`

// hostPidsFactor and hostPidsSlack size the host cgroup's pids limit from
// the sandbox's. gVisor's kernel enforces the sandbox's own limit
// (RLIMIT_NPROC: see spec); on the host, gVisor runs a sandbox's tasks on
// threads of its own and of the ptrace platform's stub processes, and
// under churn it needs many: a fork bomb held at 128 tasks made about 2,300
// host threads here (about 800 without churn). A sandbox whose gVisor
// cannot make a host thread dies (a panic in its kernel), so the host limit
// is a backstop far above what the sandbox's own limit lets it reach.
const (
	hostPidsFactor = 16
	hostPidsSlack  = 8192
)

// spec is the OCI spec of one sandbox. cgroup is the sandbox's cgroup path
// (each sandbox has its own: a restore makes a new one).
func (ss sandboxSpec) spec(cgroup string, annotations map[string]string) ociSpec {
	caps := make([]string, 0, len(ss.caps))
	for _, c := range ss.caps {
		caps = append(caps, "CAP_"+c)
	}
	env := []string{"LANG=C.UTF-8", "FORKLINE_WORKSPACE=" + ss.fs.workdir}
	if ss.fs.workdir == workspaceDir {
		env = append(env, "HOME="+workspaceDir)
	}
	env = mergeEnv(ss.fs.env, append(env, ss.env...))
	pids := uint64(ss.pids)
	return ociSpec{
		OCIVersion: "1.0.2",
		Process: ociProcess{
			Args: []string{"sh", "-c", reaperKeeper},
			Env:  env,
			Cwd:  "/",
			Capabilities: ociCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps, Inheritable: []string{},
			},
			Rlimits: []ociRlimit{
				{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1 << 20},
				// gVisor's kernel counts every task (thread) of a user
				// against RLIMIT_NPROC, unless the task has CAP_SYS_ADMIN or
				// CAP_SYS_RESOURCE: the sandbox's pids limit.
				{Type: "RLIMIT_NPROC", Hard: pids, Soft: pids},
			},
			NoNewPrivileges: true,
		},
		Root:     ociRoot{Path: ss.fs.dir, Readonly: false},
		Hostname: "forkline",
		Mounts: []ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Annotations: annotations,
		Linux: ociLinux{
			Namespaces:  []ociNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}},
			CgroupsPath: cgroup,
			Resources: ociResources{
				Memory: ociMemory{Limit: ss.memoryMB << 20, Swap: ss.memoryMB << 20},
				CPU:    ociCPU{Quota: int64(math.Round(ss.cpus * cpuPeriod)), Period: cpuPeriod},
				Pids:   ociPids{Limit: ss.pids*hostPidsFactor + hostPidsSlack},
			},
		},
	}
}

// writeBundle writes the bundle directory of a sandbox: config.json.
func writeBundle(dir string, s ociSpec) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("gvisor: bundle: %w", err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("gvisor: bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("gvisor: bundle: %w", err)
	}
	return nil
}

// mergeEnv is base with over applied: a KEY in over replaces base's, new
// keys are appended in over's order.
func mergeEnv(base, over []string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(base)+len(over))
	add := func(kv string) {
		k := kv
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				k = kv[:i]
				break
			}
		}
		if i, ok := idx[k]; ok {
			out[i] = kv
			return
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range base {
		add(kv)
	}
	for _, kv := range over {
		add(kv)
	}
	return out
}
