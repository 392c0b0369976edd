package docker

import (
	"context"

	"fmt"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
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

// prepareChromiumRootfs makes ImageChromium's tree: ImageDebian's — the
// image's own files when it is on the engine, else a debootstrap of the
// same — then Debian's chromium installed in a chroot on the host. The
// chroot, not a build step on the engine: a sandbox engine may have no
// bridge (and so no route to a mirror), while the host reaches the mirror
// debootstrap used.
func prepareChromiumRootfs(ctx context.Context, cli *client.Client, dir string, log io.Writer) error {
	if _, err := cli.ImageInspect(ctx, ImageDebian); err == nil {
		fmt.Fprintf(log, "docker: starting from %s's files (no debootstrap)\n", ImageDebian)
		if err := exportImageTree(ctx, cli, ImageDebian, dir); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(log, "docker: %s is not on the engine: debootstrap --variant=minbase bookworm into %s (minutes; building %s first saves it)\n", ImageDebian, dir, ImageDebian)
		if err := Debootstrap(ctx, dir); err != nil {
			return err
		}
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

// exportImageTree writes image's files into dir: a container made from it
// (never started, labelled as forkline's) is exported as a tar and
// extracted with GNU tar as root, ownership, modes, links and device nodes
// kept; the container is removed after.
func exportImageTree(ctx context.Context, cli *client.Client, image, dir string) error {
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: image, Cmd: []string{"/bin/true"}, Labels: map[string]string{LabelImage: "export"}},
	})
	if err != nil {
		return fmt.Errorf("docker: exporting %s: %w", image, err)
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	rc, err := cli.ContainerExport(ctx, created.ID, client.ContainerExportOptions{})
	if err != nil {
		return fmt.Errorf("docker: exporting %s: %w", image, err)
	}
	defer rc.Close()
	var out strings.Builder
	untar := exec.CommandContext(ctx, "tar", "-C", dir, "--numeric-owner", "-x")
	untar.Stdin, untar.Stdout, untar.Stderr = rc, &out, &out
	if err := untar.Run(); err != nil {
		return fmt.Errorf("docker: extracting %s's files: %w: %s", image, err, tailLines(out.String(), 10))
	}
	return chrootReady(dir)
}

// chrootReady gives a tree extracted from an image what a chroot's apt-get
// needs and an export leaves out or empty: the host's resolv.conf (the
// engine writes its own at start) and the basic device nodes.
func chrootReady(dir string) error {
	if conf, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		p := filepath.Join(dir, "etc", "resolv.conf")
		_ = os.Remove(p)
		if err := os.WriteFile(p, conf, 0o644); err != nil {
			return fmt.Errorf("docker: %w", err)
		}
	}
	for _, d := range []struct {
		name         string
		major, minor uint32 // small: Linux's old dev_t encoding, major<<8 | minor, holds them
	}{{"null", 1, 3}, {"zero", 1, 5}, {"random", 1, 8}, {"urandom", 1, 9}} {
		p := filepath.Join(dir, "dev", d.name)
		if st, err := os.Lstat(p); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			continue
		}
		_ = os.Remove(p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("docker: %w", err)
		}
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, int(d.major<<8|d.minor)); err != nil {
			return fmt.Errorf("docker: making /dev/%s in the chroot: %w", d.name, err)
		}
	}
	return nil
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
