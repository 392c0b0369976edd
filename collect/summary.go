package collect

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
)

// Summary is what a run did. It is kept in bounded memory whatever the number
// of episodes: counters, and latency samples in fixed-size reservoirs.
type Summary struct {
	mu sync.Mutex

	Planned, Skipped int // skipped: already kept by an earlier run (resume)
	Episodes         int
	Steps            int64
	ByExit           map[string]int
	Rewards          int
	rewardSum        float64
	RewardsMissing   int // verifier produced no value
	reset            map[string]*reservoir
	Screenshots      int64
	BlobsStored      int64
	StepBytes        int64
	Drift            int
	Wall             time.Duration
	Pool             pool.Stats
	Status           string
	golden           map[string]float64 // task → build ms
}

func newSummary(planned, skipped int) *Summary {
	return &Summary{Planned: planned, Skipped: skipped, ByExit: map[string]int{},
		reset: map[string]*reservoir{}, golden: map[string]float64{}}
}

func (s *Summary) addEpisode(b shard.EpisodeBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := b.Episode
	s.Episodes++
	s.Steps += int64(len(b.Steps))
	s.ByExit[ep.ExitReason]++
	if ep.TokenDrift {
		s.Drift++
	}
	for _, r := range b.Rewards {
		if r.StepIndex != nil {
			continue
		}
		if r.Value == nil {
			s.RewardsMissing++
			continue
		}
		s.Rewards++
		s.rewardSum += *r.Value
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
	for _, st := range b.Steps {
		if st.ScreenHash != "" {
			s.Screenshots++
		}
	}
	s.BlobsStored += int64(len(b.Blobs))
	for _, st := range b.Steps {
		s.StepBytes += int64(len(st.Output) + len(st.OutputRaw) + len(st.Screenshot) + len(st.AXTree) + len(st.ActionJSON))
	}
	for _, bl := range b.Blobs {
		s.StepBytes += int64(len(bl.Data))
	}
}

func (s *Summary) finish(wall time.Duration, ps pool.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Wall, s.Pool = wall, ps
}

// Done returns how many episodes were committed by this run so far.
func (s *Summary) Done() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Episodes
}

// Report is the summary as data (also written into the manifest).
type Report struct {
	Status         string             `json:"status,omitempty"`
	Planned        int                `json:"planned"`
	Skipped        int                `json:"skipped_already_kept"`
	Episodes       int                `json:"episodes"`
	Steps          int64              `json:"steps"`
	ByExit         map[string]int     `json:"by_exit_reason"`
	Losses         int                `json:"scaffold_losses"`
	RewardMean     *float64           `json:"reward_mean"`
	Rewarded       int                `json:"rewarded"`
	RewardsMissing int                `json:"rewards_missing"`
	ResetMS        map[string]Latency `json:"reset_ms"`
	GoldenBuildMS  map[string]float64 `json:"golden_build_ms"`
	StepsPerSec    float64            `json:"steps_per_s"`
	EpisodesPerSec float64            `json:"episodes_per_s"`
	WallSec        float64            `json:"wall_s"`
	Screenshots    int64              `json:"screenshots"`
	BlobsStored    int64              `json:"blobs_stored"`
	DedupRatio     float64            `json:"dedup_ratio"` // screenshots per blob stored (pixels hash); 0 when none was
	BytesPerStep   float64            `json:"bytes_per_step"`
	TokenDrift     int                `json:"episodes_with_token_drift"`
	Replacements   int                `json:"replicas_replaced"`
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
	r := Report{Status: s.Status, Planned: s.Planned, Skipped: s.Skipped, Episodes: s.Episodes, Steps: s.Steps,
		ByExit: map[string]int{}, ResetMS: map[string]Latency{}, GoldenBuildMS: map[string]float64{},
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
		r.StepsPerSec = float64(s.Steps) / s.Wall.Seconds()
		r.EpisodesPerSec = float64(s.Episodes) / s.Wall.Seconds()
	}
	if s.Steps > 0 {
		r.BytesPerStep = float64(s.StepBytes) / float64(s.Steps)
	}
	if s.BlobsStored > 0 {
		r.DedupRatio = float64(s.Screenshots) / float64(s.BlobsStored)
	}
	return r
}

// Print writes the human summary.
func (r Report) Print(w io.Writer, out string) {
	fmt.Fprintf(w, "\nforkline collect: %s — %d episodes kept (%d planned", r.Status, r.Episodes+r.Skipped, r.Planned)
	if r.Skipped > 0 {
		fmt.Fprintf(w, ", %d kept before this run", r.Skipped)
	}
	fmt.Fprintf(w, "), %d steps in %.1fs (%.1f steps/s, %.2f episodes/s)\n", r.Steps, r.WallSec, r.StepsPerSec, r.EpisodesPerSec)
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
	switch {
	case r.Screenshots > 0 && r.BlobsStored > 0:
		fmt.Fprintf(w, "  screenshots: %d, blobs stored: %d (dedup ratio %.1fx)\n", r.Screenshots, r.BlobsStored, r.DedupRatio)
	case r.Screenshots > 0:
		fmt.Fprintf(w, "  screenshots: %d, no blobs stored by this run\n", r.Screenshots)
	}
	fmt.Fprintf(w, "  bytes kept per step: %.0f\n", r.BytesPerStep)
	if r.TokenDrift > 0 {
		fmt.Fprintf(w, "  token drift: %d episodes flagged\n", r.TokenDrift)
	}
	if r.Replacements > 0 {
		fmt.Fprintf(w, "  replicas replaced: %d\n", r.Replacements)
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

// startProgress prints progress until the returned function is called.
func startProgress(cfg Config, s *Summary) func() {
	if cfg.Progress == nil {
		return func() {}
	}
	every := 5 * time.Second
	if cfg.ProgressTTY {
		every = 200 * time.Millisecond
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	began := time.Now()
	todo := s.Planned - s.Skipped
	draw := func(final bool) {
		n := s.Done()
		s.mu.Lock()
		steps, losses := s.Steps, 0
		for k, v := range s.ByExit {
			if runtime.ParseExitReason(k).ScaffoldLoss() {
				losses += v
			}
		}
		s.mu.Unlock()
		el := time.Since(began).Seconds()
		if cfg.ProgressTTY {
			width := 30
			fill := 0
			if todo > 0 {
				fill = n * width / todo
			}
			fmt.Fprintf(cfg.Progress, "\r[%s%s] %d/%d episodes  %d steps  %.1f steps/s  losses %d ",
				strings.Repeat("#", fill), strings.Repeat(".", width-fill), n, todo, steps, float64(steps)/max(el, 1e-9), losses)
			if final {
				fmt.Fprintln(cfg.Progress)
			}
		} else if !final {
			fmt.Fprintf(cfg.Progress, "collect: %d/%d episodes, %d steps, %.0fs\n", n, todo, steps, el)
		}
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				draw(true)
				return
			case <-t.C:
				draw(false)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
