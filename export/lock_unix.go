//go:build unix

package export

import (
	"errors"
	"os"
	"syscall"
)

// errLockHeld is returned by lockNB when another open file holds the lock.
var errLockHeld = errors.New("held by a live export")

// lockNB takes an exclusive flock on f without waiting. The lock lives as
// long as f is open (and dies with the process), which is what tells a
// live export's staging from a killed one's.
func lockNB(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLockHeld
	}
	return err
}
