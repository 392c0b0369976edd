package serve

import (
	"sort"
	"sync"
	"time"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/schemas"
)

// stats counts what the server did, for the summary.
type stats struct {
	mu          sync.Mutex
	sessions    int
	reapedN     int
	droppedN    int
	resets      int
	resetFails  int
	steps       int
	byExit      map[string]int
	kept        int
	recordErrs  int
	checkpoints int
	rewardSum   float64
	rewarded    int
	// latencies are the reset latencies by how the replica was reset, in
	// bounded samples: a server runs for days, and its memory stays
	// bounded.
	latencies map[string]*manifest.Sample
}

func newStats() *stats {
	return &stats{byExit: map[string]int{}, latencies: map[string]*manifest.Sample{}}
}

func (s *stats) sessionOpened() { s.mu.Lock(); s.sessions++; s.mu.Unlock() }
func (s *stats) reaped()        { s.mu.Lock(); s.reapedN++; s.mu.Unlock() }
func (s *stats) dropped()       { s.mu.Lock(); s.droppedN++; s.mu.Unlock() }
func (s *stats) step()          { s.mu.Lock(); s.steps++; s.mu.Unlock() }
func (s *stats) resetFailed()   { s.mu.Lock(); s.resetFails++; s.mu.Unlock() }
func (s *stats) recordFailed()  { s.mu.Lock(); s.recordErrs++; s.mu.Unlock() }
func (s *stats) checkpointed()  { s.mu.Lock(); s.checkpoints++; s.mu.Unlock() }

func (s *stats) reset(r pool.Replica) {
	key := episode.ResetName(r) + "/" + r.Origin
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resets++
	if s.latencies[key] == nil {
		s.latencies[key] = &manifest.Sample{}
	}
	s.latencies[key].Add(schemas.Millis(r.Reset))
}

func (s *stats) episodeEnded(exit string, reward *float64, kept bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byExit[exit]++
	if kept {
		s.kept++
	}
	if reward != nil {
		s.rewardSum += *reward
		s.rewarded++
	}
}

// Summary is what a server served, for the operator and the manifest
// (its "serve" summary).
type Summary = manifest.Serve

func (s *stats) summary(took time.Duration, ps pool.Stats) *Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := &Summary{Seconds: took.Seconds(), Sessions: s.sessions, Reaped: s.reapedN, Dropped: s.droppedN, Resets: s.resets,
		ResetFailures: s.resetFails, Steps: s.steps, Episodes: map[string]int{}, Kept: s.kept, RecordErrors: s.recordErrs,
		Rewarded: s.rewarded, GoldenBuilds: ps.GoldenBuilds, Replacements: ps.Replacements, ResetsByFresh: ps.Resets,
		Checkpoints: s.checkpoints, BranchResets: ps.BranchForks}
	for k, v := range s.byExit {
		sum.Episodes[k] = v
	}
	if s.rewarded > 0 {
		m := s.rewardSum / float64(s.rewarded)
		sum.RewardMean = &m
	}
	for kind, r := range s.latencies {
		sum.ResetLatency = append(sum.ResetLatency, manifest.ResetLatency{Kind: kind, Latency: r.Latency()})
	}
	sort.Slice(sum.ResetLatency, func(a, b int) bool { return sum.ResetLatency[a].Kind < sum.ResetLatency[b].Kind })
	return sum
}
