package archtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, pkg string
		want         bool
	}{
		{"internal/runtime", "internal/runtime", true},
		{"internal/runtime", "internal/runtime/gvisor", false},
		{"internal/runtime", "internal/runtimetest", false},
		{"internal/runtime/...", "internal/runtime", true},
		{"internal/runtime/...", "internal/runtime/gvisor", true},
		{"internal/runtime/...", "internal/runtime/vm/qemu", true},
		{"internal/runtime/...", "internal/runtimetest", false},
		{"internal/runtime/...", "internal", false},
		{"net/http", "net/http", true},
		{"net/http", "net/http/httptest", false},
	} {
		if got := Match(tc.pattern, tc.pkg); got != tc.want {
			t.Errorf("Match(%q, %q) = %v; want %v", tc.pattern, tc.pkg, got, tc.want)
		}
	}
}

// pkg is a package of a made-up graph: its path, then what its code imports; deps are computed.
type pkg struct {
	path    string
	imports []string
	tests   []string // what its test files import
}

// graphOf makes a graph of the module example.com/m from pkgs, with each package's deps (what its
// code links) computed from the imports, as go list would report them.
func graphOf(pkgs ...pkg) *Graph {
	g := &Graph{Module: "example.com/m", byPath: map[string]*Package{}, exports: map[string]string{}}
	for _, p := range pkgs {
		gp := &Package{Path: p.path, Name: p.path[strings.LastIndexByte(p.path, '/')+1:], Imports: p.imports, TestImports: p.tests}
		g.Packages = append(g.Packages, gp)
		g.byPath[p.path] = gp
	}
	for _, p := range g.Packages {
		seen := map[string]bool{}
		var walk func(string)
		walk = func(path string) {
			for _, i := range g.byPath[path].Imports {
				if !seen[i] {
					seen[i] = true
					if g.byPath[i] != nil {
						walk(i)
					}
				}
			}
		}
		walk(p.Path)
		for d := range seen {
			p.Deps = append(p.Deps, d)
		}
		slices.Sort(p.Deps)
	}
	return g
}

const baseParts = `
part cp: the control plane
    internal/cp
part node: the node
    internal/node
part runtime: drivers
    internal/runtime/...
part tests (test-only): harnesses
    internal/runtimetest
arrow cp -> node
arrow node -> runtime
arrow tests -> *
`

func TestCheck(t *testing.T) {
	clean := []pkg{
		{path: "internal/cp", imports: []string{"internal/node", "fmt"}},
		{path: "internal/node", imports: []string{"internal/runtime"}},
		{path: "internal/runtime"},
		{path: "internal/runtime/gvisor", imports: []string{"internal/runtime"}},
		{path: "internal/runtimetest", imports: []string{"internal/node", "internal/runtime"}},
	}
	with := func(extra ...pkg) []pkg {
		out := slices.Clone(clean)
		for _, e := range extra {
			i := slices.IndexFunc(out, func(p pkg) bool { return p.path == e.path })
			if i < 0 {
				out = append(out, e)
			} else {
				out[i] = e
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		parts string
		pkgs  []pkg
		want  []string // each problem's text, in order, as substrings
	}{{
		name: "clean",
		pkgs: clean,
	}, {
		name:  "a never-rule on a subtree catches the subtree's root (the old prefix check did not)",
		parts: "never cp imports internal/runtime/...: the control plane knows no driver\n",
		pkgs:  with(pkg{path: "internal/cp", imports: []string{"internal/node", "internal/runtime"}}),
		want: []string{
			"internal/cp imports internal/runtime (): part cp (docs:1) has no arrow to part runtime (docs:5)",
			"internal/cp imports internal/runtime (): docs:12: never cp imports internal/runtime/...: the control plane knows no driver",
		},
	}, {
		name:  "a subtree is cut on path segments: internal/runtime/... is not internal/runtimetest",
		parts: "never cp imports internal/runtime/... (tests too): no\n",
		pkgs:  with(pkg{path: "internal/cp", imports: []string{"internal/node"}, tests: []string{"internal/runtimetest", "internal/runtime/gvisor"}}),
		want:  []string{"tests of internal/cp import internal/runtime/gvisor (): docs:12: never cp imports internal/runtime/... (tests too): no"},
	}, {
		name: "a package in no part",
		pkgs: with(pkg{path: "internal/gateway"}),
		want: []string{"package internal/gateway is in no part: add it"},
	}, {
		name:  "a package in two parts",
		parts: "part more: more\n    internal/node\n",
		pkgs:  clean,
		want:  []string{"docs:13: package internal/node is in part more and in part node (line 3)"},
	}, {
		name:  "a pattern that matches nothing",
		parts: "part more: more\n    internal/nodes\n",
		pkgs:  clean,
		want:  []string{"docs:13: part more's pattern internal/nodes matches no package of the module"},
	}, {
		name: "an import no arrow allows",
		pkgs: with(pkg{path: "internal/node", imports: []string{"internal/runtime", "internal/cp"}}),
		want: []string{"internal/node imports internal/cp (): part node (docs:3) has no arrow to part cp (docs:1)"},
	}, {
		name:  "an exception excuses its import, and only its own",
		parts: "except internal/node -> internal/cp: known, to go\n",
		pkgs:  with(pkg{path: "internal/node", imports: []string{"internal/runtime", "internal/cp"}}),
	}, {
		name:  "an exception no longer needed fails, so the list only shrinks",
		parts: "except internal/node -> internal/cp: known, to go\n",
		pkgs:  clean,
		want:  []string{"docs:12: the exception internal/node -> internal/cp is no longer needed"},
	}, {
		name:  "an exception for code does not excuse tests, nor one for tests code",
		parts: "never node imports cp (tests too): no\nexcept internal/node -> internal/cp: known\n",
		pkgs:  with(pkg{path: "internal/node", imports: []string{"internal/runtime"}, tests: []string{"internal/cp"}}),
		want: []string{
			"docs:13: the exception internal/node -> internal/cp is no longer needed",
			"tests of internal/node import internal/cp (): docs:12: never node imports cp (tests too): no",
		},
	}, {
		name:  "rules hold for tests only when they say so",
		parts: "never node imports cp: no\nnever cp imports runtime: no\n",
		pkgs:  with(pkg{path: "internal/node", imports: []string{"internal/runtime"}, tests: []string{"internal/cp"}}),
	}, {
		name:  "a links rule sees through other packages",
		parts: "never cp links runtime: no driver in a control plane\n",
		pkgs:  clean,
		want:  []string{"internal/cp links internal/runtime (through internal/cp -> internal/node -> internal/runtime): docs:12: never cp links runtime: no driver in a control plane"},
	}, {
		name:  "a module pattern does not match the standard library's internal/ packages",
		parts: "never cp links internal/runtime/gvisor internal/runtime/...: no\n",
		pkgs:  with(pkg{path: "internal/cp", imports: []string{"internal/node", "internal/runtime/atomic"}}),
		want:  []string{"internal/cp links internal/runtime (through internal/cp -> internal/node -> internal/runtime)"},
	}, {
		name:  "a rule may name a package outside the module",
		parts: "never runtime imports net/http: no\n",
		pkgs:  with(pkg{path: "internal/runtime/gvisor", imports: []string{"internal/runtime", "net/http"}}),
		want:  []string{"internal/runtime/gvisor imports net/http (): docs:12: never runtime imports net/http: no"},
	}, {
		name:  "an only-rule holds what is linked to the module's packages it names",
		parts: "only node links internal/node internal/runtime: no\n",
		pkgs:  with(pkg{path: "internal/runtime", imports: []string{"internal/runtime/gvisor", "os"}}, pkg{path: "internal/runtime/gvisor", imports: []string{"os"}}),
		want:  []string{"internal/node links internal/runtime/gvisor (through internal/node -> internal/runtime -> internal/runtime/gvisor): docs:12: only node links"},
	}, {
		name:  "a rule's target that is neither a part nor a package of the module",
		parts: "never cp imports internal/nod: typo\n",
		pkgs:  clean,
		want:  []string{"docs:12: never cp imports internal/nod: internal/nod is neither a part nor a pattern"},
	}, {
		name:  "an arrow a never-rule forbids whole",
		parts: "never cp imports node: no\n",
		pkgs:  with(pkg{path: "internal/cp"}),
		want:  []string{"docs:9: arrow cp -> node allows what never cp imports node (line 12) forbids"},
	}, {
		name: "code imports a test-only part",
		pkgs: with(pkg{path: "internal/node", imports: []string{"internal/runtime", "internal/runtimetest"}}),
		want: []string{"internal/node imports internal/runtimetest (): part tests is test-only (docs:7): only tests import it"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseParts("docs", strings.NewReader(baseParts[1:]+tc.parts))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, prob := range Check(p, graphOf(tc.pkgs...)) {
				got = append(got, prob.Msg)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d:\n got %q\nwant it to hold %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestParsePartsErrors(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"    internal/x\n", "f:1: an indented line lists a part's packages, and no part comes before it"},
		{"part a\n    x\n", "f:1: a part needs a description"},
		{"part a (test): x\n    x\n", "f:1: want part NAME: DESCRIPTION"},
		{"part a: x\n    x\npart a: y\n    y\n", "f:3: part a is declared twice"},
		{"part a: x\n", "f:1: part a lists no package"},
		{"part a: x\n    x\narrow a -> b\n", "f:3: arrow to b: no such part"},
		{"part a: x\n    x\narrow a => a\n", "f:3: want arrow NAME -> NAME"},
		{"part a: x\n    x\narrow a -> a\n", "f:3: arrow a -> a: a part's packages always import each other"},
		{"part a: x\n    x\npart t (test-only): t\n    t\narrow a -> t\n", "f:5: arrow a -> t: part t is test-only"},
		{"part a: x\n    x\npart b: y\n    y\narrow a -> b\narrow b -> a\n", "f:1: the arrows form a circle: a -> b -> a"},
		{"part a: x\n    x\nnever a imports y\n", "f:3: a rule needs its reason"},
		{"part a: x\n    x\nnever a uses y: why\n", "f:3: want never NAME imports|links"},
		{"part a: x\n    x\nonly a imports y: why\n", "f:3: want never NAME imports|links"},
		{"part a: x\n    x\nnever a links y (tests too): why\n", "f:3: (tests too) goes with never ... imports only"},
		{"part a: x\n    x\nnever b imports y: why\n", "f:3: never b imports y: no such part b"},
		{"part a: x\n    x\nexcept x y: why\n", "f:3: want except [tests of] PKG -> PKG"},
		{"part a: x\n    x\nexcept x -> y\n", "f:3: an exception needs its reason"},
		{"part a: x\n    x\nexcept x -> y: a\nexcept x -> y: b\n", "f:4: the exception x -> y is listed twice (line 3)"},
		{"part a: x\n    x\nallow a -> b\n", `f:3: unknown statement "allow"`},
	} {
		_, err := ParseParts("f", strings.NewReader(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseParts(%q) = %v; want an error holding %q", tc.file, err, tc.want)
		}
	}
}

func TestParseParts(t *testing.T) {
	p, err := ParseParts("f", strings.NewReader(`# a comment
part a: the first
    internal/a internal/a/...
part t (test-only): tests
    internal/t
arrow t -> *
never a imports net/http internal/t (tests too): why not
never a links t: no
only a links internal/a/...: only itself
except tests of internal/a -> internal/t: for now
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Parts{
		File: "f",
		Parts: []*Part{
			{Name: "a", Doc: "the first", Line: 2, Patterns: []Pattern{{"internal/a", 3}, {"internal/a/...", 3}}},
			{Name: "t", TestOnly: true, Doc: "tests", Line: 4, Patterns: []Pattern{{"internal/t", 5}}},
		},
		Arrows: []Arrow{{From: "t", To: "*", Line: 6}},
		Rules: []Rule{
			{Kind: NeverImports, Part: "a", Targets: []Pattern{{"net/http", 7}, {"internal/t", 7}}, Tests: true, Reason: "why not", Line: 7, Text: "never a imports net/http internal/t (tests too)"},
			{Kind: NeverLinks, Part: "a", Targets: []Pattern{{"t", 8}}, Reason: "no", Line: 8, Text: "never a links t"},
			{Kind: OnlyLinks, Part: "a", Targets: []Pattern{{"internal/a/...", 9}}, Reason: "only itself", Line: 9, Text: "only a links internal/a/..."},
		},
		Exceptions: []Exception{{From: "internal/a", To: "internal/t", Tests: true, Reason: "for now", Line: 10}},
	}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("ParseParts: (-want +got)\n%s", diff)
	}
	if _, ok := p.Allowed("t", "a"); !ok {
		t.Errorf("arrow t -> * does not allow t -> a")
	}
	if _, ok := p.Allowed("a", "t"); ok {
		t.Errorf("no arrow, yet a -> t is allowed")
	}
}

func TestRatchet(t *testing.T) {
	base := []string{"# comment", "", "package internal/cp 6000", "func internal/app.Run 300", "type internal/cp.Service 50", "func internal/gone.F 130"}
	now := []string{"package internal/cp 6001", "func internal/app.Run 290", "type internal/cp.Service 50", "func internal/new.G 121"}
	worse, stale, better := Ratchet(base, now)
	got := fmt.Sprint(worse, stale, better)
	want := fmt.Sprint(
		[]string{"func internal/new.G 121: new, over the limit", "package internal/cp 6001: was 6000"},
		[]string{"func internal/gone.F"},
		[]string{"func internal/app.Run 290: was 300"})
	if got != want {
		t.Errorf("Ratchet:\n got %s\nwant %s", got, want)
	}
}
