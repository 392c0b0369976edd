package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/testenv"
)

// serve -resume refuses what collect -resume refuses (one rule,
// manifest.Provider.SettingDiffs): a dataset served on docker with one
// image is not added to with another, exit 2, every file of it as it was.
func TestServeResumeRefusesAnotherImage(t *testing.T) {
	testenv.NeedDocker(t)
	testenv.NeedDockerImage(t, testenv.DockerDebian, "forkline/debian")
	tasks := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(tasks, "ok.yaml"), []byte("id: ok\ninstruction: nothing\n"), 0o644))
	out := filepath.Join(t.TempDir(), "served")
	args := []string{"serve", "-tasks", tasks, "-addr", "127.0.0.1:0", "-out", out, "-workdir", t.TempDir(), "-provider", "docker"}

	cmd := forklineProcess(args[0], append(args[1:len(args):len(args)], "-provider-opt", "image=forkline/busybox")...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var logs syncBuffer
	cmd.Stdout = &logs
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	listening := regexp.MustCompile(`listening on http://`)
	up := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write([]byte(sc.Text() + "\n"))
			if listening.MatchString(sc.Text()) {
				up <- struct{}{}
			}
		}
	}()
	select {
	case <-up:
	case <-time.After(2 * time.Minute):
		t.Fatalf("forkline serve did not start:\n%s", logs.String())
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, cli.ExitOK, exitCode(cmd.Wait()), logs.String())

	before := treeHash(t, out)
	code, stdout, errOut := runBin(t, 2*time.Minute, append(args, "-resume", "-provider-opt", "image=forkline/debian")...)
	require.Equal(t, cli.ExitBadInput, code, "%s%s", stdout, errOut)
	require.Contains(t, errOut, `-provider-opt image: the run used "forkline/busybox", this command gives "forkline/debian" (it changes what a docker sandbox is)`)
	require.Equal(t, before, treeHash(t, out), "a refused resume changes nothing")
}
