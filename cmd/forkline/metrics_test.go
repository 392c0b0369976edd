package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/metrics"
	"github.com/forkline/forkline/metrics/metricstest"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/replay"
)

// metricsTasks are a task whose steps take a while (so a scrape lands in
// the middle of the run), one whose verifier fails (reward 0), and one
// whose golden cannot be built (every episode a scaffold loss).
func metricsTasks(t *testing.T) string {
	dir := t.TempDir()
	for name, spec := range map[string]string{
		"slow.yaml": "id: slow\ninstruction: wait\nverify: {cmd: test -f done.txt, reward: exit}\nsolution:\n" +
			"  - {kind: exec, cmd: sleep 0.3}\n  - {kind: write_file, path: done.txt, content: ok}\n  - {kind: exec, cmd: cat done.txt}\n  - {kind: done}\n",
		"wrong.yaml":  "id: wrong\ninstruction: fail\nverify: {cmd: 'false', reward: exit}\nsolution:\n  - {kind: read_file, path: nothing.txt}\n  - {kind: done}\n",
		"broken.yaml": "id: broken\ninstruction: never starts\nsetup: ['exit 3']\nsolution:\n  - {kind: done}\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(spec), 0o644))
	}
	return dir
}

// forkline collect -metrics-addr serves the documented series while the
// run goes, and -log-format json makes every line on stderr a record with
// the run id (and an episode's record its task and episode id).
func TestCollectServesMetricsDuringTheRun(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	cmd := collectProcess("-tasks", metricsTasks(t), "-out", out, "-repeats", "4", "-replicas", "2", "-workdir", t.TempDir(),
		"-metrics-addr", "127.0.0.1:0", "-log-format", "json", "-log-level", "debug")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var stdout syncBuffer
	cmd.Stdout = &stdout
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()

	urls := make(chan string, 1)
	records := make(chan []map[string]any, 1)
	go func() {
		var recs []map[string]any
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var r map[string]any
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				r = map[string]any{"not_json": sc.Text()}
			}
			if r["msg"] == "serving metrics" {
				urls <- fmt.Sprint(r["url"])
			}
			recs = append(recs, r)
		}
		records <- recs
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(time.Minute):
		t.Fatal("no serving metrics record")
	}

	// Scrape until a scrape falls mid-run: steps recorded, not every
	// episode kept yet.
	var mid metricstest.Scrape
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		s, err := metricstest.Get(url)
		if err != nil {
			break // the run ended
		}
		steps, _ := s.Value("forkline_steps_total", nil)
		kept, _ := s.Value("forkline_episodes_total", nil)
		if steps > 0 && kept < 12 {
			mid = s
			break
		}
	}
	require.NotNil(t, mid, "a scrape during the run")
	for _, name := range []string{"forkline_run_info", "forkline_run_episodes", "forkline_steps_total", "forkline_policy_seconds",
		"forkline_action_seconds", "forkline_reset_seconds", "forkline_golden_build_seconds", "forkline_golden_builds_in_progress",
		"forkline_replicas", "forkline_queue_depth", "forkline_episode_reward", "forkline_shard_bytes_total", "process_cpu_seconds_total"} {
		assert.Contains(t, mid, name, "served during the run")
	}
	planned, _ := mid.Value("forkline_run_episodes", map[string]string{"state": "planned"})
	assert.Equal(t, 12.0, planned)
	busy, _ := mid.Value("forkline_replicas", map[string]string{"state": "busy"})
	idle, _ := mid.Value("forkline_replicas", map[string]string{"state": "idle"})
	assert.Equal(t, 2.0, busy+idle, "busy and idle add up to the replicas")

	require.Equal(t, cli.ExitOK, exitCode(cmd.Wait()), stdout.String())
	recs := <-records
	require.NotEmpty(t, recs)
	runID := ""
	for _, r := range recs {
		require.NotContains(t, r, "not_json", "with -log-format json every line on stderr is a record")
		id, _ := r["run_id"].(string)
		require.NotEmpty(t, id, "every record of the run carries the run id: %v", r)
		if runID == "" {
			runID = id
		}
		require.Equal(t, runID, id)
		if _, ok := r["episode_id"]; ok {
			require.NotEmpty(t, r["task"], "an episode's record names its task: %v", r)
		}
	}
	ds, err := shard.Open(out)
	require.NoError(t, err)
	require.Equal(t, ds.Manifest().RunID, runID)
	episodeRecords := 0
	for _, r := range recs {
		if r["msg"] == "episode kept" {
			episodeRecords++
		}
	}
	require.Equal(t, 12, episodeRecords, "-log-level debug: a record per kept episode")
}

// At the end of a run, the scrape says what the summary says: episodes
// by exit reason, scaffold losses, steps, rewards, resets, golden builds;
// the shard bytes are the manifest's and the exec latencies one per exec
// step of the dataset.
func TestMetricsAtTheEndEqualTheSummary(t *testing.T) {
	m := metrics.New()
	srv, err := metrics.Serve("127.0.0.1:0", m)
	require.NoError(t, err)
	defer srv.Close()
	url := "http://" + srv.Addr() + "/metrics"

	out := filepath.Join(t.TempDir(), "run")
	sum, err := collect.Run(context.Background(), collect.Config{Tasks: metricsTasks(t), Out: out, Repeats: 4, Replicas: 3,
		WorkDir: t.TempDir(), Observer: observe.Multi{m}})
	require.NoError(t, err)
	rep := sum.Report()
	s, err := metricstest.Get(url)
	require.NoError(t, err)

	byExit := s.By("forkline_episodes_total", "exit_reason")
	want := map[string]float64{}
	for k, v := range rep.ByExit {
		want[k] = float64(v)
	}
	require.Equal(t, want, byExit, "episodes by exit reason equal the summary's")
	require.Equal(t, map[string]float64{"done": 8, "env_error": 4}, byExit)
	losses, _ := s.Value("forkline_scaffold_losses_total", nil)
	require.Equal(t, float64(rep.Losses), losses)
	require.Equal(t, map[string]float64{"broken": 4}, s.By("forkline_scaffold_losses_total", "task"))
	steps, _ := s.Value("forkline_steps_total", nil)
	require.Equal(t, float64(rep.Steps), steps)
	count, _ := s.Value("forkline_episode_reward_count", nil)
	rsum, _ := s.Value("forkline_episode_reward_sum", nil)
	require.Equal(t, float64(rep.Rewarded), count)
	require.InDelta(t, *rep.RewardMean*float64(rep.Rewarded), rsum, 1e-9)
	require.Equal(t, 4.0, rsum, "slow's four episodes pass, wrong's four fail")

	resets := 0
	for key, l := range rep.ResetMS {
		strategy, method, _ := strings.Cut(key, "/")
		n, ok := s.Value("forkline_reset_seconds_count", map[string]string{"strategy": strategy, "method": method})
		require.True(t, ok, "reset %s is served", key)
		require.Equal(t, float64(l.N), n, "resets %s", key)
		resets += l.N
	}
	all, _ := s.Value("forkline_reset_seconds_count", nil)
	require.Equal(t, float64(resets), all)
	built, _ := s.Value("forkline_golden_build_seconds_count", map[string]string{"result": "built"})
	failed, _ := s.Value("forkline_golden_build_seconds_count", map[string]string{"result": "failed"})
	require.Equal(t, float64(len(rep.GoldenBuildMS)), built)
	require.Equal(t, 1.0, failed)
	building, _ := s.Value("forkline_golden_builds_in_progress", nil)
	require.Zero(t, building)
	idle, _ := s.Value("forkline_replicas", map[string]string{"state": "idle"})
	require.Equal(t, 3.0, idle)
	queue, _ := s.Value("forkline_queue_depth", nil)
	require.Zero(t, queue)

	ds, err := shard.Open(out)
	require.NoError(t, err)
	var bytes int64
	gens := map[int]bool{}
	for _, sh := range ds.Manifest().Shards {
		bytes += sh.Bytes
		gens[sh.Generation] = true
	}
	b, _ := s.Value("forkline_shard_bytes_total", nil)
	g, _ := s.Value("forkline_shard_generations_total", nil)
	require.Equal(t, float64(bytes), b)
	require.Equal(t, float64(len(gens)), g)
	execs := 0
	for st, err := range ds.Steps() {
		require.NoError(t, err)
		if strings.Contains(st.ActionJSON, `"kind":"exec"`) {
			execs++
		}
	}
	n, _ := s.Value("forkline_action_seconds_count", map[string]string{"kind": "exec"})
	require.Equal(t, float64(execs), n)
	require.Equal(t, 8.0, n, "slow's two execs, four times")
}

// A replay's scrape at the end says what its report says: verdicts by
// status, the steps it re-ran, one reset per replayed episode, and the
// run's command.
func TestReplayMetricsAtTheEndEqualTheReport(t *testing.T) {
	dir := t.TempDir()
	for name, spec := range map[string]string{
		"slow.yaml":  "id: slow\ninstruction: wait\nverify: {cmd: test -f done.txt, reward: exit}\nsolution:\n  - {kind: exec, cmd: sleep 0.1}\n  - {kind: write_file, path: done.txt, content: ok}\n  - {kind: done}\n",
		"wrong.yaml": "id: wrong\ninstruction: fail\nverify: {cmd: 'false', reward: exit}\nsolution:\n  - {kind: read_file, path: nothing.txt}\n  - {kind: done}\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(spec), 0o644))
	}
	out := filepath.Join(t.TempDir(), "run")
	_, err := collect.Run(context.Background(), collect.Config{Tasks: dir, Out: out, Repeats: 3, Replicas: 2, WorkDir: t.TempDir()})
	require.NoError(t, err)

	m := metrics.New()
	srv, err := metrics.Serve("127.0.0.1:0", m)
	require.NoError(t, err)
	defer srv.Close()
	rep, err := replay.Run(context.Background(), replay.Config{In: out, Mode: replay.Normalized, Replicas: 2, WorkDir: t.TempDir(),
		Observer: observe.Multi{m}})
	require.NoError(t, err)
	s, err := metricstest.Get("http://" + srv.Addr() + "/metrics")
	require.NoError(t, err)

	require.Equal(t, 6, rep.Identical, "a deterministic run replays identically: %+v", rep)
	byStatus := s.By("forkline_replay_episodes_total", "status")
	want := map[string]float64{}
	for status, n := range map[string]int{"identical": rep.Identical, "diverged": rep.Diverged, "error": rep.Errored} {
		if n > 0 {
			want[status] = float64(n)
		}
	}
	require.Equal(t, want, byStatus, "verdicts by status equal the report's")
	require.Equal(t, map[string]float64{"slow": 3, "wrong": 3}, s.By("forkline_replay_episodes_total", "task"))
	steps, _ := s.Value("forkline_steps_total", nil)
	matched := 0
	for _, ep := range rep.Episodes {
		matched += ep.Matched
	}
	require.Equal(t, float64(matched), steps, "every re-run step is counted")
	resets, _ := s.Value("forkline_reset_seconds_count", nil)
	require.Equal(t, 6.0, resets, "one reset per replayed episode")
	info := s.By("forkline_run_info", "command")
	require.Equal(t, map[string]float64{"replay": 1}, info)
}
