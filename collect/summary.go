package collect

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/forkline/forkline/formats/shard"
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
	reset          map[string]*reservoir
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
		reset: map[string]*reservoir{}, golden: map[string]float64{}}
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
			s.reset[key] = newReservoir(4096)
		}
		s.reset[key].add(ep.ResetMS)
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

// ErrorCount is how many episodes ended with one identical error.
type ErrorCount struct {
	Episodes   int    `json:"episodes"`
	ExitReason string `json:"exit_reason"`
	Detail     string `json:"detail"`
}

// String is the one-line form: "24 episodes: env_error: pool: ...".
func (e ErrorCount) String() string {
	n := "episodes"
	if e.Episodes == 1 {
		n = "episode"
	}
	return fmt.Sprintf("%d %s: %s: %s", e.Episodes, n, e.ExitReason, oneLine(e.Detail, 300))
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

// Report is the summary as data (also written into the manifest). Fields
// marked "this invocation" measure only what the last invocation did; the
// others cover the whole dataset.
type Report struct {
	RunID       string         `json:"run_id,omitempty"`
	Status      string         `json:"status,omitempty"`
	NothingToDo bool           `json:"nothing_to_do,omitempty"`
	Planned     int            `json:"planned"`
	Episodes    int            `json:"episodes"`             // kept in the dataset
	Skipped     int            `json:"skipped_already_kept"` // kept before this invocation
	Ran         int            `json:"ran"`                  // this invocation: episodes committed
	NotRun      int            `json:"not_run_unavailable"`  // this invocation: ended by an unavailable service, not kept
	Steps       int64          `json:"steps"`
	RanSteps    int64          `json:"ran_steps"` // this invocation
	ByExit      map[string]int `json:"by_exit_reason"`
	Losses      int            `json:"scaffold_losses"`
	// Errors are the scaffold losses grouped by identical detail, most
	// frequent first; OtherErrors counts losses whose detail did not fit.
	Errors          []ErrorCount       `json:"errors"`
	OtherErrors     int                `json:"errors_other,omitempty"`
	Unavailable     []ErrorCount       `json:"unavailable,omitempty"` // this invocation: why NotRun episodes were not kept
	RewardMean      *float64           `json:"reward_mean"`
	Rewarded        int                `json:"rewarded"`
	RewardsMissing  int                `json:"rewards_missing"`
	ResetMS         map[string]Latency `json:"reset_ms"`
	GoldenBuildMS   map[string]float64 `json:"golden_build_ms"`
	StepsPerSec     float64            `json:"steps_per_s"`        // this invocation
	EpisodesPerSec  float64            `json:"episodes_per_s"`     // this invocation
	WallSec         float64            `json:"wall_s"`             // this invocation
	Screenshots     int64              `json:"screenshots"`        // this invocation
	BlobsStored     int64              `json:"blobs_stored"`       // this invocation
	DedupRatio      float64            `json:"dedup_ratio"`        // screenshots per blob stored (pixels hash); 0 when none was
	BytesPerStep    float64            `json:"bytes_per_step"`     // this invocation: the shards it closed (steps, episodes, rewards, blobs), bytes on disk per step
	RowBytesPerStep float64            `json:"row_bytes_per_step"` // this invocation: every row committed, uncompressed, as the shard writer estimates it to roll generations, per step
	TokenDrift      int                `json:"episodes_with_token_drift"`
	Replacements    int                `json:"replicas_replaced"` // this invocation
}

// Latency is a distribution summary in milliseconds.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}

// Report returns the summary as data.
func (s *Summary) Report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Report{RunID: s.RunID, Status: s.Status, NothingToDo: s.NothingToDo, Planned: s.Planned, Skipped: s.Skipped, Episodes: s.Episodes,
		Ran: s.Ran, NotRun: s.NotRun, Steps: s.Steps, RanSteps: s.RanSteps,
		ByExit: map[string]int{}, ResetMS: map[string]Latency{}, GoldenBuildMS: map[string]float64{},
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
		r.ResetMS[k] = Latency{N: res.n, P50: res.quantile(0.5), P95: res.quantile(0.95)}
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

// Print writes the human summary.
func (r Report) Print(w io.Writer, out string) {
	if r.NothingToDo {
		fmt.Fprintf(w, "\nforkline collect: nothing to do — the run is complete: %d of %d planned episodes kept; nothing was changed\n", r.Episodes, r.Planned)
		if out != "" {
			fmt.Fprintf(w, "  dataset: %s\n", out)
		}
		return
	}
	fmt.Fprintf(w, "\nforkline collect: %s — %d of %d planned episodes kept, %d steps\n", r.Status, r.Episodes, r.Planned, r.Steps)
	fmt.Fprintf(w, "  this invocation: %d episodes, %d steps in %.1fs (%.1f steps/s, %.2f episodes/s)", r.Ran, r.RanSteps, r.WallSec, r.StepsPerSec, r.EpisodesPerSec)
	if r.Skipped > 0 {
		fmt.Fprintf(w, "; %d kept before", r.Skipped)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  exit reasons:")
	for _, e := range runtime.ExitReasons() {
		if n := r.ByExit[string(e)]; n > 0 {
			tag := ""
			if e.ScaffoldLoss() {
				tag = "*"
			}
			fmt.Fprintf(w, " %s%s=%d", e, tag, n)
		}
	}
	fmt.Fprintf(w, "   (* scaffold loss: %d)\n", r.Losses)
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "  scaffold losses by error:\n")
		for _, e := range r.Errors {
			fmt.Fprintf(w, "    %s\n", e)
		}
		if r.OtherErrors > 0 {
			fmt.Fprintf(w, "    %d more episodes with other errors\n", r.OtherErrors)
		}
	}
	if r.NotRun > 0 {
		fmt.Fprintf(w, "  not kept, a service was unavailable (-resume runs them):\n")
		for _, e := range r.Unavailable {
			fmt.Fprintf(w, "    %s\n", e)
		}
	}
	if r.RewardMean != nil {
		fmt.Fprintf(w, "  reward: mean %.3f over %d episodes", *r.RewardMean, r.Rewarded)
	} else {
		fmt.Fprintf(w, "  reward: none")
	}
	if r.RewardsMissing > 0 {
		fmt.Fprintf(w, " (%d verifications gave no value)", r.RewardsMissing)
	}
	fmt.Fprintln(w)
	keys := make([]string, 0, len(r.ResetMS))
	for k := range r.ResetMS {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		l := r.ResetMS[k]
		fmt.Fprintf(w, "  reset %-16s p50 %9.3f ms   p95 %9.3f ms   (n=%d)\n", k, l.P50, l.P95, l.N)
	}
	if len(r.GoldenBuildMS) > 0 {
		var parts []string
		for k, v := range r.GoldenBuildMS {
			parts = append(parts, fmt.Sprintf("%s %.0fms", k, v))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "  golden builds: %s\n", strings.Join(parts, ", "))
	}
	only := ""
	if r.Skipped > 0 {
		only = " (this invocation)"
	}
	switch {
	case r.Screenshots > 0 && r.BlobsStored > 0:
		fmt.Fprintf(w, "  screenshots: %d, blobs stored: %d (dedup ratio %.1fx)%s\n", r.Screenshots, r.BlobsStored, r.DedupRatio, only)
	case r.Screenshots > 0:
		fmt.Fprintf(w, "  screenshots: %d, no blobs stored by this run%s\n", r.Screenshots, only)
	}
	if r.RanSteps > 0 {
		fmt.Fprintf(w, "  bytes kept per step: %.0f%s\n", r.BytesPerStep, only)
	}
	if r.TokenDrift > 0 {
		fmt.Fprintf(w, "  token drift: %d episodes flagged\n", r.TokenDrift)
	}
	if r.Replacements > 0 {
		fmt.Fprintf(w, "  replicas replaced: %d%s\n", r.Replacements, only)
	}
	if out != "" {
		fmt.Fprintf(w, "  dataset: %s\n", out)
	}
}

// reservoir keeps a uniform sample of at most cap values (Vitter's algorithm
// R), so quantiles cost bounded memory on any run length.
type reservoir struct {
	cap  int
	n    int
	vals []float64
	rng  *rand.Rand
}

func newReservoir(cap int) *reservoir {
	return &reservoir{cap: cap, rng: rand.New(rand.NewPCG(1, 2))}
}

func (r *reservoir) add(v float64) {
	r.n++
	if len(r.vals) < r.cap {
		r.vals = append(r.vals, v)
		return
	}
	if j := r.rng.IntN(r.n); j < r.cap {
		r.vals[j] = v
	}
}

func (r *reservoir) quantile(q float64) float64 {
	if len(r.vals) == 0 {
		return 0
	}
	s := append([]float64(nil), r.vals...)
	sort.Float64s(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[i]
}
