package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// rule is one row of the README's layout table: the packages it names (paths
// relative to the module) and what they may import of the module.
type rule struct {
	line     int
	packages []string
	anything bool     // "anything": no constraint
	allowed  []string // module packages they may import; a trailing "/..." allows a subtree
}

// parseLayout reads the first markdown table whose header is
// "| package | owns | may import |" under the "## Layout" heading.
func parseLayout(readme []byte) ([]rule, error) {
	var rules []rule
	inSection, inTable := false, false
	sc := bufio.NewScanner(bytes.NewReader(readme))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "## "):
			if inTable {
				return rules, nil
			}
			inSection = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == "Layout"
		case !inSection:
		case !strings.HasPrefix(line, "|"):
			if inTable {
				return rules, nil
			}
		default:
			cells := splitRow(line)
			if !inTable {
				if len(cells) == 3 && cells[0] == "package" && cells[1] == "owns" && cells[2] == "may import" {
					inTable = true
				}
				continue
			}
			if strings.Trim(cells[0], "-: ") == "" {
				continue // the separator row
			}
			if len(cells) != 3 {
				return nil, fmt.Errorf("README.md:%d: a layout row has %d cells, want 3 (package, owns, may import)", n, len(cells))
			}
			r := rule{line: n, packages: names(cells[0])}
			switch may := strings.ToLower(strings.Trim(cells[2], "` ")); {
			case may == "anything":
				r.anything = true
			case may == "std only" || strings.HasPrefix(may, "std only "):
			default:
				r.allowed = names(cells[2])
			}
			if len(r.packages) == 0 {
				return nil, fmt.Errorf("README.md:%d: a layout row names no package", n)
			}
			rules = append(rules, r)
		}
	}
	if !inTable {
		return nil, fmt.Errorf("README.md: no \"## Layout\" section with a | package | owns | may import | table")
	}
	return rules, sc.Err()
}

func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	cells := strings.Split(line, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// names splits a cell such as "`providers/local`, `providers/docker`" into
// package paths.
func names(cell string) []string {
	var out []string
	for _, f := range strings.Split(cell, ",") {
		f = strings.Trim(strings.TrimSpace(f), "`")
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// covers reports whether pattern (a package path, or a subtree "x/...")
// names pkg.
func covers(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pattern == pkg
}

// check returns every way graph (module package → the module packages it
// imports, paths relative to the module) breaks rules: an import not
// allowed, a package no row names, a row naming a package that does not
// exist.
func check(rules []rule, graph map[string][]string) []string {
	var problems []string
	ruleFor := map[string]*rule{}
	for i := range rules {
		r := &rules[i]
		matched := false
		for _, p := range r.packages {
			for pkg := range graph {
				if covers(p, pkg) {
					matched = true
					if prev, dup := ruleFor[pkg]; dup && prev != r {
						problems = append(problems, fmt.Sprintf("%s: named by the rows of README.md:%d and :%d", pkg, prev.line, r.line))
					}
					ruleFor[pkg] = r
				}
			}
			if !matched {
				problems = append(problems, fmt.Sprintf("README.md:%d names %s, which is not a package of the module", r.line, p))
			}
			matched = false
		}
	}
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, pkg := range pkgs {
		r, ok := ruleFor[pkg]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: no row of the README's layout table names it", pkg))
			continue
		}
		if r.anything {
			continue
		}
		for _, imp := range graph[pkg] {
			if !slices.ContainsFunc(r.allowed, func(a string) bool { return covers(a, imp) }) {
				problems = append(problems, fmt.Sprintf("%s imports %s, which README.md:%d does not allow (may import: %s)",
					pkg, imp, r.line, allowedText(r)))
			}
		}
	}
	return problems
}

func allowedText(r *rule) string {
	if len(r.allowed) == 0 {
		return "std only"
	}
	return strings.Join(r.allowed, ", ")
}

// moduleGraph lists the module's packages and their non-test imports of
// the module, by `go list`.
func moduleGraph(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Module", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	var module string
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
			Module     *struct{ Path string }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Module == nil {
			continue
		}
		module = p.Module.Path
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if rel == "" {
			rel = "."
		}
		var deps []string
		for _, imp := range p.Imports {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok {
				deps = append(deps, r)
			}
		}
		graph[rel] = deps
	}
	return graph
}

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestImportsFollowTheLayout is the architecture test: the real import
// graph against the README's table.
func TestImportsFollowTheLayout(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := parseLayout(readme)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range check(rules, moduleGraph(t, root)) {
		t.Error(p)
	}
}

// The checker itself, on a synthetic house: it must fail on a forbidden
// import, a package the table forgets and a row for a package that is gone,
// and pass on a house that keeps its rules.
func TestCheckerCatchesWhatBreaksTheLayout(t *testing.T) {
	readme := []byte(`# x

## Layout

| package | owns | may import |
|---|---|---|
| ` + "`runtime`" + ` | the waist | std only |
| ` + "`providers`, `pool`" + ` | sandboxes | ` + "`runtime`" + ` |
| ` + "`formats/...`" + ` | files | ` + "`runtime`" + ` |
| ` + "`cmd/x`" + ` | the command | anything |

## Next
`)
	rules, err := parseLayout(readme)
	if err != nil {
		t.Fatal(err)
	}
	good := map[string][]string{
		"runtime":       nil,
		"providers":     {"runtime"},
		"pool":          {"runtime"},
		"formats/a":     {"runtime"},
		"formats/a/sub": nil,
		"cmd/x":         {"pool", "formats/a"},
	}
	if p := check(rules, good); len(p) != 0 {
		t.Fatalf("a house that keeps its rules is refused: %v", p)
	}
	for _, tc := range []struct {
		name  string
		graph func(map[string][]string)
		want  string
	}{
		{"the waist imports a provider", func(g map[string][]string) { g["runtime"] = []string{"providers"} },
			"runtime imports providers, which README.md:7 does not allow (may import: std only)"},
		{"a sideways import", func(g map[string][]string) { g["pool"] = []string{"runtime", "formats/a"} },
			"pool imports formats/a, which README.md:8 does not allow (may import: runtime)"},
		{"a package the table forgets", func(g map[string][]string) { g["serve"] = nil },
			"serve: no row of the README's layout table names it"},
		{"a row for a package that is gone", func(g map[string][]string) { delete(g, "pool") },
			"README.md:8 names pool, which is not a package of the module"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := map[string][]string{}
			for k, v := range good {
				g[k] = slices.Clone(v)
			}
			tc.graph(g)
			if p := check(rules, g); !slices.Contains(p, tc.want) {
				t.Fatalf("want %q among the problems, got %q", tc.want, p)
			}
		})
	}
	if _, err := parseLayout([]byte("# no table\n")); err == nil {
		t.Fatal("a README without a layout table is accepted")
	}
}
