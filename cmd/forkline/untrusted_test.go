package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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

// The loser of two collects into one -out is told that another is writing
// there — whatever the winner has written yet — and changes nothing.
// Before the fix it was told the directory "holds no forkline run" (the
// winner had made it, not yet its manifest) or "holds another run (use
// --resume ...)", neither true.
func TestTheLoserOfTwoCollectsIsToldAnotherIsWriting(t *testing.T) {
	tasks := exampleTasks(t)
	t.Run("made, no manifest yet", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "run")
		require.NoError(t, os.MkdirAll(filepath.Join(out, "steps"), 0o755))
		d, err := os.Open(out)
		require.NoError(t, err)
		defer d.Close()
		require.NoError(t, syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), "the winner's lock")
		before := treeHash(t, out)
		r := execute(t.Context(), "collect", "-tasks", tasks, "-out", out, "-workdir", t.TempDir(), "-quiet")
		require.Equal(t, cli.ExitBadInput, r.code, r.stderr)
		require.Contains(t, r.stderr, "another forkline collect or serve is writing it now")
		require.NotContains(t, r.stderr, "holds no forkline run")
		require.Equal(t, before, treeHash(t, out))
	})
	t.Run("two processes", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "run")
		slow := filepath.Join(dir, "slow.yaml")
		require.NoError(t, os.WriteFile(slow, []byte("id: slow\ninstruction: wait\nsolution:\n  - {kind: exec, cmd: sleep 3}\n  - {kind: done}\n"), 0o644))
		winner := collectProcess("-tasks", slow, "-out", out, "-workdir", t.TempDir(), "-quiet")
		require.NoError(t, winner.Start())
		t.Cleanup(func() { winner.Process.Kill() })
		require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(out, "manifest.json")); return err == nil }, time.Minute, 10*time.Millisecond)
		for _, extra := range [][]string{nil, {"-resume"}, {"-force"}} {
			r := execute(t.Context(), append([]string{"collect", "-tasks", slow, "-out", out, "-workdir", t.TempDir(), "-quiet"}, extra...)...)
			require.Equal(t, cli.ExitBadInput, r.code, "%v: %s", extra, r.stderr)
			require.Contains(t, r.stderr, "in use by another writer", "%v", extra)
			require.NotContains(t, r.stderr, "holds another run", "%v", extra)
		}
		require.NoError(t, winner.Wait())
	})
}
