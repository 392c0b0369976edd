package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// copier copies directory trees, cloning files with FICLONE while the
// filesystem allows it.
type copier struct {
	noReflink atomic.Bool // set once FICLONE proved unsupported here
}

// dirMeta is applied to a copied directory after its children are in place,
// so a read-only directory can still be filled and its mtime stays put.
type dirMeta struct {
	path string
	info fs.FileInfo
}

// copyTree copies the tree at src to dst, which must not exist, and returns
// the bytes of regular files copied.
func (c *copier) copyTree(ctx context.Context, src, dst string) (int64, error) {
	asRoot := os.Geteuid() == 0
	var size int64
	var dirs []dirMeta
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dirMeta{to, info})
			return nil
		case mode.IsRegular():
			if err := c.copyFile(p, to, info); err != nil {
				return err
			}
			size += info.Size()
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case mode&fs.ModeNamedPipe != 0:
			if err := unix.Mkfifo(to, uint32(mode.Perm())); err != nil {
				return err
			}
			if err := os.Chmod(to, mode.Perm()); err != nil {
				return err
			}
		default: // sockets and devices have no meaning in a copy
			return nil
		}
		return setMeta(to, info, asRoot)
	})
	if err != nil {
		return 0, err
	}
	// Now that every child exists, creating them no longer bumps the
	// directories' mtimes, and a read-only mode no longer gets in the way.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i].path, dirs[i].info.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return 0, err
		}
		if err := setMeta(dirs[i].path, dirs[i].info, asRoot); err != nil {
			return 0, err
		}
	}
	return size, nil
}

// setMeta gives p the owner (when we are root) and modification time of info,
// without following a symlink.
func setMeta(p string, info fs.FileInfo, asRoot bool) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if asRoot {
		if err := os.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{
		{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec},
		{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// copyFile copies one regular file, by reflink when it can.
func (c *copier) copyFile(src, dst string, info fs.FileInfo) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	cloned := false
	if info.Size() > 0 && !c.noReflink.Load() {
		err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
		switch {
		case err == nil:
			cloned = true
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EXDEV),
			errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
			c.noReflink.Store(true) // this filesystem cannot; stop asking
		}
	}
	if !cloned && info.Size() > 0 {
		// os.File.ReadFrom uses copy_file_range, so the data stays in the kernel.
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
	}
	// Chmod after writing: a read-only source mode must not stop the copy.
	mode := info.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// removeTree removes p and everything under it, making directories writable
// when a first attempt is refused (an overlay's work/work is mode 000).
func removeTree(p string) error {
	err := os.RemoveAll(p)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(q, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}
