package docker

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/moby/moby/client"
)

// ErrNoEngine is wrapped by the error Connect (and so New and Open) returns
// when no Docker engine answers. The message names the address that was
// tried, how it was chosen (DOCKER_HOST or the default socket) and how to
// start an engine. It matches runtime.ErrUnavailable too.
var ErrNoEngine error = &engineError{"docker: no engine answers"}

// pingTimeout bounds the first request to the engine. A local engine answers
// in about a millisecond; a remote one gets more slack.
const pingTimeout = 10 * time.Second

// Connect returns a client for the engine named by the environment
// (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH; the default socket when
// DOCKER_HOST is unset) after checking that it answers. The API version is
// negotiated with the engine, so Debian's Engine 20.10 (API 1.41) and newer
// engines both work, unless DOCKER_API_VERSION pins a version. The caller
// closes the client.
func Connect(ctx context.Context) (*client.Client, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker: configuring the client from the environment: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		_ = cli.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("docker: connecting: %w", ctx.Err())
		}
		return nil, engineDown(cli.DaemonHost(), err)
	}
	return cli, nil
}

// engineDown explains that the engine at host did not answer ping.
func engineDown(host string, err error) error {
	how := "DOCKER_HOST is unset, so the default socket"
	if v := os.Getenv("DOCKER_HOST"); v != "" {
		how = "from DOCKER_HOST=" + v
	}
	return fmt.Errorf("%w at %s (%s; tried GET /_ping with API version negotiation: %v); "+
		"start one as root with `dockerd --bridge=none --iptables=false &` "+
		"(or `bash .ci/docker-up.sh`, which also installs docker.io and builds the images), "+
		"or point DOCKER_HOST at a running engine", ErrNoEngine, host, how, err)
}
