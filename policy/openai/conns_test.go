package openai

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/policy/openai/openaitest"
	"github.com/forkline/forkline/runtime"
)

// Episodes running side by side reuse their connections to the model
// server between their steps, where Go's default transport (two idle
// connections kept per host) dialled a new one for nearly every request
// after the first round (149-202 connections here, 24-39 now). The bound
// is three times the requests in flight at once: a request that finds no
// idle connection dials one, and when another request's connection comes
// free first it takes that one, the dialled connection going idle (Go's
// transport does not cancel the dial).
func TestEpisodesReuseConnections(t *testing.T) {
	const episodes, turns = 24, 8
	srv := openaitest.Start(t, openaitest.Options{Model: func(openaitest.Request) (openaitest.Turn, error) {
		time.Sleep(20 * time.Millisecond) // the answers overlap
		return openaitest.Turn{ToolCalls: []openaitest.ToolCall{call("call_x", "exec", `{"cmd":"true"}`)}}, nil
	}})
	var wg sync.WaitGroup
	errs := make(chan error, episodes)
	for range episodes {
		p := newPolicy(t, srv, nil)
		wg.Go(func() {
			h := runtime.History{Instruction: "scenario: any. Work."}
			for range turns {
				d, err := p.Decide(context.Background(), h)
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(10 * time.Millisecond) // the step's command runs
				h.Steps = append(h.Steps, runtime.Step{Index: len(h.Steps), Action: d.Action, Model: d.Model,
					Observation: runtime.Observation{Output: []byte("ok\n")}})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d connections", srv.Connections())
	require.LessOrEqual(t, srv.Connections(), int64(3*episodes), "connections for %d requests, at most %d in flight", episodes*turns, episodes)
}
