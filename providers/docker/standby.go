package docker

import (
	"context"
	"fmt"
	"sync"

	"github.com/forkline/forkline/providers"
)

// StandbyForker is implemented by providers that can keep forks of a
// checkpoint started ahead of time, so that Fork hands one out without
// waiting for the engine. It is optional: a pool finds it with a type
// assertion on its providers.Provider and does without when it is absent.
type StandbyForker interface {
	// Prewarm keeps n started forks of cp ready for Fork, replacing each
	// one handed out in the background, until cp is released or the
	// provider closed. It returns once n forks are ready, or with ctx's
	// error (the forks keep coming in the background), or with the
	// engine's error when starting them keeps failing. n = 0 stops the
	// standby and removes the spare forks. Safe for concurrent use.
	Prewarm(ctx context.Context, cp providers.Checkpoint, n int) error
}

var _ StandbyForker = (*Provider)(nil)

// standbyParallel is how many standby forks of one checkpoint start at a
// time: starts are CPU-bound in the engine, and episodes need the CPU too.
const standbyParallel = 2

// standbyGiveUp is how many consecutive failed starts stop the refill until
// the next Prewarm or hand-off asks again.
const standbyGiveUp = 3

// Prewarm keeps n started forks of cp ready (see StandbyForker). A standby
// fork is an ordinary running container made from cp's image, labelled like
// every fork; it is not paused: its only process sleeps, and handing out a
// running container costs nothing, where an unpause would cost a round trip
// to the engine (see benchmarks/docker/RESULTS.md).
func (p *Provider) Prewarm(ctx context.Context, cp providers.Checkpoint, n int) error {
	if n < 0 {
		return fmt.Errorf("docker: Prewarm with n = %d", n)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("docker: %w", providers.ErrClosed)
	}
	ck, ok := p.checkpoints[cp.ID]
	if !ok || ck.released {
		p.mu.Unlock()
		return fmt.Errorf("docker: Prewarm of unknown or released checkpoint %q", cp.ID)
	}
	p.mu.Unlock()
	st := p.setStandby(ck, n)
	return st.waitReady(ctx)
}

// setStandby sets the standby target of ck and starts filling.
func (p *Provider) setStandby(ck *checkpoint, n int) *standby {
	p.mu.Lock()
	if ck.standby == nil {
		ctx, cancel := context.WithCancel(p.bg)
		ck.standby = &standby{p: p, ck: ck, ctx: ctx, cancel: cancel, changed: make(chan struct{})}
	}
	st := ck.standby
	p.mu.Unlock()
	st.setTarget(n)
	return st
}

// standby is the set of ready forks of one checkpoint.
type standby struct {
	p      *Provider
	ck     *checkpoint
	ctx    context.Context // of the starts; cancelled by stop
	cancel context.CancelFunc
	starts sync.WaitGroup // starts in flight

	mu       sync.Mutex
	target   int
	ready    []*sandbox // oldest first
	starting int
	stopped  bool
	failures int   // consecutive failed starts
	lastErr  error // of the last failed start
	changed  chan struct{}
}

// broadcast wakes every waitReady. Called with mu held.
func (st *standby) broadcast() {
	close(st.changed)
	st.changed = make(chan struct{})
}

func (st *standby) setTarget(n int) {
	st.mu.Lock()
	st.target = n
	st.failures, st.lastErr = 0, nil
	var surplus []*sandbox
	if len(st.ready) > n {
		surplus = append(surplus, st.ready[n:]...)
		st.ready = st.ready[:n]
	}
	st.fillLocked()
	st.broadcast()
	st.mu.Unlock()
	for _, sb := range surplus {
		_ = sb.Close(st.p.bg)
	}
}

// take hands out the oldest ready fork, or nil, and refills.
func (st *standby) take() *sandbox {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopped || len(st.ready) == 0 {
		if !st.stopped {
			st.failures = 0
			st.fillLocked()
		}
		return nil
	}
	sb := st.ready[0]
	st.ready = st.ready[1:]
	st.fillLocked()
	return sb
}

// fillLocked starts as many background starts as the target lacks, up to
// standbyParallel at a time. Called with mu held.
func (st *standby) fillLocked() {
	for !st.stopped && st.failures < standbyGiveUp && st.starting < standbyParallel &&
		len(st.ready)+st.starting < st.target {
		st.starting++
		st.p.mu.Lock()
		closed := st.p.closed
		if !closed {
			st.p.bgWG.Add(1)
		}
		st.p.mu.Unlock()
		if closed {
			st.starting--
			return
		}
		st.starts.Add(1)
		go st.startOne()
	}
}

// startOne starts one standby fork in the background.
func (st *standby) startOne() {
	defer st.p.bgWG.Done()
	defer st.starts.Done()
	ck := st.ck
	sc, err := st.p.startContainer(st.ctx, ck.info.ID, ck.spec, ck.info.ID)
	var sb *sandbox
	if err == nil {
		sb = newSandbox(st.p, sc, ForkMethod, ck.info.ID, ck.spec)
	}
	st.mu.Lock()
	st.starting--
	switch {
	case err != nil:
		st.failures++
		st.lastErr = err
	case st.stopped || len(st.ready) >= st.target:
		st.mu.Unlock()
		_ = sb.Close(context.WithoutCancel(st.ctx))
		st.mu.Lock()
	default:
		st.failures = 0
		st.ready = append(st.ready, sb)
	}
	st.fillLocked()
	st.broadcast()
	st.mu.Unlock()
}

// waitReady blocks until the target is met, ctx ends, or refilling gave up.
func (st *standby) waitReady(ctx context.Context) error {
	for {
		st.mu.Lock()
		switch {
		case st.stopped:
			st.mu.Unlock()
			return fmt.Errorf("docker: standby of checkpoint %s stopped", shortID(st.ck.info.ID))
		case len(st.ready) >= st.target:
			st.mu.Unlock()
			return nil
		case st.failures >= standbyGiveUp:
			err := st.lastErr
			st.mu.Unlock()
			return fmt.Errorf("docker: standby forks of checkpoint %s fail to start: %w", shortID(st.ck.info.ID), err)
		}
		ch := st.changed
		st.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// stop ends the standby, removes the ready forks and cancels the starts in
// flight, and returns when they have removed their containers too, so the
// checkpoint's image is no longer in use.
func (st *standby) stop(ctx context.Context) {
	st.mu.Lock()
	st.stopped = true
	ready := st.ready
	st.ready = nil
	st.broadcast()
	st.mu.Unlock()
	st.cancel()
	forEachParallel(len(ready), 4, func(i int) { _ = ready[i].Close(ctx) })
	st.starts.Wait()
}

// Ready reports how many standby forks of cp are started and waiting.
func (p *Provider) Ready(cp providers.Checkpoint) int {
	p.mu.Lock()
	ck, ok := p.checkpoints[cp.ID]
	p.mu.Unlock()
	if !ok || ck.standby == nil {
		return 0
	}
	ck.standby.mu.Lock()
	defer ck.standby.mu.Unlock()
	return len(ck.standby.ready)
}
