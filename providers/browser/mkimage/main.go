// Command mkimage builds forkline/chromium, the opt-in Docker image in which
// browser tasks run on the docker provider: a debootstrap'd Debian bookworm
// (minbase) with Debian's chromium and fonts-liberation, imported into the
// engine without a registry or a Dockerfile (the engine here has no bridge,
// so a build step could not reach a mirror; the chroot on the host can).
// It needs root, debootstrap and a reachable Debian mirror, and takes a few
// minutes. An image already present is kept unless -force.
//
//	go run ./browser/mkimage            # or: make images-browser
//	go run ./browser/mkimage -force
//
// Chromium then runs inside the sandbox, driven over the sandbox's exec
// stream (browser.Piper): the container keeps network none.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/forkline/forkline/providers/docker"
)

// Image is the name of the image this command builds.
const Image = "forkline/chromium"

// packages are installed into the rootfs after debootstrap.
var packages = []string{"chromium", "fonts-liberation"}

func main() {
	force := flag.Bool("force", false, "rebuild the image when it is already present")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: mkimage [-force]\n\nBuilds %s (Debian bookworm minbase + %s) on the Docker engine.\n\n", Image, strings.Join(packages, ", "))
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *force); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, force bool) error {
	cli, err := docker.Connect(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	if !force {
		if ins, err := cli.ImageInspect(ctx, Image); err == nil {
			fmt.Printf("mkimage: %s is present (%s); -force rebuilds it\n", Image, ins.ID)
			return nil
		} else if !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("inspecting %s: %w", Image, err)
		}
	}
	began := time.Now()
	dir, err := os.MkdirTemp("", "forkline-chromium-rootfs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Whatever happens, nothing stays mounted in the tree when it is
	// removed (debootstrap and the install mount /proc in it).
	defer unmountUnder(dir)

	fmt.Println("mkimage: debootstrap --variant=minbase bookworm")
	if err := docker.Debootstrap(ctx, dir); err != nil {
		return err
	}
	fmt.Printf("mkimage: installing %s in the chroot\n", strings.Join(packages, ", "))
	if err := installPackages(ctx, dir); err != nil {
		return err
	}
	if err := unmountUnder(dir); err != nil {
		return err
	}
	for _, d := range []string{"var/cache/apt/archives", "var/lib/apt/lists"} {
		os.RemoveAll(filepath.Join(dir, d))
		os.MkdirAll(filepath.Join(dir, d, "partial"), 0o755)
	}
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o755); err != nil {
		return err
	}

	fmt.Printf("mkimage: importing %s\n", Image)
	st, err := docker.ImportRootfs(ctx, cli, Image, "chromium", func(ctx context.Context, w io.Writer) error {
		return docker.TarRootfs(ctx, dir, w)
	})
	if err != nil {
		return err
	}
	fmt.Printf("mkimage: built %s (%s) in %s\n", Image, st.ID, time.Since(began).Round(time.Second))
	return nil
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
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
			return fmt.Errorf("unmounting %s: %w", p, err)
		}
	}
	return nil
}

// installPackages runs apt-get in the chroot with /proc mounted (some
// maintainer scripts read it); the caller unmounts it.
func installPackages(ctx context.Context, dir string) error {
	proc := filepath.Join(dir, "proc")
	if err := syscall.Mount("proc", proc, "proc", 0, ""); err != nil {
		return fmt.Errorf("mounting /proc in the chroot: %w", err)
	}
	env := []string{"DEBIAN_FRONTEND=noninteractive", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	if err := runLogged(ctx, env, "chroot", dir, "apt-get", "update", "-qq"); err != nil {
		return fmt.Errorf("apt-get update in the chroot: %w", err)
	}
	args := append([]string{dir, "apt-get", "install", "-y", "-qq", "--no-install-recommends"}, packages...)
	if err := runLogged(ctx, env, "chroot", args...); err != nil {
		return fmt.Errorf("apt-get install in the chroot: %w", err)
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
