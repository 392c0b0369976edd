package replay

import (
	"errors"
	"fmt"
)

// DefaultReplicas is the episodes replayed in parallel: forkline replay's
// default, and what a zero Replicas means.
const DefaultReplicas = 4

// DefaultConfig returns the defaults forkline replay runs with when no flag
// says otherwise, with empty ProviderParams to add to. It names no In: Run
// refuses a Config without it.
func DefaultConfig() Config {
	return Config{ProviderParams: map[string]string{}, Mode: Exact, Replicas: DefaultReplicas}
}

// Validate reports the first setting of c that cannot run, naming its
// field; zero fields count as what they mean (see Config). It does not ask
// for In, which DefaultConfig cannot name (Run does), nor look up Provider,
// which the program registers.
func (c Config) Validate() error {
	switch c.Mode {
	case "", Exact, Normalized, Hash:
	default:
		return fmt.Errorf("replay: Mode %q is not known (known: %s, %s, %s)", c.Mode, Exact, Hash, Normalized)
	}
	if c.Replicas < 0 {
		return fmt.Errorf("replay: Replicas is negative (%d): want >= 0 (0: %d episodes in parallel)", c.Replicas, DefaultReplicas)
	}
	// NaN compares false both ways: the test is written so it fails.
	if !(c.PixelTolerance >= 0 && c.PixelTolerance < 1) {
		return fmt.Errorf("replay: PixelTolerance %g: want a fraction from 0 to 1, 1 excluded (0: compare screenshots by hash)", c.PixelTolerance)
	}
	for i, m := range c.Masks {
		if m.Name == "" || m.Pattern == nil {
			return fmt.Errorf("replay: Masks[%d] (%q): a mask needs a Name and a Pattern", i, m.Name)
		}
	}
	return nil
}

// withDefaults checks cfg as Run needs it — its In, then Validate — and
// fills its zero fields with what they mean.
func (cfg *Config) withDefaults() error {
	if cfg.In == "" {
		return errors.New("replay: In is empty: no dataset given")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Mode == "" {
		cfg.Mode = Exact
	}
	if cfg.Masks == nil {
		cfg.Masks = DefaultMasks
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = DefaultReplicas
	}
	return nil
}
