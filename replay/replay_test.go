package replay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/observe"

	_ "github.com/forkline/forkline/providers/all"
)

func collectRun(t *testing.T, tasks string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run")
	_, err := collect.Run(context.Background(), collect.Config{Tasks: tasks, Out: out, Replicas: 4, Repeats: 2, WorkDir: t.TempDir()})
	require.NoError(t, err)
	return out
}

func TestReplayOnSameProviderIsIdentical(t *testing.T) {
	run := collectRun(t, "../examples/tasks")
	for _, mode := range []Mode{Exact, Normalized, Hash} {
		var started []observe.RunStarted
		rep, err := Run(context.Background(), Config{In: run, Mode: mode, WorkDir: t.TempDir(),
			Observer: observe.Func(func(e observe.Event) {
				if s, ok := e.(observe.RunStarted); ok {
					started = append(started, s)
				}
			})})
		require.NoError(t, err)
		require.Equal(t, 6, rep.Identical, "mode %s: %+v", mode, rep.Episodes)
		// The progress line's total and the start record's count: the
		// episodes to replay (it said 0, and progress showed "6/0").
		require.Len(t, started, 1)
		require.Equal(t, 6, started[0].Todo)
		require.Equal(t, 6, started[0].Planned)
		require.Zero(t, rep.Diverged+rep.Errored)
		for _, e := range rep.Episodes {
			require.Equal(t, e.Steps, e.Matched)
			require.False(t, e.RewardChanged)
		}
	}
}

func TestReplayAfterChangedSetupDivergesAtFirstAffectedStep(t *testing.T) {
	run := collectRun(t, "../examples/tasks/fix-sum.yaml")
	spec, err := os.ReadFile("../examples/tasks/fix-sum.yaml")
	require.NoError(t, err)
	changed := changeFixSum(string(spec))
	require.NotEqual(t, string(spec), changed)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fix-sum.yaml"), []byte(changed), 0o644))

	rep, err := Run(context.Background(), Config{In: run, TaskFiles: dir, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Diverged)
	for _, e := range rep.Episodes {
		require.Equal(t, Diverged, e.Status)
		require.NotNil(t, e.First)
		require.Equal(t, 0, e.First.Step, "step 0 runs sum.sh 3, the first affected step")
		require.Equal(t, "output", e.First.Field)
		require.Contains(t, e.First.Diff, "- 3\n+ 4")
		require.True(t, e.RewardChanged, "the fixed script no longer passes the changed test")
		require.Equal(t, 1.0, *e.RewardRecorded)
		require.Equal(t, 0.0, *e.RewardReplayed)
	}
}

// changeFixSum changes the fix-sum task twice: its buggy sum.sh starts
// counting at 1 (step 0, sh sum.sh 3, prints 4 instead of 3), and its hidden
// test expects 7 for 3 (the scripted fix no longer passes).
func changeFixSum(spec string) string {
	changed := strings.Replace(spec, "total=0", "total=1", 1)
	return strings.Replace(changed, `"3 6"`, `"3 7"`, 1)
}

func TestNormalizeMasks(t *testing.T) {
	a := normalize("\x1b[31mbuilt at 2026-11-29T23:01:02Z in /tmp/forkline-abc/sb-1/ws   \nid deadbeefcafe1234\n\n", DefaultMasks)
	b := normalize("built at 2026-11-30 01:02:03 in /workspace\nid 0123456789abcdef\n", DefaultMasks)
	require.Equal(t, a, b)
	require.NotEqual(t, normalize("exit 1", DefaultMasks), normalize("exit 2", DefaultMasks))

	// Dates and times as commands print them: a model's `ls -la` shows
	// file times, which a replay cannot reproduce (the files are written
	// again); `date` and `stat` print theirs. The masks take them all,
	// and only them.
	for _, pair := range [][2]string{
		{"-rw-r--r-- 1 root root 2 Dec  5 12:51 a.txt\ndrwxr-xr-x 2 root root 4096 Dec  5 12:51 .\n",
			"-rw-r--r-- 1 root root 2 Dec  6 09:03 a.txt\ndrwxr-xr-x 2 root root 4096 Dec  6 09:03 .\n"},
		{"-rw-r--r-- 1 root root 2 Nov 30  2025 old.txt\n", "-rw-r--r-- 1 root root 2 Jan  2  2026 old.txt\n"},
		{"Fri Dec  5 12:51:03 UTC 2026\n", "Sat Dec  6 09:03:59 UTC 2026\n"},
		{"Modify: 2026-12-05 12:51:03.123456789 +0000\n", "Modify: 2026-12-06 09:03:59.000000001 +0000\n"},
		{"built on 2026-12-05\n", "built on 2026-12-06\n"},
	} {
		require.Equal(t, normalize(pair[0], DefaultMasks), normalize(pair[1], DefaultMasks), "%q", pair[0])
	}
	for _, pair := range [][2]string{
		{"-rw-r--r-- 1 root root 2 Dec  5 12:51 a.txt\n", "-rw-r--r-- 1 root root 3 Dec  5 12:51 a.txt\n"},
		{"-rw-r--r-- 1 root root 2 Dec  5 12:51 a.txt\n", "-rwxr-xr-x 1 root root 2 Dec  5 12:51 a.txt\n"},
		{"total 3\n", "total 4\n"},
	} {
		require.NotEqual(t, normalize(pair[0], DefaultMasks), normalize(pair[1], DefaultMasks), "sizes and modes still count: %q", pair[0])
	}
}

func TestLineDiffNamesTheDifference(t *testing.T) {
	d := lineDiff("a\nb\nc\nd\ne\nf\ng", "a\nb\nc\nD\ne\nf\ng")
	require.Equal(t, "  b\n  c\n- d\n+ D\n  e\n  f", d)
}

func TestReplayBadInput(t *testing.T) {
	run := collectRun(t, "../examples/tasks/fix-sum.yaml")
	_, err := Run(context.Background(), Config{In: run, Mode: "fuzzy"})
	require.ErrorContains(t, err, "known: exact, hash, normalized")
	_, err = Run(context.Background(), Config{In: run, Tasks: []string{"nope"}})
	require.ErrorContains(t, err, `task "nope" is not in`)
	_, err = Run(context.Background(), Config{In: run, EpisodeIDs: []string{"zzzz"}, WorkDir: t.TempDir()})
	require.ErrorIs(t, err, ErrNoEpisodes)
	_, err = Run(context.Background(), Config{In: run, Provider: "nope"})
	require.ErrorContains(t, err, "known: ")
}

// Like the collector, replay sweeps what crashed runs left in its work
// directory right after opening the provider (providers.Sweeper, found with
// providers.As); opening the provider alone removes nothing.
func TestReplaySweepsWhatCrashedRunsLeft(t *testing.T) {
	run := collectRun(t, "../examples/tasks/fix-sum.yaml")
	work := t.TempDir()
	dead := filepath.Join(work, "forkline-local-crashed")
	require.NoError(t, os.MkdirAll(filepath.Join(dead, "sb-1", "ws"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dead, "owner"), []byte("999999999 1 \"\"\n"), 0o644))
	stranger := filepath.Join(work, "not-forkline")
	require.NoError(t, os.Mkdir(stranger, 0o755))

	rep, err := Run(context.Background(), Config{In: run, WorkDir: work})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Identical)
	require.NoDirExists(t, dead, "the crashed run's directory is swept")
	require.DirExists(t, stranger, "what is not forkline's stays")
}
