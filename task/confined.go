package task

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A task comes from a folder that a third party may have written: a
// downloaded Harbor suite, a YAML task file beside its fixtures. Whatever a
// task reads from its folder — the instruction, tests, solution, fixtures,
// a Dockerfile — is read through an os.Root opened at the folder, so a
// symlink (anywhere on a path) is followed only while it stays inside the
// folder. One that leads outside is refused naming the file: the host's
// files never reach a sandbox, a dataset or a manifest. (Decision: resolve
// inside rather than refuse every symlink. Suites link fixtures between
// their own folders; nothing outside the folder is theirs.)
type confined struct {
	root *os.Root
	dir  string // the folder, absolute
	show string // the folder as the user named it, for messages
}

// openConfined opens dir for confined reads; Close releases it.
func openConfined(dir, show string) (*confined, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, err
	}
	return &confined{root: root, dir: abs, show: show}, nil
}

func (c *confined) Close() error { return c.root.Close() }

// stat is os.Stat of rel (slash-separated, relative to the folder),
// following symlinks only inside the folder.
func (c *confined) stat(rel string) (fs.FileInfo, error) {
	return c.root.Stat(filepath.FromSlash(rel))
}

// lstat is os.Lstat of rel inside the folder.
func (c *confined) lstat(rel string) (fs.FileInfo, error) {
	return c.root.Lstat(filepath.FromSlash(rel))
}

// readFile reads rel, a regular file of at most limit bytes.
func (c *confined) readFile(rel string, limit int64) ([]byte, fs.FileInfo, error) {
	f, err := c.root.Open(filepath.FromSlash(rel))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, st, errNotRegular
	}
	if limit > 0 && st.Size() > limit {
		return nil, st, errTooLarge
	}
	data, err := io.ReadAll(io.LimitReader(f, st.Size()+1))
	if err != nil {
		return nil, st, err
	}
	return data, st, nil
}

var (
	errNotRegular = errors.New("not a regular file")
	errTooLarge   = errors.New("too large")
)

// escapes says where rel leads when it leads outside the folder through a
// symlink ("" when it does not): its resolved path, for the message. The
// reads themselves never leave the folder (os.Root); this is only to name
// what a refused link points at.
func (c *confined) escapes(rel string) (target string, out bool) {
	full := filepath.Join(c.dir, filepath.FromSlash(rel))
	resolved, err := filepath.EvalSymlinks(full)
	if err != nil {
		// A dangling link may still point outside: name its text.
		if l, lerr := os.Readlink(full); lerr == nil {
			t := l
			if !filepath.IsAbs(t) {
				t = filepath.Join(filepath.Dir(full), t)
			}
			return l, !c.inside(filepath.Clean(t))
		}
		// A file missing under a folder that is itself a link: the
		// nearest folder that exists says where rel leads (tests -> /etc
		// with no /etc/test.sh leads outside all the same).
		for p := filepath.Dir(full); strings.HasPrefix(p, c.dir+string(filepath.Separator)); p = filepath.Dir(p) {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				return r, !c.inside(r)
			}
		}
		return "", false
	}
	return resolved, !c.inside(resolved)
}

func (c *confined) inside(p string) bool {
	dir := c.dir
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// explain turns an error of a confined read of rel into what the user is
// told: the symlink that leads outside the folder, by name, or the error.
func (c *confined) explain(rel string, err error) string {
	if target, out := c.escapes(rel); out {
		return fmt.Sprintf("%s leads outside the task's folder (a symlink, to %s): a task's files are read only from inside its folder", rel, target)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Sprintf("%s: %v", rel, err)
}
