package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/metrics"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/policy/openai/openaitest"
)

// secretTasks make a run that logs as much as it can about the model
// server: a task the model acts in, and one whose server fails every
// request with an error body that echoes the Authorization header.
func secretServer(t *testing.T) (*openaitest.Server, string) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{
		"act": {
			{ToolCalls: []openaitest.ToolCall{{ID: "c1", Name: "exec", Args: `{"cmd":"echo hi"}`}}, PromptIDs: []int32{1}, ResponseIDs: []int32{2}, Logprobs: []float64{-1}},
			{ToolCalls: []openaitest.ToolCall{{ID: "c2", Name: "done", Args: `{}`}}, PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{4}, Logprobs: []float64{-1}},
		},
		"storm": {{Fail: &openaitest.Failure{Status: 503, Body: "busy", EchoAuth: true}, FailTimes: -1}},
	})
	srv.Key = cliKey
	t.Setenv("CLI_TEST_KEY", cliKey)
	tasks := t.TempDir()
	for _, n := range []string{"act", "storm"} {
		require.NoError(t, os.WriteFile(filepath.Join(tasks, n+".yaml"), []byte("id: "+n+"\ninstruction: 'scenario: "+n+"'\n"), 0o644))
	}
	return srv, tasks
}

// The API key is in no log record — text or JSON, at debug — and in no
// series of the metrics, however much the run logs about its model server.
func TestTheAPIKeyIsInNoLogAndNoMetric(t *testing.T) {
	srv, tasks := secretServer(t)
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := app().Execute(t.Context(), []string{"collect", "-tasks", tasks, "-out", filepath.Join(t.TempDir(), "run"),
				"-workdir", t.TempDir(), "-policy", "openai", "-base-url", srv.URL, "-model", "m", "-api-key-env", "CLI_TEST_KEY",
				"-retries", "2", "-policy-opt", "backoff=1ms", "-policy-opt", "backoff_max=2ms",
				"-log-format", format, "-log-level", "debug", "-metrics-addr", "127.0.0.1:0"}, &stdout, &stderr)
			require.Equal(t, cli.ExitOK, code, "%s\n%s", stdout.String(), stderr.String())
			require.Contains(t, stderr.String(), "503", "the failing server is logged")
			require.Contains(t, stderr.String(), "episode kept", "debug records are there")
			require.NotContains(t, stderr.String(), cliKey)
			require.NotContains(t, stdout.String(), cliKey)
		})
	}

	// The scrape, at the end of the same kind of run.
	m := metrics.New()
	ms, err := metrics.Serve("127.0.0.1:0", m)
	require.NoError(t, err)
	defer ms.Close()
	var logs bytes.Buffer
	_, err = collect.Run(context.Background(), collect.Config{Tasks: tasks, Out: filepath.Join(t.TempDir(), "run"), WorkDir: t.TempDir(),
		Policy: "openai", PolicyOptions: map[string]string{"base_url": srv.URL, "model": "m", "api_key_env": "CLI_TEST_KEY", "retries": "1",
			"backoff": "1ms", "backoff_max": "2ms"},
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Observer: observe.Multi{m}})
	require.NoError(t, err)
	resp, err := http.Get("http://" + ms.Addr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	scrape, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(scrape), `forkline_episodes_total{exit_reason="policy_error",task="storm"} 1`)
	require.NotContains(t, string(scrape), cliKey)
	require.NotContains(t, logs.String(), cliKey)
	require.Contains(t, logs.String(), `"run_id"`)
}
