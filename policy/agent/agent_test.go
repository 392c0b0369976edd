package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/harness"
	"github.com/forkline/forkline/internal/agenttest"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/schemas"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fixSum is examples/tasks/fix-sum.yaml.
func fixSum(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "tasks", "fix-sum.yaml")
}

// collectAgent runs collect with -policy agent on provider prov.
func collectAgent(t *testing.T, prov string, sim *vllmsim.Server, opts map[string]string, repeats, replicas int, provOpts ...string) (string, *collect.Summary, string, error) {
	t.Helper()
	log := &lockedBuffer{}
	params := map[string]string{"base_url": sim.URL + "/v1", "model": "Qwen/Qwen3-8B", "max_tokens": "400"}
	for k, v := range opts {
		params[k] = v
	}
	cfg := collect.Config{
		Tasks: fixSum(t), Out: filepath.Join(t.TempDir(), "run"), Provider: prov, WorkDir: t.TempDir(),
		Replicas: replicas, Repeats: repeats, Policy: "agent", Capture: capture.DefaultPolicy(),
		PolicyOptions: params, Shards: shard.Config{Compression: "none"}, Log: log, Progress: log,
		ProviderParams: map[string]string{},
	}
	for i := 0; i+1 < len(provOpts); i += 2 {
		cfg.ProviderParams[provOpts[i]] = provOpts[i+1]
	}
	sum, err := collect.Run(context.Background(), cfg)
	return cfg.Out, sum, log.String(), err
}

func readRun(t *testing.T, dir string) ([]schemas.EpisodeRow, map[string][]schemas.StepRow, map[string]schemas.RewardRow, map[string]schemas.BlobRow) {
	t.Helper()
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	var eps []schemas.EpisodeRow
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		eps = append(eps, e)
	}
	steps := map[string][]schemas.StepRow{}
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		steps[s.EpisodeID] = append(steps[s.EpisodeID], s)
	}
	rewards := map[string]schemas.RewardRow{}
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		rewards[r.EpisodeID] = r
	}
	blobs := map[string]schemas.BlobRow{}
	for b, err := range ds.Blobs() {
		require.NoError(t, err)
		blobs[b.SHA256] = b
	}
	return eps, steps, rewards, blobs
}

// TestHarnessFixesSumLocally: each real harness fixes fix-sum in a local
// fork against a vLLM-like server with Qwen3's real template, through the
// gateway; the episode is verified (reward 1) and recorded.
func TestHarnessFixesSumLocally(t *testing.T) {
	for _, h := range harness.Installable() {
		t.Run(h, func(t *testing.T) {
			agenttest.Require(t, h)
			sim := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true, Respond: agenttest.FixSum(h)})
			out, sum, log, err := collectAgent(t, "local", sim, map[string]string{"harness": h}, 1, 1)
			require.NoError(t, err, log)
			require.Equal(t, 1, sum.Episodes, log)
			eps, steps, rewards, blobs := readRun(t, out)
			ep := eps[0]
			require.Equal(t, "done", ep.ExitReason, ep.Detail)
			rw := rewards[ep.EpisodeID]
			require.NotNil(t, rw.Value, rw.Detail)
			require.Equal(t, 1.0, *rw.Value, rw.Detail)
			require.NotNil(t, ep.Agent)
			var rec schemas.AgentRecord
			require.NoError(t, json.Unmarshal([]byte(*ep.Agent), &rec))
			t.Logf("%s: %+v", h, rec)
			st := steps[ep.EpisodeID]
			require.Len(t, st, 4)
			require.NotNil(t, st[0].ToolCalls)
			require.NotNil(t, st[0].HarnessInput)
			require.Contains(t, blobs, rec.LogSHA256)
			for _, s := range st {
				if s.HistoryCut != nil {
					t.Logf("step %d cut %s: input %.3000s", s.StepIndex, *s.HistoryCut, *s.HarnessInput)
				}
			}
			require.False(t, ep.TokenDrift, "token cut: %v", deref(ep.TokenCut))
			require.Greater(t, len(ep.ResponseIDs), 0)
			_ = strings.Contains
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// requireDocker skips (or fails under FORKLINE_REQUIRE) without an engine
// that has forkline's images.
func requireDocker(t *testing.T, image string) {
	t.Helper()
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		testenv.Missing(t, "docker", "no engine answers `docker version`: "+strings.TrimSpace(string(out)))
	}
	if err := exec.Command("docker", "image", "inspect", image).Run(); err != nil {
		component := "docker"
		if image == "forkline/debian" {
			component = "docker-debian"
		}
		testenv.Missing(t, component, "image "+image+" is missing (make images-debian builds it)")
	}
}

// imageFor is the image a harness runs in on docker: Codex is a static
// executable and runs in busybox; Claude Code's and opencode's need glibc.
func imageFor(h string) string {
	if h == harness.Codex {
		return "forkline/busybox"
	}
	return "forkline/debian"
}

// TestHarnessFixesSumOnDocker: the same in docker forks (network none),
// the harness reaching the gateway through the relay.
func TestHarnessFixesSumOnDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	var relay string
	parent := t
	for _, h := range harness.Installable() {
		t.Run(h, func(t *testing.T) {
			agenttest.Require(t, h)
			requireDocker(t, imageFor(h))
			if relay == "" {
				relay = agenttest.StaticForkline(parent)
			}
			sim := vllmsim.Start(t, vllmsim.Config{ReasoningParser: true, ToolParser: true, Respond: agenttest.FixSum(h)})
			out, sum, log, err := collectAgent(t, "docker", sim, map[string]string{"harness": h, "relay": relay}, 1, 1, "image", imageFor(h))
			require.NoError(t, err, log)
			require.Equal(t, 1, sum.Episodes, log)
			eps, steps, rewards, _ := readRun(t, out)
			ep := eps[0]
			require.Equal(t, "done", ep.ExitReason, ep.Detail)
			rw := rewards[ep.EpisodeID]
			require.NotNil(t, rw.Value, rw.Detail)
			require.Equal(t, 1.0, *rw.Value, rw.Detail)
			require.Len(t, steps[ep.EpisodeID], 4)
			require.False(t, ep.TokenDrift, "token cut: %v", deref(ep.TokenCut))
		})
	}
}
