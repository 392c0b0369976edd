package tokens

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAssembleThreeTurns(t *testing.T) {
	turns := []Turn{
		{PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{10, 11}, Logprobs: []float32{-0.1, -0.2}},
		{PromptIDs: []int32{1, 2, 3, 10, 11, 50, 51, 52}, ResponseIDs: []int32{12}, Logprobs: []float32{-0.3}},
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
	require.Equal(t, CutDrift, r.Cut)
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

// A model turn that came back without ids is not skipped: its response would
// end up in the next prompt's extension and be masked 0 as if the
// environment had written it. The record stops before it and says why.
func TestAssembleCutsAtATurnWithoutIDs(t *testing.T) {
	turns := []Turn{
		{PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{10, 11}, Logprobs: []float32{-0.1, -0.2}},
		{}, // the server returned no ids for this model turn
		{PromptIDs: []int32{1, 2, 3, 10, 11, 50, 20, 21, 51}, ResponseIDs: []int32{13}, Logprobs: []float32{-0.4}},
	}
	r, err := Assemble(turns)
	require.NoError(t, err)
	require.NoError(t, r.Check())
	require.True(t, r.Drift)
	require.Equal(t, CutMissingIDs, r.Cut)
	require.Equal(t, 1, r.DriftTurn)
	require.Equal(t, 1, r.Turns)
	require.Equal(t, []int32{10, 11}, r.ResponseIDs)
	require.Equal(t, []int32{1, 1}, r.Mask, "the unknown turn's tokens (20, 21) are never masked 0")

	// Only the response missing is the same cut.
	r, err = Assemble([]Turn{turns[0], {PromptIDs: turns[2].PromptIDs}})
	require.NoError(t, err)
	require.Equal(t, CutMissingIDs, r.Cut)

	// The first turn without ids: an empty record, flagged.
	r, err = Assemble([]Turn{{}, turns[2]})
	require.NoError(t, err)
	require.True(t, r.Drift)
	require.Equal(t, 0, r.Turns)
	require.Empty(t, r.PromptIDs)
	require.Nil(t, r.Logprobs)

	// No turn with ids at all (a server that reports none): no record, and
	// nothing to flag.
	r, err = Assemble([]Turn{{}, {}})
	require.NoError(t, err)
	require.False(t, r.Drift)
	require.Empty(t, r.Cut)
	require.Zero(t, r.Turns)
}
