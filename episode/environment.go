package episode

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/task"
)

// GUI is a task's browser section as the GUI request its sandboxes carry
// (providers.Spec.GUI); nil for a task without one. Left-out fields keep the
// browser's defaults.
func GUI(b *task.Browser) (*providers.GUI, error) {
	if b == nil {
		return nil, nil
	}
	g := &providers.GUI{Width: b.Width, Height: b.Height, Start: b.Start, LoadTimeout: time.Duration(b.LoadTimeout)}
	observe := b.Observe
	if observe == "" {
		observe = task.DefaultBrowserObserve
	}
	switch observe {
	case "screenshot+a11y":
		g.Screenshots, g.A11y = true, true
	case "screenshot":
		g.Screenshots = true
	case "a11y":
		g.A11y = true
	case "none":
	default:
		return nil, fmt.Errorf("episode: browser observe %q is not known (known: %s)", observe, strings.Join(task.BrowserObserveModes, ", "))
	}
	return g, nil
}

// Environment is the provider the episodes of specs run on: prov itself
// when no task has a browser section, else prov wrapped by the registered
// GUI host (providers.RegisteredGUIHost: the browser decorator, which the
// program chooses by importing providers/browser or providers/all), so that
// a sandbox whose Spec asks for a GUI (Template) comes with its browser — GUI actions go to Chromium, the golden checkpoint holds
// the prepared profile, Close closes both — and every other sandbox is
// prov's as it is. Every task's browser section is checked here, so a bad
// one is refused before anything runs, naming the task and its file.
//
// A task that needs a sandbox with a filesystem of its own — one whose image
// is built, or whose verifier places files at absolute paths (a Harbor
// task's /tests and /logs/verifier) — is refused on a provider whose
// sandboxes share the host's (local): those paths would be the host's.
// A task with a compose environment (task.Compose) is refused on a provider
// that cannot run services beside its sandboxes (Capabilities().Services),
// naming the services.
func Environment(prov providers.Provider, specs []task.Spec) (providers.Provider, error) {
	var host *providers.GUIHost
	for _, s := range specs {
		if s.Compose != nil && !prov.Capabilities().Services {
			return nil, fmt.Errorf("episode: task %s (%s) is a multi-container environment (%s: services %s): provider %s cannot run it (use the docker provider)", s.ID, s.Source, s.Compose.File, strings.Join(s.Compose.ServiceNames(), ", "), prov.Name())
		}
		if why := needsOwnFilesystem(s); why != "" && prov.Capabilities().Isolation != "container" {
			return nil, fmt.Errorf("episode: task %s (%s) %s, which needs sandboxes with a filesystem of their own: provider %s runs commands on the host (use the docker provider)", s.ID, s.Source, why, prov.Name())
		}
		if s.Browser == nil {
			continue
		}
		if host == nil {
			h, err := providers.RegisteredGUIHost()
			if err != nil {
				return nil, fmt.Errorf("episode: task %s (%s): %w", s.ID, s.Source, err)
			}
			host = &h
		}
		g, err := GUI(s.Browser)
		if err == nil {
			err = host.Check(*g)
		}
		if err != nil {
			return nil, fmt.Errorf("episode: task %s (%s): %w", s.ID, s.Source, err)
		}
	}
	if host == nil {
		return prov, nil
	}
	return host.Wrap(prov), nil
}

// needsOwnFilesystem says why s needs sandboxes with their own filesystem,
// or "".
func needsOwnFilesystem(s task.Spec) string {
	switch {
	case s.Build != nil:
		return "builds its image from " + s.Build.Context
	case s.Harbor != nil:
		return "is a Harbor task (its verifier uses /tests and /logs/verifier)"
	case s.Verify != nil && (strings.HasPrefix(s.Verify.Dir, "/") || len(s.Verify.Clear) > 0):
		return "places its verifier's files at " + s.Verify.Dir
	}
	return ""
}

// Services is a task's compose services as the Services its sandboxes
// carry (providers.Spec.Services); nil for a single-container task.
func Services(c *task.Compose) ([]providers.Service, error) {
	if c == nil {
		return nil, nil
	}
	out := make([]providers.Service, 0, len(c.Services))
	for _, s := range c.Services {
		// The values are the compose file's, interpolated by compose
		// already; they are not expanded again from forkline's environment
		// (a task folder is third-party input).
		env := make([]string, 0, len(s.Env))
		for k, v := range s.Env {
			env = append(env, k+"="+v)
		}
		sort.Strings(env)
		ps := providers.Service{
			Name: s.Name, Image: s.Image, Command: s.Command, Entrypoint: s.Entrypoint,
			Env: env, WorkingDir: s.WorkingDir, User: s.User, DependsOn: s.DependsOn,
			Resources: providers.Resources{CPUs: s.CPUs, MemoryMB: s.MemoryMB},
		}
		if b := s.Build; b != nil {
			ps.Build = &providers.Build{Context: b.Context, Dockerfile: b.Dockerfile, Args: b.Args, Target: b.Target, Timeout: time.Duration(b.Timeout)}
		}
		for _, c := range s.Copies {
			ps.Copies = append(ps.Copies, providers.Copy{Source: c.Source, Target: c.Target})
		}
		if h := s.Health; h != nil {
			ps.Health = &providers.Health{Test: h.Test, Interval: time.Duration(h.Interval), Timeout: time.Duration(h.Timeout), StartPeriod: time.Duration(h.StartPeriod), Retries: h.Retries}
		}
		out = append(out, ps)
	}
	return out, nil
}
