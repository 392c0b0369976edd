package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/view"
)

type viewOptions struct {
	addr    string
	remote  bool
	reports []string
	reward  string
}

func viewCommand() *cli.Command {
	return &cli.Command{
		Name:    "view",
		Summary: "look at datasets in a web browser: the run, its episodes (filtered, sorted), each episode as the model saw it",
		About: `Serves a local, read-only web application over one or more datasets until SIGINT or SIGTERM: each
run's status, plan, provider, policy and capture policy, rewards and exit reasons by task, the reward
histogram, reset latency and token drift; its episode list, filtered by task, exit reason, reward
range, token drift, branch or not, export's -where columns and text in the actions and
observations (the selection export and inspect -list apply), sorted and paged from an index of the
episodes' summary columns (about 160 bytes an episode); and each episode as the model saw it,
with its screenshots, accessibility trees, rewards and verifier output, timings, token record (loss
mask and logprobs) and branching tree. Given two datasets, the first page compares them.

The pages are embedded in forkline and fetch nothing from the network. The server listens on
loopback and answers only requests for loopback names: a dataset holds what the agents saw and the
viewer has no authentication. -remote lifts both (on a network you trust). Nothing is written.`,
		Args: "DIR...", ArgsFirst: true, MinArgs: 1, MaxArgs: -1,
		Arguments: []cli.Argument{{Name: "DIR...", Usage: "the dataset directories (two or more: compare them)"}},
		Examples: []string{
			"forkline view runs/demo",
			"forkline view runs/demo runs/demo-qwen -addr 127.0.0.1:9000",
			"forkline view runs/demo -report diff.json",
		},
		Exits: []cli.Exit{
			{Code: cli.ExitOK, Meaning: "stopped by SIGINT or SIGTERM"},
			{Code: cli.ExitFailed, Meaning: "the server failed while serving"},
			{Code: cli.ExitBadInput, Meaning: "not a dataset, a -report that is not a replay report, or an address that cannot be listened on (or is not loopback, without -remote)"},
		},
		Setup: func(f *cli.FlagSet) cli.Runner {
			o := &viewOptions{addr: "127.0.0.1:8080", reward: inspect.DefaultReward}
			f.Group("server", "-addr 127.0.0.1:8080")
			f.String(&o.addr, "addr", "HOST:PORT", "address to listen on (port 0: any free port, printed at start); loopback unless -remote")
			f.Bool(&o.remote, "remote", "listen on a non-loopback address and answer requests for any host name (no authentication: a network you trust only)")
			f.Group("content", "-reward verify -report diff.json")
			f.String(&o.reward, "reward", "NAME", "the episode-level reward the pages show, filter and sort by")
			f.List(&o.reports, "report", "FILE,...", "replay reports (forkline replay -report FILE, .json or .html) to link from the runs and episodes they cover")
			return func(ctx context.Context, inv *cli.Invocation) int { return runView(ctx, inv, o) }
		},
	}
}

func runView(ctx context.Context, inv *cli.Invocation, o *viewOptions) int {
	if err := view.CheckAddr(o.addr, o.remote); err != nil {
		inv.Errorf("-addr %s: %v (add -remote to listen there anyway)", o.addr, err)
		return cli.ExitBadInput
	}
	srv, err := view.New(ctx, view.Config{Dirs: inv.Args, Reports: o.reports, Reward: o.reward, AnyHost: o.remote})
	switch {
	case errors.Is(err, context.Canceled):
		return inv.Fail(cli.ExitInterrupted, err)
	case err != nil:
		return inv.Fail(cli.ExitBadInput, err)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return inv.Fail(cli.ExitBadInput, err)
	}
	// Always printed, even with -quiet: with -addr HOST:0 it is the only
	// way to learn the port.
	inv.Errorf("serving %d dataset(s) at http://%s/ (stop with Ctrl-C)", len(inv.Args), ln.Addr())
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return inv.Fail(cli.ExitFailed, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	return cli.ExitOK
}
