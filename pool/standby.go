package pool

import (
	"context"
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
	// wants: the filler waits for a place in the pool's standby budget
	// (guarded by Pool.sbMu, not mu).
	wants  bool
	failed time.Time // when a making last failed
	wake   chan struct{}
	done   chan struct{}
}

// takeReply is what a waiting job is handed: the replica it claimed, or
// ok=false when the making failed or the standby stopped (it forks cold).
type takeReply struct {
	r  Replica
	ok bool
}

// Expect tells the pool that n more jobs of t will come, so that a pool with
// Standby > 0 starts preparing replicas for them now. Without Expect, a pool
// prepares nothing ahead and every reset is cold.
func (p *Pool) Expect(ctx context.Context, t *Template, n int) {
	if p.cfg.Standby <= 0 || n <= 0 {
		return
	}
	p.mu.Lock()
	sb, ok := p.standbys[t.Key]
	if !ok {
		sb = &standby{p: p, t: t, wake: make(chan struct{}, 1), done: make(chan struct{})}
		p.standbys[t.Key] = sb
		p.sbMu.Lock()
		p.sbOrder = append(p.sbOrder, sb)
		p.sbMu.Unlock()
		go sb.fill(ctx)
	}
	p.mu.Unlock()
	sb.mu.Lock()
	sb.expected += n
	sb.mu.Unlock()
	if p.cfg.StandbyBudget > 0 {
		// It waits for a place from now: a template named later cannot
		// take one first because its filler happened to run first.
		p.sbMu.Lock()
		sb.wants = true
		p.sbMu.Unlock()
	}
	sb.poke()
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
	if n := len(s.ready); n > 0 {
		r := s.ready[0]
		s.ready = s.ready[1:]
		s.p.releasePlaces(1)
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
		s.p.holdPlace() // landed gave its place up when it handed the replica over
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
				s.p.unwant(s)
				return
			}
		}
		s.mu.Lock()
		stopped := s.stopped
		need := s.need()
		// A failed making backs the filler off for a second, so a broken
		// template does not spin.
		wait := time.Second - time.Since(s.failed)
		s.mu.Unlock()
		if stopped || ctx.Err() != nil {
			s.p.unwant(s)
			return
		}
		if need > 0 && wait > 0 {
			backoff = time.After(wait)
			continue
		}
		if need <= 0 || !s.p.takePlace(s) {
			if need <= 0 {
				s.p.unwant(s)
			}
			select {
			case <-s.wake:
			case <-ctx.Done():
				s.p.unwant(s)
				return
			}
			continue
		}
		// The jobs may have taken replicas while the place was sought:
		// count again, so nothing is made for no job.
		s.mu.Lock()
		if s.stopped || s.need() <= 0 {
			s.p.releasePlaces(1)
			s.mu.Unlock()
			continue
		}
		s.making++
		s.mu.Unlock()
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
// no more than the jobs still expected that nothing ready or in the making
// serves. The caller holds s.mu.
func (s *standby) need() int {
	unclaimed := s.making - len(s.waiting)
	return min(s.p.cfg.Standby-len(s.ready)-s.making, s.expected-len(s.ready)-unclaimed)
}

// takePlace takes a place in the pool's standby budget for s, when one is
// free and no standby Expect named earlier waits for one; it marks s as
// waiting otherwise (releasePlaces wakes it). Without a budget it always
// succeeds.
func (p *Pool) takePlace(s *standby) bool {
	if p.cfg.StandbyBudget <= 0 {
		return true
	}
	p.sbMu.Lock()
	defer p.sbMu.Unlock()
	s.wants = true
	if p.sbHeld >= p.cfg.StandbyBudget {
		return false
	}
	for _, o := range p.sbOrder {
		if o == s {
			break
		}
		if o.wants {
			return false
		}
	}
	s.wants = false
	p.sbHeld++
	return true
}

// holdPlace takes a place whatever the budget: for a replica given back to
// the ready list after its claim was withdrawn.
func (p *Pool) holdPlace() {
	if p.cfg.StandbyBudget <= 0 {
		return
	}
	p.sbMu.Lock()
	p.sbHeld++
	p.sbMu.Unlock()
}

// releasePlaces gives n places back and wakes the standbys waiting for one.
func (p *Pool) releasePlaces(n int) {
	if p.cfg.StandbyBudget <= 0 || n == 0 {
		return
	}
	p.sbMu.Lock()
	p.sbHeld -= n
	p.wakeWanting()
	p.sbMu.Unlock()
}

// unwant marks s as no longer waiting for a place, waking the later
// standbys it held back.
func (p *Pool) unwant(s *standby) {
	if p.cfg.StandbyBudget <= 0 {
		return
	}
	p.sbMu.Lock()
	if s.wants {
		s.wants = false
		p.wakeWanting()
	}
	p.sbMu.Unlock()
}

// wakeWanting pokes every standby waiting for a place; the caller holds
// p.sbMu.
func (p *Pool) wakeWanting() {
	for _, o := range p.sbOrder {
		if o.wants {
			o.poke()
		}
	}
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
		s.p.releasePlaces(1)
		if n := len(s.waiting); n > s.making {
			s.waiting[n-1] <- takeReply{}
			s.waiting = s.waiting[:n-1]
		}
		return
	}
	if len(s.waiting) > 0 {
		s.p.releasePlaces(1)
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
	s.p.releasePlaces(len(left))
	for _, r := range left {
		r.Sandbox.Close(ctx)
	}
}
