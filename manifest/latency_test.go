package manifest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The one quantile rule: nearest rank, always one of the values. Before
// it, collect and inspect rounded a linear index (p50 of 100 and 120 was
// 120) and serve took the nearest rank (100), so serve and inspect
// disagreed on the same samples.
func TestQuantileIsTheNearestRank(t *testing.T) {
	for _, tc := range []struct {
		vals     []float64
		p50, p95 float64
	}{
		{nil, 0, 0},
		{[]float64{7}, 7, 7},
		{[]float64{120, 100}, 100, 120},
		{[]float64{3, 1, 2}, 2, 3},
		{[]float64{4, 1, 3, 2}, 2, 4},
	} {
		var s Sample
		for _, v := range tc.vals {
			s.Add(v)
		}
		require.Equal(t, Latency{N: len(tc.vals), P50: tc.p50, P95: tc.p95}, s.Latency(), "%v", tc.vals)
		require.Equal(t, tc.p50, s.Quantile(0.5))
		require.True(t, s.Exact())
	}
	// 1..100: the 95th value is 95, the 50th is 50.
	var s Sample
	for i := 100; i >= 1; i-- {
		s.Add(float64(i))
	}
	require.Equal(t, Latency{N: 100, P50: 50, P95: 95}, s.Latency())
	// 1..60: rank ⌈0.95·60⌉ = 57.
	s = Sample{}
	for i := 1; i <= 60; i++ {
		s.Add(float64(i))
	}
	require.Equal(t, 57.0, s.Quantile(0.95))
}

// Past SampleSize values the sample stays bounded and the quantiles come
// from it.
func TestSampleIsBounded(t *testing.T) {
	var s Sample
	for i := range 3 * SampleSize {
		s.Add(float64(i % 10))
	}
	require.Equal(t, 3*SampleSize, s.N())
	require.False(t, s.Exact())
	require.Len(t, s.vals, SampleSize)
	l := s.Latency()
	require.GreaterOrEqual(t, l.P50, 3.0)
	require.LessOrEqual(t, l.P50, 6.0)
}
