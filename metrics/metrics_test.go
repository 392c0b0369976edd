package metrics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/metrics"
	"github.com/forkline/forkline/metrics/metricstest"
	"github.com/forkline/forkline/observe"
)

// One event of each kind, as a run reports them, and the scrape that
// follows: every series docs/metrics.md lists is served with its
// documented type, every forkline_ series served is documented, and the
// values are the events'.
func TestEverySeriesIsDocumentedAndServed(t *testing.T) {
	m := metrics.New()
	srv, err := metrics.Serve("127.0.0.1:0", m)
	require.NoError(t, err)
	defer srv.Close()

	one := 1.0
	live := observe.Live{Replicas: 4, Busy: 3, Standby: 1, Queued: 7}
	for _, e := range []observe.Event{
		observe.RunStarted{Command: "collect", RunID: "run-1", Planned: 12, KeptBefore: 2, Todo: 10, Replicas: 4, Live: func() observe.Live { return live }},
		observe.Golden{Task: "a", Phase: observe.GoldenCreate},
		observe.Golden{Task: "a", Phase: observe.GoldenSetup, Command: "make", Commands: 1},
		observe.Golden{Task: "b", Phase: observe.GoldenCreate},
		observe.Golden{Task: "a", Phase: observe.GoldenBuilt, Took: 2 * time.Second},
		observe.Reset{Task: "a", Strategy: "fork", Method: "overlay", Took: time.Millisecond},
		observe.Step{Task: "a", Action: "exec", Policy: time.Second, Env: 50 * time.Millisecond, ModelTurn: true, PromptTokens: 100, CompletionTokens: 20},
		observe.Step{Task: "a", Action: "done", ModelTurn: true, PromptTokens: 130, CompletionTokens: 5},
		observe.EpisodeEnded{Task: "a", Exit: "done", Steps: 2, Kept: true, Reward: &one, Took: 3 * time.Second},
		observe.EpisodeEnded{Task: "a", Exit: "env_error", ScaffoldLoss: true, Kept: true, RewardMissing: true},
		observe.EpisodeEnded{Task: "a", Exit: "env_error", Kept: false},
		observe.EpisodeEnded{Task: "a", Exit: "done", Kept: true, Status: "diverged"},
		observe.Generation{Number: 0, Bytes: 4096, Rows: 9},
	} {
		m.Observe(e)
	}
	s, err := metricstest.Get("http://" + srv.Addr() + "/metrics")
	require.NoError(t, err)

	docs, err := metricstest.Documented("../docs/metrics.md")
	require.NoError(t, err)
	for name, typ := range docs {
		f := s[name]
		if !assert.NotNil(t, f, "%s is documented and must be served", name) {
			continue
		}
		assert.Equal(t, typ, strings.ToLower(f.GetType().String()), "%s's type", name)
	}
	for name := range s {
		if strings.HasPrefix(name, "forkline_") {
			assert.Contains(t, docs, name, "%s is served, so docs/metrics.md must list it", name)
		}
	}
	assert.Contains(t, s, "process_cpu_seconds_total", "the process collector")
	assert.Contains(t, s, "go_goroutines", "the Go collector")

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"forkline_run_info", map[string]string{"command": "collect", "run_id": "run-1"}, 1},
		{"forkline_run_episodes", map[string]string{"state": "kept_before"}, 2},
		{"forkline_episodes_total", map[string]string{"exit_reason": "done"}, 2},
		{"forkline_episodes_total", map[string]string{"exit_reason": "env_error"}, 1},
		{"forkline_episodes_not_kept_total", map[string]string{"exit_reason": "env_error"}, 1},
		{"forkline_scaffold_losses_total", nil, 1},
		{"forkline_replay_episodes_total", map[string]string{"status": "diverged"}, 1},
		{"forkline_steps_total", nil, 2},
		{"forkline_model_turns_total", nil, 2},
		{"forkline_policy_tokens_total", map[string]string{"kind": "prompt"}, 230},
		{"forkline_policy_tokens_total", map[string]string{"kind": "completion"}, 25},
		{"forkline_episode_reward_sum", nil, 1},
		{"forkline_episode_reward_count", nil, 1},
		{"forkline_rewards_missing_total", nil, 1},
		{"forkline_reset_seconds_count", map[string]string{"strategy": "fork", "method": "overlay"}, 1},
		{"forkline_action_seconds_count", map[string]string{"kind": "exec"}, 1},
		{"forkline_policy_seconds_sum", nil, 1},
		{"forkline_golden_build_seconds_count", map[string]string{"result": "built"}, 1},
		{"forkline_golden_build_seconds_sum", nil, 2},
		{"forkline_golden_builds_in_progress", nil, 1},
		{"forkline_replicas", map[string]string{"state": "busy"}, 3},
		{"forkline_replicas", map[string]string{"state": "idle"}, 1},
		{"forkline_replicas", map[string]string{"state": "standby"}, 1},
		{"forkline_queue_depth", nil, 7},
		{"forkline_shard_bytes_total", nil, 4096},
		{"forkline_shard_generations_total", nil, 1},
		{"forkline_shard_rows_total", nil, 9},
	} {
		v, ok := s.Value(c.name, c.labels)
		assert.True(t, ok, "%s %v is served", c.name, c.labels)
		assert.Equal(t, c.want, v, "%s %v", c.name, c.labels)
	}
	_, ok := s.Value("forkline_action_seconds_count", map[string]string{"kind": "done"})
	assert.False(t, ok, "done is not an environment action: it has no latency")

	// After the run, the replicas are idle and the queue empty; the
	// counts stay.
	m.Observe(observe.RunEnded{Status: "complete"})
	s, err = metricstest.Get("http://" + srv.Addr() + "/metrics")
	require.NoError(t, err)
	v, _ := s.Value("forkline_replicas", map[string]string{"state": "idle"})
	assert.Equal(t, 4.0, v)
	v, _ = s.Value("forkline_queue_depth", nil)
	assert.Zero(t, v)
	v, _ = s.Value("forkline_steps_total", nil)
	assert.Equal(t, 2.0, v)
	assert.Equal(t, dto.MetricType_SUMMARY, s["forkline_episode_reward"].GetType())
}

func TestServeRefusesABadAddress(t *testing.T) {
	m := metrics.New()
	_, err := metrics.Serve("no-port", m)
	require.ErrorContains(t, err, `metrics: -metrics-addr "no-port": want HOST:PORT`)

	srv, err := metrics.Serve("127.0.0.1:0", m)
	require.NoError(t, err)
	defer srv.Close()
	_, err = metrics.Serve(srv.Addr(), m)
	require.Error(t, err, "a busy port is refused before anything runs")
	require.True(t, strings.HasPrefix(err.Error(), "metrics: -metrics-addr "+srv.Addr()+": "), err.Error())
	require.NoError(t, srv.Close())
	require.False(t, errors.Is(err, nil))
}
