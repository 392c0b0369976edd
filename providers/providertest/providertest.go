// Package providertest is the conformance suite every provider must pass:
// files, exec, timeouts that kill the whole process tree, output caps, binary
// output, path confinement, checkpoint and fork isolation (of goldens and of
// checkpoints of forks in the middle of an episode: branching), processes
// that go on in every fork on a provider that forks memory, cleanup,
// concurrency, and the GUI claim (a sandbox says it has a GUI only when it
// asked for one and GUI actions reach it; a provider that cannot host one
// refuses the request). A backend's test calls Run with a function that
// opens a fresh provider. Its benchmarks call BenchReset, the reset-latency
// benchmark every provider runs (as BenchmarkReset), which reports a fork's
// cost as a ratio of a recreate's measured in the same run.
//
// It knows only the providers contract and the runtime waist, never a
// particular backend: every check goes through Provider, Sandbox.Act and the
// optional LeakChecker, and every probe of the sandbox's state (is a process
// gone, was a file written outside) is made by a command inside the sandbox,
// so it holds for host processes and containers alike. Commands are POSIX sh
// with coreutils (head, tr, ls, sed, ln, sleep).
package providertest

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// LeakChecker is an optional interface a Provider may implement so the suite
// can verify it leaves nothing behind. Leftovers lists what the provider
// still holds outside the process (directories, mounts, containers, images),
// one human-readable entry each. Once every sandbox is closed, every
// checkpoint released and the provider closed, it must return nothing. The
// suite finds it with providers.As, so a decorator that unwraps to a
// LeakChecker is checked too.
type LeakChecker interface {
	Leftovers(ctx context.Context) ([]string, error)
}

// Run runs the conformance suite as subtests of t. open is called once per
// subtest and must return a new, open provider; the suite closes it (twice,
// to check Close is idempotent) when the subtest ends, and then, when the
// provider implements LeakChecker, asserts it left nothing behind.
func Run(t *testing.T, open func(t *testing.T) providers.Provider) {
	t.Helper()
	s := &suite{open: open}
	t.Run("Files", s.testFiles)
	t.Run("ReadMissingFile", s.testReadMissing)
	t.Run("ExecExitCodes", s.testExecExitCodes)
	t.Run("ExecOutput", s.testExecOutput)
	t.Run("ExecEnvironment", s.testExecEnvironment)
	t.Run("ExecTimeoutKillsTree", s.testExecTimeout)
	t.Run("ExecContextCancel", s.testExecCancel)
	t.Run("OutputCap", s.testOutputCap)
	t.Run("BinaryOutput", s.testBinaryOutput)
	t.Run("PathTraversal", s.testPathTraversal)
	t.Run("WorkspaceAbsolutePath", s.testAbsolutePath)
	t.Run("UnsupportedActions", s.testUnsupported)
	t.Run("NULBytes", s.testNULBytes)
	t.Run("LongCommands", s.testLongCommands)
	t.Run("BadSpec", s.testBadSpec)
	t.Run("GUI", s.testGUI)
	t.Run("Checkpoint", s.testCheckpoint)
	t.Run("ForkIsolation", s.testForkIsolation)
	t.Run("GoldenImmutable", s.testGoldenImmutable)
	t.Run("ForkDeletes", s.testForkDeletes)
	t.Run("MidEpisodeCheckpoint", s.testMidEpisodeCheckpoint)
	t.Run("MidEpisodeCheckpointBusy", s.testMidEpisodeCheckpointBusy)
	t.Run("ForkMemory", s.testForkMemory)
	t.Run("ConcurrentForks", s.testConcurrentForks)
	t.Run("CloseIdempotent", s.testClose)
	t.Run("ReleaseIdempotent", s.testRelease)
	t.Run("NoLeaks", s.testNoLeaks)
	t.Run("ProviderCloseReleasesAll", s.testProviderClose)
}

type suite struct {
	open func(t *testing.T) providers.Provider
}

// cleanupCtx bounds cleanups, which run after t.Context is cancelled.
func cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}

// provider opens a provider that is closed, and checked for leaks, when t ends.
func (s *suite) provider(t *testing.T) providers.Provider {
	t.Helper()
	p := s.open(t)
	require.NotNil(t, p, "open returned a nil provider")
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		assert.NoError(t, p.Close(ctx), "provider Close")
		assert.NoError(t, p.Close(ctx), "second provider Close must be a no-op")
		assertNoLeftovers(t, ctx, p, "after provider Close")
	})
	return p
}

func assertNoLeftovers(t *testing.T, ctx context.Context, p providers.Provider, when string) {
	t.Helper()
	lc, ok := providers.As[LeakChecker](p)
	if !ok {
		return
	}
	left, err := lc.Leftovers(ctx)
	if assert.NoError(t, err, "Leftovers %s", when) {
		assert.Empty(t, left, "provider %s left these behind %s", p.Name(), when)
	}
}

// create makes a sandbox that is closed when t ends.
func create(t *testing.T, p providers.Provider, spec providers.Spec) providers.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), spec)
	require.NoError(t, err, "Create")
	require.NotNil(t, sb)
	closeAtEnd(t, sb)
	return sb
}

func closeAtEnd(t *testing.T, sb providers.Sandbox) {
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		assert.NoError(t, sb.Close(ctx), "Close of sandbox %s", sb.Info().ID)
	})
}

// fork forks cp into a sandbox that is closed when t ends.
func fork(t *testing.T, p providers.Provider, cp providers.Checkpoint) providers.Sandbox {
	t.Helper()
	sb, err := p.Fork(t.Context(), cp)
	require.NoError(t, err, "Fork")
	require.NotNil(t, sb)
	closeAtEnd(t, sb)
	return sb
}

// checkpoint checkpoints sb, or skips t when the provider says it cannot,
// after checking that it says so with ErrNotSupported. The checkpoint is
// released when t ends.
func checkpoint(t *testing.T, p providers.Provider, sb providers.Sandbox, label string) providers.Checkpoint {
	t.Helper()
	caps := p.Capabilities()
	cp, err := p.Checkpoint(t.Context(), sb, label)
	if !caps.Checkpoint {
		require.ErrorIs(t, err, providers.ErrNotSupported,
			"Capabilities().Checkpoint is false, so Checkpoint must fail with ErrNotSupported")
		testenv.Inapplicable(t, fmt.Sprintf("provider %s cannot checkpoint (Checkpoint returned ErrNotSupported as it must): fork tests skipped", p.Name()))
	}
	require.NoError(t, err, "Checkpoint")
	require.NotEmpty(t, cp.ID, "checkpoint id")
	require.Equal(t, p.Name(), cp.Provider, "Checkpoint.Provider")
	require.Equal(t, label, cp.Label, "Checkpoint.Label")
	if !caps.Fork {
		_, err := p.Fork(t.Context(), cp)
		require.ErrorIs(t, err, providers.ErrNotSupported,
			"Capabilities().Fork is false, so Fork must fail with ErrNotSupported")
		testenv.Inapplicable(t, fmt.Sprintf("provider %s cannot fork (Fork returned ErrNotSupported as it must): fork tests skipped", p.Name()))
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		assert.NoError(t, p.Release(ctx, cp), "Release")
	})
	return cp
}

// act performs a and fails t on an infrastructure error.
func act(t *testing.T, sb providers.Sandbox, a runtime.Action) runtime.Observation {
	t.Helper()
	obs, err := sb.Act(t.Context(), a)
	require.NoError(t, err, "Act(%s) must report failures in the Observation, not as an error", a)
	return obs
}

// run executes cmd and requires it to succeed, returning its output.
func run(t *testing.T, sb providers.Sandbox, cmd string) string {
	t.Helper()
	obs := act(t, sb, runtime.Action{Kind: runtime.ActExec, Cmd: cmd})
	require.Falsef(t, obs.Error, "exec %q failed (exit %d, %s): %s", cmd, obs.ExitCode, obs.ErrorKind, obs.Text())
	require.Equalf(t, 0, obs.ExitCode, "exec %q: %s", cmd, obs.Text())
	return string(obs.Output)
}

// read reads path and requires it to succeed.
func read(t *testing.T, sb providers.Sandbox, path string) string {
	t.Helper()
	obs := act(t, sb, runtime.Action{Kind: runtime.ActReadFile, Path: path})
	require.Falsef(t, obs.Error, "read_file %q failed (%s): %s", path, obs.ErrorKind, obs.Text())
	return string(obs.Output)
}

// write writes path and requires it to succeed.
func write(t *testing.T, sb providers.Sandbox, path, content string) {
	t.Helper()
	obs := act(t, sb, runtime.Action{Kind: runtime.ActWriteFile, Path: path, Content: content})
	require.Falsef(t, obs.Error, "write_file %q failed (%s): %s", path, obs.ErrorKind, obs.Text())
}

// requireMissing requires read_file of path to report ErrNotFound.
func requireMissing(t *testing.T, sb providers.Sandbox, path string) {
	t.Helper()
	obs := act(t, sb, runtime.Action{Kind: runtime.ActReadFile, Path: path})
	require.Truef(t, obs.Error, "read_file %q should fail, the file must not exist; got %q", path, obs.Text())
	require.Equalf(t, runtime.ErrNotFound, obs.ErrorKind, "read_file %q: %s", path, obs.Text())
}

func allBytes() string {
	b := make([]byte, 0, 512)
	for i := range 256 {
		b = append(b, byte(i))
	}
	for i := 255; i >= 0; i-- {
		b = append(b, byte(i))
	}
	return string(b)
}

func (s *suite) testFiles(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{Files: map[string][]byte{
		"top.txt":           []byte("top\n"),
		"a/b/c/deep.txt":    []byte("deep\n"),
		"a/sibling.txt":     []byte("sibling"),
		"empty.txt":         {},
		"bin/with-zero.dat": []byte("x\x00y\xff"),
	}})
	info := sb.Info()
	require.NotEmpty(t, info.ID, "SandboxInfo.ID")
	require.Equal(t, p.Name(), info.Provider, "SandboxInfo.Provider")
	require.NotEmpty(t, info.Origin, "SandboxInfo.Origin")

	require.Equal(t, "top\n", read(t, sb, "top.txt"))
	require.Equal(t, "deep\n", read(t, sb, "a/b/c/deep.txt"))
	require.Equal(t, "sibling", read(t, sb, "a/sibling.txt"))
	require.Empty(t, read(t, sb, "empty.txt"))
	require.Equal(t, "x\x00y\xff", read(t, sb, "bin/with-zero.dat"))
	// Commands see the same files, from the workspace as working directory.
	require.Equal(t, "top\ndeep\n", run(t, sb, "cat top.txt a/b/c/deep.txt"))

	bin := allBytes()
	write(t, sb, "new/sub/dir/all.bin", bin)
	require.Equal(t, bin, read(t, sb, "new/sub/dir/all.bin"), "binary round trip")
	require.Equal(t, "512", strings.TrimSpace(run(t, sb, "wc -c < new/sub/dir/all.bin")),
		"commands see the bytes write_file wrote")

	// Overwriting truncates.
	write(t, sb, "top.txt", "short")
	require.Equal(t, "short", read(t, sb, "top.txt"))
	write(t, sb, "top.txt", "")
	require.Empty(t, read(t, sb, "top.txt"))

	// read_file sees what commands write.
	run(t, sb, "mkdir -p made && printf 'by\\ncommand' > made/out.txt")
	require.Equal(t, "by\ncommand", read(t, sb, "made/out.txt"))
}

func (s *suite) testReadMissing(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{Files: map[string][]byte{"dir/present.txt": []byte("x")}})
	requireMissing(t, sb, "missing.txt")
	requireMissing(t, sb, "dir/missing.txt")
	requireMissing(t, sb, "no/such/dir/file.txt")
	obs := act(t, sb, runtime.Action{Kind: runtime.ActReadFile, Path: "missing.txt"})
	require.NotEmpty(t, obs.Text(), "a failed read_file should say why")
}

func (s *suite) testExecExitCodes(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{})
	cases := []struct {
		name string
		cmd  string
		code int
	}{
		{"success", "true", 0},
		{"exit3", "exit 3", 3},
		{"false", "false", 1},
		{"unknownCommand", "forkline-no-such-command-4242", 127},
		{"lastOfPipeline", "true | exit 5", 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := act(t, sb, runtime.Action{Kind: runtime.ActExec, Cmd: c.cmd})
			require.Equal(t, c.code, obs.ExitCode, "exit code of %q (output %q)", c.cmd, obs.Text())
			require.False(t, obs.TimedOut, "TimedOut")
			if c.code == 0 {
				require.False(t, obs.Error, "Error for exit 0")
				require.Equal(t, runtime.ErrNone, obs.ErrorKind)
			} else {
				require.True(t, obs.Error, "Error for exit %d", c.code)
				require.Equal(t, runtime.ErrExitStatus, obs.ErrorKind)
			}
		})
	}
}

func (s *suite) testExecOutput(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{})
	obs := act(t, sb, runtime.Action{Kind: runtime.ActExec, Cmd: "echo to-stdout; echo to-stderr >&2; exit 2"})
	out := obs.Text()
	require.Contains(t, out, "to-stdout", "stdout must be captured")
	require.Contains(t, out, "to-stderr", "stderr must be captured")
	require.Equal(t, 2, obs.ExitCode)
	require.Equal(t, int64(len(obs.Output)), obs.OutputBytes, "OutputBytes of an uncapped output")
	require.False(t, obs.Truncated)

	obs = act(t, sb, runtime.Action{Kind: runtime.ActExec, Cmd: "true"})
	require.Empty(t, obs.Output, "a silent command has no output")
	require.Zero(t, obs.OutputBytes)
}

func (s *suite) testExecEnvironment(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{Env: []string{"FORKLINE_SUITE_VAR=from-spec"}})
	require.Equal(t, "from-spec\n", run(t, sb, `echo "$FORKLINE_SUITE_VAR"`), "Spec.Env reaches commands")
	// Shell state does not leak from one exec to the next, but files do.
	run(t, sb, "echo x > marker; cd /; FOO=bar")
	require.Equal(t, "\n", run(t, sb, `echo "$FOO"`))
	require.Equal(t, "x\n", run(t, sb, "cat marker"), "each exec starts in the workspace")
	if ws := sb.Info().Workspace; ws != "" {
		require.Equal(t, ws, strings.TrimSpace(run(t, sb, "pwd -P")), "SandboxInfo.Workspace is where commands run")
	}
}

// processGone is a sh snippet printing "gone" when process PID has exited or
// is a zombie (an orphan in a container may wait for its reaper), else its
// state.
const processGone = `if [ ! -e /proc/PID ]; then echo gone; else st=$(sed -n 's/^State:[[:space:]]*//p' /proc/PID/status 2>/dev/null); case "$st" in ""|Z*|X*) echo gone;; *) echo "$st";; esac; fi`

func (s *suite) testExecTimeout(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{})
	began := time.Now()
	obs := act(t, sb, runtime.Action{
		Kind: runtime.ActExec,
		// A child in the group, one that left it with setsid (its
		// output still on the exec's stream), and a daemon: a double
		// fork under setsid, orphaned at once.
		Cmd: "echo started; sleep 30 & echo $! > child.pid; setsid sleep 30 & echo $! > detached.pid; " +
			"setsid sh -c 'sleep 30 </dev/null >/dev/null 2>&1 & echo $! > daemon.pid'; sleep 30; echo not-reached",
		TimeoutMS: 1000,
	})
	took := time.Since(began)
	require.Less(t, took, 15*time.Second, "a 500 ms timeout must return promptly, not when the command ends")
	require.True(t, obs.TimedOut, "TimedOut (output %q)", obs.Text())
	require.True(t, obs.Error)
	require.Equal(t, runtime.ErrTimeout, obs.ErrorKind)
	require.Equal(t, -1, obs.ExitCode, "a killed command has exit code -1")
	require.Contains(t, obs.Text(), "started", "output written before the timeout is kept")
	require.NotContains(t, obs.Text(), "not-reached")

	for _, f := range []string{"child.pid", "detached.pid", "daemon.pid"} {
		pid := strings.TrimSpace(read(t, sb, f))
		require.Regexp(t, `^[0-9]+$`, pid, f)
		probe := strings.ReplaceAll(processGone, "PID", pid)
		var state string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if state = strings.TrimSpace(run(t, sb, probe)); state == "gone" {
				break
			}
		}
		require.Equal(t, "gone", state, "the process %s (%s) of a timed-out command must be killed with it", pid, f)
	}

	// The sandbox is still usable after a timeout.
	require.Equal(t, "alive\n", run(t, sb, "echo alive"))
}

func (s *suite) testExecCancel(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	began := time.Now()
	_, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "sleep 30"})
	require.Less(t, time.Since(began), 15*time.Second, "Act must honour ctx cancellation promptly")
	require.ErrorIs(t, err, context.Canceled, "Act with a cancelled ctx returns the ctx error")
}

var elisionRe = regexp.MustCompile(`\[\.\.\. forkline: ([0-9]+) bytes elided \.\.\.\]`)

func (s *suite) testOutputCap(t *testing.T) {
	p := s.provider(t)
	const limit = 4096
	sb := create(t, p, providers.Spec{OutputCap: limit})
	const body = 1 << 20
	obs := act(t, sb, runtime.Action{Kind: runtime.ActExec,
		Cmd: fmt.Sprintf("printf HEAD-; head -c %d /dev/zero | tr '\\000' x; printf -- -TAIL", body)})
	require.False(t, obs.Error, "exec failed: %s", obs.Text())
	full := int64(len("HEAD-") + body + len("-TAIL"))
	require.True(t, obs.Truncated, "Truncated")
	require.Equal(t, full, obs.OutputBytes, "OutputBytes is the full size")
	require.LessOrEqual(t, len(obs.Output), limit+len(providers.ElisionMarker(full))+64,
		"Output must stay near the cap")
	require.GreaterOrEqual(t, len(obs.Output), limit/2, "Output keeps about the cap's worth")
	out := string(obs.Output)
	require.True(t, strings.HasPrefix(out, "HEAD-xxx"), "the head is kept: %q...", out[:min(len(out), 40)])
	require.True(t, strings.HasSuffix(out, "xxx-TAIL"), "the tail is kept: ...%q", out[max(0, len(out)-40):])

	// The marker must say exactly how many bytes are missing.
	m := elisionRe.FindStringSubmatch(out)
	require.NotNil(t, m, "an elision marker is present")
	elided, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	marker := providers.ElisionMarker(elided)
	require.Contains(t, out, marker, "the marker is providers.ElisionMarker")
	kept := int64(len(out) - len(marker))
	require.Equal(t, full-kept, elided, "the marker counts the elided bytes")
}

func (s *suite) testBinaryOutput(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{})
	obs := act(t, sb, runtime.Action{Kind: runtime.ActExec, Cmd: `printf '\377\376\000abc'`})
	require.False(t, obs.Error, "exec failed: %s", obs.Text())
	require.Equal(t, []byte{0xff, 0xfe, 0x00, 'a', 'b', 'c'}, obs.Output, "Output bytes are exact")
	require.Equal(t, int64(6), obs.OutputBytes)
	text := obs.Text()
	require.True(t, utf8.ValidString(text), "Text() is valid UTF-8")
	require.Contains(t, text, "abc")
	require.Contains(t, text, "\uFFFD", "invalid bytes become U+FFFD in Text()")

	// Bytes that are not UTF-8 survive a command writing a file too.
	run(t, sb, `printf '\200\201\377' > raw.bin`)
	require.Equal(t, "\x80\x81\xff", read(t, sb, "raw.bin"))
}

func (s *suite) testPathTraversal(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{Files: map[string][]byte{"inside.txt": []byte("in")}})
	probe := "forkline-escape-probe-" + fmt.Sprint(time.Now().UnixNano())
	run(t, sb, "ln -s /etc wsl && ln -s .. up && ln -s /etc/passwd pw")

	cases := []struct {
		name  string
		kind  runtime.ActionKind
		path  string
		check string // a path, as commands in the workspace see it, that must not exist afterwards
	}{
		{"readParent", runtime.ActReadFile, "../x", ""},
		{"readDeepParent", runtime.ActReadFile, "a/../../x", ""},
		{"readAbsolute", runtime.ActReadFile, "/etc/passwd", ""},
		{"readAbsoluteDotDot", runtime.ActReadFile, "/workspace/../etc/passwd", ""},
		{"readSymlinkDir", runtime.ActReadFile, "wsl/passwd", ""},
		{"readSymlinkFile", runtime.ActReadFile, "pw", ""},
		{"readSymlinkParent", runtime.ActReadFile, "up/" + probe, ""},
		{"writeParent", runtime.ActWriteFile, "../" + probe, "../" + probe},
		{"writeAbsolute", runtime.ActWriteFile, "/tmp/" + probe, "/tmp/" + probe},
		{"writeSymlinkDir", runtime.ActWriteFile, "wsl/" + probe, "/etc/" + probe},
		{"writeSymlinkDirNested", runtime.ActWriteFile, "wsl/" + probe + "/f", "/etc/" + probe},
		{"writeSymlinkParent", runtime.ActWriteFile, "up/" + probe, "../" + probe},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := act(t, sb, runtime.Action{Kind: c.kind, Path: c.path, Content: "escaped"})
			require.Truef(t, obs.Error, "%s %q must be refused, got %q", c.kind, c.path, obs.Text())
			require.Equalf(t, runtime.ErrPathRefused, obs.ErrorKind, "%s %q: %s", c.kind, c.path, obs.Text())
			require.Contains(t, obs.Text(), "escapes the workspace", "the refusal says why")
			if c.kind == runtime.ActReadFile {
				require.NotContains(t, obs.Text(), "root:", "nothing of /etc/passwd is shown")
			}
			if c.check != "" {
				got := run(t, sb, fmt.Sprintf("if [ -e '%s' ]; then echo present; else echo absent; fi", c.check))
				require.Equal(t, "absent\n", got, "%s %q must write nothing outside the workspace", c.kind, c.path)
			}
		})
	}
	// A symlink that stays inside the workspace is fine.
	run(t, sb, "ln -s inside.txt alias && mkdir -p d && ln -s ../inside.txt d/alias")
	require.Equal(t, "in", read(t, sb, "alias"))
	require.Equal(t, "in", read(t, sb, "d/alias"))
	require.Equal(t, "in", read(t, sb, "d/../inside.txt"), "a .. that stays inside is fine")
}

func (s *suite) testAbsolutePath(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{})
	write(t, sb, providers.WorkspaceRoot+"/f", "abs")
	require.Equal(t, "abs", read(t, sb, "f"), "/workspace/f is the workspace file f")
	write(t, sb, "g", "rel")
	require.Equal(t, "rel", read(t, sb, providers.WorkspaceRoot+"/g"))
	write(t, sb, providers.WorkspaceRoot+"/sub/dir/h", "nested")
	require.Equal(t, "nested", run(t, sb, "cat sub/dir/h"))
	for _, bad := range []string{"/workspacex/f", "/work"} {
		obs := act(t, sb, runtime.Action{Kind: runtime.ActReadFile, Path: bad})
		require.Equalf(t, runtime.ErrPathRefused, obs.ErrorKind, "read_file %q: %s", bad, obs.Text())
	}
}

func (s *suite) testUnsupported(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{})
	actions := []runtime.Action{{Kind: "frobnicate"}}
	// The sandbox's own claim decides, not the provider's: a provider that
	// can host a GUI gives one only to sandboxes that ask for it.
	if !sb.Info().GUI {
		actions = append(actions,
			runtime.Action{Kind: runtime.ActClick, X: 1, Y: 2},
			runtime.Action{Kind: runtime.ActScreenshot},
			runtime.Action{Kind: runtime.ActType, Text: "hi"},
			runtime.Action{Kind: runtime.ActNavigate, URL: "http://example.com"},
		)
	}
	for _, a := range actions {
		obs, err := sb.Act(t.Context(), a)
		require.NoError(t, err, "an unsupported action is an Observation, not an error: %s", a.Kind)
		require.True(t, obs.Error, "%s: Error", a.Kind)
		require.Equal(t, runtime.ErrUnsupported, obs.ErrorKind, "%s: %s", a.Kind, obs.Text())
	}
	require.Equal(t, "still fine\n", run(t, sb, "echo still fine"), "the sandbox survives unsupported actions")
}

// testNULBytes: a model can emit a NUL byte anywhere. In a command or a
// file path it is the action's failure (an observation), never the
// sandbox's, and nothing runs or is written; in file content it is data.
func (s *suite) testNULBytes(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{})
	for _, a := range []runtime.Action{
		{Kind: runtime.ActExec, Cmd: "touch ran\x00; echo hi"},
		{Kind: runtime.ActExec, Cmd: "\x00"},
		{Kind: runtime.ActReadFile, Path: "a\x00b"},
		{Kind: runtime.ActWriteFile, Path: "ran\x00.txt", Content: "x"},
		{Kind: runtime.ActWriteFile, Path: "dir\x00/f", Content: "x"},
	} {
		obs, err := sb.Act(t.Context(), a)
		require.NoError(t, err, "%s with a NUL byte must be an observation, not an error", a.Kind)
		require.True(t, obs.Error, "%s with a NUL byte: Error (got %q)", a.Kind, obs.Text())
		require.Equal(t, runtime.ErrActionFail, obs.ErrorKind, "%s with a NUL byte: %s", a.Kind, obs.Text())
		require.Contains(t, obs.Text(), "NUL", "%s: the observation says what was wrong", a.Kind)
	}
	require.Equal(t, "absent\n", run(t, sb, "if [ -e ran ] || [ -e ran.txt ] || [ -e dir ]; then echo present; else echo absent; fi"),
		"nothing ran and nothing was written")
	write(t, sb, "data.bin", "a\x00b")
	require.Equal(t, "a\x00b", read(t, sb, "data.bin"), "a NUL in file content is data")
	require.Equal(t, "3\n", run(t, sb, "wc -c < data.bin | tr -d ' '"))
}

// testLongCommands: a command longer than one execve argument may be
// (Linux: 128 KiB) is a model's action like any other — a long heredoc, a
// file pasted into an echo — and runs: never an infrastructure error
// ("argument list too long" made it env_error, a scaffold loss that
// replaced the replica), with the shell semantics of a short one.
func (s *suite) testLongCommands(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{})
	long := strings.Repeat("x", 200<<10)
	require.Equal(t, fmt.Sprintf("%d\n", len(long)+1), run(t, sb, "echo "+long+" | wc -c | tr -d ' '"), "a 200 KB echo runs")
	body := strings.Repeat("line of a long heredoc\n", 15000) // 345 KB
	require.Equal(t, fmt.Sprintf("%d\n", len(body)), run(t, sb, "cat > big.txt <<'EOF'\n"+body+"EOF\nwc -c < big.txt | tr -d ' '"))
	obs := act(t, sb, runtime.Action{Kind: runtime.ActExec, Cmd: ": " + long + "; echo \"$0 $#\"; exit 7"})
	require.Equal(t, 7, obs.ExitCode, "exit ends the command with its status: %s", obs.Text())
	require.Equal(t, run(t, sb, `echo "$0 $#"`), obs.Text(), "the same $0 and arguments as a short command")
	huge := act(t, sb, runtime.Action{Kind: runtime.ActExec, Cmd: ": '" + strings.Repeat("y", 60<<20) + "'; echo done"})
	require.Equal(t, "done\n", huge.Text(), "a 60 MiB command runs")
}

// testBadSpec: a spec no command could run under is refused by Create,
// naming what is wrong, and leaves nothing behind.
func (s *suite) testBadSpec(t *testing.T) {
	p := s.provider(t)
	cases := []struct {
		name string
		spec providers.Spec
		want string
	}{
		{"envNUL", providers.Spec{Env: []string{"OK=1", "BAD=a\x00b"}}, `Env[1] "BAD" holds a NUL byte`},
		{"envNotKV", providers.Spec{Env: []string{"JUSTANAME"}}, `Env[0] "JUSTANAME" is not KEY=VALUE`},
		{"capability", providers.Spec{Resources: providers.Resources{Capabilities: []string{"NET_RAWR"}}}, `"NET_RAWR" is not a Linux capability`},
		{"negativePids", providers.Spec{Resources: providers.Resources{Pids: -1}}, "Resources.Pids -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb, err := p.Create(t.Context(), c.spec)
			if sb != nil {
				closeAtEnd(t, sb)
			}
			require.Error(t, err, "Create must refuse the spec")
			require.Contains(t, err.Error(), c.want)
			require.NotContains(t, err.Error(), "a\x00b", "the refusal does not echo an env value")
		})
	}
	assertNoLeftovers(t, t.Context(), p, "after refused Creates")
}

// guiPage is a page whose screenshot is not blank.
const guiPage = `<html><head><title>Conformance</title></head>` +
	`<body style="margin:0;background:#fff"><div style="width:80px;height:60px;background:#c00"></div>gui</body></html>`

// guiPage2 is a second page, to leave the start page for.
const guiPage2 = `<html><head><title>Second</title></head><body>second page</body></html>`

// guiSpec asks for a small GUI on guiPage.
func guiSpec() providers.Spec {
	return providers.Spec{Files: map[string][]byte{"page.html": []byte(guiPage), "page2.html": []byte(guiPage2)},
		GUI: &providers.GUI{Width: 320, Height: 240, Start: "page.html", Screenshots: true, A11y: true}}
}

// requireScreenshot takes a screenshot in sb and checks it is a PNG of the
// requested viewport.
func requireScreenshot(t *testing.T, sb providers.Sandbox, what string) {
	t.Helper()
	obs := act(t, sb, runtime.Action{Kind: runtime.ActScreenshot})
	require.Falsef(t, obs.Error, "%s: screenshot failed: %s", what, obs.Text())
	require.NotNil(t, obs.Screenshot, "%s: a screenshot action carries a screenshot", what)
	img, err := png.Decode(bytes.NewReader(obs.Screenshot.PNG))
	require.NoError(t, err, "%s: the screenshot is a PNG", what)
	require.Equal(t, image.Rect(0, 0, 320, 240), img.Bounds(), "%s: the screenshot has the requested viewport", what)
}

// testGUI checks the GUI claim: a provider that can host a GUI
// (Capabilities().GUI) gives one to the sandboxes that ask (Spec.GUI), they
// say so (SandboxInfo.GUI), GUI actions reach it and other actions still
// reach the sandbox, forks keep it, and provider Close ends it; no other
// sandbox claims one. A provider that cannot host one refuses the request.
func (s *suite) testGUI(t *testing.T) {
	p := s.provider(t)
	plain := create(t, p, providers.Spec{})
	require.False(t, plain.Info().GUI, "a sandbox that asked for no GUI must not claim one")
	if !p.Capabilities().GUI {
		sb, err := p.Create(t.Context(), guiSpec())
		if sb != nil {
			closeAtEnd(t, sb)
		}
		require.ErrorIs(t, err, providers.ErrNotSupported,
			"Capabilities().GUI is false, so a Spec with GUI must be refused with ErrNotSupported, not given a sandbox without one")
		return
	}
	sb := create(t, p, guiSpec())
	require.True(t, sb.Info().GUI, "a sandbox that asked for a GUI says it has one")
	requireScreenshot(t, sb, "GUI sandbox")
	require.Equal(t, "still a sandbox\n", run(t, sb, "echo still a sandbox"), "other actions reach the sandbox")

	t.Run("Fork", func(t *testing.T) {
		cp := checkpoint(t, p, sb, "gui")
		f := fork(t, p, cp)
		require.True(t, f.Info().GUI, "a fork of a GUI sandbox has the GUI too")
		requireScreenshot(t, f, "fork of a GUI sandbox")
		require.Equal(t, "gui\n", run(t, f, "grep -o gui page.html | head -1"), "and the sandbox's files")
	})
	t.Run("MidEpisodeCheckpoint", func(t *testing.T) {
		// A branch of a GUI sandbox in the middle of an episode reopens the
		// page its parent showed, and the parent goes on showing it.
		ep := fork(t, p, checkpoint(t, p, sb, "gui-golden"))
		obs := act(t, ep, runtime.Action{Kind: runtime.ActNavigate, URL: "page2.html"})
		require.Falsef(t, obs.Error, "navigate: %s", obs.Text())
		run(t, ep, "echo typed > note.txt")
		mid := checkpoint(t, p, ep, "gui-mid")
		branch := fork(t, p, mid)
		require.True(t, branch.Info().GUI, "a branch of a GUI sandbox has the GUI too")
		obs = act(t, branch, runtime.Action{Kind: runtime.ActScreenshot})
		require.Containsf(t, obs.Text(), "url: page2.html", "the branch reopens its parent's page: %s", obs.Text())
		require.Equal(t, "typed\n", read(t, branch, "note.txt"), "and has its files")
		require.Equal(t, "page2.html\n", read(t, branch, ".browser/url"), "the page files the checkpoint holds name the parent's page")
		obs = act(t, ep, runtime.Action{Kind: runtime.ActScreenshot})
		require.Containsf(t, obs.Text(), "url: page2.html", "the parent goes on at its page: %s", obs.Text())
		obs = act(t, fork(t, p, checkpoint(t, p, sb, "gui-golden-2")), runtime.Action{Kind: runtime.ActScreenshot})
		require.Containsf(t, obs.Text(), "url: page.html", "a fork of the golden still opens the start page: %s", obs.Text())
	})
	t.Run("ProviderCloseEndsTheGUI", func(t *testing.T) {
		q := s.provider(t)
		g, err := q.Create(t.Context(), guiSpec())
		require.NoError(t, err)
		requireScreenshot(t, g, "GUI sandbox")
		ctx, cancel := cleanupCtx()
		defer cancel()
		require.NoError(t, q.Close(ctx))
		_, err = g.Act(ctx, runtime.Action{Kind: runtime.ActScreenshot})
		require.ErrorIs(t, err, providers.ErrClosed, "a GUI action on a sandbox of a closed provider: its GUI must be gone with it")
		require.NoError(t, g.Close(ctx))
	})
}

// golden makes a sandbox holding files from Spec.Files and from a command,
// and checkpoints it.
func golden(t *testing.T, p providers.Provider) (providers.Sandbox, providers.Checkpoint) {
	t.Helper()
	sb := create(t, p, providers.Spec{Files: map[string][]byte{
		"state.txt":       []byte("golden"),
		"dir/sub/doc.txt": []byte("doc"),
		"keep.txt":        []byte("keep"),
	}})
	run(t, sb, "mkdir -p made markers && echo by-command > made/cmd.txt && echo g > markers/golden && chmod 755 made/cmd.txt")
	cp := checkpoint(t, p, sb, "golden-"+t.Name())
	return sb, cp
}

// requireGolden checks that sb shows exactly the golden state.
func requireGolden(t *testing.T, sb providers.Sandbox, what string) {
	t.Helper()
	require.Equal(t, "golden", read(t, sb, "state.txt"), "%s: state.txt", what)
	require.Equal(t, "doc", read(t, sb, "dir/sub/doc.txt"), "%s: dir/sub/doc.txt", what)
	require.Equal(t, "keep", read(t, sb, "keep.txt"), "%s: keep.txt", what)
	require.Equal(t, "by-command\n", read(t, sb, "made/cmd.txt"), "%s: a file made by a command", what)
	require.Equal(t, "golden\n", run(t, sb, "ls markers"), "%s: markers/", what)
	requireMissing(t, sb, "fork-only.txt")
}

func (s *suite) testCheckpoint(t *testing.T) {
	p := s.provider(t)
	sb, cp := golden(t, p)
	require.NotEmpty(t, sb.Info().Origin)
	f := fork(t, p, cp)
	info := f.Info()
	require.NotEmpty(t, info.ID)
	require.NotEqual(t, sb.Info().ID, info.ID, "a fork is a new sandbox")
	require.Equal(t, p.Name(), info.Provider)
	require.NotEmpty(t, info.Origin, "SandboxInfo.Origin says how the fork was made")
	require.Equal(t, cp.ID, info.Checkpoint, "SandboxInfo.Checkpoint")
	requireGolden(t, f, "fork")
	require.Equal(t, "-rwxr-xr-x\n", run(t, f, "ls -l made/cmd.txt | cut -c1-10"), "modes survive a fork")
	// The checkpointed sandbox stays usable.
	require.Equal(t, "ok\n", run(t, sb, "echo ok"))
}

func (s *suite) testForkIsolation(t *testing.T) {
	p := s.provider(t)
	sb, cp := golden(t, p)
	a, b := fork(t, p, cp), fork(t, p, cp)

	write(t, a, "state.txt", "fork-a")
	write(t, a, "fork-only.txt", "a")
	write(t, a, "dir/sub/doc.txt", "changed")
	run(t, a, "echo a > made/cmd.txt && mkdir -p newdir && echo a > newdir/f && echo a > markers/a")
	require.Equal(t, "fork-a", read(t, a, "state.txt"), "a fork sees its own writes")
	require.Equal(t, "a\n", read(t, a, "newdir/f"))

	requireGolden(t, b, "sibling fork after writes in another")
	requireMissing(t, b, "newdir/f")
	requireGolden(t, sb, "original sandbox after writes in a fork")
	requireGolden(t, fork(t, p, cp), "fork made after writes in another fork")

	write(t, b, "state.txt", "fork-b")
	require.Equal(t, "fork-a", read(t, a, "state.txt"), "a write in b does not reach a")
}

func (s *suite) testGoldenImmutable(t *testing.T) {
	p := s.provider(t)
	sb, cp := golden(t, p)
	early := fork(t, p, cp)
	write(t, sb, "state.txt", "changed after checkpoint")
	write(t, sb, "fork-only.txt", "x")
	run(t, sb, "rm -r made dir && echo late > markers/late")
	require.Equal(t, "changed after checkpoint", read(t, sb, "state.txt"))
	requireGolden(t, fork(t, p, cp), "fork made after the original changed")
	requireGolden(t, early, "fork made before the original changed")
}

func (s *suite) testForkDeletes(t *testing.T) {
	p := s.provider(t)
	_, cp := golden(t, p)
	a, b := fork(t, p, cp), fork(t, p, cp)
	run(t, a, "rm state.txt && rm -r dir made && rm markers/golden")
	requireMissing(t, a, "state.txt")
	requireMissing(t, a, "dir/sub/doc.txt")
	requireMissing(t, a, "made/cmd.txt")
	require.Empty(t, run(t, a, "ls markers"))
	// A deleted file can come back with new content.
	write(t, a, "state.txt", "reborn")
	require.Equal(t, "reborn", read(t, a, "state.txt"))

	requireGolden(t, b, "sibling of a fork that deleted files")
	requireGolden(t, fork(t, p, cp), "fork made after deletes in another")
}

// episodeChanges makes, in a fork of golden, the changes an episode makes:
// a file rewritten, one added, one deleted, a directory deleted and made
// anew with other contents, a marker added.
func episodeChanges(t *testing.T, sb providers.Sandbox) {
	t.Helper()
	write(t, sb, "state.txt", "mid-episode")
	write(t, sb, "branch.txt", "made by the episode")
	run(t, sb, "rm keep.txt && rm -r dir && mkdir -p dir/other && echo new > dir/other/f && echo m > markers/mid && chmod 700 made")
}

// requireMidEpisode checks that sb shows exactly the state episodeChanges
// left on the golden.
func requireMidEpisode(t *testing.T, sb providers.Sandbox, what string) {
	t.Helper()
	require.Equal(t, "mid-episode", read(t, sb, "state.txt"), "%s: state.txt", what)
	require.Equal(t, "made by the episode", read(t, sb, "branch.txt"), "%s: branch.txt", what)
	requireMissing(t, sb, "keep.txt")
	requireMissing(t, sb, "dir/sub/doc.txt")
	require.Equal(t, "new\n", read(t, sb, "dir/other/f"), "%s: dir/other/f", what)
	require.Equal(t, "other\n", run(t, sb, "ls dir"), "%s: a directory made anew shows none of the old one", what)
	require.Equal(t, "golden\nmid\n", run(t, sb, "ls markers"), "%s: markers/", what)
	require.Equal(t, "by-command\n", read(t, sb, "made/cmd.txt"), "%s: a golden file the episode kept", what)
	require.Equal(t, "drwx------\n", run(t, sb, "ls -ld made | cut -c1-10"), "%s: a mode the episode changed", what)
}

// testMidEpisodeCheckpoint: a checkpoint of a fork in the middle of an
// episode (a branch point) behaves like a golden. Its forks see the fork's
// state at checkpoint time — writes, deletes, a directory made anew —
// whatever the fork or any other branch does afterwards; changes in a
// branch reach neither the fork nor its siblings; a branch can be
// checkpointed again (a tree); and the branch point outlives the release of
// the golden it was made over.
func (s *suite) testMidEpisodeCheckpoint(t *testing.T) {
	p := s.provider(t)
	_, golden := golden(t, p)
	ep := fork(t, p, golden)
	episodeChanges(t, ep)
	mid := checkpoint(t, p, ep, "mid-"+t.Name())
	require.GreaterOrEqual(t, mid.Bytes, int64(-1), "Checkpoint.Bytes is a size or -1")

	a, b := fork(t, p, mid), fork(t, p, mid)
	require.Equal(t, mid.ID, a.Info().Checkpoint, "SandboxInfo.Checkpoint of a branch")
	requireMidEpisode(t, a, "branch")
	requireMidEpisode(t, b, "sibling branch")

	// The episode goes on after its checkpoint: nothing reaches the branches.
	write(t, ep, "state.txt", "after the checkpoint")
	run(t, ep, "rm branch.txt && echo late > markers/late && mkdir -p dir/sub && echo back > dir/sub/doc.txt")
	require.Equal(t, "after the checkpoint", read(t, ep, "state.txt"), "the checkpointed fork stays usable and sees its own writes")
	requireMidEpisode(t, a, "branch after the parent went on")
	requireMidEpisode(t, fork(t, p, mid), "branch made after the parent went on")

	// A branch's changes reach neither its parent nor its siblings.
	write(t, a, "state.txt", "branch a")
	run(t, a, "rm -r dir made && echo a > markers/a")
	requireMidEpisode(t, b, "sibling of a branch that changed files")
	require.Equal(t, "after the checkpoint", read(t, ep, "state.txt"), "a branch's write does not reach its parent")
	requireMidEpisode(t, fork(t, p, mid), "branch made after a sibling changed files")
	requireGolden(t, fork(t, p, golden), "fork of the golden after branching")

	// A branch checkpointed again: a tree two levels deep.
	deeper := checkpoint(t, p, a, "deeper-"+t.Name())
	c := fork(t, p, deeper)
	require.Equal(t, "branch a", read(t, c, "state.txt"), "a branch of a branch")
	requireMissing(t, c, "dir/other/f")
	require.Equal(t, "a\ngolden\nmid\n", run(t, c, "ls markers"), "markers of the branch of a branch")
	write(t, a, "state.txt", "a went on")
	require.Equal(t, "branch a", read(t, c, "state.txt"), "a branch of a branch, after its parent went on")

	// The branch points do not need the golden any more once made.
	require.NoError(t, p.Release(t.Context(), golden), "Release of the golden under branch points")
	requireMidEpisode(t, fork(t, p, mid), "branch made after the golden was released")
	require.Equal(t, "branch a", read(t, fork(t, p, deeper), "state.txt"), "branch of a branch made after the golden was released")
}

// testMidEpisodeCheckpointBusy: a checkpoint of a fork while a process the
// episode started still runs in its workspace freezes the files as they
// are at that moment; what the process writes later reaches neither the
// branches nor, through them, anyone else, and the fork goes on. On a
// provider that forks memory, each branch has its own copy of the process,
// which goes on in the branch and sees the branch's files, not the
// parent's.
func (s *suite) testMidEpisodeCheckpointBusy(t *testing.T) {
	p := s.provider(t)
	_, golden := golden(t, p)
	ep := fork(t, p, golden)
	write(t, ep, "before.txt", "before")
	write(t, ep, "who", "parent")
	// The process waits (at most 30 s) for a file named go, then copies who
	// to late.txt, through a temporary file so that late.txt appears whole
	// (a reader polling for it once read it empty, on a loaded machine).
	run(t, ep, "(i=0; while [ ! -f go ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; cat who > late.tmp && mv late.tmp late.txt) >/dev/null 2>&1 &")
	mid := checkpoint(t, p, ep, "busy-"+t.Name())
	branch := fork(t, p, mid)
	require.Equal(t, "before", read(t, branch, "before.txt"), "the branch has the files written before the checkpoint")
	write(t, ep, "go", "")
	require.Equal(t, "parent", run(t, ep, "i=0; while [ ! -f late.txt ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; cat late.txt"))
	requireMissing(t, branch, "late.txt")
	requireMissing(t, fork(t, p, mid), "late.txt")
	require.Equal(t, "before", read(t, ep, "before.txt"), "the fork goes on")
	if !p.Capabilities().ForksMemory {
		return
	}
	write(t, branch, "who", "branch")
	write(t, branch, "go", "")
	require.Equal(t, "branch", run(t, branch, "i=0; while [ ! -f late.txt ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; cat late.txt"),
		"the branch's copy of the process went on, in the branch")
	require.Equal(t, "parent", read(t, ep, "late.txt"), "and wrote nothing into the parent")
}

// testForkMemory, on a provider whose checkpoints hold processes
// (Capabilities().ForksMemory): a process that keeps its state only in
// memory — a shell counting the requests it answered — runs in every fork
// of a checkpoint with the state it had then; each copy goes on on its
// own, the checkpointed sandbox too; a fork's checkpoint carries the
// fork's state (branching). Providers that fork files only skip it.
func (s *suite) testForkMemory(t *testing.T) {
	p := s.provider(t)
	if !p.Capabilities().ForksMemory {
		testenv.Inapplicable(t, fmt.Sprintf("provider %s forks files, not processes (Capabilities().ForksMemory is false)", p.Name()))
	}
	sb := create(t, p, providers.Spec{})
	run(t, sb, `(n=0; while :; do if [ -f req ]; then rm -f req; n=$((n+1)); echo $n > resp.tmp; mv resp.tmp resp; fi; sleep 0.05; done) >/dev/null 2>&1 &`)
	ask := func(sb providers.Sandbox, what string) string {
		t.Helper()
		write(t, sb, "req", "")
		got := strings.TrimSpace(run(t, sb, "i=0; while [ ! -f resp ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; cat resp 2>/dev/null && rm resp; true"))
		require.NotEmpty(t, got, "%s: the counting process did not answer within 30 s", what)
		return got
	}
	require.Equal(t, "1", ask(sb, "created"))
	require.Equal(t, "2", ask(sb, "created"))
	cp := checkpoint(t, p, sb, "memory")
	a, b := fork(t, p, cp), fork(t, p, cp)
	require.Equal(t, "3", ask(a, "fork a"), "the fork's process has the counter it had at the checkpoint")
	require.Equal(t, "4", ask(a, "fork a"))
	require.Equal(t, "3", ask(b, "fork b"), "a sibling's copy has its own memory")
	require.Equal(t, "3", ask(sb, "checkpointed"), "the checkpointed sandbox goes on")
	mid := checkpoint(t, p, a, "memory-mid")
	require.Equal(t, "5", ask(fork(t, p, mid), "branch of a"), "a branch has its parent's memory at the branch point")
	require.Equal(t, "5", ask(a, "fork a"), "and its parent goes on from there")
}

func (s *suite) testConcurrentForks(t *testing.T) {
	p := s.provider(t)
	_, cp := golden(t, p)
	const n = 4
	forks := make([]providers.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			forks[i], errs[i] = concurrentFork(t.Context(), p, cp, i)
		})
	}
	wg.Wait()
	for _, f := range forks {
		if f != nil {
			closeAtEnd(t, f)
		}
	}
	for i, err := range errs {
		require.NoError(t, err, "fork %d", i)
	}
	for i, f := range forks {
		require.Equal(t, fmt.Sprintf("fork-%d\ngolden\n", i), run(t, f, "ls markers"), "fork %d sees only its own marker", i)
	}
}

// concurrentFork forks cp and works in the fork from its own goroutine, so it
// reports errors instead of failing the test.
func concurrentFork(ctx context.Context, p providers.Provider, cp providers.Checkpoint, i int) (providers.Sandbox, error) {
	sb, err := p.Fork(ctx, cp)
	if err != nil {
		return nil, err
	}
	marker := fmt.Sprintf("markers/fork-%d", i)
	for round := range 5 {
		content := fmt.Sprintf("%d.%d", i, round)
		obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActWriteFile, Path: marker, Content: content})
		if err != nil || obs.Error {
			return sb, fmt.Errorf("write_file: %v %s", err, obs.Text())
		}
		obs, err = sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "cat " + marker + "; ls markers"})
		if err != nil || obs.Error {
			return sb, fmt.Errorf("exec: %v %s", err, obs.Text())
		}
		if want := fmt.Sprintf("%sfork-%d\ngolden\n", content, i); string(obs.Output) != want {
			return sb, fmt.Errorf("round %d: got %q, want %q", round, obs.Output, want)
		}
	}
	return sb, nil
}

func (s *suite) testClose(t *testing.T) {
	p := s.provider(t)
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	run(t, sb, "sleep 60 >/dev/null 2>&1 &")
	require.NoError(t, sb.Close(t.Context()), "Close")
	require.NoError(t, sb.Close(t.Context()), "a second Close returns nil")
	for _, a := range []runtime.Action{
		{Kind: runtime.ActExec, Cmd: "true"},
		{Kind: runtime.ActReadFile, Path: "x"},
		{Kind: runtime.ActWriteFile, Path: "x", Content: "x"},
	} {
		_, err := sb.Act(t.Context(), a)
		require.ErrorIs(t, err, providers.ErrClosed, "%s after Close", a.Kind)
	}
}

func (s *suite) testRelease(t *testing.T) {
	p := s.provider(t)
	sb := create(t, p, providers.Spec{Files: map[string][]byte{"f": []byte("x")}})
	cp := checkpoint(t, p, sb, "release")
	f := fork(t, p, cp)
	require.NoError(t, f.Close(t.Context()))
	require.NoError(t, p.Release(t.Context(), cp), "Release")
	require.NoError(t, p.Release(t.Context(), cp), "a second Release returns nil")
}

func (s *suite) testNoLeaks(t *testing.T) {
	p := s.provider(t)
	lc, ok := providers.As[LeakChecker](p)
	if !ok {
		testenv.Inapplicable(t, fmt.Sprintf("provider %s does not implement providertest.LeakChecker: leak checks skipped", p.Name()))
	}
	ctx := t.Context()
	sb, err := p.Create(ctx, providers.Spec{Files: map[string][]byte{"f": []byte("x")}})
	require.NoError(t, err)
	run(t, sb, "sleep 60 >/dev/null 2>&1 &")
	var sandboxes []providers.Sandbox
	var cps []providers.Checkpoint
	if p.Capabilities().Checkpoint && p.Capabilities().Fork {
		cp, err := p.Checkpoint(ctx, sb, "leaks")
		require.NoError(t, err)
		cps = append(cps, cp)
		for range 2 {
			f, err := p.Fork(ctx, cp)
			require.NoError(t, err)
			run(t, f, "echo w > written && sleep 60 >/dev/null 2>&1 &")
			sandboxes = append(sandboxes, f)
		}
	}
	sandboxes = append(sandboxes, sb)
	for _, s := range sandboxes {
		require.NoError(t, s.Close(ctx))
	}
	for _, cp := range cps {
		require.NoError(t, p.Release(ctx, cp))
	}
	left, err := lc.Leftovers(ctx)
	require.NoError(t, err)
	require.Empty(t, left, "everything was closed and released, before provider Close")
}

func (s *suite) testProviderClose(t *testing.T) {
	p := s.provider(t)
	ctx := t.Context()
	sb, err := p.Create(ctx, providers.Spec{Files: map[string][]byte{"f": []byte("x")}})
	require.NoError(t, err)
	run(t, sb, "sleep 60 >/dev/null 2>&1 &")
	var forks []providers.Sandbox
	if p.Capabilities().Checkpoint && p.Capabilities().Fork {
		cp, err := p.Checkpoint(ctx, sb, "provider-close")
		require.NoError(t, err)
		f, err := p.Fork(ctx, cp)
		require.NoError(t, err)
		forks = append(forks, f)
	}
	// Nothing is closed by hand: provider Close must release it all.
	require.NoError(t, p.Close(ctx))
	assertNoLeftovers(t, ctx, p, "after provider Close with sandboxes and checkpoints still open")
	for _, s := range append(forks, sb) {
		_, err := s.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "true"})
		require.ErrorIs(t, err, providers.ErrClosed, "Act on a sandbox of a closed provider")
		require.NoError(t, s.Close(ctx), "Close of a sandbox the provider already closed")
	}
	_, err = p.Create(ctx, providers.Spec{})
	require.ErrorIs(t, err, providers.ErrClosed, "Create on a closed provider")
}
