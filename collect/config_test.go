package collect

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/pool"
)

func TestDefaultConfigValidates(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	require.NoError(t, Config{}.Validate(), "a zero Config's fields all mean something")
	d := DefaultConfig()
	require.Equal(t, 4, d.Replicas, "the command's default")
	d.ProviderParams["image"] = "x"
	require.Empty(t, DefaultConfig().ProviderParams, "each DefaultConfig has maps of its own")
}

// Every bad setting is refused by Validate and by Run, naming its field,
// and Run writes nothing.
func TestValidateRefusesBadConfigsByField(t *testing.T) {
	for _, c := range []struct {
		name  string
		edit  func(*Config)
		field string
		more  string
	}{
		{"negative replicas", func(c *Config) { c.Replicas = -1 }, "Replicas is negative (-1)", "0: 4 episodes in parallel"},
		{"negative repeats", func(c *Config) { c.Repeats = -2 }, "Repeats is negative (-2)", ""},
		{"negative standby", func(c *Config) { c.Standby = -2 }, "Standby -2: is below StandbyAuto", "sized to the run"},
		{"negative max creates", func(c *Config) { c.MaxCreates = -1 }, "MaxCreates is negative", "2 × Replicas"},
		{"negative grace", func(c *Config) { c.Grace = -time.Second }, "Grace is negative", ""},
		{"unknown reset", func(c *Config) { c.Reset = "clone" }, "Reset", "known: auto, fork, recreate"},
		{"part index past count", func(c *Config) { c.Part = Part{Index: 3, Count: 2} }, "Part 3/2 is out of range", ""},
		{"part index without count", func(c *Config) { c.Part = Part{Index: 1} }, "Part 1/0 is out of range", ""},
		{"negative part count", func(c *Config) { c.Part = Part{Count: -1} }, "Part 0/-1 is out of range", ""},
		{"branch without width", func(c *Config) { c.Branch = BranchPlan{At: 2} }, "Width is 0", ""},
		{"branch too wide", func(c *Config) { c.Branch = BranchPlan{At: 2, Width: MaxBranchWidth + 1} }, "Branch: Width 257", "more than 256"},
		{"branch at zero", func(c *Config) { c.Branch = BranchPlan{Width: 2} }, "At is 0", ""},
		{"branch tree too large", func(c *Config) { c.Branch = BranchPlan{At: 1, Width: 2, Max: MaxTreeSize + 1} }, "Max is 4097", ""},
		{"episodes without from", func(c *Config) { c.FromEpisodes = []string{"ab"} }, "FromEpisodes", "no From"},
		{"from without branch", func(c *Config) { c.From = "runs/old" }, "From runs/old", "give Branch at=K,width=N"},
		{"from with part", func(c *Config) {
			c.From, c.Branch, c.Part = "runs/old", BranchPlan{At: 1, Width: 2}, Part{Index: 0, Count: 2}
		}, "with Part 0/2", "not parted"},
		{"resume and force", func(c *Config) { c.Resume, c.Force = true, true }, "Resume and Force contradict", ""},
		{"negative text cap", func(c *Config) { c.Capture = capture.Policy{TextCap: -1} }, "Capture:", "text cap -1"},
		{"unknown pixels", func(c *Config) { c.Capture.Pixels = "jpeg" }, "Capture:", "jpeg"},
		{"unknown compression", func(c *Config) { c.Shards.Compression = "lz4" }, "Shards:", "known: zstd, snappy, none"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Tasks, cfg.Out, cfg.WorkDir = "../examples/tasks/fix-sum.yaml", filepath.Join(t.TempDir(), "run"), t.TempDir()
			c.edit(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			require.ErrorContains(t, err, "collect: ")
			require.ErrorContains(t, err, c.field)
			require.ErrorContains(t, err, c.more)
			_, runErr := Run(context.Background(), cfg)
			require.ErrorIs(t, runErr, ErrConfig)
			require.EqualError(t, runErr, err.Error(), "Run refuses with Validate's error")
			require.NoDirExists(t, cfg.Out, "a refused run writes nothing")
		})
	}
}

// Run asks for what DefaultConfig cannot name.
func TestRunRefusesAConfigWithoutTasksOrOut(t *testing.T) {
	_, err := Run(context.Background(), DefaultConfig())
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "Tasks is empty")
	cfg := DefaultConfig()
	cfg.Tasks = "../examples/tasks/fix-sum.yaml"
	_, err = Run(context.Background(), cfg)
	require.ErrorContains(t, err, "Out is empty")
}

// A zero Config's counts mean what Config's comments say: 4 replicas (the
// command's default; a library Config used to run one at a time), one
// repeat, the whole plan, the default capture policy and shards.
func TestZeroConfigDefaultsTheDocumentedValues(t *testing.T) {
	cfg := Config{Tasks: "../examples/tasks/fix-sum.yaml", Out: filepath.Join(t.TempDir(), "run"), WorkDir: t.TempDir()}
	require.NoError(t, validate(&cfg))
	require.Equal(t, DefaultReplicas, cfg.Replicas)
	require.Equal(t, 1, cfg.Repeats)
	require.Equal(t, pool.Auto, cfg.Reset)
	require.Equal(t, Whole, cfg.Part)
	require.Equal(t, capture.DefaultPolicy(), cfg.Capture)
	require.Equal(t, shard.DefaultConfig(), cfg.Shards)
	require.Equal(t, "local", cfg.Provider)
	require.Equal(t, "script", cfg.Policy)
	require.Zero(t, cfg.Grace, "a zero Grace is none, not DefaultGrace")
	require.Zero(t, cfg.MaxCreates, "left to the pool: 2 × Replicas")

	// And the run goes with them: the observers and the manifest's plan
	// see 4 replicas.
	var replicas int
	cfg = Config{Tasks: "../examples/tasks/fix-sum.yaml", Out: filepath.Join(t.TempDir(), "run"), WorkDir: t.TempDir(),
		Observer: observe.Func(func(e observe.Event) {
			if s, ok := e.(observe.RunStarted); ok {
				replicas = s.Replicas
			}
		})}
	_, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, DefaultReplicas, replicas)
	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	var plan struct{ Replicas, Repeats int }
	require.NoError(t, json.Unmarshal(ds.Manifest().Plan, &plan))
	require.Equal(t, DefaultReplicas, plan.Replicas)
	require.Equal(t, 1, plan.Repeats)
}
