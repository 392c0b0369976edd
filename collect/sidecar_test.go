package collect

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/task"
)

// A task whose files make its spec far larger than what the manifest keeps
// inline: the specs go to a tasks sidecar, and every collector path that
// reads them (resume compatibility, merge) sees the same specs.
func TestLargeTaskSpecsResumeAndMerge(t *testing.T) {
	var big strings.Builder
	for i := range 8000 {
		fmt.Fprintf(&big, "    row %d of a large fixture file\n", i)
	}
	spec := filepath.Join(t.TempDir(), "big.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(`id: big
instruction: look at the data
files:
  data.txt: |
`+big.String()+`solution:
  - {kind: exec, cmd: wc -l data.txt}
  - {kind: done}
`), 0o644))

	base := t.TempDir()
	var parts []string
	for i := range 2 {
		cfg := baseConfig(t, spec)
		cfg.Repeats = 4
		cfg.Part = Part{Index: i, Count: 2}
		cfg.Out = filepath.Join(base, fmt.Sprintf("part-%d", i))
		_, err := Run(context.Background(), cfg)
		require.NoError(t, err)
		m, err := shard.Open(cfg.Out)
		require.NoError(t, err)
		require.NotNil(t, m.Manifest().TasksFile, "the specs are in a sidecar")
		hashes, err := task.RecordHashes(m.Manifest().Tasks)
		require.NoError(t, err)
		require.Contains(t, hashes, "big")

		// Resume reads the specs back to check the plan is the same.
		cfg.Resume = true
		sum, err := Run(context.Background(), cfg)
		require.NoError(t, err)
		assert.Equal(t, 0, sum.Report().Ran, "a resume of a complete part runs nothing")
		assert.True(t, sum.Report().NothingToDo)
		parts = append(parts, cfg.Out)
	}
	merged := filepath.Join(base, "merged")
	rep, err := Merge(context.Background(), merged, parts, shard.Config{})
	require.NoError(t, err)
	assert.Equal(t, shard.StatusComplete, rep.Status)
	ds, err := shard.Open(merged)
	require.NoError(t, err)
	require.NotNil(t, ds.Manifest().TasksFile)
	orig, err := shard.Open(parts[0])
	require.NoError(t, err)
	assert.Equal(t, orig.Manifest().Tasks, ds.Manifest().Tasks)
	vr, err := shard.Verify(merged)
	require.NoError(t, err)
	assert.True(t, vr.OK(), "%v", vr.Problems)
	assert.Len(t, episodeIDs(t, merged), 4)
}
