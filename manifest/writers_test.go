package manifest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// entryFields are the manifest's entries this package owns.
var entryFields = map[string]bool{"Provider": true, "Policy": true, "Plan": true, "Summary": true}

// Every writer of the module's code builds the manifest's entries with this
// package's types, and every reader decodes them with its decoders: an
// entry of a shard.Manifest is set only from an Encode() of one of them (or
// copied from another manifest's same entry), and nothing outside this
// package json.Unmarshals an entry into a struct of its own. A map literal
// or a private copy of a struct would let the two sides disagree again
// (inspect read the policy's conversation as strings while the policy
// wrote a bool, a number and a list).
func TestEntriesAreWrittenAndReadByTheirTypes(t *testing.T) {
	fset := token.NewFileSet()
	var problems []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "node_modules", ".git":
				return filepath.SkipDir
			}
			if path == filepath.Join("..", "manifest") || path == filepath.Join("..", "formats", "shard") {
				return filepath.SkipDir // the owner, and the store of raw entries
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			problems = append(problems, checkFunc(fset, fn.Body)...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// checkFunc checks one function body: the entries it sets and the entries
// it unmarshals.
func checkFunc(fset *token.FileSet, body *ast.BlockStmt) []string {
	encoded := map[string]bool{} // variables assigned an Encode() result
	manifests := map[string]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, rhs := range n.Rhs {
				if isEncode(rhs) {
					if len(n.Rhs) == 1 {
						if id, ok := n.Lhs[0].(*ast.Ident); ok {
							encoded[id.Name] = true
						}
					} else if id, ok := n.Lhs[i].(*ast.Ident); ok {
						encoded[id.Name] = true
					}
				}
			}
		case *ast.FuncLit:
			for _, p := range n.Type.Params.List {
				if isManifestType(p.Type) {
					for _, name := range p.Names {
						manifests[name.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			if isManifestType(n.Type) {
				for _, name := range n.Names {
					manifests[name.Name] = true
				}
			}
		}
		return true
	})
	ok := func(field string, rhs ast.Expr) bool {
		switch r := rhs.(type) {
		case *ast.Ident:
			return r.Name == "nil" || encoded[r.Name]
		case *ast.SelectorExpr:
			return r.Sel.Name == field // copied from another manifest
		}
		return isEncode(rhs)
	}
	var problems []string
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if !isManifestType(n.Type) {
				return true
			}
			for _, e := range n.Elts {
				kv, isKV := e.(*ast.KeyValueExpr)
				if !isKV {
					continue
				}
				key, _ := kv.Key.(*ast.Ident)
				if key != nil && entryFields[key.Name] && !ok(key.Name, kv.Value) {
					problems = append(problems, fset.Position(kv.Pos()).String()+": shard.Manifest."+key.Name+" is not set from a manifest type's Encode()")
				}
			}
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				sel, isSel := lhs.(*ast.SelectorExpr)
				if !isSel || !entryFields[sel.Sel.Name] || i >= len(n.Rhs) {
					continue
				}
				if x, isIdent := sel.X.(*ast.Ident); isIdent && manifests[x.Name] && !ok(sel.Sel.Name, n.Rhs[i]) {
					problems = append(problems, fset.Position(n.Pos()).String()+": "+x.Name+"."+sel.Sel.Name+" is not set from a manifest type's Encode()")
				}
			}
		case *ast.CallExpr:
			if fun, isSel := n.Fun.(*ast.SelectorExpr); isSel && fun.Sel.Name == "Unmarshal" && len(n.Args) == 2 {
				if pkg, isIdent := fun.X.(*ast.Ident); isIdent && pkg.Name == "json" {
					if arg, isSel := n.Args[0].(*ast.SelectorExpr); isSel && entryFields[arg.Sel.Name] {
						problems = append(problems, fset.Position(n.Pos()).String()+": the manifest's "+arg.Sel.Name+" entry is unmarshalled into a private struct; use the manifest package's decoder")
					}
				}
			}
		}
		return true
	})
	return problems
}

func isEncode(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Encode"
}

// isManifestType reports whether e is shard.Manifest or *shard.Manifest.
func isManifestType(e ast.Expr) bool {
	if star, ok := e.(*ast.StarExpr); ok {
		e = star.X
	}
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Manifest" {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "shard"
}

// The check finds what the commands did before the entries had types: a
// map literal marshalled into an entry, and an entry unmarshalled into a
// private struct.
func TestTheEntryCheckFindsMapLiteralsAndPrivateCopies(t *testing.T) {
	src := `package p
func openOutput(providerRec json.RawMessage) {
	rec, _ := json.Marshal(map[string]any{"name": "local"})
	m := shard.Manifest{Provider: rec, Policy: providerRec}
	w.Update(func(m *shard.Manifest) { m.Summary = rec })
	var p struct{ Repeats int }
	json.Unmarshal(m.Plan, &p)
	good := Plan{}.Encode()
	_ = shard.Manifest{Plan: good, Provider: other.Provider}
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "old.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	problems := checkFunc(fset, f.Decls[0].(*ast.FuncDecl).Body)
	if len(problems) != 4 {
		t.Fatalf("want the 4 old forms found (Provider, Policy, Summary, the Plan read), got %q", problems)
	}
}
