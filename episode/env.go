package episode

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/task"
)

// EnvConfig says how to open the environment a run's episodes run in. The
// collector, the replayer and the server open theirs through it, so that a
// run on one provider gets the same sweep, browser, policy shaping, pool and
// manifest entry whichever command runs it.
type EnvConfig struct {
	// Provider is the registered provider's name; Options are its run id
	// (the label its objects carry), working directory and settings.
	Provider string
	Options  providers.Options
	// Specs are the run's tasks: a browser section wires the GUI host in,
	// and a task that needs a filesystem of its own is refused on a
	// provider that shares the host's (Environment).
	Specs []task.Spec
	// Templates are the tasks' pool templates, by task id. Shaper, when it
	// is a SpecShaper (a policy whose sandboxes need something of it: an
	// agent harness's install and gateway), shapes them in place once the
	// provider is known.
	Templates map[string]*pool.Template
	Shaper    any
	// Pool is the pool's configuration; its Provider is the environment's.
	Pool pool.Config
	// Logf gets what does not stop the run (a sweep of crashed runs'
	// leftovers that failed).
	Logf func(format string, args ...any)
}

// ErrShape marks an error of the policy's shaping of the templates (the
// caller names its policy).
var ErrShape = errors.New("the policy cannot shape the sandboxes")

// Env is a run's opened environment: the provider (swept, the GUI host
// wired in for browser tasks), the pool over it, and the manifest's
// provider entry that says what the sandboxes were.
type Env struct {
	Provider providers.Provider
	Pool     *pool.Pool
	// Record is the manifest's provider entry: name, capabilities, the
	// settings given (never nil) and the reset strategy the pool chose.
	Record manifest.Provider
	logf   func(string, ...any)
}

// OpenEnv opens the provider, removes what crashed runs left behind (a
// failed sweep is logged; a cancelled one stops), wires the GUI host in,
// lets the shaper shape the templates and makes the pool. On error
// everything opened is closed again. An error from a cancelled ctx wraps
// ctx's error; every other error is the configuration's (bad input).
func OpenEnv(ctx context.Context, cfg EnvConfig) (*Env, error) {
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	prov, err := providers.Open(ctx, cfg.Provider, cfg.Options)
	if err != nil {
		return nil, err
	}
	env := &Env{Provider: prov, logf: logf}
	fail := func(err error) (*Env, error) {
		env.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if sw, ok := providers.As[providers.Sweeper](prov); ok {
		if err := sw.Sweep(ctx); err != nil {
			if ctx.Err() != nil {
				return fail(fmt.Errorf("episode: sweeping leftovers: %w", ctx.Err()))
			}
			logf("sweeping leftovers of crashed runs: %v", err)
		}
	}
	wired, err := Environment(prov, cfg.Specs)
	if err != nil {
		return fail(err)
	}
	env.Provider = wired
	if err := ShapeTemplates(cfg.Shaper, env.Provider, cfg.Templates); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrShape, err))
	}
	pc := cfg.Pool
	pc.Provider = env.Provider
	pl, err := pool.New(pc)
	if err != nil {
		return fail(err)
	}
	env.Pool = pl
	caps := env.Provider.Capabilities()
	params := maps.Clone(cfg.Options.Params)
	if params == nil {
		params = map[string]string{}
	}
	env.Record = manifest.Provider{Name: env.Provider.Name(), Capabilities: &caps, Params: params, Reset: string(env.Pool.Strategy())}
	return env, nil
}

// Close closes the pool (standbys, goldens) and then the provider, within
// two minutes whatever ctx says (a stopped run still removes what it
// made).
func (e *Env) Close(ctx context.Context) error {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	var errs []error
	if e.Pool != nil {
		if err := e.Pool.Close(closeCtx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.Provider.Close(closeCtx); err != nil {
		errs = append(errs, fmt.Errorf("closing provider: %w", err))
	}
	return errors.Join(errs...)
}
