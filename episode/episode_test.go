package episode

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/task"
)

// fakeSandbox answers "echo X" with X, fails "boom" as a broken session,
// fails "gone" as an unavailable backend, calls stopNow on "stopped" and
// waits for ctx to end, and exits 1 for anything else.
type fakeSandbox struct{}

// stopNow is what "stopped" calls: the test's cancel.
var stopNow = func() {}

func (fakeSandbox) Act(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	switch a.Cmd {
	case "echo ok":
		return runtime.Observation{Output: []byte("ok\n")}, nil
	case "boom":
		return runtime.Observation{}, errors.New("sandbox died")
	case "gone":
		return runtime.Observation{}, fmt.Errorf("engine: %w", runtime.ErrUnavailable)
	case "stopped":
		// The verifier is running when the stop comes: the caller
		// cancels ctx here, and the exec returns its error as a
		// provider does.
		stopNow()
		<-ctx.Done()
		return runtime.Observation{}, fmt.Errorf("local: exec in sb: %w", ctx.Err())
	}
	return runtime.Observation{Output: []byte("no"), ExitCode: 1, Error: true, ErrorKind: runtime.ErrExitStatus}, nil
}
func (fakeSandbox) Close(context.Context) error { return nil }
func (fakeSandbox) Info() providers.SandboxInfo {
	return providers.SandboxInfo{ID: "sb", Origin: "fake"}
}

// script is a policy that takes the actions in order, then says done.
type script []runtime.Action

func (s script) Decide(_ context.Context, h runtime.History) (runtime.Decision, error) {
	if len(h.Steps) < len(s) {
		return runtime.Decision{Action: s[len(h.Steps)]}, nil
	}
	return runtime.Decision{Action: runtime.Action{Kind: runtime.ActDone, Answer: "fin"}}, nil
}

func exec(cmd string) runtime.Action { return runtime.Action{Kind: runtime.ActExec, Cmd: cmd} }

func testTask(verify string) *task.Spec {
	s := &task.Spec{ID: "t", Instruction: "do it"}
	if verify != "" {
		s.Verify = &task.Verify{Cmd: verify, Reward: "exit"}
	}
	return s
}

var runner = Runner{RunID: "run", Provider: "fake", Capture: capture.DefaultPolicy()}

func replica() pool.Replica {
	return pool.Replica{Sandbox: fakeSandbox{}, Slot: 2, Attempt: 1, Strategy: pool.Fork, Origin: "overlay", Standby: true,
		Reset: 3 * time.Millisecond, Golden: &pool.Golden{Checkpoint: providers.Checkpoint{ID: "g1", Bytes: 7}, BuildTime: time.Second}}
}

func TestBeginRecordsIdentityAndReplica(t *testing.T) {
	ep := runner.Begin(Identity{EpisodeID: "e1", TaskHash: "h", Repeat: 3, Seed: 9}, testTask(""), replica())
	r := ep.Row
	require.Equal(t, []any{"e1", "run", "t", "h", int32(3), int64(9), int32(2), int32(1), "fake"},
		[]any{r.EpisodeID, r.RunID, r.TaskID, r.TaskHash, r.Repeat, r.Seed, r.Replica, r.Attempt, r.Provider})
	require.Equal(t, "fork+standby", r.ResetStrategy)
	require.Equal(t, "overlay", r.ResetOrigin)
	require.Equal(t, 3.0, r.ResetMS)
	require.Equal(t, []any{"g1", 1000.0, int64(7)}, []any{r.GoldenID, r.GoldenBuildMS, r.GoldenBytes})
	require.Positive(t, r.StartedAt)
}

func TestRolloutVerifyRows(t *testing.T) {
	for _, c := range []struct {
		name     string
		actions  script
		verify   string
		exit     runtime.ExitReason
		reward   *float64
		broken   bool
		verified bool
		errIs    error
	}{
		{"done and verified", script{exec("echo ok")}, "echo ok", runtime.ExitDone, ptr(1.0), false, true, nil},
		{"failing verifier", script{exec("echo ok")}, "false", runtime.ExitDone, ptr(0.0), false, true, nil},
		{"no verifier", script{exec("echo ok")}, "", runtime.ExitDone, nil, false, false, nil},
		{"broken sandbox is not verified", script{exec("boom")}, "echo ok", runtime.ExitEnvError, nil, true, false, nil},
		// A verifier whose session broke gave no reward: the episode is a
		// scaffold loss, never kept as done with its reward missing.
		{"verifier's session breaks", script{exec("echo ok")}, "boom", runtime.ExitEnvError, nil, true, true, nil},
		{"unavailable backend", script{exec("gone")}, "echo ok", runtime.ExitEnvError, nil, true, false, runtime.ErrUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			ep := runner.Begin(Identity{EpisodeID: "e1"}, testTask(c.verify), replica())
			var watched []int
			watch := runtime.StepSinkFunc(func(_ context.Context, s runtime.Step) error {
				watched = append(watched, s.Index)
				return nil
			})
			err := ep.Rollout(context.Background(), c.actions, runtime.History{Instruction: "do it"}, runtime.Limits{}, watch)
			if c.errIs != nil {
				require.ErrorIs(t, err, c.errIs)
			} else {
				require.NoError(t, err)
			}
			ran, _ := ep.Verify(context.Background())
			require.Equal(t, string(c.exit), ep.Row.ExitReason, ep.Row.Detail)
			require.Equal(t, c.verified, ran)
			require.Equal(t, c.broken, ep.Broken)
			require.Equal(t, map[bool]pool.Outcome{false: pool.Done, true: pool.Broken}[c.broken], ep.Outcome())

			b, keep := ep.Rows()
			require.True(t, keep)
			require.Len(t, b.Steps, len(watched), "every step reached the capture sink and the watch")
			require.EqualValues(t, len(b.Steps), b.Episode.Steps)
			require.NoError(t, b.Validate("run"), "the rows make a valid batch")
			if !c.verified {
				require.Empty(t, b.Rewards)
				return
			}
			require.Len(t, b.Rewards, 1)
			require.Equal(t, "verify", b.Rewards[0].Name)
			require.Equal(t, c.verify, b.Rewards[0].Source)
			require.Equal(t, c.reward, b.Rewards[0].Value)
		})
	}
}

// A stop that comes while the verifier runs (its exec returns the
// cancelled context's error), or before it could run, leaves the episode
// cancelled, without a reward, with its steps: a resumed run runs it
// again. Before the fix it was kept as done with reward null (detail
// "task: verify: local: exec in sb-…: context canceled"), and -resume took
// it as finished.
func TestAStopDuringTheVerifierKeepsTheEpisodeCancelled(t *testing.T) {
	for _, c := range []struct {
		name   string
		before bool // the stop came before Verify was called
	}{{"while the verifier runs", false}, {"before the verifier", true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stopNow = cancel
			defer func() { stopNow = func() {} }()
			ep := runner.Begin(Identity{EpisodeID: "e1"}, testTask("stopped"), replica())
			require.NoError(t, ep.Rollout(ctx, script{exec("echo ok")}, runtime.History{Instruction: "do it"}, runtime.Limits{}, nil))
			require.Equal(t, string(runtime.ExitDone), ep.Row.ExitReason)
			if c.before {
				cancel()
			}
			ran, err := ep.Verify(ctx)
			require.NoError(t, err)
			require.False(t, ran)
			require.False(t, ep.Broken, "a stop is not a broken sandbox")
			require.Equal(t, string(runtime.ExitCancelled), ep.Row.ExitReason)
			require.Contains(t, ep.Row.Detail, "verifier")
			require.Contains(t, ep.Row.Detail, "so that a resumed run runs it again")
			b, keep := ep.Rows()
			require.True(t, keep, "its steps are kept, as cancelled")
			require.Empty(t, b.Rewards, "no reward from a verifier the stop cut short")
			require.Len(t, b.Steps, 2)
		})
	}
}

func TestAWatchThatFailsEndsTheEpisodeAsUnknown(t *testing.T) {
	ep := runner.Begin(Identity{EpisodeID: "e1"}, testTask(""), replica())
	bad := errors.New("comparison store full")
	err := ep.Rollout(context.Background(), script{exec("echo ok")}, runtime.History{}, runtime.Limits{},
		runtime.StepSinkFunc(func(context.Context, runtime.Step) error { return bad }))
	require.ErrorIs(t, err, bad)
	require.Equal(t, string(runtime.ExitUnknown), ep.Row.ExitReason)
	require.True(t, ep.Broken)
}

func TestNoReplicaAndCancelledBeforeTheFirstStep(t *testing.T) {
	ep := runner.Begin(Identity{EpisodeID: "e1"}, testTask("echo ok"), pool.Replica{Slot: 1, Attempt: 3})
	ep.NoReplica(context.Background(), errors.New("pool: fork failed"))
	b, keep := ep.Rows()
	require.True(t, keep, "an environment error is the episode's outcome, kept")
	require.Equal(t, string(runtime.ExitEnvError), b.Episode.ExitReason)
	require.Equal(t, "pool: fork failed", b.Episode.Detail)
	require.EqualValues(t, 3, b.Episode.Attempt)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ep = runner.Begin(Identity{EpisodeID: "e2"}, testTask(""), pool.Replica{})
	ep.NoReplica(ctx, context.Canceled)
	_, keep = ep.Rows()
	require.False(t, keep, "cancelled before its first step: nothing to keep, a resume does it")

	ep = runner.Begin(Identity{EpisodeID: "e3"}, testTask(""), replica())
	ep.PolicyFailed(errors.New("no solution"))
	b, _ = ep.Rows()
	require.Equal(t, string(runtime.ExitPolicyError), b.Episode.ExitReason)
}

func TestABrokenTokenRecordIsRefusedWithAReason(t *testing.T) {
	ep := runner.Begin(Identity{EpisodeID: "e1"}, testTask(""), replica())
	// A turn whose mask does not match its ids breaks the record's invariants.
	pol := policyFunc(func(_ context.Context, h runtime.History) (runtime.Decision, error) {
		m := &runtime.ModelEvent{PromptIDs: []int32{1}, ResponseIDs: []int32{2, 3}, Logprobs: []float32{-1}}
		if len(h.Steps) == 0 {
			return runtime.Decision{Action: exec("echo ok"), Model: m}, nil
		}
		return runtime.Decision{Action: runtime.Action{Kind: runtime.ActDone}}, nil
	})
	require.NoError(t, ep.Rollout(context.Background(), pol, runtime.History{}, runtime.Limits{}, nil))
	b, keep := ep.Rows()
	require.True(t, keep)
	require.Contains(t, b.Episode.Detail, "token record refused")
	require.Empty(t, b.Episode.ResponseIDs, "a wrong record never reaches a trainer")
}

func ptr[T any](v T) *T { return &v }

type policyFunc func(ctx context.Context, h runtime.History) (runtime.Decision, error)

func (f policyFunc) Decide(ctx context.Context, h runtime.History) (runtime.Decision, error) {
	return f(ctx, h)
}
