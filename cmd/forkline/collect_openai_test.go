package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/policy/openai/openaitest"
)

const cliKey = "sk-forkline-cli-8d2e4b6f1a3c5e7d9b0f"

// captureOutput runs f with stdout and stderr sent to files and returns
// what was written to them.
func captureOutput(t *testing.T, f func()) []byte {
	t.Helper()
	tmp, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = tmp, tmp
	defer func() { os.Stdout, os.Stderr = oldOut, oldErr }()
	f()
	require.NoError(t, tmp.Close())
	b, err := os.ReadFile(tmp.Name())
	require.NoError(t, err)
	return b
}

func TestCollectOpenAIFlags(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{
		"act": {
			{ToolCalls: []openaitest.ToolCall{{ID: "c1", Name: "exec", Args: `{"cmd":"echo hi"}`}},
				PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3}, Logprobs: []float64{-0.5}},
			{ToolCalls: []openaitest.ToolCall{{ID: "c2", Name: "done", Args: `{}`}},
				PromptIDs: []int32{1, 2, 3, 4}, ResponseIDs: []int32{5}, Logprobs: []float64{-0.25}},
		},
		"storm": {{Fail: &openaitest.Failure{Status: 503, Body: "busy", EchoAuth: true}, FailTimes: -1}},
		"prose": {{Content: "no idea", PromptIDs: []int32{1}, ResponseIDs: []int32{2}, Logprobs: []float64{-1}}},
	})
	srv.Key = cliKey
	t.Setenv("CLI_TEST_KEY", cliKey)
	tasks := t.TempDir()
	for _, n := range []string{"act", "storm", "prose"} {
		require.NoError(t, os.WriteFile(filepath.Join(tasks, n+".yaml"), []byte("id: "+n+"\ninstruction: 'scenario: "+n+"'\n"), 0o644))
	}
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"-tasks", tasks, "-out", out, "-workdir", t.TempDir(), "-replicas", "2",
		"-policy", "openai", "-base-url", srv.URL, "-model", "m", "-api-key-env", "CLI_TEST_KEY",
		"-temperature", "0.5", "-max-tokens", "64", "-request-timeout", "5s", "-retries", "1",
		"-policy-opt", "backoff=1ms", "-policy-opt", "backoff_max=2ms"}
	var code int
	printed := captureOutput(t, func() { code = collectInProcess(args) })
	require.Equal(t, cli.ExitOK, code, "%s", printed)

	ds, err := shard.Open(out)
	require.NoError(t, err)
	exits := map[string]string{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		exits[e.TaskID] = e.ExitReason
		if e.TaskID == "act" {
			require.Equal(t, []int32{3, 4, 5}, e.ResponseIDs)
			require.Equal(t, []int32{1, 0, 1}, e.ResponseMask)
			require.Equal(t, []float32{-0.5, 0, -0.25}, e.ResponseLogprobs)
		}
	}
	require.Equal(t, map[string]string{"act": "done", "storm": "policy_error", "prose": "no_action"}, exits)
	require.Len(t, srv.Requests("storm"), 2, "-retries 1")
	body := srv.Requests("act")[0].Body
	require.Equal(t, "m", body["model"])
	require.EqualValues(t, 0.5, body["temperature"])
	require.EqualValues(t, 64, body["max_tokens"])
	var pol struct{ Options map[string]string }
	require.NoError(t, json.Unmarshal(ds.Manifest().Policy, &pol))
	require.Equal(t, map[string]string{"base_url": srv.URL, "model": "m", "api_key_env": "CLI_TEST_KEY", "temperature": "0.5",
		"max_tokens": "64", "timeout": "5s", "retries": "1", "backoff": "1ms", "backoff_max": "2ms"}, pol.Options,
		"the flags are recorded as the options they stand for")
	require.Contains(t, string(printed), "503 Service Unavailable", "retries are logged")

	// The key is in no file of the run and not in what the command printed.
	require.NotContains(t, string(printed), cliKey)
	require.NoError(t, filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(cliKey)) {
			t.Errorf("the API key leaked into %s", p)
		}
		return err
	}))
}

func TestCollectOpenAIFlagsBadInput(t *testing.T) {
	base := []string{"-tasks", "../../examples/tasks/fix-sum.yaml", "-workdir", t.TempDir(), "-quiet"}
	out := filepath.Join(t.TempDir(), "run")
	cases := map[string][]string{
		"flag without the policy": {"-base-url", "http://127.0.0.1:1/v1"},
		"no base url":             {"-policy", "openai"},
		"bad temperature":         {"-policy", "openai", "-base-url", "http://127.0.0.1:1/v1", "-temperature", "9"},
		"flag and option disagree": {"-policy", "openai", "-base-url", "http://127.0.0.1:1/v1", "-model", "a",
			"-policy-opt", "model=b"},
		"unknown option":      {"-policy", "openai", "-base-url", "http://127.0.0.1:1/v1", "-policy-opt", "temprature=1"},
		"credentials in url":  {"-policy", "openai", "-base-url", "http://u:" + cliKey + "@127.0.0.1:1/v1"},
		"key variable unset":  {"-policy", "openai", "-base-url", "http://127.0.0.1:1/v1", "-api-key-env", "SURELY_UNSET_FORKLINE_VAR"},
		"bad request timeout": {"-policy", "openai", "-base-url", "http://127.0.0.1:1/v1", "-request-timeout", "-1s"},
	}
	for name, extra := range cases {
		t.Run(name, func(t *testing.T) {
			var code int
			printed := captureOutput(t, func() { code = collectInProcess(append(append(base, "-out", out), extra...)) })
			require.Equal(t, cli.ExitBadInput, code, "%s", printed)
			require.NotContains(t, string(printed), cliKey)
			_, err := os.Stat(filepath.Join(out, "manifest.json"))
			require.True(t, os.IsNotExist(err))
		})
	}
}
