package browser

import (
	"context"
	"fmt"
	"sync"

	"github.com/forkline/forkline/providers"
)

// ConfigFunc says whether sandboxes made from spec get a browser, and which.
type ConfigFunc func(spec providers.Spec) (Config, bool)

// Provider wraps inner so that the sandboxes configFor picks come as
// Sessions:
//
//   - Create wraps the new sandbox when configFor(spec) says so;
//   - Checkpoint of a Session first calls its Prepare (start the browser,
//     open the start page, close it gracefully), so the checkpoint holds the
//     profile, then checkpoints the sandbox underneath, and remembers the
//     config for the checkpoint;
//   - Fork of such a checkpoint wraps the fork with the same config;
//   - everything else is inner's.
//
// Capabilities are inner's with GUI set: the wrapped provider can host a
// browser. It fails at Create when inner's sandboxes cannot host one (see
// ErrNoHost).
func Provider(inner providers.Provider, configFor ConfigFunc) providers.Provider {
	return &provider{Provider: inner, configFor: configFor, byCheckpoint: map[string]Config{}}
}

type provider struct {
	providers.Provider
	configFor ConfigFunc

	mu           sync.Mutex
	byCheckpoint map[string]Config
}

func (p *provider) Capabilities() providers.Capabilities {
	c := p.Provider.Capabilities()
	c.GUI = true
	return c
}

func (p *provider) Create(ctx context.Context, spec providers.Spec) (providers.Sandbox, error) {
	sb, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	cfg, ok := p.configFor(spec)
	if !ok {
		return sb, nil
	}
	return wrap(ctx, sb, cfg)
}

func wrap(ctx context.Context, sb providers.Sandbox, cfg Config) (providers.Sandbox, error) {
	s, err := NewSession(sb, cfg)
	if err != nil {
		sb.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w (sandbox %s of provider %s)", err, sb.Info().ID, sb.Info().Provider)
	}
	return s, nil
}

func (p *provider) Checkpoint(ctx context.Context, sb providers.Sandbox, label string) (providers.Checkpoint, error) {
	s, ok := sb.(*Session)
	if !ok {
		return p.Provider.Checkpoint(ctx, sb, label)
	}
	if err := s.Prepare(ctx); err != nil {
		return providers.Checkpoint{}, fmt.Errorf("browser: preparing the profile for the checkpoint: %w", err)
	}
	cp, err := p.Provider.Checkpoint(ctx, s.Sandbox(), label)
	if err != nil {
		return cp, err
	}
	p.mu.Lock()
	p.byCheckpoint[cp.ID] = s.Config()
	p.mu.Unlock()
	return cp, nil
}

func (p *provider) Fork(ctx context.Context, cp providers.Checkpoint) (providers.Sandbox, error) {
	sb, err := p.Provider.Fork(ctx, cp)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	cfg, ok := p.byCheckpoint[cp.ID]
	p.mu.Unlock()
	if !ok {
		return sb, nil
	}
	return wrap(ctx, sb, cfg)
}

func (p *provider) Release(ctx context.Context, cp providers.Checkpoint) error {
	err := p.Provider.Release(ctx, cp)
	p.mu.Lock()
	delete(p.byCheckpoint, cp.ID)
	p.mu.Unlock()
	return err
}

// Unwrap returns the provider underneath.
func (p *provider) Unwrap() providers.Provider { return p.Provider }
