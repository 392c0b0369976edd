package serve

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/pool"
)

// Config is everything a server needs. forkline serve fills it from flags,
// starting from DefaultConfig; a zero field means what its comment says
// (Validate reports a value that cannot serve). A server has no replicas
// count: MaxSessions bounds its sandboxes in use.
type Config struct {
	Tasks          string            // a task file or a directory of them
	Provider       string            // registry name; default "local"; the program registers it (import providers/all)
	ProviderParams map[string]string // backend settings
	Reset          pool.Strategy     // default auto
	// Standby keeps this many ready replicas per task prepared in the
	// background, so that a reset is a hand-off (pool.Config.Standby); 0
	// keeps none.
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
	// destroying its sandbox; 0 never does (DefaultConfig has
	// DefaultIdleTimeout).
	IdleTimeout time.Duration
	// Grace is how long, once the server is stopping, the steps in flight
	// may run before they are interrupted; 0 interrupts them at once
	// (DefaultConfig has DefaultGrace).
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

	// Logger receives the server's events; nil discards them.
	Logger *slog.Logger
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
	_, budget := cfg.messageLimits()
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

// DefaultConfig returns the defaults forkline serve runs with when no flag
// says otherwise, with empty ProviderParams to add to. It names no Tasks:
// Run refuses a Config without them. Its IdleTimeout and Grace are not
// what zero means in a Config (zero never times a session out, and gives
// the steps in flight no time), so a library caller starts from here.
func DefaultConfig() Config {
	return Config{
		Provider:           "local",
		ProviderParams:     map[string]string{},
		Reset:              pool.Auto,
		Addr:               DefaultAddr,
		MaxSessions:        DefaultMaxSessions,
		IdleTimeout:        DefaultIdleTimeout,
		Grace:              DefaultGrace,
		SessionCheckpoints: DefaultSessionCheckpoints,
		MaxMessageBytes:    DefaultMaxMessageBytes,
		MessageBudget:      DefaultMessageBudget,
		MessageTimeout:     DefaultMessageTimeout,
		Capture:            capture.DefaultPolicy(),
		Shards:             shard.DefaultConfig(),
	}
}

// Validate reports the first setting of c that cannot serve, naming its
// field; zero fields count as what they mean (see Config). It does not ask
// for Tasks, which DefaultConfig cannot name (Run does), nor look up
// Provider, which the program registers.
func (c Config) Validate() error {
	for _, n := range []struct {
		field string
		v     int64
		zero  string
	}{
		{"Standby", int64(c.Standby), "no standby"},
		{"MaxCreates", int64(c.MaxCreates), "2 × MaxSessions"},
		{"MaxSessions", int64(c.MaxSessions), fmt.Sprint(DefaultMaxSessions)},
		{"IdleTimeout", int64(c.IdleTimeout), "never"},
		{"Grace", int64(c.Grace), "interrupt the steps in flight at once"},
		{"MaxCheckpoints", int64(c.MaxCheckpoints), "MaxSessions"},
		{"SessionCheckpoints", int64(c.SessionCheckpoints), fmt.Sprint(DefaultSessionCheckpoints)},
		{"MaxMessageBytes", c.MaxMessageBytes, fmt.Sprintf("%d MiB", DefaultMaxMessageBytes>>20)},
		{"MessageBudget", c.MessageBudget, fmt.Sprintf("%d MiB, or MaxMessageBytes if larger", DefaultMessageBudget>>20)},
		{"MessageTimeout", int64(c.MessageTimeout), DefaultMessageTimeout.String()},
	} {
		if n.v < 0 {
			return fmt.Errorf("serve: %s is negative (%d): want >= 0 (0: %s)", n.field, n.v, n.zero)
		}
	}
	// It names the fields; forkline serve says them as its flags.
	if c.Resume && c.Force {
		return fielderr.Errorf("serve", "", "", "Resume and Force contradict each other").Mentions("Resume", "Force")
	}
	if (c.Resume || c.Force) && c.Out == "" {
		return fielderr.Errorf("serve", "", "", "Resume and Force are about the recording, and Out is empty").Mentions("Resume", "Force", "Out")
	}
	if c.Reset != "" {
		if _, err := pool.ParseStrategy(string(c.Reset)); err != nil {
			return fmt.Errorf("serve: Reset: %w", err)
		}
	}
	msg, budget := c.messageLimits()
	if msg > MaxMessageLimit {
		return fmt.Errorf("serve: MaxMessageBytes is %d bytes; at most %d", msg, MaxMessageLimit)
	}
	if budget < msg {
		return fmt.Errorf("serve: MessageBudget (%d bytes) is less than MaxMessageBytes (%d bytes): the largest message could never be read", budget, msg)
	}
	if c.Capture != (capture.Policy{}) {
		if err := c.Capture.Validate(); err != nil {
			return fmt.Errorf("serve: Capture: %w", err)
		}
	}
	if err := c.Shards.Validate(); err != nil {
		return fmt.Errorf("serve: Shards: %w", err)
	}
	return nil
}

// messageLimits are MaxMessageBytes and MessageBudget with their zeros
// read as the comments on Config say.
func (c Config) messageLimits() (msg, budget int64) {
	msg, budget = c.MaxMessageBytes, c.MessageBudget
	if msg == 0 {
		msg = DefaultMaxMessageBytes
	}
	if budget == 0 {
		budget = max(DefaultMessageBudget, msg)
	}
	return msg, budget
}

// withDefaults checks cfg as Run needs it — its Tasks, then Validate — and
// fills its zero fields with what they mean.
func (cfg *Config) withDefaults() error {
	if cfg.Tasks == "" {
		return errors.New("serve: Tasks is empty: no task file or directory given")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Provider == "" {
		cfg.Provider = "local"
	}
	if cfg.Reset == "" {
		cfg.Reset = pool.Auto
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
	cfg.MaxMessageBytes, cfg.MessageBudget = cfg.messageLimits()
	if cfg.MessageTimeout == 0 {
		cfg.MessageTimeout = DefaultMessageTimeout
	}
	if cfg.Capture == (capture.Policy{}) {
		cfg.Capture = capture.DefaultPolicy()
	}
	if cfg.Shards == (shard.Config{}) {
		cfg.Shards = shard.DefaultConfig()
	}
	if cfg.ToolVersion == "" {
		cfg.ToolVersion = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
