package openai

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

func TestEpisodeSeedVariesByEpisodeAndIsStable(t *testing.T) {
	a, b := episodeSeed(7, "aaaa"), episodeSeed(7, "bbbb")
	require.NotEqual(t, a, b, "repeats must not sample alike")
	require.Equal(t, a, episodeSeed(7, "aaaa"), "a rerun sends the same seed")
	require.NotEqual(t, a, episodeSeed(8, "aaaa"))
	require.GreaterOrEqual(t, a, int64(0))
	require.GreaterOrEqual(t, b, int64(0))
}

func TestRegisteredAndOpened(t *testing.T) {
	require.Contains(t, policy.Names(), Name)
	_, err := policy.Open(Name, policy.Options{Params: map[string]string{"temprature": "1", "base_url": "http://127.0.0.1:1/v1"}})
	require.ErrorIs(t, err, ErrOption)
	require.ErrorContains(t, err, `unknown option "temprature"`)

	var logged []string
	src, err := policy.Open(Name, policy.Options{
		Params: map[string]string{"base_url": "http://127.0.0.1:1/v1", "seed": "7", "tool_mode": "text", "actions": "exec,done"},
		Log:    func(format string, args ...any) { logged = append(logged, format) },
	})
	require.NoError(t, err)

	conv, ok := src.(policy.Conversational)
	require.True(t, ok, "the LLM policy records its conversation")
	c, err := conv.Conversation()
	require.NoError(t, err)
	require.Equal(t, policy.ToolsText, c.ToolMode)
	require.Equal(t, []runtime.ActionKind{runtime.ActExec, runtime.ActDone}, c.Actions)
	require.Equal(t, DefaultObservationCap, c.ObservationCap)
	require.Contains(t, c.SystemPrompt, "<tool_call>", "the text dialect is in the rendered prompt")
	require.Nil(t, c.EnableThinking)

	p, err := src.NewPolicy(policy.Episode{ID: "ep-1"})
	require.NoError(t, err)
	got := p.(*Policy)
	require.Equal(t, episodeSeed(7, "ep-1"), *got.cfg.Seed, "the seed is mixed with the episode id")
	require.NotNil(t, got.cfg.Logf, "retries go to the log")
	p, err = src.NewPolicy(policy.Episode{})
	require.NoError(t, err)
	require.Equal(t, int64(7), *p.(*Policy).cfg.Seed, "the check before the run has no episode to mix in")

	_, err = src.NewPolicy(policy.Episode{ID: "e", Actions: []runtime.ActionKind{runtime.ActDone}})
	require.ErrorContains(t, err, "the task does not allow action exec")
	_, err = src.NewPolicy(policy.Episode{ID: "e", Actions: []runtime.ActionKind{runtime.ActExec, runtime.ActDone, runtime.ActReadFile}})
	require.NoError(t, err, "a task may allow more than is offered")
}
