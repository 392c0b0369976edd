package capture

import (
	"sync"

	"github.com/forkline/forkline/schemas"
)

// BlobIndex remembers which blob hashes were already stored. Add reports
// whether h is new (and records it).
type BlobIndex interface {
	Add(h string) bool
}

// SetIndex is an in-memory BlobIndex. It grows with the number of distinct
// blobs (64 bytes each), not with the number of steps.
type SetIndex map[string]struct{}

// Add records h and reports whether it was new.
func (s SetIndex) Add(h string) bool {
	if _, ok := s[h]; ok {
		return false
	}
	s[h] = struct{}{}
	return true
}

// BlobRecorder is the run-wide blob index of a dataset being written: every
// distinct payload is stored once, whichever episode met it first. It is
// safe for concurrent use by the episodes of a run.
type BlobRecorder struct {
	mu     sync.Mutex
	stored SetIndex
}

// NewBlobRecorder returns a recorder that has stored nothing yet.
func NewBlobRecorder() *BlobRecorder { return &BlobRecorder{stored: SetIndex{}} }

// Stored notes a blob the dataset already holds (a resumed run's).
func (r *BlobRecorder) Stored(sha256 string) {
	r.mu.Lock()
	r.stored.Add(sha256)
	r.mu.Unlock()
}

// Commit calls commit with those of blobs the run has not stored yet, under
// the recorder's lock, and remembers them once commit succeeds. Deduplicating
// at commit time, under the lock, means a blob is always written in the same
// shard generation as, or an earlier one than, the first episode that
// references it; a failed commit stores nothing, so a later episode still
// writes the blob.
func (r *BlobRecorder) Commit(blobs []schemas.BlobRow, commit func(fresh []schemas.BlobRow) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fresh []schemas.BlobRow
	inBatch := SetIndex{}
	for _, bl := range blobs {
		if _, done := r.stored[bl.SHA256]; !done && inBatch.Add(bl.SHA256) {
			fresh = append(fresh, bl)
		}
	}
	if err := commit(fresh); err != nil {
		return err
	}
	for _, bl := range fresh {
		r.stored.Add(bl.SHA256)
	}
	return nil
}
