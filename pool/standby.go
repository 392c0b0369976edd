package pool

import (
	"context"
	"sync"
	"time"
)

// standby keeps up to Config.Standby ready replicas of one template, made in
// the background, so that an episode's reset is a hand-off from a channel
// instead of a fork and its start commands. It never makes more replicas
// than the jobs still expected for the template (Expect), so nothing is
// forked for nothing at the end of a run.
type standby struct {
	p     *Pool
	t     *Template
	ready chan Replica

	mu       sync.Mutex
	expected int // jobs of this template not yet handed a replica
	making   int // replicas being made right now
	stopped  bool
	wake     chan struct{}
	done     chan struct{}
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
		sb = &standby{p: p, t: t, ready: make(chan Replica, p.cfg.Standby), wake: make(chan struct{}, 1), done: make(chan struct{})}
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

// take hands out a ready replica if one is waiting, and accounts for the job
// either way.
func (s *standby) take() (Replica, bool) {
	s.mu.Lock()
	if s.expected > 0 {
		s.expected--
	}
	s.mu.Unlock()
	defer s.poke()
	select {
	case r := <-s.ready:
		return r, true
	default:
		return Replica{}, false
	}
}

// fill makes replicas until enough are ready or being made for the jobs
// still expected, up to the standby size; it runs until the pool closes.
func (s *standby) fill(ctx context.Context) {
	defer close(s.done)
	for {
		s.mu.Lock()
		need := min(s.p.cfg.Standby-len(s.ready)-s.making, s.expected-len(s.ready)-s.making)
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
		s.mu.Lock()
		s.making--
		s.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				s.p.cfg.Log("standby replica for %s failed: %v (episodes reset cold meanwhile)", s.t.Key, err)
				// Back off so a broken template does not spin.
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
					return
				}
			}
			continue
		}
		r.Prepared = time.Since(began)
		r.Standby = true
		s.ready <- r // never blocks: need > 0 left room
	}
}

// stop ends the filler and closes the replicas nobody took.
func (s *standby) stop(ctx context.Context) {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.poke()
	<-s.done
	for {
		select {
		case r := <-s.ready:
			r.Sandbox.Close(ctx)
		default:
			return
		}
	}
}
