package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// ConfigFor is base with what a sandbox's GUI request says: viewport, start
// page, what observations carry, load timeout. Zero sizes, an empty start
// page and a zero load timeout keep base's values; Screenshots and A11y are
// always the request's. Host-side settings (Exec, CallTimeout,
// StartTimeout) are base's.
func ConfigFor(base Config, g providers.GUI) Config {
	cfg := base
	if g.Width > 0 && g.Height > 0 {
		cfg.Width, cfg.Height = g.Width, g.Height
	}
	if g.Start != "" {
		cfg.Start = g.Start
	}
	cfg.Screenshots, cfg.A11y = g.Screenshots, g.A11y
	if g.LoadTimeout > 0 {
		cfg.LoadTimeout = g.LoadTimeout
	}
	return cfg
}

// Provider wraps inner so that sandboxes whose Spec asks for a GUI come with
// a browser beside them, as Sessions configured by ConfigFor(base, *Spec.GUI):
//
//   - Create of a Spec with GUI creates inner's sandbox (from the Spec
//     without GUI, which inner need not host) and wraps it; a Spec
//     without GUI gets inner's sandbox as it is;
//   - Checkpoint of a Session first calls its Prepare (a golden: start the
//     browser, open the start page; an episode's: write the page files;
//     then close the browser gracefully), so the checkpoint holds the
//     profile, then checkpoints the sandbox underneath, and remembers the
//     config for the checkpoint, with the page the session showed as its
//     start page;
//   - Fork of such a checkpoint wraps the fork with that config: a branch
//     of an episode opens the page its parent showed, on the parent's
//     profile (memory state — unsaved form fields, scroll positions — is
//     not forked);
//   - Close closes the Sessions still open (their browsers with them), then
//     inner;
//   - everything else is inner's.
//
// Capabilities are inner's with GUI set: the provider can host a browser.
// Only the sandboxes that have one say so (SandboxInfo.GUI). Create fails
// when inner's sandboxes cannot host one (see ErrNoHost).
func Provider(inner providers.Provider, base Config) providers.Provider {
	return &provider{Provider: inner, base: base, byCheckpoint: map[string]Config{}, open: map[*Session]struct{}{}}
}

type provider struct {
	providers.Provider
	base Config

	mu           sync.Mutex
	byCheckpoint map[string]Config
	open         map[*Session]struct{} // sessions not yet closed, closed by Close
	closed       bool
}

func (p *provider) Capabilities() providers.Capabilities {
	c := p.Provider.Capabilities()
	c.GUI = true
	return c
}

func (p *provider) Create(ctx context.Context, spec providers.Spec) (providers.Sandbox, error) {
	if spec.GUI == nil {
		return p.Provider.Create(ctx, spec)
	}
	cfg := ConfigFor(p.base, *spec.GUI)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec.GUI = nil // the browser is this decorator's; inner hosts the sandbox only
	sb, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return p.wrap(ctx, sb, cfg)
}

func (p *provider) wrap(ctx context.Context, sb providers.Sandbox, cfg Config) (providers.Sandbox, error) {
	s, err := NewSession(sb, cfg)
	if err != nil {
		sb.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w (sandbox %s of provider %s)", err, sb.Info().ID, sb.Info().Provider)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		s.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("browser: %w", providers.ErrClosed)
	}
	p.open[s] = struct{}{}
	s.onClose = func() {
		p.mu.Lock()
		delete(p.open, s)
		p.mu.Unlock()
	}
	return s, nil
}

func (p *provider) Checkpoint(ctx context.Context, sb providers.Sandbox, label string) (providers.Checkpoint, error) {
	s, ok := sb.(*Session)
	if !ok {
		return p.Provider.Checkpoint(ctx, sb, label)
	}
	page, err := s.Prepare(ctx)
	if err != nil {
		return providers.Checkpoint{}, fmt.Errorf("browser: preparing the profile for the checkpoint: %w", err)
	}
	cp, err := p.Provider.Checkpoint(ctx, s.Sandbox(), label)
	if err != nil {
		return cp, err
	}
	cfg := s.Config()
	cfg.Start = page
	p.mu.Lock()
	p.byCheckpoint[cp.ID] = cfg
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
	return p.wrap(ctx, sb, cfg)
}

func (p *provider) Release(ctx context.Context, cp providers.Checkpoint) error {
	err := p.Provider.Release(ctx, cp)
	p.mu.Lock()
	delete(p.byCheckpoint, cp.ID)
	p.mu.Unlock()
	return err
}

// Close closes the sessions still open first: inner's Close ends their
// sandboxes but knows nothing of the browsers beside them, which would
// outlive it (on local, as host processes).
func (p *provider) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	open := make([]*Session, 0, len(p.open))
	for s := range p.open {
		open = append(open, s)
	}
	p.mu.Unlock()
	for _, s := range open {
		s.Close(ctx)
	}
	return p.Provider.Close(ctx)
}

// Leftovers reports inner's leftovers (when inner can tell) and every
// session still open, so the conformance suite's leak checks see through the
// decorator.
func (p *provider) Leftovers(ctx context.Context) ([]string, error) {
	var out []string
	if lc, ok := p.Provider.(interface {
		Leftovers(context.Context) ([]string, error)
	}); ok {
		left, err := lc.Leftovers(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, left...)
	}
	p.mu.Lock()
	for s := range p.open {
		out = append(out, fmt.Sprintf("browser session of sandbox %s (open)", s.Info().ID))
	}
	p.mu.Unlock()
	slices.Sort(out)
	return out, nil
}

// Unwrap returns the provider underneath.
func (p *provider) Unwrap() providers.Provider { return p.Provider }

// Prepare implements providers.Preparer for the decorated provider: inner
// prepares the specs (without their GUI, which is this decorator's), when
// it can; then every distinct sandbox a GUI spec makes is checked for the
// Chromium its sessions will run — inside the sandbox for one that pipes
// processes (docker: the image must have it), else on the host — so a
// browser task whose image lacks Chromium fails before anything is spent,
// not in its first episode. The check costs one sandbox per distinct
// image.
func (p *provider) Prepare(ctx context.Context, specs []providers.Spec, progress io.Writer) error {
	inner := make([]providers.Spec, len(specs))
	for i, s := range specs {
		s.GUI = nil
		inner[i] = s
	}
	if prep, ok := providers.As[providers.Preparer](p.Provider); ok {
		if err := prep.Prepare(ctx, inner, progress); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	var errs []error
	for i, s := range specs {
		if s.GUI == nil {
			continue
		}
		key := s.Image
		if s.Build != nil {
			key = fmt.Sprintf("build %s %s %v %s", s.Build.Context, s.Build.Dockerfile, s.Build.Args, s.Build.Target)
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		if err := p.checkChromium(ctx, inner[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkChromium makes a sandbox of spec and checks that the Chromium a
// session would start there is an executable.
func (p *provider) checkChromium(ctx context.Context, spec providers.Spec) error {
	spec.Files = nil
	exec := p.base.exec()
	sb, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("browser: checking for Chromium: %w", err)
	}
	defer sb.Close(context.WithoutCancel(ctx))
	image := spec.Image
	if spec.Build != nil {
		image = "the image built from " + spec.Build.Context
	}
	if _, pipes := sb.(Piper); !pipes {
		// A session runs Chromium on the host only for a sandbox whose
		// workspace is a host directory (NewSession); others (gvisor) have
		// no way to run it.
		if st, err := os.Stat(sb.Info().Workspace); err != nil || !st.IsDir() || !strings.HasPrefix(sb.Info().Workspace, "/") {
			return fmt.Errorf("%w: %w (provider %s)", providers.ErrCannotPrepare, ErrNoHost, sb.Info().Provider)
		}
		if st, err := os.Stat(exec); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%w: browser tasks need Chromium at %s on this host (apt-get install chromium, or set %s)", providers.ErrCannotPrepare, exec, ExecEnv)
		}
		return nil
	}
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "test -x " + shellQuote(exec), TimeoutMS: 30_000})
	if err != nil {
		return fmt.Errorf("browser: checking for Chromium in %s: %w", image, err)
	}
	if obs.ExitCode != 0 {
		if image == "" {
			image = "the provider's default image"
		}
		return fmt.Errorf("%w: browser tasks run Chromium inside their sandbox, and %s has none at %s: use an image with Debian's chromium (-provider-opt image=forkline/chromium, built with make images-browser)", providers.ErrCannotPrepare, image, exec)
	}
	return nil
}
