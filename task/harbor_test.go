package task

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/runtime"
)

// copyTree copies the testdata folder src to a temporary directory.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	require.NoError(t, filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, _ := d.Info()
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		return os.WriteFile(target, data, info.Mode().Perm())
	}))
	return dst
}

func TestLoadHarborSuite(t *testing.T) {
	specs, err := Load("testdata/harbor")
	require.NoError(t, err)
	require.Equal(t, []string{"fix-greeting", "sum-column", "word-stats"}, []string{specs[0].ID, specs[1].ID, specs[2].ID}, "ids are the folder names, sorted")

	fix := specs[0]
	require.Equal(t, "1.4", fix.Harbor.SchemaVersion)
	require.Len(t, fix.Harbor.Digest, 64)
	require.Contains(t, fix.Instruction, "/app/greet.sh")
	require.Empty(t, fix.Image)
	require.NotNil(t, fix.Build, "environment/Dockerfile is built")
	abs, _ := filepath.Abs("testdata/harbor/fix-greeting/environment")
	require.Equal(t, abs, fix.Build.Context)
	require.Equal(t, Duration(300*time.Second), fix.Build.Timeout)
	require.Equal(t, &Network{Episode: NetworkNone}, fix.Network)
	require.Equal(t, Limits{MaxSteps: HarborMaxSteps, ActionTimeout: Duration(2 * time.Minute), EpisodeTimeout: Duration(2 * time.Minute), CPUs: 1, MemoryMB: 512}, fix.Limits)
	require.JSONEq(t, `{"category":"debugging","difficulty":"easy","task":{"description":"Fix a shell script that greets the wrong way.","keywords":["shell","file-fix"],"name":"forkline/fix-greeting"}}`, string(fix.Metadata))

	v := fix.Verify
	require.Equal(t, HarborTestCommand, v.Cmd)
	require.Equal(t, RewardHarbor, v.Reward)
	require.Equal(t, int64(60_000), v.TimeoutMS)
	require.Equal(t, HarborTestsDir, v.Dir)
	require.Equal(t, []string{"/tests", "/logs/verifier"}, v.Clear)
	require.Contains(t, v.Files["test.sh"], "/logs/verifier/reward.txt")
	require.Equal(t, []string{"test.sh"}, v.Executable)

	// The oracle: solution/ uploaded to /solution, then bash solve.sh.
	require.Len(t, fix.Solution, 3)
	require.Contains(t, fix.Solution[0].Cmd, "base64 -d >> '/solution/solve.sh'")
	require.Contains(t, fix.Solution[0].Cmd, "chmod 0755 '/solution/solve.sh'")
	require.Equal(t, runtime.Action{Kind: runtime.ActExec, Cmd: "bash /solution/solve.sh", TimeoutMS: 120_000}, fix.Solution[1])
	require.Equal(t, runtime.ActDone, fix.Solution[2].Kind)

	sum := specs[1]
	require.Equal(t, "1.0", sum.Harbor.SchemaVersion, "the old spelling version is read")
	require.Equal(t, int64(512), sum.Limits.MemoryMB, `the old memory = "512M"`)
	require.Equal(t, &Network{Episode: NetworkNone}, sum.Network, "allow_internet = false")
	require.Equal(t, "547\n", sum.Verify.Files["expected_total.txt"], "fixtures come with the tests")
	require.Equal(t, Duration(DefaultEpisodeTimeout), Duration(10*time.Minute))

	stats := specs[2]
	require.Nil(t, stats.Network, "no network setting: the provider's default, none")
	require.Equal(t, int64(1024), stats.Limits.StorageMB)
	require.Equal(t, sum.Build.ContextDigest, stats.Build.ContextDigest, "identical environments digest alike (one build)")
	require.NotEqual(t, sum.Hash(), stats.Hash())

	// Moving the suite changes nothing; editing any file of a task changes
	// its hash (and so its episode ids).
	moved := copyTree(t, "testdata/harbor")
	again, err := Load(moved)
	require.NoError(t, err)
	for i := range specs {
		require.Equal(t, specs[i].Hash(), again[i].Hash(), "%s moved", specs[i].ID)
	}
	for _, edit := range []string{"tests/test.sh", "environment/greet.sh", "instruction.md", "solution/solve.sh"} {
		dir := copyTree(t, "testdata/harbor/fix-greeting")
		f := filepath.Join(dir, edit)
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(f, append(data, '\n'), 0o755))
		edited, err := LoadHarbor(dir)
		require.NoError(t, err)
		require.NotEqual(t, fix.Hash(), edited.Hash(), "editing %s", edit)
	}
	dir := copyTree(t, "testdata/harbor/fix-greeting")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "NOTES.md"), []byte("a file no section reads"), 0o644))
	edited, err := LoadHarbor(dir)
	require.NoError(t, err)
	require.NotEqual(t, fix.Hash(), edited.Hash(), "every file of the folder is covered")

	// A task folder given alone, and its task.toml.
	one, err := Load("testdata/harbor/word-stats")
	require.NoError(t, err)
	require.Equal(t, stats.Hash(), one[0].Hash())
	one, err = Load("testdata/harbor/word-stats/task.toml")
	require.NoError(t, err)
	require.Equal(t, stats.Hash(), one[0].Hash())

	// The records read back unchanged, hashes checked.
	raw, err := EncodeRecords(specs)
	require.NoError(t, err)
	back, err := DecodeRecords(raw)
	require.NoError(t, err)
	require.Equal(t, specs[2].Hash(), back["word-stats"].Hash())
	require.Equal(t, specs[0].Build.Context, back["fix-greeting"].Build.Context, "where the context is, is recorded")
}

func TestHarborRefusals(t *testing.T) {
	_, err := Load("testdata/harbor-refused/uses-mcp")
	require.ErrorIs(t, err, ErrSpec)
	require.ErrorContains(t, err, "testdata/harbor-refused/uses-mcp/task.toml:8:1: field environment.mcp_servers: MCP servers for the agent are not supported")

	write := func(t *testing.T, toml string, files map[string]string) string {
		dir := filepath.Join(t.TempDir(), "a-task")
		base := map[string]string{"task.toml": toml, "instruction.md": "do it", "tests/test.sh": "exit 0", "environment/Dockerfile": "FROM forkline/debian\n"}
		for k, v := range files {
			base[k] = v
		}
		for name, content := range base {
			if content == "" && name != "task.toml" {
				continue // leave the file out
			}
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
		}
		return dir
	}
	for _, c := range []struct {
		name, toml string
		files      map[string]string
		want       []string
	}{
		{"unknown key", "[agent]\ninstall_timeout = 3\n", nil, []string{"task.toml:2:1: field agent.install_timeout: unknown key (known: allowed_hosts, network_mode, timeout_sec, user)"}},
		{"unknown top-level key", "schema_version = \"1.4\"\nsteps_mode = \"x\"\n", nil, []string{"task.toml:2:1: field steps_mode: unknown key"}},
		{"a newer schema", "schema_version = \"1.9\"\n", nil, []string{"field schema_version", `schema "1.9" is not one this version of forkline reads (known: 1.0, 1.1, 1.2, 1.3, 1.4)`}},
		{"both spellings", "version = \"1.0\"\nschema_version = \"1.1\"\n", nil, []string{"both version (its old spelling) and schema_version"}},
		{"gpus", "[environment]\ngpus = 2\n", nil, []string{"task.toml:2:1: field environment.gpus: 2 GPUs asked for"}},
		{"another user", "[agent]\nuser = \"agent\"\n", nil, []string{"field agent.user", "running commands as another user is not supported"}},
		{"root is fine", "[agent]\nuser = \"root\"\n[verifier]\nuser = 0\n", nil, nil},
		{"allowlist", "[environment]\nnetwork_mode = \"allowlist\"\n", nil, []string{"allowlist: host allowlists are not supported"}},
		{"phase network", "[environment]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"public\"\n", nil, []string{"field verifier.network_mode", "cannot switch it between phases"}},
		{"separate verifier", "[verifier]\nenvironment_mode = \"separate\"\n", nil, []string{"a separate verifier environment is not supported"}},
		{"collect hooks", "[[verifier.collect]]\npath = \"/x\"\n", nil, []string{"field verifier.collect: collect hooks are not supported"}},
		{"compose with main alone", "", map[string]string{"environment/docker-compose.yaml": "services: {}\n"}, []string{"environment/docker-compose.yaml:1:1: field services: no service other than main"}},
		{"no image", "", map[string]string{"environment/Dockerfile": ""}, []string{"no environment/Dockerfile and no [environment] docker_image"}},
		{"no test.sh", "", map[string]string{"tests/test.sh": ""}, []string{"no tests/test.sh"}},
		{"no instruction", "", map[string]string{"instruction.md": " \n"}, []string{"instruction.md: is empty"}},
		{"multi-step", "", map[string]string{"steps/one/instruction.md": "x"}, []string{"multi-step tasks (a steps/ folder) are not supported yet"}},
		{"bad memory", "[environment]\nmemory = \"lots\"\n", nil, []string{"field environment.memory", `"lots" is not a size such as 2G or 512M`}},
		{"a timeout out of range", "[agent]\ntimeout_sec = 0\n", nil, []string{"field agent.timeout_sec: 0 seconds is out of range"}},
		{"a solution env from the environment", "[solution]\nenv = { K = \"${HOME}\" }\n", nil, []string{"field solution.env.K", "recorded in the dataset"}},
		{"bad syntax", "[agent\n", nil, []string{"task.toml:1:"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(write(t, c.toml, c.files))
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrSpec)
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// fakeShell answers the verifier's commands: the test command, then cat of
// the reward files it holds.
type fakeShell struct{ files map[string]string }

func (f fakeShell) Act(_ context.Context, a runtime.Action) (runtime.Observation, error) {
	if path, ok := strings.CutPrefix(a.Cmd, "cat -- "); ok {
		path = strings.Trim(path, "'")
		if c, ok := f.files[path]; ok {
			return runtime.Observation{Output: []byte(c)}, nil
		}
		return runtime.Observation{Output: []byte("cat: " + path + ": No such file or directory"), ExitCode: 1, Error: true}, nil
	}
	return runtime.Observation{Output: []byte("ran " + a.Cmd)}, nil
}
func (fakeShell) Close(context.Context) error { return nil }

func TestHarborRewardFiles(t *testing.T) {
	v := Verify{Cmd: HarborTestCommand, Reward: RewardHarbor}
	f := func(x float64) *float64 { return &x }
	for _, c := range []struct {
		name    string
		files   map[string]string
		value   *float64
		metrics []Metric
		detail  string
	}{
		{"reward.txt", map[string]string{"/logs/verifier/reward.txt": " 0.5\n"}, f(0.5), nil, "reward.txt"},
		{"reward.json wins", map[string]string{"/logs/verifier/reward.json": `{"reward": 0.75, "tests_passed": 3, "ok": true}`, "/logs/verifier/reward.txt": "0"}, f(0.75),
			[]Metric{{Name: "ok", Value: f(1)}, {Name: "tests_passed", Value: f(3)}}, "reward.json"},
		{"no reward key: every key a metric", map[string]string{"/logs/verifier/reward.json": `{"a": 1, "b": 0}`}, nil,
			[]Metric{{Name: "a", Value: f(1)}, {Name: "b", Value: f(0)}}, `reward.json has no "reward" key`},
		{"a metric that is not a number", map[string]string{"/logs/verifier/reward.json": `{"reward": 1, "note": "fine"}`}, f(1),
			[]Metric{{Name: "note", Detail: `is "fine", not a number`}}, "reward.json"},
		{"not JSON", map[string]string{"/logs/verifier/reward.json": `reward=1`}, nil, nil, "reward.json is not a JSON object"},
		{"reward.txt not a number", map[string]string{"/logs/verifier/reward.txt": "passed"}, nil, nil, `reward.txt holds "passed", not a finite number`},
		{"neither", nil, nil, nil, "test.sh wrote neither /logs/verifier/reward.json nor reward.txt"},
		{"a verify key is not a metric", map[string]string{"/logs/verifier/reward.json": `{"reward": 1, "verify": 0}`}, f(1), nil, `key "verify" is not kept`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := v.Run(t.Context(), fakeShell{c.files})
			require.NoError(t, err)
			require.Equal(t, c.value, r.Value)
			require.Equal(t, c.metrics, r.Metrics)
			require.Contains(t, r.Detail, c.detail)
			require.Contains(t, r.Detail, "ran bash /tests/test.sh", "the test's output is kept")
		})
	}
}

func TestVerifyEnvFromTheEnvironment(t *testing.T) {
	t.Setenv("FORKLINE_TEST_SECRET", "s3cr3t")
	v := Verify{Cmd: "bash /tests/test.sh", Env: map[string]string{"KEY": "${FORKLINE_TEST_SECRET}", "MODE": "${FORKLINE_UNSET_VAR:-fast}", "PLAIN": "it's $x"}}
	r, err := v.Run(t.Context(), fakeShell{})
	require.NoError(t, err)
	require.Equal(t, `ran export KEY='s3cr3t' MODE='fast' PLAIN='it'\''s $x'; bash /tests/test.sh`, r.Detail)
	v.Env = map[string]string{"KEY": "${FORKLINE_UNSET_VAR}"}
	_, err = v.Run(t.Context(), fakeShell{})
	require.ErrorIs(t, err, ErrEnvUnset)
	require.ErrorContains(t, err, "KEY=${FORKLINE_UNSET_VAR}")
}

func TestUploadActions(t *testing.T) {
	big := make([]byte, 200<<10)
	for i := range big {
		big[i] = byte(i)
	}
	acts := UploadActions("/solution", map[string][]byte{"solve.sh": []byte("echo hi\n"), "data/big.bin": big, "empty": nil}, []string{"solve.sh"})
	require.GreaterOrEqual(t, len(acts), 2, "a large file takes several commands")
	for _, a := range acts {
		require.Less(t, len(a.Cmd), MaxArgBytes, "every command fits one execve argument")
		require.NoError(t, a.Validate())
	}
	require.Contains(t, acts[0].Cmd, "mkdir -p -- '/solution/data' && : > '/solution/data/big.bin'")
	require.Contains(t, acts[len(acts)-1].Cmd, ": > '/solution/empty'")
}
