package archtest

import (
	"fmt"
	"slices"
	"strings"
)

// Draw draws the parts file for docs/ARCHITECTURE.md: the parts from the importers down, each
// with the parts its code may import (every one drawn below it: the arrows form no circle), then
// the never- and only-rules and the known exceptions.
func Draw(p *Parts) string {
	depth := map[string]int{} // the longest path of arrows from the part
	var down func(string) int
	down = func(n string) int {
		if d, ok := depth[n]; ok {
			return d
		}
		d := 0
		for _, t := range p.targets(n) {
			d = max(d, down(t)+1)
		}
		depth[n] = d
		return d
	}
	order := slices.Clone(p.Parts)
	for _, pt := range order {
		down(pt.Name)
	}
	slices.SortStableFunc(order, func(a, b *Part) int { return depth[b.Name] - depth[a.Name] })
	width := len("part")
	for _, pt := range p.Parts {
		width = max(width, len(pt.Name)+1)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s  may import (each part only parts below it)\n", width, "part")
	for _, pt := range order {
		name := pt.Name
		if pt.TestOnly {
			name += "*"
		}
		var to []string
		for _, a := range p.Arrows {
			if a.From == pt.Name {
				to = append(to, a.To)
			}
		}
		switch {
		case slices.Equal(to, []string{"*"}):
			to = []string{"every part"}
		case len(to) == 0:
			to = []string{"-"}
		}
		line := fmt.Sprintf("%-*s ", width, name)
		for _, t := range to { // wrapped at 100 columns, under the first
			if len(line)+1+len(t) > 100 {
				b.WriteString(line + "\n")
				line = strings.Repeat(" ", width+1)
			}
			line += " " + t
		}
		b.WriteString(line + "\n")
	}
	b.WriteString("* test-only: only tests import it\n\n")
	for _, r := range p.Rules {
		fmt.Fprintf(&b, "%s\n", r.Text)
	}
	fmt.Fprintf(&b, "\nknown exceptions (%d), each to go:\n", len(p.Exceptions))
	for _, e := range p.Exceptions {
		if e.Tests {
			fmt.Fprintf(&b, "tests of ")
		}
		fmt.Fprintf(&b, "%s -> %s\n", e.From, e.To)
	}
	return b.String()
}
