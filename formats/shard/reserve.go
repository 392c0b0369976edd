package shard

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// ReserveFile is the space a live Writer keeps for its last manifest
// write. A run that fills its disk breaks its Writer at the first failed
// write; Close must still record the run as partial, but writing a
// manifest needs free space too. So Create and Resume write this file,
// Writer grows it as the manifest grows, and Close deletes it right before
// the final manifest write, freeing what that write needs. A dataset at
// rest has none; a crashed run leaves it, and Resume reuses it,
// RemoveDataset deletes it.
const ReserveFile = ManifestFile + ".reserve"

// reserveHeadroom is reserved beyond twice the manifest's size: the
// collector's summary and the last generation's shard entries are written
// with the final manifest.
const reserveHeadroom = 64 << 10

// reserveBytes is the reserve kept for a manifest of manifestBytes bytes:
// twice its size (the final manifest may have grown) plus headroom, in
// whole 4 KiB blocks.
func reserveBytes(manifestBytes int) int64 {
	n := 2*int64(manifestBytes) + reserveHeadroom
	return (n + 4095) &^ 4095
}

// reserve makes dir's reserve file at least n bytes long. The bytes are
// pseudo-random, not zeros: a filesystem that compresses (ZFS, btrfs) or
// keeps holes would otherwise reserve nothing.
func reserve(dir string, n int64) error {
	path := filepath.Join(dir, ReserveFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("shard: reserve space for the final manifest: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("shard: reserve space for the final manifest: %w", err)
	}
	have := fi.Size()
	if have >= n {
		return f.Close()
	}
	rng := rand.NewChaCha8([32]byte{'f', 'o', 'r', 'k', 'l', 'i', 'n', 'e'})
	buf := make([]byte, 64<<10)
	for off := have; off < n; off += int64(len(buf)) {
		chunk := buf[:min(int64(len(buf)), n-off)]
		rng.Read(chunk) // never fails
		if _, err := f.WriteAt(chunk, off); err != nil {
			f.Close()
			return fmt.Errorf("shard: reserve %d bytes for the final manifest: %w", n, err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("shard: reserve %d bytes for the final manifest: %w", n, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("shard: reserve %d bytes for the final manifest: %w", n, err)
	}
	if have == 0 {
		return syncDir(dir)
	}
	return nil
}

// unreserve deletes dir's reserve file, freeing its space.
func unreserve(dir string) error {
	err := os.Remove(filepath.Join(dir, ReserveFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("shard: release the manifest reserve: %w", err)
	}
	return nil
}
