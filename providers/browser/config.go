package browser

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// DefaultExec is the Chromium binary: Debian's chromium package.
const DefaultExec = "/usr/bin/chromium"

// ExecEnv names an environment variable that overrides DefaultExec.
const ExecEnv = "FORKLINE_CHROMIUM"

// Dir is the workspace-relative directory where a session keeps the browser
// profile and the page files (see the package comment).
const Dir = ".browser"

// ProfileDir is the workspace-relative Chromium profile directory.
const ProfileDir = Dir + "/profile"

// Observe modes, as task files write them.
var ObserveModes = []string{"screenshot+a11y", "screenshot", "a11y", "none"}

// Config says what one session's browser looks like and what its
// observations carry. The zero value is not valid; start from DefaultConfig.
type Config struct {
	// Width and Height are the viewport in CSS pixels, at device scale 1:
	// screenshots are exactly this size and clicks use the same space.
	Width, Height int
	// Start is opened when the browser starts: a workspace-relative path, a
	// loopback http(s) URL, or about:blank.
	Start string
	// Screenshots and A11y say what every GUI observation carries.
	Screenshots, A11y bool
	// LoadTimeout bounds a navigation's wait for its page to load, and the
	// wait for a navigation an input started.
	LoadTimeout time.Duration
	// CallTimeout bounds every other protocol call (input, screenshot,
	// accessibility tree), so a hung renderer gives an observation.
	CallTimeout time.Duration
	// StartTimeout bounds starting Chromium.
	StartTimeout time.Duration
	// Exec is the Chromium binary; empty means $FORKLINE_CHROMIUM, else
	// DefaultExec. In a Piper sandbox it is the path inside the sandbox.
	Exec string
}

// DefaultConfig is a 1280x800 viewport on about:blank, observing screenshots
// and accessibility trees.
func DefaultConfig() Config {
	return Config{Width: 1280, Height: 800, Start: "about:blank", Screenshots: true, A11y: true,
		LoadTimeout: 10 * time.Second, CallTimeout: 10 * time.Second, StartTimeout: 30 * time.Second}
}

// ParseObserve reads an observe mode ("screenshot+a11y", "screenshot",
// "a11y" or "none").
func ParseObserve(mode string) (screenshots, a11y bool, err error) {
	switch mode {
	case "screenshot+a11y":
		return true, true, nil
	case "screenshot":
		return true, false, nil
	case "a11y":
		return false, true, nil
	case "none":
		return false, false, nil
	}
	return false, false, fmt.Errorf("browser: observe %q is not known (known: %s)", mode, strings.Join(ObserveModes, ", "))
}

// Validate reports a field out of range.
func (c Config) Validate() error {
	var errs []error
	if c.Width < 64 || c.Height < 64 || c.Width > 4096 || c.Height > 4096 {
		errs = append(errs, fmt.Errorf("browser: viewport %dx%d is out of range (each side 64 to 4096 pixels)", c.Width, c.Height))
	}
	if c.Start == "" {
		errs = append(errs, errors.New("browser: no start page (about:blank for none)"))
	} else if _, refused := resolveURL(c.Start, "/workspace"); refused != "" {
		errs = append(errs, fmt.Errorf("browser: start page %q: %s", c.Start, refused))
	}
	for name, d := range map[string]time.Duration{"load": c.LoadTimeout, "call": c.CallTimeout, "start": c.StartTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("browser: %s timeout %s is not positive", name, d))
		}
	}
	return errors.Join(errs...)
}

// exec returns the Chromium binary to run.
func (c Config) exec() string {
	if c.Exec != "" {
		return c.Exec
	}
	if e := os.Getenv(ExecEnv); e != "" {
		return e
	}
	return DefaultExec
}
