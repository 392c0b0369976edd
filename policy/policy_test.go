package policy

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/runtime"
)

type fixedSource struct{}

func (s fixedSource) NewPolicy(Episode) (runtime.Policy, error) { return nil, nil }

func TestRegisterRefusesProgrammingErrors(t *testing.T) {
	ok := func(Options) (Source, error) { return fixedSource{}, nil }
	require.PanicsWithValue(t, "policy: Register with an empty name", func() { Register("", ok) })
	require.PanicsWithValue(t, "policy: Register of test-nil with a nil factory", func() { Register("test-nil", nil) })
	Register("test-dup", ok)
	require.PanicsWithValue(t, "policy: Register called twice for test-dup", func() { Register("test-dup", ok) })
}

func TestOpenByNameAndUnknownNamesTheKnown(t *testing.T) {
	var got Options
	Register("test-b", func(o Options) (Source, error) { got = o; return fixedSource{}, nil })
	Register("test-a", func(Options) (Source, error) { return fixedSource{}, nil })
	require.True(t, slices.IsSorted(Names()))
	require.Subset(t, Names(), []string{"test-a", "test-b"})

	_, err := Open("test-b", Options{Params: map[string]string{"k": "v"}})
	require.NoError(t, err)
	require.Equal(t, "v", got.Params["k"], "the factory gets the options")

	_, err = Open("test-nope", Options{})
	require.ErrorContains(t, err, `policy: unknown policy "test-nope" (known: `)
	require.ErrorContains(t, err, "test-a, test-b")
}

func ptr[T any](v T) *T { return &v }

// The typed form is what this build writes: actions a list, the cap a
// number.
func TestConversationTypedForm(t *testing.T) {
	c := Conversation{SystemPrompt: "sys", ToolMode: ToolsText, Actions: []runtime.ActionKind{runtime.ActExec, runtime.ActDone},
		ObservationCap: 100, EnableThinking: ptr(false)}
	b, err := json.Marshal(c)
	require.NoError(t, err)
	require.JSONEq(t, `{"system_prompt":"sys","tool_mode":"text","actions":["exec","done"],"observation_cap":100,"enable_thinking":false}`, string(b))
	var back Conversation
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, c, back)
	require.True(t, back.TextToolCalls())
	require.Empty(t, back.Diff(c))
}

// The form collectors wrote before the conversation was typed: every value
// a string.
func TestConversationOldFormDecodes(t *testing.T) {
	var c Conversation
	require.NoError(t, json.Unmarshal([]byte(`{"system_prompt":"sys","tool_mode":"native","actions":"exec, read_file,done","observation_cap":"16384"}`), &c))
	require.Equal(t, Conversation{SystemPrompt: "sys", ToolMode: ToolsNative,
		Actions: []runtime.ActionKind{runtime.ActExec, runtime.ActReadFile, runtime.ActDone}, ObservationCap: 16384}, c)
	require.False(t, c.TextToolCalls())
}

func TestConversationRefusesWhatItCannotRead(t *testing.T) {
	for name, c := range map[string]struct{ json, want string }{
		"unknownAction":  {`{"actions":"exec,fly"}`, `names unknown action "fly"`},
		"unknownInList":  {`{"actions":["exec","fly"]}`, `names unknown action "fly"`},
		"negativeCap":    {`{"observation_cap":-1}`, `observation_cap=-1 is not a byte count`},
		"capNotANumber":  {`{"observation_cap":"lots"}`, `is not a byte count`},
		"thinkingString": {`{"enable_thinking":"perhaps"}`, `enable_thinking="perhaps" is not a boolean`},
		"actionsObject":  {`{"actions":{"exec":true}}`, `is not a list of actions`},
	} {
		t.Run(name, func(t *testing.T) {
			var conv Conversation
			require.ErrorContains(t, json.Unmarshal([]byte(c.json), &conv), c.want)
		})
	}
}

func TestConversationDiffNamesTheFields(t *testing.T) {
	a := Conversation{SystemPrompt: "x", ToolMode: ToolsNative, ObservationCap: 5}
	b := a
	b.SystemPrompt, b.Actions, b.EnableThinking = "y", []runtime.ActionKind{runtime.ActExec}, ptr(true)
	require.Equal(t, []string{"system_prompt", "actions", "enable_thinking"}, a.Diff(b))
	c := b
	c.EnableThinking = ptr(false)
	require.Equal(t, []string{"enable_thinking"}, b.Diff(c))
}

// The fields token-in-token-out added: typed, compared by a resume, and
// read from the options' string form where a manifest has no conversation.
func TestConversationTokenFields(t *testing.T) {
	c := Conversation{Tokens: TokensTITO, ToolParser: "hermes", ReasoningParser: "qwen3",
		ChatTemplateKwargs: map[string]any{"enable_thinking": false, "truncate_history_thinking": true},
		SendReasoning:      ptr(true), ToolKeyOrder: "canonical", EnableThinking: ptr(false)}
	b, err := json.Marshal(c)
	require.NoError(t, err)
	require.JSONEq(t, `{"system_prompt":"","observation_cap":0,"enable_thinking":false,"tokens":"tito","tool_parser":"hermes",
		"reasoning_parser":"qwen3","chat_template_kwargs":{"enable_thinking":false,"truncate_history_thinking":true},
		"send_reasoning":true,"tool_key_order":"canonical"}`, string(b))
	var back Conversation
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, c, back)
	require.Empty(t, back.Diff(c))
	require.True(t, back.SentReasoning())
	require.Equal(t, "canonical", back.ToolOrder())

	other := c
	other.Tokens, other.ChatTemplateKwargs, other.SendReasoning = TokensChat, map[string]any{"enable_thinking": true}, nil
	require.Equal(t, []string{"tokens", "chat_template_kwargs", "send_reasoning"}, c.Diff(other))

	// A manifest that predates them: chat, sorted tool keys, no reasoning sent.
	var old Conversation
	require.NoError(t, json.Unmarshal([]byte(`{"system_prompt":"s"}`), &old))
	require.Equal(t, "sorted", old.ToolOrder())
	require.False(t, old.SentReasoning())
	require.Empty(t, old.Tokens)

	for name, bad := range map[string]struct{ json, want string }{
		"mode":   {`{"tokens":"psychic"}`, `tokens="psychic" is not a token mode`},
		"kwargs": {`{"chat_template_kwargs":"[1]"}`, `chat_template_kwargs: [1] is not a JSON object`},
		"bool":   {`{"send_reasoning":"maybe"}`, `send_reasoning="maybe" is not a boolean`},
	} {
		var c Conversation
		err := json.Unmarshal([]byte(bad.json), &c)
		require.ErrorContains(t, err, bad.want, name)
	}
}
