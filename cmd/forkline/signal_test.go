package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
)

// Every subcommand that can run for long shares one signal handling
// (internal/cli): the first SIGINT/SIGTERM cancels its work, the second
// exits at once. These tests run the real binary for each, stuck where no
// context reaches: opening a dataset's manifest.json (or a task file)
// that is a FIFO nobody writes, as a dead NFS server or a wedged FUSE
// mount would hold it. The first signal cannot end that; the second must.
// (export and replay used to swallow the second signal and hang.)

// fifoDataset is a directory whose manifest.json is a FIFO.
func fifoDataset(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "stuck")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, shard.ManifestFile), 0o644))
	return dir
}

// waitBlockedOnFIFO waits until a thread of the process waits in the
// kernel for a FIFO's other end.
func waitBlockedOnFIFO(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool {
		tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "wchan"))
		for _, f := range tasks {
			if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == "wait_for_partner" {
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "the process never blocked opening the FIFO (/proc/PID/task/*/wchan)")
}

// waitExitWithin waits at most d for cmd and returns its exit code, or -1
// when it is still running.
func waitExitWithin(done <-chan error, d time.Duration) int {
	select {
	case err := <-done:
		return exitCode(err)
	case <-time.After(d):
		return -1
	}
}

func TestSecondSignalExitsEverySubcommandAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"collect", func(t *testing.T) []string {
			spec := filepath.Join(t.TempDir(), "tasks.yaml")
			require.NoError(t, syscall.Mkfifo(spec, 0o644))
			return []string{"collect", "-tasks", spec, "-out", filepath.Join(t.TempDir(), "run"), "-workdir", t.TempDir()}
		}},
		{"export", func(t *testing.T) []string {
			return []string{"export", "-in", fifoDataset(t), "-to", "jsonl", "-out", filepath.Join(t.TempDir(), "out.jsonl")}
		}},
		{"replay", func(t *testing.T) []string {
			return []string{"replay", "-in", fifoDataset(t), "-workdir", t.TempDir()}
		}},
		{"merge", func(t *testing.T) []string {
			return []string{"merge", "-out", filepath.Join(t.TempDir(), "all"), fifoDataset(t)}
		}},
		{"inspect", func(t *testing.T) []string { return []string{"inspect", fifoDataset(t)} }},
		{"verify", func(t *testing.T) []string { return []string{"verify", fifoDataset(t)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(forklineBin, tc.args(t)...)
			var stderr syncBuffer
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer cmd.Process.Kill()
			waitBlockedOnFIFO(t, cmd.Process.Pid)

			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			require.Eventually(t, func() bool {
				return strings.Contains(stderr.String(), "forkline "+tc.name+": terminated: stopping (signal again to stop at once)")
			}, 10*time.Second, 5*time.Millisecond, "the first signal was not acknowledged: %s", stderr.String())
			require.Equal(t, -1, waitExitWithin(done, 300*time.Millisecond), "the command cannot stop by itself here")

			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			code := waitExitWithin(done, 10*time.Second)
			require.Equal(t, cli.ExitInterrupted, code, "the second signal exits at once: %s", stderr.String())
			require.Contains(t, stderr.String(), "second signal: exiting now")
		})
	}
}

// images talks to the Docker engine: the first signal cancels a request
// that the engine never answers, and the command exits 130.
func TestImagesFirstSignalCancelsTheEngineRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		// Accept and never answer: an engine that hangs.
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()
	cmd := exec.Command(forklineBin, "images")
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+sock)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("forkline images never connected")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, cli.ExitInterrupted, waitExitWithin(done, 5*time.Second), stderr.String())
	require.Contains(t, stderr.String(), "forkline images: terminated: stopping")
}
