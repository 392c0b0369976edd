package collect

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// Summary is what a run did. It is kept in bounded memory whatever the number
// of episodes: counters, latency samples in fixed-size reservoirs, and at
// most maxDistinctErrors distinct error texts.
//
// After a resume it covers the whole dataset — the episodes kept before
// (tallied from their rows when the run was resumed) and the ones this
// invocation added — except for what only this invocation measured: its wall
// time and rates, screenshots, blobs and bytes per step, and replaced
// replicas.
type Summary struct {
	mu sync.Mutex

	RunID    string // set when the run's manifest is closed
	Planned  int    // planned episodes of this part
	Skipped  int    // kept before this invocation (resume)
	Episodes int    // kept in the dataset
	Steps    int64
	ByExit   map[string]int
	// Ran and RanSteps are what this invocation committed; ranLosses its
	// scaffold losses (what -max-loss limits).
	Ran       int
	RanSteps  int64
	ranLosses int
	// NotRun counts the episodes this invocation ended without keeping
	// because a service they depend on was unavailable.
	NotRun         int
	Rewards        int
	rewardSum      float64
	RewardsMissing int // verifier produced no value
	reset          map[string]*manifest.Sample
	Screenshots    int64
	BlobsStored    int64
	// Bytes are the rows this invocation committed (steps, episodes,
	// rewards, blobs) as the shard writer measures them (the schemas row
	// types' Size, uncompressed): what rolled its shards.
	Bytes int64
	// DiskBytes are the bytes of the shards this invocation closed: what
	// its rows take on disk, zstd Parquet.
	DiskBytes int64
	Drift     int
	Wall      time.Duration
	Pool      pool.Stats
	Status    string
	// NothingToDo is set when a resumed run was already complete: nothing
	// ran and nothing was changed.
	NothingToDo bool
	golden      map[string]float64 // task → build ms
	errs        errorTally         // scaffold losses of the dataset, by identical detail
	unavailable errorTally         // episodes not kept, by identical error
}

func newSummary(planned, skipped int) *Summary {
	return &Summary{Planned: planned, Skipped: skipped, ByExit: map[string]int{},
		reset: map[string]*manifest.Sample{}, golden: map[string]float64{}}
}

// addKept counts an episode of the dataset: one kept before this
// invocation, or (through addEpisode) one it committed. It reports whether
// the episode is a scaffold loss whose error text this invocation had not
// seen yet, so the caller logs each distinct error once.
func (s *Summary) addKept(ep schemas.EpisodeRow, thisRun bool) (firstError bool) {
	s.Episodes++
	s.Steps += int64(ep.Steps)
	s.ByExit[ep.ExitReason]++
	if ep.TokenDrift {
		s.Drift++
	}
	if ep.ResetMS > 0 { // a replica was really acquired
		key := ep.ResetStrategy
		if ep.ResetOrigin != "" {
			key += "/" + ep.ResetOrigin
		}
		if s.reset[key] == nil {
			s.reset[key] = &manifest.Sample{}
		}
		s.reset[key].Add(ep.ResetMS)
	}
	if ep.GoldenID != "" {
		s.golden[ep.TaskID] = ep.GoldenBuildMS
	}
	if runtime.ParseExitReason(ep.ExitReason).ScaffoldLoss() {
		if thisRun {
			s.ranLosses++
		}
		return s.errs.add(ep.ExitReason, ep.Detail, thisRun)
	}
	return false
}

// addReward counts an episode-level reward of a kept episode: the task
// verifier's (task.RewardName); a Harbor reward.json's further metrics are
// rows of their own and no part of the episode's reward.
func (s *Summary) addReward(r schemas.RewardRow) {
	if r.StepIndex != nil || r.Name != task.RewardName {
		return
	}
	if r.Value == nil {
		s.RewardsMissing++
		return
	}
	s.Rewards++
	s.rewardSum += *r.Value
}

// addEpisode counts an episode this invocation committed; see addKept for
// the result.
func (s *Summary) addEpisode(b shard.EpisodeBatch) (firstError bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	firstError = s.addKept(b.Episode, true)
	s.Ran++
	s.RanSteps += int64(len(b.Steps))
	for _, r := range b.Rewards {
		s.addReward(r)
	}
	for _, st := range b.Steps {
		if st.ScreenHash != "" {
			s.Screenshots++
		}
	}
	s.BlobsStored += int64(len(b.Blobs))
	s.Bytes += b.Size()
	return firstError
}

// addShards counts the bytes of shards this invocation closed.
func (s *Summary) addShards(bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.DiskBytes += bytes
}

// addUnavailable counts an episode ended, and not kept, because a service
// was unavailable; it reports whether its error is new to this invocation.
func (s *Summary) addUnavailable(exit, detail string) (first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.NotRun++
	return s.unavailable.add(exit, detail, true)
}

func (s *Summary) finish(wall time.Duration, ps pool.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Wall, s.Pool = wall, ps
}

// planned returns Planned, which grows as roots branch.
func (s *Summary) planned() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Planned
}

// addPlanned counts n more planned episodes: the branches of a root that
// has just branched.
func (s *Summary) addPlanned(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Planned += n
}

// Done returns how many episodes this invocation has committed so far.
func (s *Summary) Done() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Ran
}

// cancelled returns how many episodes of the dataset are kept as
// cancelled: a resume removes the ones an earlier invocation kept (they
// are not tallied), so these are this invocation's, and a resume runs
// them again.
func (s *Summary) cancelled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ByExit[string(runtime.ExitCancelled)]
}

// RanLosses returns how many of them are scaffold losses.
func (s *Summary) RanLosses() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ranLosses
}

// maxDistinctErrors bounds the error texts a summary keeps; further
// distinct ones are only counted.
const maxDistinctErrors = 32

// errorTally counts episodes by identical (exit reason, detail), so that a
// run where every episode fails the same way reports it once with a count
// ("24 episodes: env_error: pool: golden for X: create: no such image")
// instead of once per episode.
type errorTally struct {
	index  map[errorKey]int
	counts []ErrorCount
	seen   []bool // this invocation met the error
	other  int    // episodes whose error did not fit in the tally
}

type errorKey struct{ exit, detail string }

func (t *errorTally) add(exit, detail string, thisRun bool) (firstThisRun bool) {
	k := errorKey{exit, detail}
	i, ok := t.index[k]
	if !ok {
		if len(t.counts) >= maxDistinctErrors {
			t.other++
			return false
		}
		if t.index == nil {
			t.index = map[errorKey]int{}
		}
		i = len(t.counts)
		t.index[k] = i
		t.counts = append(t.counts, ErrorCount{ExitReason: exit, Detail: detail})
		t.seen = append(t.seen, false)
	}
	t.counts[i].Episodes++
	if thisRun && !t.seen[i] {
		t.seen[i] = true
		return true
	}
	return false
}

// report returns the counts, most frequent first (then in the order met).
func (t *errorTally) report() []ErrorCount {
	out := slices.Clone(t.counts)
	sort.SliceStable(out, func(a, b int) bool { return out[a].Episodes > out[b].Episodes })
	return out
}

// Report is the summary as data, as the manifest records it (see
// manifest.Collect).
type Report = manifest.Collect

// ErrorCount is how many episodes ended with one identical error.
type ErrorCount = manifest.ErrorCount

// Report returns the summary as data.
func (s *Summary) Report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Report{RunID: s.RunID, Status: s.Status, NothingToDo: s.NothingToDo, Planned: s.Planned, Skipped: s.Skipped, Episodes: s.Episodes,
		Ran: s.Ran, NotRun: s.NotRun, Steps: s.Steps, RanSteps: s.RanSteps,
		ByExit: map[string]int{}, ResetMS: map[string]manifest.Latency{}, GoldenBuildMS: map[string]float64{},
		Errors: s.errs.report(), OtherErrors: s.errs.other, Unavailable: s.unavailable.report(),
		Rewarded: s.Rewards, RewardsMissing: s.RewardsMissing, WallSec: s.Wall.Seconds(),
		Screenshots: s.Screenshots, BlobsStored: s.BlobsStored, TokenDrift: s.Drift, Replacements: s.Pool.Replacements}
	for k, v := range s.ByExit {
		r.ByExit[k] = v
		if runtime.ParseExitReason(k).ScaffoldLoss() {
			r.Losses += v
		}
	}
	if s.Rewards > 0 {
		m := s.rewardSum / float64(s.Rewards)
		r.RewardMean = &m
	}
	for k, res := range s.reset {
		r.ResetMS[k] = res.Latency()
	}
	for k, v := range s.golden {
		r.GoldenBuildMS[k] = v
	}
	if s.Wall > 0 {
		r.StepsPerSec = float64(s.RanSteps) / s.Wall.Seconds()
		r.EpisodesPerSec = float64(s.Ran) / s.Wall.Seconds()
	}
	if s.RanSteps > 0 {
		r.BytesPerStep = float64(s.DiskBytes) / float64(s.RanSteps)
		r.RowBytesPerStep = float64(s.Bytes) / float64(s.RanSteps)
	}
	if s.BlobsStored > 0 {
		r.DedupRatio = float64(s.Screenshots) / float64(s.BlobsStored)
	}
	return r
}

// oneLine folds a detail (which may hold a command's output tail) onto one
// line of at most max bytes.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "(no detail)"
	}
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
