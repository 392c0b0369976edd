package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/forkline/forkline/harness"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// Replay. An agent episode is replayed by running its harness again, in a
// fresh fork, against the record instead of a model: the gateway answers
// the harness's trajectory call k with step k's recorded reply (its text,
// reasoning and tool calls, the call ids included) and its side calls with
// the recorded side replies, in order. The harness executes the same tool
// calls again, and what it sends back — the results — is the replayed
// step's observation, compared with the recorded one as any replayed
// step's is; a harness that makes more calls than the record holds is
// refused the extra one, and the replay ends there (policy_error). The
// model server is not asked. The harness must be installed where the
// replay runs (forkline images -agent), at the version the episode's
// agent record names.

// ReplaySource makes the policies that replay agent episodes.
type ReplaySource struct{ s *source }

// OpenReplay opens the agent policy for replaying episodes recorded with
// params (the manifest's policy options): the harness, its command, its
// install directory and the relay; the model server's options are not
// used.
func OpenReplay(params map[string]string) (*ReplaySource, error) {
	cfg := config{episodeTimeout: DefaultEpisodeTimeout, port: DefaultGatewayPort}
	for k, v := range params {
		switch k {
		case "harness":
			cfg.harness = v
		case "cmd":
			cfg.cmd = v
		case "agents_dir":
			cfg.agentsDir = v
		case "relay":
			cfg.relay = v
		case "model":
			cfg.model = v
		}
	}
	if cfg.model == "" {
		cfg.model = "forkline"
	}
	s := &source{cfg: cfg}
	if cfg.harness != harness.Command {
		var err error
		if s.install, err = harness.Find(cfg.harness, cfg.agentsDir); err != nil {
			return nil, fmt.Errorf("agent: replaying %s episodes: %w", cfg.harness, err)
		}
	}
	return &ReplaySource{s: s}, nil
}

// ShapeSpec implements episode.SpecShaper, as the agent policy does.
func (r *ReplaySource) ShapeSpec(prov providers.Provider, spec *providers.Spec) error {
	return r.s.ShapeSpec(prov, spec)
}

// Close stops the replay's gateway.
func (r *ReplaySource) Close() error { return r.s.Close() }

// Policy is the policy that replays one episode: episodeID's trajectory
// calls answered with steps' model turns, in order, its side calls with
// side (the recorded side replies' texts, in order).
func (r *ReplaySource) Policy(episodeID string, steps []runtime.Step, side []string) runtime.Policy {
	return &episodePolicy{src: r.s, ep: policy.Episode{ID: episodeID}, replay: &recorded{steps: steps, side: side}}
}

// recorded is what a replayed episode's harness is answered with.
type recorded struct {
	steps []runtime.Step
	side  []string
	mu    sync.Mutex
	next  int
}

// ErrPastTheRecord is wrapped by the error of a replayed harness's call
// beyond the recorded ones.
var ErrPastTheRecord = errors.New("agent: the harness made a model call the record does not hold")

func (r *recorded) main() model { return recordedModel{r} }

// recordedModel answers trajectory calls in order.
type recordedModel struct{ r *recorded }

func (m recordedModel) Call(_ context.Context, _ []openai.ThreadMessage, _ []json.RawMessage, _ bool) (*openai.ThreadReply, error) {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	k := m.r.next
	if k >= len(m.r.steps) || m.r.steps[k].Model == nil {
		return nil, fmt.Errorf("%w: call %d of %d recorded", ErrPastTheRecord, k+1, len(m.r.steps))
	}
	m.r.next++
	ev := *m.r.steps[k].Model
	ev.PromptIDs, ev.ResponseIDs, ev.ResponseMask, ev.Logprobs = nil, nil, nil, nil // nothing was generated
	rep := &openai.ThreadReply{Content: ev.RawText, Reasoning: ev.Reasoning, Calls: ev.ToolCalls, Finish: ev.FinishReason, Event: &ev}
	if rep.Finish == "" {
		rep.Finish = "stop"
		if len(rep.Calls) > 0 {
			rep.Finish = "tool_calls"
		}
	}
	return rep, nil
}

// sideModel answers side call n with the recorded side reply n ("" when
// the record holds none).
func (r *recorded) sideModel(n int) (model, error) {
	text := ""
	if n < len(r.side) {
		text = r.side[n]
	}
	return sideReply(text), nil
}

type sideReply string

func (s sideReply) Call(context.Context, []openai.ThreadMessage, []json.RawMessage, bool) (*openai.ThreadReply, error) {
	return &openai.ThreadReply{Content: string(s), Finish: "stop", Event: &runtime.ModelEvent{RawText: string(s), FinishReason: "stop"}}, nil
}
