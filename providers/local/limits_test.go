package local_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/local"
	"github.com/forkline/forkline/runtime"
)

// run executes cmd in sb and requires it to succeed.
func run(t *testing.T, sb providers.Sandbox, cmd string) string {
	t.Helper()
	obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec, Cmd: cmd})
	require.NoError(t, err)
	require.False(t, obs.Error, "%q: %s", cmd, obs.Text())
	return obs.Text()
}

// cgroupProvider opens a provider that bounds processes with a cgroup, or
// ends the test through testenv (component "cgroup") when this process has
// no writable pids cgroup.
func cgroupProvider(t *testing.T, params map[string]string) *local.Provider {
	t.Helper()
	testenv.Need(t, testenv.Cgroup, nil)
	p, err := local.New(providers.Options{Dir: t.TempDir(), Params: params})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(t.Context())) })
	if mode, why := p.PidsLimit(); mode != local.PidsCgroup {
		testenv.Missing(t, testenv.Cgroup, "local bounds processes by "+mode+" here: "+why)
	}
	return p
}

// sandboxCgroup is the host directory of sb's pids cgroup.
func sandboxCgroup(t *testing.T, p *local.Provider, sb providers.Sandbox) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.Dir(), "cgroup"))
	require.NoError(t, err)
	return filepath.Join(strings.TrimSpace(string(b)), sb.Info().ID)
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	n, err := parseIntFile(path)
	require.NoError(t, err, path)
	return n
}

// parseIntFile reads a cgroup counter: -1 when the file is gone (the cgroup
// was removed), an error when it holds no number. It never fails the test,
// so a sampling goroutine can call it.
func parseIntFile(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1, nil
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func TestPidsLimitCgroup(t *testing.T) {
	p := cgroupProvider(t, nil)
	sb, err := p.Create(t.Context(), providers.Spec{Resources: providers.Resources{Pids: 20}})
	require.NoError(t, err)
	cg := sandboxCgroup(t, p, sb)
	require.Equal(t, int64(20), readInt(t, filepath.Join(cg, "pids.max")))

	// Every command runs inside the sandbox's cgroup, each one joining
	// it through the same open cgroup.procs.
	for range 3 {
		self := run(t, sb, "cat /proc/self/cgroup")
		require.Contains(t, self, "/"+filepath.Base(filepath.Dir(cg))+"/"+sb.Info().ID)
	}

	obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec,
		Cmd: "for i in $(seq 60); do sleep 5 & done; echo all-started", TimeoutMS: 20000})
	require.NoError(t, err)
	require.True(t, obs.Error, "60 sleeps cannot start under a limit of 20: %s", obs.Text())
	require.Contains(t, obs.Text(), "Cannot fork")
	require.NotContains(t, obs.Text(), "all-started")
	require.LessOrEqual(t, readInt(t, filepath.Join(cg, "pids.current")), int64(20))

	// The default applies to a spec that sets none; the param changes it.
	def, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	require.Equal(t, int64(local.DefaultPids), readInt(t, filepath.Join(sandboxCgroup(t, p, def), "pids.max")))
	q := cgroupProvider(t, map[string]string{local.ParamPids: "77"})
	other, err := q.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	require.Equal(t, int64(77), readInt(t, filepath.Join(sandboxCgroup(t, q, other), "pids.max")))
	// Forks keep the limit of the checkpointed sandbox.
	cp, err := p.Checkpoint(t.Context(), sb, "pids")
	require.NoError(t, err)
	f, err := p.Fork(t.Context(), cp)
	require.NoError(t, err)
	require.Equal(t, int64(20), readInt(t, filepath.Join(sandboxCgroup(t, p, f), "pids.max")))
}

// TestCgroupFilesClosedWithTheSandbox: the cgroup.procs a sandbox keeps
// open is closed when it closes, so a long run does not gather descriptors.
func TestCgroupFilesClosedWithTheSandbox(t *testing.T) {
	p := cgroupProvider(t, nil)
	warm, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	run(t, warm, "true")
	require.NoError(t, warm.Close(t.Context()))
	before := openFiles(t)
	for range 20 {
		sb, err := p.Create(t.Context(), providers.Spec{})
		require.NoError(t, err)
		run(t, sb, "true")
		require.NoError(t, sb.Close(t.Context()))
	}
	require.InDelta(t, before, openFiles(t), 3, "descriptors left open by 20 closed sandboxes")
}

func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(fds)
}

// TestForkBombLocal runs a real fork bomb in a local sandbox whose spec sets
// no limits: the default cgroup limit holds it, it is a timed-out
// observation, and the sandbox works afterwards.
func TestForkBombLocal(t *testing.T) {
	p := cgroupProvider(t, nil)
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	cg := sandboxCgroup(t, p, sb)
	var peak atomic.Int64
	var sampleErr error // written by the sampler, read after it is done
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			n, err := parseIntFile(filepath.Join(cg, "pids.current"))
			if err != nil {
				sampleErr = err
				return
			}
			if n > peak.Load() {
				peak.Store(n)
			}
		}
	}()
	obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec,
		// The command forks once, then only sleeps: the shell forks
		// each side of a pipeline itself, so a bomb started in the
		// command's own shell could fill the limit between its two forks
		// and make that shell exit 2 (seen once on local).
		Cmd: `(bomb() { bomb | bomb & }; bomb) & exec sleep 60`, TimeoutMS: 3000})
	close(stop)
	<-sampled
	require.NoError(t, sampleErr, "sampling pids.current")
	require.NoError(t, err, "a fork bomb is the action's failure, not the sandbox's")
	require.True(t, obs.TimedOut, "exit %d, %s", obs.ExitCode, obs.ErrorKind)
	require.LessOrEqual(t, peak.Load(), int64(local.DefaultPids))
	require.Greater(t, peak.Load(), int64(local.DefaultPids/2), "the bomb really reached the limit")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && readInt(t, filepath.Join(cg, "pids.current")) > 0; {
		time.Sleep(20 * time.Millisecond)
	}
	require.Zero(t, readInt(t, filepath.Join(cg, "pids.current")), "the timeout killed the whole bomb")
	require.Equal(t, "alive\n", run(t, sb, "echo alive"))
}

// TestCloseKillsEnvScrubbedDaemon: a process that left the process group
// (setsid) and dropped the FORKLINE_EXEC mark (env -i) escapes the group
// kill and the mark scan; the cgroup still has it, and Close kills it.
func TestCloseKillsEnvScrubbedDaemon(t *testing.T) {
	p := cgroupProvider(t, nil)
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	out := run(t, sb, "setsid env -i /bin/sh -c 'exec sleep 300' </dev/null >/dev/null 2>&1 & echo $!")
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	require.NoError(t, err, out)
	require.NoError(t, syscall.Kill(pid, 0), "the daemon runs")
	require.NoError(t, sb.Close(t.Context()))
	waitGone(t, pid)
	left, err := p.Leftovers(t.Context())
	require.NoError(t, err)
	require.Empty(t, left)
}

// rlimitHelperEnv, when set, makes the test binary run
// rlimitHelper as an unprivileged user (see TestPidsRlimitAsUser).
const rlimitHelperEnv = "FORKLINE_LOCAL_RLIMIT_HELPER"

// rlimitHelper opens a provider as a user without a writable cgroup, checks
// that it bounds processes with RLIMIT_NPROC, and prints what a command
// starting 200 sleeps under a limit of 30 achieved.
func rlimitHelper(dir string) {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("helper:", err)
		os.Exit(1)
	}
	p, err := local.New(providers.Options{Dir: dir})
	if err != nil {
		fail(err)
	}
	defer p.Close(ctx)
	mode, _ := p.PidsLimit()
	sb, err := p.Create(ctx, providers.Spec{Resources: providers.Resources{Pids: 30}})
	if err != nil {
		fail(err)
	}
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec,
		Cmd: "n=0; for i in $(seq 200); do sleep 5 & n=$((n+1)); done; echo started=$n", TimeoutMS: 20000})
	if err != nil {
		fail(err)
	}
	fmt.Printf("mode=%s exit=%d %s\n", mode, obs.ExitCode, strings.ReplaceAll(obs.Text(), "\n", " "))
}

// rlimitTestUID is a user no account and no other process has.
const rlimitTestUID = 47311

func TestPidsRlimitAsUser(t *testing.T) {
	testenv.NeedRoot(t)
	bin := filepath.Join(t.TempDir(), "local.test")
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, self, 0o755))
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777))
	require.NoError(t, os.Chmod(filepath.Dir(bin), 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), rlimitHelperEnv+"="+dir)
	cmd.Dir = dir
	// A uid of its own: RLIMIT_NPROC counts every task of the user, and
	// nobody (65534) is shared (runsc's sandboxes run as nobody, so the
	// gvisor tests' sandboxes, started or gone while this ran, moved the
	// count the limit is based on: 200 sleeps started).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: rlimitTestUID, Gid: rlimitTestUID}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := string(out)
	t.Logf("as uid %d: %s", rlimitTestUID, got)
	require.Contains(t, got, "mode="+local.PidsRlimit, got)
	require.Contains(t, got, "Cannot fork", "the 200 sleeps hit the limit: %s", got)
	require.NotContains(t, got, "started=200")
}
