package archtest

import (
	"bytes"
	"cmp"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// The limits issue 41's redesign is to meet (its acceptance); Measure reports what exceeds them.
const (
	// MaxPackageLines is the most lines of non-test code a package may have.
	MaxPackageLines = 5000
	// MaxMethods is the most methods a type may have (the method set of *T: value and pointer
	// receivers, and the methods promoted from embedded fields).
	MaxMethods = 40
	// MaxFuncLines is the most lines a function (or method) of non-test code may span.
	MaxFuncLines = 120
)

// Structure is what Measure reports of the module's code. Test code is not measured against the
// limits: test files, the packages of test-only parts, and the packages only test files import (the
// conformance suites and test helpers: storetest, blobtest, fake, ...).
type Structure struct {
	// Packages are the lines of non-test code of every package outside the test-only parts, the
	// largest first.
	Packages []Figure
	// TestCode are the packages only tests import, among Packages: their lines are reported, but
	// not held to MaxPackageLines, and their types and functions are not measured.
	TestCode map[string]bool
	// Types are the types with more than MaxMethods methods, the largest first.
	Types []TypeFigure
	// Funcs are the functions longer than MaxFuncLines lines, the longest first.
	Funcs []Figure
	// Imports are the control plane's imports of what the node owns (Options.NodeOwned):
	// "PKG -> IMPORTED", in order.
	Imports []string
	// Links are what the control plane links of it through others, "PKG -> LINKED (through ...)".
	Links []string
	// Opt are the options Measure was given.
	Opt Options
}

// Figure is one measured thing: a package, a function ("internal/app.Run",
// "internal/api.(*Server).routes") or a type, and its figure.
type Figure struct {
	Name string
	N    int
}

// TypeFigure is a type's method count: N in the method set of *T (of T for an interface), Exported of
// them exported, Declared of them declared on the type itself (not promoted). Exempt types (the SDKs'
// clients) are reported, and held to no limit.
type TypeFigure struct {
	Figure
	Exported, Declared int
	Exempt             bool
}

// Options says what Measure holds apart.
type Options struct {
	// ControlPlane is the part whose imports of NodeOwned are reported.
	ControlPlane string
	// NodeOwned are the patterns of the packages the control plane is not to import.
	NodeOwned []string
	// ExemptTypes are the types held to no method limit ("sdk/go/airlock.Client").
	ExemptTypes []string
}

// DefaultOptions are issue 41's: no control-plane package imports internal/daemon/…,
// internal/runtime, internal/snapshot or internal/snapfs; no type outside the SDKs' clients has more
// than MaxMethods methods.
var DefaultOptions = Options{
	ControlPlane: "controlplane",
	NodeOwned:    []string{"internal/daemon/...", "internal/runtime/...", "internal/snapshot", "internal/snapfs"},
	ExemptTypes:  []string{"sdk/go/airlock.Client"},
}

// Measure measures the module's structure. g must have been loaded with export data (Load(dir,
// true)): the method sets are read from it, promoted methods included.
func Measure(p *Parts, g *Graph, opt Options) (*Structure, error) {
	partOf := map[string]*Part{}
	for _, pt := range p.Parts {
		for _, pat := range pt.Patterns {
			for _, pkg := range g.Packages {
				if Match(pat.Text, pkg.Path) && partOf[pkg.Path] == nil {
					partOf[pkg.Path] = pt
				}
			}
		}
	}
	s := &Structure{Opt: opt, TestCode: map[string]bool{}}
	imported := map[string]bool{} // by some package's non-test code
	for _, pkg := range g.Packages {
		for _, i := range pkg.Imports {
			imported[i] = true
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := g.exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s: load the graph with export data", path)
		}
		return os.Open(f)
	})
	for _, pkg := range g.Packages {
		if pt := partOf[pkg.Path]; pt == nil || pt.TestOnly {
			continue
		}
		testCode := pkg.Name != "main" && !imported[pkg.Path]
		if testCode {
			s.TestCode[pkg.Path] = true
		}
		lines := 0
		for _, f := range pkg.GoFiles {
			src, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("measure %s: %w", pkg.Path, err)
			}
			lines += bytes.Count(src, []byte("\n"))
			if len(src) > 0 && src[len(src)-1] != '\n' {
				lines++
			}
			af, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
			if err != nil {
				return nil, fmt.Errorf("measure %s: %w", pkg.Path, err)
			}
			for _, d := range af.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > MaxFuncLines && !testCode {
					s.Funcs = append(s.Funcs, Figure{pkg.Path + "." + funcName(fd), n})
				}
			}
		}
		s.Packages = append(s.Packages, Figure{pkg.Path, lines})

		if len(pkg.GoFiles) == 0 || pkg.Name == "main" || testCode {
			continue
		}
		tp, err := imp.Import(g.Module + "/" + strings.TrimPrefix(pkg.Path, "."))
		if err != nil {
			return nil, fmt.Errorf("measure %s: %w", pkg.Path, err)
		}
		for _, name := range tp.Scope().Names() {
			tn, ok := tp.Scope().Lookup(name).(*types.TypeName)
			if !ok || tn.IsAlias() {
				continue
			}
			named, ok := tn.Type().(*types.Named)
			if !ok {
				continue
			}
			var ms *types.MethodSet
			if types.IsInterface(named) {
				ms = types.NewMethodSet(named)
			} else {
				ms = types.NewMethodSet(types.NewPointer(named))
			}
			if ms.Len() <= MaxMethods {
				continue
			}
			exported := 0
			for i := range ms.Len() {
				if ms.At(i).Obj().Exported() {
					exported++
				}
			}
			t := pkg.Path + "." + name
			s.Types = append(s.Types, TypeFigure{Figure{t, ms.Len()}, exported, named.NumMethods(), slices.Contains(opt.ExemptTypes, t)})
		}
	}
	for _, pkg := range g.Packages {
		if pt := partOf[pkg.Path]; pt == nil || pt.Name != opt.ControlPlane {
			continue
		}
		owned := func(path string) bool {
			return g.InModule(path) && slices.ContainsFunc(opt.NodeOwned, func(pat string) bool { return Match(pat, path) })
		}
		for _, i := range pkg.Imports {
			if owned(i) {
				s.Imports = append(s.Imports, pkg.Path+" -> "+i)
			}
		}
		for _, d := range pkg.Deps {
			if owned(d) && !slices.Contains(pkg.Imports, d) {
				s.Links = append(s.Links, pkg.Path+" -> "+d+" (through "+strings.Join(g.chain(pkg.Path, d), " -> ")+")")
			}
		}
	}
	byN := func(a, b Figure) int { return cmp.Or(b.N-a.N, strings.Compare(a.Name, b.Name)) }
	slices.SortFunc(s.Packages, byN)
	slices.SortFunc(s.Funcs, byN)
	slices.SortFunc(s.Types, func(a, b TypeFigure) int { return byN(a.Figure, b.Figure) })
	return s, nil
}

// funcName names a function or method as the report does: Run, (*Server).routes, (Mask).String.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = "*", s.X
	}
	switch x := t.(type) { // a generic receiver, T[K]: its type's name
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	return "(" + star + types.ExprString(t) + ")." + fd.Name.Name
}

// Report writes the structure as text, for people.
func (s *Structure) Report(w io.Writer) {
	fmt.Fprintf(w, "Lines of non-test code per package (limit %d):\n", MaxPackageLines)
	for _, f := range s.Packages {
		mark := ""
		switch {
		case s.TestCode[f.Name]:
			mark = "  (test code: only tests import it)"
		case f.N > MaxPackageLines:
			mark = "  OVER"
		}
		fmt.Fprintf(w, "  %6d  %s%s\n", f.N, f.Name, mark)
	}
	fmt.Fprintf(w, "\nTypes with more than %d methods (method set of *T, promoted included):\n", MaxMethods)
	for _, t := range s.Types {
		exempt := ""
		if t.Exempt {
			exempt = "; an SDK's client, exempt"
		}
		fmt.Fprintf(w, "  %4d  %s  (%d exported, %d declared on it%s)\n", t.N, t.Name, t.Exported, t.Declared, exempt)
	}
	fmt.Fprintf(w, "\nFunctions longer than %d lines, outside tests:\n", MaxFuncLines)
	for _, f := range s.Funcs {
		fmt.Fprintf(w, "  %4d  %s\n", f.N, f.Name)
	}
	fmt.Fprintf(w, "\nPackages of part %s importing %s:\n", s.Opt.ControlPlane, strings.Join(s.Opt.NodeOwned, ", "))
	for _, i := range s.Imports {
		fmt.Fprintf(w, "  %s\n", i)
	}
	if len(s.Imports) == 0 {
		fmt.Fprintf(w, "  none\n")
	}
	fmt.Fprintf(w, "\n... and linking them through other packages:\n")
	for _, l := range s.Links {
		fmt.Fprintf(w, "  %s\n", l)
	}
	if len(s.Links) == 0 {
		fmt.Fprintf(w, "  none\n")
	}
}

// Debt reports the figures over the limits, one a line as the baseline file keeps them:
// "package PATH LINES", "type NAME METHODS", "func NAME LINES", sorted. Test code and exempt types
// are no debt. The control plane's imports are not listed: the parts file's exceptions hold them.
func (s *Structure) Debt() []string {
	var out []string
	for _, f := range s.Packages {
		if f.N > MaxPackageLines && !s.TestCode[f.Name] {
			out = append(out, fmt.Sprintf("package %s %d", f.Name, f.N))
		}
	}
	for _, t := range s.Types {
		if !t.Exempt {
			out = append(out, fmt.Sprintf("type %s %d", t.Name, t.N))
		}
	}
	for _, f := range s.Funcs {
		out = append(out, fmt.Sprintf("func %s %d", f.Name, f.N))
	}
	slices.Sort(out)
	return out
}

// Ratchet compares the debt now with a baseline (lines as Debt writes them; blank lines and # comments
// are skipped) and reports what got worse (a figure that grew, or something new over a limit), what is
// stale (an entry now within its limit, to be deleted) and what got better (a figure that shrank, to
// be lowered in the baseline).
func Ratchet(baseline, now []string) (worse, stale, better []string) {
	parse := func(lines []string) map[string]int {
		m := map[string]int{}
		for _, l := range lines {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			i := strings.LastIndexByte(l, ' ')
			n := 0
			if i < 0 {
				m[l] = -1 // malformed: never matches, so it reads as stale
				continue
			}
			if _, err := fmt.Sscan(l[i+1:], &n); err != nil {
				m[l] = -1
				continue
			}
			m[l[:i]] = n
		}
		return m
	}
	base, cur := parse(baseline), parse(now)
	for _, k := range slices.Sorted(maps.Keys(cur)) {
		b, ok := base[k]
		switch {
		case !ok:
			worse = append(worse, fmt.Sprintf("%s %d: new, over the limit", k, cur[k]))
		case cur[k] > b:
			worse = append(worse, fmt.Sprintf("%s %d: was %d", k, cur[k], b))
		case cur[k] < b:
			better = append(better, fmt.Sprintf("%s %d: was %d", k, cur[k], b))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(base)) {
		if _, ok := cur[k]; !ok {
			stale = append(stale, k)
		}
	}
	return worse, stale, better
}
