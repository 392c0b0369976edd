package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"

	"github.com/forkline/forkline/gateway"
	"github.com/forkline/forkline/internal/cli"
)

type relayOptions struct {
	listen, socket string
}

// relayCommand is what -policy agent runs inside a sandbox without a
// network: the harness's calls to a loopback port carried to forkline's
// gateway socket, bind-mounted in.
func relayCommand() *cli.Command {
	return &cli.Command{
		Name:    "relay",
		Summary: "inside a sandbox: carry an agent harness's model calls to forkline's gateway socket, and run the harness",
		About: `Runs COMMAND (an agent harness) while listening on a loopback address and carrying every
connection to the unix socket of forkline's model gateway, byte for byte. -policy agent runs it
inside sandboxes that have no network of their own (docker's network none), from a statically
linked forkline mounted read-only beside the gateway's socket (docs/agents.md); the harness is
pointed at the loopback address. relay exits with COMMAND's exit status (128+N when a signal N
ended it); a SIGINT or SIGTERM to relay is passed on to COMMAND.`,
		Args: "-- COMMAND [ARG...]", MinArgs: 1, MaxArgs: -1,
		Examples: []string{
			"forkline relay -listen 127.0.0.1:47611 -socket /run/forkline-gateway/gw.sock -- codex exec 'Fix sum.sh.'",
		},
		Exits: []cli.Exit{
			{Code: cli.ExitBadInput, Meaning: "a bad flag, or the address or socket cannot be used (otherwise: COMMAND's own exit status)"},
		},
		Setup: func(f *cli.FlagSet) cli.Runner {
			o := &relayOptions{}
			f.Group("relay", "-listen 127.0.0.1:47611 -socket /run/forkline-gateway/gw.sock")
			f.String(&o.listen, "listen", "HOST:PORT", "the loopback address the harness calls").Require()
			f.String(&o.socket, "socket", "PATH", "the gateway's unix socket").Require()
			return func(ctx context.Context, inv *cli.Invocation) int { return runRelay(ctx, inv, o) }
		},
	}
}

func runRelay(ctx context.Context, inv *cli.Invocation, o *relayOptions) int {
	if _, err := os.Stat(o.socket); err != nil {
		return inv.Fail(cli.ExitBadInput, fmt.Errorf("forkline relay: -socket %s: %w", o.socket, err))
	}
	l, err := net.Listen("tcp", o.listen)
	if err != nil {
		return inv.Fail(cli.ExitBadInput, fmt.Errorf("forkline relay: -listen %s: %w", o.listen, err))
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	relayed := make(chan error, 1)
	go func() { relayed <- gateway.Relay(rctx, l, o.socket) }()
	defer func() {
		stop()
		<-relayed
	}()

	cmd := exec.Command(inv.Args[0], inv.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, inv.Stdout, inv.Stderr
	if err := cmd.Start(); err != nil {
		inv.Errorf("forkline relay: %v", err)
		return 127
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		werr = <-waited
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
		return 0
	case errors.As(werr, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		inv.Errorf("forkline relay: %v", werr)
		return 1
	}
}
