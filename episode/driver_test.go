package episode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/runtime"
)

func TestDriverStepsUntilDoneThenVerifies(t *testing.T) {
	ep := runner.Begin(Identity{EpisodeID: "e1"}, testTask("echo ok"), replica())
	d := ep.Drive(context.Background(), runtime.History{Instruction: "do it"}, runtime.Limits{MaxSteps: 5}, nil)

	got, err := d.Step(context.Background(), runtime.Decision{Action: exec("echo ok"),
		Model: &runtime.ModelEvent{PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3}, Logprobs: []float32{-0.5}}})
	require.NoError(t, err)
	require.False(t, got.Ended)
	require.Equal(t, "ok\n", string(got.Step.Observation.Output))
	require.Equal(t, 0, got.Step.Index)

	got, err = d.Step(context.Background(), runtime.Decision{Action: exec("false")})
	require.NoError(t, err)
	require.False(t, got.Ended)
	require.True(t, got.Step.Observation.Error, "a failing command is an observation")

	got, err = d.Step(context.Background(), runtime.Decision{Action: runtime.Action{Kind: runtime.ActDone, Answer: "42"}})
	require.NoError(t, err)
	require.True(t, got.Ended)
	require.Equal(t, runtime.ActDone, got.Step.Action.Kind)
	require.NoError(t, d.Wait())
	require.Equal(t, runtime.ExitDone, ep.Result.Exit)
	require.Equal(t, "42", ep.Row.Answer)

	ran, err := ep.Verify(context.Background())
	require.NoError(t, err)
	require.True(t, ran)
	b, keep := ep.Rows()
	require.True(t, keep)
	require.Len(t, b.Steps, 3)
	require.Equal(t, []int32{1, 2}, b.Steps[0].PromptIDs, "the client's token ids reach the step row")
	require.Equal(t, int32(1), b.Episode.TokenTurns)
	require.Equal(t, 1.0, *b.Rewards[0].Value)

	// An ended episode takes no more actions.
	got, err = d.Step(context.Background(), runtime.Decision{Action: exec("echo ok")})
	require.NoError(t, err)
	require.True(t, got.Ended)
	require.Nil(t, got.Step)
}

func TestDriverMaxStepsEndsOnTheLastStep(t *testing.T) {
	ep := runner.Begin(Identity{EpisodeID: "e1"}, testTask(""), replica())
	d := ep.Drive(context.Background(), runtime.History{}, runtime.Limits{MaxSteps: 2}, nil)
	got, _ := d.Step(context.Background(), runtime.Decision{Action: exec("echo ok")})
	require.False(t, got.Ended)
	got, _ = d.Step(context.Background(), runtime.Decision{Action: exec("echo ok")})
	require.True(t, got.Ended, "the step that used up the budget says the episode ended")
	require.NotNil(t, got.Step)
	require.Equal(t, runtime.ExitMaxSteps, ep.Result.Exit)
}

func TestDriverStopBetweenStepsIsCancelledWithTheDetail(t *testing.T) {
	ep := runner.Begin(Identity{EpisodeID: "e1"}, testTask("echo ok"), replica())
	d := ep.Drive(context.Background(), runtime.History{}, runtime.Limits{}, nil)
	_, err := d.Step(context.Background(), runtime.Decision{Action: exec("echo ok")})
	require.NoError(t, err)
	d.Stop(runtime.ExitCancelled, "the client closed the session")
	require.True(t, d.Ended())
	require.Equal(t, runtime.ExitCancelled, ep.Result.Exit)
	require.Equal(t, "the client closed the session", ep.Row.Detail)
	b, keep := ep.Rows()
	require.True(t, keep, "a cancelled episode with steps is kept")
	require.Len(t, b.Steps, 1)
	d.Stop(runtime.ExitCancelled, "again") // idempotent
	require.Equal(t, "the client closed the session", ep.Row.Detail)
}

func TestDriverEpisodeTimeoutWhileTheClientThinks(t *testing.T) {
	ep := runner.Begin(Identity{EpisodeID: "e1"}, testTask(""), replica())
	d := ep.Drive(context.Background(), runtime.History{}, runtime.Limits{EpisodeTimeout: 50 * time.Millisecond}, nil)
	require.Eventually(t, d.Ended, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, runtime.ExitTimeout, ep.Result.Exit)
	require.Contains(t, ep.Row.Detail, "waiting for the client's next action")
	got, err := d.Step(context.Background(), runtime.Decision{Action: exec("echo ok")})
	require.NoError(t, err)
	require.True(t, got.Ended)
	require.Nil(t, got.Step, "the action came after the end and was not taken")
	_, keep := ep.Rows()
	require.True(t, keep, "a timed-out episode is kept even without steps")
}

func TestDriverStepHonoursItsContextBeforeTheActionIsTaken(t *testing.T) {
	ep := runner.Begin(Identity{EpisodeID: "e1"}, testTask(""), replica())
	ctx, cancel := context.WithCancel(context.Background())
	d := ep.Drive(ctx, runtime.History{}, runtime.Limits{}, nil)
	cancel()
	require.NoError(t, d.Wait())
	require.Equal(t, runtime.ExitCancelled, ep.Result.Exit)
	got, err := d.Step(context.Background(), runtime.Decision{Action: exec("echo ok")})
	require.NoError(t, err)
	require.True(t, got.Ended)
}
