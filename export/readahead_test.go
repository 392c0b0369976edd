package export

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/schemas"
)

// episodes is a reader of n episodes that fails after failAt of them
// (never when failAt < 0), counting how many it read.
func episodes(n, failAt int, read *int) func(episodeFunc) error {
	return func(fn episodeFunc) error {
		for i := range n {
			if i == failAt {
				return errors.New("damaged shard")
			}
			*read++
			if err := fn(schemas.EpisodeRow{EpisodeID: fmt.Sprint(i)}, []schemas.StepRow{{StepIndex: int32(i)}}, nil); err != nil {
				return err
			}
		}
		return nil
	}
}

// The read-ahead hands every episode over in the reader's order; an error
// of the target's stops the reader within what it may be ahead, and a
// reader's error comes back after the episodes before it.
func TestReadAhead(t *testing.T) {
	const n = 1000
	var read int
	var got []string
	err := readAhead(t.Context(), episodes(n, -1, &read), func(row schemas.EpisodeRow, steps []schemas.StepRow, _ []schemas.RewardRow) error {
		require.Equal(t, row.EpisodeID, fmt.Sprint(steps[0].StepIndex), "an episode's own steps")
		got = append(got, row.EpisodeID)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, got, n)
	for i, id := range got {
		require.Equal(t, fmt.Sprint(i), id)
	}

	read, got = 0, nil
	full := errors.New("disk full")
	err = readAhead(t.Context(), episodes(n, -1, &read), func(row schemas.EpisodeRow, _ []schemas.StepRow, _ []schemas.RewardRow) error {
		got = append(got, row.EpisodeID)
		if len(got) == 10 {
			return full
		}
		return nil
	})
	require.ErrorIs(t, err, full)
	require.Len(t, got, 10)
	require.LessOrEqual(t, read, 10+(readAheadDepth+2)*readAheadBatch, "the reader stopped once the target failed")

	read, got = 0, nil
	err = readAhead(t.Context(), episodes(n, 50, &read), func(row schemas.EpisodeRow, _ []schemas.StepRow, _ []schemas.RewardRow) error {
		got = append(got, row.EpisodeID)
		return nil
	})
	require.EqualError(t, err, "damaged shard")
	require.Len(t, got, 50, "the episodes read before the damage are written")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	read = 0
	err = readAhead(ctx, episodes(n, -1, &read), func(schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
	require.LessOrEqual(t, read, readAheadBatch, "a cancelled export reads at most a batch")
}
