package gvisor

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/docker"
)

// defaultPath is the PATH of a rootfs that says none (a directory).
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// rootfs is a root filesystem sandboxes start from: a host directory that
// nothing writes to (the sandbox's changes stay in its memory, through
// --overlay2=root:memory), with the image's environment and workspace.
type rootfs struct {
	dir     string   // absolute host path
	env     []string // the image's environment (PATH, ...)
	workdir string   // the workspace: the image's WORKDIR, else /workspace
	what    string   // for messages and checkpoint metadata: "image REF (ID)" or "directory DIR"
}

// dirRootfs checks a rootfs given as a directory (the "rootfs" param): it
// must be a directory holding /bin/sh, which runs the sandbox's keeper and
// every command.
func dirRootfs(dir string) (*rootfs, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("gvisor: param %s=%q: %w", ParamRootfs, dir, err)
	}
	st, err := os.Stat(abs)
	switch {
	case err != nil:
		return nil, fmt.Errorf("gvisor: param %s=%q: %w", ParamRootfs, dir, err)
	case !st.IsDir():
		return nil, fmt.Errorf("gvisor: param %s=%q is not a directory (a sandbox's root filesystem is a directory tree, e.g. one debootstrap made)", ParamRootfs, dir)
	}
	if _, err := os.Lstat(filepath.Join(abs, "bin", "sh")); err != nil {
		return nil, fmt.Errorf("gvisor: param %s=%q holds no bin/sh: every command and the sandbox's keeper run under sh", ParamRootfs, dir)
	}
	return &rootfs{dir: abs, env: []string{defaultPath}, workdir: workspaceDir, what: "directory " + abs}, nil
}

// BusyboxRootfs makes, in dir (created), a root filesystem of a static
// busybox binary (Debian's busybox-static installs one at /bin/busybox): the
// binary with a symlink per applet in bin, /workspace, /tmp, /etc/passwd
// with root. It is the files of forkline/busybox, for the "rootfs" param
// on a host without a Docker engine.
func BusyboxRootfs(dir, busybox string) error {
	data, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("gvisor: %w (on Debian: apt-get install busybox-static)", err)
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("gvisor: %s --list: %w", busybox, err)
	}
	for _, d := range []string{"bin", "workspace", "tmp", "etc", "root", "proc", "dev", "sys"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("gvisor: %w", err)
		}
	}
	files := map[string]string{"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "etc/group": "root:x:0:\n"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("gvisor: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("gvisor: %w", err)
		}
	}
	return os.Chmod(filepath.Join(dir, "tmp"), 0o1777)
}

// imageRef is the image a Spec's sandboxes start from and, when it is built,
// how.
type imageRef struct {
	ref   string
	build *providers.Build
}

func (p *Provider) imageOf(spec providers.Spec) (imageRef, error) {
	switch {
	case spec.Build != nil:
		tag, err := docker.BuildTag(*spec.Build)
		if err != nil {
			return imageRef{}, err
		}
		return imageRef{ref: tag, build: spec.Build}, nil
	case spec.Image != "":
		return imageRef{ref: spec.Image}, nil
	}
	return imageRef{ref: p.image}, nil
}

// rootfsOf returns the rootfs of spec's sandboxes: the "rootfs" param's
// directory for a spec that names no image, else the image's, exported
// through the Docker engine once per provider (and cached on disk by image
// id across runs). progress, when not nil, gets the engine's pull and build
// lines.
func (p *Provider) rootfsOf(ctx context.Context, spec providers.Spec, progress io.Writer) (*rootfs, error) {
	if spec.Image == "" && spec.Build == nil && p.dirRootfs != nil {
		return p.dirRootfs, nil
	}
	img, err := p.imageOf(spec)
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w: %w", providers.ErrCannotPrepare, err)
	}
	p.fsMu.Lock()
	e, ok := p.fs[img.ref]
	if !ok {
		e = &rootfsEntry{ready: make(chan struct{})}
		p.fs[img.ref] = e
	}
	p.fsMu.Unlock()
	if ok {
		select {
		case <-e.ready:
			return e.fs, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e.fs, e.err = p.exportImage(ctx, img, progress)
	if e.err != nil && ctx.Err() != nil {
		// Not the image's fault: let the next caller try again.
		p.fsMu.Lock()
		delete(p.fs, img.ref)
		p.fsMu.Unlock()
	}
	close(e.ready)
	return e.fs, e.err
}

// rootfsEntry is one image's rootfs, made once.
type rootfsEntry struct {
	ready chan struct{}
	fs    *rootfs
	err   error
}

// engine opens the docker provider this one gets images through, once.
func (p *Provider) engine(ctx context.Context) (*docker.Provider, error) {
	p.engineMu.Lock()
	defer p.engineMu.Unlock()
	if p.docker != nil {
		return p.docker, nil
	}
	dp, err := docker.New(ctx, providers.Options{RunID: p.runID, Dir: p.dir, Params: map[string]string{docker.ParamSweep: "off"}})
	if err != nil {
		return nil, err
	}
	p.docker = dp
	return dp, nil
}

// exportImage makes img present on the Docker engine (pulled or built, as
// the docker provider does), then exports a container of it into the
// rootfs cache, keyed by image id, unless an earlier run did.
func (p *Provider) exportImage(ctx context.Context, img imageRef, progress io.Writer) (*rootfs, error) {
	dp, err := p.engine(ctx)
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w: image %s: sandboxes get an image's files through the Docker engine, and it cannot be reached (start one, or give -provider-opt %s=DIR): %w",
			providers.ErrCannotPrepare, img.ref, ParamRootfs, err)
	}
	spec := providers.Spec{Image: img.ref}
	if img.build != nil {
		spec = providers.Spec{Build: img.build}
	}
	if err := dp.Prepare(ctx, []providers.Spec{spec}, progress); err != nil {
		return nil, fmt.Errorf("gvisor: image %s: %w", img.ref, err)
	}
	cli := dp.Client()
	ins, err := cli.ImageInspect(ctx, img.ref)
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w: inspecting image %s: %w", providers.ErrCannotPrepare, img.ref, err)
	}
	fs := &rootfs{env: []string{defaultPath}, workdir: workspaceDir, what: fmt.Sprintf("image %s (%s)", img.ref, shortDigest(ins.ID))}
	if c := ins.Config; c != nil {
		if len(c.Env) > 0 {
			fs.env = append([]string(nil), c.Env...)
		}
		fs.workdir = workspaceOf(c.WorkingDir)
	}
	fs.dir = filepath.Join(p.cacheDir, strings.ReplaceAll(ins.ID, ":", "-"))
	if st, err := os.Stat(fs.dir); err == nil && st.IsDir() {
		return fs, nil
	}
	began := time.Now()
	if err := p.exportTo(ctx, cli, img.ref, fs.dir); err != nil {
		return nil, err
	}
	if progress != nil {
		fmt.Fprintf(progress, "gvisor: exported the files of %s into %s in %s\n", img.ref, fs.dir, time.Since(began).Round(time.Millisecond))
	}
	return fs, nil
}

// exportTo exports a (never started) container of ref into dest: extracted
// into a temporary directory beside it, then renamed, so dest exists only
// complete. A concurrent export of the same image by another process wins
// or loses the rename; either way dest is complete.
func (p *Provider) exportTo(ctx context.Context, cli *client.Client, ref, dest string) error {
	if err := os.MkdirAll(p.cacheDir, 0o755); err != nil {
		return fmt.Errorf("gvisor: rootfs cache: %w", err)
	}
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: ref, Cmd: []string{"true"}, Entrypoint: []string{}, Labels: map[string]string{
			docker.LabelRun: p.runID, docker.LabelOwner: p.owner, docker.LabelInstance: p.instance, docker.LabelKind: "gvisor-export",
		}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		return fmt.Errorf("gvisor: %w: creating a container of %s to export its files: %w", providers.ErrCannotPrepare, ref, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		if _, err := cli.ContainerRemove(rctx, created.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			_ = err // swept by the docker provider's sweep of dead owners
		}
	}()
	rc, err := cli.ContainerExport(ctx, created.ID, client.ContainerExportOptions{})
	if err != nil {
		return fmt.Errorf("gvisor: exporting the files of %s: %w", ref, err)
	}
	defer rc.Close()
	tmp := filepath.Join(p.cacheDir, tmpPrefix+strconv.Itoa(os.Getpid())+"-"+randomHex(4))
	if err := untar(rc, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("gvisor: extracting the files of %s: %w", ref, err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		_ = os.RemoveAll(tmp)
		if st, serr := os.Stat(dest); serr == nil && st.IsDir() {
			return nil // another process made it meanwhile
		}
		return fmt.Errorf("gvisor: rootfs cache: %w", err)
	}
	return nil
}

// tmpPrefix names the rootfs cache's directories in the making:
// .tmp-PID-RANDOM, removed by Sweep once PID is dead.
const tmpPrefix = ".tmp-"

// untar extracts a container export into dir, confined to it (os.Root: an
// entry cannot reach outside through "..", an absolute path or a symlink),
// with modes, owners and times. Device nodes and FIFOs are skipped: gVisor
// gives the sandbox its own /dev. Directory modes are set last, so a
// read-only directory does not stop its own entries.
func untar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirMeta struct {
		name     string
		mode     fs.FileMode
		uid, gid int
		mtime    time.Time
	}
	var dirs []dirMeta
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		if name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("entry %q leaves the root", hdr.Name)
		}
		mode := hdr.FileInfo().Mode()
		if name == "." {
			if hdr.Typeflag == tar.TypeDir {
				dirs = append(dirs, dirMeta{".", mode, hdr.Uid, hdr.Gid, hdr.ModTime})
			}
			continue
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			dirs = append(dirs, dirMeta{name, mode, hdr.Uid, hdr.Gid, hdr.ModTime})
		case tar.TypeReg:
			_ = root.Remove(name)
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			_, err = io.Copy(f, tr)
			if err == nil {
				err = f.Chown(hdr.Uid, hdr.Gid)
				if errors.Is(err, fs.ErrPermission) {
					err = nil // not root: the files stay ours
				}
			}
			if err == nil {
				err = f.Chmod(mode)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			_ = root.Lchown(name, hdr.Uid, hdr.Gid)
		case tar.TypeLink:
			target := path.Clean(strings.TrimPrefix(hdr.Linkname, "/"))
			_ = root.Remove(name)
			if err := root.Link(target, name); err != nil {
				return fmt.Errorf("%s: hard link to %s: %w", hdr.Name, hdr.Linkname, err)
			}
		default:
			// Devices, FIFOs, and headers that carry no file.
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		_ = root.Lchown(d.name, d.uid, d.gid)
		if err := root.Chmod(d.name, d.mode); err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		_ = root.Chtimes(d.name, d.mtime, d.mtime)
	}
	return nil
}

// workspaceOf is the workspace of a sandbox whose image's WORKDIR is
// workdir: that directory, or /workspace when the image sets none (or /,
// where a workspace of its own is safer for file actions), as on docker.
func workspaceOf(workdir string) string {
	if workdir == "" || workdir == "/" || !strings.HasPrefix(workdir, "/") {
		return workspaceDir
	}
	return path.Clean(workdir)
}

func shortDigest(id string) string {
	_, hex, ok := strings.Cut(id, ":")
	if !ok {
		hex = id
	}
	if len(hex) > 12 {
		hex = hex[:12]
	}
	return hex
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
