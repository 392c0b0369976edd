package providertest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// PersistentShell checks a provider's persistent shell (Spec.Shell =
// ShellPersistent): state carries between commands, output and exit
// status stay exact, a hung command times out and the shell goes on, a
// shell that exits is an observation and the next command gets a new one,
// and a fork starts a new shell (files carried, shell state not) — or, on
// a provider whose checkpoints hold processes (ForksMemory), goes on with
// the checkpointed shell in every fork and in the checkpointed sandbox
// itself, each fork's shell its own from there. spec is the base spec (an
// image for providers that need one).
func PersistentShell(t *testing.T, p providers.Provider, spec providers.Spec) {
	spec.Shell = providers.ShellPersistent
	sb := create(t, p, spec)
	exec := func(cmd string, timeoutMS int64) runtime.Observation {
		t.Helper()
		return act(t, sb, runtime.Action{Kind: runtime.ActExec, Cmd: cmd, TimeoutMS: timeoutMS})
	}

	obs := exec("cd /tmp && export X=1 && f() { echo \"f:$1\"; }", 0)
	require.Equal(t, 0, obs.ExitCode, obs.Text())
	assert.Empty(t, string(obs.Output), "a silent command's output is empty: no frame leaks")
	obs = exec("pwd; echo $X; f a", 0)
	assert.Equal(t, "/tmp\n1\nf:a\n", string(obs.Output), "the directory, the variable and the function carry")

	// Exact output: no trailing newline added, stderr joined, status kept.
	obs = exec("printf 'no newline'; echo err >&2; exit_with() { return $1; }; exit_with 7", 0)
	assert.Equal(t, "no newline"+"err\n", string(obs.Output))
	assert.Equal(t, 7, obs.ExitCode)
	assert.Equal(t, runtime.ErrExitStatus, obs.ErrorKind)
	obs = exec("echo 'unterminated", 0)
	assert.Equal(t, 2, obs.ExitCode, "a syntax error is the command's status, not the shell's end: %s", obs.Text())
	obs = exec("echo $X", 0)
	assert.Equal(t, "1\n", string(obs.Output), "the shell survived the syntax error")

	// A background job is the shell's: jobs lists it in the next step.
	obs = exec("sleep 300 &", 0)
	require.Equal(t, 0, obs.ExitCode, obs.Text())
	obs = exec("jobs", 0)
	assert.Contains(t, string(obs.Output), "Running", "jobs lists the job started in the step before")
	assert.Contains(t, string(obs.Output), "[1]")

	// A hung command times out; the shell and its state go on, and so
	// does the background job.
	obs = exec("sleep 600", 300)
	assert.True(t, obs.TimedOut, obs.Text())
	assert.Equal(t, runtime.ErrTimeout, obs.ErrorKind)
	obs = exec("echo $X; jobs", 0)
	assert.True(t, strings.HasPrefix(string(obs.Output), "1\n"), obs.Text())
	assert.Contains(t, string(obs.Output), "Running", "after a timeout the shell goes on, with its job")

	// A shell busy in a builtin cannot be interrupted by killing its
	// children: it is killed, and says so.
	obs = exec("while :; do :; done", 300)
	assert.True(t, obs.TimedOut)
	assert.Contains(t, obs.Text(), "the next command starts a new shell")
	obs = exec("echo \"[$X]\"", 0)
	assert.Equal(t, "[]\n", string(obs.Output), "a new shell: the variable is gone")

	// The shell's death is an observation.
	obs = exec("export Y=2; exit 3", 0)
	assert.Equal(t, 3, obs.ExitCode)
	assert.Contains(t, obs.Text(), "the shell exited with status 3")
	obs = exec("echo \"[$Y]\"; pwd", 0)
	assert.Equal(t, 0, obs.ExitCode)
	assert.True(t, strings.HasPrefix(string(obs.Output), "[]\n"), obs.Text())

	if !p.Capabilities().Checkpoint {
		return
	}
	if p.Capabilities().ForksMemory {
		forkedShellGoesOn(t, p, sb)
		return
	}
	// A fork carries files, not the shell: its shell starts in the
	// workspace with no variable set.
	exec("cd /tmp; export Z=9; echo kept > carried.txt; cd - >/dev/null; echo kept > carried.txt", 0)
	cp, err := p.Checkpoint(t.Context(), sb, "persistent-shell")
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Release(t.Context(), cp) })
	fork, err := p.Fork(t.Context(), cp)
	require.NoError(t, err)
	closeAtEnd(t, fork)
	obs = act(t, fork, runtime.Action{Kind: runtime.ActExec, Cmd: "cat carried.txt; echo \"[$Z]\""})
	assert.Equal(t, "kept\n[]\n", string(obs.Output), "a fork: files carried, the shell's variables not")
}

// Terminal checks send_keys and read_screen: a shell driven on the
// terminal across steps, special keys by tmux's names, an interrupted
// program, and scrollback. It skips when the host has no tmux.
func Terminal(t *testing.T, p providers.Provider, spec providers.Spec) {
	testenv.NeedTmux(t)
	sb := create(t, p, spec)
	send := func(keys string) {
		t.Helper()
		obs := act(t, sb, runtime.Action{Kind: runtime.ActSendKeys, Keys: keys})
		require.False(t, obs.Error, obs.Text())
	}
	screen := func(scroll int) string {
		t.Helper()
		obs := act(t, sb, runtime.Action{Kind: runtime.ActReadScreen, Scrollback: scroll})
		require.False(t, obs.Error, obs.Text())
		return string(obs.Output)
	}
	send("A=41; echo $((A+1))\n")
	assert.Contains(t, screen(0), "\n42\n")
	// A program that waits for input, driven across steps.
	send("read -r answer; echo \"got:$answer\"")
	send("Enter")
	send("yes")
	send("Enter")
	assert.Contains(t, screen(0), "got:yes")
	// C-c interrupts the foreground program; the shell goes on.
	send("sleep 600\n")
	assert.Contains(t, screen(0), "sleep 600") // the shell read the line: sleep runs
	send("C-c")
	send("echo after-$A\n")
	assert.Contains(t, screen(0), "after-41")
	// Scrollback reaches above the screen.
	send("i=0; while [ $i -lt 80 ]; do echo line$i; i=$((i+1)); done\n")
	s := screen(0)
	assert.NotContains(t, s, "line0\n")
	assert.Contains(t, screen(200), "line0\n")
}

// forkedShellGoesOn checks, on a provider that forks memory, that the
// shell's state — directory, variable, function, background job — goes on
// in the checkpointed sandbox and in two forks of it, and that what one
// fork's shell then sets is its own.
func forkedShellGoesOn(t *testing.T, p providers.Provider, sb providers.Sandbox) {
	exec := func(sb providers.Sandbox, cmd string) runtime.Observation {
		t.Helper()
		return act(t, sb, runtime.Action{Kind: runtime.ActExec, Cmd: cmd})
	}
	obs := exec(sb, "cd /tmp && export X=1 && f(){ echo hi; }")
	require.Equal(t, 0, obs.ExitCode, obs.Text())
	obs = exec(sb, "sleep 1000 &")
	require.Equal(t, 0, obs.ExitCode, obs.Text())
	cp, err := p.Checkpoint(t.Context(), sb, "persistent-shell")
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Release(t.Context(), cp) })
	check := func(who string, sb providers.Sandbox) {
		t.Helper()
		obs := exec(sb, "pwd; echo $X; f; jobs")
		require.Equal(t, 0, obs.ExitCode, "%s: %s", who, obs.Text())
		lines := strings.SplitN(string(obs.Output), "\n", 4)
		require.Len(t, lines, 4, "%s: %q", who, obs.Output)
		assert.Equal(t, []string{"/tmp", "1", "hi"}, lines[:3], "%s: the directory, the variable and the function go on", who)
		assert.Contains(t, lines[3], "[1]", "%s: the background job goes on", who)
		assert.Contains(t, lines[3], "Running", "%s: the background job goes on", who)
		// And it is the sleep (jobs need not name it: busybox does not).
		obs = exec(sb, `for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 1000 $'`)
		assert.Equal(t, "1\n", string(obs.Output), "%s: one sleep 1000 runs", who)
	}
	check("the checkpointed sandbox", sb)
	forks := make([]providers.Sandbox, 2)
	for i := range forks {
		forks[i], err = p.Fork(t.Context(), cp)
		require.NoError(t, err)
		closeAtEnd(t, forks[i])
		check(fmt.Sprintf("fork %d", i), forks[i])
	}
	obs = exec(forks[0], "export ONLY=zero; cd /")
	require.Equal(t, 0, obs.ExitCode, obs.Text())
	obs = exec(forks[1], "echo \"[$ONLY]\"; pwd")
	assert.Equal(t, "[]\n/tmp\n", string(obs.Output), "what one fork's shell sets is not the other's")
	obs = exec(forks[0], "echo \"[$ONLY]\"; pwd")
	assert.Equal(t, "[zero]\n/\n", string(obs.Output), "and it is the fork's own")
}
