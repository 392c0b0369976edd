package script

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/policy"
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

func TestRegisteredAndOpened(t *testing.T) {
	require.Contains(t, policy.Names(), Name)
	src, err := policy.Open(Name, policy.Options{})
	require.NoError(t, err)
	sol := []runtime.Action{{Kind: runtime.ActExec, Cmd: "ls"}, {Kind: runtime.ActDone}}
	p, err := src.NewPolicy(policy.Episode{ID: "e", Solution: sol})
	require.NoError(t, err)
	d, err := p.Decide(context.Background(), runtime.History{})
	require.NoError(t, err)
	require.Equal(t, "ls", d.Action.Cmd, "without a file it replays the episode's solution")

	_, err = src.NewPolicy(policy.Episode{})
	require.ErrorContains(t, err, "script: no solution to replay")
	_, err = src.NewPolicy(policy.Episode{Solution: sol, Actions: []runtime.ActionKind{runtime.ActDone}})
	require.ErrorContains(t, err, "action 1 of the solution is exec, which the task does not allow")

	_, isConv := src.(policy.Conversational)
	require.False(t, isConv, "a script talks to no model: no conversation in the manifest")

	_, err = policy.Open(Name, policy.Options{Params: map[string]string{"temperature": "1"}})
	require.ErrorContains(t, err, `has no option "temperature"`)
}

func TestOpenWithAFileReplaysIt(t *testing.T) {
	f := filepath.Join(t.TempDir(), "acts.jsonl")
	require.NoError(t, os.WriteFile(f, []byte(`{"kind":"exec","cmd":"from-file"}`+"\n"), 0o644))
	src, err := policy.Open(Name, policy.Options{ScriptFile: f})
	require.NoError(t, err)
	p, err := src.NewPolicy(policy.Episode{Solution: []runtime.Action{{Kind: runtime.ActDone}}})
	require.NoError(t, err)
	d, err := p.Decide(context.Background(), runtime.History{})
	require.NoError(t, err)
	require.Equal(t, "from-file", d.Action.Cmd, "the file wins over the solution")
	_, err = src.NewPolicy(policy.Episode{})
	require.NoError(t, err, "a file needs no solution")

	_, err = policy.Open(Name, policy.Options{ScriptFile: filepath.Join(t.TempDir(), "missing")})
	require.ErrorContains(t, err, "script:")
}
