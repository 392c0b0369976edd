package manifest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

func ptr[T any](v T) *T { return &v }

type fixedSource struct{ conv *policy.Conversation }

func (s fixedSource) NewPolicy(policy.Episode) (runtime.Policy, error) { return nil, nil }

type talkingSource struct{ fixedSource }

func (s talkingSource) Conversation() (policy.Conversation, error) { return *s.conv, nil }

// A manifest the collector wrote before this package existed (commit
// e227819, an openai run with tool_mode=text and a system prompt file;
// only its base_url and prompt path were changed by hand) still reads, to
// the same conversation.
func TestOldManifestFixtureReads(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "manifest-e227819-openai.json"))
	require.NoError(t, err)
	var m struct {
		Policy json.RawMessage `json:"policy"`
	}
	require.NoError(t, json.Unmarshal(raw, &m))
	r, err := DecodePolicy(m.Policy)
	require.NoError(t, err)
	require.Equal(t, "openai", r.Name)
	require.Equal(t, "", r.ScriptFile)
	require.Equal(t, ptr(""), r.ScriptSHA256)
	require.Equal(t, "text", r.Options["tool_mode"])
	require.NotNil(t, r.Conversation)
	c := *r.Conversation
	require.True(t, strings.HasPrefix(c.SystemPrompt, "You fix shell tasks.\nTools:\n- exec: Run a shell command"), c.SystemPrompt)
	require.Equal(t, policy.ToolsText, c.ToolMode)
	require.Equal(t, []runtime.ActionKind{runtime.ActExec, runtime.ActWriteFile, runtime.ActDone}, c.Actions)
	require.Equal(t, 4096, c.ObservationCap)
	require.Nil(t, c.EnableThinking)
	shown, err := r.Shown()
	require.NoError(t, err)
	require.Equal(t, c, shown)

	// Written again, it takes the typed form and reads back the same.
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.Contains(t, string(b), `"actions":["exec","write_file","done"]`)
	require.Contains(t, string(b), `"observation_cap":4096`)
	again, err := DecodePolicy(b)
	require.NoError(t, err)
	require.Equal(t, c, *again.Conversation)
}

// Manifests without a conversation (older collectors, other tools) give
// the exporter what their options say; a recorded conversation wins over
// options of the same name.
func TestShownFallsBackToOptions(t *testing.T) {
	r, err := DecodePolicy([]byte(`{"name":"openai","options":{"system":"old name","enable_thinking":"true","actions":"exec,done","observation_cap":"20","tool_mode":"text"}}`))
	require.NoError(t, err)
	require.Nil(t, r.Conversation, "nothing was recorded: a resume has nothing to compare")
	c, err := r.Shown()
	require.NoError(t, err)
	require.Equal(t, policy.Conversation{SystemPrompt: "old name", ToolMode: policy.ToolsText, Actions: []runtime.ActionKind{runtime.ActExec, runtime.ActDone},
		ObservationCap: 20, EnableThinking: ptr(true)}, c)

	r, err = DecodePolicy([]byte(`{"name":"openai","options":{"observation_cap":"20","enable_thinking":"false"},"conversation":{"system_prompt":"rendered","observation_cap":"16384"}}`))
	require.NoError(t, err)
	c, err = r.Shown()
	require.NoError(t, err)
	require.Equal(t, "rendered", c.SystemPrompt)
	require.Equal(t, 16384, c.ObservationCap, "the recorded conversation wins")
	require.Equal(t, ptr(false), c.EnableThinking, "what the conversation leaves out comes from the options")

	r, err = DecodePolicy([]byte(`{"name":"x","options":{"enable_thinking":"maybe"}}`))
	require.NoError(t, err)
	_, err = r.Shown()
	require.ErrorContains(t, err, `enable_thinking="maybe" is not a boolean`)

	r, err = DecodePolicy([]byte(`{"name":"script","options":{}}`))
	require.NoError(t, err)
	c, err = r.Shown()
	require.NoError(t, err)
	require.Equal(t, policy.Conversation{}, c, "a script run had no conversation: neutral values")
}

func TestNewPolicy(t *testing.T) {
	script := filepath.Join(t.TempDir(), "acts.jsonl")
	require.NoError(t, os.WriteFile(script, []byte(`{"kind":"done"}`+"\n"), 0o644))
	r, err := NewPolicy("script", policy.Options{ScriptFile: script}, fixedSource{})
	require.NoError(t, err)
	require.Equal(t, "script", r.Name)
	require.Equal(t, map[string]string{}, r.Options, "never nil: the manifest says {} rather than null")
	require.Len(t, *r.ScriptSHA256, 64)
	require.Nil(t, r.Conversation, "a source without Conversational had none")

	_, err = NewPolicy("script", policy.Options{ScriptFile: filepath.Join(t.TempDir(), "missing")}, fixedSource{})
	require.ErrorContains(t, err, "policy: -script")

	conv := policy.Conversation{SystemPrompt: "s", ToolMode: policy.ToolsNative, ObservationCap: 7}
	params := map[string]string{"model": "m"}
	r, err = NewPolicy("openai", policy.Options{Params: params}, talkingSource{fixedSource{&conv}})
	require.NoError(t, err)
	require.Equal(t, &conv, r.Conversation)
	require.Equal(t, "", *r.ScriptSHA256)
	params["model"] = "changed"
	require.Equal(t, "m", r.Options["model"], "the record keeps its own copy of the options")
	shown, err := r.Shown()
	require.NoError(t, err)
	require.Equal(t, conv, shown)
}

// Options stand in for the token fields where the conversation leaves
// them out.
func TestShownTokenFieldsFromOptions(t *testing.T) {
	// Options stand in where the conversation leaves a field out.
	rec, err := DecodePolicy([]byte(`{"name":"openai","options":{"tokens":"tito","chat_template_kwargs":"{\"enable_thinking\": false}","send_reasoning":"false"},
		"conversation":{"system_prompt":"s"}}`))
	require.NoError(t, err)
	shown, err := rec.Shown()
	require.NoError(t, err)
	require.Equal(t, policy.TokensTITO, shown.Tokens)
	require.Equal(t, map[string]any{"enable_thinking": false}, shown.ChatTemplateKwargs)
	require.False(t, shown.SentReasoning())
	require.NotNil(t, shown.SendReasoning)

}
