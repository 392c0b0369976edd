package local_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/local"
	"github.com/forkline/forkline/providers/providertest"
	"github.com/forkline/forkline/runtime"
)

// openLocal opens a provider with the given fork param in a test directory,
// or ends the test through testenv when overlay was asked for and this
// process cannot mount.
func openLocal(t testing.TB, fork string) *local.Provider {
	t.Helper()
	var p *local.Provider
	open := func() (err error) {
		p, err = local.New(providers.Options{Dir: t.TempDir(), Params: map[string]string{local.ParamFork: fork}})
		if err == nil {
			// A provider the test leaves open would leave its cgroup
			// behind on the host; Close is idempotent.
			t.Cleanup(func() { _ = p.Close(context.Background()) })
		}
		return err
	}
	if fork != local.ForkOverlay {
		require.NoError(t, open())
		return p
	}
	testenv.Need(t, testenv.Overlay, func() error {
		err := open()
		if errors.Is(err, local.ErrOverlayUnavailable) {
			return err
		}
		require.NoError(t, err) // any other error is a failure, not a missing component
		return nil
	})
	return p
}

func TestConformanceOverlay(t *testing.T) {
	openLocal(t, local.ForkOverlay).Close(context.Background()) // skip early, once
	providertest.Run(t, func(t *testing.T) providers.Provider {
		p := openLocal(t, local.ForkOverlay)
		require.Equal(t, local.ForkOverlay, p.Capabilities().ForkMethod)
		return p
	})
}

func TestConformanceCopy(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providers.Provider {
		p := openLocal(t, local.ForkCopy)
		require.Equal(t, local.ForkCopy, p.Capabilities().ForkMethod)
		return p
	})
}

// noCheckpoint is a provider that cannot checkpoint, as a backend without
// snapshots would be: the suite must accept it and skip its fork tests.
type noCheckpoint struct{ *local.Provider }

func (n noCheckpoint) Capabilities() providers.Capabilities {
	c := n.Provider.Capabilities()
	c.Checkpoint, c.Fork, c.ForkMethod = false, false, ""
	return c
}

func (noCheckpoint) Checkpoint(context.Context, providers.Sandbox, string) (providers.Checkpoint, error) {
	return providers.Checkpoint{}, providers.ErrNotSupported
}

func (noCheckpoint) Fork(context.Context, providers.Checkpoint) (providers.Sandbox, error) {
	return nil, providers.ErrNotSupported
}

func TestConformanceWithoutCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite already ran twice")
	}
	providertest.Run(t, func(t *testing.T) providers.Provider {
		return noCheckpoint{openLocal(t, local.ForkCopy)}
	})
}

func TestRegistered(t *testing.T) {
	require.Contains(t, providers.Names(), local.Name)
	p, err := providers.Open(t.Context(), local.Name, providers.Options{Dir: t.TempDir(), Params: map[string]string{"fork": "copy"}})
	require.NoError(t, err)
	require.Equal(t, "local", p.Name())
	caps := p.Capabilities()
	require.Equal(t, "none", caps.Isolation, "host processes are no isolation")
	require.False(t, caps.GUI)
	require.NoError(t, p.Close(context.Background()))
}

func TestOptionsValidation(t *testing.T) {
	cases := []struct {
		name   string
		params map[string]string
		want   []string // substrings of the error
	}{
		{"unknownParam", map[string]string{"frok": "copy"}, []string{`"frok"`, "known: fork, pids"}},
		{"badForkValue", map[string]string{"fork": "zfs"}, []string{`"zfs"`, "auto", "copy", "overlay"}},
		{"pidsZero", map[string]string{"pids": "0"}, []string{`param pids="0": want a number > 0`}},
		{"pidsNotANumber", map[string]string{"pids": "lots"}, []string{`param pids="lots"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := local.New(providers.Options{Dir: dir, Params: c.params})
			require.Error(t, err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
			entries, _ := os.ReadDir(dir)
			require.Empty(t, entries, "a failed Open leaves nothing behind")
		})
	}
}

func TestDefaultDir(t *testing.T) {
	p, err := local.New(providers.Options{})
	require.NoError(t, err)
	dir := p.Dir()
	require.True(t, strings.HasPrefix(filepath.Base(dir), "forkline-local-"), dir)
	require.DirExists(t, dir)
	require.NoError(t, p.Close(context.Background()))
	require.NoDirExists(t, dir, "the default directory is removed on Close")
}

func TestForkOrigin(t *testing.T) {
	for _, method := range []string{local.ForkOverlay, local.ForkCopy} {
		t.Run(method, func(t *testing.T) {
			ctx := t.Context()
			p := openLocal(t, method)
			defer p.Close(context.Background())
			sb, err := p.Create(ctx, providers.Spec{Files: map[string][]byte{"f": []byte("x")}})
			require.NoError(t, err)
			require.Equal(t, local.OriginCreate, sb.Info().Origin)
			cp, err := p.Checkpoint(ctx, sb, "origin")
			require.NoError(t, err)
			require.Equal(t, int64(1), cp.Bytes, "Checkpoint.Bytes is the workspace size")
			f, err := p.Fork(ctx, cp)
			require.NoError(t, err)
			require.Equal(t, method, f.Info().Origin)
			require.Equal(t, cp.ID, f.Info().Checkpoint)
			mounted := isMountPoint(t, f.Info().Workspace)
			require.Equal(t, method == local.ForkOverlay, mounted, "an overlay fork is a mount, a copy is not")
			require.NoError(t, f.Close(ctx))
			require.NoDirExists(t, f.Info().Workspace)
		})
	}
}

func TestAutoPicksOverlayWhenItCan(t *testing.T) {
	p := openLocal(t, local.ForkAuto)
	defer p.Close(context.Background())
	canMount := true
	if q, err := local.New(providers.Options{Dir: t.TempDir(), Params: map[string]string{"fork": "overlay"}}); err != nil {
		canMount = false
	} else {
		q.Close(context.Background())
	}
	want := local.ForkCopy
	if canMount {
		want = local.ForkOverlay
	}
	require.Equal(t, want, p.Capabilities().ForkMethod)
}

func isMountPoint(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// hostProcessGone reports whether pid has exited or is a zombie.
func hostProcessGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(b), "\n") {
		if st, ok := strings.CutPrefix(line, "State:"); ok {
			st = strings.TrimSpace(st)
			return strings.HasPrefix(st, "Z") || strings.HasPrefix(st, "X")
		}
	}
	return false
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool { return hostProcessGone(pid) }, 10*time.Second, 20*time.Millisecond,
		"process %d should be killed", pid)
}

func TestCloseKillsBackgroundJobs(t *testing.T) {
	p := openLocal(t, local.ForkCopy)
	defer p.Close(context.Background())
	ctx := t.Context()
	sb, err := p.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "sleep 60 >/dev/null 2>&1 & echo $!"})
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(obs.Output)))
	require.NoError(t, err)
	require.False(t, hostProcessGone(pid), "a background job outlives its exec")
	require.NoError(t, sb.Close(ctx))
	waitGone(t, pid)
}

// TestCloseKillsDetachedJobs: jobs that left the exec's process group, by
// setsid or by a double fork under setsid (what daemons do), are found by
// the mark in their environment, or the sandbox's cgroup, and killed at
// Close, not left on the host — in either shell mode: a persistent shell's
// end does not look for them itself where the cgroup holds them.
func TestCloseKillsDetachedJobs(t *testing.T) {
	for _, mode := range providers.ShellModes() {
		t.Run(string(mode), func(t *testing.T) {
			p := openLocal(t, local.ForkCopy)
			defer p.Close(context.Background())
			ctx := t.Context()
			sb, err := p.Create(ctx, providers.Spec{Shell: mode})
			require.NoError(t, err)
			other, err := p.Create(ctx, providers.Spec{Shell: mode})
			require.NoError(t, err)
			defer other.Close(context.Background())
			start := func(sb providers.Sandbox, cmd string) int {
				t.Helper()
				obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: cmd})
				require.NoError(t, err)
				require.False(t, obs.Error, obs.Text())
				pid, err := strconv.Atoi(strings.TrimSpace(string(obs.Output)))
				require.NoError(t, err, obs.Text())
				require.False(t, hostProcessGone(pid), "a detached job outlives its exec")
				return pid
			}
			setsid := start(sb, "setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $!")
			daemon := start(sb, `setsid sh -c 'sleep 60 </dev/null >/dev/null 2>&1 & echo $!' </dev/null`)
			sibling := start(other, "setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $!")
			pg, err := syscall.Getpgid(setsid)
			require.NoError(t, err)
			require.Equal(t, setsid, pg, "setsid made its own group")
			require.NoError(t, sb.Close(ctx))
			waitGone(t, setsid)
			waitGone(t, daemon)
			require.False(t, hostProcessGone(sibling), "another sandbox's detached job is left alone")
			require.NoError(t, other.Close(ctx))
			waitGone(t, sibling)
		})
	}
}

func TestContextCancelKillsGroup(t *testing.T) {
	p := openLocal(t, local.ForkCopy)
	defer p.Close(context.Background())
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err = sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "sleep 30 & echo $! > child.pid; wait"})
	require.ErrorIs(t, err, context.Canceled)
	b, err := os.ReadFile(filepath.Join(sb.Info().Workspace, "child.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	waitGone(t, pid)
}

func TestExecDetails(t *testing.T) {
	p := openLocal(t, local.ForkCopy)
	defer p.Close(context.Background())
	ctx := t.Context()
	sb, err := p.Create(ctx, providers.Spec{Env: []string{"LANG=en_US.UTF-8", "EXTRA=1"}})
	require.NoError(t, err)
	ws := sb.Info().Workspace
	cases := []struct {
		name, cmd, want string
		code            int
	}{
		{"interleaved", "echo 1; echo 2 >&2; echo 3; echo 4 >&2", "1\n2\n3\n4\n", 0},
		{"env", `echo "$HOME|$FORKLINE_WORKSPACE|$LANG|$EXTRA"`, ws + "|" + ws + "|en_US.UTF-8|1\n", 0},
		{"stdinIsDevNull", "cat; echo end", "end\n", 0},
		// Field 5 of /proc/PID/stat is the process group (field 2, the
		// command in parentheses, is "(sh)": no space to shift the fields).
		{"ownProcessGroup", `set -- $(cat /proc/$$/stat); [ "$5" = "$$" ] && echo leader`, "leader\n", 0},
		{"killedBySignal", "kill -TERM $$", "", 128 + int(syscall.SIGTERM)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: c.cmd, TimeoutMS: 5000})
			require.NoError(t, err)
			require.Equal(t, c.want, string(obs.Output))
			require.Equal(t, c.code, obs.ExitCode)
		})
	}
}

// A background job that keeps the output pipe open must not hold Act for
// longer than PipeGrace past its shell's exit.
func TestLeakedPipeDoesNotHang(t *testing.T) {
	p := openLocal(t, local.ForkCopy)
	defer p.Close(context.Background())
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	began := time.Now()
	obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec, Cmd: "sleep 30 & echo quick"})
	require.NoError(t, err)
	require.Less(t, time.Since(began), 15*time.Second)
	require.Equal(t, "quick\n", string(obs.Output))
	require.Equal(t, 0, obs.ExitCode)
	require.False(t, obs.Error)
}

func TestReadFileCapped(t *testing.T) {
	p := openLocal(t, local.ForkCopy)
	defer p.Close(context.Background())
	big := strings.Repeat("0123456789", 1000)
	sb, err := p.Create(t.Context(), providers.Spec{OutputCap: 100, Files: map[string][]byte{"big": []byte(big)}})
	require.NoError(t, err)
	obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActReadFile, Path: "big"})
	require.NoError(t, err)
	require.True(t, obs.Truncated)
	require.Equal(t, int64(len(big)), obs.OutputBytes)
	require.Contains(t, string(obs.Output), providers.ElisionMarker(int64(len(big)-100)))
}

func TestCreateRefusesEscapingSpecFiles(t *testing.T) {
	p := openLocal(t, local.ForkCopy)
	defer p.Close(context.Background())
	_, err := p.Create(t.Context(), providers.Spec{Files: map[string][]byte{"../evil": []byte("x")}})
	require.ErrorIs(t, err, providers.ErrPathEscapes)
	left, err := p.Leftovers(t.Context())
	require.NoError(t, err)
	require.Empty(t, left)
}

// Release while an overlay fork still uses the checkpoint keeps the lower
// layer until that fork closes.
func TestReleaseWaitsForOverlayForks(t *testing.T) {
	p := openLocal(t, local.ForkOverlay)
	defer p.Close(context.Background())
	ctx := t.Context()
	sb, err := p.Create(ctx, providers.Spec{Files: map[string][]byte{"f": []byte("golden")}})
	require.NoError(t, err)
	cp, err := p.Checkpoint(ctx, sb, "x")
	require.NoError(t, err)
	f, err := p.Fork(ctx, cp)
	require.NoError(t, err)
	require.NoError(t, p.Release(ctx, cp))
	_, err = p.Fork(ctx, cp)
	require.Error(t, err, "no fork from a released checkpoint")
	obs, err := f.Act(ctx, runtime.Action{Kind: runtime.ActReadFile, Path: "f"})
	require.NoError(t, err)
	require.Equal(t, "golden", string(obs.Output), "the fork still reads its lower layer")
	require.NoError(t, f.Close(ctx))
	require.NoError(t, sb.Close(ctx))
	left, err := p.Leftovers(ctx)
	require.NoError(t, err)
	require.Empty(t, left, "the released checkpoint goes with its last fork")
}

// TestSweep simulates a crashed run: a provider directory with a live overlay
// mount whose owner process is gone.
func TestSweep(t *testing.T) {
	base := t.TempDir()
	crashed, err := local.New(providers.Options{Dir: base, Params: map[string]string{"fork": "overlay"}})
	overlay := err == nil
	if !overlay {
		t.Logf("overlay unavailable (%v): sweeping a run that forked by copy", err)
		crashed, err = local.New(providers.Options{Dir: base, Params: map[string]string{"fork": "copy"}})
		require.NoError(t, err)
	}
	ctx := t.Context()
	sb, err := crashed.Create(ctx, providers.Spec{Files: map[string][]byte{"f": []byte("x")}})
	require.NoError(t, err)
	cp, err := crashed.Checkpoint(ctx, sb, "sweep")
	require.NoError(t, err)
	f, err := crashed.Fork(ctx, cp)
	require.NoError(t, err)
	require.Equal(t, overlay, isMountPoint(t, f.Info().Workspace))
	// A daemon the crashed run started, still running in its fork.
	obs, err := f.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $!"})
	require.NoError(t, err)
	daemon, err := strconv.Atoi(strings.TrimSpace(string(obs.Output)))
	require.NoError(t, err, obs.Text())

	// Make its owner a dead process, as if the run had been SIGKILLed.
	dead := crashed.Dir()
	require.NoError(t, os.WriteFile(filepath.Join(dead, "owner"), []byte("999999999 1 \"\"\n"), 0o644))

	live, err := local.New(providers.Options{Dir: base})
	require.NoError(t, err)
	defer live.Close(context.Background())
	stranger := filepath.Join(base, "not-ours")
	require.NoError(t, os.Mkdir(stranger, 0o755))

	require.NoError(t, local.Sweep(base))
	require.NoDirExists(t, dead, "the dead run's directory is removed")
	waitGone(t, daemon)
	for _, m := range mountsUnder(t, base) {
		t.Errorf("mount left after Sweep: %s", m)
	}
	require.DirExists(t, live.Dir(), "a live provider's directory is left alone")
	require.DirExists(t, stranger, "directories that are not forkline's are left alone")
	require.NoError(t, local.Sweep(filepath.Join(base, "missing")), "a missing dir is not an error")
	crashed.Close(context.Background()) // its directory is gone; this must not panic
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// Forks keep what a workspace is made of besides bytes: modes (set-id bits
// included), directory modes, symlinks, FIFOs and modification times.
func TestForkKeepsMetadata(t *testing.T) {
	for _, method := range []string{local.ForkOverlay, local.ForkCopy} {
		t.Run(method, func(t *testing.T) {
			ctx := t.Context()
			p := openLocal(t, method)
			defer p.Close(context.Background())
			sb, err := p.Create(ctx, providers.Spec{})
			require.NoError(t, err)
			setup := "mkdir -p ro/sub && echo x > ro/sub/f && echo s > suid && chmod 4755 suid && " +
				"chmod 555 ro && ln -s ro/sub/f link && mkfifo pipe && touch -d '2001-02-03 04:05:06' ro/sub/f"
			obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: setup})
			require.NoError(t, err)
			require.False(t, obs.Error, obs.Text())
			cp, err := p.Checkpoint(ctx, sb, "meta")
			require.NoError(t, err)
			f, err := p.Fork(ctx, cp)
			require.NoError(t, err)
			defer f.Close(ctx)
			ws := f.Info().Workspace

			st, err := os.Stat(filepath.Join(ws, "suid"))
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o755)|os.ModeSetuid, st.Mode())
			st, err = os.Stat(filepath.Join(ws, "ro"))
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o555), st.Mode().Perm())
			target, err := os.Readlink(filepath.Join(ws, "link"))
			require.NoError(t, err)
			require.Equal(t, "ro/sub/f", target)
			st, err = os.Lstat(filepath.Join(ws, "pipe"))
			require.NoError(t, err)
			require.NotZero(t, st.Mode()&os.ModeNamedPipe)
			st, err = os.Stat(filepath.Join(ws, "ro/sub/f"))
			require.NoError(t, err)
			require.Equal(t, 2001, st.ModTime().Year())
		})
	}
}

// helperEnv, when set, makes the test binary a stand-in for a forkline run
// that gets SIGKILLed: see TestSweepAfterSIGKILL.
const helperEnv = "FORKLINE_LOCAL_CRASH_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		crashHelper(dir)
		return
	}
	if dir := os.Getenv(rlimitHelperEnv); dir != "" {
		rlimitHelper(dir)
		return
	}
	os.Exit(m.Run())
}

// crashHelper opens a provider in dir, makes a golden, a fork with a process
// running in it, says "ready" and waits to be killed.
func crashHelper(dir string) {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("helper:", err)
		os.Exit(1)
	}
	p, err := local.New(providers.Options{Dir: dir})
	if err != nil {
		fail(err)
	}
	sb, err := p.Create(ctx, providers.Spec{Files: map[string][]byte{"f": []byte("x")}})
	if err != nil {
		fail(err)
	}
	cp, err := p.Checkpoint(ctx, sb, "crash")
	if err != nil {
		fail(err)
	}
	f, err := p.Fork(ctx, cp)
	if err != nil {
		fail(err)
	}
	// A process whose working directory keeps the fork's mount busy.
	if _, err := f.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "sleep 3 >/dev/null 2>&1 &"}); err != nil {
		fail(err)
	}
	fmt.Println("ready", p.Capabilities().ForkMethod)
	time.Sleep(time.Minute)
}

// TestSweepAfterSIGKILL runs a real process that leaves a provider directory
// (with an overlay mount when it may mount) and dies by SIGKILL, then sweeps.
func TestSweepAfterSIGKILL(t *testing.T) {
	base := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+base)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "ready"), "helper said %q", line)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the killed run left its directory")
	if strings.Contains(line, local.ForkOverlay) {
		require.NotEmpty(t, mountsUnder(t, base), "the killed run left its overlay mount")
	}
	// Where the run bounded its processes with a cgroup, the cgroup and its
	// processes are left too.
	cgroup := ""
	if b, err := os.ReadFile(filepath.Join(base, entries[0].Name(), "cgroup")); err == nil {
		cgroup = strings.TrimSpace(string(b))
		require.DirExists(t, cgroup, "the killed run left its cgroup")
	}
	require.NoError(t, local.Sweep(base))
	if cgroup != "" {
		require.NoDirExists(t, cgroup, "Sweep removes the dead run's cgroup")
	}
	entries, err = os.ReadDir(base)
	require.NoError(t, err)
	require.Empty(t, entries, "Sweep removes the dead run's directory")
	require.Empty(t, mountsUnder(t, base), "Sweep unmounts the dead run's overlays")
}

// A checkpoint of an overlay fork in the middle of an episode freezes only
// what the fork changed: its cost is the diff, not the workspace. A quiet
// fork's upper layer is frozen in place (layer), a busy one's copied
// (layer-copy); either way the forks see the same files; a stack too deep
// to grow is flattened into a tree.
func TestMidEpisodeCheckpointFreezesTheDiff(t *testing.T) {
	p := openLocal(t, local.ForkOverlay)
	defer p.Close(context.Background())
	ctx := t.Context()
	big := strings.Repeat("x", 4<<20)
	sb, err := p.Create(ctx, providers.Spec{Files: map[string][]byte{"big.bin": []byte(big), "small.txt": []byte("golden")}})
	require.NoError(t, err)
	golden, err := p.Checkpoint(ctx, sb, "golden")
	require.NoError(t, err)
	require.Equal(t, local.MethodTree, golden.Method)
	require.GreaterOrEqual(t, golden.Bytes, int64(len(big)))
	require.NoError(t, sb.Close(ctx))

	ep, err := p.Fork(ctx, golden)
	require.NoError(t, err)
	defer ep.Close(ctx)
	act := func(sb providers.Sandbox, cmd string) string {
		t.Helper()
		obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: cmd})
		require.NoError(t, err)
		require.False(t, obs.Error, "%s: %s", cmd, obs.Text())
		return string(obs.Output)
	}
	act(ep, "echo changed > small.txt && rm big.bin")
	quiet, err := p.Checkpoint(ctx, ep, "quiet")
	require.NoError(t, err)
	require.Equal(t, local.MethodLayer, quiet.Method, "nothing held the workspace: the upper layer is frozen in place")
	require.Less(t, quiet.Bytes, int64(4096), "the checkpoint holds the diff, not the 4 MiB workspace")
	require.Equal(t, quiet.ID, ep.Info().Checkpoint, "the fork now stands on the layer it froze")
	require.Equal(t, "changed\n", act(ep, "cat small.txt"), "and goes on as it was")

	act(ep, "echo busy > small.txt && (sleep 2 &) ; sleep 5 >/dev/null 2>&1 &")
	busy, err := p.Checkpoint(ctx, ep, "busy")
	require.NoError(t, err)
	require.Equal(t, local.MethodLayerCopy, busy.Method, "a process held the workspace: the upper layer is copied")
	for cp, want := range map[providers.Checkpoint]string{quiet: "changed\n", busy: "busy\n"} {
		f, err := p.Fork(ctx, cp)
		require.NoError(t, err)
		require.Equal(t, want, act(f, "cat small.txt"), cp.Method)
		require.Equal(t, "gone\n", act(f, "test -e big.bin || echo gone"), "a whiteout survives the %s", cp.Method)
		require.NoError(t, f.Close(ctx))
	}

	// Branch of a branch of ..., until the stack flattens.
	at, err := p.Fork(ctx, quiet)
	require.NoError(t, err)
	defer at.Close(ctx)
	var methods []string
	for i := range 70 {
		act(at, fmt.Sprintf("echo %d > depth.txt", i))
		cp, err := p.Checkpoint(ctx, at, fmt.Sprintf("depth-%d", i))
		require.NoError(t, err)
		methods = append(methods, cp.Method)
		next, err := p.Fork(ctx, cp)
		require.NoError(t, err)
		defer next.Close(ctx)
		require.Equal(t, fmt.Sprintf("%d\n", i), act(next, "cat depth.txt"))
		at = next
	}
	require.Contains(t, methods, local.MethodTree, "a stack that cannot grow is flattened into a tree")
	require.Equal(t, local.MethodLayer, methods[0])
	require.Equal(t, "gone\n", act(at, "test -e big.bin || echo gone"))
}

// A compose environment (Spec.Services) is refused by name: the local
// provider has no containers to run services in.
func TestRefusesServices(t *testing.T) {
	p := openLocal(t, "")
	require.False(t, p.Capabilities().Services)
	_, err := p.Create(t.Context(), providers.Spec{Services: []providers.Service{{Name: "db", Image: "forkline/busybox"}}})
	require.ErrorIs(t, err, providers.ErrNotSupported)
	require.ErrorContains(t, err, "services db) runs on the docker provider")
}

func TestPersistentShell(t *testing.T) {
	providertest.PersistentShell(t, openLocal(t, "auto"), providers.Spec{})
}

func TestTerminal(t *testing.T) {
	providertest.Terminal(t, openLocal(t, "auto"), providers.Spec{})
}
