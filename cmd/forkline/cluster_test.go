package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/slurmtest"
)

// readmeBlock returns the fenced code block of the README's "## Many
// machines" section whose info string is lang and that contains marker.
func readmeBlock(t *testing.T, lang, marker string) string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	text := string(data)
	i := strings.Index(text, "\n## Many machines\n")
	require.GreaterOrEqual(t, i, 0, "the README has a Many machines section")
	section := text[i+1:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	re := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```")
	for _, m := range re.FindAllStringSubmatch(section, -1) {
		if strings.Contains(m[1], marker) {
			return m[1]
		}
	}
	t.Fatalf("no ```%s block with %q in the README's Many machines section", lang, marker)
	return ""
}

// flagsOf returns the flags (-name) a forkline SUBCOMMAND line of a shell
// script or manifest uses, following line continuations and YAML's folded
// lines.
func flagsOf(t *testing.T, text, subcommand string) []string {
	t.Helper()
	joined := strings.Join(strings.Fields(strings.ReplaceAll(text, "\\\n", " ")), " ")
	joined = regexp.MustCompile(`\[ [^\]]*\]`).ReplaceAllString(joined, "") // the shell's tests: [ -f ... ]
	i := strings.Index(joined, "forkline "+subcommand+" ")
	require.GreaterOrEqual(t, i, 0, "a forkline %s command in:\n%s", subcommand, text)
	var flags []string
	for _, w := range strings.Fields(joined[i:]) {
		w = strings.Trim(w, `"'`)
		if len(w) > 1 && w[0] == '-' && w[1] != '-' && !strings.ContainsAny(w, "[]$") {
			flags = append(flags, strings.TrimPrefix(w, "-"))
		}
		if w == "#" {
			break
		}
	}
	require.NotEmpty(t, flags)
	return flags
}

// The README's Kubernetes manifest and Slurm script use only flags that
// exist, with what they take.
func TestManyMachinesRecipesUseRealFlags(t *testing.T) {
	known := map[string]map[string]bool{}
	for _, r := range app().References() {
		known[r.Name] = map[string]bool{}
		for _, f := range r.Flags {
			known[r.Name][f.Name] = true
		}
	}
	manifest := readmeBlock(t, "yaml", "completionMode: Indexed")
	script := readmeBlock(t, "sh", "#SBATCH")
	submit := readmeBlock(t, "sh", "forkline merge")
	for _, c := range []struct{ name, text, sub string }{
		{"kubernetes", manifest, "collect"},
		{"slurm", script, "collect"},
		{"merge", submit, "merge"},
	} {
		for _, f := range flagsOf(t, c.text, c.sub) {
			assert.True(t, known[c.sub][f], "%s: forkline %s has no flag -%s", c.name, c.sub, f)
		}
	}
	// The Indexed Job's part count is its completions; the array's, the
	// array's own size.
	assert.Contains(t, manifest, "-shard-count 8")
	assert.Contains(t, manifest, "completions: 8")
	assert.Contains(t, manifest, "$JOB_COMPLETION_INDEX")
	assert.Contains(t, script, `-shard-count "$SLURM_ARRAY_TASK_COUNT"`)
	assert.Contains(t, script, "-resume")
	assert.Contains(t, manifest, "-resume")
}

// clusterTasks are the tasks the Slurm test collects: quick, deterministic,
// with a step that takes long enough for an element to be cancelled in the
// middle of its part.
func clusterTasks(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tasks"), 0o755))
	for name, spec := range map[string]string{
		"count.yaml": "id: count\ninstruction: count the lines\nfiles: {notes.txt: \"a\\nb\\nc\\n\"}\n" +
			"verify: {cmd: 'test \"$(cat count.txt)\" = 3', reward: exit}\nsolution:\n" +
			"  - {kind: exec, cmd: 'wc -l < notes.txt'}\n  - {kind: write_file, path: count.txt, content: \"3\\n\"}\n  - {kind: done, answer: \"3\"}\n",
		"nap.yaml": "id: nap\ninstruction: take a nap\nsolution:\n  - {kind: exec, cmd: sleep 1.5}\n  - {kind: exec, cmd: echo awake}\n  - {kind: done}\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tasks", name), []byte(spec), 0o644))
	}
}

// episodeSet is what identifies a dataset's episodes and their outcome:
// id → task, exit reason, steps and reward.
func episodeSet(t *testing.T, dir string) map[string]string {
	t.Helper()
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	rewards := map[string]string{}
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		if r.StepIndex == nil && r.Value != nil {
			rewards[r.EpisodeID] = fmt.Sprint(*r.Value)
		}
	}
	out := map[string]string{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		_, dup := out[e.EpisodeID]
		require.False(t, dup, "episode %s twice in %s", e.EpisodeID, dir)
		out[e.EpisodeID] = fmt.Sprintf("%s %s steps=%d reward=%s", e.TaskID, e.ExitReason, e.Steps, rewards[e.EpisodeID])
	}
	return out
}

// The README's Slurm array script, unchanged, on a real one-node Slurm
// cluster: four elements collect four parts; merged, they are the episodes
// of a one-machine run of the same plan, each once. Then again with one
// element cancelled mid-run (scancel) and requeued (scontrol requeue): it
// resumes its own part, and the merge is still exact.
func TestSlurmArrayOfTheREADME(t *testing.T) {
	cluster := slurmtest.Start(t)
	script := readmeBlock(t, "sh", "#SBATCH")
	repeats := regexp.MustCompile(`-repeats (\d+)`).FindStringSubmatch(script)
	require.NotNil(t, repeats, "the script's -repeats")

	work := t.TempDir()
	clusterTasks(t, work)
	require.NoError(t, os.WriteFile(filepath.Join(work, "collect.sh"), []byte(script), 0o755))
	path := filepath.Dir(forklineBin) + string(os.PathListSeparator) + os.Getenv("PATH")

	// One machine, the same plan (tasks, repeats, seed; the replicas only
	// change how fast).
	single := filepath.Join(work, "single")
	cmd := collectProcess("-tasks", filepath.Join(work, "tasks"), "-repeats", repeats[1], "-replicas", "16", "-out", single, "-quiet")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	want := episodeSet(t, single)
	require.Len(t, want, 2*mustAtoi(t, repeats[1]))

	sbatch := func(args ...string) *exec.Cmd {
		c := cluster.Command("sbatch", append(args, "collect.sh")...)
		c.Dir = work
		c.Env = append(c.Env, "PATH="+path)
		return c
	}
	merge := func(name string) map[string]string {
		parts, err := filepath.Glob(filepath.Join(work, "runs/rl/part-*"))
		require.NoError(t, err)
		require.Len(t, parts, 4)
		all := filepath.Join(work, name)
		out, err := forklineProcess("merge", append([]string{"-out", all}, parts...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "forkline merge: complete — "+fmt.Sprint(len(want))+" episodes from 4 parts")
		return episodeSet(t, all)
	}

	t.Run("array", func(t *testing.T) {
		began := time.Now()
		out, err := sbatch("--array=0-3", "--wait").CombinedOutput()
		require.NoError(t, err, "sbatch: %s\n%s", out, cluster.Logs())
		t.Logf("sbatch --array=0-3 --wait: the four parts collected in %s", time.Since(began).Round(time.Millisecond))
		requireSameEpisodes(t, want, merge("all"), "the merged parts are the one-machine run's episodes, each once")
		for i := range 4 {
			ds, err := shard.Open(filepath.Join(work, "runs/rl", fmt.Sprint("part-", i)))
			require.NoError(t, err)
			var plan struct{ Part collect.Part }
			require.NoError(t, json.Unmarshal(ds.Manifest().Plan, &plan))
			require.Equal(t, collect.Part{Index: i, Count: 4}, plan.Part, "element %d collected part %d/4", i, i)
		}
	})

	t.Run("cancel and requeue", func(t *testing.T) {
		require.NoError(t, os.RemoveAll(filepath.Join(work, "runs")))
		began := time.Now()
		out, err := sbatch("--array=0-3", "--parsable").CombinedOutput()
		require.NoError(t, err, "sbatch: %s", out)
		jobID, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
		victim := jobID + "_2"
		part := filepath.Join(work, "runs/rl/part-2")
		cluster.WaitState(victim, time.Minute, "RUNNING")
		// Mid-run: the element's log (JSON records) says the golden of the
		// slow task is built, so its episodes are under way.
		logFile := filepath.Join(work, "forkline-"+jobID+"_2.log")
		deadline := time.Now().Add(time.Minute)
		for {
			data, _ := os.ReadFile(logFile)
			if strings.Contains(string(data), `"msg":"golden checkpoint built","command":"collect","task":"nap"`) {
				break
			}
			require.True(t, time.Now().Before(deadline), "part 2 never started its naps:\n%s", data)
			time.Sleep(20 * time.Millisecond)
		}
		cluster.Run("scancel", victim)
		cluster.WaitState(victim, time.Minute, "CANCELLED")
		first, err := shard.Open(part)
		require.NoError(t, err, "a cancelled element leaves a valid dataset")
		require.Equal(t, shard.StatusPartial, first.Manifest().Status, "the cancelled part is partial")
		var cut collect.Report
		require.NoError(t, json.Unmarshal(first.Manifest().Summary, &cut))
		require.Less(t, cut.Episodes, cut.Planned, "cancelled mid-run")
		// (The episodes in flight finished within -grace: SIGTERM stops
		// scheduling, and Slurm's KillWait is longer than the grace. The
		// SIGTERM reaches the element's sandbox commands too: the
		// collector's canary sees it, and the episodes in flight are kept
		// as cancelled, so the resume runs them again.)

		cluster.Run("scontrol", "requeue", victim)
		// A requeued job waits about two minutes before it is eligible;
		// an operator (and this test) may let it start now.
		cluster.Run("scontrol", "update", "JobId="+victim, "StartTime=now")
		for i := range 4 {
			cluster.WaitState(fmt.Sprint(jobID, "_", i), 3*time.Minute, "COMPLETED")
		}
		t.Logf("array with element 2 cancelled and requeued: %s", time.Since(began).Round(time.Millisecond))
		show := cluster.Run("scontrol", "-o", "show", "job", victim)
		require.Contains(t, show, "Restarts=1", "element 2 ran twice")

		again, err := shard.Open(part)
		require.NoError(t, err)
		m := again.Manifest()
		require.Equal(t, shard.StatusComplete, m.Status)
		require.Equal(t, first.Manifest().RunID, m.RunID, "the requeued element resumed its own part's run")
		var sum collect.Report
		require.NoError(t, json.Unmarshal(m.Summary, &sum))
		require.Equal(t, sum.Planned, sum.Episodes, "the summary covers the whole part")
		require.Equal(t, sum.Episodes, sum.Skipped+sum.Ran)
		require.Zero(t, sum.ByExit["cancelled"], "the cancelled episodes ran again")
		require.Greater(t, sum.Ran, 0)
		requireSameEpisodes(t, want, merge("all-requeued"), "the merge is still exact")
	})
}

// requireSameEpisodes compares two episode sets and names only the
// episodes that differ (a whole-map diff of 200 episodes is unreadable).
func requireSameEpisodes(t *testing.T, want, got map[string]string, msg string) {
	t.Helper()
	var diff []string
	for id, w := range want {
		if g, ok := got[id]; !ok {
			diff = append(diff, fmt.Sprintf("missing %s (%s)", id, w))
		} else if g != w {
			diff = append(diff, fmt.Sprintf("changed %s: want %q, got %q", id, w, g))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			diff = append(diff, fmt.Sprintf("extra %s (%s)", id, g))
		}
	}
	slices.Sort(diff)
	require.Empty(t, diff, "%s: %d of %d episodes differ", msg, len(diff), len(want))
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	_, err := fmt.Sscan(s, &n)
	require.NoError(t, err)
	return n
}
