package serve

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/pool"
)

// Config is everything a server needs. forkline serve fills it from flags.
type Config struct {
	Tasks          string            // a task file or a directory of them
	Provider       string            // registry name; default "local"; the program registers it (import providers/all)
	ProviderParams map[string]string // backend settings
	Reset          pool.Strategy     // default auto
	// Standby keeps this many ready replicas per task prepared in the
	// background, so that a reset is a hand-off (pool.Config.Standby).
	Standby int
	// MaxCreates caps concurrent sandbox creations and forks; 0 means
	// 2 × MaxSessions.
	MaxCreates int
	WorkDir    string // where sandboxes live on the host

	// Addr is the address to listen on; default DefaultAddr (loopback).
	Addr string
	// MaxSessions bounds the sessions open at once (WebSocket sessions and
	// one-shot HTTP requests); default DefaultMaxSessions.
	MaxSessions int
	// IdleTimeout closes a session that sent nothing for this long,
	// destroying its sandbox; 0 never does.
	IdleTimeout time.Duration
	// Grace is how long, once the server is stopping, the steps in flight
	// may run before they are interrupted.
	Grace time.Duration
	// MaxCheckpoints bounds the checkpoints (branch points made by
	// sessions' checkpoint messages) live on the server at once; 0 means
	// MaxSessions.
	MaxCheckpoints int
	// SessionCheckpoints bounds the checkpoints one session holds at once;
	// 0 means DefaultSessionCheckpoints.
	SessionCheckpoints int

	// MaxMessageBytes bounds one message from a client (a WebSocket
	// message, a one-shot request's body); 0 means DefaultMaxMessageBytes.
	MaxMessageBytes int64
	// MessageBudget bounds the bytes of the messages being received and
	// decoded at once, across every session; 0 means DefaultMessageBudget.
	// It is at least MaxMessageBytes. (See limits.go.)
	MessageBudget int64
	// MessageTimeout is how long a message that began may take to arrive
	// whole; 0 means DefaultMessageTimeout.
	MessageTimeout time.Duration

	// Out is the dataset every served episode is recorded into; "" records
	// nothing.
	Out     string
	Resume  bool // add to the dataset in Out (it must have been served with the same tasks and provider)
	Force   bool // replace the dataset in Out
	Capture capture.Policy
	Shards  shard.Config
	// ToolVersion is written into the manifest and /metadata.
	ToolVersion string

	// Log receives the server's events; nil discards them.
	Log *slog.Logger
	// Observer, when set, is told of the run as it goes (package observe),
	// as collect's and replay's are: golden builds, resets, steps, episodes;
	// metrics and progress are observers. RunStarted's Planned is 0: a
	// server's episodes are whatever its clients ask for.
	Observer observe.Observer
	// Ready, when set, is called once with the address the server listens
	// on, before it accepts the first connection.
	Ready func(addr net.Addr)
}

// Defaults.
const (
	DefaultAddr        = "127.0.0.1:8000"
	DefaultMaxSessions = 64
	DefaultIdleTimeout = 15 * time.Minute
	DefaultGrace       = 30 * time.Second
	// DefaultSessionCheckpoints is a session's checkpoints live at once:
	// a few branch points per episode, and none left to pile up.
	DefaultSessionCheckpoints = 4
	// DefaultMaxMessageBytes bounds one message from a client. An action
	// writing a file is one message, and a token record rides along with
	// its turn: 8 MiB holds a file of several MiB, or the ids and
	// logprobs of a 200k-token context, with room to spare.
	DefaultMaxMessageBytes = 8 << 20
	// DefaultMessageBudget is the bytes of messages handled at once: eight
	// of the largest, and every session's small ones beside them.
	DefaultMessageBudget = 64 << 20
	// DefaultMessageTimeout is how long a message that began may take to
	// arrive: 8 MiB at well under 1 MB/s.
	DefaultMessageTimeout = 30 * time.Second
	// MaxMessageLimit is the largest -max-message-mb: what one message may
	// ever be. A larger file belongs in the task's image or files.
	MaxMessageLimit = 1 << 30
)

// MemoryLimit is the soft memory limit a server process is given
// (runtime/debug.SetMemoryLimit) unless GOMEMLIMIT sets one: 64 MiB for
// the server itself, and six times the message budget. Handling a message
// holds about five copies of it at once (the bytes read, the decoded
// action, its recorded JSON, the rows and pages of the episode it ends, a
// reply that echoes it), so what the budget lets in fits; without a limit
// Go's collector lets the heap grow to twice what is live before it runs,
// and a burst of large messages doubled the server's memory. What live
// episodes keep beyond it (each step's record until its episode ends)
// makes the collector run more often, never fails. forkline serve sets it.
func MemoryLimit(cfg Config) int64 {
	budget := cfg.MessageBudget
	if budget == 0 {
		budget = max(DefaultMessageBudget, cfg.MaxMessageBytes)
	}
	return 64<<20 + 6*budget
}

// ErrConfig is wrapped by every error that comes from bad input — the
// configuration, task files, names of providers, the output directory, an
// address that cannot be listened on — as opposed to a failure while
// serving. forkline serve maps it to exit code 2.
var ErrConfig = errors.New("serve: bad input")

type configError struct{ err error }

func (e configError) Error() string   { return e.err.Error() }
func (e configError) Unwrap() []error { return []error{e.err, ErrConfig} }

func badInput(err error) error {
	if err == nil {
		return nil
	}
	return configError{err}
}

// withDefaults fills in defaults and refuses values out of range, naming
// the field and its flag.
func (cfg *Config) withDefaults() error {
	if cfg.Tasks == "" {
		return errors.New("serve: no tasks given (-tasks DIR|FILE)")
	}
	for _, c := range []struct {
		field, flag string
		v           int64
	}{
		{"Standby", "-standby", int64(cfg.Standby)},
		{"MaxCreates", "-max-creates", int64(cfg.MaxCreates)},
		{"MaxSessions", "-max-sessions", int64(cfg.MaxSessions)},
		{"IdleTimeout", "-idle-timeout", int64(cfg.IdleTimeout)},
		{"Grace", "-grace", int64(cfg.Grace)},
		{"MaxCheckpoints", "-max-checkpoints", int64(cfg.MaxCheckpoints)},
		{"SessionCheckpoints", "-session-checkpoints", int64(cfg.SessionCheckpoints)},
		{"MaxMessageBytes", "-max-message-mb", cfg.MaxMessageBytes},
		{"MessageBudget", "-message-budget-mb", cfg.MessageBudget},
		{"MessageTimeout", "-message-timeout", int64(cfg.MessageTimeout)},
	} {
		if c.v < 0 {
			return fmt.Errorf("serve: %s (%s) is negative: %d", c.field, c.flag, c.v)
		}
	}
	if cfg.Resume && cfg.Force {
		return errors.New("serve: -resume and -force contradict each other")
	}
	if (cfg.Resume || cfg.Force) && cfg.Out == "" {
		return errors.New("serve: -resume and -force need -out DIR")
	}
	if cfg.Provider == "" {
		cfg.Provider = "local"
	}
	if cfg.Reset == "" {
		cfg.Reset = pool.Auto
	}
	if _, err := pool.ParseStrategy(string(cfg.Reset)); err != nil {
		return err
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.MaxCheckpoints == 0 {
		cfg.MaxCheckpoints = cfg.MaxSessions
	}
	if cfg.SessionCheckpoints == 0 {
		cfg.SessionCheckpoints = DefaultSessionCheckpoints
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.MaxMessageBytes > MaxMessageLimit {
		return fmt.Errorf("serve: MaxMessageBytes (-max-message-mb) is %d bytes; at most %d", cfg.MaxMessageBytes, MaxMessageLimit)
	}
	if cfg.MessageBudget == 0 {
		cfg.MessageBudget = max(DefaultMessageBudget, cfg.MaxMessageBytes)
	}
	if cfg.MessageBudget < cfg.MaxMessageBytes {
		return fmt.Errorf("serve: MessageBudget (-message-budget-mb, %d bytes) is less than MaxMessageBytes (-max-message-mb, %d bytes): the largest message could never be read", cfg.MessageBudget, cfg.MaxMessageBytes)
	}
	if cfg.MessageTimeout == 0 {
		cfg.MessageTimeout = DefaultMessageTimeout
	}
	if cfg.Capture == (capture.Policy{}) {
		cfg.Capture = capture.DefaultPolicy()
	}
	if err := cfg.Capture.Validate(); err != nil {
		return err
	}
	if cfg.Shards == (shard.Config{}) {
		cfg.Shards = shard.DefaultConfig()
	}
	if err := cfg.Shards.Validate(); err != nil {
		return err
	}
	if cfg.ToolVersion == "" {
		cfg.ToolVersion = "dev"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}
