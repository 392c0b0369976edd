package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/ui"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/serve"
)

// serveOptions are serve's flags: the library's Config, and the flags
// parsed into it.
type serveOptions struct {
	cfg         serve.Config
	reset       string
	text        string
	captureFile string
	rollMB      int64
	rollEvery   time.Duration
	maxMsgMB    int64
	budgetMB    int64
	metricsAddr string
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:    "serve",
		Summary: "serve task specs to a trainer over the OpenEnv protocol, every reset a fork, every episode recorded",
		About: `An environment server for online RL: a trainer (TRL, SkyRL, any OpenEnv client) opens a WebSocket
session at ws://ADDR/ws and sends reset, step, state and close messages. A reset (task_id, or a seed
that picks a task, and an optional episode_id) hands the session a fork of the task's golden
checkpoint — from the warm standby when one is ready — and answers with the instruction; a step
takes one canonical action (the /schema action schema) and answers with its observation; done (or a
limit) runs the task's verifier and answers with the reward. /health, /metadata, /schema, /state,
/tasks, /openapi.json and the stateless one-shot POST /reset and /step are HTTP; POST /mcp speaks
MCP: the task's actions are its tools and a tool call is a step (one-shot without a session, or in
a session opened with OpenEnv's openenv/session/create). Extra keys beside a reset's or a step's
(OpenEnv's extra="allow") are ignored and logged once per session.

With -out, every served episode is recorded into a forkline dataset (the shards and manifest of
collect; the trainer's episode ids kept; token ids attached in an action's metadata kept as a
token record), which verify, inspect, export and replay read. A closed or dropped connection, or a
session idle past -idle-timeout, ends its episode as cancelled and destroys its sandbox.

SIGINT/SIGTERM drains: no new session or reset, the steps in flight finish (for at most -grace),
every session is closed, every sandbox destroyed, the dataset closed complete; the command exits 0.
A second signal exits at once. It listens on loopback unless -addr says otherwise (docs/serve.md).`,
		Examples: []string{
			"forkline serve -tasks examples/tasks -addr 127.0.0.1:8000 -out runs/online",
			"forkline serve -tasks tasks/ -provider docker -standby 8 -max-sessions 64 -out runs/online",
			"forkline serve -tasks tasks/ -out runs/online -resume",
		},
		Exits: []cli.Exit{
			{Code: cli.ExitOK, Meaning: "stopped by SIGINT/SIGTERM after draining: every episode ended, was recorded (with -out) and its sandbox destroyed"},
			{Code: cli.ExitFailed, Meaning: "the server failed while serving, or episodes could not be recorded (the dataset is then partial)"},
			{Code: cli.ExitBadInput, Meaning: "bad input: flags, task files, unknown names, an address that cannot be listened on, an -out that holds another dataset, a -resume that does not match it; nothing was changed"},
		},
		Setup: setupServe,
	}
}

func setupServe(f *cli.FlagSet) cli.Runner {
	// Every default the help shows is the library's (DefaultConfig).
	d := serve.DefaultConfig()
	d.ToolVersion = collect.Version
	o := &serveOptions{cfg: d, reset: string(d.Reset), text: d.Capture.TextFlag(),
		rollMB: d.Shards.RollBytes >> 20, rollEvery: d.Shards.RollInterval,
		maxMsgMB: d.MaxMessageBytes >> 20, budgetMB: d.MessageBudget >> 20}
	c := &o.cfg

	f.Group("server", "-addr 127.0.0.1:8000 -max-sessions 64 -idle-timeout 15m")
	f.String(&c.Tasks, "tasks", "FILE|DIR", "task specs: a *.yaml file (it may hold several documents) or a directory of them").Require()
	f.String(&c.Addr, "addr", "HOST:PORT", "address to listen on (port 0: any free port, printed at start); loopback unless you say otherwise")
	f.Int(&c.MaxSessions, "max-sessions", "N", "sessions open at once (WebSocket sessions and one-shot requests); more are refused with CAPACITY_REACHED")
	f.Duration(&c.IdleTimeout, "idle-timeout", "D", "close a session that sent nothing for D, ending its episode and destroying its sandbox (0: never)")
	f.Duration(&c.Grace, "grace", "D", "after SIGINT/SIGTERM, how long steps in flight may finish before they are interrupted")
	f.Int(&c.MaxCheckpoints, "max-checkpoints", "N", "checkpoints (branching over the wire) live on the server at once; more are refused with CHECKPOINT_LIMIT").ShowDefault("-max-sessions")
	f.Int(&c.SessionCheckpoints, "session-checkpoints", "N", "checkpoints one session holds at once; more are refused with CHECKPOINT_LIMIT")
	f.Int64(&o.maxMsgMB, "max-message-mb", "MB", "the largest message a client may send (a WebSocket message, a one-shot request's body); a larger one ends its session (close 1009)")
	f.Int64(&o.budgetMB, "message-budget-mb", "MB", "the bytes of messages being received and decoded at once, across every session; a message that finds it taken waits (docs/serve.md)")
	f.Duration(&c.MessageTimeout, "message-timeout", "D", "how long a message that began may take to arrive whole (its time waiting for the budget not counted); a slower one ends its session")

	f.Group("provider", "-provider docker -provider-opt image=forkline/busybox -standby 8")
	f.String(&c.Provider, "provider", "NAME", "sandbox provider: "+strings.Join(providers.Names(), ", ")+" (docs/providers.md)")
	f.KeyValues(c.ProviderParams, "provider-opt", "key=value", "provider setting, e.g. fork=copy for local, image=forkline/debian for docker")
	f.String(&o.reset, "reset", "auto|fork|recreate", "how a reset makes its sandbox: auto forks when the provider can checkpoint; recreate replays setup per reset (slow)")
	f.Int(&c.Standby, "standby", "K", "keep K ready forks per task prepared in the background, so a reset is a hand-off")
	f.Int(&c.MaxCreates, "max-creates", "N", "at most N sandbox creations or forks at once").ShowDefault("2 × -max-sessions")
	f.String(&c.WorkDir, "workdir", "DIR", "where sandboxes live on the host").ShowDefault("a temporary directory")

	f.Group("recording", "-out runs/online -tokens keep -pixels hash")
	f.String(&c.Out, "out", "DIR", "record every served episode into this dataset").ShowDefault("record nothing")
	f.Bool(&c.Resume, "resume", "add to the dataset in -out (served before with the same tasks, provider and capture policy)")
	f.Bool(&c.Force, "force", "replace the dataset in -out (only a forkline dataset's own files are deleted)")
	f.String(&o.text, "text", "full|cap:N", "observation text kept per step: all of it, or at most N bytes (the client always gets all of it)")
	f.Var(&c.Capture.Pixels, "pixels", "full|hash|none", "screenshots kept: PNG bytes in the step row, each distinct PNG once in blobs/, or neither")
	f.Var(&c.Capture.A11y, "a11y", "full|none", "accessibility trees kept or dropped")
	f.Var(&c.Capture.Tokens, "tokens", "keep|drop", "token ids the client attached kept or dropped")
	f.String(&o.captureFile, "capture", "FILE", "the whole capture policy from YAML; -text, -pixels, -a11y, -tokens given too override it")
	f.Int64(&o.rollMB, "roll-mb", "MB", "close a shard generation after about this many MB")
	f.Duration(&o.rollEvery, "roll-interval", "D", "close a shard generation at least this often: the most a crash can lose")

	f.Group("monitoring", "-metrics-addr :9464 -log-format json")
	f.String(&o.metricsAddr, "metrics-addr", "HOST:PORT", "serve Prometheus metrics at http://HOST:PORT/metrics while the server runs (docs/metrics.md)")
	f.Logging()
	return func(ctx context.Context, inv *cli.Invocation) int { return runServe(ctx, inv, o) }
}

func runServe(ctx context.Context, inv *cli.Invocation, o *serveOptions) int {
	cfg := &o.cfg
	if err := o.parse(inv); err != nil {
		return inv.Fail(cli.ExitBadInput, inFlagWords(err, serveFlags))
	}
	cfg.Logger = inv.Logger()
	stopMetrics, err := watchRun(inv, o.metricsAddr, &cfg.Observer, "serve")
	if err != nil {
		return inv.Fail(cli.ExitBadInput, err)
	}
	defer stopMetrics()
	cfg.Ready = func(a net.Addr) {
		// Always printed, even with -quiet: with -addr HOST:0 it is the
		// only way to learn the port.
		inv.Errorf("listening on http://%s (OpenEnv sessions at ws://%s/ws)", a, a)
	}
	inv.OnSecondSignal(func() {
		inv.Errorf("second signal: exiting now. Closed shards stay valid; the open generation is lost, and the sandboxes stay behind until the next run sweeps them. Add to the dataset again with -resume.")
	})
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(serve.MemoryLimit(*cfg))
	}
	sum, err := serve.Run(ctx, *cfg)
	err = inFlagWords(err, serveFlags)
	if sum != nil {
		if inv.JSON {
			inv.PrintJSON(sum)
		} else {
			ui.WriteServe(inv.Stdout, sum)
		}
	}
	switch {
	case err == nil:
		return cli.ExitOK
	case errors.Is(err, serve.ErrConfig):
		return inv.Fail(cli.ExitBadInput, err)
	}
	return inv.Fail(cli.ExitFailed, err)
}

// parse turns the flags that are not Config fields into Config, checking
// every value.
func (o *serveOptions) parse(inv *cli.Invocation) error {
	cfg := &o.cfg
	if err := checkRanges([]rangeCheck{
		{"max-sessions", fmt.Sprint(cfg.MaxSessions), cfg.MaxSessions >= 1, "an integer >= 1"},
		{"standby", fmt.Sprint(cfg.Standby), cfg.Standby >= 0, "an integer >= 0 (0: no standby)"},
		{"max-creates", fmt.Sprint(cfg.MaxCreates), !inv.Given("max-creates") || cfg.MaxCreates >= 1, "an integer >= 1 (leave it out for 2 × -max-sessions)"},
		{"idle-timeout", cfg.IdleTimeout.String(), cfg.IdleTimeout >= 0, "a duration >= 0 (0s: never)"},
		{"grace", cfg.Grace.String(), cfg.Grace >= 0, "a duration >= 0"},
		{"roll-mb", fmt.Sprint(o.rollMB), o.rollMB >= 1 && o.rollMB <= maxRollMB, fmt.Sprintf("an integer from 1 to %d", maxRollMB)},
		{"roll-interval", o.rollEvery.String(), o.rollEvery > 0, "a positive duration, e.g. 30s"},
		{"max-message-mb", fmt.Sprint(o.maxMsgMB), o.maxMsgMB >= 1 && o.maxMsgMB <= serve.MaxMessageLimit>>20, fmt.Sprintf("an integer from 1 to %d", serve.MaxMessageLimit>>20)},
		{"message-budget-mb", fmt.Sprint(o.budgetMB), o.budgetMB >= o.maxMsgMB && o.budgetMB <= 1<<20, "an integer from -max-message-mb to 1048576"},
		{"message-timeout", cfg.MessageTimeout.String(), cfg.MessageTimeout > 0, "a positive duration, e.g. 30s"},
	}); err != nil {
		return fmt.Errorf("%s: %w", inv.Prefix(), err)
	}
	for _, name := range []string{"resume", "force", "text", "pixels", "a11y", "tokens", "capture", "roll-mb", "roll-interval"} {
		if inv.Given(name) && cfg.Out == "" {
			return fmt.Errorf("%s: -%s is about the recording: give -out DIR too", inv.Prefix(), name)
		}
	}
	var err error
	if cfg.Reset, err = pool.ParseStrategy(o.reset); err != nil {
		return err
	}
	if err := applyCapture(inv, &cfg.Capture, o.text, o.captureFile); err != nil {
		return err
	}
	cfg.Shards = shardConfig(o.rollMB, o.rollEvery)
	cfg.MaxMessageBytes, cfg.MessageBudget = o.maxMsgMB<<20, o.budgetMB<<20
	return nil
}
