package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
	st   *syscall.Stat_t
}

// copyTree copies the tree at src to dst, which must not exist, and returns
// the bytes of regular files copied.
func (c *copier) copyTree(ctx context.Context, src, dst string) (int64, error) {
	return c.copyWalk(ctx, src, dst, false)
}

// copyLayer copies an overlay upper layer: the tree as copyTree copies it,
// plus what only an upper layer has — whiteouts (character devices 0/0,
// which mark a deleted lower file) and the overlay's extended attributes
// (an opaque directory hides the lower one it replaced).
func (c *copier) copyLayer(ctx context.Context, src, dst string) error {
	_, err := c.copyWalk(ctx, src, dst, true)
	return err
}

// copyWalk is copyTree, and with layer copyLayer: one walk, so the two
// copies cannot drift apart.
func (c *copier) copyWalk(ctx context.Context, src, dst string, layer bool) (int64, error) {
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
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("no stat for %s", p)
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dirMeta{to, st})
		case mode.IsRegular():
			size += info.Size()
			if err := c.copyFile(p, to, st, asRoot); err != nil {
				return err
			}
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
			if err := setMeta(to, st, asRoot, false); err != nil {
				return err
			}
		case layer && mode&fs.ModeCharDevice != 0 && st.Rdev == 0:
			if err := unix.Mknod(to, unix.S_IFCHR|(st.Mode&0o7777), 0); err != nil {
				return fmt.Errorf("copying the whiteout %s: %w", rel, err)
			}
		case mode&fs.ModeNamedPipe != 0:
			if err := unix.Mkfifo(to, 0o600); err != nil {
				return err
			}
			if err := setMeta(to, st, asRoot, true); err != nil {
				return err
			}
		default:
			return nil // sockets and devices have no meaning in a copy
		}
		if layer {
			return copyOverlayXattrs(p, to)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	// Now that every child exists, creating them no longer bumps the
	// directories' mtimes, and a read-only mode no longer gets in the way.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := setMeta(dirs[i].path, dirs[i].st, asRoot, true); err != nil {
			return 0, err
		}
	}
	return size, nil
}

// setMeta gives p the owner (when we are root), mode (unless p is a
// symlink) and times of st, without following a symlink. The owner goes
// first: chown clears the set-id bits.
func setMeta(p string, st *syscall.Stat_t, asRoot, chmod bool) error {
	if asRoot {
		if err := unix.Fchownat(unix.AT_FDCWD, p, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if chmod {
		if err := unix.Fchmodat(unix.AT_FDCWD, p, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, statTimes(st), unix.AT_SYMLINK_NOFOLLOW)
}

func statTimes(st *syscall.Stat_t) []unix.Timespec {
	return []unix.Timespec{
		{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec},
		{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
	}
}

// copyFile copies one regular file with its owner, mode and times, by
// reflink when it can. It works on raw descriptors: the copy path is a
// handful of syscalls per file, and os.File would add poller and fcntl
// calls to each.
func (c *copier) copyFile(src, dst string, st *syscall.Stat_t, asRoot bool) (err error) {
	in, err := unix.Open(src, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: src, Err: err}
	}
	defer unix.Close(in)
	out, err := unix.Open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dst, Err: err}
	}
	defer func() {
		if cerr := unix.Close(out); err == nil && cerr != nil {
			err = &fs.PathError{Op: "close", Path: dst, Err: cerr}
		}
	}()
	if st.Size > 0 {
		if err := c.copyData(in, out, st.Size); err != nil {
			return &fs.PathError{Op: "copy", Path: dst, Err: err}
		}
	}
	if asRoot {
		if err := unix.Fchown(out, int(st.Uid), int(st.Gid)); err != nil {
			return &fs.PathError{Op: "chown", Path: dst, Err: err}
		}
	}
	if err := unix.Fchmod(out, st.Mode&0o7777); err != nil {
		return &fs.PathError{Op: "chmod", Path: dst, Err: err}
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dst, statTimes(st), 0); err != nil {
		return &fs.PathError{Op: "utimes", Path: dst, Err: err}
	}
	return nil
}

// copyData fills out with the size bytes of in: a FICLONE reflink when the
// filesystem shares extents, else copy_file_range (the data stays in the
// kernel), else read and write.
func (c *copier) copyData(in, out int, size int64) error {
	if !c.noReflink.Load() {
		err := unix.IoctlFileClone(out, in)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EXDEV),
			errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
			c.noReflink.Store(true) // this filesystem cannot; stop asking
		}
	}
	for left := size; left > 0; {
		n, err := unix.CopyFileRange(in, nil, out, nil, int(min(left, 1<<30)), 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
				return readWrite(in, out)
			}
			return err
		}
		if n == 0 { // the file shrank while we copied
			return nil
		}
		left -= int64(n)
	}
	return nil
}

// readWrite copies from the current offsets of in to out until EOF.
func readWrite(in, out int) error {
	buf := make([]byte, 128<<10)
	for {
		n, err := unix.Read(in, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		for b := buf[:n]; len(b) > 0; {
			w, err := unix.Write(out, b)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return err
			}
			b = b[w:]
		}
	}
}

// syncFS flushes the filesystem holding p. Checkpoint calls it once so that
// the forks that follow do not queue behind the writeback of the copy it
// just made (measured: an overlay mount waits milliseconds for it).
func syncFS(p string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return &fs.PathError{Op: "syncfs", Path: p, Err: err}
	}
	return nil
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
