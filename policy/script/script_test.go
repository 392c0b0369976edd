package script

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/runtime"
)

func TestScriptRunsOutWithoutDone(t *testing.T) {
	p := New([]runtime.Action{{Kind: runtime.ActExec, Cmd: "ls"}})
	d, err := p.Decide(context.Background(), runtime.History{})
	require.NoError(t, err)
	require.Equal(t, runtime.ActExec, d.Action.Kind)
	d, err = p.Decide(context.Background(), runtime.History{Steps: make([]runtime.Step, 1)})
	require.NoError(t, err)
	require.Equal(t, runtime.ExitNoAction, d.Stop)
}

func TestLoadFileNamesLine(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	require.NoError(t, os.WriteFile(good, []byte("# demo\n{\"kind\":\"exec\",\"cmd\":\"ls\"}\n\n{\"kind\":\"done\"}\n"), 0o644))
	acts, err := LoadFile(good)
	require.NoError(t, err)
	require.Len(t, acts, 2)

	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("{\"kind\":\"exec\",\"cmd\":\"ls\"}\n{\"kind\":\"exec\"}\n"), 0o644))
	_, err = LoadFile(bad)
	require.ErrorContains(t, err, "bad.jsonl:2")
	require.ErrorContains(t, err, `needs field "cmd"`)

	arr := filepath.Join(dir, "arr.json")
	require.NoError(t, os.WriteFile(arr, []byte(`[{"kind":"wait","ms":5},{"kind":"done","answer":"x"}]`), 0o644))
	acts, err = LoadFile(arr)
	require.NoError(t, err)
	require.Equal(t, "x", acts[1].Answer)
}
