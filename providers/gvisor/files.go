package gvisor

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// fileScript resolves a workspace path inside the sandbox and reads or
// writes it, run as
//
//	sh -c SCRIPT forkline-file OP WS REL
//
// with OP read or write, WS the workspace and REL the clean relative path
// providers.ResolvePathUnder made. It walks REL component by component from
// WS. A component that is a symlink is resolved fully with readlink -f, as
// the kernel would inside the sandbox: a target outside WS is refused
// (escape), one inside is followed. A symlink readlink -f cannot resolve (a
// loop, a target whose parent is missing) is refused too: as escape when its
// text is an absolute path outside WS, else as unresolved. It reports one
// line on stderr, "forkline-file WORD", and for a read that passed, the
// file's bytes on stdout:
//
//	ok          read: the bytes follow; write: the content (stdin) was written
//	missing     read: no such file
//	dir         the path is a directory
//	notreg      the path is not a regular file (a FIFO would block)
//	notdir      a parent is not a directory
//	escape      a symlink leads out of the workspace
//	unresolved  a symlink cannot be resolved
//	failed      the write or the parents' mkdir failed (its message follows)
//
// Writes create missing parents (0755) and new files 0644 (umask 022), and
// keep an existing file's mode (cat > truncates it in place). A background
// job could swap a directory for a symlink between the walk and the read
// or write; gVisor confines either to the sandbox.
const fileScript = `op=$1 ws=$2 rest=$3
set -f
say() { printf 'forkline-file %s\n' "$1" >&2; }
inside() { case $1 in "$ws"|"$ws"/*) return 0;; esac; return 1; }
w=$(readlink -f -- "$ws") && ws=$w
cur=$ws miss=
[ "$rest" = . ] && rest=
while [ -n "$rest" ]; do
  c=${rest%%/*}
  case $rest in */*) rest=${rest#*/};; *) rest=;; esac
  [ -d "$cur" ] || { say notdir; exit 0; }
  nx=$cur/$c
  if [ -L "$nx" ]; then
    t=$(readlink -f -- "$nx") || t=
    if [ -z "$t" ]; then
      r=$(readlink -- "$nx")
      case $r in /*) inside "$r" || { say escape; exit 0; };; esac
      say unresolved; exit 0
    fi
    inside "$t" || { say escape; exit 0; }
    if [ -e "$t" ]; then
      cur=$t
    else
      cur=${t%/*} miss=${t##*/}${rest:+/$rest}
      break
    fi
  elif [ -e "$nx" ]; then
    cur=$nx
  else
    miss=$c${rest:+/$rest}
    break
  fi
done
case $op in
read)
  [ -n "$miss" ] && { say missing; exit 0; }
  [ -d "$cur" ] && { say dir; exit 0; }
  [ -f "$cur" ] || { say notreg; exit 0; }
  say ok
  exec cat -- "$cur"
  ;;
write)
  if [ -n "$miss" ]; then
    [ -d "$cur" ] || { say notdir; exit 0; }
    case $miss in */*) mkdir -p -- "$cur/${miss%/*}" 2>&1 >&2 || { say failed; exit 0; };; esac
    cur=$cur/$miss
  elif [ -d "$cur" ]; then say dir; exit 0
  elif [ ! -f "$cur" ]; then say notreg; exit 0
  fi
  umask 022
  cat >"$cur" || { say failed; exit 0; }
  say ok
  ;;
esac
`

// fileReport is what fileScript said.
type fileReport struct {
	word string
	rest string // what else it said on stderr (a failure's message)
}

func parseFileReport(b []byte) fileReport {
	var r fileReport
	var other []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if w, ok := strings.CutPrefix(line, "forkline-file "); ok {
			r.word = strings.TrimSpace(w)
		} else if line != "" {
			other = append(other, line)
		}
	}
	r.rest = strings.Join(other, "; ")
	return r
}

// fileFailure maps a report that is not ok to the observation every
// provider gives for it; ok is false for "ok".
func fileFailure(kind runtime.ActionKind, p string, r fileReport) (runtime.Observation, bool) {
	switch r.word {
	case "ok":
		return runtime.Observation{}, false
	case "missing":
		return providers.Failure(runtime.ErrNotFound, fmt.Sprintf("%s: %q: no such file or directory", kind, p)), true
	case "dir":
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q is a directory", kind, p)), true
	case "notreg":
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q is not a regular file", kind, p)), true
	case "notdir":
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: a parent is not a directory", kind, p)), true
	case "escape":
		return providers.Failure(runtime.ErrPathRefused, fmt.Sprintf("%s: refused: %q %s (through a symlink)", kind, p, providers.ErrPathEscapes)), true
	case "unresolved":
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: the path cannot be resolved (a symlink loop?)", kind, p)), true
	}
	msg := r.rest
	if msg == "" {
		msg = "the sandbox gave no reason"
	}
	return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: %s", kind, p, msg)), true
}

// pathFailure is the observation of a path ResolvePath refused.
func pathFailure(kind runtime.ActionKind, p string, err error) runtime.Observation {
	if errors.Is(err, providers.ErrPathEscapes) {
		return providers.Failure(runtime.ErrPathRefused, fmt.Sprintf("%s: refused: %q %s", kind, p, providers.ErrPathEscapes))
	}
	return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: %v", kind, p, err))
}

// fileTimeout bounds one file action's exec.
const fileTimeout = 5 * time.Minute

// readFile reads a workspace file through fileScript; what is kept of it is
// capped like a command's output.
func (s *sandbox) readFile(ctx context.Context, p string) (runtime.Observation, error) {
	const kind = runtime.ActReadFile
	rel, err := providers.ResolvePathUnder(s.spec.fs.workdir, p)
	if err != nil {
		return pathFailure(kind, p, err), nil
	}
	buf := providers.NewCapBuffer(s.spec.outputCap)
	var diag bytes.Buffer
	code, err := s.run(ctx, []string{"sh", "-c", fileScript, "forkline-file", "read", s.spec.fs.workdir, rel}, nil, nil, buf, &diag, fileTimeout)
	if err != nil {
		return runtime.Observation{}, err
	}
	r := parseFileReport(diag.Bytes())
	if r.word == "" {
		if derr := s.deadErr(ctx, "read_file", fmt.Errorf("exit %d: %s", code, strings.TrimSpace(diag.String()))); derr != nil {
			return runtime.Observation{}, derr
		}
	}
	if obs, failed := fileFailure(kind, p, r); failed {
		return obs, nil
	}
	if code != 0 {
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("%s: %q: %s", kind, p, r.rest)), nil
	}
	return runtime.Observation{Output: buf.Bytes(), OutputBytes: buf.Total(), Truncated: buf.Truncated(), ExitCode: -1}, nil
}

// writeFile writes a workspace file through fileScript, the content on its
// stdin.
func (s *sandbox) writeFile(ctx context.Context, p, content string) (runtime.Observation, error) {
	const kind = runtime.ActWriteFile
	rel, err := providers.ResolvePathUnder(s.spec.fs.workdir, p)
	if err != nil {
		return pathFailure(kind, p, err), nil
	}
	if rel == "." {
		return providers.Failure(runtime.ErrActionFail, fmt.Sprintf("write_file: %q is the workspace directory", p)), nil
	}
	var diag, out bytes.Buffer
	code, err := s.run(ctx, []string{"sh", "-c", fileScript, "forkline-file", "write", s.spec.fs.workdir, rel}, nil,
		strings.NewReader(content), &out, &diag, fileTimeout)
	if err != nil {
		return runtime.Observation{}, err
	}
	r := parseFileReport(diag.Bytes())
	if r.word == "" {
		if derr := s.deadErr(ctx, "write_file", fmt.Errorf("exit %d: %s", code, strings.TrimSpace(diag.String()))); derr != nil {
			return runtime.Observation{}, derr
		}
	}
	if obs, failed := fileFailure(kind, p, r); failed {
		return obs, nil
	}
	msg := fmt.Sprintf("wrote %d bytes to %s", len(content), rel)
	return runtime.Observation{Output: []byte(msg), OutputBytes: int64(len(msg)), ExitCode: -1}, nil
}

var _ providers.Uploader = (*sandbox)(nil)

// Upload places files under dir (providers.Uploader): an absolute path in
// the sandbox, or "" (or a relative path) for the workspace. dir is made,
// then the files go in as one tar stream with their modes, parents 0755,
// extracted by tar inside the sandbox, so a symlink the episode left can
// lead a file astray only within the sandbox. The image needs tar (busybox
// and Debian have it).
func (s *sandbox) Upload(ctx context.Context, dir string, files []providers.File) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	s.acts.Add(1)
	defer s.acts.Done()
	if err := s.running(ctx); err != nil {
		return s.closedOr(err)
	}
	defer s.life.RUnlock()
	dest := s.spec.fs.workdir
	switch {
	case dir == "":
	case path.IsAbs(dir):
		dest = path.Clean(dir)
	default:
		rel, err := providers.ResolvePathUnder(s.spec.fs.workdir, dir)
		if err != nil {
			return fmt.Errorf("gvisor: upload to %q: %w", dir, err)
		}
		dest = path.Join(s.spec.fs.workdir, rel)
	}
	return s.upload(ctx, dest, files, false)
}

// upload extracts files under dest (made when missing) with one runsc
// exec of tar. Create uses it for Spec.Files (always, so the workspace
// exists even with none).
func (s *sandbox) upload(ctx context.Context, dest string, files []providers.File, always bool) error {
	if len(files) == 0 && !always {
		return nil
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
			return fmt.Errorf("gvisor: upload: %q is not a path below %s", f.Path, dest)
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
	script := `mkdir -p -- "$1" && cd -- "$1" && { [ "$2" = 0 ] || tar -x -f -; }`
	var out, errb bytes.Buffer
	code, err := s.run(ctx, []string{"sh", "-c", script, "forkline-upload", dest, fmt.Sprint(len(files))}, nil, &b, &out, &errb, fileTimeout)
	if err != nil {
		return err
	}
	if code != 0 {
		if derr := s.deadErr(ctx, "upload", fmt.Errorf("exit %d", code)); derr != nil {
			return derr
		}
		return fmt.Errorf("gvisor: upload into %s in %s failed (exit %d): %s", dest, s.id, code, strings.TrimSpace(out.String()+errb.String()))
	}
	return nil
}
