package pool

import (
	"context"
	"math"
	"sort"
	"sync"
	"time"
)

// standby keeps up to Config.Standby ready replicas of one template, made in
// the background, so that an episode's reset is a hand-off instead of a fork
// and its start commands. It never makes more replicas than the jobs still
// expected for the template (Expect), so nothing is forked for nothing at
// the end of a run.
//
// A job that finds no replica ready while one is being made waits for that
// one (it claims it) instead of forking cold: the replica in the making
// started earlier than a cold fork would, and forking cold beside it would
// leave the made one with no job — a fork for nothing. Only when every
// replica in the making is already claimed does a job fork cold.
type standby struct {
	p *Pool
	t *Template

	mu       sync.Mutex
	ready    []Replica
	expected int              // jobs of this template not yet handed a replica
	making   int              // replicas being made right now
	waiting  []chan takeReply // jobs that claimed a replica in the making, oldest first
	stopped  bool
	failed   time.Time // when a making last failed
	wake     chan struct{}
	done     chan struct{}

	// positions are the places in the pool's job order (ExpectInOrder) of
	// this template's jobs not yet handed a replica, ascending; guarded by
	// Pool.sbMu, not mu.
	positions []int
}

// takeReply is what a waiting job is handed: the replica it claimed, or
// ok=false when the making failed or the standby stopped (it forks cold).
type takeReply struct {
	r  Replica
	ok bool
}

// Expect tells the pool that n more jobs of t will come, so that a pool with
// Standby > 0 starts preparing replicas for them now. Without Expect (or
// ExpectInOrder), a pool prepares nothing ahead and every reset is cold.
// Under a StandbyBudget only ExpectInOrder's jobs are prepared: Expect says
// how many, not when.
func (p *Pool) Expect(ctx context.Context, t *Template, n int) {
	if p.cfg.Standby <= 0 || n <= 0 {
		return
	}
	sb := p.standbyFor(ctx, t)
	sb.mu.Lock()
	sb.expected += n
	sb.mu.Unlock()
	sb.poke()
}

// ExpectInOrder tells the pool the templates of the jobs to come, in the
// order they will come: with a StandbyBudget of B, replicas are prepared for
// the next B of them that have none yet, whatever their template, so a
// plan that alternates tasks finds each one's replica ready. A job handed
// a replica leaves the window and the next one enters it.
func (p *Pool) ExpectInOrder(ctx context.Context, ts []*Template) {
	if p.cfg.Standby <= 0 || len(ts) == 0 {
		return
	}
	sbs := make([]*standby, len(ts))
	for i, t := range ts {
		sbs[i] = p.standbyFor(ctx, t)
		sbs[i].mu.Lock()
		sbs[i].expected++
		sbs[i].mu.Unlock()
	}
	p.sbMu.Lock()
	for _, sb := range sbs {
		sb.positions = append(sb.positions, len(p.sbOwner))
		p.sbOwner = append(p.sbOwner, sb)
		p.sbTaken = append(p.sbTaken, false)
	}
	p.widenWindow()
	p.sbMu.Unlock()
	for _, sb := range sbs {
		sb.poke()
	}
}

// standbyFor returns t's standby, started on first use.
func (p *Pool) standbyFor(ctx context.Context, t *Template) *standby {
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, ok := p.standbys[t.Key]
	if !ok {
		sb = &standby{p: p, t: t, wake: make(chan struct{}, 1), done: make(chan struct{})}
		p.standbys[t.Key] = sb
		go sb.fill(ctx)
	}
	return sb
}

// widenWindow moves the window's end forward until it holds StandbyBudget
// jobs not yet handed a replica (or reaches the last job), waking the
// standby of each job that enters it. The caller holds p.sbMu.
func (p *Pool) widenWindow() {
	for p.sbInWindow < p.cfg.StandbyBudget && p.sbCut+1 < len(p.sbOwner) {
		p.sbCut++
		if !p.sbTaken[p.sbCut] {
			p.sbInWindow++
			p.sbOwner[p.sbCut].poke()
		}
	}
}

// handedOut records that a job of s was handed a replica (or made its own):
// s's earliest job leaves the window, and the next job enters it.
func (p *Pool) handedOut(s *standby) {
	p.sbMu.Lock()
	defer p.sbMu.Unlock()
	if len(s.positions) == 0 {
		return
	}
	q := s.positions[0]
	s.positions = s.positions[1:]
	p.sbTaken[q] = true
	if q <= p.sbCut {
		p.sbInWindow--
	}
	p.widenWindow()
}

// window is how many of s's jobs are in the window: all of them without a
// budget.
func (p *Pool) window(s *standby) int {
	if p.cfg.StandbyBudget <= 0 {
		return math.MaxInt
	}
	p.sbMu.Lock()
	defer p.sbMu.Unlock()
	return sort.SearchInts(s.positions, p.sbCut+1)
}

func (s *standby) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// readyCount is how many replicas wait for a hand-off now.
func (s *standby) readyCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ready)
}

// take hands out a ready replica if one is waiting, or the one being made
// when nobody claimed it yet, and accounts for the job either way. It
// returns false when the job must make its replica itself.
func (s *standby) take(ctx context.Context) (Replica, bool) {
	defer s.poke()
	s.mu.Lock()
	if s.expected > 0 {
		s.expected--
	}
	s.p.handedOut(s)
	if n := len(s.ready); n > 0 {
		r := s.ready[0]
		s.ready = s.ready[1:]
		s.mu.Unlock()
		return r, true
	}
	if s.stopped || s.making <= len(s.waiting) {
		s.mu.Unlock()
		return Replica{}, false
	}
	ch := make(chan takeReply, 1)
	s.waiting = append(s.waiting, ch)
	s.mu.Unlock()
	select {
	case got := <-ch:
		return got.r, got.ok
	case <-ctx.Done():
	}
	// Cancelled while waiting: withdraw the claim, or, when the replica
	// arrived meanwhile, give it back for another job — or close it, once
	// stop has closed the ready ones.
	s.mu.Lock()
	for i, w := range s.waiting {
		if w == ch {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			s.mu.Unlock()
			return Replica{}, false
		}
	}
	got := <-ch // sent before the claim was taken off the list
	if got.ok && !s.stopped {
		s.ready = append(s.ready, got.r)
		got.ok = false
	}
	s.mu.Unlock()
	if got.ok {
		got.r.Sandbox.Close(context.WithoutCancel(ctx))
	}
	return Replica{}, false
}

// fill starts making replicas until enough are ready or being made for the
// jobs still expected, up to the standby size; it runs until the pool
// closes. The makings run side by side (the pool's MaxCreates bounds them
// with every other creation): one at a time, a standby of K could not keep
// up with K replicas ending episodes together. A replica in the making that
// a waiting job claimed is that job's, not one for the jobs still expected.
func (s *standby) fill(ctx context.Context) {
	var makings sync.WaitGroup
	defer close(s.done)
	defer makings.Wait()
	var backoff <-chan time.Time
	for {
		if backoff != nil {
			select {
			case <-backoff:
				backoff = nil
			case <-ctx.Done():
				return
			}
		}
		s.mu.Lock()
		stopped := s.stopped || ctx.Err() != nil
		need := s.need()
		// A failed making backs the filler off for a second, so a broken
		// template does not spin.
		wait := time.Second - time.Since(s.failed)
		start := !stopped && need > 0 && wait <= 0
		if start {
			s.making++ // counted with need, under one lock: a take between would count twice
		}
		s.mu.Unlock()
		switch {
		case stopped:
			return
		case need > 0 && wait > 0:
			backoff = time.After(wait)
			continue
		case !start:
			select {
			case <-s.wake:
			case <-ctx.Done():
				return
			}
			continue
		}
		makings.Go(func() {
			began := time.Now()
			r, err := s.p.acquire(ctx, s.t)
			if err == nil {
				r.Prepared = time.Since(began)
				r.Standby = true
			}
			s.landed(r, err)
			if err != nil && ctx.Err() == nil {
				s.p.cfg.Log("standby replica for %s failed: %v (episodes reset cold meanwhile)", s.t.Key, err)
			}
			s.poke()
		})
	}
}

// need is how many more replicas to make now: up to the standby size, and
// no more than the jobs still expected — under a budget, the ones in the
// window — that nothing ready or in the making serves. The caller holds
// s.mu (then p.sbMu: the order everywhere).
func (s *standby) need() int {
	unclaimed := s.making - len(s.waiting)
	jobs := min(s.expected, s.p.window(s))
	return min(s.p.cfg.Standby-len(s.ready)-s.making, jobs-len(s.ready)-unclaimed)
}

// landed accounts for a replica the filler finished making: it goes to the
// oldest waiting job, else to the ready list. A failed making releases the
// newest claim it can no longer serve, so that job forks cold.
func (s *standby) landed(r Replica, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.making--
	if err != nil {
		s.failed = time.Now()
		if n := len(s.waiting); n > s.making {
			s.waiting[n-1] <- takeReply{}
			s.waiting = s.waiting[:n-1]
		}
		return
	}
	if len(s.waiting) > 0 {
		s.waiting[0] <- takeReply{r: r, ok: true}
		s.waiting = s.waiting[1:]
		return
	}
	s.ready = append(s.ready, r)
}

// stop ends the filler, sends the jobs still waiting off to fork cold, and
// closes the replicas nobody took.
func (s *standby) stop(ctx context.Context) {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.poke()
	<-s.done
	s.mu.Lock()
	left, waiting := s.ready, s.waiting
	s.ready, s.waiting = nil, nil
	s.mu.Unlock()
	for _, w := range waiting {
		w <- takeReply{}
	}
	for _, r := range left {
		r.Sandbox.Close(ctx)
	}
}
