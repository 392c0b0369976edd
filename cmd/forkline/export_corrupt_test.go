package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/schemas"
)

// A shard that no longer matches its sha256 is bad input (exit 2) named in
// the message, and nothing is written.
func TestCorruptInputExitsBadInput(t *testing.T) {
	run := writeRun(t)
	ds, err := shard.Open(run)
	require.NoError(t, err)
	steps := ds.Shards(schemas.TableSteps)[0]
	path := filepath.Join(run, steps.File)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[len(data)/2] ^= 1
	require.NoError(t, os.WriteFile(path, data, 0o644))

	out := filepath.Join(t.TempDir(), "out")
	r := exportArgs(t, t.Context(), "-in", run, "-to", "chat-jsonl", "-out", out)
	assert.Equal(t, cli.ExitBadInput, r.code, r.stderr)
	assert.Contains(t, r.stderr, "shard: dataset corrupt: "+path+" has sha256")
	assert.NoDirExists(t, out)
	r = exportArgs(t, t.Context(), "-in", run, "-to", "jsonl", "-out", "-")
	assert.Equal(t, cli.ExitBadInput, r.code, r.stderr)
}
