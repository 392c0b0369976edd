package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/metrics/metricstest"
	"github.com/forkline/forkline/serve/openenvtest"
)

// forkline serve -metrics-addr serves the same series as collect, from the
// same events: scraped while a session is mid-episode, and once the last
// episode ended, the scrape says what serve's summary (-json) says at the
// end — episodes by exit reason, steps, resets by strategy and method,
// rewards, golden builds. The metrics address comes in a JSON log record,
// as collect's does.
func TestServeMetricsMidRunAndAtTheEndEqualTheSummary(t *testing.T) {
	tasks := t.TempDir()
	for name, spec := range map[string]string{
		"ok.yaml":    "id: ok\ninstruction: write done.txt\nverify: {cmd: test -f done.txt, reward: exit}\n",
		"wrong.yaml": "id: wrong\ninstruction: fail\nverify: {cmd: 'false', reward: exit}\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(tasks, name), []byte(spec), 0o644))
	}
	out := filepath.Join(t.TempDir(), "served")
	cmd := forklineProcess("serve", "-tasks", tasks, "-addr", "127.0.0.1:0", "-out", out, "-workdir", t.TempDir(),
		"-metrics-addr", "127.0.0.1:0", "-log-format", "json", "-json")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var stdout, logs syncBuffer
	cmd.Stdout = &stdout
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	listening := regexp.MustCompile(`listening on (http://\S+)`)
	bases, urls := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write([]byte(sc.Text() + "\n"))
			var r map[string]any
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue
			}
			msg := fmt.Sprint(r["msg"])
			if msg == "serving metrics" {
				urls <- fmt.Sprint(r["url"])
			}
			if m := listening.FindStringSubmatch(msg); m != nil {
				bases <- m[1]
			}
		}
	}()
	var base, url string
	for base == "" || url == "" {
		select {
		case base = <-bases:
		case url = <-urls:
		case <-time.After(2 * time.Minute):
			t.Fatalf("forkline serve did not say where it listens and serves metrics:\n%s", logs.String())
		}
	}

	c, err := openenvtest.Dial(base)
	require.NoError(t, err)
	play := func(task string, actions ...map[string]any) {
		_, err := c.Reset(map[string]any{"task_id": task})
		require.NoError(t, err)
		for _, a := range actions {
			_, err := c.Step(a)
			require.NoError(t, err)
		}
	}
	play("ok", map[string]any{"kind": "write_file", "path": "done.txt", "content": "ok"}, map[string]any{"kind": "done"})
	play("wrong", map[string]any{"kind": "exec", "cmd": "true"})

	// Mid-run: one episode ended, one open after its first step.
	mid, err := metricstest.Get(url)
	require.NoError(t, err)
	v := func(s metricstest.Scrape, name string, labels map[string]string) float64 {
		x, _ := s.Value(name, labels)
		return x
	}
	require.Equal(t, map[string]float64{"done": 1}, mid.By("forkline_episodes_total", "exit_reason"))
	require.Equal(t, 3.0, v(mid, "forkline_steps_total", nil))
	require.Equal(t, 2.0, v(mid, "forkline_reset_seconds_count", nil))
	require.Equal(t, 1.0, v(mid, "forkline_episode_reward_count", nil))
	require.Equal(t, 1.0, v(mid, "forkline_run_info", map[string]string{"command": "serve"}))

	_, err = c.Step(map[string]any{"kind": "done"})
	require.NoError(t, err)
	play("ok", map[string]any{"kind": "done"})
	c.Disconnect()
	end, err := metricstest.Get(url)
	require.NoError(t, err)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, cli.ExitOK, exitCode(cmd.Wait()), logs.String())
	var sum manifest.Serve
	require.NoError(t, json.Unmarshal([]byte(stdout.String()), &sum), stdout.String())

	byExit := map[string]float64{}
	for k, n := range sum.Episodes {
		byExit[k] = float64(n)
	}
	require.Equal(t, map[string]float64{"done": 3}, byExit)
	require.Equal(t, byExit, end.By("forkline_episodes_total", "exit_reason"), "episodes by exit reason")
	require.Equal(t, 3, sum.Kept)
	require.Equal(t, float64(sum.Kept), v(end, "forkline_episodes_total", nil), "every served episode recorded")
	require.Equal(t, 5, sum.Steps)
	require.Equal(t, float64(sum.Steps), v(end, "forkline_steps_total", nil))
	require.Equal(t, 3, sum.Resets)
	resets := 0
	for _, l := range sum.ResetLatency {
		strategy, method, _ := strings.Cut(l.Kind, "/")
		require.Equal(t, float64(l.N), v(end, "forkline_reset_seconds_count", map[string]string{"strategy": strategy, "method": method}), l.Kind)
		resets += l.N
	}
	require.Equal(t, float64(resets), v(end, "forkline_reset_seconds_count", nil))
	require.Equal(t, float64(sum.Resets), v(end, "forkline_reset_seconds_count", nil))
	require.Equal(t, 3, sum.Rewarded)
	require.Equal(t, float64(sum.Rewarded), v(end, "forkline_episode_reward_count", nil))
	require.InDelta(t, *sum.RewardMean*float64(sum.Rewarded), v(end, "forkline_episode_reward_sum", nil), 1e-9)
	require.Equal(t, 1.0, v(end, "forkline_episode_reward_sum", nil), "the first ok wrote done.txt; wrong and the second ok did not")
	require.Equal(t, 2, sum.GoldenBuilds)
	require.Equal(t, float64(sum.GoldenBuilds), v(end, "forkline_golden_build_seconds_count", map[string]string{"result": "built"}))
}
