package manifest

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Latency is a distribution of durations in milliseconds: how many there
// were, and their median and 95th percentile by the one rule every command
// uses (Sample.Quantile), so collect's summary, serve's and inspect's agree
// on the same samples.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}

// SampleSize bounds the values a Sample keeps. Up to this many the
// quantiles are exact; beyond it they come from a uniform sample of this
// size.
const SampleSize = 4096

// Sample keeps a uniform sample of at most SampleSize values (Vitter's
// algorithm R, with a fixed seed so that the same values in the same order
// give the same quantiles), so quantiles cost bounded memory on any run
// length. The zero value is ready to use. It is not safe for concurrent use.
type Sample struct {
	n    int
	vals []float64
	rng  *rand.Rand
}

// Add counts v.
func (s *Sample) Add(v float64) {
	s.n++
	if len(s.vals) < SampleSize {
		s.vals = append(s.vals, v)
		return
	}
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(1, 2))
	}
	if j := s.rng.IntN(s.n); j < SampleSize {
		s.vals[j] = v
	}
}

// N is how many values were added.
func (s *Sample) N() int { return s.n }

// Exact reports whether the sample holds every value added.
func (s *Sample) Exact() bool { return s.n <= SampleSize }

// Quantile is the nearest-rank quantile q (0 < q <= 1) of the sample: the
// smallest value v such that at least q of the values are <= v (the value
// of rank ⌈q·n⌉ in ascending order). It is always one of the values, and
// 0 for an empty sample.
//
// Nearest rank, not linear interpolation (numpy's default, which makes the
// p50 of 1..4 2.5): a reported latency is then one a reset really took, the
// rule needs no choice among interpolation methods to reproduce, and a p95
// over few resets names the slowest one instead of a figure between two.
// Every consumer (collect's summary, serve's stats, inspect) goes through
// Sample, so the same samples give the same figures everywhere.
func (s *Sample) Quantile(q float64) float64 {
	if len(s.vals) == 0 {
		return 0
	}
	sorted := slices.Clone(s.vals)
	slices.Sort(sorted)
	return nearestRank(sorted, q)
}

// Latency is the sample's distribution.
func (s *Sample) Latency() Latency {
	if len(s.vals) == 0 {
		return Latency{N: s.n}
	}
	sorted := slices.Clone(s.vals)
	slices.Sort(sorted)
	return Latency{N: s.n, P50: nearestRank(sorted, 0.5), P95: nearestRank(sorted, 0.95)}
}

func nearestRank(sorted []float64, q float64) float64 {
	// The epsilon keeps a product that floating point puts a hair above an
	// integer on that integer.
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
