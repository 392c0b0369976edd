package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/internal/cli"
)

// Out-of-range numeric flags are refused by name, with the range, before
// anything is replayed: -replicas 0 used to be replaced by the default and
// the replay went on (exit 0).
func TestReplayNumericFlagsAreRefused(t *testing.T) {
	in := filepath.Join(t.TempDir(), "run")
	_, err := collect.Run(context.Background(), collect.Config{Tasks: "../../examples/tasks/fix-sum.yaml", Out: in, WorkDir: t.TempDir()})
	require.NoError(t, err)
	for _, c := range []struct{ flag, value, want string }{
		{"replicas", "0", "want an integer >= 1"},
		{"replicas", "-2", "want an integer >= 1"},
		{"pixel-tolerance", "-0.1", "want a fraction from 0 to 1"},
		{"pixel-tolerance", "1.5", "want a fraction from 0 to 1"},
		{"pixel-tolerance", "NaN", "want a fraction from 0 to 1"},
	} {
		r := execute(t.Context(), "replay", "-in", in, "-workdir", t.TempDir(), "-"+c.flag, c.value)
		require.Equal(t, cli.ExitBadInput, r.code, "-%s %s: %s", c.flag, c.value, r.stderr)
		require.Contains(t, r.stderr, "replay: -"+c.flag+" "+c.value+": "+c.want)
		require.Empty(t, r.stdout, "nothing was replayed")
	}
	r := execute(t.Context(), "replay", "-in", in, "-workdir", t.TempDir(), "-replicas", "1", "-pixel-tolerance", "0.01")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
}
