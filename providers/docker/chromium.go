package docker

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// chromiumPackages are installed into ImageChromium's Debian tree.
var chromiumPackages = []string{"chromium", "fonts-liberation"}

// prepareChromiumRootfs makes ImageChromium's tree: ImageDebian's, then
// Debian's chromium installed in a chroot on the host. The chroot, not a
// build step on the engine: a sandbox engine may have no bridge (and so no
// route to a mirror), while the host reaches the mirror debootstrap used.
func prepareChromiumRootfs(ctx context.Context, dir string, log io.Writer) error {
	fmt.Fprintf(log, "docker: debootstrap --variant=minbase bookworm into %s (minutes)\n", dir)
	if err := Debootstrap(ctx, dir); err != nil {
		return err
	}
	fmt.Fprintf(log, "docker: installing %s in the chroot\n", strings.Join(chromiumPackages, ", "))
	if err := installPackages(ctx, dir, chromiumPackages); err != nil {
		return err
	}
	if err := unmountUnder(dir); err != nil {
		return err
	}
	return finishRootfs(dir)
}

// installPackages runs apt-get in the chroot dir with /proc mounted (some
// maintainer scripts read it); the caller unmounts it (unmountUnder).
func installPackages(ctx context.Context, dir string, packages []string) error {
	proc := filepath.Join(dir, "proc")
	if err := syscall.Mount("proc", proc, "proc", 0, ""); err != nil {
		return fmt.Errorf("docker: mounting /proc in the chroot: %w", err)
	}
	env := []string{"DEBIAN_FRONTEND=noninteractive", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	if err := runLogged(ctx, env, "chroot", dir, "apt-get", "update", "-qq"); err != nil {
		return fmt.Errorf("docker: apt-get update in the chroot: %w", err)
	}
	args := append([]string{dir, "apt-get", "install", "-y", "-qq", "--no-install-recommends"}, packages...)
	if err := runLogged(ctx, env, "chroot", args...); err != nil {
		return fmt.Errorf("docker: apt-get install in the chroot: %w", err)
	}
	return nil
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("docker: unmounting %s: %w", p, err)
		}
	}
	return nil
}

// runLogged runs a command with environment env; its error carries the
// tail of the command's output.
func runLogged(ctx context.Context, env []string, name string, args ...string) error {
	var log strings.Builder
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w\n%s", err, tailLines(log.String(), 20))
	}
	return nil
}
