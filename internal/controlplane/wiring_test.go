package controlplane

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"
)

// TestPartsKeepToThemselves: the control plane's parts (wiring.go) reach one another only through
// methods, never another part's fields, and each part holds only fields its methods use.
func TestPartsKeepToThemselves(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	structs := map[string]*ast.StructType{}
	methods := map[string]map[string]bool{}
	var funcs []*ast.FuncDecl
	for _, f := range pkgs["controlplane"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					if ts, ok := sp.(*ast.TypeSpec); ok {
						if st, ok := ts.Type.(*ast.StructType); ok {
							structs[ts.Name.Name] = st
						}
					}
				}
			case *ast.FuncDecl:
				if name := recvType(d); name != "" {
					if methods[name] == nil {
						methods[name] = map[string]bool{}
					}
					methods[name][d.Name.Name] = true
					funcs = append(funcs, d)
				}
			}
		}
	}
	svc := structs["Service"]
	if svc == nil {
		t.Fatal("no Service struct")
	}
	parts := map[string]bool{}
	for _, f := range svc.Fields.List {
		if len(f.Names) != 0 {
			t.Errorf("Service has the named field %s: it should only embed its parts", f.Names[0].Name)
			continue
		}
		parts[f.Type.(*ast.StarExpr).X.(*ast.Ident).Name] = true
	}
	if len(parts) < 9 {
		t.Fatalf("Service embeds %d parts, want the 9 of wiring.go", len(parts))
	}
	// fieldPart[part][field] is the part a field points to ("" for other dependencies).
	fieldPart := map[string]map[string]string{}
	for p := range parts {
		fieldPart[p] = map[string]string{}
		for _, f := range structs[p].Fields.List {
			to := ""
			if se, ok := f.Type.(*ast.StarExpr); ok {
				if id, ok := se.X.(*ast.Ident); ok && parts[id.Name] {
					to = id.Name
				}
			}
			for _, n := range f.Names {
				fieldPart[p][n.Name] = to
			}
		}
	}
	used := map[string]map[string]bool{}
	for _, fd := range funcs {
		p := recvType(fd)
		if !parts[p] || len(fd.Recv.List[0].Names) == 0 || fd.Body == nil {
			continue
		}
		if used[p] == nil {
			used[p] = map[string]bool{}
		}
		recv := fd.Recv.List[0].Names[0].Name
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			se, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := se.X.(*ast.Ident); ok && id.Name == recv {
				used[p][se.Sel.Name] = true
				return true
			}
			inner, ok := se.X.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := inner.X.(*ast.Ident); !ok || id.Name != recv {
				return true
			}
			if to := fieldPart[p][inner.Sel.Name]; to != "" && !methods[to][se.Sel.Name] {
				t.Errorf("%s: (%s).%s reaches into %s.%s, which is not a method of %s", fset.Position(se.Pos()), p, fd.Name.Name, inner.Sel.Name, se.Sel.Name, to)
			}
			return true
		})
	}
	for p := range parts {
		var unused []string
		for f := range fieldPart[p] {
			if !used[p][f] {
				unused = append(unused, f)
			}
		}
		sort.Strings(unused)
		if len(unused) > 0 {
			t.Errorf("part %s holds fields none of its methods use: %s", p, strings.Join(unused, ", "))
		}
	}
}

func recvType(fd *ast.FuncDecl) string {
	if fd.Recv == nil {
		return ""
	}
	if se, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
		if id, ok := se.X.(*ast.Ident); ok {
			return id.Name
		}
	}
	return ""
}
