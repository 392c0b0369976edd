//go:build !unix

package export

import (
	"errors"
	"os"
)

// errLockHeld is returned by lockNB when another open file holds the lock.
var errLockHeld = errors.New("held by a live export")

// lockNB cannot lock here; it reports the lock as held so that nothing is
// ever swept as stale.
func lockNB(f *os.File) error { return errLockHeld }
