package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/internal/cli"
)

// jsonlEpisode is what the list test reads of a line of the lossless jsonl
// export: the episode row's columns and its reward rows, decoded here
// without forkline's types, so that the expected selection is computed by
// the test from the stored columns, not by the filter it checks.
type jsonlEpisode struct {
	EpisodeID  string `json:"episode_id"`
	TaskID     string `json:"task_id"`
	ExitReason string `json:"exit_reason"`
	Steps      int    `json:"steps"`
	Rewards    []struct {
		StepIndex *int     `json:"step_index"`
		Name      string   `json:"name"`
		Value     *float64 `json:"value"`
	} `json:"rewards"`
}

func (e jsonlEpisode) verify() *float64 {
	for _, r := range e.Rewards {
		if r.StepIndex == nil && r.Name == "verify" {
			return r.Value
		}
	}
	return nil
}

// jsonlEpisodes is every episode of dir as export -to jsonl writes it.
func jsonlEpisodes(t *testing.T, dir string) []jsonlEpisode {
	t.Helper()
	out := filepath.Join(t.TempDir(), "all.jsonl")
	code, stdout, stderr := runBin(t, 5*time.Minute, "export", "-in", dir, "-to", "jsonl", "-out", out, "-quiet")
	require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)
	var eps []jsonlEpisode
	f := openFile(t, out)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 256<<20)
	for sc.Scan() {
		var e jsonlEpisode
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		eps = append(eps, e)
	}
	require.NoError(t, sc.Err())
	return eps
}

// listJSON is inspect DIR -list -json args...: the list, which must be a
// JSON document whose page is no longer than its limit.
func listJSON(t *testing.T, dir string, args ...string) inspect.EpisodeList {
	t.Helper()
	code, stdout, stderr := runBin(t, 5*time.Minute, append([]string{"inspect", dir, "-list", "-json"}, args...)...)
	require.Equal(t, cli.ExitOK, code, "%s%s", tail(stdout), stderr)
	var l inspect.EpisodeList
	require.NoError(t, json.Unmarshal([]byte(stdout), &l), stdout)
	if l.Limit > 0 {
		require.LessOrEqual(t, len(l.Episodes), l.Limit)
	}
	return l
}

func ids(l inspect.EpisodeList) []string {
	var s []string
	for _, e := range l.Episodes {
		s = append(s, e.EpisodeID)
	}
	return s
}

// inspectListCell checks inspect -list over a dataset another command
// wrote against the lossless jsonl export of the same dataset filtered by
// this test: every episode, by exit reason (-where), by task (-task), by
// reward (-min-reward), the paging, and the text form.
func inspectListCell(t *testing.T, c *corpus, k corpusKind, dir string) string {
	eps := jsonlEpisodes(t, dir)
	var all []string
	exits := map[string][]string{}
	tasks := map[string][]string{}
	var rewarded []string
	for _, e := range eps {
		all = append(all, e.EpisodeID)
		exits[e.ExitReason] = append(exits[e.ExitReason], e.EpisodeID)
		tasks[e.TaskID] = append(tasks[e.TaskID], e.EpisodeID)
		if r := e.verify(); r != nil && *r >= 1 {
			rewarded = append(rewarded, e.EpisodeID)
		}
	}
	sorted := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

	l := listJSON(t, dir, "-limit", "0")
	require.Equal(t, int64(len(eps)), l.Matched)
	require.Equal(t, sorted(all), sorted(ids(l)), "-list shows every episode the jsonl export reads")
	byID := map[string]jsonlEpisode{}
	for _, e := range eps {
		byID[e.EpisodeID] = e
	}
	for _, e := range l.Episodes {
		want := byID[e.EpisodeID]
		require.Equal(t, want.TaskID, e.TaskID)
		require.Equal(t, want.ExitReason, e.ExitReason)
		require.Equal(t, int32(want.Steps), e.Steps)
		require.Equal(t, want.verify(), e.Reward, "episode %s", e.EpisodeID)
	}
	for exit, want := range exits {
		got := listJSON(t, dir, "-limit", "0", "-where", "exit_reason="+exit)
		require.Equal(t, sorted(want), sorted(ids(got)), "-where exit_reason=%s", exit)
		not := listJSON(t, dir, "-limit", "0", "-where", "exit_reason!="+exit)
		require.Equal(t, int64(len(eps)-len(want)), not.Matched, "-where exit_reason!=%s", exit)
	}
	for task, want := range tasks {
		got := listJSON(t, dir, "-limit", "0", "-task", task)
		require.Equal(t, sorted(want), sorted(ids(got)), "-task %s", task)
	}
	got := listJSON(t, dir, "-limit", "0", "-min-reward", "1")
	require.Equal(t, sorted(rewarded), sorted(ids(got)), "-min-reward 1")

	// Pages: the second page of two is the list from the third on.
	page := listJSON(t, dir, "-offset", "2", "-limit", "2")
	require.Equal(t, int64(len(eps)), page.Matched)
	require.Equal(t, ids(l)[min(2, len(eps)):min(4, len(eps))], nonNilIDs(page))

	code, stdout, stderr := runBin(t, 5*time.Minute, "inspect", dir, "-list", "-limit", "1")
	require.Equal(t, cli.ExitOK, code, stderr)
	require.Contains(t, stdout, fmt.Sprintf("of %d selected episodes shown", len(eps)))
	if len(eps) > 0 {
		require.Contains(t, stdout, ids(l)[0])
	}
	return fmt.Sprintf("ok (%d ep, %d exit reasons)", len(eps), len(exits))
}

func nonNilIDs(l inspect.EpisodeList) []string {
	if s := ids(l); s != nil {
		return s
	}
	return []string{}
}

// inspectA11yCell prints the stored accessibility trees of the first
// episode whose steps have one (a web run's): each step's tree as text,
// with the nodes' roles.
func inspectA11yCell(t *testing.T, c *corpus, k corpusKind, dir string) string {
	eps := jsonlA11y(t, dir)
	if len(eps) == 0 {
		return "n/a"
	}
	e := eps[0]
	code, stdout, stderr := runBin(t, 5*time.Minute, "inspect", dir, "-episode", e.id, "-a11y", "all", "-json")
	require.Equal(t, cli.ExitOK, code, "%s%s", tail(stdout), stderr)
	var ts []inspect.Transcript
	require.NoError(t, json.Unmarshal([]byte(stdout), &ts))
	require.Len(t, ts, 1)
	shown := 0
	for _, s := range ts[0].Steps {
		root, ok := e.roots[s.Index]
		if !ok {
			require.Empty(t, s.A11yTree, "step %d has no stored tree", s.Index)
			continue
		}
		require.True(t, strings.HasPrefix(s.A11yTree, root), "step %d's tree opens with its root's role %q:\n%s", s.Index, root, s.A11yTree)
		shown++
	}
	require.Equal(t, len(e.roots), shown)
	// One step by its index, in the text form.
	var first int = -1
	for i := range e.roots {
		if first < 0 || i < first {
			first = i
		}
	}
	code, stdout, stderr = runBin(t, 5*time.Minute, "inspect", dir, "-episode", e.id, "-a11y", fmt.Sprint(first))
	require.Equal(t, cli.ExitOK, code, "%s%s", tail(stdout), stderr)
	require.Contains(t, stdout, "accessibility tree (")
	require.Equal(t, 1, strings.Count(stdout, "accessibility tree ("), "only the step asked for")
	return fmt.Sprintf("ok (%d trees)", shown)
}

type a11yEpisode struct {
	id    string
	roots map[int]string // step index → the role of the tree's root
}

// jsonlA11y lists the episodes of dir whose steps stored an accessibility
// tree, read from the jsonl export's a11y_tree column.
func jsonlA11y(t *testing.T, dir string) []a11yEpisode {
	out := filepath.Join(t.TempDir(), "a11y.jsonl")
	code, stdout, stderr := runBin(t, 5*time.Minute, "export", "-in", dir, "-to", "jsonl", "-out", out, "-quiet")
	require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)
	var eps []a11yEpisode
	sc := bufio.NewScanner(openFile(t, out))
	sc.Buffer(nil, 256<<20)
	for sc.Scan() {
		var line struct {
			EpisodeID string `json:"episode_id"`
			Steps     []struct {
				StepIndex int    `json:"step_index"`
				A11yTree  string `json:"a11y_tree"`
			} `json:"step_rows"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		e := a11yEpisode{id: line.EpisodeID, roots: map[int]string{}}
		for _, s := range line.Steps {
			if s.A11yTree == "" {
				continue
			}
			var root struct {
				Role string `json:"role"`
			}
			require.NoError(t, json.Unmarshal([]byte(s.A11yTree), &root), "a stored tree is JSON")
			e.roots[s.StepIndex] = root.Role
		}
		if len(e.roots) > 0 {
			eps = append(eps, e)
		}
	}
	require.NoError(t, sc.Err())
	return eps
}

func openFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}
