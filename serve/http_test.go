package serve_test

import (
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
)

// The HTTP endpoints answer as OpenEnv's server does: /health, /metadata
// (its EnvironmentMetadata keys), /schema (action, observation, state),
// /state of a fresh environment; /reset and /step are stateless: each
// runs in a fork of its own, destroyed before the answer.
func TestHTTPEndpointsAndStatelessOneShots(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Out: out})
	sch := fetchSchemas(t, ts.base)

	status, body, err := openenvtest.HTTPJSON("GET", ts.base+"/health", nil)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.Equal(t, "healthy", body["status"])

	status, body, err = openenvtest.HTTPJSON("GET", ts.base+"/metadata", nil)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	for _, k := range []string{"name", "description", "readme_content", "version", "author", "documentation_url"} {
		require.Contains(t, body, k)
	}
	require.Len(t, body, 6, "EnvironmentMetadata forbids other keys")
	require.Contains(t, body["description"], "fix-sum")

	status, body, err = openenvtest.HTTPJSON("GET", ts.base+"/state", nil)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.NoError(t, sch.state.Validate(body))
	require.Nil(t, body["episode_id"])
	require.Equal(t, 0.0, body["step_count"])

	// /reset: ResetResponse {observation, reward, done}, seed picks a task
	// deterministically (tasks in id order: config-migrate, error-report,
	// fix-sum).
	for seed, want := range map[int]string{0: "config-migrate", 2: "fix-sum", 4: "error-report"} {
		status, body, err = openenvtest.HTTPJSON("POST", ts.base+"/reset", map[string]any{"seed": seed})
		require.NoError(t, err)
		require.Equal(t, 200, status, "%v", body)
		require.Len(t, body, 3)
		require.Equal(t, false, body["done"])
		require.Nil(t, body["reward"])
		obs := body["observation"].(map[string]any)
		require.NoError(t, sch.observation.Validate(obs))
		require.Equal(t, want, obs["task_id"], "seed %d", seed)
	}
	status, _, err = openenvtest.HTTPJSON("POST", ts.base+"/reset", map[string]any{"seed": 1, "seed_": "x"})
	require.NoError(t, err)
	require.Equal(t, 200, status, "an extra key is dropped, as OpenEnv's ResetRequest (extra=allow) drops it")
	status, _, err = openenvtest.HTTPJSON("POST", ts.base+"/reset", map[string]any{"seed": "one"})
	require.NoError(t, err)
	require.Equal(t, 422, status, "a known key of the wrong type is refused")

	// /step: a fresh environment each time — a write in one is not seen by
	// the next; a done action is verified.
	status, body, err = openenvtest.HTTPJSON("POST", ts.base+"/step", map[string]any{"task_id": "fix-sum",
		"action": map[string]any{"kind": "write_file", "path": "mark", "content": "x"}, "request_id": "req-1"})
	require.NoError(t, err)
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, false, body["done"])
	status, body, err = openenvtest.HTTPJSON("POST", ts.base+"/step", map[string]any{"task_id": "fix-sum",
		"action": map[string]any{"kind": "exec", "cmd": "test -e mark"}, "timeout_s": 5})
	require.NoError(t, err)
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, 1.0, body["observation"].(map[string]any)["exit_code"], "the second one-shot ran in a fresh fork")
	status, raw, err := openenvtest.HTTPRaw("POST", ts.base+"/step", map[string]any{"task_id": "fix-sum", "episode_id": "one-shot-done",
		"action": map[string]any{"kind": "done"}})
	require.NoError(t, err)
	require.Equal(t, 200, status, "%s", raw)
	require.NoError(t, json.Unmarshal(raw, &body))
	require.Equal(t, true, body["done"])
	require.Equal(t, 0.0, body["reward"], "fix-sum's tests fail on the untouched golden")
	require.Contains(t, string(raw), `"reward":0.0,`, "a reward is a JSON float on the wire, as OpenEnv's float reward is: %s", raw)
	status, body, err = openenvtest.HTTPJSON("POST", ts.base+"/step", map[string]any{"action": map[string]any{"kind": "exec"}})
	require.NoError(t, err)
	require.Equal(t, 422, status)
	require.Equal(t, "VALIDATION_ERROR", body["code"])
	requireNoSandboxes(t, ts.work)

	ts.stop(t)
	exits, steps := recorded(t, out)
	require.Contains(t, exits["req-1"], "cancelled: one-shot HTTP /step", "request_id names the one-step episode")
	require.Equal(t, 1, steps["req-1"])
	require.Contains(t, exits["one-shot-done"], "done")
	require.Len(t, exits, 3, "the /reset one-shots took no step: nothing to keep")
}

// With -standby, a reset is a hand-off of a fork made in the background.
func TestStandbyMakesAResetAHandOff(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask), Out: out, Standby: 2})
	require.Eventually(t, func() bool { return sandboxes(t, ts.work) == 2 }, 30e9, 10e6, "the standby forks are made ahead")
	for i := range 4 {
		c, err := openenvtest.Dial(ts.base)
		require.NoError(t, err)
		_, err = c.Reset(map[string]any{"episode_id": string(rune('a' + i))})
		require.NoError(t, err)
		_, err = c.Step(map[string]any{"kind": "exec", "cmd": "true"})
		require.NoError(t, err)
		c.Disconnect()
		require.Eventually(t, func() bool { return sandboxes(t, ts.work) == 2 }, 30e9, 10e6, "the standby refills")
	}
	sum := ts.stop(t)
	var handoffs int
	for _, l := range sum.ResetLatency {
		if strings.HasPrefix(l.Kind, "fork+standby") {
			handoffs += l.N
		}
	}
	require.Equal(t, 4, handoffs, "every reset was a hand-off: %+v", sum.ResetLatency)
	require.Equal(t, 0, sandboxes(t, ts.work), "the standby forks are destroyed at stop")
}

// logBuffer collects a server's log lines (slog's text form).
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines are the log lines that hold every one of subs.
func (b *logBuffer) lines(subs ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		all := l != ""
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// Keys of the request envelope forkline does not take are accepted and
// dropped, as OpenEnv's server drops them (ResetRequest and StepRequest
// are extra="allow"; http_server.py's _get_valid_kwargs passes an
// environment only what its reset and step take), and logged once per
// session with their names. An unknown key inside an action is still
// refused (OpenEnv's Action is extra="forbid"), and so is one beside
// "type" and "data" in a /ws message (its BaseMessage is extra="forbid").
func TestExtraEnvelopeKeysAreDroppedAndLoggedOncePerSession(t *testing.T) {
	var logs logBuffer
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ignored := func(key string) int { return len(logs.lines("ignoring request keys", key)) }

	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer c.Disconnect()
	r, err := c.Reset(map[string]any{"episode_id": "extra-1", "render": true, "taskid": "sleepy"})
	require.NoError(t, err)
	require.Equal(t, "extra-1", r.Observation["episode_id"])
	_, err = c.Reset(map[string]any{"render": true})
	require.NoError(t, err)
	require.Equal(t, 1, ignored("render"), "once per session: %v", logs.lines("ignoring"))
	require.Len(t, logs.lines("ignoring request keys", "keys=render,taskid", "/ws reset"), 1, "the key names, sorted")
	_, err = c.Step(map[string]any{"kind": "exec", "cmd": "ls", "render": true})
	requireCode(t, err, "VALIDATION_ERROR", "render")

	other, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer other.Disconnect()
	_, err = other.Reset(map[string]any{"render": true})
	require.NoError(t, err)
	require.Equal(t, 2, ignored("render"), "another session logs it again")

	// OpenEnv's own StepRequest example: {"action": ..., "render": true,
	// "verbose": false}.
	for range 2 {
		status, body, err := openenvtest.HTTPJSON("POST", ts.base+"/step", map[string]any{
			"action": map[string]any{"kind": "exec", "cmd": "true"}, "render": true, "verbose": false})
		require.NoError(t, err)
		require.Equal(t, 200, status, "%v", body)
	}
	require.Len(t, logs.lines("ignoring request keys", "POST /step", "keys=render,verbose"), 1,
		"the one-shots log a key once per server: %v", logs.lines("ignoring"))
	status, body, err := openenvtest.HTTPJSON("POST", ts.base+"/step", map[string]any{
		"action": map[string]any{"kind": "exec", "cmd": "true", "verbose": false}})
	require.NoError(t, err)
	require.Equal(t, 422, status)
	require.Contains(t, body["detail"], "verbose", "an unknown key inside the action is refused by name")
}

// Rewards are JSON floats on the wire (1.0, not 1), over /ws as over
// HTTP: OpenEnv types them Optional[float], and a trainer that stacks a
// batch of 0 and 1 gets an integer tensor.
func TestRewardsAreFloatsOnTheWire(t *testing.T) {
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask)})
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer c.Disconnect()
	_, err = c.Reset(nil)
	require.NoError(t, err)
	require.Contains(t, string(c.LastRaw()), `"reward":null`)
	r, err := c.Step(map[string]any{"kind": "done"})
	require.NoError(t, err)
	require.True(t, r.Done)
	require.Contains(t, string(c.LastRaw()), `"reward":1.0,`, "%s", c.LastRaw())
	_, err = c.State()
	require.NoError(t, err)
	require.Contains(t, string(c.LastRaw()), `"reward":1.0`, "%s", c.LastRaw())
}
