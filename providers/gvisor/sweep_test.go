package gvisor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// helperEnv, when set, makes the test binary a stand-in for a forkline run
// that gets SIGKILLed: see TestSweepAfterSIGKILL. Its value is
// "DIR ROOTFS".
const helperEnv = "FORKLINE_GVISOR_CRASH_HELPER"

func TestMain(m *testing.M) {
	if v := os.Getenv(helperEnv); v != "" {
		crashHelper(v)
		return
	}
	os.Exit(m.Run())
}

// crashHelper opens a provider, makes a golden with a process running, a
// checkpoint and a fork, says "ready" and waits to be killed.
func crashHelper(v string) {
	dir, rootfs, _ := strings.Cut(v, " ")
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("helper:", err)
		os.Exit(1)
	}
	p, err := New(ctx, providers.Options{Dir: dir, Params: map[string]string{ParamRootfs: rootfs}})
	if err != nil {
		fail(err)
	}
	sb, err := p.Create(ctx, providers.Spec{})
	if err != nil {
		fail(err)
	}
	if _, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "sleep 600 >/dev/null 2>&1 &"}); err != nil {
		fail(err)
	}
	cp, err := p.Checkpoint(ctx, sb, "crash")
	if err != nil {
		fail(err)
	}
	if _, err := p.Fork(ctx, cp); err != nil {
		fail(err)
	}
	fmt.Println("ready", p.Dir())
	time.Sleep(time.Minute)
}

// A run killed with SIGKILL leaves its sandboxes running and its directory;
// the next provider's Sweep deletes them, and leaves a live provider's
// alone.
func TestSweepAfterSIGKILL(t *testing.T) {
	needRunsc(t)
	base := t.TempDir()
	rootfs := busyboxRootfs(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+base+" "+rootfs)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	dead, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	require.True(t, ok, "helper said %q", line)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	rs := &runsc{path: mustRunsc(t), root: filepath.Join(dead, "state")}
	ids, err := rs.list(t.Context())
	require.NoError(t, err)
	require.Len(t, ids, 2, "the killed run left its golden's sandbox and its fork")
	states := map[string]int{}
	for _, id := range ids {
		state, err := rs.containerState(t.Context(), id)
		require.NoError(t, err)
		states[state]++
	}
	require.Equal(t, map[string]int{"running": 1, "stopped": 1}, states, "the fork runs; the golden stopped at its checkpoint")

	live := open(t, map[string]string{ParamRootfs: rootfs})
	sb := create(t, live, providers.Spec{})
	p, err := New(t.Context(), providers.Options{Dir: base, Params: map[string]string{ParamRootfs: rootfs}})
	require.NoError(t, err)
	defer p.Close(context.Background())
	require.NoError(t, p.Sweep(t.Context()))
	require.NoDirExists(t, dead, "Sweep removes the dead run's directory")
	require.Equal(t, "alive\n", sh(t, sb, "echo alive").Text(), "a live provider's sandbox is left alone")
}

func mustRunsc(t *testing.T) string {
	t.Helper()
	bin, err := findRunsc("")
	require.NoError(t, err)
	return bin
}
