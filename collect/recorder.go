package collect

import (
	"context"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/record"
)

// recorder commits the run's episodes through the dataset's recorder
// (record.Recorder: each distinct blob once across the run, a resumed
// run's included) and into the summary.
type recorder struct {
	*record.Recorder
	sum *Summary
}

// commit writes the episode and counts what was stored of it (its
// episode figures come with its end event).
func (r *recorder) commit(ctx context.Context, b shard.EpisodeBatch) error {
	if err := r.Commit(ctx, &b); err != nil {
		return err
	}
	r.sum.addCommitted(b)
	return nil
}

func (r *recorder) failed() error { return r.Failed() }
