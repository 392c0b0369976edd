package collect

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
)

func episodeIDs(t *testing.T, dir string) []string {
	t.Helper()
	eps, _, _ := readAll(t, dir)
	var ids []string
	for id := range eps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func TestThreeShardsMergedEqualOneRun(t *testing.T) {
	base := t.TempDir()
	one := baseConfig(t, "../examples/tasks")
	one.Repeats = 5
	_, err := Run(context.Background(), one)
	require.NoError(t, err)
	want := episodeIDs(t, one.Out)
	require.Len(t, want, 15)

	var parts []string
	sizes := 0
	for i := range 3 {
		cfg := baseConfig(t, "../examples/tasks")
		cfg.Repeats = 5
		cfg.Part = Part{Index: i, Count: 3}
		cfg.Out = filepath.Join(base, fmt.Sprintf("part-%d", i))
		_, err := Run(context.Background(), cfg)
		require.NoError(t, err)
		ids := episodeIDs(t, cfg.Out)
		sizes += len(ids)
		parts = append(parts, cfg.Out)
	}
	require.Equal(t, 15, sizes, "the parts are disjoint and cover the plan")

	// Two parts only: the merge is partial and names the missing part.
	rep, err := Merge(context.Background(), filepath.Join(base, "two"), parts[:2], shard.Config{})
	require.NoError(t, err)
	require.Equal(t, shard.StatusPartial, rep.Status)
	require.Equal(t, []int{2}, rep.Missing)

	rep, err = Merge(context.Background(), filepath.Join(base, "merged"), parts, shard.Config{})
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, rep.Status)
	require.Equal(t, want, episodeIDs(t, filepath.Join(base, "merged")))
	vr, err := shard.Verify(filepath.Join(base, "merged"))
	require.NoError(t, err)
	require.True(t, vr.OK())

	// Overlap is refused: a part given twice, or the whole run with a part.
	_, err = Merge(context.Background(), filepath.Join(base, "dup"), []string{one.Out, parts[0]}, shard.Config{})
	require.ErrorIs(t, err, ErrMerge)
	_, err = Merge(context.Background(), filepath.Join(base, "dup2"), []string{parts[1], parts[1]}, shard.Config{})
	require.ErrorIs(t, err, ErrMerge)

	// Incompatible plans are refused.
	other := baseConfig(t, "../examples/tasks")
	other.Repeats = 2
	other.Part = Part{Index: 0, Count: 3}
	_, err = Run(context.Background(), other)
	require.NoError(t, err)
	_, err = Merge(context.Background(), filepath.Join(base, "bad"), []string{other.Out, parts[1]}, shard.Config{})
	require.ErrorIs(t, err, ErrMerge)
	require.ErrorContains(t, err, "5 repeats")
}

func TestPartFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	p, err := PartFromEnv(4, env(map[string]string{"JOB_COMPLETION_INDEX": "2"}))
	require.NoError(t, err)
	require.Equal(t, Part{2, 4}, p)
	p, err = PartFromEnv(4, env(map[string]string{"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "4"}))
	require.NoError(t, err)
	require.Equal(t, Part{1, 4}, p)
	_, err = PartFromEnv(4, env(map[string]string{"JOB_COMPLETION_INDEX": "4"}))
	require.ErrorContains(t, err, "outside 0..3")
	_, err = PartFromEnv(4, env(nil))
	require.ErrorContains(t, err, "JOB_COMPLETION_INDEX")
	_, err = ParsePart("3/3")
	require.Error(t, err)
}
