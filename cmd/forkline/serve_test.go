package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/serve/openenvtest"
)

const servedTask = `id: served
instruction: leave a mark, slowly
files:
  notes.txt: hello
verify: {cmd: test -f notes.txt}
solution:
  - {kind: exec, cmd: cat notes.txt}
  - {kind: done}
`

var listening = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

// startServe runs the real binary's serve on a free loopback port and
// returns its base URL once it listens; its stderr is copied to the test's.
func startServe(t *testing.T, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := forklineProcess("serve", append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Stdout = os.Stdout
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stopServe(cmd) })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(os.Stderr, sc.Text())
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		io.Copy(os.Stderr, stderr)
	}()
	select {
	case base := <-found:
		return cmd, base
	case <-time.After(time.Minute):
		t.Fatal("forkline serve did not say where it listens")
	}
	return nil, ""
}

// stopServe stops a server a test left running as an operator would, with
// SIGTERM: it closes its sessions and unmounts and removes their sandboxes
// before the test's directories are removed (after a SIGKILL a session's
// overlay could still be mounted, its teardown in the background cut off,
// and removing the work directory then failed on the whiteouts deleting
// through the mount made); SIGKILL after a minute. A server the test
// already waited for is left alone.
func stopServe(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
	}
}

// SIGTERM drains the real binary: the step in flight finishes and is
// answered, every session is closed, every sandbox destroyed, the dataset
// closed complete; it verifies and replays identically, and -resume adds
// to it without taking a recorded id twice.
func TestServeSIGTERMDrainsThenResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the server binary for seconds")
	}
	dir := t.TempDir()
	work, out := filepath.Join(dir, "work"), filepath.Join(dir, "served")
	require.NoError(t, os.MkdirAll(work, 0o755))
	spec := filepath.Join(dir, "served.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(servedTask), 0o644))
	cmd, base := startServe(t, "-tasks", spec, "-out", out, "-workdir", work, "-standby", "1")

	// One finished episode, one idle mid-episode, one with a step in flight.
	done, err := openenvtest.Dial(base)
	require.NoError(t, err)
	_, err = done.Reset(map[string]any{"episode_id": "finished"})
	require.NoError(t, err)
	r, err := done.Step(map[string]any{"kind": "done"})
	require.NoError(t, err)
	require.True(t, r.Done)
	require.Equal(t, 1.0, *r.Reward)

	idle, err := openenvtest.Dial(base)
	require.NoError(t, err)
	_, err = idle.Reset(map[string]any{"episode_id": "idle"})
	require.NoError(t, err)

	busy, err := openenvtest.Dial(base)
	require.NoError(t, err)
	_, err = busy.Reset(map[string]any{"episode_id": "in-flight"})
	require.NoError(t, err)
	mark := filepath.Join(dir, "started")
	answer := make(chan openenvtest.StepResult, 1)
	stepErr := make(chan error, 1)
	go func() {
		r, err := busy.Step(map[string]any{"kind": "exec", "cmd": "touch " + mark + "; sleep 1; echo finished"})
		stepErr <- err
		answer <- r
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(mark); return err == nil }, time.Minute, 5*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))

	require.NoError(t, <-stepErr, "the step in flight is answered")
	got := <-answer
	require.Equal(t, "finished\n", got.Observation["output"])
	require.Equal(t, 0.0, got.Observation["exit_code"])
	for _, c := range []*openenvtest.Client{busy, idle} {
		code, text, err := c.WaitClosed(30 * time.Second)
		require.NoError(t, err)
		require.Equal(t, websocket.CloseGoingAway, code)
		require.Contains(t, text, "server stopped")
	}
	require.Equal(t, cli.ExitOK, exitCode(cmd.Wait()))
	left, err := os.ReadDir(work)
	require.NoError(t, err)
	require.Empty(t, left, "sandboxes, standby forks or checkpoints left after the server stopped")

	verify := forklineProcess("verify", out)
	verify.Stdout, verify.Stderr = os.Stdout, os.Stderr
	require.Equal(t, cli.ExitOK, exitCode(verify.Run()))
	var rep strings.Builder
	rp := forklineProcess("replay", "-in", out, "-workdir", t.TempDir())
	rp.Stdout, rp.Stderr = &rep, os.Stderr
	require.Equal(t, cli.ExitOK, exitCode(rp.Run()), rep.String())
	require.Contains(t, rep.String(), "2 identical, 0 diverged, 0 errored", "idle took no step: not kept")

	ds, err := shard.Open(out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
	exits := map[string]string{}
	for ep, err := range ds.Episodes() {
		require.NoError(t, err)
		exits[ep.EpisodeID] = ep.ExitReason + ": " + ep.Detail
	}
	require.Equal(t, map[string]string{"finished": "done: ", "in-flight": "cancelled: the server stopped"}, exits)

	// -resume adds to the dataset; a recorded id is not taken twice.
	cmd, base = startServe(t, "-tasks", spec, "-out", out, "-workdir", work, "-resume")
	c, err := openenvtest.Dial(base)
	require.NoError(t, err)
	_, err = c.Reset(map[string]any{"episode_id": "finished"})
	var se *openenvtest.ServerError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "VALIDATION_ERROR", se.Code)
	_, err = c.Reset(map[string]any{"episode_id": "after-resume"})
	require.NoError(t, err)
	_, err = c.Step(map[string]any{"kind": "done"})
	require.NoError(t, err)
	c.Disconnect()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, cli.ExitOK, exitCode(cmd.Wait()))
	ds, err = shard.Open(out)
	require.NoError(t, err)
	n := 0
	for ep, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Contains(t, []string{"finished", "in-flight", "after-resume"}, ep.EpisodeID)
		n++
	}
	require.Equal(t, 3, n)
}

func TestServeRefusesBadInputChangingNothing(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		says string
	}{
		{"no tasks", []string{}, "-tasks"},
		{"missing tasks", []string{"-tasks", filepath.Join(dir, "nope")}, "nope"},
		{"bad address", []string{"-tasks", "../../examples/tasks", "-addr", "256.1.1.1:80"}, "-addr"},
		{"recording flag without -out", []string{"-tasks", "../../examples/tasks", "-resume"}, "-out"},
		{"zero sessions", []string{"-tasks", "../../examples/tasks", "-max-sessions", "0"}, "-max-sessions"},
		{"unknown provider", []string{"-tasks", "../../examples/tasks", "-provider", "vmware"}, "vmware"},
		{"resume of nothing", []string{"-tasks", "../../examples/tasks", "-out", filepath.Join(dir, "empty"), "-resume"}, "no dataset"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := execute(t.Context(), append([]string{"serve", "-addr", "127.0.0.1:0"}, c.args...)...)
			require.Equal(t, cli.ExitBadInput, res.code, res.stderr)
			require.Contains(t, res.stderr, c.says)
		})
	}
	_, err := os.Stat(filepath.Join(dir, "empty"))
	require.True(t, os.IsNotExist(err), "a refused -resume made its directory")
}
