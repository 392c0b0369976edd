package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
)

// planConfig is the configuration a run's manifest records (plan.config),
// read from manifest.json as JSON.
func planConfig(t *testing.T, dir string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var m struct {
		Plan struct {
			Config map[string][]string `json:"config"`
		} `json:"plan"`
	}
	require.NoError(t, json.Unmarshal(b, &m))
	return m.Plan.Config
}

// A run described by a file: the file's settings under the flags' names,
// a flag on the command line overriding one of them, the resolved
// configuration recorded in the manifest, and -resume -out DIR reading it
// back (a changed setting beside it is still refused by the resume check).
func TestConfigFileRunAndResume(t *testing.T) {
	dir := t.TempDir()
	tasks, err := filepath.Abs("../../examples/tasks/fix-sum.yaml")
	require.NoError(t, err)
	out := filepath.Join(dir, "run")
	cfg := filepath.Join(dir, "run.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("# the run\ntasks: "+tasks+"\nout: "+out+`
replicas: 2
repeats: 3
seed: 5
provider-opt:
  fork: copy
text: cap:1000
workdir: `+filepath.Join(dir, "work")+"\n"), 0o644))

	r := execute(t.Context(), "collect", "-config", cfg, "-repeats", "2", "-quiet", "-json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	rec := planConfig(t, out)
	assert.Equal(t, []string{"2"}, rec["repeats"], "the command line overrides the file")
	assert.Equal(t, []string{"5"}, rec["seed"])
	assert.Equal(t, []string{"2"}, rec["replicas"])
	assert.Equal(t, []string{"fork=copy"}, rec["provider-opt"])
	assert.Equal(t, []string{"cap:1000"}, rec["text"])
	assert.Equal(t, []string{tasks}, rec["tasks"])
	n, _ := keptIDs(t, out)
	assert.Len(t, n, 2)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		assert.EqualValues(t, 5, e.Seed)
		assert.Equal(t, "copy", e.ResetOrigin)
	}

	// -resume -out DIR alone: every other flag from the manifest.
	r = execute(t.Context(), "collect", "-resume", "-out", out, "-quiet")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "nothing to do")
	// A setting given beside it overrides the record, and the resume
	// check refuses what may not change, naming it.
	before, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	require.NoError(t, err)
	r = execute(t.Context(), "collect", "-resume", "-out", out, "-seed", "6", "-quiet")
	require.Equal(t, cli.ExitBadInput, r.code, r.stdout)
	assert.Contains(t, r.stderr, "-seed")
	after, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	require.NoError(t, err)
	assert.Equal(t, before, after, "a refused resume changes nothing")
}

// A file with a key that is no flag, a list for a one-value flag, a bad
// value, a mapping for a flag that takes none: refused with the file and
// line, the unknown key with the known ones, and nothing written.
func TestConfigFileRefusals(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", "tasks: x\nout: " + out + "\nreplicaz: 3\n", `run.yaml:3: unknown key "replicaz"; did you mean replicas? (known: a11y, api-key-env, base-url, branch,`},
		{"a list for one value", "tasks: x\nout: " + out + "\nreplicas: [1, 2]\n", "run.yaml:3: replicas takes one value, not a list"},
		{"a bad value", "tasks: x\nout: " + out + "\nreplicas: many\n", `run.yaml:3: replicas "many": not an integer`},
		{"a mapping", "tasks: x\nout: " + out + "\nseed: {a: 1}\n", "run.yaml:3: seed takes a value, not a mapping"},
		{"twice", "tasks: x\ntasks: y\n", "run.yaml:2: tasks is set twice"},
		{"not a mapping", "- tasks\n", "run.yaml:1: want a mapping of flag names to values"},
		{"the flag itself", "config: other.yaml\n", `run.yaml:1: unknown key "config"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(dir, "run.yaml")
			require.NoError(t, os.WriteFile(cfg, []byte(tc.yaml), 0o644))
			r := execute(t.Context(), "collect", "-config", cfg)
			require.Equal(t, cli.ExitBadInput, r.code)
			assert.Contains(t, r.stderr, tc.want)
			assert.NoDirExists(t, out)
		})
	}
	r := execute(t.Context(), "collect", "-config", filepath.Join(dir, "missing.yaml"))
	require.Equal(t, cli.ExitBadInput, r.code)
	assert.Contains(t, r.stderr, "missing.yaml")
}

// A key=value flag on the command line adds to the file's keys and
// overrides the same key; it does not drop the others.
func TestConfigFileKeyValuesMerge(t *testing.T) {
	dir := t.TempDir()
	tasks, err := filepath.Abs("../../examples/tasks/fix-sum.yaml")
	require.NoError(t, err)
	out := filepath.Join(dir, "run")
	cfg := filepath.Join(dir, "run.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("tasks: "+tasks+"\nout: "+out+"\nprovider-opt: {fork: overlay, pids: \"512\"}\n"), 0o644))
	r := execute(t.Context(), "collect", "-config", cfg, "-provider-opt", "fork=copy", "-quiet", "-json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Equal(t, []string{"fork=copy", "pids=512"}, planConfig(t, out)["provider-opt"])
}
