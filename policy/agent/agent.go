// Package agent is the agent policy (-policy agent): an episode is run by an
// agent harness — Claude Code, Codex, opencode, or any command that reads
// OPENAI_BASE_URL or ANTHROPIC_BASE_URL — inside the episode's fork, with
// the task's instruction as its prompt. The harness executes its own tools;
// its model calls reach forkline's gateway (package gateway), which answers
// them in the API the harness speaks by forwarding each through the openai
// policy's machinery (a Thread: token in, token out where the server
// offers it, chat otherwise), and every call of its trajectory is a step.
// The episode ends when the harness exits, or at the task's time limit
// (killed: timeout), or once the gateway refused it a call (its step
// limit, a call it cannot translate, a model server that is gone): then
// the verifier scores the fork as for any episode.
//
// How the harness reaches the gateway and nothing else: on a provider
// whose commands are host processes (local, isolation none) the gateway
// listens on a loopback port of the host; on one with sandboxes of their
// own (docker: network none) it listens on a unix socket whose directory
// is bind-mounted read-only into every sandbox, beside the harness's
// install and a static forkline, whose relay subcommand listens on the
// sandbox's own 127.0.0.1 and carries each connection to the socket. The
// harness is given a credential made for its episode (its API key for the
// gateway); the model server's key stays in this process.
//
// It knows the harness profiles, the gateway, the openai policy's threads,
// providers' capabilities and mounts, and the step record. It does not
// know tasks, datasets or the collector.
package agent

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/gateway"
	"github.com/forkline/forkline/harness"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// Name is the registry name of this policy.
const Name = "agent"

func init() { policy.Register(Name, Open) }

// Defaults.
const (
	// DefaultEpisodeTimeout bounds an episode run with no time limit (the
	// task's limits.episode_timeout, 10m unless it says, is the limit in a
	// collection): a harness has no step of its own to bound.
	DefaultEpisodeTimeout = 30 * time.Minute
	// DefaultGatewayPort is the loopback port the relay listens on inside
	// a sandbox with its own network namespace.
	DefaultGatewayPort = 47611
	// stopGrace is how long a harness whose calls the gateway refuses (its
	// step limit, an untranslatable call, a model server gone) may take to
	// exit on its own before it is killed.
	stopGrace = 15 * time.Second
)

// Where things are inside a sandbox with a filesystem of its own.
const (
	sandboxHarness = "/opt/forkline/harness"
	sandboxRelay   = "/opt/forkline/bin/forkline"
	sandboxSocket  = "/run/forkline-gateway"
	socketName     = "gw.sock"
)

// The agent's own options; every other one is the openai policy's, which
// forwards the harness's calls (base_url, model, api_key_env, sampling,
// tokens, parsers, retries).
var ownOptions = map[string]string{
	"harness":      "the harness that runs each episode inside its fork: " + strings.Join(harness.Names(), ", ") + " (required)",
	"cmd":          "for harness=command: the command line (run by sh in the workspace, the instruction as $1 and in FORKLINE_INSTRUCTION)",
	"agents_dir":   "the harness install cache (default $" + harness.DirEnv + ", else forkline/agents under the user's cache directory)",
	"relay":        "a statically linked forkline to run the relay inside sandboxes that have a network of their own (default: this forkline)",
	"gateway_port": "the loopback port the relay listens on inside such sandboxes (default " + strconv.Itoa(DefaultGatewayPort) + ")",
}

// The openai options that do not apply: the harness brings its own.
var refusedOptions = map[string]string{
	"tool_mode":          "the harness's tools are offered as native function tools",
	"actions":            "the harness offers its own tools",
	"system_prompt_file": "the harness brings its own system prompt",
	"observation_cap":    "the harness shows its tools' results as it does",
	"observe":            "the harness shows its tools' results as it does",
	"max_images":         "the gateway translates text only",
}

// OptionNames lists the agent's own option names, sorted.
func OptionNames() []string { return slices.Sorted(maps.Keys(ownOptions)) }

// OptionHelp is one option's help.
func OptionHelp(key string) string { return ownOptions[key] }

// config is the agent's own options, parsed.
type config struct {
	harness        string
	cmd            string
	episodeTimeout time.Duration
	agentsDir      string
	relay          string
	port           int
	model          string // the name the harness is told
}

// Open is the policy.Factory of the agent policy.
func Open(opts policy.Options) (policy.Source, error) {
	cfg := config{episodeTimeout: DefaultEpisodeTimeout, port: DefaultGatewayPort}
	rest := map[string]string{}
	for k, v := range opts.Params {
		if why, ok := refusedOptions[k]; ok {
			return nil, fmt.Errorf("agent: option %s does not apply to -policy agent: %s", k, why)
		}
		if _, ok := ownOptions[k]; !ok {
			rest[k] = v
			continue
		}
		switch k {
		case "harness":
			cfg.harness = v
		case "cmd":
			cfg.cmd = v
		case "agents_dir":
			cfg.agentsDir = v
		case "relay":
			cfg.relay = v
		case "gateway_port":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("agent: gateway_port %q: want a port from 1 to 65535", v)
			}
			cfg.port = n
		}
	}
	switch {
	case cfg.harness == "":
		return nil, fmt.Errorf("agent: -policy agent needs -policy-opt harness=NAME (known: %s)", strings.Join(harness.Names(), ", "))
	case !slices.Contains(harness.Names(), cfg.harness):
		return nil, fmt.Errorf("agent: unknown harness %q (known: %s)", cfg.harness, strings.Join(harness.Names(), ", "))
	case cfg.harness == harness.Command && strings.TrimSpace(cfg.cmd) == "":
		return nil, errors.New("agent: harness=command needs -policy-opt cmd='...' (a program that reads OPENAI_BASE_URL or ANTHROPIC_BASE_URL)")
	case cfg.harness != harness.Command && cfg.cmd != "":
		return nil, fmt.Errorf("agent: cmd is for harness=command; harness %s has its own command line", cfg.harness)
	}
	cfg.model = rest["model"]
	if cfg.model == "" {
		cfg.model = "forkline"
	}
	llm, err := openai.Open(policy.Options{Params: rest, Log: opts.Log})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if _, err := openai.NewThread(llm, ""); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	s := &source{cfg: cfg, llm: llm, log: opts.Log}
	if cfg.harness != harness.Command {
		if s.install, err = harness.Find(cfg.harness, cfg.agentsDir); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	return s, nil
}

// source makes the episodes' policies of one run and runs its gateway.
type source struct {
	cfg     config
	llm     policy.Source
	install harness.Installed // zero for harness=command
	log     func(format string, args ...any)

	mu      sync.Mutex
	relayed bool // the sandboxes reach the gateway through the relay
	gw      *gateway.Server
	base    string // the gateway's base URL as a harness sees it
	lis     net.Listener
	sockDir string
	closed  bool
}

// NewPolicy returns the policy of one episode.
func (s *source) NewPolicy(ep policy.Episode) (runtime.Policy, error) {
	return &episodePolicy{src: s, ep: ep}, nil
}

// Conversation implements policy.Conversational: the openai policy's, for
// the token mode, parsers and template kwargs the calls were forwarded
// with; the system prompt and tools are each harness call's own (recorded
// per episode), so none are named here.
func (s *source) Conversation() (policy.Conversation, error) {
	c, ok := s.llm.(policy.Conversational)
	if !ok {
		return policy.Conversation{}, errors.New("agent: the openai policy reports no conversation")
	}
	conv, err := c.Conversation()
	if err != nil {
		return conv, err
	}
	conv.SystemPrompt, conv.Actions, conv.TaskActions, conv.ObservationCap, conv.ToolKeyOrder = "", nil, false, 0, ""
	return conv, nil
}

// Check implements policy.Checker: the model server answers and serves
// what the options name.
func (s *source) Check(ctx context.Context) error {
	if c, ok := s.llm.(policy.Checker); ok {
		return c.Check(ctx)
	}
	return nil
}

// ShapeSpec implements episode.SpecShaper. On a provider whose commands
// are host processes nothing is mounted: the harness reaches the gateway
// on a host loopback port. On any other, the harness's install, a static
// forkline and the gateway's socket directory are mounted read-only.
func (s *source) ShapeSpec(prov providers.Provider, spec *providers.Spec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prov.Capabilities().Isolation == "none" {
		return s.startLocked(false)
	}
	relay, err := s.relayBinary()
	if err != nil {
		return fmt.Errorf("agent: provider %s: %w", prov.Name(), err)
	}
	if err := s.startLocked(true); err != nil {
		return err
	}
	spec.Mounts = append(spec.Mounts,
		providers.Mount{Source: relay, Target: sandboxRelay},
		providers.Mount{Source: s.sockDir, Target: sandboxSocket})
	if s.install.Dir != "" {
		spec.Mounts = append(spec.Mounts, providers.Mount{Source: s.install.Dir, Target: sandboxHarness})
	}
	return nil
}

// relayBinary is the static forkline the relay runs from.
func (s *source) relayBinary() (string, error) {
	path := s.cfg.relay
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("the relay: %w (give -policy-opt relay=PATH)", err)
		}
		path = exe
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if err := checkStatic(abs); err != nil {
		return "", fmt.Errorf("the harness reaches forkline's gateway through forkline's relay, run inside the sandbox, which must be a statically linked forkline: %w; build forkline with CGO_ENABLED=0 (make build does) or give -policy-opt relay=PATH", err)
	}
	return abs, nil
}

// checkStatic refuses an executable that asks for a program interpreter
// (a dynamic loader the sandbox's image may not have).
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}

// start starts the gateway for direct (loopback) use, unless it runs.
func (s *source) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gw != nil {
		return nil
	}
	return s.startLocked(false)
}

func (s *source) startLocked(relayed bool) error {
	if s.closed {
		return errors.New("agent: the policy was closed")
	}
	if s.gw != nil {
		if s.relayed != relayed {
			return errors.New("agent: one run's sandboxes reach the gateway one way (the provider's)")
		}
		return nil
	}
	gw := gateway.New(gateway.Config{Models: []string{s.cfg.model}})
	if relayed {
		dir, err := os.MkdirTemp("", "forkline-gateway-")
		if err != nil {
			return fmt.Errorf("agent: the gateway's socket directory: %w", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			os.RemoveAll(dir)
			return fmt.Errorf("agent: %w", err)
		}
		l, err := net.Listen("unix", filepath.Join(dir, socketName))
		if err != nil {
			os.RemoveAll(dir)
			return fmt.Errorf("agent: the gateway's socket: %w", err)
		}
		// Whatever user a sandbox's image runs as connects.
		if err := os.Chmod(filepath.Join(dir, socketName), 0o666); err != nil {
			l.Close()
			os.RemoveAll(dir)
			return fmt.Errorf("agent: %w", err)
		}
		s.lis, s.sockDir = l, dir
		s.base = "http://127.0.0.1:" + strconv.Itoa(s.cfg.port)
	} else {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("agent: the gateway's loopback port: %w", err)
		}
		s.lis = l
		s.base = "http://" + l.Addr().String()
	}
	s.gw, s.relayed = gw, relayed
	go gw.Serve(s.lis)
	return nil
}

// Close stops the gateway and removes its socket directory.
func (s *source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var err error
	if s.lis != nil {
		err = s.lis.Close()
		s.lis = nil
	}
	if s.sockDir != "" {
		if rerr := os.RemoveAll(s.sockDir); rerr != nil && err == nil {
			err = rerr
		}
		s.sockDir = ""
	}
	return err
}

// launch is what an episode's script needs of the run: the gateway as the
// harness reaches it, the harness's executable and the relay prefix.
func (s *source) launch() (gw *gateway.Server, base, binary, relay string, err error) {
	if err := s.start(); err != nil {
		return nil, "", "", "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	binary = s.install.BinaryPath()
	if s.relayed {
		binary = sandboxHarness + "/" + s.install.Binary
		relay = fmt.Sprintf("%s relay -listen 127.0.0.1:%d -socket %s/%s", sandboxRelay, s.cfg.port, sandboxSocket, socketName)
	}
	if s.install.Dir == "" {
		binary = ""
	}
	return s.gw, s.base, binary, relay, nil
}
