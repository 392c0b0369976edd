package tokens

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAssembleThreeTurns(t *testing.T) {
	turns := []Turn{
		{PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{10, 11}, Logprobs: []float32{-0.1, -0.2}},
		{PromptIDs: []int32{1, 2, 3, 10, 11, 50, 51, 52}, ResponseIDs: []int32{12}, Logprobs: []float32{-0.3}},
		{}, // a turn with no tokens (e.g. scripted) is skipped
		{PromptIDs: []int32{1, 2, 3, 10, 11, 50, 51, 52, 12, 60}, ResponseIDs: []int32{13, 14}, Logprobs: []float32{-0.4, -0.5}},
	}
	r, err := Assemble(turns)
	require.NoError(t, err)
	require.NoError(t, r.Check())
	require.False(t, r.Drift)
	require.Equal(t, 3, r.Turns)
	require.Equal(t, []int32{1, 2, 3}, r.PromptIDs)
	require.Equal(t, []int32{10, 11, 50, 51, 52, 12, 60, 13, 14}, r.ResponseIDs)
	require.Equal(t, []int32{1, 1, 0, 0, 0, 1, 0, 1, 1}, r.Mask)
	require.Equal(t, []float32{-0.1, -0.2, 0, 0, 0, -0.3, 0, -0.4, -0.5}, r.Logprobs)
}

func TestAssembleFlagsDriftInsteadOfMasking(t *testing.T) {
	turns := []Turn{
		{PromptIDs: []int32{1, 2}, ResponseIDs: []int32{10}, Logprobs: []float32{-1}},
		// The template re-rendered the earlier response as 99: not a prefix.
		{PromptIDs: []int32{1, 2, 99, 7}, ResponseIDs: []int32{11}, Logprobs: []float32{-1}},
	}
	r, err := Assemble(turns)
	require.NoError(t, err)
	require.True(t, r.Drift)
	require.Equal(t, 1, r.DriftTurn)
	require.Equal(t, 1, r.Turns)
	require.Equal(t, []int32{10}, r.ResponseIDs, "nothing after the drift is assembled")
	require.NoError(t, r.Check())
}

func TestAssembleWithoutLogprobsAndBadInput(t *testing.T) {
	r, err := Assemble([]Turn{{PromptIDs: []int32{1}, ResponseIDs: []int32{2, 3}}})
	require.NoError(t, err)
	require.Nil(t, r.Logprobs)
	require.Equal(t, []int32{1, 1}, r.Mask)
	_, err = Assemble([]Turn{{PromptIDs: []int32{1}, ResponseIDs: []int32{2, 3}, Logprobs: []float32{-1}}})
	require.ErrorContains(t, err, "1 logprobs for 2 response ids")
}
