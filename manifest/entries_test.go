package manifest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/providers"
)

// What a writer encodes, Read decodes to the same values: the policy's
// conversation with settings of every JSON type (a bool, a number, a list,
// an object), the provider with its capabilities, the plan with its part
// and source, each summary.
func TestReadWhatWritersEncode(t *testing.T) {
	caps := providers.Capabilities{Checkpoint: true, Fork: true, Isolation: "none", ForkMethod: "overlay"}
	prov := Provider{Name: "local", Capabilities: &caps, Params: map[string]string{"fork": "copy"}, Reset: "fork"}
	sum := ""
	pol := Policy{Name: "openai", ScriptSHA256: &sum, Options: map[string]string{"model": "m"},
		Conversation: &policy.Conversation{SystemPrompt: "s", ToolMode: policy.ToolsNative, TaskActions: true, ObservationCap: 4096,
			Observe: "a11y", EnableThinking: ptr(false), Tokens: policy.TokensTITO, ChatTemplateKwargs: map[string]any{"enable_thinking": false}}}
	plan := Plan{Repeats: 2, Seed: 3, Replicas: 4, Reset: "auto", Episodes: 6, Part: Part{Index: 1, Count: 2}, Total: 12,
		Branch: "at=2,width=4", From: &From{Dataset: "/d", RunID: "r", Roots: map[string]string{"a": "b"}}}
	rep := Collect{Planned: 6, Episodes: 6, ByExit: map[string]int{"done": 6}, ResetMS: map[string]Latency{"fork/overlay": {N: 6, P50: 1, P95: 2}}}
	summary, err := Summary{Collect: &rep}.Encode()
	require.NoError(t, err)
	m := shard.Manifest{Provider: prov.Encode(), Policy: pol.Encode(), Plan: plan.Encode(), Summary: summary,
		Capture: capture.DefaultPolicy().MarshalManifest()}

	e, problems := Read(m)
	require.Empty(t, problems)
	require.Equal(t, &prov, e.Provider)
	require.Equal(t, pol.Conversation, e.Policy.Conversation)
	require.Equal(t, pol.Options, e.Policy.Options)
	require.Equal(t, &plan, e.Plan)
	require.Equal(t, capture.DefaultPolicy(), e.Capture)
	require.Equal(t, &rep, e.Summary.Collect)
	require.Nil(t, e.Summary.Serve)
	require.Nil(t, e.Summary.Replay)
	require.Nil(t, e.Summary.Merge)

	// Each summary keeps its place: serve's under "serve", the others at
	// the top level, and reads back as the one that was written.
	for _, s := range []Summary{
		{Serve: &Serve{Addr: "127.0.0.1:1", Episodes: map[string]int{"done": 1}, ResetLatency: []ResetLatency{{Kind: "fork/overlay", Latency: Latency{N: 1, P50: 2, P95: 2}}}}},
		{Replay: &Replay{ReplayOf: "runs/a", Identical: 3, Diverged: 1}},
		{Merge: &Merge{MergedFrom: []MergedPart{{Dir: "p0", RunID: "r0", Part: Part{0, 2}, Status: shard.StatusComplete, Episodes: 3}}, MissingParts: []int{1}}},
	} {
		raw, err := s.Encode()
		require.NoError(t, err)
		back, err := DecodeSummary(raw)
		require.NoError(t, err)
		require.Equal(t, s, back, "%s", raw)
	}
	raw, _ := Summary{Serve: &Serve{}}.Encode()
	require.Contains(t, string(raw), `{"serve":{`)
}

// An entry its type cannot read is a problem naming the entry; the others
// are read all the same.
func TestReadNamesTheUnreadableEntry(t *testing.T) {
	m := shard.Manifest{
		Provider: json.RawMessage(`{"name": 3}`),
		Policy:   json.RawMessage(`{"name":"openai","conversation":{"actions":["fly"]}}`),
		Plan:     json.RawMessage(`{"repeats":2}`),
		Capture:  json.RawMessage(`{"pixels":"sometimes"}`),
		Summary:  json.RawMessage(`[]`),
	}
	e, problems := Read(m)
	var names []string
	for _, p := range problems {
		var ee *EntryError
		require.True(t, errors.As(p, &ee))
		names = append(names, ee.Entry)
	}
	require.Equal(t, []string{"provider", "policy", "capture", "summary"}, names)
	require.Equal(t, &Plan{Repeats: 2, Part: Part{Index: 0, Count: 1}}, e.Plan, "a plan without a part is the whole run")
	require.Nil(t, e.Provider)

	// Absent entries are nil, not problems.
	e, problems = Read(shard.Manifest{Policy: json.RawMessage("null")})
	require.Empty(t, problems)
	require.Nil(t, e.Policy)
	require.Equal(t, capture.DefaultPolicy(), e.Capture)
}
