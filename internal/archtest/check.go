package archtest

import (
	"fmt"
	"slices"
	"strings"
)

// Problem is one thing Check found wrong, as a message that names the packages, the rule and the
// parts file's line.
type Problem struct {
	Msg string
}

func (p Problem) String() string { return p.Msg }

// violation is one import (or link) the parts file does not allow.
type violation struct {
	from, to string
	tests    bool
	msg      string
}

// Check holds the graph to the parts file and reports every problem, in a stable order: packages in
// no part or in two, patterns and rule targets that match no package, arrows a never-rule forbids,
// imports no arrow allows, imports and links a rule forbids (each with the file and line of the
// import), and exceptions that no longer excuse a violation. A violation listed as an exception is
// no problem.
func Check(p *Parts, g *Graph) []Problem {
	c := &checker{p: p, g: g}
	c.membership()
	c.ruleTargets()
	c.contradictions()
	c.excuse(c.violations())
	return c.probs
}

// checker holds what Check's steps find: the problems, each package's part, each rule's targets.
type checker struct {
	p     *Parts
	g     *Graph
	probs []Problem
	// partOf is each package's part, by import path.
	partOf map[string]*Part
	// targets[i] reports whether a package is one of rule i's targets.
	targets []func(string) bool
}

func (c *checker) add(format string, args ...any) {
	c.probs = append(c.probs, Problem{fmt.Sprintf(format, args...)})
}

// membership puts every package in its part: each in exactly one; every pattern matches a package.
func (c *checker) membership() {
	p, g := c.p, c.g
	c.partOf = map[string]*Part{}
	for _, pt := range p.Parts {
		for _, pat := range pt.Patterns {
			matched := false
			for _, pkg := range g.Packages {
				if !Match(pat.Text, pkg.Path) {
					continue
				}
				matched = true
				if other := c.partOf[pkg.Path]; other != nil && other != pt {
					c.add("%s: package %s is in part %s and in part %s (line %d): a package belongs to exactly one part",
						p.at(pat.Line), pkg.Path, pt.Name, other.Name, other.Line)
					continue
				}
				c.partOf[pkg.Path] = pt
			}
			if !matched {
				c.add("%s: part %s's pattern %s matches no package of the module: remove it or correct it", p.at(pat.Line), pt.Name, pat.Text)
			}
		}
	}
	for _, pkg := range g.Packages {
		if c.partOf[pkg.Path] == nil {
			c.add("package %s is in no part: add it to the part it belongs to in %s (or declare a part for it)", pkg.Path, p.File)
		}
	}
}

// ruleTargets resolves the rules' targets: part names, or patterns; a pattern inside the module must
// match one of its packages (a typo would make the rule hold vacuously).
func (c *checker) ruleTargets() {
	p, g := c.p, c.g
	top := map[string]bool{}
	for _, pkg := range g.Packages {
		first, _, _ := strings.Cut(pkg.Path, "/")
		top[first] = true
	}
	c.targets = make([]func(string) bool, len(p.Rules))
	for i, r := range p.Rules {
		var parts []*Part
		var pats []string
		for _, t := range r.Targets {
			if pt := p.Part(t.Text); pt != nil {
				parts = append(parts, pt)
				continue
			}
			first, _, _ := strings.Cut(t.Text, "/")
			if top[first] && !slices.ContainsFunc(g.Packages, func(pkg *Package) bool { return Match(t.Text, pkg.Path) }) {
				c.add("%s: %s: %s is neither a part nor a pattern that matches a package of the module", p.at(r.Line), r.Text, t.Text)
			}
			pats = append(pats, t.Text)
		}
		c.targets[i] = func(pkg string) bool {
			if pt := c.partOf[pkg]; pt != nil && slices.Contains(parts, pt) {
				return true
			}
			// A pattern that starts like the module's paths (internal/...) names the module's packages
			// only: the standard library has an internal/ of its own.
			return slices.ContainsFunc(pats, func(pat string) bool {
				first, _, _ := strings.Cut(pat, "/")
				return Match(pat, pkg) && top[first] == g.InModule(pkg)
			})
		}
	}
}

// contradictions reports an arrow a never-rule forbids whole: a contradiction in the file.
func (c *checker) contradictions() {
	p, g := c.p, c.g
	for i, r := range p.Rules {
		if r.Kind != NeverImports {
			continue
		}
		for _, a := range p.Arrows {
			if a.From != r.Part || a.To == "*" {
				continue
			}
			n, forbidden := 0, 0
			for _, pkg := range g.Packages {
				if pt := c.partOf[pkg.Path]; pt != nil && pt.Name == a.To {
					n++
					if c.targets[i](pkg.Path) {
						forbidden++
					}
				}
			}
			if n > 0 && forbidden == n {
				c.add("%s: arrow %s -> %s allows what %s (line %d) forbids", p.at(a.Line), a.From, a.To, r.Text, r.Line)
			}
		}
	}
}

// violations returns the imports and links that break an arrow or a rule.
func (c *checker) violations() []violation {
	var vs []violation
	for _, pkg := range c.g.Packages {
		from := c.partOf[pkg.Path]
		if from == nil {
			continue
		}
		vs = append(vs, c.importViolations(pkg, from)...)
		vs = append(vs, c.linkViolations(pkg, from)...)
	}
	return vs
}

// importViolations returns pkg's imports (and its tests') that break an arrow or a never-rule.
func (c *checker) importViolations(pkg *Package, from *Part) []violation {
	p, g := c.p, c.g
	var vs []violation
	for _, imp := range pkg.Imports {
		if to := c.partOf[imp]; to != nil && to != from {
			if _, ok := p.Allowed(from.Name, to.Name); !ok {
				why := fmt.Sprintf("part %s (%s) has no arrow to part %s (%s): add one if the design allows it, or drop the import",
					from.Name, p.at(from.Line), to.Name, p.at(to.Line))
				if to.TestOnly && !from.TestOnly {
					why = fmt.Sprintf("part %s is test-only (%s): only tests import it", to.Name, p.at(to.Line))
				}
				vs = append(vs, violation{pkg.Path, imp, false,
					fmt.Sprintf("%s imports %s (%s): %s", pkg.Path, imp, g.where(pkg, imp, false), why)})
			}
		}
		for i, r := range p.Rules {
			if r.Kind == NeverImports && r.Part == from.Name && c.targets[i](imp) {
				vs = append(vs, violation{pkg.Path, imp, false,
					fmt.Sprintf("%s imports %s (%s): %s: %s: %s", pkg.Path, imp, g.where(pkg, imp, false), p.at(r.Line), r.Text, r.Reason)})
			}
		}
	}
	for _, imp := range pkg.TestImports {
		for i, r := range p.Rules {
			if r.Kind == NeverImports && r.Tests && r.Part == from.Name && c.targets[i](imp) {
				vs = append(vs, violation{pkg.Path, imp, true,
					fmt.Sprintf("tests of %s import %s (%s): %s: %s: %s", pkg.Path, imp, g.where(pkg, imp, true), p.at(r.Line), r.Text, r.Reason)})
			}
		}
	}
	return vs
}

// linkViolations returns what pkg links against a never-links or only-links rule.
func (c *checker) linkViolations(pkg *Package, from *Part) []violation {
	p, g := c.p, c.g
	var vs []violation
	for _, dep := range pkg.Deps {
		for i, r := range p.Rules {
			if r.Part != from.Name {
				continue
			}
			bad := r.Kind == NeverLinks && c.targets[i](dep) ||
				r.Kind == OnlyLinks && g.InModule(dep) && !c.targets[i](dep)
			if bad {
				vs = append(vs, violation{pkg.Path, dep, false,
					fmt.Sprintf("%s links %s (through %s): %s: %s: %s", pkg.Path, dep, strings.Join(g.chain(pkg.Path, dep), " -> "), p.at(r.Line), r.Text, r.Reason)})
			}
		}
	}
	return vs
}

// excuse reports the violations no exception excuses, and the exceptions that excuse none (stale: the
// list only shrinks).
func (c *checker) excuse(vs []violation) {
	excused := make([]bool, len(vs))
	for _, e := range c.p.Exceptions {
		n := 0
		for i, v := range vs {
			if v.from == e.From && v.to == e.To && v.tests == e.Tests {
				excused[i] = true
				n++
			}
		}
		if n == 0 {
			what := e.From + " -> " + e.To
			if e.Tests {
				what = "tests of " + what
			}
			c.add("%s: the exception %s is no longer needed (no such import breaks a rule): delete it, so the list only shrinks", c.p.at(e.Line), what)
		}
	}
	for i, v := range vs {
		if !excused[i] {
			c.add("%s", v.msg)
		}
	}
}

// at is a line of the parts file, as messages cite it.
func (p *Parts) at(line int) string { return fmt.Sprintf("%s:%d", p.File, line) }
