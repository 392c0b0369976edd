//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// writeBigRun writes a run of n episodes of 8 steps with 4 KiB outputs:
// big enough that exporting it takes a while.
func writeBigRun(t *testing.T, n int) string {
	t.Helper()
	spec := task.Spec{ID: "shell", Instruction: "Count the files."}.WithDefaults()
	tasks, err := json.Marshal([]map[string]any{{"id": spec.ID, "hash": spec.Hash(), "spec": spec}})
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "run")
	w, err := shard.Create(dir, shard.Manifest{RunID: "r", Tasks: tasks}, shard.DefaultConfig())
	require.NoError(t, err)
	out := strings.Repeat("a line of output from a command\n", 128)
	for i := range n {
		id := fmt.Sprintf("ep-%06d", i)
		b := shard.EpisodeBatch{Episode: schemas.EpisodeRow{EpisodeID: id, RunID: "r", TaskID: "shell", ExitReason: "done", Steps: 8}}
		for s := range 8 {
			b.Steps = append(b.Steps, schemas.StepRow{EpisodeID: id, StepIndex: int32(s), TaskID: "shell", ActionKind: "exec",
				ActionJSON: fmt.Sprintf(`{"kind":"exec","cmd":"echo %d"}`, s), Output: fmt.Sprint(i, s, out), ExitCode: 0})
		}
		require.NoError(t, w.Commit(t.Context(), b))
	}
	require.NoError(t, w.Close(shard.StatusComplete))
	return dir
}

// marked reports whether path carries export's mark.
func marked(path string) bool {
	n, err := unix.Lgetxattr(path, "user.forkline.export", make([]byte, 512))
	return err == nil && n > 0
}

// stagingOf returns the staging entries of an export to out.
func stagingOf(t *testing.T, out string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*"))
	require.NoError(t, err)
	return matches
}

// A real export process, SIGKILLed while it builds its output, leaves its
// hidden staging directory behind (nothing at -out); the next export into
// the same place deletes it and writes the output.
func TestKilledExportStagingIsRemovedByTheNext(t *testing.T) {
	// The kill must land while the export builds: the staging directory
	// exists and -out does not. An export that finished first is run again
	// on a run twice as big.
	var in, out, staged string
	for n := 500; staged == "" && n <= 32000; n *= 2 {
		in = writeBigRun(t, n)
		out = filepath.Join(t.TempDir(), "hf")
		cmd := forklineProcess("export", "-in", in, "-to", "hf", "-rows", "step", "-out", out)
		require.NoError(t, cmd.Start())
		deadline := time.Now().Add(time.Minute)
		for staged == "" && time.Now().Before(deadline) {
			// Marked: the export has begun building (a kill in the
			// microseconds between creating the directory and marking it
			// leaves an empty unmarked directory, which no sweep deletes).
			if s := stagingOf(t, out); len(s) == 1 && marked(s[0]) {
				staged = s[0]
				cmd.Process.Signal(syscall.SIGSTOP)
				break
			}
			time.Sleep(time.Millisecond)
		}
		if _, err := os.Stat(out); err == nil {
			staged = "" // it finished before it stopped: too small a run
		}
		cmd.Process.Kill()
		err := cmd.Wait()
		if staged != "" {
			t.Logf("killed an export of %d episodes mid-way", n)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "the export died of the kill")
		}
	}
	require.NotEmpty(t, staged, "no export was ever caught mid-way")
	assert.DirExists(t, staged, "a killed export leaves its staging directory")
	assert.NoDirExists(t, out)

	res, err := forklineProcess("export", "-in", in, "-to", "hf", "-rows", "step", "-out", out).CombinedOutput()
	require.NoError(t, err, "%s", res)
	assert.NoDirExists(t, staged, "the next export removed the killed one's staging")
	assert.Empty(t, stagingOf(t, out))
	assert.FileExists(t, filepath.Join(out, "README.md"))
	entries, err := os.ReadDir(filepath.Dir(out))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{filepath.Base(out)}, names, "only the output is left in its directory")
}
