package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultPids bounds the processes (threads included) of one sandbox whose
// Spec.Resources.Pids is zero; the "pids" param changes it for a provider.
// The local provider is not a security boundary, but a fork bomb in a task
// must not take the host down.
const DefaultPids = 1024

// ParamPids is the Options.Params key for the default process limit.
const ParamPids = "pids"

// The ways a local provider bounds the processes of its sandboxes, as
// PidsLimit reports them.
const (
	// PidsCgroup: each sandbox is a pids cgroup (v1 or v2) under the
	// provider's own, so pids.max bounds the sandbox's processes exactly,
	// and Close kills every process in it, also one that left its process
	// group and replaced its environment. It needs write access to a pids
	// cgroup: root on the host, or a delegated cgroup.
	PidsCgroup = "cgroup"
	// PidsRlimit: commands run with RLIMIT_NPROC, which counts every
	// process of the user, not only the sandbox's, so the limit is the
	// user's process count when the provider opened plus the sandbox's
	// limit. The kernel does not apply it to root.
	PidsRlimit = "rlimit"
	// PidsNone: nothing bounds them (root without a writable pids cgroup).
	PidsNone = "none"
)

// cgroupFile, in a provider directory, records the provider's cgroup, so a
// sweep can remove it after a crash.
const cgroupFile = "cgroup"

// pidsLimiter is how one provider bounds its sandboxes' processes.
type pidsLimiter struct {
	mode   string
	dir    string // PidsCgroup: the provider's cgroup directory
	base   int64  // PidsRlimit: the user's processes when the provider opened
	reason string // why the mode is not PidsCgroup
}

// newPidsLimiter picks the best way available to this process and prepares
// it for the provider directory root.
func newPidsLimiter(root string) *pidsLimiter {
	dir, cgErr := makeProviderCgroup(filepath.Base(root))
	if cgErr == nil {
		cgErr = os.WriteFile(filepath.Join(root, cgroupFile), []byte(dir+"\n"), 0o644)
		if cgErr == nil {
			return &pidsLimiter{mode: PidsCgroup, dir: dir}
		}
		_ = removeCgroup(dir)
	}
	reason := "no writable pids cgroup: " + cgErr.Error()
	if os.Getuid() == 0 && initialUserNamespace() {
		return &pidsLimiter{mode: PidsNone, reason: reason + "; and the kernel does not apply RLIMIT_NPROC to root"}
	}
	return &pidsLimiter{mode: PidsRlimit, base: userTasks(os.Getuid()), reason: reason}
}

// sandboxLimit is the process limit of one sandbox.
type sandboxLimit struct {
	l     *pidsLimiter
	pids  int64
	group string // PidsCgroup: the sandbox's cgroup directory
	// procs is the group's cgroup.procs, open for writing from forSandbox
	// to killAll: a command joins the group with one write instead of an
	// open, a write and a close of a file in the cgroup filesystem. That
	// saves about 12 µs of CPU a command on a cgroup v1 host (5,000 joins
	// timed both ways); the write itself, the kernel's migration of the
	// process, is most of what is left.
	procs *os.File
}

// forSandbox prepares the limit of sandbox id: its cgroup with pids.max set,
// in cgroup mode.
func (l *pidsLimiter) forSandbox(id string, pids int64) (*sandboxLimit, error) {
	sl := &sandboxLimit{l: l, pids: pids}
	if l.mode != PidsCgroup {
		return sl, nil
	}
	sl.group = filepath.Join(l.dir, id)
	if err := os.Mkdir(sl.group, 0o755); err != nil {
		return nil, fmt.Errorf("local: sandbox cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(sl.group, "pids.max"), []byte(strconv.FormatInt(pids, 10)), 0o644); err != nil {
		_ = removeCgroup(sl.group)
		return nil, fmt.Errorf("local: sandbox cgroup: %w", err)
	}
	procs, err := os.OpenFile(filepath.Join(sl.group, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		_ = removeCgroup(sl.group)
		return nil, fmt.Errorf("local: sandbox cgroup: %w", err)
	}
	sl.procs = procs
	return sl, nil
}

// gatePrefix makes a limited command's shell wait, before it runs anything,
// until the provider has put it under the limit: it reads a line from
// descriptor 3 (a pipe from the provider; read is a builtin, so nothing is
// forked before) and closes it. On the same line as the command, so that
// its error messages keep their line numbers ("sh: 1: x: not found").
const gatePrefix = "read _ <&3; exec 3<&-; "

// command is the argv for /bin/sh -c cmd under the limit, and whether it
// is gated: started with a pipe as descriptor 3, then released by release
// once the process is under the limit. The gate costs a pipe and a write,
// against about a millisecond for a second shell that would put itself
// under the limit; the command sees the same $0, arguments and exit
// status as without a limit.
func (sl *sandboxLimit) command(cmd string) (argv []string, gated bool) {
	if sl == nil || sl.l.mode == PidsNone {
		return []string{"/bin/sh", "-c", cmd}, false
	}
	return []string{"/bin/sh", "-c", gatePrefix + cmd}, true
}

// limit puts the started, gated process pid under the limit: into the
// sandbox's cgroup, or its RLIMIT_NPROC set.
func (sl *sandboxLimit) limit(pid int) error {
	switch sl.l.mode {
	case PidsCgroup:
		// Each write is one pid, at offset 0 as a fresh open's would be;
		// after killAll the file is closed and the write fails, as it
		// would on the removed group.
		if _, err := sl.procs.WriteAt(strconv.AppendInt(nil, int64(pid), 10), 0); err != nil {
			return fmt.Errorf("local: putting a command into its sandbox's pids cgroup: %w", err)
		}
	case PidsRlimit:
		n := uint64(sl.l.base + sl.pids)
		if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
			return fmt.Errorf("local: setting a command's process limit: %w", err)
		}
	}
	return nil
}

// holdsEveryProcess reports whether the sandbox's cgroup holds every
// process its commands started: each command is gated until it is in the
// cgroup, and children inherit it, setsid or not. Closing the sandbox then
// kills the cgroup instead of scanning every process's environment in
// /proc for the sandbox's mark — a scan that costs O(processes on the
// machine) per sandbox, and was a third of the collector's CPU at 256
// replicas (benchmarks/scale).
func (sl *sandboxLimit) holdsEveryProcess() bool {
	return sl != nil && sl.l.mode == PidsCgroup && sl.group != ""
}

// killAll kills every process in the sandbox's cgroup and removes it. It
// reaches processes that left their group and replaced their environment,
// which nothing else finds. A no-op outside cgroup mode.
func (sl *sandboxLimit) killAll() error {
	if sl == nil || sl.group == "" {
		return nil
	}
	if sl.procs != nil {
		_ = sl.procs.Close()
	}
	return killCgroup(sl.group)
}

// close removes the provider's cgroup (its sandboxes' are gone by then).
func (l *pidsLimiter) close() error {
	if l.mode != PidsCgroup {
		return nil
	}
	var errs []error
	entries, _ := os.ReadDir(l.dir)
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, killCgroup(filepath.Join(l.dir, e.Name())))
		}
	}
	return errors.Join(append(errs, removeCgroup(l.dir))...)
}

// leftovers lists the provider's sandbox cgroups still there.
func (l *pidsLimiter) leftovers() []string {
	if l.mode != PidsCgroup {
		return nil
	}
	var out []string
	entries, _ := os.ReadDir(l.dir)
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, "cgroup "+filepath.Join(l.dir, e.Name()))
		}
	}
	return out
}

// killCgroup SIGKILLs the processes of cgroup dir until it is empty, then
// removes it. A process forked while a round runs is caught by the next.
func killCgroup(dir string) error {
	for round := 0; round < 100; round++ {
		pids, err := cgroupProcs(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("local: %w", err)
		}
		if len(pids) == 0 {
			if err := removeCgroup(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return nil
			}
			// Killed processes not yet reaped keep it busy for a moment.
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(time.Duration(min(round+1, 20)) * time.Millisecond)
	}
	if err := removeCgroup(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("local: removing cgroup %s: %w", dir, err)
	}
	return nil
}

func cgroupProcs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out, nil
}

// removeCgroup removes an empty cgroup directory (rmdir; its control files
// go with it).
func removeCgroup(dir string) error {
	return syscall.Rmdir(dir)
}

// makeProviderCgroup makes a pids cgroup named name for a provider and
// checks that a process can be put in a child of it: under this process's
// own pids cgroup (v1), or, for cgroup v2, under its own cgroup or its
// parent (a v2 cgroup that holds processes cannot hand controllers to
// children, and this process sits in its own).
func makeProviderCgroup(name string) (string, error) {
	own, v2, err := ownPidsCgroup()
	if err != nil {
		return "", err
	}
	candidates := []string{own}
	if v2 {
		candidates = append(candidates, filepath.Dir(own))
	}
	var errs []error
	for _, parent := range candidates {
		dir := filepath.Join(parent, name)
		if err := prepareCgroup(dir, v2); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dir, err))
			continue
		}
		return dir, nil
	}
	return "", errors.Join(errs...)
}

// prepareCgroup makes dir a pids cgroup whose children get pids.max, and
// proves it by putting a short-lived process into a child.
func prepareCgroup(dir string, v2 bool) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	fail := func(err error) error { _ = killCgroup(dir); return err }
	if v2 {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0o644); err != nil {
			return fail(err)
		}
	}
	probe := filepath.Join(dir, "probe")
	if err := os.Mkdir(probe, 0o755); err != nil {
		return fail(err)
	}
	if _, err := os.Stat(filepath.Join(probe, "pids.max")); err != nil {
		return fail(errors.New("the pids controller is not enabled for it"))
	}
	out, err := exec.Command("/bin/sh", "-c", `echo $$ >"$1"`, "/bin/sh", filepath.Join(probe, "cgroup.procs")).CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("cannot put a process into it: %v %s", err, bytes.TrimSpace(out)))
	}
	if err := killCgroup(probe); err != nil {
		return fail(err)
	}
	return nil
}

// ownPidsCgroup finds the directory of this process's pids cgroup: the v1
// hierarchy with the pids controller, else the v2 one when it offers pids.
func ownPidsCgroup() (dir string, v2 bool, err error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", false, err
	}
	var v1Path, v2Path string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2Path = parts[2]
		case hasWord(parts[1], ",", "pids"):
			v1Path = parts[2]
		}
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return "", false, err
	}
	if m, ok := mounts["pids"]; ok && v1Path != "" {
		return filepath.Join(m.point, relTo(v1Path, m.root)), false, nil
	}
	if m, ok := mounts[""]; ok && v2Path != "" {
		dir := filepath.Join(m.point, relTo(v2Path, m.root))
		ctl, err := os.ReadFile(filepath.Join(m.point, "cgroup.controllers"))
		if err != nil || !hasWord(strings.TrimSpace(string(ctl)), " ", "pids") {
			return "", false, errors.New("the cgroup v2 hierarchy has no pids controller")
		}
		return dir, true, nil
	}
	return "", false, errors.New("no pids cgroup hierarchy is mounted")
}

type cgroupMount struct{ point, root string }

// cgroupMounts maps "pids" to the v1 pids hierarchy and "" to the v2 one,
// from /proc/self/mountinfo.
func cgroupMounts() (map[string]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]cgroupMount{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, p := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(p) < 3 {
			continue
		}
		m := cgroupMount{point: unescapeMount(f[4]), root: unescapeMount(f[3])}
		switch {
		case p[0] == "cgroup2":
			if _, seen := out[""]; !seen {
				out[""] = m
			}
		case p[0] == "cgroup" && hasWord(p[2], ",", "pids"):
			if _, seen := out["pids"]; !seen {
				out["pids"] = m
			}
		}
	}
	return out, sc.Err()
}

// relTo is path p made relative to the root of the mount that shows it.
func relTo(p, root string) string {
	if root == "/" {
		return p
	}
	if rel, ok := strings.CutPrefix(p, root); ok {
		return rel
	}
	return p
}

func hasWord(list, sep, w string) bool {
	for _, x := range strings.Split(list, sep) {
		if x == w {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// initialUserNamespace reports whether this process runs in the host's user
// namespace, where uid 0 is exempt from RLIMIT_NPROC.
func initialUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// userTasks counts the processes and threads whose real uid is uid, as
// RLIMIT_NPROC does.
func userTasks(uid int) int64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := strconv.Itoa(uid)
	var n int64
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var real, threads string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					real = f[0]
				}
			}
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads = strings.TrimSpace(v)
			}
		}
		if real == want {
			t, _ := strconv.ParseInt(threads, 10, 64)
			n += max(t, 1)
		}
	}
	return n
}

// sweepCgroup removes the cgroup a dead provider recorded in root, with
// every process still in it.
func sweepCgroup(root string) error {
	b, err := os.ReadFile(filepath.Join(root, cgroupFile))
	if err != nil {
		return nil
	}
	dir := strings.TrimSpace(string(b))
	if !strings.HasPrefix(filepath.Base(dir), rootPrefix) || !strings.HasPrefix(dir, "/sys/fs/cgroup/") {
		return nil // not one of ours: never kill by a path we did not make
	}
	l := &pidsLimiter{mode: PidsCgroup, dir: dir}
	return l.close()
}
