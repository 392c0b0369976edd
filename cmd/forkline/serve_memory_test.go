package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
)

// procKB reads a "Name:   N kB" line of /proc/PID/status.
func procKB(t *testing.T, pid int, name string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}

// The server's peak memory with every session sending the largest message
// allowed, all at once: 16 sessions (-max-sessions 16) each send one 8 MiB
// message (-max-message-mb, default) to a server with the default message
// budget (64 MiB: eight of them handled at once, the others waiting), each
// message a done action whose answer fills it, so that it is read,
// decoded, captured, verified, written to the dataset and echoed back. The
// peak resident set (ru_maxrss) of the real binary, from its start until every
// episode is recorded, stays under the bound docs/serve.md states: the
// soft memory limit forkline serve sets (64 MiB + 6 × the budget = 448
// MiB) and 64 MiB for what is not Go's heap (stacks, the runtime, memory
// not yet given back). SERVE_MEMORY_SESSIONS=64 measures the defaults'
// 64 sessions (docs/serve.md has the figure). Before the fix one 60 MiB
// message took the server from 134 to 1,318 MB, and it stayed there;
// without the limit, or with sessions keeping their ended episodes, 16
// sessions peaked at 700-850 MB and 64 at 1.2 GB.
func TestServePeakMemoryWithEveryLargestMessageAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 128 MiB to the server binary")
	}
	dir := t.TempDir()
	spec := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(spec, []byte("id: big\ninstruction: take a large action\nlimits: {max_steps: 3}\nverify: {cmd: 'true'}\n"), 0o644))
	work := filepath.Join(dir, "work")
	require.NoError(t, os.MkdirAll(work, 0o755))
	sessions := 16
	if n, err := strconv.Atoi(os.Getenv("SERVE_MEMORY_SESSIONS")); err == nil {
		sessions = n
	}
	cmd, base := startServe(t, "-tasks", spec, "-workdir", work, "-out", filepath.Join(dir, "served"), "-quiet", "-max-sessions", strconv.Itoa(sessions))
	pid := cmd.Process.Pid
	// The largest message allowed: a step whose done answer fills it to
	// exactly -max-message bytes. The episode ends with it, is verified and
	// recorded: the message is read, decoded, captured and written.
	head, tail := `{"type":"step","data":{"kind":"done","answer":"`, `"}}`
	payload := []byte(head + strings.Repeat("y", serve.DefaultMaxMessageBytes-len(head)-len(tail)) + tail)
	require.Len(t, payload, serve.DefaultMaxMessageBytes)

	clients := make([]*openenvtest.Client, sessions)
	for i := range clients {
		c, err := openenvtest.Dial(base)
		require.NoError(t, err)
		_, err = c.Reset(map[string]any{"episode_id": fmt.Sprintf("big-%02d", i)})
		require.NoError(t, err)
		clients[i] = c
	}
	baseline := procKB(t, pid, "VmRSS")
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, sessions)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := c.SendRaw(payload)
			if err == nil {
				obs, _ := resp["data"].(map[string]any)["observation"].(map[string]any)
				if obs["exit_reason"] != "done" {
					err = fmt.Errorf("the step answered %v", obs["exit_reason"])
				}
			}
			errs[i] = err
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("%d sessions × %d bytes answered in %s", sessions, len(payload), time.Since(began))
	for i, err := range errs {
		require.NoError(t, err, "session %d: %v", i, err)
	}
	for _, c := range clients {
		c.Disconnect()
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait())
	// The kernel's account of the process's peak resident set over its
	// whole life, its drain and the dataset's close included.
	peak := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	bound := serve.MemoryLimit(serve.Config{MaxMessageBytes: serve.DefaultMaxMessageBytes}) + 64<<20
	t.Logf("server RSS: %d MB before the messages, peak %d MB (bound %d MB)", baseline>>10, peak>>20, bound>>20)
	require.Less(t, peak, bound, "the peak RSS stays under the soft memory limit and 64 MiB")
}
