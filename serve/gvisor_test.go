package serve_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers/gvisor"
	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
)

// counterServeTask's start leaves a server running that keeps a count only
// in memory and answers each request with the next number.
const counterServeTask = `id: counter
instruction: ask the counter
files:
  server.sh: |
    n=0; while :; do if [ -f req ]; then rm -f req; n=$((n+1)); echo $n > resp.tmp; mv resp.tmp resp; fi; sleep 0.05; done
  ask.sh: |
    : > req; i=0; while [ ! -f resp ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; cat resp; rm -f resp
start: ["sh server.sh >/dev/null 2>&1 &"]
limits: {max_steps: 10, action_timeout: 60s}
`

// On gvisor, serve's checkpoint message is a memory checkpoint: a session
// that resets from it talks to the parent's server as the parent left it
// at the checkpoint (its count), not as the parent went on afterwards.
func TestGvisorCheckpointOverTheWireCarriesProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	testenv.NeedGvisor(t)
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	require.NoError(t, gvisor.BusyboxRootfs(rootfs, "/bin/busybox"))
	ts := startServer(t, serve.Config{Tasks: writeTask(t, counterServeTask), Provider: "gvisor",
		ProviderParams: map[string]string{gvisor.ParamRootfs: rootfs}, SessionCheckpoints: 1})
	ask := func(c *openenvtest.Client) string {
		t.Helper()
		r, err := c.Step(execAction("sh ask.sh"))
		require.NoError(t, err)
		out, _ := r.Observation["output"].(string)
		return strings.TrimSpace(out)
	}
	p, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer p.Disconnect()
	_, err = p.Reset(map[string]any{"episode_id": "parent"})
	require.NoError(t, err)
	require.Equal(t, "1", ask(p))
	require.Equal(t, "2", ask(p))
	cp, err := checkpointMsg(p)
	require.NoError(t, err)
	require.Equal(t, "3", ask(p), "the parent goes on with its server")

	b, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer b.Disconnect()
	_, err = b.Reset(map[string]any{"from_checkpoint": cp["checkpoint_id"]})
	require.NoError(t, err)
	require.Equal(t, "3", ask(b), "the branch's server is the parent's at the checkpoint (2), not after it")
	require.Equal(t, "4", ask(p), "and the parent's is its own")
}
