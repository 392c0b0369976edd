package task

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// DigestTree is the hex sha256 of every entry under dir, in lexical order:
// its slash-separated path, its type and permission bits, and a regular
// file's content or a symlink's target. Modification times and owners are
// not part of it: a copied or checked-out suite digests the same. A special
// file (device, socket, FIFO) is refused: it cannot be part of a task.
func DigestTree(dir string) (string, error) {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		field([]byte(filepath.ToSlash(rel)))
		field([]byte(mode.Type().String() + mode.Perm().String()))
		switch {
		case mode.IsDir():
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			field([]byte(target))
		case mode.IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(info.Size()))
			h.Write(n[:])
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s is a %s, which a task cannot hold", p, mode.Type())
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("task: digest of %s: %w", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
