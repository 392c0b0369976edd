package replay

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/observe"
)

func TestDefaultConfigValidates(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	require.NoError(t, Config{}.Validate(), "a zero Config's fields all mean something")
	require.Equal(t, 4, DefaultConfig().Replicas, "the command's default")
}

// Every bad setting is refused by Validate and by Run, naming its field.
// A negative Replicas used to be replaced by 4 and the replay went on.
func TestValidateRefusesBadConfigsByField(t *testing.T) {
	run := collectRun(t, "../examples/tasks/fix-sum.yaml")
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"negative replicas", func(c *Config) { c.Replicas = -1 }, "replay: Replicas is negative (-1): want >= 0 (0: 4 episodes in parallel)"},
		{"unknown mode", func(c *Config) { c.Mode = "fuzzy" }, `replay: Mode "fuzzy" is not known (known: exact, hash, normalized)`},
		{"negative tolerance", func(c *Config) { c.PixelTolerance = -0.1 }, "replay: PixelTolerance -0.1: want a fraction from 0 to 1"},
		{"tolerance of one", func(c *Config) { c.PixelTolerance = 1 }, "replay: PixelTolerance 1: want a fraction"},
		{"NaN tolerance", func(c *Config) { c.PixelTolerance = math.NaN() }, "replay: PixelTolerance NaN: want a fraction"},
		{"mask without pattern", func(c *Config) { c.Masks = []Mask{DefaultMasks[0], {Name: "pid"}} }, `replay: Masks[1] ("pid"): a mask needs a Name and a Pattern`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.In, cfg.WorkDir = run, t.TempDir()
			c.edit(&cfg)
			err := cfg.Validate()
			require.ErrorContains(t, err, c.want)
			_, runErr := Run(context.Background(), cfg)
			require.EqualError(t, runErr, err.Error(), "Run refuses with Validate's error")
		})
	}
	_, err := Run(context.Background(), DefaultConfig())
	require.ErrorContains(t, err, "replay: In is empty")
}

// A zero Replicas means DefaultReplicas, as Config's comment says: the
// replay's observers are told of 4.
func TestZeroReplicasIsTheDefault(t *testing.T) {
	run := collectRun(t, "../examples/tasks/fix-sum.yaml")
	replicas := -1
	rep, err := Run(context.Background(), Config{In: run, WorkDir: t.TempDir(), Observer: observe.Func(func(e observe.Event) {
		if s, ok := e.(observe.RunStarted); ok {
			replicas = s.Replicas
		}
	})})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Identical)
	require.Equal(t, DefaultReplicas, replicas)
}
