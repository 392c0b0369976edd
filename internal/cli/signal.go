package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// signals is the root context's signal handling: the first SIGINT or
// SIGTERM cancels the context, the second exits the process. A command
// stopping from the first may be stuck where no context reaches (a file
// that never opens, an engine that never answers); the second signal is
// the operator's way out, so it is never swallowed.
type signals struct {
	ch     chan os.Signal
	cancel context.CancelFunc
	stderr io.Writer
	done   chan struct{}

	mu       sync.Mutex
	name     string // "forkline collect", for the messages
	onSecond func()
}

func notifySignals(stderr io.Writer, name string) (context.Context, *signals) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &signals{ch: make(chan os.Signal, 2), cancel: cancel, stderr: stderr, name: name, done: make(chan struct{})}
	signal.Notify(s.ch, syscall.SIGINT, syscall.SIGTERM)
	go s.watch()
	return ctx, s
}

func (s *signals) setName(name string) {
	s.mu.Lock()
	s.name = name
	s.mu.Unlock()
}

func (s *signals) setOnSecond(fn func()) {
	s.mu.Lock()
	s.onSecond = fn
	s.mu.Unlock()
}

func (s *signals) watch() {
	var first os.Signal
	select {
	case first = <-s.ch:
	case <-s.done:
		return
	}
	s.mu.Lock()
	name := s.name
	s.mu.Unlock()
	fmt.Fprintf(s.stderr, "\n%s: %v: stopping (signal again to stop at once)\n", name, first)
	s.cancel()
	select {
	case <-s.ch:
	case <-s.done:
		return
	}
	s.mu.Lock()
	onSecond := s.onSecond
	s.mu.Unlock()
	if onSecond != nil {
		onSecond()
	} else {
		fmt.Fprintf(s.stderr, "%s: second signal: exiting now\n", name)
	}
	os.Exit(ExitInterrupted)
}

// stop ends the signal handling: the default actions apply again.
func (s *signals) stop() {
	signal.Stop(s.ch)
	close(s.done)
	s.cancel()
}
