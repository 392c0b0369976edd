package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// maxSymlinkHops bounds symlink resolution, as the kernel's ELOOP does.
const maxSymlinkHops = 40

// errEscapes, errNotDir and errUnresolved are why resolve refused a path.
var (
	errEscapes    = errors.New("escapes through a symlink")
	errNotDir     = errors.New("a parent is not a directory")
	errUnresolved = errors.New("cannot be resolved")
)

// resolvedPath is a workspace path after symlink resolution.
type resolvedPath struct {
	// path is the resolved absolute path of the deepest existing
	// component: the file itself when missing is empty.
	path string
	// stat is path's stat (only the mode, a directory, for the workspace
	// itself).
	stat container.PathStat
	// missing are the components below path that do not exist.
	missing []string
}

// resolve follows rel (clean, workspace-relative) component by component
// with the engine's path stat (HEAD /containers/ID/archive, about a
// millisecond each). The engine evaluates a symlink's target fully and
// scoped to the container's root, as readlink -f inside the container
// would; a target outside the workspace is refused with errEscapes, one
// inside is followed. Errors other than errEscapes, errNotDir and
// errUnresolved come from the engine.
func (s *sandbox) resolve(ctx context.Context, rel string) (resolvedPath, error) {
	comps := splitRel(rel)
	ws := s.spec.workdir
	root := resolvedPath{path: ws, stat: container.PathStat{Mode: fs.ModeDir | 0o755}}
	cur := root
	hops := 0
walk:
	for i := 0; i < len(comps); i++ {
		if !cur.stat.Mode.IsDir() {
			return resolvedPath{}, errNotDir
		}
		next := cur.path + "/" + comps[i]
		res, err := s.p.cli.ContainerStatPath(ctx, s.id, client.ContainerStatPathOptions{Path: next})
		switch {
		case cerrdefs.IsNotFound(err):
			cur.missing = comps[i:]
			return cur, nil
		case err != nil:
			if berr := s.broken(ctx, "stat", err); berr != nil {
				return resolvedPath{}, berr
			}
			// The engine answers 500 without a reason for a symlink loop or
			// a path through a file.
			return resolvedPath{}, errUnresolved
		}
		st := res.Stat
		if st.Mode&fs.ModeSymlink != 0 {
			hops++
			target := path.Clean(st.LinkTarget)
			if hops > maxSymlinkHops {
				return resolvedPath{}, errUnresolved
			}
			if target != ws && !strings.HasPrefix(target, strings.TrimSuffix(ws, "/")+"/") {
				return resolvedPath{}, errEscapes
			}
			// The target is fully evaluated already; walk it again from the
			// workspace (it has no symlinks left where it exists) followed by
			// the components still to go.
			comps = append(splitRel(strings.TrimPrefix(target, ws+"/")), comps[i+1:]...)
			if target == ws {
				comps = comps[1:]
			}
			cur = root
			i = -1
			continue walk
		}
		cur = resolvedPath{path: next, stat: st}
	}
	return cur, nil
}

// checkAlive fails with ErrSandboxDied when the container no longer runs.
// File actions need it: the engine copies files of a stopped container as
// happily as of a running one.
func (s *sandbox) checkAlive(ctx context.Context) error {
	if state := s.deadState(ctx); state != "" {
		return fmt.Errorf("%w: %s (%s)", ErrSandboxDied, s.short(), state)
	}
	return nil
}

// splitRel splits a clean relative path into its components ("." has none).
func splitRel(rel string) []string {
	if rel == "." || rel == "" {
		return nil
	}
	return strings.Split(rel, "/")
}

// resolveFailure is the observation for a path resolve refused, or nil
// when err is an infrastructure error.
func resolveFailure(kind runtime.ActionKind, p string, err error) *runtime.Observation {
	var obs runtime.Observation
	switch {
	case errors.Is(err, errEscapes):
		obs = providers.Failure(runtime.ErrPathRefused, fmt.Sprintf("%s: refused: %q %s (through a symlink)", kind, p, providers.ErrPathEscapes))
	case errors.Is(err, errNotDir):
		obs = providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: a parent is not a directory", kind, p))
	case errors.Is(err, errUnresolved):
		obs = providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: the path cannot be resolved (a symlink loop?)", kind, p))
	default:
		return nil
	}
	return &obs
}

// readFile reads a workspace file: resolve, then copy it out as a tar
// stream.
func (s *sandbox) readFile(ctx context.Context, p string) (runtime.Observation, error) {
	const kind = runtime.ActReadFile
	rel, err := providers.ResolvePathUnder(s.spec.workdir, p)
	if err != nil {
		return pathFailure(kind, p, err), nil
	}
	if err := s.checkAlive(ctx); err != nil {
		return runtime.Observation{}, err
	}
	r, err := s.resolve(ctx, rel)
	if err != nil {
		if obs := resolveFailure(kind, p, err); obs != nil {
			return *obs, nil
		}
		return runtime.Observation{}, err
	}
	switch {
	case len(r.missing) > 0:
		return providers.Failure(runtime.ErrNotFound, fmt.Sprintf("%s: %q: no such file or directory", kind, p)), nil
	case r.stat.Mode.IsDir():
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q is a directory", kind, p)), nil
	case !r.stat.Mode.IsRegular():
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q is not a regular file", kind, p)), nil
	}
	res, err := s.p.cli.CopyFromContainer(ctx, s.id, client.CopyFromContainerOptions{SourcePath: r.path})
	if err != nil {
		if cerrdefs.IsNotFound(err) && s.deadState(ctx) == "" { // removed since the stat
			return providers.Failure(runtime.ErrNotFound, fmt.Sprintf("%s: %q: no such file or directory", kind, p)), nil
		}
		return runtime.Observation{}, s.infraError(ctx, "copy from container", err)
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	h, err := tr.Next()
	if err != nil {
		return runtime.Observation{}, s.infraError(ctx, "copy from container", err)
	}
	if h.Typeflag != tar.TypeReg {
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q is not a regular file", kind, p)), nil
	}
	buf := providers.NewCapBuffer(s.spec.outputCap)
	if _, err := io.Copy(buf, tr); err != nil {
		return runtime.Observation{}, s.infraError(ctx, "copy from container", err)
	}
	return runtime.Observation{Output: buf.Bytes(), OutputBytes: buf.Total(), Truncated: buf.Truncated(), ExitCode: -1}, nil
}

// writeFile writes content to a workspace file: resolve, then copy in a tar
// stream holding the missing parent directories and the file, extracted at
// the deepest existing directory. An existing file keeps its mode; new
// ones get 0644, new directories 0755.
func (s *sandbox) writeFile(ctx context.Context, p, content string) (runtime.Observation, error) {
	const kind = runtime.ActWriteFile
	rel, err := providers.ResolvePathUnder(s.spec.workdir, p)
	if err != nil {
		return pathFailure(kind, p, err), nil
	}
	if err := s.checkAlive(ctx); err != nil {
		return runtime.Observation{}, err
	}
	if rel == "." {
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("write_file: %q is the workspace directory", p)), nil
	}
	r, err := s.resolve(ctx, rel)
	if err != nil {
		if obs := resolveFailure(kind, p, err); obs != nil {
			return *obs, nil
		}
		return runtime.Observation{}, err
	}
	dest, names, mode := path.Dir(r.path), []string{path.Base(r.path)}, int64(0o644)
	switch {
	case len(r.missing) > 0:
		if !r.stat.Mode.IsDir() {
			return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: a parent is not a directory", kind, p)), nil
		}
		dest, names = r.path, r.missing
	case r.stat.Mode.IsDir():
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q is a directory", kind, p)), nil
	case !r.stat.Mode.IsRegular():
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q is not a regular file", kind, p)), nil
	default:
		mode = int64(r.stat.Mode.Perm())
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	now := time.Now()
	for i := range names {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: path.Join(names[:i+1]...) + "/", Mode: 0o755, ModTime: now, Format: tar.FormatPAX}
		if i == len(names)-1 {
			hdr = &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(names...), Mode: mode, Size: int64(len(content)), ModTime: now, Format: tar.FormatPAX}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return runtime.Observation{}, err
		}
	}
	if _, err := io.WriteString(tw, content); err != nil {
		return runtime.Observation{}, err
	}
	if err := tw.Close(); err != nil {
		return runtime.Observation{}, err
	}
	if _, err := s.p.cli.CopyToContainer(ctx, s.id, client.CopyToContainerOptions{
		DestinationPath: dest, Content: &tb,
	}); err != nil {
		if berr := s.broken(ctx, "copy to container", err); berr != nil {
			return runtime.Observation{}, berr
		}
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("write_file: %q: %v", p, err)), nil
	}
	msg := fmt.Sprintf("wrote %d bytes to %s", len(content), rel)
	return runtime.Observation{Output: []byte(msg), OutputBytes: int64(len(msg)), ExitCode: -1}, nil
}

// pathFailure is the observation of a path ResolvePath refused.
func pathFailure(kind runtime.ActionKind, p string, err error) runtime.Observation {
	if errors.Is(err, providers.ErrPathEscapes) {
		return providers.Failure(runtime.ErrPathRefused, fmt.Sprintf("%s: refused: %q %s", kind, p, providers.ErrPathEscapes))
	}
	return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: %v", kind, p, err))
}

// filesTar packs Spec.Files as a tar stream to extract at the workspace,
// with an entry for every parent directory. It returns nil for no files.
// Paths follow providers.ResolvePath; the workspace of a fresh container
// is the image's, which is trusted not to hold symlinks leading out.
func filesTar(files map[string][]byte) (io.Reader, error) {
	if len(files) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(files))
	clean := make(map[string][]byte, len(files))
	for name, data := range files {
		rel, err := providers.ResolvePath(name)
		if err != nil {
			return nil, fmt.Errorf("docker: spec file %q: %w", name, err)
		}
		if rel == "." {
			return nil, fmt.Errorf("docker: spec file %q is the workspace directory", name)
		}
		if _, dup := clean[rel]; dup {
			return nil, fmt.Errorf("docker: spec files %q and another name the same path %s", name, rel)
		}
		clean[rel] = data
		names = append(names, rel)
	}
	sort.Strings(names)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	now := time.Now()
	dirs := map[string]bool{}
	for _, name := range names {
		var parents []string
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			d := parents[i]
			if dirs[d] {
				continue
			}
			if _, isFile := clean[d]; isFile {
				return nil, fmt.Errorf("docker: spec file %s is also the parent directory of %s", d, name)
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: now, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		data := clean[name]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: now, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &b, nil
}

var _ providers.Uploader = (*sandbox)(nil)

// Upload places files under dir (providers.Uploader): an absolute path in
// the container, or "" (or a relative path) for the workspace. dir is made
// first (mkdir -p, an exec); the files then go in as one tar stream with
// their modes, parents 0755, extracted by the engine inside the container's
// root, so a symlink the episode left can lead a file astray only within
// the container.
func (s *sandbox) Upload(ctx context.Context, dir string, files []providers.File) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	wctx, stop := s.p.watch(ctx)
	defer stop()
	err := s.upload(wctx, dir, files)
	return cause(wctx, err)
}

func (s *sandbox) upload(ctx context.Context, dir string, files []providers.File) error {
	dest := s.spec.workdir
	switch {
	case dir == "":
	case path.IsAbs(dir):
		dest = path.Clean(dir)
	default:
		rel, err := providers.ResolvePathUnder(s.spec.workdir, dir)
		if err != nil {
			return fmt.Errorf("docker: upload to %q: %w", dir, err)
		}
		dest = path.Join(s.spec.workdir, rel)
	}
	if err := s.checkAlive(ctx); err != nil {
		return err
	}
	if dest != s.spec.workdir {
		var out bytes.Buffer
		res, err := s.run(ctx, []string{"mkdir", "-p", "--", dest}, nil, &out, &out, execBackstop)
		if err != nil {
			return err
		}
		if res.exitCode != 0 {
			return fmt.Errorf("docker: upload: mkdir -p %s in %s failed (exit %d): %s", dest, s.short(), res.exitCode, strings.TrimSpace(out.String()))
		}
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	now := time.Now()
	dirs := map[string]bool{}
	sorted := append([]providers.File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, f := range sorted {
		name := path.Clean(f.Path)
		if name == "." || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("docker: upload: %q is not a path below %s", f.Path, dest)
		}
		var parents []string
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			if d := parents[i]; !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: now, Format: tar.FormatPAX}); err != nil {
					return err
				}
			}
		}
		mode := int64(f.Mode.Perm())
		if mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(f.Data)), ModTime: now, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if _, err := s.p.cli.CopyToContainer(ctx, s.id, client.CopyToContainerOptions{DestinationPath: dest, Content: &b}); err != nil {
		return s.infraError(ctx, "upload", err)
	}
	return nil
}
