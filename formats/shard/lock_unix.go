//go:build unix

package shard

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive advisory lock on the dataset directory itself
// (no lock file is left behind). The lock dies with the process, so a crash
// never leaves a run locked.
func lockDir(dir string) (*os.File, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("shard: lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		d.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("shard: lock %s: %w", dir, err)
	}
	return d, nil
}

func unlockDir(d *os.File) error {
	if d == nil {
		return nil
	}
	return d.Close() // closing the descriptor releases the flock
}
