package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"
)

// A Harbor task folder whose tests/ holds a symlink to a host file is
// refused by collect and serve, naming the file, before anything runs:
// no dataset, no sandbox, and the host file's content in no output.
// Before the fix, collect exited 0 with the host's /etc/shadow in the
// rewards shard and the manifest (the verifier printed it).
func TestHarborSymlinkToAHostFileIsRefused(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "shadow")
	require.NoError(t, os.WriteFile(secret, []byte("root:HOST-SECRET:20228:0:99999:7:::\n"), 0o600))
	dir := filepath.Join(t.TempDir(), "leaky")
	for name, content := range map[string]string{
		"task.toml":         "[environment]\ndocker_image = \"forkline/debian\"\n",
		"instruction.md":    "Say done.",
		"tests/test.sh":     "cat /tests/shadow; echo 1 > /logs/verifier/reward.txt\n",
		"solution/solve.sh": "true\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "tests", "shadow")))

	out := filepath.Join(t.TempDir(), "run")
	r := execute(t.Context(), "collect", "-tasks", dir, "-out", out)
	require.Equal(t, cli.ExitBadInput, r.code, r.stderr)
	require.Contains(t, r.stderr, "tests/shadow leads outside the task's folder (a symlink, to "+secret+")")
	require.NotContains(t, r.stdout+r.stderr, "HOST-SECRET")
	_, err := os.Stat(out)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was written")

	r = execute(t.Context(), "serve", "-tasks", dir, "-addr", "127.0.0.1:0")
	require.Equal(t, cli.ExitBadInput, r.code, r.stderr)
	require.Contains(t, r.stderr, "tests/shadow leads outside the task's folder")
	require.NotContains(t, r.stdout+r.stderr, "HOST-SECRET")
}
