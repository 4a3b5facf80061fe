// Package archtest checks the architecture against the parts file (docs/ARCHITECTURE.parts): every
// package of the module belongs to exactly one part, every import between parts follows an arrow of
// the file, no import breaks a never-rule, and the file's list of known exceptions holds exactly the
// violations the code still has (so it only shrinks). It also measures the structure the redesign of
// issue 41 is held to (Measure), and draws the parts for docs/ARCHITECTURE.md (Draw).
package archtest

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Parts is a parsed parts file. Every package path in it is relative to the module
// (internal/node, sdk/go/airlock, api); a never-rule may also name a package outside the module by
// its full path (net/http).
type Parts struct {
	// File is the file's name, as messages cite it.
	File string
	// Parts in the file's order.
	Parts []*Part
	// Arrows in the file's order: From's code may import To's packages.
	Arrows []Arrow
	// Rules are the never- and only-rules, in the file's order.
	Rules []Rule
	// Exceptions are the known violations, in the file's order.
	Exceptions []Exception
}

// Part is one part of the architecture: a name and the package patterns it holds.
type Part struct {
	Name string
	// TestOnly parts hold test harnesses, suites and tools: only tests and other test-only
	// packages may import them.
	TestOnly bool
	// Doc is the part's one-line description.
	Doc string
	// Patterns are the part's packages: exact paths or path/... subtrees.
	Patterns []Pattern
	// Line is where the part is declared.
	Line int
}

// Pattern is one package pattern: an exact path ("internal/runtime"), a subtree
// ("internal/runtime/...": internal/runtime and every package below it, on whole path segments, as
// the go command reads it; never internal/runtimetest), or the name of a part (its packages).
type Pattern struct {
	Text string
	// Line is the pattern's line in the file.
	Line int
}

// Arrow allows the code of part From to import the packages of part To; "*" as To allows every
// part but the test-only ones.
type Arrow struct {
	From, To string
	Line     int
}

// RuleKind says what a Rule forbids.
type RuleKind int

const (
	// NeverImports forbids the part's packages to import (directly) any package the rule names.
	NeverImports RuleKind = iota
	// NeverLinks forbids the part's packages to link (import directly or through others, in
	// non-test code) any package the rule names.
	NeverLinks
	// OnlyLinks forbids the part's packages to link any package of the module the rule does not name.
	OnlyLinks
)

// Rule is a never- or only-rule, with its reason.
type Rule struct {
	Kind RuleKind
	Part string
	// Targets are patterns or part names.
	Targets []Pattern
	// Tests says the rule also holds for the part's test files (NeverImports only).
	Tests  bool
	Reason string
	Line   int
	// Text is the rule as written, without its reason.
	Text string
}

// Exception is one known violation: the import of To by From (or by From's tests), allowed until
// the code is fixed. An exception that no longer excuses a violation is an error, so the list only
// shrinks.
type Exception struct {
	From, To string
	Tests    bool
	Reason   string
	Line     int
}

// ParseParts reads a parts file. The format, one statement a line (# starts a comment line):
//
//	part NAME: DESCRIPTION             a part; the indented lines that follow hold its package patterns
//	part NAME (test-only): DESCRIPTION a part only tests and other test-only parts may import
//	    PATTERN ...
//	arrow NAME -> NAME ...             NAME's code may import the packages of these parts (* : every part)
//	never NAME imports TARGET ...: WHY NAME's code imports none of these (patterns or part names)
//	never NAME imports TARGET ... (tests too): WHY
//	                                   ... nor do NAME's test files
//	never NAME links TARGET ...: WHY   NAME's code links none of these, directly or through others
//	only NAME links TARGET ...: WHY    NAME's code links no package of the module but these
//	except PKG -> PKG: WHY             a known violation: PKG's code imports (or links) PKG
//	except tests of PKG -> PKG: WHY    a known violation by PKG's test files
func ParseParts(name string, r io.Reader) (*Parts, error) {
	p := &Parts{File: name}
	var cur *Part // the part whose patterns the indented lines list
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		errf := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", name, n, fmt.Sprintf(format, args...))
		}
		if raw[0] == ' ' || raw[0] == '\t' {
			if cur == nil {
				return nil, errf("an indented line lists a part's packages, and no part comes before it")
			}
			for _, f := range strings.Fields(line) {
				cur.Patterns = append(cur.Patterns, Pattern{Text: f, Line: n})
			}
			continue
		}
		cur = nil
		verb, rest, _ := strings.Cut(line, " ")
		switch verb {
		case "part":
			head, doc, ok := strings.Cut(rest, ":")
			if !ok || strings.TrimSpace(doc) == "" {
				return nil, errf("a part needs a description: part NAME: DESCRIPTION")
			}
			f := strings.Fields(head)
			pt := &Part{Doc: strings.TrimSpace(doc), Line: n}
			switch {
			case len(f) == 1:
			case len(f) == 2 && f[1] == "(test-only)":
				pt.TestOnly = true
			default:
				return nil, errf("want part NAME: DESCRIPTION or part NAME (test-only): DESCRIPTION")
			}
			pt.Name = f[0]
			if p.Part(pt.Name) != nil {
				return nil, errf("part %s is declared twice", pt.Name)
			}
			if pt.Name == "*" {
				return nil, errf("* is not a part's name")
			}
			p.Parts = append(p.Parts, pt)
			cur = pt
		case "arrow":
			from, to, ok := strings.Cut(rest, "->")
			fromF, toF := strings.Fields(from), strings.Fields(to)
			if !ok || len(fromF) != 1 || len(toF) == 0 {
				return nil, errf("want arrow NAME -> NAME ...")
			}
			for _, t := range toF {
				p.Arrows = append(p.Arrows, Arrow{From: fromF[0], To: t, Line: n})
			}
		case "never", "only":
			head, reason, ok := strings.Cut(rest, ":")
			if !ok || strings.TrimSpace(reason) == "" {
				return nil, errf("a rule needs its reason after a colon")
			}
			f := strings.Fields(head)
			if len(f) < 3 {
				return nil, errf("want %s NAME imports|links TARGET ...: REASON", verb)
			}
			r := Rule{Part: f[0], Reason: strings.TrimSpace(reason), Line: n, Text: verb + " " + strings.TrimSpace(head)}
			switch {
			case verb == "never" && f[1] == "imports":
				r.Kind = NeverImports
			case verb == "never" && f[1] == "links":
				r.Kind = NeverLinks
			case verb == "only" && f[1] == "links":
				r.Kind = OnlyLinks
			default:
				return nil, errf("want never NAME imports|links ... or only NAME links ...")
			}
			targets := f[2:]
			if len(targets) >= 2 && targets[len(targets)-2] == "(tests" && targets[len(targets)-1] == "too)" {
				if r.Kind != NeverImports {
					return nil, errf("(tests too) goes with never ... imports only: tests are not linked")
				}
				r.Tests, targets = true, targets[:len(targets)-2]
			}
			if len(targets) == 0 {
				return nil, errf("a rule names at least one package or part")
			}
			for _, t := range targets {
				r.Targets = append(r.Targets, Pattern{Text: t, Line: n})
			}
			p.Rules = append(p.Rules, r)
		case "except":
			head, reason, ok := strings.Cut(rest, ":")
			if !ok || strings.TrimSpace(reason) == "" {
				return nil, errf("an exception needs its reason after a colon")
			}
			e := Exception{Reason: strings.TrimSpace(reason), Line: n}
			if h, ok := strings.CutPrefix(strings.TrimSpace(head), "tests of "); ok {
				e.Tests, head = true, h
			}
			from, to, ok := strings.Cut(head, "->")
			fromF, toF := strings.Fields(from), strings.Fields(to)
			if !ok || len(fromF) != 1 || len(toF) != 1 {
				return nil, errf("want except [tests of] PKG -> PKG: REASON")
			}
			e.From, e.To = fromF[0], toF[0]
			for _, o := range p.Exceptions {
				if o.From == e.From && o.To == e.To && o.Tests == e.Tests {
					return nil, errf("the exception %s -> %s is listed twice (line %d)", e.From, e.To, o.Line)
				}
			}
			p.Exceptions = append(p.Exceptions, e)
		default:
			return nil, errf("unknown statement %q: want part, arrow, never, only or except", verb)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return p, p.validate()
}

// validate checks what the file says of itself: arrows and rules name declared parts, every part
// has packages, and the arrows form no circle.
func (p *Parts) validate() error {
	errf := func(line int, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", p.File, line, fmt.Sprintf(format, args...))
	}
	for _, pt := range p.Parts {
		if len(pt.Patterns) == 0 {
			return errf(pt.Line, "part %s lists no package", pt.Name)
		}
	}
	for _, a := range p.Arrows {
		if p.Part(a.From) == nil {
			return errf(a.Line, "arrow from %s: no such part", a.From)
		}
		if a.To != "*" && p.Part(a.To) == nil {
			return errf(a.Line, "arrow to %s: no such part", a.To)
		}
		if a.To == a.From {
			return errf(a.Line, "arrow %s -> %s: a part's packages always import each other", a.From, a.To)
		}
		if a.To != "*" && p.Part(a.To).TestOnly && !p.Part(a.From).TestOnly {
			return errf(a.Line, "arrow %s -> %s: part %s is test-only, and only tests import it", a.From, a.To, a.To)
		}
	}
	for _, r := range p.Rules {
		if p.Part(r.Part) == nil {
			return errf(r.Line, "%s: no such part %s", r.Text, r.Part)
		}
	}
	if c := p.circle(); c != nil {
		return errf(p.Part(c[0]).Line, "the arrows form a circle: %s", strings.Join(c, " -> "))
	}
	return nil
}

// Part reports the part named name, or nil.
func (p *Parts) Part(name string) *Part {
	for _, pt := range p.Parts {
		if pt.Name == name {
			return pt
		}
	}
	return nil
}

// Allowed reports the arrow that lets part from's code import part to's packages, if any.
func (p *Parts) Allowed(from, to string) (Arrow, bool) {
	for _, a := range p.Arrows {
		if a.From == from && (a.To == to || a.To == "*" && !p.Part(to).TestOnly) {
			return a, true
		}
	}
	return Arrow{}, false
}

// targets reports the parts an arrow from part from names (* expanded), in the file's order.
func (p *Parts) targets(from string) []string {
	var out []string
	for _, a := range p.Arrows {
		if a.From != from {
			continue
		}
		if a.To != "*" {
			out = append(out, a.To)
			continue
		}
		for _, pt := range p.Parts {
			if pt.Name != from && !pt.TestOnly {
				out = append(out, pt.Name)
			}
		}
	}
	return slices.Compact(out)
}

// circle reports a circle of arrows (its parts, the first repeated at the end), or nil.
func (p *Parts) circle() []string {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(string) []string
	visit = func(n string) []string {
		state[n] = onPath
		path = append(path, n)
		for _, t := range p.targets(n) {
			switch state[t] {
			case onPath:
				i := slices.Index(path, t)
				return append(slices.Clone(path[i:]), t)
			case unseen:
				if c := visit(t); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	for _, pt := range p.Parts {
		if state[pt.Name] == unseen {
			if c := visit(pt.Name); c != nil {
				return c
			}
		}
	}
	return nil
}

// Match reports whether the package path pkg (relative to the module, or a full path outside it)
// matches the pattern: the same path, or for "X/..." X itself or a package below it on a whole path
// segment (internal/runtime/... matches internal/runtime and internal/runtime/gvisor, never
// internal/runtimetest).
func Match(pattern, pkg string) bool {
	if root, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == root || strings.HasPrefix(pkg, root+"/")
	}
	return pkg == pattern
}
