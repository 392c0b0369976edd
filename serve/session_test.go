package serve_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
)

// recorded reads a stopped server's dataset: its episodes by id, and the
// number of step rows of each.
func recorded(t *testing.T, dir string) (map[string]string, map[string]int) {
	t.Helper()
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	exits := map[string]string{}
	details := map[string]int{}
	for ep, err := range ds.Episodes() {
		require.NoError(t, err)
		exits[ep.EpisodeID] = ep.ExitReason + ": " + ep.Detail
		details[ep.EpisodeID] = int(ep.Steps)
	}
	return exits, details
}

const sleepTask = `id: sleepy
instruction: take your time
files:
  f.txt: hello
limits: {max_steps: 3}
verify: {cmd: test -f f.txt}
`

func writeTask(t *testing.T, spec string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "task.yaml")
	require.NoError(t, os.WriteFile(p, []byte(spec), 0o644))
	return p
}

func TestIdleSessionIsReapedAndItsSandboxDestroyed(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask), Out: out, IdleTimeout: 300 * time.Millisecond})
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = c.Reset(map[string]any{"episode_id": "idle-1"})
	require.NoError(t, err)
	_, err = c.Step(map[string]any{"kind": "exec", "cmd": "cat f.txt"})
	require.NoError(t, err)
	require.Equal(t, 1, sandboxes(t, ts.work), "the session's fork is alive")
	code, text, err := c.WaitClosed(30 * time.Second)
	require.NoError(t, err)
	require.Equal(t, websocket.ClosePolicyViolation, code)
	require.Contains(t, text, "idle")
	requireNoSandboxes(t, ts.work)
	sum := ts.stop(t)
	require.Equal(t, 1, sum.Reaped)
	exits, steps := recorded(t, out)
	require.Contains(t, exits["idle-1"], "cancelled: idle for 300ms")
	require.Equal(t, 1, steps["idle-1"], "the step before the reaping is kept")
}

func TestDroppedConnectionDestroysItsSandboxAndKeepsItsSteps(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask), Out: out})
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = c.Reset(map[string]any{"episode_id": "dropped-1"})
	require.NoError(t, err)
	_, err = c.Step(map[string]any{"kind": "write_file", "path": "g.txt", "content": "x"})
	require.NoError(t, err)
	require.Equal(t, 1, sandboxes(t, ts.work))
	c.Drop()
	requireNoSandboxes(t, ts.work)

	// A client that closes properly mid-episode, as EnvClient.disconnect
	// does, ends its episode the same way.
	c2, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = c2.Reset(map[string]any{"episode_id": "closed-1"})
	require.NoError(t, err)
	c2.Disconnect()
	requireNoSandboxes(t, ts.work)

	sum := ts.stop(t)
	require.Equal(t, 1, sum.Dropped)
	exits, steps := recorded(t, out)
	require.Contains(t, exits["dropped-1"], "cancelled: the connection dropped")
	require.Equal(t, 1, steps["dropped-1"])
	_, kept := exits["closed-1"]
	require.False(t, kept, "an episode closed before its first step has nothing to keep")
	require.Equal(t, 2, sum.Episodes["cancelled"], "both episodes ended as cancelled")
	require.Equal(t, 1, sum.Kept, "only the one with a step is kept")
}

func TestCapacityIsRefusedAsOpenEnvDoes(t *testing.T) {
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask), MaxSessions: 1})
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer c.Disconnect()
	_, err = c.Reset(nil)
	require.NoError(t, err)
	c2, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = c2.Receive()
	var se *openenvtest.ServerError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "CAPACITY_REACHED", se.Code)
	require.Equal(t, 1.0, se.Data["active_sessions"])
	require.Equal(t, 1.0, se.Data["max_sessions"])
	code, _, err := c2.WaitClosed(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, websocket.CloseTryAgainLater, code)

	status, body, err := openenvtest.HTTPJSON("POST", ts.base+"/reset", map[string]any{})
	require.NoError(t, err)
	require.Equal(t, 503, status, "a one-shot request takes a session slot too: %v", body)
	require.Equal(t, "CAPACITY_REACHED", body["code"])
}

// Bad input gets a clear error with OpenEnv's code, and changes nothing:
// the episode goes on as it was.
func TestBadMessagesAreRefusedAndChangeNothing(t *testing.T) {
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask)})
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer c.Disconnect()

	_, err = c.Step(map[string]any{"kind": "exec", "cmd": "true"})
	requireCode(t, err, "EXECUTION_ERROR", "no episode")

	_, err = c.Reset(map[string]any{"episode_id": "bad-1"})
	require.NoError(t, err)
	for _, bad := range []struct {
		name, raw, code, says string
	}{
		{"not JSON", `{"type": "step", `, "INVALID_JSON", "invalid JSON"},
		{"unknown type", `{"type": "jump"}`, "UNKNOWN_TYPE", `"jump"`},
		{"unknown kind", `{"type": "step", "data": {"kind": "teleport"}}`, "VALIDATION_ERROR", "teleport"},
		{"missing field", `{"type": "step", "data": {"kind": "exec"}}`, "VALIDATION_ERROR", "cmd"},
		{"stray field", `{"type": "step", "data": {"kind": "exec", "cmd": "ls", "shell": "bash"}}`, "VALIDATION_ERROR", "shell"},
		{"unknown metadata", `{"type": "step", "data": {"kind": "exec", "cmd": "ls", "metadata": {"respons_ids": [1]}}}`, "VALIDATION_ERROR", "respons_ids"},
		{"logprobs mismatch", `{"type": "step", "data": {"kind": "exec", "cmd": "ls", "metadata": {"response_ids": [1, 2], "logprobs": [-0.1]}}}`, "VALIDATION_ERROR", "logprobs"},
		{"no data", `{"type": "step"}`, "VALIDATION_ERROR", "data"},
		{"stray key", `{"type": "state", "data": {}}`, "VALIDATION_ERROR", "data"},
		{"mistyped reset key", `{"type": "reset", "data": {"task_id": 7}}`, "VALIDATION_ERROR", "task_id"},
		{"stray message key", `{"type": "reset", "data": {}, "render": true}`, "VALIDATION_ERROR", "render"},
		{"unknown task", `{"type": "reset", "data": {"task_id": "nope"}}`, "VALIDATION_ERROR", "sleepy"},
		{"negative seed", `{"type": "reset", "data": {"seed": -1}}`, "VALIDATION_ERROR", "seed"},
		{"taken episode id", `{"type": "reset", "data": {"episode_id": "bad-1"}}`, "VALIDATION_ERROR", "taken"},
	} {
		_, err := c.SendRaw([]byte(bad.raw))
		requireCode(t, err, bad.code, bad.says)
	}
	st, err := c.State()
	require.NoError(t, err)
	require.Equal(t, "bad-1", st["episode_id"], "the refused messages left the episode as it was")
	require.Equal(t, 0.0, st["step_count"])
	r, err := c.Step(map[string]any{"kind": "read_file", "path": "f.txt"})
	require.NoError(t, err)
	require.Equal(t, "hello", r.Observation["output"])
	require.Equal(t, 1.0, r.Observation["step"])
}

func requireCode(t *testing.T, err error, code, says string) {
	t.Helper()
	var se *openenvtest.ServerError
	require.True(t, errors.As(err, &se), "want a %s error, got %v", code, err)
	require.Equal(t, code, se.Code, se.Message)
	require.Contains(t, se.Message, says)
}

// The task's limits apply as in collect: the step that uses up max_steps
// ends the episode, verified, and nothing is taken after it.
func TestLimitsEndTheEpisodeAsInCollect(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask), Out: out})
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer c.Disconnect()
	_, err = c.Reset(map[string]any{"episode_id": "limited"})
	require.NoError(t, err)
	for i := range 3 {
		r, err := c.Step(map[string]any{"kind": "exec", "cmd": "echo step"})
		require.NoError(t, err)
		require.Equal(t, i == 2, r.Done)
		if r.Done {
			require.Equal(t, "max_steps", r.Observation["exit_reason"])
			require.NotNil(t, r.Reward)
			require.Equal(t, 1.0, *r.Reward, "the verifier ran")
		}
	}
	_, err = c.Step(map[string]any{"kind": "exec", "cmd": "echo more"})
	requireCode(t, err, "EXECUTION_ERROR", "has ended (max_steps)")
	requireNoSandboxes(t, ts.work)

	// A reset while an episode runs ends it as cancelled and starts the next.
	_, err = c.Reset(map[string]any{"episode_id": "first"})
	require.NoError(t, err)
	_, err = c.Step(map[string]any{"kind": "exec", "cmd": "true"})
	require.NoError(t, err)
	r, err := c.Reset(map[string]any{"episode_id": "second"})
	require.NoError(t, err)
	require.Equal(t, "second", r.Observation["episode_id"])
	ts.stop(t)
	exits, _ := recorded(t, out)
	require.Contains(t, exits["limited"], "max_steps")
	require.Contains(t, exits["first"], "cancelled: the client reset the session after 1 steps")
}

const slowTimeoutTask = `id: hurried
instruction: be quick
limits: {episode_timeout: 300ms}
verify: {cmd: "true"}
`

// The episode timeout runs while the client thinks, as a collect policy's
// time counts: the step that comes too late is answered done, not taken.
func TestEpisodeTimeoutWhileTheClientThinks(t *testing.T) {
	ts := startServer(t, serve.Config{Tasks: writeTask(t, slowTimeoutTask)})
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer c.Disconnect()
	_, err = c.Reset(nil)
	require.NoError(t, err)
	time.Sleep(600 * time.Millisecond)
	r, err := c.Step(map[string]any{"kind": "exec", "cmd": "touch late"})
	require.NoError(t, err)
	require.True(t, r.Done)
	require.Equal(t, "timeout", r.Observation["exit_reason"])
	require.Equal(t, false, r.Observation["action_taken"])
	require.NotNil(t, r.Reward, "a timed-out episode is verified, as in collect")
}

// Token ids a trainer attaches in an action's metadata reach the dataset
// as a token-exact record: the step rows hold them as sent, and the
// episode's assembled record joins the turns.
func TestTokenIDsInMetadataKeepATokenExactRecord(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask), Out: out})
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = c.Reset(map[string]any{"episode_id": "tokens"})
	require.NoError(t, err)
	_, err = c.Step(map[string]any{"kind": "exec", "cmd": "cat f.txt", "metadata": map[string]any{
		"model": "Qwen/Qwen3-8B", "text": "<tool_call>cat</tool_call>", "prompt_ids": []int{10, 11, 12}, "response_ids": []int{13, 14},
		"logprobs": []float64{-0.25, -1.5}, "finish_reason": "tool_calls"}})
	require.NoError(t, err)
	// The second prompt extends the first: prompt, response, then the
	// environment's tokens (the tool result as the template rendered it).
	r, err := c.Step(map[string]any{"kind": "done", "answer": "hello", "metadata": map[string]any{
		"prompt_ids": []int{10, 11, 12, 13, 14, 20, 21}, "response_ids": []int{15}, "logprobs": []float64{-0.5}}})
	require.NoError(t, err)
	require.True(t, r.Done)
	c.Disconnect()
	ts.stop(t)

	ds, err := shard.Open(out)
	require.NoError(t, err)
	var steps int
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		if s.StepIndex == 0 {
			require.Equal(t, []int32{10, 11, 12}, s.PromptIDs)
			require.Equal(t, []int32{13, 14}, s.ResponseIDs)
			require.Equal(t, []int32{1, 1}, s.ResponseMask)
			require.Equal(t, []float32{-0.25, -1.5}, s.ResponseLogprobs)
			require.Equal(t, "Qwen/Qwen3-8B", *s.Model)
			require.Equal(t, "tool_calls", *s.FinishReason)
		}
		steps++
	}
	require.Equal(t, 2, steps)
	for ep, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Equal(t, int32(2), ep.TokenTurns)
		require.False(t, ep.TokenDrift)
		require.Equal(t, []int32{10, 11, 12}, ep.PromptIDs)
		require.Equal(t, []int32{13, 14, 20, 21, 15}, ep.ResponseIDs)
		require.Equal(t, []int32{1, 1, 0, 0, 1}, ep.ResponseMask)
		require.Equal(t, []float32{-0.25, -1.5, 0, 0, -0.5}, ep.ResponseLogprobs)
	}
}

const brokenTask = `id: broken
instruction: never starts
setup: ["echo no such tool >&2; exit 3"]
`

// A reset the pool cannot serve (the golden's setup fails) is OpenEnv's
// FACTORY_ERROR; no episode began, so the client may retry with its id.
func TestFailedResetIsAFactoryErrorAndFreesItsID(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, brokenTask), Out: out})
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer c.Disconnect()
	for range 2 {
		_, err = c.Reset(map[string]any{"episode_id": "retry-me"})
		requireCode(t, err, "FACTORY_ERROR", "no such tool")
	}
	requireNoSandboxes(t, ts.work)
	sum := ts.stop(t)
	require.Equal(t, 2, sum.ResetFailures)
	exits, _ := recorded(t, out)
	require.Empty(t, exits)
}

// The drain's grace bounds a step in flight: past it the action is
// interrupted, answered, and the episode kept as cancelled.
func TestGraceInterruptsAStepThatOverrunsIt(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask), Out: out, Grace: 300 * time.Millisecond})
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = c.Reset(map[string]any{"episode_id": "overrun"})
	require.NoError(t, err)
	mark := filepath.Join(t.TempDir(), "started")
	answer := make(chan openenvtest.StepResult, 1)
	go func() {
		r, _ := c.Step(map[string]any{"kind": "exec", "cmd": "touch " + mark + "; sleep 30"})
		answer <- r
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(mark); return err == nil }, time.Minute, 5*time.Millisecond)
	sum := ts.stop(t)
	r := <-answer
	require.True(t, r.Done)
	require.Equal(t, "cancelled", r.Observation["exit_reason"])
	require.Equal(t, "interrupted", r.Observation["error_kind"], "the sleep was cut short, not waited for")
	require.Equal(t, 1, sum.Episodes["cancelled"])
	requireNoSandboxes(t, ts.work)
	exits, steps := recorded(t, out)
	require.Contains(t, exits["overrun"], "cancelled")
	require.Equal(t, 1, steps["overrun"])
}

// Clients that close cleanly are not dropped connections, however they
// say it: after their episode ended, with a close frame and no close
// message, or with a close frame that carries no status code (what a
// WebSocket library's close() with no code sends: 1005 to the server).
// They were counted as dropped.
func TestCleanClosesAreNotDropped(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask), Out: out})
	for i, frame := range [][]byte{
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"),
		{}, // no status code
	} {
		url := "ws" + strings.TrimPrefix(ts.base, "http") + "/ws"
		conn, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf(`{"type":"reset","data":{"episode_id":"clean-%d"}}`, i))))
		_, _, err = conn.ReadMessage()
		require.NoError(t, err)
		require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"step","data":{"kind":"done","answer":"ok"}}`)))
		_, _, err = conn.ReadMessage()
		require.NoError(t, err)
		require.NoError(t, conn.WriteControl(websocket.CloseMessage, frame, time.Now().Add(5*time.Second)))
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				break // the server's close frame, or the end
			}
		}
		conn.Close()
	}
	requireNoSandboxes(t, ts.work)
	sum := ts.stop(t)
	require.Zero(t, sum.Dropped, "clean closes are not drops")
	require.Equal(t, 2, sum.Episodes["done"])
}
