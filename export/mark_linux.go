package export

import (
	"encoding/json"
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// getMark reads path's markAttr (not following a final symbolic link).
func getMark(path string) (outputMark, error) {
	buf := make([]byte, 1024)
	n, err := unix.Lgetxattr(path, markAttr, buf)
	if err != nil {
		return outputMark{}, err
	}
	var m outputMark
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		return outputMark{}, err
	}
	return m, nil
}

// setMark sets path's markAttr.
func setMark(path string, m outputMark) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	err = unix.Lsetxattr(path, markAttr, data, 0)
	if errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EOPNOTSUPP) {
		return errMarksUnsupported
	}
	return err
}

// exchange swaps the directories at a and b atomically (renameat2
// RENAME_EXCHANGE), so that out is never missing while an output is
// replaced. errExchangeUnsupported where the filesystem cannot.
func exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.ENOTSUP) {
		return errExchangeUnsupported
	}
	return err
}
