package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// The exit codes of the path helper scripts.
const (
	pathNotFound   = 3
	pathEscapes    = 10
	pathIsDir      = 11
	pathUnresolved = 12
	pathNotRegular = 13
)

// inWorkspace is a shell case pattern matching the workspace and what is
// under it.
const inWorkspace = WorkspaceDir + "|" + WorkspaceDir + "/*"

// resolveReadScript resolves $1 (a clean workspace-relative path) inside
// the container with readlink -f, which follows every symlink the way the
// kernel would, and prints the result when it is a regular file in the
// workspace.
const resolveReadScript = `a="` + WorkspaceDir + `/$1"
if [ ! -e "$a" ]; then
	r=$(readlink -f -- "$a" 2>/dev/null) || exit 3
	case "$r" in ` + inWorkspace + `) exit 3 ;; esac
	exit 10
fi
r=$(readlink -f -- "$a") || exit 12
case "$r" in ` + inWorkspace + `) ;; *) exit 10 ;; esac
[ -d "$r" ] && exit 11
[ -f "$r" ] || exit 13
printf '%s' "$r"
`

// resolveWriteScript resolves $1 for writing: the deepest part of the path
// that exists (or is a dangling symlink) is resolved with readlink -f and
// must stay in the workspace; the rest is created as directories. It prints
// the mode to give the file (the existing file's, else 644) and the
// resolved path.
const resolveWriteScript = `a="` + WorkspaceDir + `/$1"
e="$a"
while [ -n "$e" ] && [ ! -e "$e" ] && [ ! -L "$e" ]; do e="${e%/*}"; done
[ -n "$e" ] || exit 12
r=$(readlink -f -- "$e") || exit 12
case "$r" in ` + inWorkspace + `) ;; *) exit 10 ;; esac
f="$r${a#"$e"}"
[ -d "$f" ] && exit 11
d="${f%/*}"
mkdir -p -- "$d" 2>/dev/null
[ -d "$d" ] || exit 13
m=644
if [ -f "$f" ]; then m=$(stat -c %a -- "$f" 2>/dev/null) || m=644; fi
printf '%s\n%s' "$m" "$f"
`

// readFile reads a workspace file: resolve in the container, then copy the
// file out as a tar stream.
func (s *sandbox) readFile(ctx context.Context, p string) (runtime.Observation, error) {
	const kind = runtime.ActReadFile
	rel, err := providers.ResolvePath(p)
	if err != nil {
		return pathFailure(kind, p, err), nil
	}
	code, out, err := s.runScript(ctx, resolveReadScript, rel)
	if err != nil {
		return runtime.Observation{}, err
	}
	if code != 0 {
		return scriptFailure(kind, p, code), nil
	}
	resolved := string(out)
	res, err := s.p.cli.CopyFromContainer(ctx, s.id, client.CopyFromContainerOptions{SourcePath: resolved})
	if err != nil {
		if cerrdefs.IsNotFound(err) && s.deadState(ctx) == "" {
			return scriptFailure(kind, p, pathNotFound), nil
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
		return scriptFailure(kind, p, pathNotRegular), nil
	}
	buf := providers.NewCapBuffer(s.spec.outputCap)
	if _, err := io.Copy(buf, tr); err != nil {
		return runtime.Observation{}, s.infraError(ctx, "copy from container", err)
	}
	return runtime.Observation{Output: buf.Bytes(), OutputBytes: buf.Total(), Truncated: buf.Truncated(), ExitCode: -1}, nil
}

// writeFile writes content to a workspace file, creating parent
// directories: resolve in the container, then copy a one-file tar stream
// into the resolved directory.
func (s *sandbox) writeFile(ctx context.Context, p, content string) (runtime.Observation, error) {
	const kind = runtime.ActWriteFile
	rel, err := providers.ResolvePath(p)
	if err != nil {
		return pathFailure(kind, p, err), nil
	}
	if rel == "." {
		return failure(runtime.ErrActionFail, fmt.Sprintf("write_file: %q is the workspace directory", p)), nil
	}
	code, out, err := s.runScript(ctx, resolveWriteScript, rel)
	if err != nil {
		return runtime.Observation{}, err
	}
	if code != 0 {
		return scriptFailure(kind, p, code), nil
	}
	modeText, resolved, ok := strings.Cut(string(out), "\n")
	mode, merr := strconv.ParseInt(modeText, 8, 32)
	if !ok || merr != nil || !strings.HasPrefix(resolved, WorkspaceDir+"/") {
		return runtime.Observation{}, fmt.Errorf("docker: write_file in %s: unexpected resolver output %q", s.short(), out)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: path.Base(resolved), Mode: mode, Size: int64(len(content)),
		ModTime: time.Now(), Format: tar.FormatPAX,
	}); err != nil {
		return runtime.Observation{}, err
	}
	if _, err := io.WriteString(tw, content); err != nil {
		return runtime.Observation{}, err
	}
	if err := tw.Close(); err != nil {
		return runtime.Observation{}, err
	}
	if _, err := s.p.cli.CopyToContainer(ctx, s.id, client.CopyToContainerOptions{
		DestinationPath: path.Dir(resolved), Content: &tb,
	}); err != nil {
		if ctx.Err() != nil || s.checkOpen() != nil || s.deadState(ctx) != "" {
			return runtime.Observation{}, s.infraError(ctx, "copy to container", err)
		}
		return failure(runtime.ErrActionFail, fmt.Sprintf("write_file: %q: %v", p, err)), nil
	}
	msg := fmt.Sprintf("wrote %d bytes to %s", len(content), rel)
	return runtime.Observation{Output: []byte(msg), OutputBytes: int64(len(msg)), ExitCode: -1}, nil
}

// pathFailure is the observation of a path ResolvePath refused.
func pathFailure(kind runtime.ActionKind, p string, err error) runtime.Observation {
	if errors.Is(err, providers.ErrPathEscapes) {
		return failure(runtime.ErrPathRefused, fmt.Sprintf("%s: refused: %q %s", kind, p, providers.ErrPathEscapes))
	}
	return failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: %v", kind, p, err))
}

// scriptFailure is the observation for a helper script's exit code.
func scriptFailure(kind runtime.ActionKind, p string, code int) runtime.Observation {
	switch code {
	case pathNotFound:
		return failure(runtime.ErrNotFound, fmt.Sprintf("%s: %q: no such file or directory", kind, p))
	case pathEscapes:
		return failure(runtime.ErrPathRefused, fmt.Sprintf("%s: refused: %q %s (through a symlink)", kind, p, providers.ErrPathEscapes))
	case pathIsDir:
		return failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q is a directory", kind, p))
	case pathNotRegular:
		if kind == runtime.ActWriteFile {
			return failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: a parent is not a directory", kind, p))
		}
		return failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q is not a regular file", kind, p))
	}
	return failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: cannot resolve the path in the sandbox (helper exit code %d)", kind, p, code))
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
