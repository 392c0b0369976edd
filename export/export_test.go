package export

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/chat"
	"github.com/forkline/forkline/formats/jsonl"
	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/model/tabletest"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/formats/verl"
	"github.com/forkline/forkline/schemas"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// exportOK runs o and requires it to succeed.
func exportOK(t *testing.T, o Options) *Report {
	t.Helper()
	rep, err := Run(t.Context(), o)
	require.NoError(t, err)
	require.NotNil(t, rep)
	return rep
}

// exportBad runs o and requires it to fail on bad input with msg.
func exportBad(t *testing.T, o Options, msg string) {
	t.Helper()
	_, err := Run(t.Context(), o)
	require.ErrorIs(t, err, ErrBadInput)
	assert.ErrorContains(t, err, msg)
}

func split(t *testing.T, s string) []SplitPart {
	t.Helper()
	parts, err := ParseSplit(s)
	require.NoError(t, err)
	return parts
}

func where(t *testing.T, s string) Where {
	t.Helper()
	w, err := ParseWhere(s)
	require.NoError(t, err)
	return w
}

// files lists a directory tree's files, slash-separated and sorted.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	}))
	slices.Sort(out)
	return out
}

func golden(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./export -update to create %s", path)
	assert.Equal(t, string(want), got, "%s differs; rerun with -update if the change is intended", path)
}

func prettyJSON(t *testing.T, raw []byte) string {
	var b bytes.Buffer
	require.NoError(t, json.Indent(&b, raw, "", "  "))
	return b.String()
}

// readTable reads one output file with the second implementation (parquet-go
// for Parquet, the hand-written IPC reader for .arrow) and checks its
// features by datasets' rule against the file's actual Arrow types: the
// types pyarrow infers from the Parquet schema, and the ARROW:schema it
// prefers when present (item names compared there).
func readTable(t *testing.T, path string) *tabletest.Table {
	t.Helper()
	if strings.HasSuffix(path, ".arrow") {
		tab, err := tabletest.ReadStreamFile(path)
		require.NoError(t, err, path)
		require.NoError(t, tabletest.CheckFeatures(tab, true), path)
		return tab
	}
	tab, err := tabletest.ReadParquetFile(path)
	require.NoError(t, err, path)
	require.NoError(t, tabletest.CheckFeatures(tab, false), "%s: features vs the Parquet schema", path)
	stored, err := tabletest.StoredArrowSchema(tab)
	require.NoError(t, err, path)
	want, err := tabletest.FeatureTypes(tab.Metadata[model.MetadataKey])
	require.NoError(t, err)
	require.NoError(t, tabletest.CheckFields(want, stored.Fields, true), "%s: features vs ARROW:schema", path)
	return tab
}

// describe renders an export's layout, schemas and metadata JSON: the
// golden file of a target.
func describe(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "== files\n%s\n", strings.Join(files(t, dir), "\n"))
	for _, f := range files(t, dir) {
		path := filepath.Join(dir, f)
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		switch {
		case strings.HasSuffix(f, ".parquet") || strings.HasSuffix(f, ".arrow"):
			tab := readTable(t, path)
			fmt.Fprintf(&b, "\n== %s: %d rows\n", f, len(tab.Rows))
			fields := tab.Fields
			if stored, err := tabletest.StoredArrowSchema(tab); err == nil {
				fields = stored.Fields
			}
			for _, fl := range fields {
				fmt.Fprintf(&b, "%s: %s\n", fl.Name, fl.String())
			}
			fmt.Fprintf(&b, "-- huggingface metadata\n%s\n", prettyJSON(t, []byte(tab.Metadata[model.MetadataKey])))
		case strings.HasSuffix(f, ".json"):
			fmt.Fprintf(&b, "\n== %s\n%s\n", f, prettyJSON(t, data))
		case strings.HasSuffix(f, ".md"):
			fmt.Fprintf(&b, "\n== %s\n%s", f, data)
		case strings.HasSuffix(f, ".jsonl"):
			first, _, _ := bytes.Cut(data, []byte("\n"))
			fmt.Fprintf(&b, "\n== %s: %d lines; the first:\n", f, bytes.Count(data, []byte("\n")))
			if len(first) > 0 {
				fmt.Fprintf(&b, "%s\n", prettyJSON(t, first))
			}
		}
	}
	return b.String()
}

func hashTree(t *testing.T, dir string) map[string]string {
	out := map[string]string{}
	for _, f := range files(t, dir) {
		data, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		out[f] = sha(data)
	}
	return out
}

var dirTargets = []string{"verl-agent", "verl-sft", "hf", "hf-disk", "chat-jsonl", "sft-tokens", "dpo"}

// Every target: golden layout, schemas and metadata; every file read back
// by a second implementation with its features checked; same input, same
// bytes.
func TestTargetsGoldenAndDeterministic(t *testing.T) {
	f := newFixture(t)
	for _, target := range append(slices.Clone(dirTargets), "hf/step", "hf-disk/step", "verl-agent/turn", "sft-tokens/turn") {
		t.Run(strings.ReplaceAll(target, "/", "-"), func(t *testing.T) {
			to, rows, _ := strings.Cut(target, "/")
			o := Options{Inputs: []string{f.runA, f.runB}, Target: to, Split: split(t, "train=0.75,test=0.25"), Rows: rows}
			if to == "verl-agent" {
				// verl cannot batch rows with and without logprobs.
				o.Where = []Where{where(t, "has_logprobs=true")}
			}
			var trees []map[string]string
			for i := range 2 {
				o.Out = filepath.Join(t.TempDir(), fmt.Sprint("out", i))
				out := o.Out
				exportOK(t, o)
				trees = append(trees, hashTree(t, out))
				if i == 0 {
					golden(t, strings.ReplaceAll(target, "/", "-")+".golden", describe(t, out))
				}
			}
			assert.Equal(t, trees[0], trees[1], "two exports of the same input differ")
		})
	}
}

// The rows a target wrote are the episodes the summary says, per split.
func TestRowCountsMatchTheSummary(t *testing.T) {
	f := newFixture(t)
	for _, target := range dirTargets {
		t.Run(target, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			o := Options{Inputs: []string{f.runA, f.runB}, Target: target, Out: out, Split: split(t, "train=0.75,test=0.25")}
			if target == "verl-agent" {
				o.Where = []Where{where(t, "has_logprobs=true")}
			}
			sum := exportOK(t, o)
			assert.Equal(t, int64(21), sum.Read)
			if target == "hf" || target == "sft-tokens" {
				readme, err := os.ReadFile(filepath.Join(out, "README.md"))
				require.NoError(t, err)
				card, err := tabletest.ReadCard(readme)
				require.NoError(t, err)
				written := map[string]int64{}
				for s, n := range sum.Written {
					if n > 0 {
						written[s] = n
					}
				}
				assert.Equal(t, written, card.Splits, "the card's split sizes are exact (datasets verifies them)")
				for split, glob := range card.Files {
					m, err := filepath.Glob(filepath.Join(out, glob))
					require.NoError(t, err)
					require.Len(t, m, 1, "split %s: %s", split, glob)
					tab := readTable(t, m[0])
					stored, err := tabletest.StoredArrowSchema(tab)
					require.NoError(t, err)
					require.NoError(t, tabletest.CheckFields(card.Features, stored.Fields, true), "card features vs %s", m[0])
				}
			}
			for split, n := range sum.Written {
				if n == 0 {
					assert.NotContains(t, files(t, out), split+".jsonl")
					continue
				}
				var got int
				switch target {
				case "hf", "sft-tokens":
					got = len(readTable(t, filepath.Join(out, "data", split+"-00000-of-00001.parquet")).Rows)
				case "hf-disk":
					got = len(readTable(t, filepath.Join(out, split, "data-00000-of-00001.arrow")).Rows)
				case "chat-jsonl", "dpo":
					data, err := os.ReadFile(filepath.Join(out, split+".jsonl"))
					require.NoError(t, err)
					got = bytes.Count(data, []byte("\n"))
				default:
					got = len(readTable(t, filepath.Join(out, split+".parquet")).Rows)
				}
				if target != "sft-tokens" && target != "dpo" {
					assert.Equal(t, int(n), got, "split %s", split)
				} else {
					assert.GreaterOrEqual(t, got, int(n), "split %s", split)
				}
			}
		})
	}
}

// verl-agent: every row keeps AgentLoopOutput's length invariants, and its
// reward is the verify reward of its own episode, joined from the rewards
// table; episodes without a usable token record are refused and counted.
func TestVerlAgentInvariantsAndRewards(t *testing.T) {
	f := newFixture(t)
	out := filepath.Join(t.TempDir(), "out")
	sum := exportOK(t, Options{Inputs: []string{f.runA, f.runB}, Target: "verl-agent", Out: out, Split: split(t, "train=0.5,test=0.5"),
		Where: []Where{where(t, "has_logprobs=true")}})
	drift, noReward := 0, 0
	for id, lp := range f.logprobs {
		switch {
		case !lp:
		case strings.HasPrefix(id, "a-shell-2"):
			drift++
		case f.rewards[id] == nil:
			noReward++
		}
	}
	assert.Equal(t, map[string]int64{verl.RefusedDrift: int64(drift), verl.RefusedNoReward: int64(noReward)}, sum.Refused)

	seen := map[string]bool{}
	for _, split := range []string{"train", "test"} {
		tab := readTable(t, filepath.Join(out, split+".parquet"))
		for i, row := range tab.Rows {
			ef := row["extra_fields"].(map[string]any)
			id := ef["episode_id"].(string)
			seen[id] = true
			require.True(t, f.tokens[id], "%s has no usable token record but was written", id)
			info := row["extra_info"].(map[string]any)
			assert.Equal(t, id, info["episode_id"])
			assert.Equal(t, split, info["split"])
			assert.Equal(t, int64(i), info["index"])

			ids := row["response_ids"].([]any)
			mask := row["response_mask"].([]any)
			require.NotEmpty(t, row["prompt_ids"])
			require.Len(t, mask, len(ids), id)
			model := 0
			for _, m := range mask {
				require.Contains(t, []any{int64(0), int64(1)}, m)
				if m == int64(1) {
					model++
				}
			}
			turns := ef["token_turns"].(int64)
			assert.Equal(t, 3*int(turns), model, "%s: model tokens", id)
			assert.Equal(t, 2*turns, row["num_turns"])
			lp := row["response_logprobs"].([]any)
			require.Len(t, lp, len(ids), id)
			for j := range mask {
				if mask[j] == int64(0) {
					assert.Equal(t, 0.0, lp[j], "%s: environment token %d", id, j)
				} else {
					assert.Less(t, lp[j], 0.0, "%s: model token %d", id, j)
				}
			}
			want := f.rewards[id]
			require.NotNil(t, want, "%s: a row always has a reward", id)
			assert.Equal(t, *want, row["reward_score"], "%s: reward", id)
			assert.Equal(t, row["reward_score"], info["reward"], id)
		}
	}
	for id, ok := range f.tokens {
		assert.Equal(t, ok && f.logprobs[id] && f.rewards[id] != nil, seen[id], "episode %s written", id)
	}
}

func TestVerlAgentRefusesARunWithoutTokens(t *testing.T) {
	f := newFixture(t)
	out := filepath.Join(t.TempDir(), "out")
	exportBad(t, Options{Inputs: []string{f.runA}, Target: "verl-agent", Out: out, Where: []Where{where(t, "has_tokens=false")}},
		"refused every one of the 1 selected episodes (1 no token record (only a -policy openai run against a server that returns token ids")
	assert.NoDirExists(t, out)
}

func TestFiltersAndSplit(t *testing.T) {
	f := newFixture(t)
	read := func(t *testing.T, out, split string) []map[string]any {
		return readTable(t, filepath.Join(out, "data", split+"-00000-of-00001.parquet")).Rows
	}
	t.Run("where, min-reward, task", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		exportOK(t, Options{Inputs: []string{f.runA, f.runB}, Target: "hf", Out: out,
			Where: []Where{where(t, "exit_reason=done,timeout"), where(t, "run_id!=run-b")}, MinReward: ptr(0.5), Tasks: []string{"shell"}})
		rows := read(t, out, "train")
		require.NotEmpty(t, rows)
		for _, row := range rows {
			info := row
			assert.Contains(t, []any{"done", "timeout"}, info["exit_reason"])
			assert.Equal(t, "run-a", info["run_id"])
			assert.Equal(t, "shell", info["task_id"])
			assert.GreaterOrEqual(t, info["reward"], 0.5)
		}
	})
	t.Run("episode id prefixes", func(t *testing.T) {
		all := filepath.Join(t.TempDir(), "all")
		exportOK(t, Options{Inputs: []string{f.runA}, Target: "hf", Out: all})
		var ids []string
		for _, row := range read(t, all, "train") {
			ids = append(ids, row["episode_id"].(string))
		}
		sort.Strings(ids)
		require.Greater(t, len(ids), 3)
		// An exact id, and a prefix shared by some ids but not all.
		prefixes := []string{ids[0], ids[len(ids)-1][:len(ids[len(ids)-1])-1]}
		var want []string
		for _, id := range ids {
			if strings.HasPrefix(id, prefixes[0]) || strings.HasPrefix(id, prefixes[1]) {
				want = append(want, id)
			}
		}
		require.Less(t, len(want), len(ids))
		out := filepath.Join(t.TempDir(), "out")
		exportOK(t, Options{Inputs: []string{f.runA}, Target: "hf", Out: out, Episodes: prefixes})
		var got []string
		for _, row := range read(t, out, "train") {
			got = append(got, row["episode_id"].(string))
		}
		assert.ElementsMatch(t, want, got, "exactly the episodes whose id starts with a given prefix")
	})
	t.Run("split is stable across exports", func(t *testing.T) {
		splitOf := func(inputs ...string) map[string]string {
			out := filepath.Join(t.TempDir(), "out")
			exportOK(t, Options{Inputs: inputs, Target: "hf", Out: out, Split: split(t, "train=0.6,test=0.4")})
			m := map[string]string{}
			for _, s := range []string{"train", "test"} {
				for _, row := range read(t, out, s) {
					m[row["episode_id"].(string)] = s
				}
			}
			return m
		}
		both := splitOf(f.runA, f.runB)
		alone := splitOf(f.runB)
		require.Len(t, both, 21)
		for id, s := range alone {
			assert.Equal(t, both[id], s, "episode %s changed split when exported with other runs", id)
		}
		n := 0
		for _, s := range both {
			if s == "test" {
				n++
			}
		}
		assert.True(t, n > 0 && n < 21, "both splits get episodes (test: %d of 21)", n)
		for id, s := range both {
			assert.Equal(t, assignSplit([]SplitPart{{"train", 0.6}, {"test", 0.4}}, id), s)
		}
	})
	t.Run("nothing selected", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		exportBad(t, Options{Inputs: []string{f.runA}, Target: "hf", Out: out, Tasks: []string{"nope"}}, "no episode to write: 17 read, 17 filtered out")
		assert.NoDirExists(t, out)
	})
}

func TestParseSplit(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{"train=1", ""},
		{"train=0.95,test=0.05", ""},
		{"train=0.9,validation=0.05,test=0.05", ""},
		{"train=0.9,test=0.05", "sum to 0.95"},
		{"train=1,train=0", "positive"},
		{"train=0.5,train=0.5", "named twice"},
		{"tr-ain=1", "names of letters"},
		{"train", "want name=fraction"},
		{"train=x", "positive number"},
	} {
		_, err := ParseSplit(tc.in)
		if tc.err == "" {
			assert.NoError(t, err, tc.in)
		} else {
			assert.ErrorContains(t, err, tc.err, tc.in)
		}
	}
}

func TestInputsMustBeCompatible(t *testing.T) {
	f := newFixture(t)
	t.Run("duplicate episode ids", func(t *testing.T) {
		copyDir := filepath.Join(t.TempDir(), "again")
		writeRun(t, filepath.Dir(copyDir), runSpec{runID: "again", policy: map[string]any{"name": "script"},
			episodes: []shard.EpisodeBatch{episodeBatch("b-2", epOpts{task: "shell", exit: "done", reward: ptr(1.0)})}})
		out := filepath.Join(t.TempDir(), "out")
		exportBad(t, Options{Inputs: []string{f.runB, copyDir}, Target: "chat-jsonl", Out: out}, "episode b-2 is in both Inputs "+f.runB+" and Inputs "+copyDir)
		assert.NoDirExists(t, out)
	})
	t.Run("same run twice", func(t *testing.T) {
		exportBad(t, Options{Inputs: []string{f.runB, f.runB}, Target: "hf", Out: filepath.Join(t.TempDir(), "out")}, "must be unique across inputs")
	})
	t.Run("other schema version", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "v99")
		require.NoError(t, os.MkdirAll(other, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(other, "manifest.json"), []byte(`{"schema_version":99,"run_id":"x","shards":[]}`), 0o644))
		exportBad(t, Options{Inputs: []string{f.runB, other}, Target: "hf", Out: filepath.Join(t.TempDir(), "out")}, "schema version 99")
	})
	t.Run("task missing from the manifest", func(t *testing.T) {
		dir := t.TempDir()
		b := episodeBatch("x-0", epOpts{task: "unknown", exit: "done", reward: ptr(1.0)})
		path := writeRun(t, dir, runSpec{runID: "x", policy: map[string]any{"name": "script"}, episodes: []shard.EpisodeBatch{b}})
		out := filepath.Join(dir, "out")
		exportBad(t, Options{Inputs: []string{path}, Target: "chat-jsonl", Out: out}, `task "unknown" is not among the manifest's task specs`)
		assert.NoDirExists(t, out)
		assert.Equal(t, []string{"x"}, dirNames(t, dir), "no staging directory is left behind")
	})
}

func dirNames(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestOutputDirectory(t *testing.T) {
	f := newFixture(t)
	parent := t.TempDir()
	out := filepath.Join(parent, "out")
	require.NoError(t, os.MkdirAll(out, 0o755))
	exportOK(t, Options{Inputs: []string{f.runB}, Target: "chat-jsonl", Out: out}) // an empty directory may be used
	exportBad(t, Options{Inputs: []string{f.runB}, Target: "verl-sft", Out: out}, "is not empty; choose another directory or pass Force")
	assert.Equal(t, []string{"train.jsonl"}, files(t, out))
	exportOK(t, Options{Inputs: []string{f.runB}, Target: "verl-sft", Out: out, Force: true})
	assert.Equal(t, []string{"train.parquet"}, files(t, out), "-force replaces the directory whole")
	assert.Equal(t, []string{"out"}, dirNames(t, parent), "no staging or old directory is left")
}

func TestInterruptedExportLeavesNothing(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	out := filepath.Join(t.TempDir(), "out")
	_, err := Run(ctx, Options{Inputs: []string{f.runA}, Target: "hf", Out: out})
	assert.ErrorIs(t, err, context.Canceled)
	assert.NoDirExists(t, out)
	assert.Empty(t, dirNames(t, filepath.Dir(out)))
}

// The jsonl target still writes what formats/jsonl writes.
func TestJSONLTargetUnchanged(t *testing.T) {
	f := newFixture(t)
	ds, err := shard.Open(f.runA)
	require.NoError(t, err)
	var want bytes.Buffer
	enc := jsonl.NewEncoder(&want)
	require.NoError(t, ds.EachEpisode(enc.Encode))
	require.NoError(t, enc.Flush())

	var stdout bytes.Buffer
	exportOK(t, Options{Inputs: []string{f.runA}, Target: "jsonl", Out: "-", Stdout: &stdout})
	assert.Equal(t, want.String(), stdout.String())

	path := filepath.Join(t.TempDir(), "run.jsonl")
	exportOK(t, Options{Inputs: []string{f.runA}, Target: "jsonl", Out: path})
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, want.String(), string(got))

	stdout.Reset()
	exportOK(t, Options{Inputs: []string{f.runA, f.runB}, Target: "jsonl", Out: "-", Stdout: &stdout, Where: []Where{where(t, "exit_reason=timeout")}})
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var ep map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ep))
		assert.Equal(t, "timeout", ep["exit_reason"])
		n++
	}
	assert.Equal(t, 1, n)
}

// hf episode rows embed the screenshots, the one stored by hash included,
// and carry the conversation.
func TestHFEpisodeRows(t *testing.T) {
	f := newFixture(t)
	out := filepath.Join(t.TempDir(), "out")
	exportOK(t, Options{Inputs: []string{f.runA}, Target: "hf", Out: out, Tasks: []string{"gui"},
		Where: []Where{where(t, "exit_reason=done"), where(t, "episode_id=a-gui-0")}})
	rows := readTable(t, filepath.Join(out, "data", "train-00000-of-00001.parquet")).Rows
	require.Len(t, rows, 1)
	row := rows[0]
	assert.Equal(t, []any{nil, nil,
		map[string]any{"bytes": shotBlob, "path": nil},
		map[string]any{"bytes": shotFull, "path": nil},
		nil,
	}, row["screenshots"], "one entry per step: the two GUI steps took the screenshots")
	assert.Nil(t, row["reward"], "a null verify reward stays null")
	msgs := row["messages"].([]any)
	msg := func(i int) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(msgs[i].(string)), &m))
		return m
	}
	assert.Equal(t, map[string]any{"role": "user", "content": "Press the <Save> button."}, msg(0))
	assert.Equal(t, "exit code: 1\ncat: missing: No such file or directory\n", msg(4)["content"])
	assert.Equal(t, "[forkline: a 4x3 screenshot was taken; this policy sends text only]\n", msg(6)["content"])
	assert.Equal(t, `{"role":"assistant","content":"","tool_calls":[{"id":"call_4","type":"function","function":{"name":"done","arguments":{"answer":"3 files"}}}]}`,
		msgs[len(msgs)-1], "the done call, keys only where they apply")
}

// chat-jsonl takes the system prompt, the tools offered and the
// observation cap from the run's policy options, and the instruction from
// the task spec.
func TestChatJSONLFromManifest(t *testing.T) {
	f := newFixture(t)
	out := filepath.Join(t.TempDir(), "out")
	exportOK(t, Options{Inputs: []string{f.runB}, Target: "chat-jsonl", Out: out, ToolArgs: model.ArgsObject, Where: []Where{where(t, "episode_id=b-0")}})
	data, err := os.ReadFile(filepath.Join(out, "train.jsonl"))
	require.NoError(t, err)
	var line struct {
		Messages []map[string]any `json:"messages"`
		Tools    []map[string]any `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(data, &line))
	assert.Equal(t, map[string]any{"role": "system", "content": "You operate a Linux shell."}, line.Messages[0])
	assert.Equal(t, map[string]any{"role": "user", "content": "List the files & count them."}, line.Messages[1])
	args := line.Messages[2]["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["arguments"]
	assert.Equal(t, map[string]any{"cmd": "ls -1 | wc -l > count.txt"}, args)
	assert.Equal(t, "exit code: 1\ncat: missi\n[... forkline: 20 bytes elided from the middle of this output ...]\ndirectory\n",
		line.Messages[5]["content"], "observation_cap=20 as the policy showed it")
	var names []string
	for _, tool := range line.Tools {
		names = append(names, tool["function"].(map[string]any)["name"].(string))
	}
	assert.Equal(t, []string{"exec", "read_file", "done"}, names, "the actions the policy offered, in its order")
}

// A run whose policy wrote tool calls as text exports as it ran: the
// model's text holds the call, observations are user messages, and no
// function tools are listed.
func TestTextToolCallRun(t *testing.T) {
	dir := t.TempDir()
	b := episodeBatch("t-0", epOpts{task: "shell", exit: "done", reward: ptr(1.0)})
	call := "<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls -1 | wc -l > count.txt\"}}\n</tool_call>"
	b.Steps[0].ModelText = &call
	path := writeRun(t, dir, runSpec{runID: "text", policy: map[string]any{"name": "openai", "options": map[string]string{"tool_mode": "text"}},
		episodes: []shard.EpisodeBatch{b}})
	out := filepath.Join(dir, "out")
	exportOK(t, Options{Inputs: []string{path}, Target: "chat-jsonl", Out: out})
	data, err := os.ReadFile(filepath.Join(out, "train.jsonl"))
	require.NoError(t, err)
	var line map[string]any
	require.NoError(t, json.Unmarshal(data, &line))
	assert.NotContains(t, line, "tools")
	msgs := line["messages"].([]any)
	assert.Equal(t, map[string]any{"role": "assistant", "content": call, "weight": 1.0}, msgs[1])
	assert.Equal(t, map[string]any{"role": "user", "content": "exit code: 0\n(no output)"}, msgs[2])
}

// Options that Validate refuses, before any input is read.
func TestValidate(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	in := []string{filepath.Join(t.TempDir(), "run")} // never opened
	for _, tc := range []struct {
		name string
		o    Options
		msg  string
	}{
		{"no input", Options{Target: "hf", Out: out}, "Inputs, Target and Out are required"},
		{"no out", Options{Inputs: in, Target: "hf"}, "Inputs, Target and Out are required"},
		{"unknown target", Options{Inputs: in, Target: "parquet", Out: out}, `unknown target "parquet" (known: atif, chat-jsonl, dpo, hf, hf-disk, jsonl, sft-tokens, verl-agent, verl-sft)`},
		{"removed target", Options{Inputs: in, Target: "verl-rl", Out: out}, "Target verl-rl was removed"},
		{"rows for verl-sft", Options{Inputs: in, Target: "verl-sft", Out: out, Rows: "step"}, "Rows is for hf, hf-disk, sft-tokens and verl-agent, not verl-sft"},
		{"tool args for verl-agent", Options{Inputs: in, Target: "verl-agent", Out: out, ToolArgs: model.ArgsObject}, "ToolArgs is for atif, chat-jsonl, dpo, hf, hf-disk and verl-sft, not verl-agent"},
		{"unknown rows", Options{Inputs: in, Target: "hf", Out: out, Rows: "turn"}, `Rows "turn" for hf (known: episode, step)`},
		{"step rows have no messages", Options{Inputs: in, Target: "hf", Out: out, Rows: "step", Reasoning: model.ReasoningAll}, "Reasoning shapes the messages of episode rows"},
		{"unknown tool args", Options{Inputs: in, Target: "chat-jsonl", Out: out, ToolArgs: "yaml"}, `ToolArgs "yaml" (known: object, string)`},
		{"unknown call content", Options{Inputs: in, Target: "chat-jsonl", Out: out, CallContent: "none"}, `CallContent "none" (known: empty, null, split)`},
		{"unknown reasoning", Options{Inputs: in, Target: "hf", Out: out, Reasoning: "some"}, `Reasoning "some" (known: shown, all, none)`},
		{"unknown advantage", Options{Inputs: in, Target: "verl-agent", Out: out, Advantage: "ppo"}, `Advantage "ppo" (known: none, grpo, rloo)`},
		{"negative limit", Options{Inputs: in, Target: "verl-agent", Out: out, MaxPromptTokens: -1}, "must not be negative"},
		{"unknown pairs", Options{Inputs: in, Target: "dpo", Out: out, Pairs: "best"}, `Pairs "best" (known: max, all)`},
		{"pairs for chat", Options{Inputs: in, Target: "chat-jsonl", Out: out, Pairs: PairsAll}, "Pairs is for dpo, not chat-jsonl"},
		{"openai dpo with objects", Options{Inputs: in, Target: "dpo", Out: out, DPOFormat: chat.DPOOpenAI, ToolArgs: model.ArgsObject}, "OpenAI requires them"},
		{"bad license", Options{Inputs: in, Target: "hf", Out: out, License: "MIT License"}, `License "MIT License"`},
		{"card language for verl", Options{Inputs: in, Target: "verl-sft", Out: out, Languages: []string{"en"}}, "Languages is for hf and sft-tokens, not verl-sft"},
		{"unknown column", Options{Inputs: in, Target: "hf", Out: out, Where: []Where{{Column: "color", Values: []string{"red"}}}}, `Where "color=red": unknown column "color"`},
		{"split sum", Options{Inputs: in, Target: "hf", Out: out, Split: []SplitPart{{"train", 0.5}}}, `Split "train=0.5": fractions sum to 0.5, not 1`},
		{"split name", Options{Inputs: in, Target: "hf", Out: out, Split: []SplitPart{{"tr-ain", 1}}}, "names of letters"},
		{"split twice", Options{Inputs: in, Target: "hf", Out: out, Split: []SplitPart{{"train", 0.5}, {"train", 0.5}}}, "named twice"},
		{"split negative", Options{Inputs: in, Target: "hf", Out: out, Split: []SplitPart{{"train", 2}, {"test", -1}}}, "fraction of test must be a positive number"},
		{"split empty", Options{Inputs: in, Target: "hf", Out: out, Split: []SplitPart{}}, "want name=fraction"},
		{"jsonl split", Options{Inputs: in, Target: "jsonl", Out: "-", Split: []SplitPart{{"train", 0.5}, {"test", 0.5}}}, "writes one file"},
		{"directory to stdout", Options{Inputs: in, Target: "hf", Out: "-"}, "Out - is for jsonl only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			require.ErrorIs(t, err, ErrBadInput)
			assert.ErrorContains(t, err, tc.msg)
			rep, err := Run(t.Context(), tc.o)
			assert.Nil(t, rep)
			require.ErrorIs(t, err, ErrBadInput)
			assert.ErrorContains(t, err, tc.msg)
		})
	}
	assert.NoDirExists(t, out)
	assert.NoError(t, Options{Inputs: in, Target: "hf", Out: out}.Validate(), "every optional field has a default")
}

func TestMissingInput(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	exportBad(t, Options{Inputs: []string{filepath.Join(t.TempDir(), "nope")}, Target: "hf", Out: out}, "no dataset")
	assert.NoDirExists(t, out)
}

func TestParseWhere(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Where
		err  string
	}{
		{"exit_reason=done", Where{Column: "exit_reason", Values: []string{"done"}}, ""},
		{"run_id!=a,b", Where{Column: "run_id", Not: true, Values: []string{"a", "b"}}, ""},
		{"color=red", Where{}, `unknown column "color"`},
		{"exit_reason", Where{}, "want column=value"},
		{"=done", Where{}, "want column=value"},
	} {
		w, err := ParseWhere(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, w, tc.in)
		assert.Equal(t, tc.in, w.String(), "String reads back")
	}
}

func TestDescribe(t *testing.T) {
	for _, name := range Targets() {
		info, err := Describe(name)
		require.NoError(t, err, name)
		assert.NotEmpty(t, info.Summary, name)
		assert.NotEmpty(t, info.Layout, name)
		assert.Equal(t, name == "jsonl", info.File, name)
	}
	_, err := Describe("parquet")
	assert.ErrorIs(t, err, ErrBadInput)
}

// The pairing rule: per group, -pairs max is the best episode (of equal
// rewards, the smallest id) over the worst (likewise); -pairs all every two
// whose rewards differ; a group of equal rewards or one rated episode none.
func TestPairPlan(t *testing.T) {
	g := &groups{byID: map[string]*group{
		"g1": {members: []member{{"e3", 0.5}, {"e1", 1}, {"e2", 1}, {"e4", 0}, {"e5", 0}}},
		"g2": {members: []member{{"u1", 1}, {"u2", 1}}},
		"g3": {members: []member{{"s1", 1}}, unrated: 1},
		// A group with no rated episode: a branched root (its reward is
		// its branches'), or a task without verify:. It pairs nothing and
		// must not be indexed (it panicked: index out of range [0]).
		"g4": {unrated: 2},
	}, order: []string{"g1", "g2", "g3", "g4"}}
	pl := g.plan(PairsMax)
	assert.Equal(t, []plannedPair{{"g1", "e1", "e4"}}, pl.pairs)
	assert.Equal(t, map[string]string{"e2": RefusedNotExtreme, "e3": RefusedNotExtreme, "e5": RefusedNotExtreme,
		"u1": RefusedUniform, "u2": RefusedUniform, "s1": RefusedAlone}, pl.refusal)
	pl = g.plan(PairsAll)
	assert.Equal(t, []plannedPair{{"g1", "e1", "e3"}, {"g1", "e1", "e4"}, {"g1", "e1", "e5"}, {"g1", "e2", "e3"}, {"g1", "e2", "e4"},
		{"g1", "e2", "e5"}, {"g1", "e3", "e4"}, {"g1", "e3", "e5"}}, pl.pairs)
}

// The reward range and the branched column: what forkline view's max_reward
// and branch filters are.
func TestFilterRewardRangeAndBranched(t *testing.T) {
	v := func(x float64) *float64 { return &x }
	parent, step := "root", int32(2)
	root := schemas.EpisodeRow{EpisodeID: "a"}
	branch := schemas.EpisodeRow{EpisodeID: "b", ParentEpisodeID: &parent, BranchStep: &step}
	reward := func(x *float64) []schemas.RewardRow {
		return []schemas.RewardRow{{Name: "other", Value: v(9)}, {Name: DefaultReward, Value: x}}
	}
	for _, tc := range []struct {
		f    Filter
		row  schemas.EpisodeRow
		r    *float64
		want bool
	}{
		{Filter{MaxReward: v(0.5)}, root, v(0.5), true},
		{Filter{MaxReward: v(0.5)}, root, v(0.6), false},
		{Filter{MaxReward: v(0.5)}, root, nil, false},
		{Filter{MinReward: v(0.2), MaxReward: v(0.8)}, root, v(0.2), true},
		{Filter{MinReward: v(0.2), MaxReward: v(0.8)}, root, v(0.1), false},
		{Filter{Where: []Where{{Column: "branched", Values: []string{"true"}}}}, branch, nil, true},
		{Filter{Where: []Where{{Column: "branched", Values: []string{"true"}}}}, root, nil, false},
		{Filter{Where: []Where{{Column: "branched", Not: true, Values: []string{"true"}}}}, root, nil, true},
	} {
		assert.Equal(t, tc.want, tc.f.Match(&tc.row, reward(tc.r)), "%+v on %s with reward %v", tc.f, tc.row.EpisodeID, tc.r)
	}
}

// A target is columnar exactly when what it writes is Parquet or Arrow
// (the command's collector setting follows it).
func TestColumnarTargetsWriteParquetOrArrow(t *testing.T) {
	for _, name := range Targets() {
		info, err := Describe(name)
		require.NoError(t, err)
		files := strings.Contains(info.Layout, ".parquet") || strings.Contains(info.Layout, ".arrow")
		assert.Equal(t, files, info.Columnar, "%s: %s", name, info.Layout)
	}
}
