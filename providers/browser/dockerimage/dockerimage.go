// Package dockerimage builds forkline/chromium, the opt-in Docker image in
// which browser tasks run on the docker provider: a debootstrap'd Debian
// bookworm (minbase) with Debian's chromium and fonts-liberation, imported
// into the engine without a registry or a Dockerfile (an engine without a
// bridge could not reach a mirror from a build step; the chroot on the host
// can). Building needs root, debootstrap and a reachable Debian mirror, and
// takes a few minutes.
//
// Chromium then runs inside the sandbox, driven over the sandbox's exec
// stream (browser.Piper): the container keeps network none.
//
// It knows the Docker engine (through providers/docker) and Debian's
// tooling; it does not know sessions, tasks or runs. The command that
// builds it is providers/browser/mkimage (make images-browser).
package dockerimage

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
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/forkline/forkline/providers/docker"
)

// Image is the name of the image Build builds.
const Image = "forkline/chromium"

// Packages are installed into the rootfs after debootstrap.
var Packages = []string{"chromium", "fonts-liberation"}

// Options configure Build.
type Options struct {
	// Force rebuilds the image when it is already present.
	Force bool
	// Log receives one line per phase; nil discards them.
	Log io.Writer
}

// Build builds Image on the engine (docker.Connect's), unless it is present
// and not opts.Force. It reports whether it built.
func Build(ctx context.Context, opts Options) (built bool, err error) {
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "dockerimage: "+format+"\n", args...)
		}
	}
	cli, err := docker.Connect(ctx)
	if err != nil {
		return false, err
	}
	defer cli.Close()
	if !opts.Force {
		if ins, err := cli.ImageInspect(ctx, Image); err == nil {
			logf("%s is present (%s); force rebuilds it", Image, ins.ID)
			return false, nil
		} else if !cerrdefs.IsNotFound(err) {
			return false, fmt.Errorf("dockerimage: inspecting %s: %w", Image, err)
		}
	}
	began := time.Now()
	dir, err := os.MkdirTemp("", "forkline-chromium-rootfs-")
	if err != nil {
		return false, fmt.Errorf("dockerimage: %w", err)
	}
	defer os.RemoveAll(dir)
	// Whatever happens, nothing stays mounted in the tree when it is
	// removed (debootstrap and the install mount /proc in it).
	defer unmountUnder(dir)

	logf("debootstrap --variant=minbase bookworm")
	if err := docker.Debootstrap(ctx, dir); err != nil {
		return false, err
	}
	logf("installing %s in the chroot", strings.Join(Packages, ", "))
	if err := installPackages(ctx, dir); err != nil {
		return false, err
	}
	if err := unmountUnder(dir); err != nil {
		return false, err
	}
	for _, d := range []string{"var/cache/apt/archives", "var/lib/apt/lists"} {
		os.RemoveAll(filepath.Join(dir, d))
		os.MkdirAll(filepath.Join(dir, d, "partial"), 0o755)
	}
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o755); err != nil {
		return false, fmt.Errorf("dockerimage: %w", err)
	}

	logf("importing %s", Image)
	st, err := docker.ImportRootfs(ctx, cli, Image, "chromium", func(ctx context.Context, w io.Writer) error {
		return docker.TarRootfs(ctx, dir, w)
	})
	if err != nil {
		return false, err
	}
	logf("built %s (%s) in %s", Image, st.ID, time.Since(began).Round(time.Second))
	return true, nil
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("dockerimage: %w", err)
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
			return fmt.Errorf("dockerimage: unmounting %s: %w", p, err)
		}
	}
	return nil
}

// installPackages runs apt-get in the chroot with /proc mounted (some
// maintainer scripts read it); the caller unmounts it.
func installPackages(ctx context.Context, dir string) error {
	proc := filepath.Join(dir, "proc")
	if err := syscall.Mount("proc", proc, "proc", 0, ""); err != nil {
		return fmt.Errorf("dockerimage: mounting /proc in the chroot: %w", err)
	}
	env := []string{"DEBIAN_FRONTEND=noninteractive", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	if err := runLogged(ctx, env, "chroot", dir, "apt-get", "update", "-qq"); err != nil {
		return fmt.Errorf("dockerimage: apt-get update in the chroot: %w", err)
	}
	args := append([]string{dir, "apt-get", "install", "-y", "-qq", "--no-install-recommends"}, Packages...)
	if err := runLogged(ctx, env, "chroot", args...); err != nil {
		return fmt.Errorf("dockerimage: apt-get install in the chroot: %w", err)
	}
	return nil
}

// runLogged runs a command with environment env and returns the tail of
// its output with its error.
func runLogged(ctx context.Context, env []string, name string, args ...string) error {
	var log strings.Builder
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimRight(log.String(), "\n"), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		return fmt.Errorf("%w\n%s", err, strings.Join(lines, "\n"))
	}
	return nil
}
