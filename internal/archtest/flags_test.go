package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The line between library and command, for words: a library does not know
// the command line. A program that embeds collect.Run sets Config.Out, not
// -out, so an error, log record or note of a library that says "-out" or
// "use -resume" speaks of a command its user never ran. The libraries name
// their Config and Options fields (a fielderr.Error carries the field, the
// value and the cause), and cmd/forkline turns the fields into its flags, in
// one spelling (cmd/forkline/flagwords.go).
//
// The rule: no string literal in a non-test Go file of the packages below
// names one of the command's flags as a flag ("-out", "--resume", "(-force"
// ...). Comments do not count (a comment may say which flag sets a field,
// for the reader of the code); go/ast reads the literals.

// flagFreeLibraries are the folders (with their subfolders) whose packages
// must not name the command's flags.
var flagFreeLibraries = []string{"collect", "export", "serve", "replay", "episode", "record", "pool", "formats/model", "formats/chat"}

// retiredFlags are flag names the command still recognises to explain
// their rename (cli's Renamed), which the help in docs/cli.md no longer
// lists.
var retiredFlags = []string{"record", "episodes", "tasks-from", "merge"}

// commandFlags reads the flag names the command's help lists in
// docs/cli.md (each help block's "  -name ..." lines), so the rule knows a
// new flag the day it is documented.
func commandFlags(t *testing.T, root string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9]*(?:-[a-z0-9]+)*)\b`)
	names := slices.Clone(retiredFlags)
	for _, m := range line.FindAllSubmatch(doc, -1) {
		names = append(names, string(m[1]))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) < 30 {
		t.Fatalf("docs/cli.md lists %d flags (%s): the help blocks were not read", len(names), strings.Join(names, " "))
	}
	return names
}

// flagPattern matches a flag named as a flag: one or two dashes after the
// start or a space, quote or parenthesis, and no more of a name after it.
func flagPattern(names []string) *regexp.Regexp {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return regexp.MustCompile("(?:^|[\\s('\"`])(--?(?:" + strings.Join(quoted, "|") + "))(?:$|[^a-z0-9-])")
}

// flagLiterals scans the non-test Go files under root's folders dirs and
// returns each string literal that names a flag, as "file:line:col: names
// -flag" (file relative to root).
func flagLiterals(t *testing.T, root string, dirs []string, re *regexp.Regexp) []string {
	t.Helper()
	var found []string
	fset := token.NewFileSet()
	for _, dir := range dirs {
		eachSource(t, fset, root, dir, nil, func(rel, _ string, f *ast.File) {
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					s = lit.Value
				}
				var flags []string
				for _, m := range re.FindAllStringSubmatch(s, -1) {
					flags = append(flags, m[1])
				}
				if len(flags) > 0 {
					p := fset.Position(lit.Pos())
					found = append(found, fmt.Sprintf("%s:%d:%d: names %s", rel, p.Line, p.Column, strings.Join(flags, ", ")))
				}
				return true
			})
		})
	}
	return found
}

func TestLibrariesNameNoFlags(t *testing.T) {
	root := repoRoot(t)
	for _, p := range flagLiterals(t, root, flagFreeLibraries, flagPattern(commandFlags(t, root))) {
		t.Errorf("%s: a library names its Config field, not the command's flag (cmd/forkline/flagwords.go says it as a flag)", p)
	}
}

// The rule itself, on a synthetic package: a literal naming a flag in
// either spelling is caught; a comment, a longer word and a dash inside a
// word are not.
func TestFlagRuleCatchesALibraryThatNamesAFlag(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("lib/lib.go", "package lib\n\n"+
		"import \"errors\"\n\n"+
		"// Out is set by -out; --resume finishes it.\n"+
		"var a = errors.New(\"lib: -out x: use --resume\")\n"+
		"var b = `(-max-loss)`\n"+
		"var c = \"-force\"\n"+
		"var d = \"an out-of-band, x-out, -outer, -resumed, Out, Resume\"\n")
	write("lib/lib_test.go", "package lib\n\nvar e = \"-out\"\n")
	write("other/other.go", "package other\n\nvar f = \"-out\"\n")
	got := flagLiterals(t, root, []string{"lib"}, flagPattern([]string{"out", "resume", "force", "max-loss"}))
	want := []string{
		"lib/lib.go:6:20: names -out, --resume",
		"lib/lib.go:7:9: names -max-loss",
		"lib/lib.go:8:9: names -force",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// eachSource calls fn with every non-test Go file under root's folder dir
// ("" for root itself), parsed, its path relative to root in slashes, past
// hidden folders, testdata, node_modules and the folders skip (when not
// nil) names by their relative path: the walk both source scans share.
func eachSource(t *testing.T, fset *token.FileSet, root, dir string, skip func(rel string) bool, fn func(rel, path string, f *ast.File)) {
	t.Helper()
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || (skip != nil && skip(rel))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		fn(rel, path, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
