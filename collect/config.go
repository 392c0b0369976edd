package collect

import (
	"errors"
	"fmt"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/pool"
)

// Defaults of a Config, as forkline collect shows them. A zero field of a
// Config means what its comment says: the default, except where zero is
// a setting of its own (Grace 0 cancels at once, Standby 0 keeps none:
// DefaultConfig's Standby is StandbyAuto).
const (
	DefaultProvider = "local"
	DefaultPolicy   = "script"
	// DefaultReplicas is the episodes run in parallel: the command's
	// default, and what a zero Replicas means. (A library Config used to
	// run one at a time and the command four; one number now, so a
	// Config{Tasks, Out} runs as forkline collect -tasks -out does.)
	DefaultReplicas = 4
	DefaultRepeats  = 1
	// DefaultGrace is how long episodes in flight may finish after a
	// stop. A zero Grace is not this default: it cancels them at once.
	DefaultGrace = 10 * time.Second
	// StandbyAuto, the default Standby, sizes the standby to the run: up
	// to Replicas replicas prepared ahead in all, so at steady state every
	// episode's reset is a hand-off. They cost what Replicas sandboxes
	// cost, on top of the Replicas in episodes (docs/providers.md).
	StandbyAuto = -1
)

// DefaultConfig returns the defaults forkline collect runs with when no
// flag says otherwise, with empty ProviderParams and PolicyOptions to add
// to. It names no Tasks and no Out: Run refuses a Config without them.
func DefaultConfig() Config {
	return Config{
		Provider:       DefaultProvider,
		ProviderParams: map[string]string{},
		Replicas:       DefaultReplicas,
		Repeats:        DefaultRepeats,
		Policy:         DefaultPolicy,
		PolicyOptions:  map[string]string{},
		Reset:          pool.Auto,
		Capture:        capture.DefaultPolicy(),
		Shards:         shard.DefaultConfig(),
		Grace:          DefaultGrace,
		Part:           Whole,
		Standby:        StandbyAuto,
	}
}

// Validate reports the first setting of c that cannot run, naming its
// field; zero fields count as what they mean (see DefaultConfig). It does
// not ask for Tasks and Out, which DefaultConfig cannot name (Run does),
// nor look up Provider and Policy, which the program registers (Run does,
// listing the known ones).
func (c Config) Validate() error {
	for _, n := range []struct {
		field string
		v     int64
		zero  string
	}{
		{"Replicas", int64(c.Replicas), fmt.Sprintf("%d episodes in parallel", DefaultReplicas)},
		{"Repeats", int64(c.Repeats), fmt.Sprintf("%d episode per task", DefaultRepeats)},
		{"MaxCreates", int64(c.MaxCreates), "2 × Replicas"},
		{"Grace", int64(c.Grace), "cancel the episodes in flight at once"},
	} {
		if n.v < 0 {
			return fmt.Errorf("collect: %s is negative (%d): want >= 0 (0: %s)", n.field, n.v, n.zero)
		}
	}
	if c.Standby < StandbyAuto {
		return fielderr.Errorf("collect", "Standby", fmt.Sprint(c.Standby), "is below StandbyAuto (%d): want >= 0 (0: no standby), or StandbyAuto (sized to the run)", StandbyAuto)
	}
	if c.Reset != "" {
		if _, err := pool.ParseStrategy(string(c.Reset)); err != nil {
			return fmt.Errorf("collect: Reset: %w", err)
		}
	}
	switch {
	case c.Part.Count < 0, c.Part.Count == 0 && c.Part.Index != 0,
		c.Part.Count > 0 && (c.Part.Index < 0 || c.Part.Index >= c.Part.Count):
		return fmt.Errorf("collect: Part %s is out of range: want i/n with 0 <= i < n (the zero Part is the whole run)", c.Part)
	}
	if err := c.Branch.validate(); err != nil {
		return err
	}
	// They name the fields; forkline collect says them as its flags.
	switch {
	case c.From == "" && len(c.FromEpisodes) > 0:
		return fielderr.Sentence("collect", "FromEpisodes", "", "picks episodes of a stored dataset, and no From is given").Mentions("From")
	case c.From != "" && !c.Branch.IsSet():
		return fielderr.Sentence("collect", "From", c.From, "needs a Branch plan: give Branch at=K,width=N (where the stored episodes are branched)").Mentions("Branch")
	case c.From != "" && c.Branch.tree:
		return fielderr.Sentence("collect", "From", c.From, "with Branch %s: trees from a stored dataset are not carried out; use Branch at=K,width=N", c.Branch).Mentions("Branch")
	case c.From != "" && c.Part.Count > 1:
		return fielderr.Sentence("collect", "From", c.From, "with Part %s: a run from a stored dataset is not parted", c.Part).Mentions("Part")
	case c.Resume && c.Force:
		return fielderr.Errorf("collect", "", "", "Resume and Force contradict each other").Mentions("Resume", "Force")
	}
	if c.Capture != (capture.Policy{}) {
		if err := c.Capture.Validate(); err != nil {
			return fmt.Errorf("collect: Capture: %w", err)
		}
	}
	if err := c.Shards.Validate(); err != nil {
		return fmt.Errorf("collect: Shards: %w", err)
	}
	return nil
}

// validate checks cfg as Run needs it — its Tasks and Out, then Validate
// — and fills its zero fields with what they mean.
func validate(cfg *Config) error {
	if cfg.Tasks == "" {
		return errors.New("collect: Tasks is empty: no task file or directory given")
	}
	if cfg.Out == "" {
		return errors.New("collect: Out is empty: no output directory given")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	switch cfg.Shell {
	case "", "fresh", "persistent":
	default:
		return fielderr.Errorf("collect", "Shell", cfg.Shell, "unknown shell mode (known: fresh, persistent)")
	}
	d := DefaultConfig()
	if cfg.Provider == "" {
		cfg.Provider = d.Provider
	}
	if cfg.Policy == "" {
		cfg.Policy = d.Policy
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = d.Replicas
	}
	if cfg.Repeats == 0 {
		cfg.Repeats = d.Repeats
	}
	if cfg.Reset == "" {
		cfg.Reset = d.Reset
	}
	if cfg.Part.Count == 0 {
		cfg.Part = d.Part
	}
	if cfg.Capture == (capture.Policy{}) {
		cfg.Capture = d.Capture
	}
	if cfg.Shards == (shard.Config{}) {
		cfg.Shards = d.Shards
	}
	return nil
}

// validate refuses a plan a library caller built by hand that
// ParseBranchPlan would refuse; the zero plan is no branching.
func (b BranchPlan) validate() error {
	switch {
	case b == (BranchPlan{}):
		return nil
	case b.Width <= 0:
		return fmt.Errorf("collect: Branch %+v: Width is %d: want 1 to %d branches per branch point (the zero plan is no branching)", b, b.Width, MaxBranchWidth)
	case b.Width > MaxBranchWidth:
		return fmt.Errorf("collect: Branch: Width %d is more than %d branches per branch point", b.Width, MaxBranchWidth)
	case b.At < 1:
		return fmt.Errorf("collect: Branch %s: At is %d: want the step after which to branch, >= 1", b, b.At)
	case b.Depth < 0:
		return fmt.Errorf("collect: Branch %s: Depth is negative (%d)", b, b.Depth)
	case b.Max < 0 || b.Max > MaxTreeSize:
		return fmt.Errorf("collect: Branch %s: Max is %d: want 0 (no bound) to %d episodes per tree", b, b.Max, MaxTreeSize)
	}
	return nil
}
