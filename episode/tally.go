package episode

import (
	"slices"
	"sort"
	"sync"

	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// Tally is a run's summary as its events tell it: every consumer of this
// package (collect, replay, serve) hands it the events its Runner emits, so
// one episode counts the same way wherever it ran — one reset-latency
// type, one percentile function (manifest.Sample), one rule for what a
// kept episode, a scaffold loss or a reward is. It is an observe.Observer
// and keeps bounded memory whatever the number of episodes: counters,
// latency samples in fixed-size reservoirs, at most MaxDistinctErrors
// error texts.
//
// A resumed run tells it of the episodes kept before it with Kept, so a
// summary covers the whole dataset; the "Ran" figures are this
// invocation's.
type Tally struct {
	mu sync.Mutex
	// firstError, when set, is called (outside the lock) for each scaffold
	// loss whose error this invocation had not met yet: the consumer logs
	// each distinct error once.
	firstError func(observe.EpisodeEnded)

	ended      map[string]int // every episode that ended, by exit reason
	kept       int
	keptBefore int
	ran        int // kept by this invocation
	steps      int64
	ranSteps   int64
	stepEvents int
	byExit     map[string]int // kept episodes by exit reason
	ranLosses  int
	rewarded   int
	missing    int
	rewardSum  float64
	drift      int
	resets     int
	reset      map[string]*manifest.Sample
	golden     map[string]float64
	errs       ErrorTally
}

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{ended: map[string]int{}, byExit: map[string]int{},
		reset: map[string]*manifest.Sample{}, golden: map[string]float64{}}
}

// ResetKind is the key of a reset in the summaries: the reset_strategy
// column ("fork+standby"), then the provider's origin ("fork+standby/overlay").
func ResetKind(strategy, origin string) string {
	if origin == "" {
		return strategy
	}
	return strategy + "/" + origin
}

// Observe counts e.
func (t *Tally) Observe(e observe.Event) {
	switch e := e.(type) {
	case observe.Reset:
		t.addReset(ResetKind(e.Strategy, e.Method), schemas.Millis(e.Took))
		if e.GoldenBuild > 0 {
			t.mu.Lock()
			t.golden[e.Task] = schemas.Millis(e.GoldenBuild)
			t.mu.Unlock()
		}
	case observe.Step:
		t.mu.Lock()
		t.stepEvents++
		t.mu.Unlock()
	case observe.EpisodeEnded:
		if t.ended1(e, true) {
			t.mu.Lock()
			f := t.firstError
			t.mu.Unlock()
			if f != nil {
				f(e)
			}
		}
	}
}

// OnFirstError makes f be told of each scaffold loss whose error this
// invocation meets for the first time (the consumer logs each distinct
// error once).
func (t *Tally) OnFirstError(f func(observe.EpisodeEnded)) {
	t.mu.Lock()
	t.firstError = f
	t.mu.Unlock()
}

func (t *Tally) addReset(kind string, ms float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resets++
	if t.reset[kind] == nil {
		t.reset[kind] = &manifest.Sample{}
	}
	t.reset[kind].Add(ms)
}

// ended1 counts an episode's end; thisRun is false for one a resumed run
// kept before. It reports whether the episode is a scaffold loss whose
// error this invocation had not met yet.
func (t *Tally) ended1(e observe.EpisodeEnded, thisRun bool) (firstError bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended[e.Exit]++
	if !e.Kept {
		return false
	}
	t.kept++
	t.steps += int64(e.Steps)
	t.byExit[e.Exit]++
	if thisRun {
		t.ran++
		t.ranSteps += int64(e.Steps)
	} else {
		t.keptBefore++
	}
	if e.TokenDrift {
		t.drift++
	}
	switch {
	case e.Reward != nil:
		t.rewarded++
		t.rewardSum += *e.Reward
	case e.RewardMissing:
		t.missing++
	}
	if e.ScaffoldLoss {
		if thisRun {
			t.ranLosses++
		}
		return t.errs.Add(e.Exit, e.Detail, thisRun)
	}
	return false
}

// Kept counts an episode a resumed run kept before this invocation, from
// its rows (reward is its verifier's row, nil when it has none): the
// events it sent when it ran, told again.
func (t *Tally) Kept(ep schemas.EpisodeRow, reward *schemas.RewardRow) {
	if ep.ResetMS > 0 { // a replica was really acquired
		t.addReset(ResetKind(ep.ResetStrategy, ep.ResetOrigin), ep.ResetMS)
	}
	if ep.GoldenID != "" {
		t.mu.Lock()
		t.golden[ep.TaskID] = ep.GoldenBuildMS
		t.mu.Unlock()
	}
	t.ended1(EndedEvent(ep, reward, true, ""), false)
}

// EndedEvent is the observe event of an episode that ended with row ep and
// verifier reward row reward (nil: none).
func EndedEvent(ep schemas.EpisodeRow, reward *schemas.RewardRow, kept bool, status string) observe.EpisodeEnded {
	e := observe.EpisodeEnded{Task: ep.TaskID, EpisodeID: ep.EpisodeID, Exit: ep.ExitReason, Detail: ep.Detail,
		ScaffoldLoss: runtimeLoss(ep.ExitReason), Steps: int(ep.Steps), Kept: kept, TokenDrift: ep.TokenDrift,
		Status: status, Took: msDuration(ep.DurationMS)}
	if reward != nil {
		e.Reward, e.RewardMissing = reward.Value, reward.Value == nil
	}
	return e
}

func runtimeLoss(exit string) bool { return runtime.ParseExitReason(exit).ScaffoldLoss() }

// VerifierReward is the episode-level verifier reward among rows, nil when
// there is none: a Harbor reward.json's further metrics are rows of their
// own and no part of the episode's reward.
func VerifierReward(rows []schemas.RewardRow) *schemas.RewardRow {
	for i := range rows {
		if rows[i].StepIndex == nil && rows[i].Name == task.RewardName {
			return &rows[i]
		}
	}
	return nil
}

// RanLosses is the scaffold losses this invocation kept (what a loss
// limit counts).
func (t *Tally) RanLosses() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ranLosses
}

// Ran is the episodes this invocation kept so far.
func (t *Tally) Ran() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ran
}

// KeptBy returns how many kept episodes ended with exit.
func (t *Tally) KeptBy(exit string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byExit[exit]
}

// Counts is a tally's figures at one moment.
type Counts struct {
	Ended          map[string]int // every episode that ended, kept or not, by exit reason
	Kept           int            // kept in the dataset (before and by this invocation)
	KeptBefore     int            // kept before this invocation (a resume)
	Ran            int            // kept by this invocation
	Steps          int64          // of the kept episodes
	RanSteps       int64          // of the episodes this invocation kept
	StepEvents     int            // steps this invocation took, kept or not
	ByExit         map[string]int // kept episodes by exit reason
	RanLosses      int
	Errors         []manifest.ErrorCount
	OtherErrors    int
	Rewarded       int
	RewardsMissing int
	RewardMean     *float64
	TokenDrift     int
	Resets         int
	ResetMS        map[string]manifest.Latency
	GoldenBuildMS  map[string]float64
}

// Counts returns the figures so far.
func (t *Tally) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := Counts{Ended: map[string]int{}, Kept: t.kept, KeptBefore: t.keptBefore, Ran: t.ran, Steps: t.steps,
		RanSteps: t.ranSteps, StepEvents: t.stepEvents, ByExit: map[string]int{}, RanLosses: t.ranLosses,
		Errors: t.errs.Report(), OtherErrors: t.errs.Other, Rewarded: t.rewarded, RewardsMissing: t.missing,
		TokenDrift: t.drift, Resets: t.resets, ResetMS: map[string]manifest.Latency{}, GoldenBuildMS: map[string]float64{}}
	for k, v := range t.ended {
		c.Ended[k] = v
	}
	for k, v := range t.byExit {
		c.ByExit[k] = v
	}
	if t.rewarded > 0 {
		m := t.rewardSum / float64(t.rewarded)
		c.RewardMean = &m
	}
	for k, s := range t.reset {
		c.ResetMS[k] = s.Latency()
	}
	for k, v := range t.golden {
		c.GoldenBuildMS[k] = v
	}
	return c
}

// RepeatedErrors calls f, under the tally's lock, for each distinct error
// this invocation met that more than one episode of the dataset ended with.
func (t *Tally) RepeatedErrors(f func(manifest.ErrorCount)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errs.Repeated(f)
}

// MaxDistinctErrors bounds the error texts a tally keeps; further
// distinct ones are only counted.
const MaxDistinctErrors = 32

// ErrorTally counts episodes by identical (exit reason, detail), so that a
// run where every episode fails the same way reports it once with a count
// ("24 episodes: env_error: pool: golden for X: create: no such image")
// instead of once per episode. Its zero value is empty; it is not safe for
// concurrent use.
type ErrorTally struct {
	index  map[errorKey]int
	counts []manifest.ErrorCount
	seen   []bool // this invocation met the error
	// Other counts the episodes whose error did not fit in the tally.
	Other int
}

type errorKey struct{ exit, detail string }

// Add counts one episode; it reports whether this invocation (thisRun)
// meets the error for the first time.
func (t *ErrorTally) Add(exit, detail string, thisRun bool) (firstThisRun bool) {
	k := errorKey{exit, detail}
	i, ok := t.index[k]
	if !ok {
		if len(t.counts) >= MaxDistinctErrors {
			t.Other++
			return false
		}
		if t.index == nil {
			t.index = map[errorKey]int{}
		}
		i = len(t.counts)
		t.index[k] = i
		t.counts = append(t.counts, manifest.ErrorCount{ExitReason: exit, Detail: detail})
		t.seen = append(t.seen, false)
	}
	t.counts[i].Episodes++
	if thisRun && !t.seen[i] {
		t.seen[i] = true
		return true
	}
	return false
}

// Report returns the counts, most frequent first (then in the order met).
func (t *ErrorTally) Report() []manifest.ErrorCount {
	out := slices.Clone(t.counts)
	sort.SliceStable(out, func(a, b int) bool { return out[a].Episodes > out[b].Episodes })
	return out
}

// Repeated calls f for each error this invocation met that more than one
// episode ended with.
func (t *ErrorTally) Repeated(f func(manifest.ErrorCount)) {
	for i, e := range t.counts {
		if t.seen[i] && e.Episodes > 1 {
			f(e)
		}
	}
}
