package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/schemas"
)

// agentCollect runs forkline collect -policy agent on fix-sum with args
// after the common ones; it returns the exit code, the output and -out.
func agentCollect(t *testing.T, baseURL string, env []string, args ...string) (int, string, string) {
	return agentCollectTask(t, "../../examples/tasks/fix-sum.yaml", baseURL, env, args...)
}

// agentCollectTask is agentCollect on the tasks in tasks.
func agentCollectTask(t *testing.T, tasks, baseURL string, env []string, args ...string) (int, string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run")
	cmd := collectProcess(append([]string{"-tasks", tasks, "-out", out, "-workdir", t.TempDir(),
		"-policy", "agent", "-base-url", baseURL, "-quiet"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	return exitCode(cmd.Run()), b.String(), out
}

// oneEpisode reads the only episode of a run and its agent record.
func oneEpisode(t *testing.T, out string) (schemas.EpisodeRow, schemas.AgentRecord, map[string]schemas.BlobRow) {
	t.Helper()
	ds, err := shard.Open(out)
	require.NoError(t, err)
	var eps []schemas.EpisodeRow
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		eps = append(eps, e)
	}
	require.Len(t, eps, 1)
	var rec schemas.AgentRecord
	require.NotNil(t, eps[0].Agent)
	require.NoError(t, json.Unmarshal([]byte(*eps[0].Agent), &rec))
	blobs := map[string]schemas.BlobRow{}
	for b, err := range ds.Blobs() {
		require.NoError(t, err)
		blobs[b.SHA256] = b
	}
	return eps[0], rec, blobs
}

// TestAgentRefusesBadInput: what cannot run is refused before anything is
// written, naming what to do.
func TestAgentRefusesBadInput(t *testing.T) {
	sim := vllmsim.Start(t, vllmsim.Config{})
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want []string
	}{
		{"unknown harness", nil, []string{"-policy-opt", "harness=nope"}, cli.ExitBadInput,
			[]string{`unknown harness "nope"`, "known: claude-code, codex, command, opencode"}},
		{"no harness", nil, nil, cli.ExitBadInput, []string{"harness=NAME"}},
		{"not installed", []string{"FORKLINE_AGENTS_DIR=" + t.TempDir()}, []string{"-policy-opt", "harness=codex"}, cli.ExitBadInput,
			[]string{"codex 0.171.0", "is not in", "install it with: forkline images -agent codex"}},
		{"command without cmd", nil, []string{"-policy-opt", "harness=command"}, cli.ExitBadInput, []string{"harness=command needs -policy-opt cmd="}},
		{"an option that does not apply", nil, []string{"-policy-opt", "harness=command", "-policy-opt", "cmd=true", "-policy-opt", "tool_mode=text"},
			cli.ExitBadInput, []string{"option tool_mode does not apply to -policy agent"}},
		{"branching", nil, []string{"-policy-opt", "harness=command", "-policy-opt", "cmd=true", "-branch", "at=1,width=2"},
			cli.ExitBadInput, []string{"cannot branch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, printed, out := agentCollect(t, sim.URL+"/v1", tc.env, tc.args...)
			require.Equal(t, tc.code, code, printed)
			for _, w := range tc.want {
				require.Contains(t, printed, w)
			}
			_, err := os.Stat(out)
			require.True(t, os.IsNotExist(err), "a refused run wrote %s", out)
		})
	}
}

// TestAgentServerDownIsUnavailable: a model server that does not answer
// stops the run before anything is spent (exit 4).
func TestAgentServerDownIsUnavailable(t *testing.T) {
	code, printed, out := agentCollect(t, "http://127.0.0.1:9/v1", nil, "-policy-opt", "harness=command", "-policy-opt", "cmd=true")
	require.Equal(t, cli.ExitUnavailable, code, printed)
	require.Contains(t, printed, "nothing was collected")
	_, err := os.Stat(out)
	require.True(t, os.IsNotExist(err))
}

// TestAgentHarnessFailures: a harness that exits at once, one that hangs
// and one that floods its output are each their episode's outcome, kept:
// a policy error with its status and its last words, a timeout with the
// harness killed, tree and all, and a log capped as a command's output is.
func TestAgentHarnessFailures(t *testing.T) {
	sim := vllmsim.Start(t, vllmsim.Config{})
	t.Run("exits at once", func(t *testing.T) {
		code, printed, out := agentCollect(t, sim.URL+"/v1", nil, "-policy-opt", "harness=command", "-policy-opt", "cmd=echo giving up >&2; exit 3")
		require.Equal(t, cli.ExitLosses, code, "every episode a scaffold loss: %s", printed)
		ep, rec, blobs := oneEpisode(t, out)
		require.Equal(t, "policy_error", ep.ExitReason)
		require.Contains(t, ep.Detail, "command exited with status 3")
		require.Contains(t, ep.Detail, "giving up")
		require.Equal(t, 3, rec.ExitCode)
		require.Contains(t, string(blobs[rec.LogSHA256].Data), "giving up")
	})
	t.Run("hangs", func(t *testing.T) {
		task := filepath.Join(t.TempDir(), "hang.yaml")
		require.NoError(t, os.WriteFile(task, []byte("id: hang\ninstruction: Wait.\nlimits: {episode_timeout: 3s}\n"), 0o644))
		code, printed, out := agentCollectTask(t, task, sim.URL+"/v1", nil, "-policy-opt", "harness=command", "-policy-opt", "cmd=sleep 6011")
		require.Equal(t, cli.ExitOK, code, printed)
		ep, rec, _ := oneEpisode(t, out)
		require.Equal(t, "timeout", ep.ExitReason, ep.Detail)
		require.Contains(t, ep.Detail, "killed at the episode's time limit (3s)")
		require.Equal(t, -1, rec.ExitCode)
		left, _ := exec.Command("pgrep", "-f", "sleep 6011").Output()
		require.Empty(t, strings.TrimSpace(string(left)), "the harness's process outlived its episode")
	})
	t.Run("floods its output", func(t *testing.T) {
		code, printed, out := agentCollect(t, sim.URL+"/v1", nil, "-policy-opt", "harness=command",
			"-policy-opt", `cmd=head -c 60000000 /dev/zero | tr "\0" x; echo; echo the end`)
		require.Equal(t, cli.ExitOK, code, printed)
		ep, rec, blobs := oneEpisode(t, out)
		require.Equal(t, "done", ep.ExitReason, ep.Detail)
		require.GreaterOrEqual(t, rec.LogBytes, int64(60_000_000), "the log's size before the cap")
		log := blobs[rec.LogSHA256]
		require.LessOrEqual(t, len(log.Data), providers.DefaultOutputCap+4096, "the log is capped")
		require.Contains(t, string(log.Data), "the end", "the cap keeps the tail")
	})
}
