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

// commit writes the episode and counts it; firstError reports a scaffold
// loss whose error this invocation had not met yet.
func (r *recorder) commit(ctx context.Context, b shard.EpisodeBatch) (firstError bool, err error) {
	if err := r.Commit(ctx, &b); err != nil {
		return false, err
	}
	return r.sum.addEpisode(b), nil
}

func (r *recorder) failed() error { return r.Failed() }
