package collect

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEpisodeSeedVariesByEpisodeAndIsStable(t *testing.T) {
	a, b := episodeSeed(7, "aaaa"), episodeSeed(7, "bbbb")
	require.NotEqual(t, a, b, "repeats must not sample alike")
	require.Equal(t, a, episodeSeed(7, "aaaa"), "a rerun sends the same seed")
	require.NotEqual(t, a, episodeSeed(8, "aaaa"))
	require.GreaterOrEqual(t, a, int64(0))
	require.GreaterOrEqual(t, b, int64(0))
}
