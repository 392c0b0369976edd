package collect

import (
	"context"
	"sync"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// recorder commits the run's episodes: through the run-wide blob recorder
// (each distinct blob once, in the generation of the first episode that
// references it, or an earlier one) into the writer, and into the summary.
type recorder struct {
	w     *shard.Writer
	blobs *capture.BlobRecorder
	sum   *Summary

	mu  sync.Mutex
	err error // the first commit that failed
}

func newRecorder(w *shard.Writer, sum *Summary) *recorder {
	return &recorder{w: w, blobs: capture.NewBlobRecorder(), sum: sum}
}

// loadBlobs notes the blobs a resumed run's dataset already holds.
func (r *recorder) loadBlobs(dir string) error {
	if len(r.w.Manifest().Shards) == 0 {
		return nil
	}
	ds, err := shard.Open(dir)
	if err != nil {
		return err
	}
	for b, err := range ds.Blobs() {
		if err != nil {
			return err
		}
		r.blobs.Stored(b.SHA256)
	}
	return nil
}

// commit writes the episode and counts it; firstError reports a scaffold
// loss whose error this invocation had not met yet.
func (r *recorder) commit(ctx context.Context, b shard.EpisodeBatch) (firstError bool, err error) {
	err = r.blobs.Commit(b.Blobs, func(fresh []schemas.BlobRow) error {
		b.Blobs = fresh
		return r.w.Commit(ctx, b)
	})
	if err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
		return false, err
	}
	return r.sum.addEpisode(b), nil
}

func (r *recorder) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
