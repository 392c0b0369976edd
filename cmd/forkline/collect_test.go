package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"
)

func TestCollectExitCodes(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	wd := t.TempDir()
	base := []string{"-tasks", "../../examples/tasks/fix-sum.yaml", "-workdir", wd, "-quiet", "-replicas", "2", "-repeats", "2"}
	require.Equal(t, cli.ExitOK, collectInProcess(append(base, "-out", out)))
	_, err := os.Stat(filepath.Join(out, "manifest.json"))
	require.NoError(t, err)

	require.Equal(t, cli.ExitBadInput, collectInProcess(append(base, "-out", out)), "occupied output")
	require.Equal(t, cli.ExitOK, collectInProcess(append(base, "-out", out, "-resume")))
	require.Equal(t, cli.ExitBadInput, collectInProcess(append(base, "-out", out+"2", "-provider", "nope")))
	require.Equal(t, cli.ExitBadInput, collectInProcess(append(base, "-out", out+"3", "-reset", "sideways")))
	require.Equal(t, cli.ExitBadInput, collectInProcess(append(base, "-out", out+"4", "-text", "cap:0")))
	require.Equal(t, cli.ExitBadInput, collectInProcess(append(base, "-out", out+"5", "-provider-opt", "nokey")))
	require.Equal(t, cli.ExitBadInput, collectInProcess([]string{"-tasks", "x"}), "missing -out")
}
