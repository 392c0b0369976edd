package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/schemas"
)

// subcommands are every subcommand but help.
func subcommands() []string {
	var out []string
	for _, c := range app().Commands {
		out = append(out, c.Name)
	}
	return out
}

func TestTopLevelAndHelp(t *testing.T) {
	r := execute(t.Context())
	assert.Equal(t, cli.ExitBadInput, r.code, "forkline alone")
	assert.Empty(t, r.stdout)
	for _, name := range append(subcommands(), "help") {
		assert.Regexp(t, "(?m)^  "+name+" +\\S", r.stderr, "forkline alone lists %s", name)
	}

	r = execute(t.Context(), "help")
	assert.Equal(t, cli.ExitOK, r.code)
	assert.Equal(t, app().Overview(), r.stdout)

	r = execute(t.Context(), "colect")
	assert.Equal(t, cli.ExitBadInput, r.code)
	assert.Contains(t, r.stderr, `forkline: unknown subcommand "colect"; did you mean collect? (known: collect, merge, inspect, view, verify, export, replay, serve, images, relay, version, help)`)

	for _, name := range subcommands() {
		t.Run(name, func(t *testing.T) {
			r := execute(t.Context(), name, "-h")
			assert.Equal(t, cli.ExitOK, r.code)
			assert.True(t, strings.HasPrefix(r.stdout, "forkline "+name+": "), "%s -h starts with its summary", name)
			assert.Contains(t, r.stdout, "\nusage: forkline "+name)
			assert.Contains(t, r.stdout, "\nexamples:\n")
			assert.Contains(t, r.stdout, "\nexit codes:\n")
			assert.Contains(t, r.stdout, "  -json ")
			assert.Contains(t, r.stdout, "  -quiet ")
			h := execute(t.Context(), "help", name)
			assert.Equal(t, r.stdout, h.stdout, "forkline help %s is %s -h", name, name)

			// The required flags come first, before every group, and each
			// group's flags follow its heading.
			var ref cli.Reference
			for _, rf := range app().References() {
				if rf.Name == name {
					ref = rf
				}
			}
			require.NotEmpty(t, ref.Groups)
			last := -1
			for i, g := range ref.Groups {
				at := strings.Index(r.stdout, "\n"+g.Name+":\n")
				require.Greater(t, at, last, "group %s is in its place", g.Name)
				last = at
				if i == 0 && slices.ContainsFunc(ref.Flags, func(f cli.Flag) bool { return f.Required }) {
					assert.Equal(t, cli.RequiredGroup, g.Name, "the required flags come first")
				}
			}
			for _, f := range ref.Flags {
				assert.Contains(t, r.stdout, "\n  -"+f.Name+" ", "-%s is in the help", f.Name)
			}

			bad := execute(t.Context(), name, "-no-such-flag")
			assert.Equal(t, cli.ExitBadInput, bad.code)
			assert.Contains(t, bad.stderr, "forkline "+name+": flag provided but not defined: -no-such-flag")
			assert.Contains(t, bad.stderr, "(known: ", "an unknown flag lists the known ones")
			assert.Contains(t, bad.stderr, "-json, ")
		})
	}
}

func TestVersion(t *testing.T) {
	r := execute(t.Context(), "version")
	assert.Equal(t, cli.ExitOK, r.code)
	assert.Regexp(t, `^forkline `+regexp.QuoteMeta(collect.Version)+` \(dataset schema `+strconv.Itoa(schemas.Version)+`, (commit [0-9a-f]{12}( with local changes)?, )?go\S+ \S+/\S+\)\n$`, r.stdout)
	assert.Equal(t, r, execute(t.Context(), "--version"))
	assert.Equal(t, r, execute(t.Context(), "-version"))

	r = execute(t.Context(), "version", "-json")
	var b buildInfo
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &b))
	assert.Equal(t, collect.Version, b.Version)
	assert.Equal(t, schemas.Version, b.SchemaVersion)

	r = execute(t.Context(), "version", "extra")
	assert.Equal(t, cli.ExitBadInput, r.code)

	// A build with a VCS stamp names its commit.
	assert.Equal(t, "forkline 0.1.0 (dataset schema 2, commit 0123456789ab with local changes, go1.26.0 linux/amd64)",
		buildInfo{Version: "0.1.0", SchemaVersion: 2, Commit: "0123456789abcdef", Modified: true, Go: "go1.26.0", Platform: "linux/amd64"}.String())
}

// damage flips a byte in the middle of the dataset's first steps shard and
// returns the shard's path.
func damage(t *testing.T, dir string) string {
	t.Helper()
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	path := filepath.Join(dir, ds.Shards(schemas.TableSteps)[0].File)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[len(data)/2] ^= 1
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return ds.Shards(schemas.TableSteps)[0].File
}

func TestInspect(t *testing.T) {
	run := writeRun(t)

	r := execute(t.Context(), "inspect", run)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "forkline inspect: "+run)
	assert.Contains(t, r.stdout, "episodes: 2, 2 steps; scaffold losses: 0")
	assert.Equal(t, r, execute(t.Context(), "inspect", "-in", run), "-in DIR is the argument")
	assert.Equal(t, r, execute(t.Context(), "inspect", "-quiet", run), "flags after or before the argument")

	r = execute(t.Context(), "inspect", run, "-json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var s inspect.Summary
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
	assert.EqualValues(t, 2, s.Episodes)
	assert.Equal(t, []string{}, s.Problems)

	r = execute(t.Context(), "inspect", run, "-episode", "a")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "episode a  task shell")
	assert.Contains(t, r.stdout, "[user: the task's instruction]\n  Count the files.\n")
	r = execute(t.Context(), "inspect", run, "-episode", "a,b", "-json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var ts []inspect.Transcript
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ts))
	require.Len(t, ts, 2)
	assert.Equal(t, "b", ts[1].EpisodeID)

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"inspect"}, cli.ExitBadInput, "missing DIR"},
		{[]string{"inspect", run, "-in", run}, cli.ExitBadInput, "not both"},
		{[]string{"inspect", run, run}, cli.ExitBadInput, "unexpected arguments"},
		{[]string{"inspect", run, "-screenshots", t.TempDir()}, cli.ExitBadInput, "give -episode PREFIX"},
		{[]string{"inspect", run, "-episode", "a", "-reward", "x"}, cli.ExitBadInput, "-reward chooses the summary's reward"},
		{[]string{"inspect", run, "-episode", "zz"}, cli.ExitBadInput, `no episode id in ` + run + ` starts with "zz"`},
		{[]string{"inspect", t.TempDir()}, cli.ExitBadInput, "has no manifest.json"},
		{[]string{"inspect", filepath.Join(t.TempDir(), "nope")}, cli.ExitBadInput, "no such file or directory"},
	} {
		r := execute(t.Context(), tc.args...)
		assert.Equal(t, tc.code, r.code, "%q: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.says, tc.args)
	}

	file := damage(t, run)
	r = execute(t.Context(), "inspect", run)
	assert.Equal(t, cli.ExitFailed, r.code, "a damaged dataset")
	assert.Contains(t, r.stdout, "problems: 2")
	assert.Contains(t, r.stdout, file, "the damaged file is named")
	assert.Contains(t, r.stderr, file)
	r = execute(t.Context(), "inspect", run, "-episode", "a")
	assert.Equal(t, cli.ExitFailed, r.code)
	assert.Contains(t, r.stderr, file)
}

func TestVerify(t *testing.T) {
	run := writeRun(t)
	r := execute(t.Context(), "verify", run)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "forkline verify: "+run+": ok — complete")

	r = execute(t.Context(), "verify", run, "-json")
	var rep verifyReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.True(t, rep.OK)
	assert.Equal(t, []string{}, rep.Problems)
	assert.EqualValues(t, 2, rep.Rows["episodes"])

	r = execute(t.Context(), "verify", t.TempDir())
	assert.Equal(t, cli.ExitBadInput, r.code, "not a dataset")
	assert.Contains(t, r.stderr, "has no manifest.json")

	file := damage(t, run)
	r = execute(t.Context(), "verify", run)
	assert.Equal(t, cli.ExitFailed, r.code, "problems")
	assert.Contains(t, r.stdout, "2 problems")
	assert.Contains(t, r.stdout, "problem: ")
	assert.Contains(t, r.stdout, file)

	m := filepath.Join(run, shard.ManifestFile)
	data, err := os.ReadFile(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(m, data[:len(data)/2], 0o644))
	r = execute(t.Context(), "verify", run)
	assert.Equal(t, cli.ExitFailed, r.code, "a damaged manifest is a damaged dataset")
	assert.Contains(t, r.stderr, m)
}

func TestMerge(t *testing.T) {
	parts := t.TempDir()
	var dirs []string
	for i := range 2 {
		dir := filepath.Join(parts, "part-"+string(rune('0'+i)))
		_, err := collect.Run(context.Background(), collect.Config{Tasks: "../../examples/tasks/fix-sum.yaml", Out: dir, WorkDir: t.TempDir(),
			Repeats: 4, Part: collect.Part{Index: i, Count: 2}})
		require.NoError(t, err)
		dirs = append(dirs, dir)
	}

	out := filepath.Join(t.TempDir(), "all")
	r := execute(t.Context(), "merge", "-out", out, dirs[0], "-in", dirs[1])
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "forkline merge: complete — 4 episodes from 2 parts into "+out)
	assert.Contains(t, r.stderr, "forkline merge: joining 2 parts into "+out)

	half := filepath.Join(t.TempDir(), "half")
	r = execute(t.Context(), "merge", "-out", half, "-json", "-quiet", dirs[0])
	assert.Equal(t, cli.ExitFailed, r.code, "partial: a part is missing")
	assert.Empty(t, r.stderr, "-quiet: no note")
	var rep collect.MergeReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.Equal(t, shard.StatusPartial, rep.Status)
	assert.Equal(t, []int{1}, rep.Missing)

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"merge", "-out", filepath.Join(t.TempDir(), "x")}, "no parts given"},
		{[]string{"merge", dirs[0]}, "-out is required"},
		{[]string{"merge", "-out", out, dirs[0], dirs[1]}, "is not empty"},
		{[]string{"merge", "-out", filepath.Join(t.TempDir(), "y"), dirs[0], dirs[0]}, "cannot merge"},
		{[]string{"merge", "-out", filepath.Join(t.TempDir(), "z"), t.TempDir()}, "has no manifest.json"},
	} {
		r := execute(t.Context(), tc.args...)
		assert.Equal(t, cli.ExitBadInput, r.code, "%q: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.says, tc.args)
	}
}

// -quiet leaves stderr to errors; -json puts the result on stdout as one
// JSON document.
func TestQuietAndJSON(t *testing.T) {
	run := writeRun(t)
	out := filepath.Join(t.TempDir(), "chat")
	r := execute(t.Context(), "export", "-in", run, "-to", "chat-jsonl", "-out", out, "-quiet")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	r = execute(t.Context(), "export", "-in", run, "-to", "chat-jsonl", "-out", filepath.Join(t.TempDir(), "chat2"), "-quiet", "-json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.True(t, json.Valid([]byte(r.stdout)))
	for _, args := range [][]string{{"inspect", run}, {"verify", run}, {"version"}, {"help"}} {
		r := execute(t.Context(), append(args, "-json", "-quiet")...)
		assert.Equal(t, cli.ExitOK, r.code, "%q: %s", args, r.stderr)
		assert.True(t, json.Valid([]byte(r.stdout)), "%q prints JSON", args)
		assert.Empty(t, r.stderr, args)
	}
}

func TestReadableAction(t *testing.T) {
	assert.Equal(t, `exec {"cmd":"wc -l < notes.txt"}`, readableAction(`{"kind":"exec","cmd":"wc -l \u003c notes.txt"}`))
	assert.Equal(t, "screenshot", readableAction(`{"kind":"screenshot"}`))
	assert.Equal(t, "not json", readableAction("not json"), "anything else is shown as it is")
}
