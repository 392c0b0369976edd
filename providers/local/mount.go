package local

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// overlayOptionSets are the extra mount options tried by the probe, best
// first. volatile skips the syncs of the upper layer that a fork, thrown away
// after its episode, never needs (and makes unmount cheap); userxattr is what
// an unprivileged user namespace needs.
var overlayOptionSets = []string{"volatile", "volatile,userxattr", "", "userxattr"}

// probeOverlay really mounts a small overlay under root and returns the extra
// options that worked, or why none did.
func probeOverlay(root string) (string, error) {
	if strings.ContainsAny(root, ",:\\") {
		return "", fmt.Errorf("the directory %q contains ',', ':' or '\\', which overlay mount options cannot carry", root)
	}
	dir, err := os.MkdirTemp(root, "probe-")
	if err != nil {
		return "", err
	}
	defer removeTree(dir)
	lower := filepath.Join(dir, "lower")
	if err := os.Mkdir(lower, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(lower, "probe"), []byte("lower"), 0o644); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(lower, "dir", "sub"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(lower, "dir", "sub", "f"), nil, 0o644); err != nil {
		return "", err
	}
	var first error
	for i, extra := range overlayOptionSets {
		fork := filepath.Join(dir, fmt.Sprintf("fork%d", i))
		if err := os.Mkdir(fork, 0o700); err != nil {
			return "", err
		}
		merged := filepath.Join(fork, "ws")
		err := mountOverlay([]string{lower}, fork, merged, extra)
		if err == nil {
			err = checkOverlay(merged)
			if uerr := unmount(merged); err == nil {
				err = uerr
			}
			if err == nil {
				return extra, nil
			}
		}
		if first == nil {
			first = err
		}
	}
	return "", first
}

// checkOverlay checks that a fresh probe overlay does what forks need: show
// the lower layer, copy a file up, and hide a deleted lower directory, then
// make it anew (whiteouts and opaque directories, which need xattrs on the
// upper layer: in a user namespace they need userxattr, and a mount without
// it succeeds but fails these with EIO).
func checkOverlay(merged string) error {
	b, err := os.ReadFile(filepath.Join(merged, "probe"))
	if err != nil {
		return err
	}
	if string(b) != "lower" {
		return fmt.Errorf("overlay probe read %q, want %q", b, "lower")
	}
	if err := os.WriteFile(filepath.Join(merged, "probe"), []byte("upper"), 0o644); err != nil {
		return err
	}
	dir := filepath.Join(merged, "dir")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		return fmt.Errorf("overlay probe: a directory made over a deleted one shows %d entries (%v)", len(entries), err)
	}
	return nil
}

// mountOverlay makes dir/upper and dir/work and mounts an overlay of the
// lower layers (top first) on ws, which it creates unless it exists.
func mountOverlay(lowers []string, dir, ws, extra string) error {
	upper := filepath.Join(dir, "upper")
	work := filepath.Join(dir, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Mkdir(ws, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	// The merged root shows the topmost layer's attributes: give the upper
	// root the attributes of the root its commands saw so far.
	if st, err := os.Stat(lowers[0]); err == nil {
		_ = os.Chmod(upper, st.Mode().Perm())
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
			_ = os.Lchown(upper, int(sys.Uid), int(sys.Gid))
		}
	}
	opts := overlayOptions(lowers, upper, work, extra)
	if err := unix.Mount("overlay", ws, "overlay", 0, opts); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("mount overlay on %s: %w (it needs root or a user namespace of our own)", ws, err)
		}
		return fmt.Errorf("mount overlay on %s with %q: %w", ws, extra, err)
	}
	return nil
}

// overlayOptions is the mount data of an overlay.
func overlayOptions(lowers []string, upper, work, extra string) string {
	opts := "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + upper + ",workdir=" + work
	if extra != "" {
		opts += "," + extra
	}
	return opts
}

// maxMountData is the most bytes of mount data the kernel takes through
// mount(2): one page. A stack of layers whose options would not fit is
// flattened instead (see checkpointLayer).
const maxMountData = 4096

// unmount unmounts the overlay on ws, lazily if something still uses it. A
// path that is not (or no longer) a mount point is not an error.
func unmount(ws string) error {
	err := unix.Unmount(ws, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(ws, unix.MNT_DETACH)
	}
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("local: unmount %s: %w", ws, err)
}

// mountsUnder lists the mount points at or under dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source super
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if mp := unescapeMountinfo(fields[4]); hasPathPrefix(mp, dir) {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("local: reading mountinfo: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of a
// mountinfo path.
func unescapeMountinfo(s string) string {
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

// unmountUnder detaches every mount at or under dir.
func unmountUnder(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("local: unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// ownerFile, in a provider directory, names the process that owns it.
const ownerFile = "owner"

// ownerStartGrace is how long a provider directory without an owner file is
// taken to be one being set up rather than one left by a crash.
const ownerStartGrace = time.Minute

// writeOwner records this process as the owner of root.
func writeOwner(root, runID string) error {
	start, err := procStartTime(os.Getpid())
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	line := fmt.Sprintf("%d %d %s\n", os.Getpid(), start, strconv.Quote(runID))
	if err := os.WriteFile(filepath.Join(root, ownerFile), []byte(line), 0o644); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	return nil
}

// procStartTime returns the start time of process pid in clock ticks since
// boot, which with the pid identifies a process even after pid reuse.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// The command name (field 2) may hold spaces and parentheses; the fields
	// after the last ')' start at field 3 (state). Field 22 is starttime.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// ownerAlive reports whether the process that made the provider directory
// root still runs.
func ownerAlive(root string) bool {
	b, err := os.ReadFile(filepath.Join(root, ownerFile))
	if err != nil {
		st, serr := os.Stat(root)
		return serr == nil && time.Since(st.ModTime()) < ownerStartGrace
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscan(string(b), &pid, &start); err != nil {
		return false
	}
	now, err := procStartTime(pid)
	return err == nil && now == start
}

// Sweep unmounts and removes what crashed forkline processes left under dir:
// every forkline-local-* provider directory whose owner process is gone,
// with its overlay mounts, sandboxes and checkpoints. Directories of live
// providers (this process's included) are left alone, so it is safe to call
// while other runs use dir. Processes a dead run started are not killed.
// Call it at start-up with the directory providers are opened in
// (Options.Dir, or os.TempDir() when that is empty). A missing dir is not an
// error.
func Sweep(dir string) error {
	if dir == "" {
		dir = os.TempDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("local: sweep: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		abs = resolved
	}
	entries, err := os.ReadDir(abs)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("local: sweep: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), rootPrefix) {
			continue
		}
		root := filepath.Join(abs, e.Name())
		if ownerAlive(root) {
			continue
		}
		// Commands the dead owner started and that outlived it (they left
		// their process group) go first: they may hold the mounts. Its
		// cgroup has every one of them, where it had one.
		errs = append(errs, sweepCgroup(root))
		killMarked(e.Name()+"/", true)
		if err := unmountUnder(root); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, removeTree(root))
	}
	return errors.Join(errs...)
}
