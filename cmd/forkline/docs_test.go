package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/task"
)

var update = flag.Bool("update", false, "rewrite the generated blocks of docs/cli.md from the binary's help")

const cliDoc = "../../docs/cli.md"

// docBlock is one generated block of docs/cli.md: the command line in an
// HTML comment, then its output in a text fence.
var docBlock = regexp.MustCompile("(?s)<!-- (forkline[^\n]*?) -->\n```text\n(.*?)```\n<!-- end -->")

// versionLine is the shape of `forkline -version`, whose Go version and
// commit depend on the build.
var versionLine = regexp.MustCompile(`^forkline ` + regexp.QuoteMeta(collect.Version) + ` \(dataset schema \d+, (commit [0-9a-f]{12}( with local changes)?, )?go\S+ \S+/\S+\)\n$`)

// docs/cli.md shows `forkline help`, `forkline -version` and every
// subcommand's -h exactly as the binary prints them. This test fails when
// they disagree, or a subcommand's help is missing; -update rewrites the
// blocks from the binary (the prose around them is kept).
func TestCLIDocMatchesTheHelp(t *testing.T) {
	data, err := os.ReadFile(cliDoc)
	require.NoError(t, err)
	doc := string(data)
	want := map[string]bool{"forkline help": true, "forkline -version": true}
	for _, c := range subcommands() {
		want["forkline "+c+" -h"] = true
	}
	seen := map[string]bool{}
	out := docBlock.ReplaceAllStringFunc(doc, func(block string) string {
		m := docBlock.FindStringSubmatch(block)
		line, body := m[1], m[2]
		seen[line] = true
		r := execute(context.Background(), strings.Fields(line)[1:]...)
		if r.code != 0 {
			t.Errorf("docs/cli.md: %q exits %d: %s", line, r.code, r.stderr)
			return block
		}
		if line == "forkline -version" {
			if !*update {
				assert.Regexp(t, versionLine, body, "docs/cli.md: %s has the shape of this build's version", line)
				return block
			}
		} else if !*update && body != r.stdout {
			t.Errorf("docs/cli.md: the output of %q differs from the binary's; run go test ./cmd/forkline -run TestCLIDoc -update\n--- docs/cli.md\n%s\n--- %s\n%s", line, body, line, r.stdout)
		}
		return "<!-- " + line + " -->\n```text\n" + r.stdout + "```\n<!-- end -->"
	})
	for line := range want {
		if !seen[line] {
			t.Errorf("docs/cli.md has no block for %q: add\n<!-- %s -->\n```text\n```\n<!-- end -->\nand run with -update", line, line)
		}
	}
	for line := range seen {
		if !want[line] && !strings.HasPrefix(line, "forkline help ") {
			t.Errorf("docs/cli.md shows %q, which is not a help this test knows", line)
		}
	}
	// The table at the top lists every subcommand (serve was missing).
	for _, c := range subcommands() {
		assert.True(t, strings.Contains(doc, "| [`"+c+"`](#forkline-"+c+") |"), "docs/cli.md's table lists %s", c)
	}
	if *update {
		require.NoError(t, os.WriteFile(cliDoc, []byte(out), 0o644))
	}
}

// docs/policies.md documents every option of -policy openai (the options
// registry of policy/openai).
func TestPolicyDocListsEveryOption(t *testing.T) {
	data, err := os.ReadFile("../../docs/policies.md")
	require.NoError(t, err)
	for _, name := range openai.OptionNames() {
		assert.Contains(t, string(data), "| `"+name+"` |", "docs/policies.md documents option %s", name)
	}
}

// The episode ids the helps' examples name are ids a run gives: those of
// make demo (examples/tasks, 8 repeats, seed 0) and of the browser tasks
// (examples/tasks/web), as episode ids are derived from the task.
func TestHelpExampleEpisodesExist(t *testing.T) {
	var ids []string
	for _, dir := range []string{"../../examples/tasks", "../../examples/tasks/web"} {
		specs, err := task.Load(dir)
		require.NoError(t, err)
		for _, s := range specs {
			s = s.WithDefaults()
			for r := range 8 {
				ids = append(ids, collect.EpisodeID(s.ID, s.Hash(), r, 0))
			}
		}
	}
	doc, err := os.ReadFile(cliDoc)
	require.NoError(t, err)
	seen := 0
	for _, m := range regexp.MustCompile(`-episode ([0-9a-f]{4,}(,[0-9a-f]{4,})*)`).FindAllStringSubmatch(string(doc), -1) {
		for _, prefix := range strings.Split(m[1], ",") {
			seen++
			assert.True(t, slices.ContainsFunc(ids, func(id string) bool { return strings.HasPrefix(id, prefix) }),
				"docs/cli.md: -episode %s names no episode of make demo or of examples/tasks/web", prefix)
		}
	}
	require.NotZero(t, seen)
}

// The README's tutorial shows episode ids a run of its task gives (ids are
// derived from the task spec, repeat and seed: 4 repeats, seed 0), and
// names them by prefixes that match one.
func TestREADMETutorialIDsAreTheTasks(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(data)
	m := regexp.MustCompile("(?s)```yaml\n(id: count-lines\n.*?)```").FindStringSubmatch(readme)
	require.NotNil(t, m, "the README's tutorial task")
	specs, err := task.Parse("README.md", []byte(m[1]))
	require.NoError(t, err)
	s := specs[0].WithDefaults()
	var ids []string
	for r := range 4 {
		ids = append(ids, collect.EpisodeID(s.ID, s.Hash(), r, 0))
	}
	named := regexp.MustCompile(`\b[0-9a-f]{32}\b`).FindAllString(readme, -1)
	for _, p := range regexp.MustCompile(`-episode ([0-9a-f]{4,})`).FindAllStringSubmatch(readme, -1) {
		named = append(named, p[1])
	}
	require.NotEmpty(t, named)
	for _, id := range named {
		assert.True(t, slices.ContainsFunc(ids, func(x string) bool { return strings.HasPrefix(x, id) }), "README: %s is no episode of the tutorial's run", id)
	}
}

// Every message, help text and document spells forkline's flags with one
// dash, as its flag parser documents them (-resume, -force, -version):
// before, some errors said --resume and --force. A flag of another
// program (dockerd --bridge, Chromium --headless, an agent harness's
// --model) is not forkline's, and
// the parser itself accepts --help and --version (internal/cli).
func TestMessagesSpellFlagsWithOneDash(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	require.NoError(t, err)
	names := map[string]bool{"version": true, "help": true}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)\b`).FindAllStringSubmatch(string(doc), -1) {
		names[m[1]] = true
	}
	require.Greater(t, len(names), 40, "the flags read from docs/cli.md")
	double := regexp.MustCompile(`--([a-z][a-z0-9-]*)\b`)
	var bad []string
	require.NoError(t, filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasSuffix(p, "_test.go") || !(strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".md")) {
			return nil
		}
		switch {
		case strings.HasSuffix(p, filepath.Join("internal", "cli", "app.go")), strings.HasSuffix(p, filepath.Join("internal", "cli", "flags.go")):
			return nil // the parser, which accepts --help and --version
		case strings.HasSuffix(p, filepath.Join("internal", "slurmtest", "slurmtest.go")):
			return nil // it runs munged --force
		case strings.Contains(p, filepath.Join("..", "..", "harness")+string(filepath.Separator)), strings.HasSuffix(p, filepath.Join("docs", "agents.md")):
			return nil // the agent harnesses' own command lines (claude --model, codex --version)
		case strings.HasSuffix(p, filepath.Join("providers", "gvisor", "runsc.go")):
			return nil // the wrapper of runsc's command line (runsc --version, list --quiet)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "runsc") || strings.Contains(line, "busybox") {
				continue // a runsc or busybox command line (runsc delete --force, busybox --list)
			}
			for _, m := range double.FindAllStringSubmatch(line, -1) {
				if names[m[1]] {
					bad = append(bad, fmt.Sprintf("%s:%d: --%s", p, i+1, m[1]))
				}
			}
		}
		return nil
	}))
	require.Empty(t, bad, "forkline's flags take one dash")
}
