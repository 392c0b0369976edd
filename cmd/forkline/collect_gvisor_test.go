package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers/gvisor"
)

// gvisorRootfs skips (or, under FORKLINE_REQUIRE=gvisor, fails) unless runsc
// runs here as root, and returns a busybox root filesystem directory for
// -provider-opt rootfs=DIR.
func gvisorRootfs(t *testing.T) string {
	t.Helper()
	testenv.NeedGvisor(t)
	dir := filepath.Join(t.TempDir(), "rootfs")
	if err := gvisor.BusyboxRootfs(dir, "/bin/busybox"); err != nil {
		testenv.Missing(t, "gvisor", err.Error())
	}
	return dir
}

// counterTask's start commands take about 2 s, then start a server that
// keeps its count and a token only in memory (it answers a request file
// with both, and its pid), and ask it once. The episode asks twice, and
// writes a file of a name of its own. A second token, written by start to
// a file, tells one run of start from another.
const counterTask = `id: counter
instruction: ask the counter server twice
files:
  server.sh: |
    token=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
    n=0
    while :; do
      if [ -f req ]; then rm -f req; n=$((n+1)); echo "n=$n token=$token pid=$$" > resp.tmp; mv resp.tmp resp; fi
      sleep 0.05
    done
  ask.sh: |
    : > req; i=0
    while [ ! -f resp ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
    cat resp; rm -f resp
start:
  - sleep 2
  - od -An -N8 -tx8 /dev/urandom | tr -d ' ' > started
  - sh server.sh >/dev/null 2>&1 &
  - sh ask.sh
solution:
  - {kind: exec, cmd: "sh ask.sh; echo started=$(cat started)"}
  - {kind: exec, cmd: "sh ask.sh; u=$(od -An -N4 -tx4 /dev/urandom | tr -d ' '); echo mine > mine.$u; echo mine=$(ls mine.* | wc -l)"}
  - {kind: done}
limits: {max_steps: 5, action_timeout: 60s}
`

// counterSay is what one step of the counter task printed.
type counterSay struct{ n, token, pid, started, mine string }

var counterRe = regexp.MustCompile(`n=(\d+) token=(\w+) pid=(\d+)\n(?:started=(\w+)|mine=\s*(\d+))`)

// counterSteps reads, per episode, what its steps printed.
func counterSteps(t *testing.T, out string) map[string][]counterSay {
	t.Helper()
	ds, err := shard.Open(out)
	require.NoError(t, err)
	got := map[string][]counterSay{}
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		if s.ActionKind != "exec" {
			continue
		}
		m := counterRe.FindStringSubmatch(s.Output)
		require.NotNil(t, m, "step %d of %s printed %q", s.StepIndex, s.EpisodeID, s.Output)
		for len(got[s.EpisodeID]) <= int(s.StepIndex) {
			got[s.EpisodeID] = append(got[s.EpisodeID], counterSay{})
		}
		got[s.EpisodeID][s.StepIndex] = counterSay{n: m[1], token: m[2], pid: m[3], started: m[4], mine: m[5]}
	}
	return got
}

// The demonstration, through the binary: on gvisor the counter
// task's start runs once, in the golden; every fork answers from the
// server's memory as the golden left it (the same token and pid, count 1
// then its own 2 and 3: a fork's requests are invisible to its siblings),
// its start ran before the fork (the same started token everywhere), and
// a file one fork writes is not in another. On local, the same task
// restarts the server in every fork: a new token and started token each
// time, and a reset that waits for start's 2 s.
func TestGvisorForksARunningServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	rootfs := gvisorRootfs(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "counter.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(counterTask), 0o644))

	const repeats = 3
	runOn := func(provider string, extra ...string) (string, map[string][]counterSay) {
		out := filepath.Join(dir, provider)
		args := append([]string{"-provider", provider, "-tasks", spec, "-out", out, "-repeats", fmt.Sprint(repeats), "-replicas", "2",
			"-workdir", t.TempDir(), "-quiet"}, extra...)
		cmd := collectProcess(args...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		require.Equal(t, cli.ExitOK, exitCode(cmd.Run()), "collect on %s", provider)
		return out, counterSteps(t, out)
	}

	// One replica and a standby of one: the episodes after the first get a
	// restore made ahead, handed off.
	out, eps := runOn("gvisor", "-provider-opt", "rootfs="+rootfs, "-replicas", "1", "-standby", "1")
	require.Len(t, eps, repeats)
	tokens, pids, started := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for id, steps := range eps {
		require.Len(t, steps, 2, id)
		require.Equal(t, "2", steps[0].n, "%s: the server's count from the golden (1), plus this fork's first request", id)
		require.Equal(t, "3", steps[1].n, "%s: its second; no sibling's request reached this server", id)
		require.Equal(t, steps[0].token, steps[1].token)
		require.Equal(t, "1", steps[1].mine, "%s sees only its own file", id)
		tokens[steps[0].token], pids[steps[0].pid], started[steps[0].started] = true, true, true
	}
	require.Len(t, tokens, 1, "every fork answers from the one server the golden started: its memory (the token) came with the fork")
	require.Len(t, pids, 1, "the same process, restored")
	require.Len(t, started, 1, "start ran once, before the golden's checkpoint, not in any fork")
	ds, err := shard.Open(out)
	require.NoError(t, err)
	handOffs := 0
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Equal(t, "done", e.ExitReason, e.Detail)
		require.Equal(t, gvisor.ForkMethod, e.ResetOrigin)
		require.Contains(t, []string{"fork", "fork+standby"}, e.ResetStrategy)
		if e.ResetStrategy == "fork+standby" {
			handOffs++
		}
		t.Logf("gvisor episode %s: %s, reset %.0f ms (golden %.0f ms, %d bytes)", e.EpisodeID, e.ResetStrategy, e.ResetMS, e.GoldenBuildMS, e.GoldenBytes)
	}
	require.Positive(t, handOffs, "the standby restored replicas ahead and handed them off")

	// No standby: the point is what the reset an episode waits for holds
	// (a hand-off would hide start's 2 s in the background).
	out, eps = runOn("local", "-standby", "0")
	require.Len(t, eps, repeats)
	tokens, started = map[string]bool{}, map[string]bool{}
	for id, steps := range eps {
		require.Equal(t, "2", steps[0].n, "%s: start asked once, in this fork", id)
		tokens[steps[0].token], started[steps[0].started] = true, true
	}
	require.Len(t, tokens, repeats, "on local every fork started its own server")
	require.Len(t, started, repeats, "and ran start itself")
	ds, err = shard.Open(out)
	require.NoError(t, err)
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.GreaterOrEqual(t, e.ResetMS, 2000.0, "on local start's 2 s is in the reset")
	}
}

// Branching on gvisor, through the binary: the branches of a step-1
// checkpoint answer from the parent's server as it was after step 1 (its
// count, its token); each branch's own request is its own.
func TestGvisorBranchesCarryTheParentsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	rootfs := gvisorRootfs(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "counter.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(counterTask), 0o644))
	out := filepath.Join(dir, "run")
	cmd := collectProcess("-provider", "gvisor", "-provider-opt", "rootfs="+rootfs, "-tasks", spec, "-out", out,
		"-repeats", "1", "-branch", "at=1,width=3", "-workdir", t.TempDir(), "-quiet")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	require.Equal(t, cli.ExitOK, exitCode(cmd.Run()))
	eps := branchTree(t, out, 1, 1, 3)
	require.Len(t, eps, 4)
	steps := counterSteps(t, out)
	var root string
	var branches []string
	for id, e := range eps {
		if e.ParentEpisodeID == nil {
			root = id
		} else {
			branches = append(branches, id)
		}
	}
	sort.Strings(branches)
	require.Len(t, steps[root], 1, "the root ran its step 0, then branched")
	parent := steps[root][0]
	require.Equal(t, "2", parent.n)
	for _, b := range branches {
		s := steps[b]
		require.Len(t, s, 2, b)
		require.Equal(t, counterSay{}, s[0], "%s: step 0 is the parent's, stored once", b)
		require.Equal(t, "3", s[1].n, "%s: the parent's server after step 0 (2), plus this branch's request", b)
		require.Equal(t, parent.token, s[1].token, "%s: the parent's server, with its memory", b)
		require.Equal(t, parent.pid, s[1].pid, b)
		require.Equal(t, "1", strings.TrimSpace(s[1].mine), b)
		require.Equal(t, "branch", eps[b].ResetStrategy)
	}
}

// With -provider-opt goldens=DIR, a second run forks the golden the first
// one stored: its start did not run again (the same started token, the
// same server). A store holding a corrupt image, or one another runsc
// version made, and the other bad inputs of the gvisor provider — no
// runsc, a rootfs that is not a directory, an image that does not exist —
// exit 2 before any episode and write nothing.
func TestGvisorGoldenStoreAndBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	rootfs := gvisorRootfs(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "counter.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(counterTask), 0o644))
	store := filepath.Join(dir, "goldens")
	collectTo := func(out string, opts ...string) (int, string) {
		args := []string{"-provider", "gvisor", "-provider-opt", "rootfs=" + rootfs, "-tasks", spec, "-out", out, "-repeats", "1", "-workdir", t.TempDir(), "-quiet"}
		for _, o := range opts {
			args = append(args, "-provider-opt", o)
		}
		return runCaptured(t, args...)
	}
	code, printed := collectTo(filepath.Join(dir, "first"), "goldens="+store)
	require.Equal(t, cli.ExitOK, code, printed)
	code, printed = collectTo(filepath.Join(dir, "second"), "goldens="+store)
	require.Equal(t, cli.ExitOK, code, printed)
	var first, second counterSay
	for _, s := range counterSteps(t, filepath.Join(dir, "first")) {
		first = s[0]
	}
	for _, s := range counterSteps(t, filepath.Join(dir, "second")) {
		second = s[0]
	}
	require.NotEmpty(t, first.started)
	require.Equal(t, first, second, "the second run forked the stored golden: the same server, the same start, the same count")

	ents, err := os.ReadDir(store)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	img := filepath.Join(store, ents[0].Name(), "checkpoint.img")
	good, err := os.ReadFile(img)
	require.NoError(t, err)
	bad := append([]byte(nil), good...)
	bad[len(bad)/3] ^= 0x5a
	require.NoError(t, os.Remove(img))
	require.NoError(t, os.WriteFile(img, bad, 0o600))
	meta := filepath.Join(store, ents[0].Name(), "golden.json")
	metaBytes, err := os.ReadFile(meta)
	require.NoError(t, err)

	file := filepath.Join(dir, "a-file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	cases := []struct {
		name string
		opts []string
		prep func()
		want string
	}{
		{"corruptGolden", []string{"goldens=" + store}, nil, "is corrupt"},
		{"otherRunsc", []string{"goldens=" + store}, func() {
			require.NoError(t, os.WriteFile(img, good, 0o600))
			require.NoError(t, os.WriteFile(meta, []byte(strings.Replace(string(metaBytes), `"runsc_version": "runsc version`, `"runsc_version": "runsc version 1999 was`, 1)), 0o600))
		}, "runsc restores only its own images"},
		{"noRunsc", []string{"runsc=/nonexistent/runsc"}, nil, "apt-get install runsc"},
		{"rootfsNotADirectory", []string{"rootfs=" + file}, nil, "is not a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.prep != nil {
				c.prep()
			}
			before := treeHash(t, store)
			out := filepath.Join(t.TempDir(), "run")
			args := []string{"-provider", "gvisor", "-tasks", spec, "-out", out, "-workdir", t.TempDir(), "-quiet"}
			if !strings.HasPrefix(c.opts[0], "rootfs=") {
				args = append(args, "-provider-opt", "rootfs="+rootfs)
			}
			for _, o := range c.opts {
				args = append(args, "-provider-opt", o)
			}
			code, printed := runCaptured(t, args...)
			require.Equal(t, cli.ExitBadInput, code, printed)
			require.Contains(t, printed, c.want)
			require.NoDirExists(t, out, "nothing written")
			require.Equal(t, before, treeHash(t, store), "the store is untouched")
		})
	}
	t.Run("browserTask", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "run")
		code, printed := runCaptured(t, "-provider", "gvisor", "-provider-opt", "rootfs="+rootfs, "-tasks", "../../examples/tasks/web",
			"-out", out, "-workdir", t.TempDir(), "-quiet")
		require.Equal(t, cli.ExitBadInput, code, printed)
		require.Contains(t, printed, "no way to run chromium for this sandbox")
		require.NoDirExists(t, out, "nothing written")
	})
	t.Run("missingImage", func(t *testing.T) {
		imgSpec := filepath.Join(t.TempDir(), "img.yaml")
		require.NoError(t, os.WriteFile(imgSpec, []byte("id: img\nimage: forkline/no-such-image-4242\ninstruction: x\nsolution:\n  - {kind: done}\n"), 0o644))
		out := filepath.Join(t.TempDir(), "run")
		code, printed := runCaptured(t, "-provider", "gvisor", "-tasks", imgSpec, "-out", out, "-workdir", t.TempDir(), "-quiet")
		require.Equal(t, cli.ExitBadInput, code, printed)
		require.Contains(t, printed, "forkline/no-such-image-4242")
		require.NoDirExists(t, out, "nothing written")
	})
}

// A persistent shell on gvisor, through the binary (collect -shell
// persistent): setup runs in the golden's shell, and every episode — a
// restore of the golden — goes on with that shell: its directory,
// variable, function and background job; what one episode exports is not
// another's. The exec tool an export writes says the shell goes on in
// forks; on local the same run's says what it always said.
func TestGvisorPersistentShellGoesOnInEveryFork(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	rootfs := gvisorRootfs(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "shell.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(`id: shell-goes-on
instruction: look at the shell
setup:
  - cd /tmp && export X=1 && f(){ echo hi; }
  - sleep 1000 &
solution:
  - {kind: exec, cmd: "pwd; echo $X; f; jobs"}
  - {kind: exec, cmd: "echo [${MINE:-unset}]; export MINE=$$"}
  - {kind: done}
`), 0o644))
	run := func(provider string, extra ...string) string {
		out := filepath.Join(dir, provider)
		args := append([]string{"-provider", provider, "-tasks", spec, "-out", out, "-repeats", "3", "-replicas", "2",
			"-shell", "persistent", "-workdir", t.TempDir(), "-quiet"}, extra...)
		cmd := collectProcess(args...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		require.Equal(t, cli.ExitOK, exitCode(cmd.Run()), "collect on %s", provider)
		return out
	}
	out := run("gvisor", "-provider-opt", "rootfs="+rootfs)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	steps := map[int32][]string{}
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		if s.ActionKind == "exec" {
			steps[s.StepIndex] = append(steps[s.StepIndex], s.Output)
		}
	}
	require.Len(t, steps[0], 3, "three episodes")
	for _, o := range steps[0] {
		require.Regexp(t, `^/tmp\n1\nhi\n\[1\]\+? +Running`, o, "setup's directory, variable, function and job go on in the fork")
	}
	require.Equal(t, []string{"[unset]\n", "[unset]\n", "[unset]\n"}, steps[1], "no episode sees another's export")

	tools := func(out string) string {
		exp := filepath.Join(dir, "chat-"+filepath.Base(out))
		code, _, stderr := runBin(t, time.Minute, "export", "-in", out, "-to", "chat-jsonl", "-out", exp)
		require.Equal(t, 0, code, stderr)
		var all strings.Builder
		require.NoError(t, filepath.WalkDir(exp, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, rerr := os.ReadFile(p)
				all.Write(b)
				return rerr
			}
			return err
		}))
		return all.String()
	}
	got := tools(out)
	require.Contains(t, got, "this episode's persistent shell", "the exec tool says the shell persists")
	require.Contains(t, got, "forked with its processes", "and that it goes on from the golden")
	local := tools(run("local"))
	require.Contains(t, local, "this episode's persistent shell")
	require.NotContains(t, local, "forked with its processes", "local's description is what it was")
}

// A branch of a persistent-shell episode on gvisor goes on with the
// parent's shell (its checkpoint holds the shell process): the variable the
// parent exported before the branch point is there in every branch, as the
// parent's file is; local starts a new shell instead
// (TestPersistentShellBranchCarriesFilesNotShellState).
func TestGvisorPersistentShellBranchGoesOn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	rootfs := gvisorRootfs(t)
	dir := t.TempDir()
	taskFile := filepath.Join(dir, "t.yaml")
	require.NoError(t, os.WriteFile(taskFile, []byte(`id: shell-branch
instruction: keep state
shell: persistent
solution:
  - {kind: exec, cmd: "export X=1; cd /tmp; echo carried > f"}
  - {kind: exec, cmd: "echo ${X:-unset}; pwd; cat f"}
  - {kind: done}
`), 0o644))
	out := filepath.Join(dir, "out")
	code, _, stderr := runBin(t, 5*time.Minute, "collect", "-provider", "gvisor", "-provider-opt", "rootfs="+rootfs, "-tasks", taskFile, "-out", out,
		"-branch", "at=1,width=2", "-workdir", t.TempDir(), "-quiet")
	require.Equal(t, 0, code, stderr)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	branches := map[string]bool{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		if e.ParentEpisodeID != nil && *e.ParentEpisodeID != "" {
			branches[e.EpisodeID] = true
		}
	}
	require.Len(t, branches, 2)
	seen := 0
	for s, err := range ds.Steps() {
		require.NoError(t, err)
		if branches[s.EpisodeID] && s.StepIndex == 1 {
			require.Equal(t, "1\n/tmp\ncarried\n", s.Output, "the parent's shell goes on in the branch")
			seen++
		}
	}
	require.Equal(t, 2, seen)
}
