package collect

import (
	"fmt"
	"time"

	"github.com/forkline/forkline/providers/browser"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/task"
)

// taskLabel is the sandbox label that names a sandbox's task (see Template).
const taskLabel = "forkline.task"

// BrowserConfig turns a task's browser section into the browser session's
// configuration.
func BrowserConfig(b *task.Browser) (browser.Config, error) {
	cfg := browser.DefaultConfig()
	if b.Width > 0 && b.Height > 0 {
		cfg.Width, cfg.Height = b.Width, b.Height
	}
	if b.Start != "" {
		cfg.Start = b.Start
	}
	if b.Observe != "" {
		var err error
		if cfg.Screenshots, cfg.A11y, err = browser.ParseObserve(b.Observe); err != nil {
			return cfg, err
		}
	}
	if b.LoadTimeout > 0 {
		cfg.LoadTimeout = time.Duration(b.LoadTimeout)
	}
	return cfg, cfg.Validate()
}

// WithBrowsers wraps prov so that the sandboxes of tasks with a browser
// section come with their browser (browser.Provider: GUI actions go to
// Chromium, the golden checkpoint holds the prepared profile, Close closes
// both). It returns prov itself when no task has a browser section.
func WithBrowsers(prov providers.Provider, specs []task.Spec) (providers.Provider, error) {
	configs := map[string]browser.Config{}
	for _, s := range specs {
		if s.Browser == nil {
			continue
		}
		cfg, err := BrowserConfig(s.Browser)
		if err != nil {
			return nil, fmt.Errorf("collect: task %s (%s): %w", s.ID, s.Source, err)
		}
		configs[s.ID] = cfg
	}
	if len(configs) == 0 {
		return prov, nil
	}
	return browser.Provider(prov, func(spec providers.Spec) (browser.Config, bool) {
		cfg, ok := configs[spec.Labels[taskLabel]]
		return cfg, ok
	}), nil
}
