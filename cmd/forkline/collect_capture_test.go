package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"
)

func TestCaptureFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "capture.yaml")
	require.NoError(t, os.WriteFile(file, []byte("text: cap:100\npixels: none\na11y: none\ntokens: drop\n"), 0o644))
	recorded := func(out string) map[string]string {
		b, err := os.ReadFile(filepath.Join(out, "manifest.json"))
		require.NoError(t, err)
		var m struct{ Capture map[string]string }
		require.NoError(t, json.Unmarshal(b, &m))
		return m.Capture
	}
	base := []string{"-tasks", "../../examples/tasks/fix-sum.yaml", "-workdir", t.TempDir(), "-quiet", "-replicas", "1"}

	out := filepath.Join(dir, "a")
	require.Equal(t, cli.ExitOK, collectInProcess(append(base, "-out", out, "-capture", file)))
	require.Equal(t, map[string]string{"text": "cap:100", "pixels": "none", "a11y": "none", "tokens": "drop"}, recorded(out))

	out = filepath.Join(dir, "b")
	require.Equal(t, cli.ExitOK, collectInProcess(append(base, "-out", out, "-capture", file, "-pixels", "full")), "a flag given beside the file wins")
	require.Equal(t, map[string]string{"text": "cap:100", "pixels": "full", "a11y": "none", "tokens": "drop"}, recorded(out))

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("pixels: jpeg\n"), 0o644))
	require.Equal(t, cli.ExitBadInput, collectInProcess(append(base, "-out", filepath.Join(dir, "c"), "-capture", bad)))
	require.Equal(t, cli.ExitBadInput, collectInProcess(append(base, "-out", filepath.Join(dir, "d"), "-capture", filepath.Join(dir, "missing.yaml"))))
}
