package serve

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/pool"
)

func TestDefaultConfigValidates(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	require.NoError(t, Config{}.Validate(), "a zero Config's fields all mean something")
}

// Every bad setting is refused by Validate and by Run (as bad input),
// naming its field, before anything listens or is written.
func TestValidateRefusesBadConfigsByField(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"negative max sessions", func(c *Config) { c.MaxSessions = -1 }, "serve: MaxSessions is negative (-1): want >= 0 (0: 64)"},
		{"negative standby", func(c *Config) { c.Standby = -2 }, "serve: Standby is negative (-2)"},
		{"negative max creates", func(c *Config) { c.MaxCreates = -1 }, "serve: MaxCreates is negative (-1): want >= 0 (0: 2 × MaxSessions)"},
		{"negative idle timeout", func(c *Config) { c.IdleTimeout = -time.Second }, "serve: IdleTimeout is negative"},
		{"negative grace", func(c *Config) { c.Grace = -time.Second }, "serve: Grace is negative"},
		{"negative max checkpoints", func(c *Config) { c.MaxCheckpoints = -1 }, "serve: MaxCheckpoints is negative"},
		{"negative session checkpoints", func(c *Config) { c.SessionCheckpoints = -1 }, "serve: SessionCheckpoints is negative"},
		{"negative max message", func(c *Config) { c.MaxMessageBytes = -1 }, "serve: MaxMessageBytes is negative"},
		{"negative budget", func(c *Config) { c.MessageBudget = -1 }, "serve: MessageBudget is negative"},
		{"negative message timeout", func(c *Config) { c.MessageTimeout = -time.Second }, "serve: MessageTimeout is negative"},
		{"message past the limit", func(c *Config) { c.MaxMessageBytes, c.MessageBudget = MaxMessageLimit+1, 0 }, "serve: MaxMessageBytes is 1073741825 bytes; at most 1073741824"},
		{"budget under a message", func(c *Config) { c.MaxMessageBytes, c.MessageBudget = 16<<20, 8<<20 }, "serve: MessageBudget (8388608 bytes) is less than MaxMessageBytes (16777216 bytes)"},
		{"unknown reset", func(c *Config) { c.Reset = "clone" }, `serve: Reset: pool: unknown reset strategy "clone" (known: auto, fork, recreate)`},
		{"resume and force", func(c *Config) { c.Resume, c.Force = true, true }, "serve: Resume and Force contradict each other"},
		{"resume without out", func(c *Config) { c.Out, c.Resume = "", true }, "serve: Resume and Force are about the recording, and Out is empty"},
		{"unknown tokens", func(c *Config) { c.Capture.Tokens = "some" }, "serve: Capture: capture: "},
		{"negative roll", func(c *Config) { c.Shards.RollBytes = -1 }, "serve: Shards: shard: config: roll bytes -1 is negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Tasks, cfg.Addr, cfg.WorkDir = "../examples/tasks", "127.0.0.1:0", t.TempDir()
			cfg.Out = filepath.Join(t.TempDir(), "out")
			c.edit(&cfg)
			err := cfg.Validate()
			require.ErrorContains(t, err, c.want)
			cfg.Ready = func(a net.Addr) { t.Errorf("a refused config listens on %s", a) }
			_, runErr := Run(context.Background(), cfg)
			require.ErrorIs(t, runErr, ErrConfig)
			require.EqualError(t, runErr, err.Error(), "Run refuses with Validate's error")
			if cfg.Out != "" {
				require.NoDirExists(t, cfg.Out, "a refused server writes nothing")
			}
		})
	}
	_, err := Run(context.Background(), DefaultConfig())
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "serve: Tasks is empty")
}

// A zero Config's fields mean what Config's comments say. Where zero is a
// setting of its own (IdleTimeout: never; Grace: none), it is kept, and
// DefaultConfig holds the command's default instead.
func TestZeroConfigMeansWhatItsCommentsSay(t *testing.T) {
	cfg := Config{Tasks: "../examples/tasks"}
	require.NoError(t, cfg.withDefaults())
	require.Equal(t, "local", cfg.Provider)
	require.Equal(t, pool.Auto, cfg.Reset)
	require.Equal(t, DefaultAddr, cfg.Addr)
	require.Equal(t, DefaultMaxSessions, cfg.MaxSessions)
	require.Equal(t, DefaultMaxSessions, cfg.MaxCheckpoints, "0 is MaxSessions")
	require.Equal(t, DefaultSessionCheckpoints, cfg.SessionCheckpoints)
	require.Equal(t, int64(DefaultMaxMessageBytes), cfg.MaxMessageBytes)
	require.Equal(t, int64(DefaultMessageBudget), cfg.MessageBudget)
	require.Equal(t, DefaultMessageTimeout, cfg.MessageTimeout)
	require.Equal(t, capture.DefaultPolicy(), cfg.Capture)
	require.Equal(t, shard.DefaultConfig(), cfg.Shards)
	require.Zero(t, cfg.IdleTimeout, "0 never times a session out")
	require.Zero(t, cfg.Grace, "0 gives the steps in flight no time")
	require.Zero(t, cfg.Standby)
	require.Zero(t, cfg.MaxCreates, "left to the pool: 2 × MaxSessions")

	// A message larger than the default budget raises the budget with it.
	cfg = Config{Tasks: "../examples/tasks", MaxMessageBytes: 100 << 20}
	require.NoError(t, cfg.withDefaults())
	require.Equal(t, int64(100<<20), cfg.MessageBudget)
	require.Equal(t, int64(64<<20+6*(100<<20)), MemoryLimit(Config{MaxMessageBytes: 100 << 20}))
}
