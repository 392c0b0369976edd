package testrules

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// failNowMethods are the methods of testing.TB that end the test goroutine.
var failNowMethods = map[string]bool{"Fatal": true, "Fatalf": true, "FailNow": true, "Skip": true, "Skipf": true, "SkipNow": true}

// offTestGoroutine reports, for a call, which of its function literal
// arguments run on another goroutine, and where: the body of a go
// statement's literal, a literal passed to a method named Go (sync.WaitGroup,
// conc and errgroup pools), to a pool's Run(ctx, jobs, fn), to AfterFunc, or
// converted to an http.HandlerFunc.
func offTestGoroutine(n ast.Node) (lits []*ast.FuncLit, where string) {
	switch x := n.(type) {
	case *ast.GoStmt:
		if lit, ok := x.Call.Fun.(*ast.FuncLit); ok {
			return []*ast.FuncLit{lit}, "a go statement"
		}
	case *ast.CallExpr:
		name := ""
		switch f := x.Fun.(type) {
		case *ast.SelectorExpr:
			name = f.Sel.Name
		case *ast.Ident:
			name = f.Name
		}
		switch {
		case name == "Go", name == "AfterFunc", name == "HandlerFunc", name == "Run" && len(x.Args) == 3:
			for _, a := range x.Args {
				if lit, ok := a.(*ast.FuncLit); ok {
					lits = append(lits, lit)
				}
			}
			return lits, "a function passed to " + name
		}
	}
	return nil, ""
}

// failsNow reports whether call ends the test goroutine: require.*, a
// FailNow method of t, or a function of the package known to do so (fails)
// given t.
func failsNow(call *ast.CallExpr, fails map[string]bool) (string, bool) {
	if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
		if id, ok := sel.X.(*ast.Ident); ok {
			if id.Name == "require" {
				return "require." + sel.Sel.Name, true
			}
			if (id.Name == "t" || id.Name == "tb" || id.Name == "b") && failNowMethods[sel.Sel.Name] {
				return id.Name + "." + sel.Sel.Name, true
			}
		}
	}
	if id, ok := call.Fun.(*ast.Ident); ok && fails[id.Name] {
		for _, a := range call.Args {
			if t, ok := a.(*ast.Ident); ok && (t.Name == "t" || t.Name == "tb") {
				return id.Name + "(t, ...)", true
			}
		}
	}
	return "", false
}

// failingHelpers are the package's functions that may end the test
// goroutine, directly or through each other.
func failingHelpers(files []*ast.File) map[string]bool {
	bodies := map[string]*ast.BlockStmt{}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Body != nil {
				bodies[fd.Name.Name] = fd.Body
			}
		}
	}
	fails := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for name, body := range bodies {
			if fails[name] {
				continue
			}
			ast.Inspect(body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if _, ok := failsNow(c, fails); ok {
						fails[name], changed = true, true
						return false
					}
				}
				return true
			})
		}
	}
	return fails
}

// violations lists every call that ends the test goroutine from another
// goroutine in the test files of dir's packages.
func violations(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != dir && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		fset := token.NewFileSet()
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		pkgs := map[string][]*ast.File{} // x and x_test, each with its own helpers
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(path, e.Name()), nil, 0)
			if err != nil {
				return err
			}
			pkgs[f.Name.Name] = append(pkgs[f.Name.Name], f)
		}
		for _, files := range pkgs {
			fails := failingHelpers(files)
			for _, f := range files {
				ast.Inspect(f, func(n ast.Node) bool {
					lits, where := offTestGoroutine(n)
					for _, lit := range lits {
						ast.Inspect(lit.Body, func(n ast.Node) bool {
							if c, ok := n.(*ast.CallExpr); ok {
								if what, ok := failsNow(c, fails); ok {
									rel, _ := filepath.Rel(dir, fset.Position(c.Pos()).Filename)
									out = append(out, fmt.Sprintf("%s:%d: %s in %s", rel, fset.Position(c.Pos()).Line, what, where))
								}
							}
							return true
						})
					}
					return true
				})
			}
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

func TestNoFailNowOffTheTestGoroutine(t *testing.T) {
	got, err := violations("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > 0 {
		t.Errorf("these calls end the test goroutine from another goroutine (record the failure and check it on the test goroutine, or use assert/t.Errorf):\n  %s",
			strings.Join(got, "\n  "))
	}
}

// TestTheRuleFindsWhatItLooksFor runs the rule on a synthetic test file
// with one violation of each kind and one of each allowed form, so the
// rule above cannot pass by finding nothing.
func TestTheRuleFindsWhatItLooksFor(t *testing.T) {
	dir := t.TempDir()
	src := `package x

import "testing"

func helper(t *testing.T) { t.Fatal("x") }
func viaHelper(t *testing.T) { helper(t) }
func harmless(t *testing.T) { t.Log("x") }

func TestX(t *testing.T) {
	go func() { require.NoError(t, nil) }()
	wg.Go(func() { t.Fatalf("x") })
	p.Run(ctx, jobs, func(ctx context.Context, j Job, r Replica, err error) Outcome { viaHelper(t); return 0 })
	http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.FailNow() })
	go func() { t.Errorf("fine"); assert.NoError(t, nil); harmless(t) }()
	t.Run("sub", func(t *testing.T) { require.NoError(t, nil) })
	require.NoError(t, nil)
}
`
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := violations(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"x_test.go:10: require.NoError in a go statement",
		"x_test.go:11: t.Fatalf in a function passed to Go",
		"x_test.go:12: viaHelper(t, ...) in a function passed to Run",
		"x_test.go:13: t.FailNow in a function passed to HandlerFunc",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
