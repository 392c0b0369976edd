package inspect

import (
	"math"
)

// maxDistinctRewards is how many distinct reward values are counted one by
// one (verifiers mostly give a few: 0, 0.5, 1). Past it the distribution is
// a histogram of histogramBins equal bins, counted in a second pass once
// the range is known.
const (
	maxDistinctRewards = 16
	histogramBins      = 10
)

// rewardTally is the first pass over a reward: count, sum, range and the
// distinct values while they are few.
type rewardTally struct {
	count, null int
	sum         float64
	min, max    float64
	distinct    map[float64]int // nil once there are more than maxDistinctRewards
}

func newRewardTally() *rewardTally { return &rewardTally{distinct: map[float64]int{}} }

func (t *rewardTally) add(v *float64) {
	if v == nil || math.IsNaN(*v) {
		t.null++
		return
	}
	x := *v
	if t.count == 0 || x < t.min {
		t.min = x
	}
	if t.count == 0 || x > t.max {
		t.max = x
	}
	t.count++
	t.sum += x
	if t.distinct != nil {
		t.distinct[x]++
		if len(t.distinct) > maxDistinctRewards {
			t.distinct = nil
		}
	}
}

// bins returns the histogramBins equal bins over [min, max] to count into.
func (t *rewardTally) bins() []Bin {
	out := make([]Bin, histogramBins)
	w := (t.max - t.min) / histogramBins
	for i := range out {
		out[i].Low = t.min + float64(i)*w
		out[i].High = t.min + float64(i+1)*w
	}
	out[len(out)-1].High = t.max
	return out
}

// binOf is the index of x's bin (the last bin holds max).
func binOf(bins []Bin, x float64) int {
	lo, hi := bins[0].Low, bins[len(bins)-1].High
	if hi <= lo {
		return 0
	}
	i := int(float64(len(bins)) * (x - lo) / (hi - lo))
	return min(max(i, 0), len(bins)-1)
}
