package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// The images forkline builds for itself, without a registry.
const (
	// ImageBusybox is Debian's static busybox with a symlink per applet: a
	// 2 MB userland that starts fast. It is the default image.
	ImageBusybox = "forkline/busybox"
	// ImageDebian is a debootstrap'd Debian bookworm (minbase). It takes
	// minutes to build and needs root and debootstrap, so it is opt-in.
	ImageDebian = "forkline/debian"
	// ImageChromium is ImageDebian with Debian's chromium and
	// fonts-liberation: the image browser tasks run in on this provider
	// (Chromium inside the network-none container, driven over an exec
	// stream). Opt-in like ImageDebian, and larger (about 900 MB).
	ImageChromium = "forkline/chromium"
	// DefaultImage is used when neither Spec.Image nor the "image" param
	// names one.
	DefaultImage = ImageBusybox
)

// BusyboxPath is the static busybox binary ImageBusybox is built from
// (Debian package busybox-static).
var BusyboxPath = "/bin/busybox"

// DebianMirror is the mirror debootstrap uses for ImageDebian; the
// environment variable FORKLINE_DEBIAN_MIRROR overrides it.
var DebianMirror = "http://deb.debian.org/debian"

// imageEnv is the PATH every built image carries.
const imageEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ImageStatus reports what EnsureImages did for one image.
type ImageStatus struct {
	Name  string        // e.g. "forkline/busybox"
	ID    string        // the image id on the engine
	Built bool          // false when the image was already there
	Took  time.Duration // build time, when Built
}

// builder makes the root filesystem of one image: either write streams
// its tar directly, or prepare fills a directory tree (which is then
// tarred). prepare runs before the import request is made, so no request
// to the engine stays open during a debootstrap of minutes.
type builder struct {
	label   string // value of LabelImage
	write   func(ctx context.Context, w io.Writer) error
	prepare func(ctx context.Context, cli *client.Client, dir string, log io.Writer) error
	hint    string // how to make the builder's prerequisites available
}

var builders = map[string]builder{
	ImageBusybox: {label: "busybox", write: writeBusyboxRootfs,
		hint: "install busybox-static (apt-get install busybox-static)"},
	ImageDebian: {label: "debian", prepare: prepareDebianRootfs,
		hint: "run as root with debootstrap installed (apt-get install debootstrap) and a reachable Debian mirror"},
	ImageChromium: {label: "chromium", prepare: prepareChromiumRootfs,
		hint: "run as root with debootstrap installed (apt-get install debootstrap) and a reachable Debian mirror"},
}

// BuildOptions say which images BuildImages makes and how.
type BuildOptions struct {
	// Names are the images (KnownImages); ImageBusybox when empty.
	Names []string
	// Force rebuilds images that are already present (replacing the tag;
	// the old image stays until nothing uses it).
	Force bool
	// Log, when set, receives a line per step of a long build
	// (debootstrap, package installs, the import).
	Log io.Writer
}

// KnownImages returns the names EnsureImages can build, sorted.
func KnownImages() []string {
	out := make([]string, 0, len(builders))
	for n := range builders {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// EnsureImages makes sure each named image (ImageBusybox when no name is
// given) is on the engine, building the ones that are missing by importing
// a generated root filesystem (ImageImport of a tar stream: no registry, no
// Dockerfile). It is idempotent: an image already present is left alone.
// The images carry LabelImage and never a run label, so no sweep removes
// them. Unknown names fail with the list of known ones.
func EnsureImages(ctx context.Context, cli *client.Client, names ...string) ([]ImageStatus, error) {
	return BuildImages(ctx, cli, BuildOptions{Names: names})
}

// RebuildImages builds the named images even when they are present,
// replacing the tag (the old image stays until nothing uses it).
func RebuildImages(ctx context.Context, cli *client.Client, names ...string) ([]ImageStatus, error) {
	return BuildImages(ctx, cli, BuildOptions{Names: names, Force: true})
}

// BuildImages is EnsureImages (or RebuildImages, with Force) with a log of
// the long steps. The names are all checked before anything is built; the
// statuses of the images done before an error are returned with it.
func BuildImages(ctx context.Context, cli *client.Client, o BuildOptions) ([]ImageStatus, error) {
	names, force := o.Names, o.Force
	if len(names) == 0 {
		names = []string{ImageBusybox}
	}
	for _, n := range names {
		if _, ok := builders[n]; !ok {
			return nil, fmt.Errorf("docker: no builder for image %q (known: %s)", n, strings.Join(KnownImages(), ", "))
		}
	}
	var out []ImageStatus
	for _, n := range names {
		if !force {
			ins, err := cli.ImageInspect(ctx, n)
			if err == nil {
				out = append(out, ImageStatus{Name: n, ID: ins.ID})
				continue
			}
			if !cerrdefs.IsNotFound(err) {
				return out, fmt.Errorf("docker: inspecting image %s: %w", n, err)
			}
		}
		st, err := buildImage(ctx, cli, n, o.Log)
		if err != nil {
			return out, err
		}
		out = append(out, st)
	}
	return out, nil
}

// buildImage streams the rootfs of name into ImageImport.
func buildImage(ctx context.Context, cli *client.Client, name string, log io.Writer) (ImageStatus, error) {
	if log == nil {
		log = io.Discard
	}
	b := builders[name]
	began := time.Now()
	write := b.write
	if b.prepare != nil {
		dir, err := os.MkdirTemp("", "forkline-rootfs-")
		if err != nil {
			return ImageStatus{}, fmt.Errorf("docker: %w", err)
		}
		defer os.RemoveAll(dir)
		// Whatever happens, nothing stays mounted in the tree when it is
		// removed (debootstrap and package installs mount /proc in it).
		defer unmountUnder(dir)
		if err := b.prepare(ctx, cli, dir, log); err != nil {
			return ImageStatus{}, fmt.Errorf("docker: building %s: %w (%s)", name, err, b.hint)
		}
		if err := unmountUnder(dir); err != nil {
			return ImageStatus{}, fmt.Errorf("docker: building %s: %w", name, err)
		}
		write = func(ctx context.Context, w io.Writer) error { return TarRootfs(ctx, dir, w) }
	}
	fmt.Fprintf(log, "docker: importing %s\n", name)
	st, err := ImportRootfs(ctx, cli, name, b.label, write)
	if err != nil {
		return st, fmt.Errorf("%w (%s)", err, b.hint)
	}
	st.Took = time.Since(began)
	return st, nil
}

// ImportRootfs imports the root filesystem that write streams as a tar into
// the engine as name:latest, with the settings every forkline image has:
// WORKDIR WorkspaceDir, forkline's PATH, CMD /bin/sh and LabelImage=label
// (never a run label, so no sweep removes it). write runs in a goroutine of
// its own; its error fails the import. No registry and no Dockerfile are
// involved. It is how this package builds its images.
func ImportRootfs(ctx context.Context, cli *client.Client, name, label string, write func(ctx context.Context, w io.Writer) error) (ImageStatus, error) {
	began := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 1<<20)
		err := write(ctx, bw)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	ref := name + ":latest"
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: pr, SourceName: "-"}, ref,
		client.ImageImportOptions{
			Message: "built by forkline",
			Changes: []string{
				"WORKDIR " + WorkspaceDir,
				"ENV " + imageEnv,
				`CMD ["/bin/sh"]`,
				"LABEL " + LabelImage + "=" + label,
			},
		})
	if err != nil {
		_ = pr.CloseWithError(err)
		return ImageStatus{}, fmt.Errorf("docker: importing %s: %w", name, err)
	}
	// The import is only done once its progress stream has been read to EOF;
	// errors arrive inside the stream.
	ierr := drainJSONMessages(res)
	_ = res.Close()
	_ = pr.Close()
	if ierr != nil {
		return ImageStatus{}, fmt.Errorf("docker: importing %s: %w", name, ierr)
	}
	ins, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		return ImageStatus{}, fmt.Errorf("docker: importing %s: the image is not there afterwards: %w", name, err)
	}
	return ImageStatus{Name: name, ID: ins.ID, Built: true, Took: time.Since(began)}, nil
}

// drainJSONMessages reads an engine progress stream to EOF and returns the
// first error message in it.
func drainJSONMessages(r io.Reader) error {
	dec := json.NewDecoder(r)
	var first error
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return first
			}
			if first == nil {
				first = err
			}
			return first
		}
		if first == nil {
			switch {
			case m.ErrorDetail != nil && m.ErrorDetail.Message != "":
				first = errors.New(m.ErrorDetail.Message)
			case m.Error != "":
				first = errors.New(m.Error)
			}
		}
	}
}

// rootfsTime is the modification time of every generated entry, so that two
// builds of the same busybox produce the same layer.
var rootfsTime = time.Unix(0, 0)

// writeBusyboxRootfs writes the ImageBusybox root filesystem as a tar
// stream: /bin/busybox, one symlink per applet at the path busybox itself
// lists (--list-full), the directories a container needs, and an
// /etc/passwd and /etc/group with root.
func writeBusyboxRootfs(ctx context.Context, w io.Writer) error {
	if err := checkStatic(BusyboxPath); err != nil {
		return err
	}
	list, err := exec.CommandContext(ctx, BusyboxPath, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("docker: %s --list-full: %w", BusyboxPath, err)
	}
	bin, err := os.Open(BusyboxPath)
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	defer bin.Close()
	st, err := bin.Stat()
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}

	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	dir := func(name string, mode int64) error {
		if dirs[name] {
			return nil
		}
		dirs[name] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: rootfsTime, Format: tar.FormatPAX})
	}
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "root", "var", "run", "workspace"} {
		if err := dir(d, 0o755); err != nil {
			return err
		}
	}
	if err := dir("tmp", 0o1777); err != nil {
		return err
	}
	if err := dir("var/tmp", 0o1777); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: st.Size(), ModTime: rootfsTime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, bin); err != nil {
		return fmt.Errorf("docker: copying %s: %w", BusyboxPath, err)
	}
	files := []struct{ name, body string }{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		{"etc/group", "root:x:0:\nnogroup:x:65534:\n"},
		{"etc/hostname", "sandbox\n"},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: rootfsTime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			return err
		}
	}
	for _, applet := range strings.Fields(string(list)) {
		applet = strings.TrimPrefix(path.Clean("/"+applet), "/")
		if applet == "bin/busybox" || applet == "" {
			continue
		}
		if err := dir(path.Dir(applet), 0o755); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: applet, Linkname: "/bin/busybox", Mode: 0o777, ModTime: rootfsTime, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return tw.Close()
}

// checkStatic fails unless file is a statically linked ELF executable: a
// dynamic busybox would not run in an image without its libc.
func checkStatic(file string) error {
	f, err := elf.Open(file)
	if err != nil {
		return fmt.Errorf("docker: %s: %w (install busybox-static: apt-get install busybox-static)", file, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("docker: %s is dynamically linked; the image needs a static one (apt-get install busybox-static)", file)
		}
	}
	return nil
}

// prepareDebianRootfs runs debootstrap --variant=minbase bookworm into dir
// and makes it a sandbox image's tree.
func prepareDebianRootfs(ctx context.Context, _ *client.Client, dir string, log io.Writer) error {
	fmt.Fprintf(log, "docker: debootstrap --variant=minbase bookworm into %s (minutes)\n", dir)
	if err := Debootstrap(ctx, dir); err != nil {
		return err
	}
	return finishRootfs(dir)
}

// finishRootfs adds the workspace and drops apt's caches and lists, which
// are of no use in a sandbox image.
func finishRootfs(dir string) error {
	for _, d := range []string{"var/cache/apt/archives", "var/lib/apt/lists"} {
		_ = os.RemoveAll(filepath.Join(dir, d))
		_ = os.MkdirAll(filepath.Join(dir, d, "partial"), 0o755)
	}
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o755); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	return nil
}

// Debootstrap runs debootstrap --variant=minbase bookworm into dir, from
// DebianMirror or the mirror in $FORKLINE_DEBIAN_MIRROR. It needs root
// (debootstrap chroots and makes device nodes) and debootstrap; an error
// carries the tail of its log.
func Debootstrap(ctx context.Context, dir string) error {
	deboot, err := exec.LookPath("debootstrap")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/debootstrap"); serr != nil {
			return fmt.Errorf("docker: debootstrap not found (apt-get install debootstrap): %w", err)
		}
		deboot = "/usr/sbin/debootstrap"
	}
	if os.Geteuid() != 0 {
		return errors.New("docker: debootstrap needs root (it chroots and makes device nodes)")
	}
	mirror := DebianMirror
	if v := os.Getenv("FORKLINE_DEBIAN_MIRROR"); v != "" {
		mirror = v
	}
	var log strings.Builder
	cmd := exec.CommandContext(ctx, deboot, "--variant=minbase", "bookworm", dir, mirror)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker: debootstrap --variant=minbase bookworm (mirror %s): %w\n%s", mirror, err, tailLines(log.String(), 20))
	}
	return nil
}

// TarRootfs writes the tree dir to w as a tar stream, with tar
// --numeric-owner (ownership, modes, hard links and device nodes exactly)
// and --one-file-system (nothing mounted inside the tree comes along).
func TarRootfs(ctx context.Context, dir string, w io.Writer) error {
	tarCmd := exec.CommandContext(ctx, "tar", "-C", dir, "--numeric-owner", "--one-file-system", "-c", ".")
	tarCmd.Stdout = w
	var tarErr strings.Builder
	tarCmd.Stderr = &tarErr
	if err := tarCmd.Run(); err != nil {
		return fmt.Errorf("docker: tar of %s: %w: %s", dir, err, tailLines(tarErr.String(), 20))
	}
	return nil
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
