package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/providertest"
	"github.com/forkline/forkline/runtime"
)

var (
	imagesOnce sync.Once
	imagesErr  error
)

// engine skips t (fails it under FORKLINE_REQUIRE=docker) when no engine
// answers, makes sure forkline/busybox exists, and returns a client that is
// closed when t ends.
func engine(t testing.TB) *client.Client {
	t.Helper()
	ctx := context.Background()
	var cli *client.Client
	testenv.Need(t, testenv.Docker, func() (err error) {
		cli, err = Connect(ctx)
		return err
	})
	t.Cleanup(func() { _ = cli.Close() })
	imagesOnce.Do(func() { _, imagesErr = EnsureImages(ctx, cli, ImageBusybox) })
	require.NoError(t, imagesErr, "EnsureImages")
	return cli
}

// newProvider opens a provider for t without arranging its Close.
func newProvider(t *testing.T, params map[string]string) *Provider {
	t.Helper()
	engine(t)
	p, err := New(t.Context(), providers.Options{RunID: "test-" + tagSafe(t.Name()), Params: params})
	require.NoError(t, err, "New")
	return p
}

// open opens a provider that is closed, and checked for leftovers, when t
// ends.
func open(t *testing.T, params map[string]string) *Provider {
	t.Helper()
	p := newProvider(t, params)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, p.Close(ctx), "Close")
		left, err := p.Leftovers(ctx)
		assert.NoError(t, err)
		assert.Empty(t, left, "leftovers after Close")
	})
	return p
}

func sh(t *testing.T, sb providers.Sandbox, cmd string) runtime.Observation {
	t.Helper()
	obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec, Cmd: cmd})
	require.NoError(t, err, "exec %q", cmd)
	return obs
}

func TestConformance(t *testing.T) {
	engine(t)
	variants := []struct {
		name   string
		params map[string]string
	}{
		// Output through the FIFO (required here: the engine is local).
		{"default", map[string]string{ParamOutput: OutputFIFO}},
		// Containers run without init, and output takes the exec stream.
		{"noInitStream", map[string]string{ParamInit: InitOff, ParamOutput: OutputStream}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel() // the engine is idle for much of an exec; two runs overlap well
			providertest.Run(t, func(t *testing.T) providers.Provider { return newProvider(t, v.params) })
		})
	}
}

func TestRegistered(t *testing.T) {
	require.Contains(t, providers.Names(), Name)
}

func TestEngineNotAnswering(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dead.sock")
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	t.Setenv("DOCKER_API_VERSION", "")
	_, err := New(t.Context(), providers.Options{})
	require.ErrorIs(t, err, ErrNoEngine)
	msg := err.Error()
	require.Contains(t, msg, "DOCKER_HOST=unix://"+sock, "names where it looked and why")
	require.Contains(t, msg, "dockerd --bridge=none --iptables=false", "says how to start an engine")
	require.Contains(t, msg, "docker-up.sh")

	_, err = providers.Open(t.Context(), Name, providers.Options{})
	require.ErrorIs(t, err, ErrNoEngine, "through the registry too")
}

func TestParams(t *testing.T) {
	// Params are checked before the engine is contacted.
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "dead.sock"))
	cases := []struct {
		name   string
		params map[string]string
		want   string
	}{
		{"unknown", map[string]string{"imgae": "x"}, `no setting "imgae" (known: cpus, image, init, memory_mb, network, output, pids, pull, runtime, sweep)`},
		// The provider's own standby is gone (the pool's is the one).
		{"standbyRetired", map[string]string{"standby": "1"}, `no setting "standby"`},
		{"output", map[string]string{ParamOutput: "pipe"}, "known: auto, fifo, stream"},
		{"init", map[string]string{ParamInit: "maybe"}, "known: auto, off, on"},
		{"sweep", map[string]string{ParamSweep: "yes"}, "known: off, on"},
		{"pidsZero", map[string]string{ParamPids: "0"}, `param pids="0": want a number > 0`},
		{"memoryNotANumber", map[string]string{ParamMemoryMB: "2G"}, `param memory_mb="2G"`},
		{"cpusNaN", map[string]string{ParamCPUs: "NaN"}, `param cpus="NaN"`},
		{"cpusInf", map[string]string{ParamCPUs: "+Inf"}, `param cpus="+Inf"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(t.Context(), providers.Options{Params: c.params})
			require.Error(t, err)
			require.NotErrorIs(t, err, ErrNoEngine)
			require.Contains(t, err.Error(), c.want)
		})
	}
}

func TestMissingImage(t *testing.T) {
	p := open(t, nil)
	for _, c := range []struct{ image, hint string }{
		{ImageBusybox + ":no-such-tag", "build it with make images"},
		{ImageDebian + ":no-such-tag", "build it with make images"},
		{"example.invalid/nothing:1", "load or import it"},
	} {
		_, err := p.Create(t.Context(), providers.Spec{Image: c.image})
		require.ErrorIs(t, err, ErrImageMissing)
		require.Contains(t, err.Error(), c.image, "names the image")
		require.Contains(t, err.Error(), c.hint)
	}
	// The "image" param is the default image.
	q := open(t, map[string]string{ParamImage: ImageBusybox + ":absent"})
	_, err := q.Create(t.Context(), providers.Spec{})
	require.ErrorIs(t, err, ErrImageMissing)
	require.Contains(t, err.Error(), ImageBusybox+":absent")
}

func TestEnsureImages(t *testing.T) {
	cli := engine(t)
	st, err := EnsureImages(t.Context(), cli)
	require.NoError(t, err)
	require.Len(t, st, 1)
	require.Equal(t, ImageBusybox, st[0].Name)
	require.False(t, st[0].Built, "present images are kept")
	ins, err := cli.ImageInspect(t.Context(), ImageBusybox)
	require.NoError(t, err)
	require.Equal(t, "busybox", ins.Config.Labels[LabelImage])
	require.NotContains(t, ins.Config.Labels, LabelRun, "the shared base image must not carry a run label")
	require.Equal(t, WorkspaceDir, ins.Config.WorkingDir)

	_, err = EnsureImages(t.Context(), cli, "forkline/nope")
	require.ErrorContains(t, err, "known: forkline/busybox, forkline/chromium, forkline/debian")
}

func TestCreateFailuresLeaveNothing(t *testing.T) {
	p := open(t, nil)
	ctx := t.Context()

	_, err := p.Create(ctx, providers.Spec{Files: map[string][]byte{"../x": nil}})
	require.ErrorIs(t, err, providers.ErrPathEscapes)

	// A container that is created but cannot start (it would join the
	// network of a stopped container) is removed again.
	stopped, err := p.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	id := stopped.Info().ID
	_, err = p.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
	require.NoError(t, err)
	waitNotRunning(t, p.cli, id)
	_, err = p.Create(ctx, providers.Spec{Resources: providers.Resources{Network: "container:" + id}})
	require.Error(t, err, "start must fail")
	require.NoError(t, stopped.Close(ctx))

	// A setup command that fails, leaving a background job, then Close.
	sb, err := p.Create(ctx, providers.Spec{Files: map[string][]byte{"setup.sh": []byte("sleep 300 >/dev/null 2>&1 &\necho installing; exit 7\n")}})
	require.NoError(t, err)
	obs := sh(t, sb, "sh setup.sh")
	require.Equal(t, 7, obs.ExitCode)
	require.Equal(t, runtime.ErrExitStatus, obs.ErrorKind)
	require.Equal(t, "installing\n", obs.Text())
	require.NoError(t, sb.Close(ctx))

	left, err := p.Leftovers(ctx)
	require.NoError(t, err)
	require.Empty(t, left, "failed creates and a closed failed setup leave nothing")
}

func waitNotRunning(t *testing.T, cli *client.Client, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ci, err := cli.ContainerInspect(t.Context(), id, client.ContainerInspectOptions{})
		require.NoError(t, err)
		if !ci.Container.State.Running {
			return
		}
	}
	t.Fatalf("container %s still running", id)
}

func TestKilledMidEpisode(t *testing.T) {
	p := open(t, nil)
	ctx := t.Context()

	t.Run("betweenActions", func(t *testing.T) {
		sb, err := p.Create(ctx, providers.Spec{})
		require.NoError(t, err)
		defer sb.Close(ctx)
		sh(t, sb, "echo hi > f")
		_, err = p.cli.ContainerKill(ctx, sb.Info().ID, client.ContainerKillOptions{Signal: "KILL"})
		require.NoError(t, err)
		waitNotRunning(t, p.cli, sb.Info().ID)
		for _, a := range []runtime.Action{
			{Kind: runtime.ActExec, Cmd: "true"},
			{Kind: runtime.ActReadFile, Path: "f"},
			{Kind: runtime.ActWriteFile, Path: "g", Content: "x"},
		} {
			_, err := sb.Act(ctx, a)
			require.ErrorIs(t, err, ErrSandboxDied, "%s on a dead sandbox", a.Kind)
			require.NotErrorIs(t, err, runtime.ErrUnavailable, "a dead sandbox is the episode's failure, not the engine's")
			require.Contains(t, err.Error(), "exit code 137")
		}
	})
	t.Run("duringExec", func(t *testing.T) {
		sb, err := p.Create(ctx, providers.Spec{})
		require.NoError(t, err)
		defer sb.Close(ctx)
		time.AfterFunc(500*time.Millisecond, func() {
			_, _ = p.cli.ContainerKill(context.Background(), sb.Info().ID, client.ContainerKillOptions{Signal: "KILL"})
		})
		began := time.Now()
		_, err = sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "echo started; sleep 30"})
		require.ErrorIs(t, err, ErrSandboxDied)
		require.NotErrorIs(t, err, runtime.ErrUnavailable)
		require.Less(t, time.Since(began), 20*time.Second)
	})
	t.Run("closedDuringExec", func(t *testing.T) {
		sb, err := p.Create(ctx, providers.Spec{})
		require.NoError(t, err)
		time.AfterFunc(300*time.Millisecond, func() { _ = sb.Close(context.Background()) })
		_, err = sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "sleep 30"})
		require.ErrorIs(t, err, providers.ErrClosed)
	})
	t.Run("removedBehindOurBack", func(t *testing.T) {
		sb, err := p.Create(ctx, providers.Spec{})
		require.NoError(t, err)
		defer sb.Close(ctx)
		_, err = p.cli.ContainerRemove(ctx, sb.Info().ID, client.ContainerRemoveOptions{Force: true})
		require.NoError(t, err)
		_, err = sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "true"})
		require.ErrorIs(t, err, ErrSandboxDied)
		require.NotErrorIs(t, err, runtime.ErrUnavailable)
		require.NoError(t, sb.Close(ctx), "Close of a vanished container")
	})
}

func TestRolloutEnvError(t *testing.T) {
	p := open(t, nil)
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	defer sb.Close(context.Background())
	pol := policyFunc(func(ctx context.Context, h runtime.History) (runtime.Decision, error) {
		if len(h.Steps) == 1 {
			_, _ = p.cli.ContainerKill(ctx, sb.Info().ID, client.ContainerKillOptions{Signal: "KILL"})
			waitNotRunning(t, p.cli, sb.Info().ID)
		}
		return runtime.Decision{Action: runtime.Action{Kind: runtime.ActExec, Cmd: "echo step"}}, nil
	})
	res, err := runtime.Rollout(t.Context(), sb, pol, runtime.History{}, runtime.Limits{MaxSteps: 5}, nil)
	require.NoError(t, err)
	require.Equal(t, runtime.ExitEnvError, res.Exit, res.Detail)
	require.Equal(t, 2, res.Steps)
}

type policyFunc func(ctx context.Context, h runtime.History) (runtime.Decision, error)

func (f policyFunc) Decide(ctx context.Context, h runtime.History) (runtime.Decision, error) {
	return f(ctx, h)
}

// TestTimeoutReaps checks, with and without the engine's init, that a
// timed-out command's background child is killed and then reaped, not left
// a zombie.
func TestTimeoutReaps(t *testing.T) {
	for _, mode := range []string{InitAuto, InitOff} {
		t.Run(mode, func(t *testing.T) {
			p := open(t, map[string]string{ParamInit: mode})
			sb, err := p.Create(t.Context(), providers.Spec{})
			require.NoError(t, err)
			defer sb.Close(context.Background())
			obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec,
				Cmd: "sleep 30 & echo $! > child.pid; sleep 30", TimeoutMS: 500})
			require.NoError(t, err)
			require.True(t, obs.TimedOut)
			pid := strings.TrimSpace(sh(t, sb, "cat child.pid").Text())
			var state string
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				state = sh(t, sb, "if [ -e /proc/"+pid+" ]; then sed -n 's/^State:[[:space:]]*//p' /proc/"+pid+"/status; else echo reaped; fi").Text()
				if strings.TrimSpace(state) == "reaped" {
					break
				}
			}
			require.Equal(t, "reaped", strings.TrimSpace(state), "child %s", pid)
			zombies := sh(t, sb, "for f in /proc/[0-9]*/status; do sed -n 's/^State:[[:space:]]*Z.*/zombie/p' $f; done").Text()
			require.Empty(t, strings.TrimSpace(zombies), "no zombies stay behind")
		})
	}
}

func TestExecDetails(t *testing.T) {
	p := open(t, nil)
	sb, err := p.Create(t.Context(), providers.Spec{Env: []string{"A=from-spec", "HOME=/elsewhere"}})
	require.NoError(t, err)
	defer sb.Close(context.Background())

	obs := sh(t, sb, "echo 1; echo 2 >&2; echo 3; echo 4 >&2")
	require.Equal(t, "1\n2\n3\n4\n", obs.Text(), "one stream in write order")
	obs = sh(t, sb, `echo "$A $HOME $FORKLINE_WORKSPACE"; env | grep -c FORKLINE_EXEC_WRAPPER`)
	require.Equal(t, "from-spec /elsewhere /workspace\n0\n", obs.Text(), "Spec.Env wins; the wrapper's variable is gone")
	obs = sh(t, sb, "cat")
	require.Equal(t, 0, obs.ExitCode, "stdin is /dev/null")
	obs = sh(t, sb, "exit 124")
	require.False(t, obs.TimedOut, "a command's own 124 is not a timeout")
	require.Equal(t, 124, obs.ExitCode)
	obs = sh(t, sb, "kill -KILL $$")
	require.False(t, obs.TimedOut, "a command killed by another signal is not a timeout")
	require.Equal(t, 137, obs.ExitCode)
	// A background job that keeps the output open ends with the engine's
	// grace; one that redirects it does not delay the exec.
	began := time.Now()
	sh(t, sb, "sleep 20 >/dev/null 2>&1 &")
	require.Less(t, time.Since(began), 5*time.Second)
	require.Equal(t, 0, sh(t, sb, "true").ExitCode)
}

func TestFileActions(t *testing.T) {
	p := open(t, nil)
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	defer sb.Close(context.Background())
	act := func(a runtime.Action) runtime.Observation {
		t.Helper()
		obs, err := sb.Act(t.Context(), a)
		require.NoError(t, err)
		return obs
	}
	sh(t, sb, "printf '#!/bin/sh\\necho old\\n' > run.sh && chmod 750 run.sh && mkfifo fifo && touch plain")
	obs := act(runtime.Action{Kind: runtime.ActWriteFile, Path: "run.sh", Content: "#!/bin/sh\necho new\n"})
	require.False(t, obs.Error, obs.Text())
	require.Equal(t, "wrote 19 bytes to run.sh", obs.Text())
	require.Equal(t, "new\n", sh(t, sb, "./run.sh").Text(), "overwriting keeps the mode")
	require.Equal(t, "-rwxr-x---\n", sh(t, sb, "ls -l run.sh | cut -c1-10").Text())

	cases := []struct {
		name string
		a    runtime.Action
		kind runtime.ErrorKind
		text string
	}{
		{"readFifo", runtime.Action{Kind: runtime.ActReadFile, Path: "fifo"}, runtime.ErrActionFail, "not a regular file"},
		{"readDir", runtime.Action{Kind: runtime.ActReadFile, Path: "/workspace"}, runtime.ErrActionFail, "is a directory"},
		{"writeDir", runtime.Action{Kind: runtime.ActWriteFile, Path: "sub/..", Content: "x"}, runtime.ErrActionFail, "workspace directory"},
		{"writeUnderFile", runtime.Action{Kind: runtime.ActWriteFile, Path: "plain/x", Content: "x"}, runtime.ErrActionFail, "not a directory"},
		{"readDangling", runtime.Action{Kind: runtime.ActReadFile, Path: "dangling-in"}, runtime.ErrNotFound, "no such file"},
		{"readDanglingOut", runtime.Action{Kind: runtime.ActReadFile, Path: "dangling-out"}, runtime.ErrPathRefused, "escapes"},
		{"writeDanglingOut", runtime.Action{Kind: runtime.ActWriteFile, Path: "dangling-out", Content: "x"}, runtime.ErrPathRefused, "escapes"},
	}
	sh(t, sb, "ln -s nothing-here dangling-in && ln -s /etc/forkline-nothing dangling-out && mkdir sub")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := act(c.a)
			require.True(t, obs.Error, obs.Text())
			require.Equal(t, c.kind, obs.ErrorKind, obs.Text())
			require.Contains(t, obs.Text(), c.text)
		})
	}
	require.Equal(t, "absent\n", sh(t, sb, "[ -e /etc/forkline-nothing ] && echo present || echo absent").Text())
	// Writing through a dangling symlink that stays inside creates its target.
	obs = act(runtime.Action{Kind: runtime.ActWriteFile, Path: "dangling-in", Content: "made"})
	require.False(t, obs.Error, obs.Text())
	require.Equal(t, "made", sh(t, sb, "cat nothing-here").Text())
	// Names with spaces, quotes and leading dashes.
	for _, name := range []string{"with space.txt", `q"uote'.txt`, "-dash", "dir with space/-x/$(echo no)"} {
		obs = act(runtime.Action{Kind: runtime.ActWriteFile, Path: name, Content: name})
		require.False(t, obs.Error, "%s: %s", name, obs.Text())
		obs = act(runtime.Action{Kind: runtime.ActReadFile, Path: name})
		require.Equal(t, name, obs.Text())
	}
	require.Empty(t, sh(t, sb, "ls / | grep -x no || true").Text(), "no command substitution ran")
}

func TestCheckpointDetails(t *testing.T) {
	p := open(t, nil)
	ctx := t.Context()
	sb, err := p.Create(ctx, providers.Spec{
		Env:       []string{"FROM_GOLDEN=1"},
		OutputCap: 64,
		Labels:    map[string]string{"example.task": "t1"},
		Resources: providers.Resources{CPUs: 0.5, MemoryMB: 256, Pids: 100},
	})
	require.NoError(t, err)
	defer sb.Close(context.Background())
	sh(t, sb, "head -c 2000000 /dev/urandom > blob")
	cp, err := p.Checkpoint(ctx, sb, "golden")
	require.NoError(t, err)
	defer p.Release(context.Background(), cp)
	require.Greater(t, cp.Took, time.Duration(0))
	require.InDelta(t, 2000000, cp.Bytes, 200000, "Bytes is the size of the diff")

	ins, err := p.cli.ImageInspect(ctx, cp.ID)
	require.NoError(t, err)
	labels := ins.Config.Labels
	require.Equal(t, p.RunID(), labels[LabelRun])
	require.Equal(t, strconv.Itoa(os.Getpid()), strings.Split(labels[LabelOwner], "@")[0])
	require.Equal(t, "checkpoint", labels[LabelKind])
	require.Equal(t, "golden", labels[LabelCheckpointLabel])

	f, err := p.Fork(ctx, cp)
	require.NoError(t, err)
	defer f.Close(context.Background())
	require.Equal(t, ForkMethod, f.Info().Origin)
	require.Equal(t, "1\n", sh(t, f, "echo $FROM_GOLDEN").Text(), "forks inherit Env")
	obs := sh(t, f, "head -c 1000 /dev/zero")
	require.True(t, obs.Truncated, "forks inherit OutputCap")
	ci, err := p.cli.ContainerInspect(ctx, f.Info().ID, client.ContainerInspectOptions{})
	require.NoError(t, err)
	hc := ci.Container.HostConfig
	require.Equal(t, container.NetworkMode("none"), hc.NetworkMode)
	require.Equal(t, int64(5e8), hc.NanoCPUs)
	require.Equal(t, int64(256<<20), hc.Memory)
	require.Equal(t, int64(100), *hc.PidsLimit)
	require.Equal(t, "t1", ci.Container.Config.Labels["example.task"])
	require.Equal(t, cp.ID, ci.Container.Config.Labels[LabelCheckpoint])
	require.Equal(t, p.RunID(), ci.Container.Config.Labels[LabelRun])

	// Release while a fork runs: the fork keeps working, the image goes by
	// name, and Close removes the rest.
	require.NoError(t, p.Release(ctx, cp))
	require.Equal(t, "ok\n", sh(t, f, "echo ok").Text())
	_, err = p.Fork(ctx, cp)
	require.Error(t, err, "no forks of a released checkpoint")
}

// sweepFixture makes, for run, a running container and a checkpoint image
// owned by this process, and a container and an image owned by a dead
// process. Any process's sweep may remove the dead owner's objects as soon
// as they exist, so they are made in single steps that need nothing of them
// afterwards.
type sweepFixture struct {
	run                        string
	liveC, liveI, deadC, deadI string
}

func makeSweepFixture(t *testing.T, cli *client.Client, run string) sweepFixture {
	t.Helper()
	ctx := t.Context()
	host, err := os.Hostname()
	require.NoError(t, err)
	live := map[string]string{LabelRun: run, LabelOwner: fmt.Sprintf("%d@%s", os.Getpid(), host)}
	dead := map[string]string{LabelRun: run, LabelOwner: fmt.Sprintf("%d@%s", 1<<30, host)} // above any pid_max
	f := sweepFixture{run: run}
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: ImageBusybox, Cmd: []string{"sleep", "600"}, Labels: live},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	require.NoError(t, err)
	f.liveC = c.ID
	_, err = cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{})
	require.NoError(t, err)
	img, err := cli.ContainerCommit(ctx, c.ID, client.ContainerCommitOptions{Config: &container.Config{Labels: live}})
	require.NoError(t, err)
	f.liveI = img.ID
	img, err = cli.ContainerCommit(ctx, c.ID, client.ContainerCommitOptions{Config: &container.Config{Labels: dead}})
	require.NoError(t, err)
	f.deadI = img.ID
	c, err = cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: ImageBusybox, Cmd: []string{"sleep", "600"}, Labels: dead},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	require.NoError(t, err)
	f.deadC = c.ID
	return f
}

func exists(t *testing.T, cli *client.Client, containerID, imageID string) (bool, bool) {
	t.Helper()
	_, cerr := cli.ContainerInspect(t.Context(), containerID, client.ContainerInspectOptions{})
	_, ierr := cli.ImageInspect(t.Context(), imageID)
	for _, err := range []error{cerr, ierr} {
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	return cerr == nil, ierr == nil
}

func TestSweep(t *testing.T) {
	cli := engine(t)
	ctx := t.Context()
	run := "sweep-test-" + randomHex(4)
	f := makeSweepFixture(t, cli, run)

	_, err := Sweep(ctx, cli, SweepOptions{DeadOwners: true})
	require.NoError(t, err)
	c, i := exists(t, cli, f.deadC, f.deadI)
	require.False(t, c, "the dead owner's container is swept")
	require.False(t, i, "the dead owner's image is swept")
	c, i = exists(t, cli, f.liveC, f.liveI)
	require.True(t, c, "a live owner's container stays")
	require.True(t, i, "a live owner's image stays")

	res, err := Sweep(ctx, cli, SweepOptions{RunID: run})
	require.NoError(t, err)
	require.Equal(t, []string{f.liveC}, res.Containers)
	require.Equal(t, []string{f.liveI}, res.Images)
	left, err := listLabelled(ctx, cli, LabelRun+"="+run)
	require.NoError(t, err)
	require.Empty(t, left)

	_, err = cli.ImageInspect(ctx, ImageBusybox)
	require.NoError(t, err, "the base image is never swept")
	_, err = Sweep(ctx, cli, SweepOptions{})
	require.Error(t, err)
}

// TestConcurrentSweeps runs sweeps of one run at the same time (as
// providers opening together do): they race for the same objects and must
// all succeed.
func TestConcurrentSweeps(t *testing.T) {
	cli := engine(t)
	run := "sweep-race-" + randomHex(4)
	for range 2 {
		makeSweepFixture(t, cli, run)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = Sweep(context.Background(), cli, SweepOptions{RunID: run, DeadOwners: true})
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "sweep %d", i)
	}
	left, err := listLabelled(t.Context(), cli, LabelRun+"="+run)
	require.NoError(t, err)
	require.Empty(t, left)
}

// TestProviderSweep: the provider's Sweep (providers.Sweeper, which the
// collector calls after opening it) removes what dead owners left and
// leaves live owners' objects, this provider's sandboxes included.
func TestProviderSweep(t *testing.T) {
	cli := engine(t)
	p := open(t, nil)
	ctx := t.Context()
	mine, err := p.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	defer mine.Close(context.Background())
	f := makeSweepFixture(t, cli, "sweep-provider-"+randomHex(4))
	t.Cleanup(func() { _, _ = Sweep(context.Background(), cli, SweepOptions{RunID: f.run}) })

	sw, ok := providers.As[providers.Sweeper](p)
	require.True(t, ok, "docker is a providers.Sweeper")
	require.NoError(t, sw.Sweep(ctx))
	c, i := exists(t, cli, f.deadC, f.deadI)
	require.False(t, c, "the dead owner's container is swept")
	require.False(t, i, "the dead owner's image is swept")
	c, i = exists(t, cli, f.liveC, f.liveI)
	require.True(t, c, "a live owner's container stays")
	require.True(t, i, "a live owner's image stays")
	require.Equal(t, "ok\n", sh(t, mine, "echo ok").Text(), "the provider's own sandbox survives its sweep")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err = p.Sweep(cancelled)
	require.ErrorIs(t, err, context.Canceled, "a cancelled sweep stops and says so")
	require.NotErrorIs(t, err, runtime.ErrUnavailable, "cancelling is not the engine going away")
}

// With sweep=off, Sweep never reaches the engine (the provider below has
// no client: any call would panic).
func TestProviderSweepOff(t *testing.T) {
	p := &Provider{}
	require.NoError(t, p.Sweep(t.Context()))
}

func TestOwnerDead(t *testing.T) {
	host, _ := os.Hostname()
	cases := []struct {
		owner string
		dead  bool
	}{
		{fmt.Sprintf("%d@%s", os.Getpid(), host), false},
		{fmt.Sprintf("%d@%s", 1<<30, host), true},
		{fmt.Sprintf("%d@%s", 1<<30, "another-host"), false},
		{"", false},
		{"x@" + host, false},
	}
	for _, c := range cases {
		require.Equal(t, c.dead, ownerDead(c.owner, host), c.owner)
	}
}

func TestParseDiag(t *testing.T) {
	r := parseDiag([]byte("forkline-pgid 12\nKilled\nforkline-timeout\nforkline-exit 137\n"))
	require.Equal(t, diagReport{pgid: 12, exited: true, exitCode: 137, timedOut: true}, r)
	r = parseDiag([]byte("forkline-pgid 7\nforkline-exit 3\n"))
	require.Equal(t, diagReport{pgid: 7, exited: true, exitCode: 3}, r)
	require.Equal(t, diagReport{}, parseDiag(nil))
}

func TestFilesTar(t *testing.T) {
	r, err := filesTar(nil)
	require.NoError(t, err)
	require.Nil(t, r)
	for _, files := range []map[string][]byte{
		{"../x": nil},
		{"/etc/x": nil},
		{".": nil},
		{"a": nil, "a/b": nil},
		{"a/b": nil, "./a/b": nil},
	} {
		_, err := filesTar(files)
		require.Error(t, err, "%v", files)
	}
	_, err = filesTar(map[string][]byte{"/workspace/a/b": []byte("x"), "a/c": nil})
	require.NoError(t, err)
}

func TestTagSafe(t *testing.T) {
	require.Equal(t, "run_1", tagSafe("run 1"))
	require.Equal(t, "run", tagSafe("..."))
	require.Len(t, tagSafe(strings.Repeat("x", 300)), 100)
	require.True(t, errors.Is(fmt.Errorf("x: %w", ErrNoEngine), ErrNoEngine))
}

// TestDebianImage runs the basics on forkline/debian (dash, coreutils,
// util-linux) when it has been built (make images-debian). Its absence is a
// skip, and a failure when FORKLINE_REQUIRE names docker-debian, as CI does.
func TestDebianImage(t *testing.T) {
	cli := engine(t)
	testenv.Need(t, testenv.DockerDebian, func() error {
		if _, err := cli.ImageInspect(t.Context(), ImageDebian); err != nil {
			return fmt.Errorf("%s not built: %w", ImageDebian, err)
		}
		return nil
	})
	p := open(t, map[string]string{ParamImage: ImageDebian})
	for _, mode := range []string{InitAuto, InitOff} {
		t.Run(mode, func(t *testing.T) {
			p := p
			if mode == InitOff {
				p = open(t, map[string]string{ParamImage: ImageDebian, ParamInit: InitOff})
			}
			sb, err := p.Create(t.Context(), providers.Spec{Files: map[string][]byte{"a/f": []byte("x")}})
			require.NoError(t, err)
			defer sb.Close(context.Background())
			require.Regexp(t, `^12\.`, sh(t, sb, "cat /etc/debian_version").Text())
			obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec,
				Cmd: "echo started; sleep 30 & echo $! > child.pid; sleep 30", TimeoutMS: 500})
			require.NoError(t, err)
			require.True(t, obs.TimedOut, obs.Text())
			require.Equal(t, "started\n", obs.Text())
			pid := strings.TrimSpace(sh(t, sb, "cat child.pid").Text())
			require.Eventually(t, func() bool {
				return sh(t, sb, "[ -e /proc/"+pid+" ] && echo alive || echo reaped").Text() == "reaped\n"
			}, 10*time.Second, 50*time.Millisecond, "child reaped")
			obs, err = sb.Act(t.Context(), runtime.Action{Kind: runtime.ActReadFile, Path: "a/f"})
			require.NoError(t, err)
			require.Equal(t, "x", obs.Text())
			cp, err := p.Checkpoint(t.Context(), sb, "debian")
			require.NoError(t, err)
			f, err := p.Fork(t.Context(), cp)
			require.NoError(t, err)
			require.Equal(t, "x", sh(t, f, "cat a/f").Text())
			require.NoError(t, f.Close(t.Context()))
			require.NoError(t, p.Release(t.Context(), cp))
		})
	}
}

func TestCloseWithCancelledContext(t *testing.T) {
	p := open(t, nil)
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	cp, err := p.Checkpoint(t.Context(), sb, "c")
	require.NoError(t, err)
	_, err = p.Fork(t.Context(), cp)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, p.Close(ctx), "Close cleans up even with a cancelled context")
	left, err := p.Leftovers(context.Background())
	require.NoError(t, err)
	require.Empty(t, left)
}
