package collect

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
)

// Summary is what a run did. Its episode figures are the run's
// episode.Tally, fed by the events every episode emits (and, for a resumed
// run, by the rows kept before it): the same counting serve and replay
// use. What only collect knows — the plan, the episodes not kept because a
// service was unavailable, what the recorder stored, the wall time — it
// counts itself. It is kept in bounded memory whatever the number of
// episodes.
//
// After a resume it covers the whole dataset except for what only this
// invocation measured: its wall time and rates, screenshots, blobs and
// bytes per step, and replaced replicas.
type Summary struct {
	mu sync.Mutex

	RunID   string // set when the run's manifest is closed
	Planned int    // planned episodes of this part
	Skipped int    // kept before this invocation (resume)
	// NotRun counts the episodes this invocation ended without keeping
	// because a service they depend on was unavailable.
	NotRun      int
	Screenshots int64
	BlobsStored int64
	// Bytes are the rows this invocation committed (steps, episodes,
	// rewards, blobs) as the shard writer measures them (the schemas row
	// types' Size, uncompressed): what rolled its shards.
	Bytes int64
	// DiskBytes are the bytes of the shards this invocation closed: what
	// its rows take on disk, zstd Parquet.
	DiskBytes int64
	Wall      time.Duration
	Pool      pool.Stats
	Status    string
	// NothingToDo is set when a resumed run was already complete: nothing
	// ran and nothing was changed.
	NothingToDo bool

	tally       *episode.Tally
	unavailable episode.ErrorTally // episodes not kept, by identical error
}

func newSummary(planned, skipped int) *Summary {
	return &Summary{Planned: planned, Skipped: skipped, tally: episode.NewTally()}
}

// Observe hands an event of the run to the summary's tally.
func (s *Summary) Observe(e observe.Event) { s.tally.Observe(e) }

// addCommitted counts what the recorder stored of an episode this
// invocation committed (its episode figures come with its end event).
func (s *Summary) addCommitted(b shard.EpisodeBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range b.Steps {
		if st.ScreenHash != "" {
			s.Screenshots++
		}
	}
	s.BlobsStored += int64(len(b.Blobs))
	s.Bytes += b.Size()
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
	return s.unavailable.Add(exit, detail, true)
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
func (s *Summary) Done() int { return s.tally.Ran() }

// kept returns how many episodes of the dataset are kept.
func (s *Summary) kept() int { return s.tally.Counts().Kept }

// cancelled returns how many episodes of the dataset are kept as
// cancelled: a resume removes the ones an earlier invocation kept (they
// are not tallied), so these are this invocation's, and a resume runs
// them again.
func (s *Summary) cancelled() int { return s.tally.KeptBy(string(runtime.ExitCancelled)) }

// RanLosses returns how many of them are scaffold losses.
func (s *Summary) RanLosses() int { return s.tally.RanLosses() }

// Report is the summary as data, as the manifest records it (see
// manifest.Collect).
type Report = manifest.Collect

// ErrorCount is how many episodes ended with one identical error.
type ErrorCount = manifest.ErrorCount

// Report returns the summary as data.
func (s *Summary) Report() Report {
	c := s.tally.Counts()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Report{RunID: s.RunID, Status: s.Status, NothingToDo: s.NothingToDo, Planned: s.Planned, Skipped: s.Skipped, Episodes: c.Kept,
		Ran: c.Ran, NotRun: s.NotRun, Steps: c.Steps, RanSteps: c.RanSteps,
		ByExit: c.ByExit, ResetMS: c.ResetMS, GoldenBuildMS: c.GoldenBuildMS,
		Errors: c.Errors, OtherErrors: c.OtherErrors, Unavailable: s.unavailable.Report(),
		Rewarded: c.Rewarded, RewardMean: c.RewardMean, RewardsMissing: c.RewardsMissing, WallSec: s.Wall.Seconds(),
		Screenshots: s.Screenshots, BlobsStored: s.BlobsStored, TokenDrift: c.TokenDrift, Replacements: s.Pool.Replacements}
	for k, v := range c.ByExit {
		if runtime.ParseExitReason(k).ScaffoldLoss() {
			r.Losses += v
		}
	}
	if s.Wall > 0 {
		r.StepsPerSec = float64(c.RanSteps) / s.Wall.Seconds()
		r.EpisodesPerSec = float64(c.Ran) / s.Wall.Seconds()
	}
	if c.RanSteps > 0 {
		r.BytesPerStep = float64(s.DiskBytes) / float64(c.RanSteps)
		r.RowBytesPerStep = float64(s.Bytes) / float64(c.RanSteps)
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
