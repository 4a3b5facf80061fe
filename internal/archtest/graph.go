package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Graph is the module's package graph, as `go list` reports it for this machine's GOOS and GOARCH.
type Graph struct {
	// Module is the module's path; Root its directory.
	Module, Root string
	// Packages are the module's packages, sorted by path.
	Packages []*Package
	byPath   map[string]*Package
	// exports are the export data's files by full import path, when loaded with them.
	exports map[string]string
}

// Package is one package of the module. Its paths, and the paths it imports that are in the module,
// are relative to the module (internal/node); paths outside the module are full (net/http).
type Package struct {
	Path string
	// Name is the package's name (main for a command).
	Name string
	Dir  string
	// GoFiles are the non-test files of the build (cgo files included), TestFiles the test files
	// (package p and package p_test), all as full paths.
	GoFiles, TestFiles []string
	// Imports are the non-test files' imports; TestImports those of the test files (both packages).
	Imports, TestImports []string
	// Deps are every package the non-test code links, directly or through others.
	Deps []string
}

// listed is what `go list -json` reports of a package, the fields used here.
type listed struct {
	ImportPath, Name, Dir, Export                string
	GoFiles, CgoFiles, TestGoFiles, XTestGoFiles []string
	Imports, TestImports, XTestImports, Deps     []string
	Module                                       *struct {
		Path, Dir string
		Main      bool
	}
	Error *struct{ Err string }
}

// Load lists the packages of the module that holds dir (./... at its root). With export, it also
// builds them and records the export data of each and of every package they link (for Measure's
// method sets).
func Load(dir string, export bool) (*Graph, error) {
	env := exec.Command("go", "env", "GOMOD")
	env.Dir = dir
	gomod, err := env.Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOMOD: %w", err)
	}
	if p := strings.TrimSpace(string(gomod)); p == "" || p == os.DevNull {
		return nil, fmt.Errorf("%s is in no module", dir)
	} else {
		dir = filepath.Dir(p)
	}
	args := []string{"list", "-json"}
	if export {
		args = append(args, "-export", "-deps")
	}
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	g := &Graph{byPath: map[string]*Package{}, exports: map[string]string{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	var all []listed
	for {
		var l listed
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode go list: %w", err)
		}
		if l.Error != nil {
			return nil, fmt.Errorf("go list %s: %s", l.ImportPath, l.Error.Err)
		}
		if l.Export != "" {
			g.exports[l.ImportPath] = l.Export
		}
		if l.Module == nil || !l.Module.Main {
			continue // a dependency, listed for its export data
		}
		if g.Module == "" {
			g.Module, g.Root = l.Module.Path, l.Module.Dir
		}
		all = append(all, l)
	}
	for _, l := range all {
		p := &Package{Path: g.Rel(l.ImportPath), Name: l.Name, Dir: l.Dir}
		for _, f := range slices.Concat(l.GoFiles, l.CgoFiles) {
			p.GoFiles = append(p.GoFiles, filepath.Join(l.Dir, f))
		}
		for _, f := range slices.Concat(l.TestGoFiles, l.XTestGoFiles) {
			p.TestFiles = append(p.TestFiles, filepath.Join(l.Dir, f))
		}
		p.Imports = g.rels(l.Imports)
		p.TestImports = g.rels(slices.Concat(l.TestImports, l.XTestImports))
		p.Deps = g.rels(l.Deps)
		g.Packages = append(g.Packages, p)
		g.byPath[p.Path] = p
	}
	slices.SortFunc(g.Packages, func(a, b *Package) int { return strings.Compare(a.Path, b.Path) })
	return g, nil
}

// Rel reports the path of an import path in the graph: relative to the module for the module's
// packages, unchanged for the others.
func (g *Graph) Rel(path string) string {
	if path == g.Module {
		return "."
	}
	if r, ok := strings.CutPrefix(path, g.Module+"/"); ok {
		return r
	}
	return path
}

// rels reports the graph paths of import paths, sorted and without the package itself (an
// external test package imports the package it tests).
func (g *Graph) rels(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		out = append(out, g.Rel(p))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Package reports the module's package at path (relative to the module), or nil.
func (g *Graph) Package(path string) *Package { return g.byPath[path] }

// InModule reports whether path names one of the module's packages.
func (g *Graph) InModule(path string) bool { return g.byPath[path] != nil }

// where reports the files and lines (relative to the module's root) where pkg's non-test files (or,
// with tests, its test files) import imp, for messages; "" if none was found.
func (g *Graph) where(pkg *Package, imp string, tests bool) string {
	files := pkg.GoFiles
	if tests {
		files = pkg.TestFiles
	}
	full := imp
	if g.InModule(imp) {
		full = g.Module + "/" + imp
	}
	var at []string
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			continue
		}
		for _, s := range af.Imports {
			if p, err := strconv.Unquote(s.Path.Value); err == nil && p == full {
				pos := fset.Position(s.Pos())
				rel, err := filepath.Rel(g.Root, pos.Filename)
				if err != nil {
					rel = pos.Filename
				}
				at = append(at, fmt.Sprintf("%s:%d", rel, pos.Line))
			}
		}
	}
	return strings.Join(at, ", ")
}

// chain reports a shortest path of non-test imports from the package from to the package to, both
// in the graph's paths, for messages about what a package links: from, ..., to; nil if none.
func (g *Graph) chain(from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var path []string
			for n := to; n != ""; n = prev[n] {
				path = append(path, n)
			}
			slices.Reverse(path)
			return path
		}
		p := g.byPath[cur]
		if p == nil {
			continue
		}
		for _, imp := range p.Imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return nil
}
