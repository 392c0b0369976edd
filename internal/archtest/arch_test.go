package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
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

// ban is one row of the README's "must not import" table: the packages it
// names must not depend on any package forbidden names, directly or through
// their imports.
type ban struct {
	line      int
	packages  []string
	forbidden []string // module packages relative, others by import path; "/..." a subtree
}

// parseBans reads the table whose header is "| package | must not import |"
// under the "## Layout" heading; a README without one has no bans.
func parseBans(readme []byte) ([]ban, error) {
	var bans []ban
	inSection, inTable := false, false
	sc := bufio.NewScanner(bytes.NewReader(readme))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "## "):
			inSection = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == "Layout"
			inTable = false
		case !inSection || !strings.HasPrefix(line, "|"):
			inTable = false
		case !inTable:
			cells := splitRow(line)
			inTable = len(cells) == 2 && cells[0] == "package" && cells[1] == "must not import"
		default:
			cells := splitRow(line)
			if strings.Trim(cells[0], "-: ") == "" {
				continue
			}
			if len(cells) != 2 {
				return nil, fmt.Errorf("README.md:%d: a must-not-import row has %d cells, want 2 (package, must not import)", n, len(cells))
			}
			b := ban{line: n, packages: names(cells[0]), forbidden: names(cells[1])}
			if len(b.packages) == 0 || len(b.forbidden) == 0 {
				return nil, fmt.Errorf("README.md:%d: a must-not-import row names no package or nothing forbidden", n)
			}
			bans = append(bans, b)
		}
	}
	return bans, sc.Err()
}

// checkBans returns every way a package named by bans depends, in all (each
// package to its direct imports), on one a ban forbids, with the chain of
// imports that reaches it; and every row naming a package that is not in
// all.
func checkBans(bans []ban, all map[string][]string) []string {
	var problems []string
	for _, b := range bans {
		for _, pkg := range b.packages {
			if _, ok := all[pkg]; !ok {
				problems = append(problems, fmt.Sprintf("README.md:%d names %s, which is not a package of the module", b.line, pkg))
				continue
			}
			// Breadth first from pkg: the first path found to each
			// dependency is a shortest one.
			via := map[string]string{pkg: ""}
			queue := []string{pkg}
			for len(queue) > 0 {
				cur := queue[0]
				queue = queue[1:]
				for _, imp := range all[cur] {
					if _, seen := via[imp]; seen {
						continue
					}
					via[imp] = cur
					queue = append(queue, imp)
					if !slices.ContainsFunc(b.forbidden, func(f string) bool { return covers(f, imp) }) {
						continue
					}
					chain := []string{imp}
					for p := cur; p != ""; p = via[p] {
						chain = append([]string{p}, chain...)
					}
					problems = append(problems, fmt.Sprintf("%s depends on %s (%s), which README.md:%d forbids",
						pkg, imp, strings.Join(chain, " → "), b.line))
				}
			}
		}
	}
	return problems
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

// importGraph lists, by `go list`, the module's packages and their
// non-test imports of the module (module), and every package the module's
// packages depend on (the module's relative, others by their import path,
// the standard library left out) with all its imports named the same way
// (all).
func importGraph(t *testing.T, root string) (module, all map[string][]string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Module,Standard", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	type pkg struct {
		ImportPath string
		Imports    []string
		Standard   bool
		Module     *struct {
			Path string
			Main bool
		}
	}
	var pkgs []pkg
	var mod string
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Module != nil && p.Module.Main {
			mod = p.Module.Path
		}
		pkgs = append(pkgs, p)
	}
	name := func(path string) string {
		if path == mod {
			return "."
		}
		if r, ok := strings.CutPrefix(path, mod+"/"); ok {
			return r
		}
		return path
	}
	module, all = map[string][]string{}, map[string][]string{}
	for _, p := range pkgs {
		if p.Standard {
			continue
		}
		var mine, deps []string
		for _, imp := range p.Imports {
			if r, ok := strings.CutPrefix(imp, mod+"/"); ok {
				mine = append(mine, r)
			}
			deps = append(deps, name(imp))
		}
		all[name(p.ImportPath)] = deps
		if p.Module != nil && p.Module.Main {
			module[name(p.ImportPath)] = mine
		}
	}
	return module, all
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
	bans, err := parseBans(readme)
	if err != nil {
		t.Fatal(err)
	}
	if len(bans) == 0 {
		t.Fatal("the README's Layout section has no | package | must not import | table")
	}
	module, all := importGraph(t, root)
	for _, p := range check(rules, module) {
		t.Error(p)
	}
	for _, p := range checkBans(bans, all) {
		t.Error(p)
	}
}

// folder is the top-level folder a module package lives in ("export" for
// export/loadertest, "." for the module root).
func folder(pkg string) string {
	top, _, _ := strings.Cut(pkg, "/")
	return top
}

// folderCycles lists every pair of top-level folders that import each
// other through their packages, each with one import each way: an arrow
// that runs back up (a change to one side's model then touches both
// folders). Imports inside one folder are not arrows between folders.
func folderCycles(module map[string][]string) []string {
	type edge struct{ from, to string }
	example := map[edge]string{}
	for _, pkg := range slices.Sorted(maps.Keys(module)) {
		for _, imp := range module[pkg] {
			e := edge{folder(pkg), folder(imp)}
			if e.from == e.to {
				continue
			}
			if _, ok := example[e]; !ok {
				example[e] = pkg + " imports " + imp
			}
		}
	}
	var problems []string
	for e, one := range example {
		back, ok := example[edge{e.to, e.from}]
		if !ok || e.from > e.to {
			continue
		}
		problems = append(problems, fmt.Sprintf("the folders %s and %s import each other: %s, and %s", e.from, e.to, one, back))
	}
	slices.Sort(problems)
	return problems
}

// No two top-level folders import each other (formats and export did: the
// targets in formats/ imported export's model, and export imports the
// targets; the model now lives in formats/model).
func TestNoTwoFoldersImportEachOther(t *testing.T) {
	module, _ := importGraph(t, repoRoot(t))
	for _, p := range folderCycles(module) {
		t.Error(p)
	}
	// The check itself, on the old arrangement.
	old := map[string][]string{
		"export":         {"export/model", "formats/verl"},
		"export/model":   {"runtime"},
		"formats/verl":   {"export/model", "runtime"},
		"formats/shard":  {"schemas"},
		"runtime":        nil,
		"export/example": {"export"},
	}
	got := folderCycles(old)
	want := []string{"the folders export and formats import each other: export imports formats/verl, and formats/verl imports export/model"}
	if !slices.Equal(got, want) {
		t.Errorf("on the old arrangement:\n got %q\nwant %q", got, want)
	}
}

// The real house with one synthetic import of providers/all from collect:
// both tables refuse it, and the must-not-import check names the backends it
// drags in.
func TestSyntheticBackendImportFromCollectIsRefused(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := parseLayout(readme)
	if err != nil {
		t.Fatal(err)
	}
	bans, err := parseBans(readme)
	if err != nil {
		t.Fatal(err)
	}
	module, all := importGraph(t, root)
	if p := checkBans(bans, all); len(p) != 0 {
		t.Fatalf("the real house breaks its bans: %v", p)
	}
	module["collect"] = append(module["collect"], "providers/all")
	all["collect"] = append(all["collect"], "providers/all")
	problems := append(check(rules, module), checkBans(bans, all)...)
	for _, want := range []string{
		"collect imports providers/all, which README.md:",
		"collect depends on providers/all (collect → providers/all), which README.md:",
		"collect depends on providers/docker (collect → providers/all → providers/docker)",
		"collect depends on providers/browser (collect → providers/all → providers/browser)",
		"collect depends on github.com/moby/moby/client (",
		"collect depends on github.com/chromedp/chromedp (",
	} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("no problem starts with %q; got:\n%s", want, strings.Join(problems, "\n"))
		}
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
