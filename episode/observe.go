package episode

import (
	"context"

	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/runtime"
)

// StepObserver is a step sink (for Rollout's watch) that tells obs of
// every step of the episode as soon as it is recorded: what a progress
// counter, a metrics recorder or a live view needs of it.
func StepObserver(obs observe.Observer, task, episodeID string) runtime.StepSink {
	return runtime.StepSinkFunc(func(_ context.Context, s runtime.Step) error {
		obs.Observe(StepEvent(task, episodeID, s))
		return nil
	})
}

// StepEvent is the observe form of a recorded step.
func StepEvent(task, episodeID string, s runtime.Step) observe.Step {
	e := observe.Step{Task: task, EpisodeID: episodeID, Index: s.Index, Action: string(s.Action.Kind),
		Policy: s.PolicyTime, Env: s.EnvTime}
	if s.Model != nil {
		e.ModelTurn = true
		e.PromptTokens, e.CompletionTokens = s.Model.Usage.PromptTokens, s.Model.Usage.CompletionTokens
	}
	return e
}

// ChainSinks is a sink that writes each step to every non-nil sink in
// order, stopping at the first error.
func ChainSinks(sinks ...runtime.StepSink) runtime.StepSink {
	return runtime.StepSinkFunc(func(ctx context.Context, s runtime.Step) error {
		for _, k := range sinks {
			if k == nil {
				continue
			}
			if err := k.WriteStep(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
}
