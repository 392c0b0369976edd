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
	wake     chan struct{}
	done     chan struct{}
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
		go sb.fill(ctx)
	}
	p.mu.Unlock()
	sb.mu.Lock()
	sb.expected += n
	sb.mu.Unlock()
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

// fill makes replicas until enough are ready or being made for the jobs
// still expected, up to the standby size; it runs until the pool closes.
// A replica in the making that a waiting job claimed is that job's, not one
// for the jobs still expected.
func (s *standby) fill(ctx context.Context) {
	defer close(s.done)
	for {
		s.mu.Lock()
		unclaimed := s.making - len(s.waiting)
		need := min(s.p.cfg.Standby-len(s.ready)-s.making, s.expected-len(s.ready)-unclaimed)
		stopped := s.stopped
		if need > 0 && !stopped {
			s.making++
		}
		s.mu.Unlock()
		if stopped || ctx.Err() != nil {
			return
		}
		if need <= 0 {
			select {
			case <-s.wake:
			case <-ctx.Done():
				return
			}
			continue
		}
		began := time.Now()
		r, err := s.p.acquire(ctx, s.t)
		if err == nil {
			r.Prepared = time.Since(began)
			r.Standby = true
		}
		s.landed(r, err)
		if err != nil && ctx.Err() == nil {
			s.p.cfg.Log("standby replica for %s failed: %v (episodes reset cold meanwhile)", s.t.Key, err)
			// Back off so a broken template does not spin.
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
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
