package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/linuxcap"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// hostCgroup reads a file of sb's host cgroup (cgroup v1 under
// /sys/fs/cgroup/CONTROLLER, or v2), "" when the host has neither.
func hostCgroup(t *testing.T, sb providers.Sandbox, controller, v1, v2 string) string {
	t.Helper()
	rel := filepath.Join("forkline-gvisor", sb.(*sandbox).cidNow())
	for _, f := range []string{filepath.Join("/sys/fs/cgroup", controller, rel, v1), filepath.Join("/sys/fs/cgroup", rel, v2)} {
		if b, err := os.ReadFile(f); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// capEff reads the effective capabilities of a command in sb.
func capEff(t *testing.T, sb providers.Sandbox) []string {
	t.Helper()
	status := sh(t, sb, "cat /proc/self/status").Text()
	var eff string
	for _, line := range strings.Split(status, "\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "CapEff" {
			eff = strings.TrimSpace(v)
		}
	}
	mask, err := strconv.ParseUint(eff, 16, 64)
	require.NoError(t, err, "CapEff in %q", status)
	return linuxcap.Set(mask)
}

// Limits reach the sandbox's host cgroup (memory, CPU) and gVisor's kernel
// (processes, as RLIMIT_NPROC), in a created sandbox and in a fork; the
// spec's own limits win over the defaults; capabilities are docker's.
func TestLimitsAndCapabilities(t *testing.T) {
	p := open(t, nil)
	sb := create(t, p, providers.Spec{})
	cp, err := p.Checkpoint(t.Context(), sb, "limits")
	require.NoError(t, err)
	fork, err := p.Fork(t.Context(), cp)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fork.Close(context.Background()) })
	for name, s := range map[string]providers.Sandbox{"created": sb, "forked": fork} {
		t.Run(name, func(t *testing.T) {
			if mem := hostCgroup(t, s, "memory", "memory.limit_in_bytes", "memory.max"); mem != "" {
				require.Equal(t, strconv.Itoa(2048<<20), mem, "memory limit of the sandbox's host cgroup")
				require.Equal(t, "100000", hostCgroup(t, s, "cpu", "cpu.cfs_quota_us", "cpu.max")[:6], "one core")
				require.Equal(t, strconv.Itoa(1024*hostPidsFactor+hostPidsSlack), hostCgroup(t, s, "pids", "pids.max", "pids.max"), "the host backstop")
			} else {
				t.Log("the host shows no cgroup for the sandbox: host limits unchecked")
			}
			require.Equal(t, "1024\n", sh(t, s, "ulimit -u").Text(), "RLIMIT_NPROC: the sandbox's process limit")
			caps := capEff(t, s)
			require.Equal(t, []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"}, caps, "effective capabilities of a command")
			// gVisor's /proc/PID/status has no NoNewPrivs line: the spec
			// runsc was given is what can be checked.
			spec, err := os.ReadFile(filepath.Join(p.dir, "sandboxes", s.Info().ID, s.(*sandbox).cidNow(), "config.json"))
			require.NoError(t, err)
			require.Contains(t, string(spec), `"noNewPrivileges": true`)
			require.Equal(t, "lo\n", sh(t, s, "ls /sys/class/net").Text(), "network none: loopback only")
		})
	}
	own := create(t, p, providers.Spec{Resources: providers.Resources{CPUs: 0.5, MemoryMB: 256, Pids: 128, Capabilities: []string{"net_raw"}}})
	require.Equal(t, "128\n", sh(t, own, "ulimit -u").Text())
	if mem := hostCgroup(t, own, "memory", "memory.limit_in_bytes", "memory.max"); mem != "" {
		require.Equal(t, strconv.Itoa(256<<20), mem)
	}
	require.Equal(t, []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "NET_RAW"}, capEff(t, own))
	obs := sh(t, own, "ping -c 1 -W 2 127.0.0.1")
	require.Equal(t, 0, obs.ExitCode, "ping with NET_RAW: %s", obs.Text())
	obs = sh(t, sb, "ping -c 1 -W 2 127.0.0.1")
	require.NotEqual(t, 0, obs.ExitCode, "ping without NET_RAW: %s", obs.Text())

	for _, c := range []struct{ name, cmd string }{
		{"chroot", "chroot / true"},
		{"mountNamespace", "unshare -m true"},
		{"mount", "mkdir -p m && mount -t tmpfs none m"},
		// gVisor lets mknod make a node without MKNOD, but every device is
		// its kernel's own: a host disk is not behind one.
		{"hostDisk", "mknod sda b 8 0; head -c 1 sda >/dev/null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			obs := sh(t, sb, c.cmd)
			require.NotEqual(t, 0, obs.ExitCode, "%q must fail without its capability: %s", c.cmd, obs.Text())
		})
	}
	// What ordinary work as root needs still works.
	obs = sh(t, sb, "echo x > f && chown 1000:1000 f && chmod 0400 f && echo more >> f && cat f && stat -c %u:%a f")
	require.Equal(t, 0, obs.ExitCode, obs.Text())
	require.Equal(t, "x\nmore\n1000:400\n", obs.Text())
}

// Nothing of forkline's environment (an API key) reaches a sandbox, and a
// sandbox sees only its own processes and files: no host process in its
// /proc, no host path through /proc/*/root, and read_file through /proc
// symlinks is refused like any symlink out of the workspace.
func TestEscapes(t *testing.T) {
	t.Setenv("FORKLINE_TEST_SECRET", "s3cr3t-host-only")
	p := open(t, nil)
	sb := create(t, p, providers.Spec{Env: []string{"TASK_VAR=visible"}})
	env := sh(t, sb, "env; cat /proc/1/environ | tr '\\0' '\\n'; cat /proc/self/environ | tr '\\0' '\\n'").Text()
	require.NotContains(t, env, "s3cr3t", "no host environment in the sandbox")
	require.Contains(t, env, "TASK_VAR=visible")

	host, err := os.Getwd()
	require.NoError(t, err)
	obs := sh(t, sb, fmt.Sprintf(`for p in /proc/%d /proc/1/root%s /proc/self/root%s %s; do [ -e "$p" ] && echo "present $p"; done; ls /proc | grep -c '^[0-9]'`, os.Getpid(), host, host, host))
	require.Equal(t, 0, obs.ExitCode, obs.Text())
	require.NotContains(t, obs.Text(), "present", "a host process or path seen from the sandbox")
	n, err := strconv.Atoi(strings.TrimSpace(obs.Text()))
	require.NoError(t, err, obs.Text())
	require.Less(t, n, 20, "the sandbox's /proc shows its own few processes")

	sh(t, sb, "ln -s /proc/self/root/etc/passwd rootpw && ln -s /proc/1/root rootdir && ln -s /proc/self/cwd here && echo in > in.txt")
	for _, path := range []string{"rootpw", "rootdir/etc/passwd", "/proc/1/environ"} {
		obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActReadFile, Path: path})
		require.NoError(t, err)
		require.Equal(t, runtime.ErrPathRefused, obs.ErrorKind, "read_file %q: %s", path, obs.Text())
		require.NotContains(t, obs.Text(), "root:")
	}
	obs, err = sb.Act(t.Context(), runtime.Action{Kind: runtime.ActWriteFile, Path: "rootdir/etc/evil", Content: "x"})
	require.NoError(t, err)
	require.Equal(t, runtime.ErrPathRefused, obs.ErrorKind, obs.Text())
	require.Equal(t, "absent\n", sh(t, sb, "[ -e /etc/evil ] && echo present || echo absent").Text())
}

// A fork bomb fills the sandbox's process limit, which gVisor's kernel
// enforces, and is killed by the action's timeout; the sandbox works
// afterwards. A memory hog past the limit ends the whole sandbox (gVisor's
// kernel holds every process's memory and is what the host kills): the
// action fails with ErrSandboxDied, never hangs, and the provider cleans up.
func TestForkBombAndMemoryHog(t *testing.T) {
	p := open(t, nil)
	t.Run("forkBomb", func(t *testing.T) {
		sb := create(t, p, providers.Spec{Resources: providers.Resources{Pids: 128}})
		obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec,
			Cmd: `(bomb() { bomb | bomb & }; bomb) & sleep 5; set -- /proc/[0-9]*; echo "tasks $#" > /tmp/forkline-tasks; exec sleep 60`, TimeoutMS: 10000})
		require.NoError(t, err, "a fork bomb is the action's failure, not the sandbox's")
		text := obs.Text()
		require.True(t, obs.TimedOut, "the bomb runs until the action times out (exit %d): ...%s", obs.ExitCode, text[max(0, len(text)-400):])
		require.Contains(t, text, "can't fork", "forks failed at the limit")
		// Decision: under load (CI saw it twice in six runs, and once
		// more when the bomb's last processes were still being killed:
		// after "echo alive" had answered) the bomb can end the whole
		// gVisor sandbox — runsc stops and the next command's wait fails
		// with EOF. forkline then reports the sandbox's death, as for a
		// memory hog below, and the episode ends env_error; it never
		// hangs. Why runsc stops (the host-side limits of the sentry are
		// the first suspect) is not settled.
		died := func(err error) bool {
			if !errors.Is(err, ErrSandboxDied) {
				return false
			}
			t.Logf("the fork bomb ended the gVisor sandbox (reported, not hung): %v", err)
			return true
		}
		var alive string
		for range 50 {
			obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec, Cmd: "echo alive"})
			if died(err) {
				return
			}
			require.NoError(t, err, "exec \"echo alive\"")
			if alive = obs.Text(); alive == "alive\n" {
				break
			}
		}
		require.Equal(t, "alive\n", alive, "the sandbox works after the bomb was killed")
		// The count goes to a file (a builtin's redirect needs no fork):
		// on stdout it could be lost past the output cap among the
		// bomb's "can't fork" lines.
		// Bomb processes forked during the kill's scans may hold process
		// slots a moment longer: runsc exec answers "try again" then.
		var count string
		for range 50 {
			obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec, Cmd: "cat /tmp/forkline-tasks"})
			if died(err) {
				return
			}
			require.NoError(t, err, "exec \"cat /tmp/forkline-tasks\"")
			if count = obs.Text(); strings.HasPrefix(count, "tasks ") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		n, ok := strings.CutPrefix(strings.TrimSpace(count), "tasks ")
		require.True(t, ok, "the command counted the sandbox's processes: %q", count)
		tasks, err := strconv.Atoi(n)
		require.NoError(t, err)
		require.LessOrEqual(t, tasks, 128, "never more processes than the limit")
		require.Greater(t, tasks, 64, "the bomb really reached the limit")
	})
	t.Run("memoryHog", func(t *testing.T) {
		sb := create(t, p, providers.Spec{Resources: providers.Resources{MemoryMB: 256}})
		_, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec,
			Cmd: `head -c 1073741824 /dev/zero | sort >/dev/null`, TimeoutMS: 120000})
		require.ErrorIs(t, err, ErrSandboxDied, "gVisor's kernel was killed with the hog")
		_, err = sb.Act(t.Context(), runtime.Action{Kind: runtime.ActExec, Cmd: "true"})
		require.ErrorIs(t, err, ErrSandboxDied)
		require.NoError(t, sb.Close(t.Context()))
		left, err := p.Leftovers(t.Context())
		require.NoError(t, err)
		for _, l := range left {
			require.NotContains(t, l, sb.Info().ID)
		}
	})
}
