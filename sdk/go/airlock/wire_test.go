package airlock

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestReexportsWire: every exported type and constant of the wire schema (api/wire) has its alias
// here, under its own name, so that SDK users name every wire type as airlock.X.
func TestReexportsWire(t *testing.T) {
	wireNames := exportedDecls(t, filepath.Join("..", "..", "..", "api", "wire", "*.go"), "")
	if len(wireNames) == 0 {
		t.Fatal("found no declarations in api/wire")
	}
	aliases := exportedDecls(t, "wire.go", "wire")
	for name, kind := range wireNames {
		if aliases[name] != kind {
			t.Errorf("wire.%s (%s) is not re-exported: add \"%s %s = wire.%s\" to wire.go", name, kind, kind, name, name)
		}
	}
}

// exportedDecls reports the exported types and constants the files of glob declare ("type" or
// "const"), skipping tests. With from set, it keeps only declarations whose value is from.Name.
func exportedDecls(t *testing.T, glob, from string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || (g.Tok != token.TYPE && g.Tok != token.CONST) {
				continue
			}
			for _, s := range g.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && (from == "" || s.Assign.IsValid() && refersTo(s.Type, from, s.Name.Name)) {
						out[s.Name.Name] = "type"
					}
				case *ast.ValueSpec:
					for i, n := range s.Names {
						if n.IsExported() && (from == "" || i < len(s.Values) && refersTo(s.Values[i], from, n.Name)) {
							out[n.Name] = "const"
						}
					}
				}
			}
		}
	}
	return out
}

// refersTo reports whether e is pkg.name.
func refersTo(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && sel.Sel.Name == name
}
