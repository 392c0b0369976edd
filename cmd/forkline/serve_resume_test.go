package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/testenv"
)

// serve -resume refuses what collect -resume refuses (one rule,
// manifest.ResumeMismatches): a dataset served on docker with one
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

// collect -resume and serve -resume apply one rule (manifest.
// ResumeMismatches): the same change to a dataset's tasks, capture policy or
// a provider setting that shapes a sandbox is refused by both, exit 2, in
// the same words, every file as it was; a setting that only changes how
// sandboxes are had (local's fork method) is accepted by both.
func TestCollectAndServeResumeRefuseTheSameChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary several times")
	}
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks")
	require.NoError(t, os.MkdirAll(tasks, 0o755))
	spec := filepath.Join(tasks, "served.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(servedTask), 0o644))
	work := t.TempDir()
	collected, served := filepath.Join(dir, "collected"), filepath.Join(dir, "served")

	code, stdout, stderr := runBin(t, 5*time.Minute, "collect", "-tasks", tasks, "-out", collected, "-workdir", work, "-repeats", "1", "-replicas", "1", "-quiet")
	require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)
	cmd, _ := startServe(t, "-tasks", tasks, "-out", served, "-workdir", work)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, cli.ExitOK, exitCode(cmd.Wait()))

	edited := filepath.Join(dir, "edited")
	require.NoError(t, os.MkdirAll(edited, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(edited, "served.yaml"), []byte(strings.Replace(servedTask, "hello", "hullo", 1)), 0o644))

	for _, c := range []struct {
		name  string
		tasks string
		args  []string
		want  string
	}{
		{"capture", tasks, []string{"-pixels", "none"}, `capture policy (-text, -pixels, -a11y, -tokens, -capture): the run used {"text":"full","pixels":"hash","a11y":"full","tokens":"keep"}, this command gives {"text":"full","pixels":"none","a11y":"full","tokens":"keep"}`},
		{"provider setting", tasks, []string{"-provider-opt", "pids=64"}, `-provider-opt pids: the run used none (the default), this command gives "64" (it changes what a local sandbox is)`},
		{"task edited", edited, nil, "task served changed since the run started"},
	} {
		for _, target := range []struct{ command, out string }{{"collect", collected}, {"serve", served}} {
			args := []string{target.command, "-tasks", c.tasks, "-out", target.out, "-workdir", work, "-resume"}
			if target.command == "collect" {
				args = append(args, "-repeats", "1", "-replicas", "1")
			} else {
				args = append(args, "-addr", "127.0.0.1:0")
			}
			before := treeHash(t, target.out)
			code, stdout, errOut := runBin(t, 2*time.Minute, append(args, c.args...)...)
			require.Equal(t, cli.ExitBadInput, code, "%s %s: %s%s", target.command, c.name, stdout, errOut)
			require.Contains(t, errOut, c.want, "%s %s", target.command, c.name)
			require.Contains(t, errOut, "this command differs from the run in what its episodes would be", "%s %s", target.command, c.name)
			require.Equal(t, before, treeHash(t, target.out), "%s %s: a refused resume changes nothing", target.command, c.name)
		}
	}

	// How a sandbox is had is not what it is: both accept another fork
	// method.
	code, stdout, stderr = runBin(t, 2*time.Minute, "collect", "-tasks", tasks, "-out", collected, "-workdir", work, "-resume", "-repeats", "1", "-replicas", "1", "-provider-opt", "fork=copy", "-quiet")
	require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)
	cmd, _ = startServe(t, "-tasks", tasks, "-out", served, "-workdir", work, "-resume", "-provider-opt", "fork=copy")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, cli.ExitOK, exitCode(cmd.Wait()))
}
