package archtest

import (
	"fmt"
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The line between library and command, for printing: only the command
// talks to people. A library package returns data (and its JSON form);
// cmd/forkline prints it, through internal/ui for the renderings the
// commands share. So no library package (a non-main package outside the
// folders below) writes to standard output or standard error itself —
// os.Stdout, os.Stderr, fmt.Print*, the standard logger's Print, Fatal and
// Panic, the print and println builtins — or defines an exported Print...
// or WriteText function or method: a rendering for people that belongs in
// internal/ui.
//
// Why a source scan (go/ast, as internal/testrules reads the tests) and not
// a row of the import table: every package imports fmt and os for good
// reasons (errors, files); what must not happen is one expression in them.
//
// File formats, reports that are files and log records stay with their
// packages: they write to a writer their caller gives them (an export's
// target, the replay HTML report, the dataset card, a *slog.Logger), which
// the rule does not see and does not mind.

// printingExempt are the folders whose packages may print: the command
// and what only it uses.
var printingExempt = map[string]string{
	"cmd":         "the command",
	"internal/ui": "the text the commands print for people",
	"internal/cli": "the command's shared part: its Invocation prints errors and -json to the " +
		"streams cmd/forkline gives it",
}

// printingAllowed are the uses of the standard streams a library keeps,
// "file: what", each with its reason. An entry that no longer matches
// anything fails the test, so the list cannot go stale.
var printingAllowed = map[string]string{
	"export/export.go: uses os.Stdout": "a file target's bytes for -out - go to standard output when the " +
		"caller gives no writer: the export itself, a file format, not text for people",
}

// printing returns what one file of a library package does that only the
// command may: each as "what", with its position.
func printing(fset *token.FileSet, f *ast.File) []string {
	local := map[string]string{} // import path -> the name the file uses
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		local[path] = name
	}
	selected := func(e ast.Expr, path string, names ...string) (string, bool) {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return "", false
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok || local[path] == "" || x.Name != local[path] || !slices.Contains(names, sel.Sel.Name) {
			return "", false
		}
		return path + "." + sel.Sel.Name, true
	}
	var found []string
	add := func(n ast.Node, what string) {
		found = append(found, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), what))
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if ok && fd.Name.IsExported() && (strings.HasPrefix(fd.Name.Name, "Print") || fd.Name.Name == "WriteText") {
			add(fd, "defines "+fd.Name.Name+", a rendering for people (it belongs in internal/ui)")
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			if what, ok := selected(x, "os", "Stdout", "Stderr"); ok {
				add(x, "uses "+what)
			}
		case *ast.CallExpr:
			if what, ok := selected(x.Fun, "fmt", "Print", "Printf", "Println"); ok {
				add(x, "calls "+what+" (standard output)")
			}
			if what, ok := selected(x.Fun, "log", "Print", "Printf", "Println", "Fatal", "Fatalf", "Fatalln", "Panic", "Panicf", "Panicln"); ok {
				add(x, "calls "+what+" (the standard logger writes to standard error)")
			}
			// (A package that declares its own println is not worth a
			// type check: none does.)
			if id, ok := x.Fun.(*ast.Ident); ok && (id.Name == "print" || id.Name == "println") {
				add(x, "calls the builtin "+id.Name+" (standard error)")
			}
		}
		return true
	})
	return found
}

// libraryPrinting scans every non-test Go file of the module's library
// packages under root and returns what they print, as
// "file:line:col: what" (file relative to root), and the allowed entries
// it met.
func libraryPrinting(t *testing.T, root string) (problems []string, allowed map[string]bool) {
	t.Helper()
	allowed = map[string]bool{}
	fset := token.NewFileSet()
	eachSource(t, fset, root, "", func(rel string) bool { return printingExempt[rel] != "" }, func(rel, path string, f *ast.File) {
		if f.Name.Name == "main" {
			return // a program: its own command
		}
		for _, p := range printing(fset, f) {
			_, what, _ := strings.Cut(strings.TrimPrefix(p, path+":"), ": ")
			if key := rel + ": " + what; printingAllowed[key] != "" {
				allowed[key] = true
				continue
			}
			problems = append(problems, rel+strings.TrimPrefix(p, path))
		}
	})
	return problems, allowed
}

func TestOnlyTheCommandPrints(t *testing.T) {
	problems, allowed := libraryPrinting(t, repoRoot(t))
	for _, p := range problems {
		t.Errorf("%s: only the command prints for people (cmd/forkline, through internal/ui)", p)
	}
	for key, why := range printingAllowed {
		if !allowed[key] {
			t.Errorf("printingAllowed names %q (%s), which is no longer in the source: drop the entry", key, why)
		}
	}
}

// The rule itself, on synthetic packages: a library that prints in each
// way is caught, one that takes a writer is not, and a program may print.
func TestPrintingRuleCatchesALibraryThatPrints(t *testing.T) {
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
	write("lib/lib.go", `package lib

import (
	"fmt"
	"io"
	stdlog "log"
	"os"
)

type Report struct{ N int }

func (r Report) Print(w io.Writer) { fmt.Fprintf(w, "%d\n", r.N) }
func (r *Report) WriteText(w io.Writer) {}
func PrintReport(r Report) {}

func run() {
	fmt.Fprintln(os.Stderr, "hello")
	fmt.Println("hello")
	stdlog.Printf("x")
	println("x")
	out := os.Stdout
	_ = out
}
`)
	write("quiet/quiet.go", `package quiet

import (
	"fmt"
	"io"
	"os"
)

type Report struct{ N int }

func (r Report) printf(w io.Writer) { fmt.Fprintf(w, "%d\n", r.N) }
func Open(p string) (*os.File, error) { return os.Open(p) }
`)
	write("lib/lib_test.go", "package lib\n\nimport \"fmt\"\n\nfunc x() { fmt.Println() }\n")
	write("tool/main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"a program prints\") }\n")
	write("cmd/x/main.go", "package x\n\nimport \"fmt\"\n\nfunc Print() { fmt.Println() }\n")
	problems, _ := libraryPrinting(t, root)
	want := []string{
		"lib/lib.go:12:1: defines Print, a rendering for people (it belongs in internal/ui)",
		"lib/lib.go:13:1: defines WriteText, a rendering for people (it belongs in internal/ui)",
		"lib/lib.go:14:1: defines PrintReport, a rendering for people (it belongs in internal/ui)",
		"lib/lib.go:17:15: uses os.Stderr",
		"lib/lib.go:18:2: calls fmt.Println (standard output)",
		"lib/lib.go:19:2: calls log.Printf (the standard logger writes to standard error)",
		"lib/lib.go:20:2: calls the builtin println (standard error)",
		"lib/lib.go:21:9: uses os.Stdout",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
}
