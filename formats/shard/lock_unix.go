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

// CheckFree reports, as an error wrapping ErrLocked, that a live Writer
// (another process's collect or serve) holds dir; nil when none does or
// dir does not exist. It takes the lock and gives it back at once: it
// tells a command about to write a dataset that another is writing there,
// whatever state that one has got to (a directory made, its manifest not
// yet written).
func CheckFree(dir string) error {
	lock, err := lockDir(dir)
	if errors.Is(err, ErrLocked) {
		return fmt.Errorf("%w (another forkline collect or serve is writing it now; wait for it to end, or choose another directory)", ErrLocked)
	}
	if err == nil {
		unlockDir(lock)
	}
	return nil
}

func unlockDir(d *os.File) error {
	if d == nil {
		return nil
	}
	return d.Close() // closing the descriptor releases the flock
}
