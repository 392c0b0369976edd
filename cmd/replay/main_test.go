package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
)

// Out-of-range numeric flags are refused by name, with the range, before
// anything is replayed: -replicas 0 used to be replaced by the default and
// the replay went on (exit 0).
func TestNumericFlagsAreRefused(t *testing.T) {
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
		var stdout, stderr bytes.Buffer
		code := run([]string{"-in", in, "-workdir", t.TempDir(), "-" + c.flag, c.value}, &stdout, &stderr)
		require.Equal(t, exitError, code, "-%s %s: %s", c.flag, c.value, stderr.String())
		require.Contains(t, stderr.String(), "replay: -"+c.flag+" "+c.value+": "+c.want)
		require.Empty(t, stdout.String(), "nothing was replayed")
	}
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitIdentical, run([]string{"-in", in, "-workdir", t.TempDir(), "-replicas", "1", "-pixel-tolerance", "0.01"}, &stdout, &stderr), stderr.String())
}
