package serve

import (
	"sort"
	"sync"
	"time"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/pool"
)

// stats counts what the server did, for the summary: its episodes, resets
// and steps by the run's episode.Tally, fed by the events the episodes
// emit (the counting collect and replay use), and what only a server has —
// sessions, dropped connections, failed resets, record errors,
// checkpoints — by itself. A server runs for days: its memory stays
// bounded (the tally's latency samples are reservoirs).
type stats struct {
	tally       *episode.Tally
	mu          sync.Mutex
	sessions    int
	reapedN     int
	droppedN    int
	resetFails  int
	recordErrs  int
	checkpoints int
}

func newStats() *stats { return &stats{tally: episode.NewTally()} }

func (s *stats) sessionOpened() { s.mu.Lock(); s.sessions++; s.mu.Unlock() }
func (s *stats) reaped()        { s.mu.Lock(); s.reapedN++; s.mu.Unlock() }
func (s *stats) dropped()       { s.mu.Lock(); s.droppedN++; s.mu.Unlock() }
func (s *stats) resetFailed()   { s.mu.Lock(); s.resetFails++; s.mu.Unlock() }
func (s *stats) recordFailed()  { s.mu.Lock(); s.recordErrs++; s.mu.Unlock() }
func (s *stats) checkpointed()  { s.mu.Lock(); s.checkpoints++; s.mu.Unlock() }

// Summary is what a server served, for the operator and the manifest
// (its "serve" summary).
type Summary = manifest.Serve

func (s *stats) summary(took time.Duration, ps pool.Stats) *Summary {
	c := s.tally.Counts()
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := &Summary{Seconds: took.Seconds(), Sessions: s.sessions, Reaped: s.reapedN, Dropped: s.droppedN, Resets: c.Resets,
		ResetFailures: s.resetFails, Steps: c.StepEvents, Episodes: c.Ended, Kept: c.Kept, RecordErrors: s.recordErrs,
		Rewarded: c.Rewarded, RewardMean: c.RewardMean, GoldenBuilds: ps.GoldenBuilds, Replacements: ps.Replacements,
		ResetsByFresh: ps.Resets, Checkpoints: s.checkpoints, BranchResets: ps.BranchForks}
	for kind, l := range c.ResetMS {
		sum.ResetLatency = append(sum.ResetLatency, manifest.ResetLatency{Kind: kind, Latency: l})
	}
	sort.Slice(sum.ResetLatency, func(a, b int) bool { return sum.ResetLatency[a].Kind < sum.ResetLatency[b].Kind })
	return sum
}
