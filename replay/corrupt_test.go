package replay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// Replay reads the recorded episodes through formats/shard: a steps shard
// that no longer matches its sha256, wherever one byte flipped, stops it
// with ErrCorrupt naming the file, before any action recorded in it is
// replayed.
func TestReplayRefusesACorruptShard(t *testing.T) {
	run := collectRun(t, "../examples/tasks/fix-sum.yaml")
	ds, err := shard.Open(run)
	require.NoError(t, err)
	steps := ds.Shards(schemas.TableSteps)[0]
	path := filepath.Join(run, steps.File)
	clean, err := os.ReadFile(path)
	require.NoError(t, err)
	for k := 1; k < 16; k++ {
		off := len(clean) * k / 16
		t.Run(fmt.Sprintf("flip@%d", off), func(t *testing.T) {
			data := append([]byte(nil), clean...)
			data[off] ^= 0x01
			require.NoError(t, os.WriteFile(path, data, 0o644))
			defer os.WriteFile(path, clean, 0o644)
			_, err := Run(context.Background(), Config{In: run, WorkDir: t.TempDir()})
			require.ErrorIs(t, err, shard.ErrCorrupt)
			assert.ErrorContains(t, err, steps.File)
		})
	}
}
