package snapfs

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"
)

// Change kinds, the values of Change.Kind.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// Change is one difference between two Views.
type Change struct {
	Path string // absolute, e.g. "/home/user/a.txt"
	Kind string // Added, Removed or Changed
	// Type is the entry's type in b, or in a for a removed entry. A change of type is Changed, with the
	// new type here; a directory's entries then show up as added or removed.
	Type    string
	OldSize int64 // the Entry.Size in a, 0 if added
	NewSize int64 // the Entry.Size in b, 0 if removed
}

// Diff reports what changed from a to b, two Views over the same template, sorted by path (byte-wise
// string order). It is DiffLimit without a limit.
//
// Only paths in either layer are compared: a path in neither is the template's in both. A path is
// compared by what each View shows there, whichever layer it comes from, so a file that a's layer
// modified and b's layer does not have (b shows the template's) is Changed if a's contents differ
// from the template's and no change if they are equal; a file only a's layer has (not in the template)
// is Removed, and a template file that a's layer deleted and b's does not is Added. Files are compared
// by size, then contents; symbolic links by target; devices and FIFOs by type; directories only by
// type (mode and time changes are not reported). An added or removed directory is one change plus one
// for each entry under it; when one View hides a template directory (a whiteout or an opaque
// directory) and the other does not, the hidden template entries are listed by reading the template.
func Diff(a, b *View) ([]Change, error) {
	changes, _, err := DiffLimit(a, b, 0)
	return changes, err
}

// DiffLimit is Diff keeping at most limit changes (no limit if limit <= 0): the first limit in path
// order. truncated reports whether changes were left out. The whole difference is still computed, but
// memory stays proportional to limit.
func DiffLimit(a, b *View, limit int) (changes []Change, truncated bool, err error) {
	d := &differ{a: a, b: b, limit: limit}
	ar, err := a.root()
	if err != nil {
		return nil, false, err
	}
	br, err := b.root()
	if err != nil {
		return nil, false, err
	}
	if err := d.children(&ar, &br); err != nil {
		return nil, false, err
	}
	d.prune()
	return d.changes, d.truncated, nil
}

// differ walks two Views side by side.
type differ struct {
	a, b      *View
	limit     int
	changes   []Change
	truncated bool
}

// children compares the entries of an and bn (nil when absent on that side), directories or not.
func (d *differ) children(an, bn *node) error {
	aDir := an != nil && an.typ() == TypeDir
	bDir := bn != nil && bn.typ() == TypeDir
	if !aDir && !bDir {
		return nil
	}
	var names []string
	if aDir && an.up != nil {
		names = append(names, an.up.children...)
	}
	if bDir && bn.up != nil {
		names = append(names, bn.up.children...)
	}
	// Template entries in neither layer are the same on both sides, unless only one side sees the
	// template directory here: then they are all there on that side only.
	if aMerge, bMerge := aDir && an.merge, bDir && bn.merge; aMerge != bMerge {
		v, rel := d.a, an
		if bMerge {
			v, rel = d.b, bn
		}
		lower, err := v.lowerNames(rel.rel)
		if err != nil {
			return err
		}
		names = append(names, lower...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, name := range names {
		ac, err := stepSide(d.a, an, aDir, name)
		if err != nil {
			return err
		}
		bc, err := stepSide(d.b, bn, bDir, name)
		if err != nil {
			return err
		}
		if err := d.compare(ac, bc); err != nil {
			return err
		}
	}
	return nil
}

// stepSide resolves name in parent on one side of a diff; nil when absent.
func stepSide(v *View, parent *node, isDir bool, name string) (*node, error) {
	if !isDir {
		return nil, nil
	}
	n, ok, err := v.step(parent, name)
	if err != nil || !ok {
		return nil, err
	}
	return &n, nil
}

// compare records how an became bn (either nil when absent), then compares their entries.
func (d *differ) compare(an, bn *node) error {
	var ea, eb Entry
	var err error
	if an != nil {
		if ea, err = d.a.entry(an); err != nil {
			return err
		}
	}
	if bn != nil {
		if eb, err = d.b.entry(bn); err != nil {
			return err
		}
	}
	switch {
	case an == nil && bn == nil:
		return nil
	case an == nil:
		d.add(Change{Path: eb.Path, Kind: Added, Type: eb.Type, NewSize: eb.Size})
	case bn == nil:
		d.add(Change{Path: ea.Path, Kind: Removed, Type: ea.Type, OldSize: ea.Size})
	default:
		differs, err := d.differs(an, bn, &ea, &eb)
		if err != nil {
			return err
		}
		if differs {
			d.add(Change{Path: eb.Path, Kind: Changed, Type: eb.Type, OldSize: ea.Size, NewSize: eb.Size})
		}
	}
	return d.children(an, bn)
}

// differs reports whether two entries at the same path differ.
func (d *differ) differs(an, bn *node, ea, eb *Entry) (bool, error) {
	switch {
	case ea.Type != eb.Type:
		return true, nil
	case an.up == nil && bn.up == nil:
		return false, nil // both the template's
	case ea.Type == TypeSymlink:
		return ea.Target != eb.Target, nil
	case ea.Type == TypeOther:
		return ea.Mode.Type() != eb.Mode.Type(), nil
	case ea.Type != TypeFile:
		return false, nil
	case ea.Size != eb.Size:
		return true, nil
	case an.up != nil && bn.up != nil:
		return an.up.sum != bn.up.sum, nil
	}
	// One side is the template's file, the other the layer's: compare the template's digest, read in
	// a stream, with the one the layer keeps.
	up, lo, v := an.up, bn, d.b
	if up == nil {
		up, lo, v = bn.up, an, d.a
	}
	same, err := v.lowerHas(lo.rel, up.size, up.sum)
	if err != nil {
		return false, fmt.Errorf("compare %s: %w", ea.Path, err)
	}
	return !same, nil
}

// add records a change, keeping memory proportional to the limit.
func (d *differ) add(c Change) {
	d.changes = append(d.changes, c)
	if d.limit > 0 && len(d.changes) >= 2*d.limit {
		d.prune()
	}
}

// prune sorts the changes and drops those past the limit.
func (d *differ) prune() {
	slices.SortFunc(d.changes, func(x, y Change) int { return strings.Compare(x.Path, y.Path) })
	if d.limit > 0 && len(d.changes) > d.limit {
		d.changes, d.truncated = slices.Clip(d.changes[:d.limit]), true
	}
}

// lowerNames lists the template directory at rel.
func (v *View) lowerNames(rel string) ([]string, error) {
	f, err := v.lower.Open(lowerName(rel))
	if err != nil {
		return nil, fmt.Errorf("template /%s: %w", rel, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("template /%s: %w", rel, err)
	}
	return names, nil
}

// lowerHas reports whether the template's regular file at rel holds size bytes whose SHA-256 is sum,
// reading it as a stream.
func (v *View) lowerHas(rel string, size int64, sum [32]byte) (bool, error) {
	f, n, err := v.openLower(rel)
	if err != nil {
		return false, fmt.Errorf("template /%s: %w", rel, err)
	}
	defer f.Close()
	if n != size {
		return false, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, size)); err != nil {
		return false, fmt.Errorf("template /%s: %w", rel, err)
	}
	return [32]byte(h.Sum(nil)) == sum, nil
}

// MaxTextSize is the largest file UnifiedDiff compares.
const MaxTextSize = 1 << 20

// maxDiffWork bounds the line matching UnifiedDiff does, in pairs of lines: the matcher is quadratic at
// worst (about a quarter of a second for 5000 × 5000 lines that defeat it).
const maxDiffWork = 5000 * 5000

// UnifiedDiff returns a unified diff (git style: "--- a/path", "+++ b/path", hunks with context lines
// around each change; a negative context means 3) turning a into b, "" if they are equal. ok is false,
// and there is no diff, unless both are text: valid UTF-8, no NUL byte, at most MaxTextSize bytes. It
// is also false when the changed region, what lies between the lines a and b share at their start and
// at their end, is too large to match lines in quickly (more than 25 million pairs of lines): the text
// comes from a sandbox, which could otherwise make the matcher run for minutes.
// A path with unprintable characters, quotes or backslashes is quoted in the header lines, as git does,
// so a hostile file name cannot forge them.
func UnifiedDiff(path string, a, b []byte, context int) (diff string, ok bool) {
	if !isText(a) || !isText(b) {
		return "", false
	}
	if bytes.Equal(a, b) {
		return "", true
	}
	if context < 0 {
		context = 3
	}
	la, lb := splitLines(a), splitLines(b)
	// Lines common to the start and the end need no matching: keep context lines of them.
	prefix := 0
	for prefix < len(la) && prefix < len(lb) && la[prefix] == lb[prefix] {
		prefix++
	}
	suffix := 0
	for suffix < len(la)-prefix && suffix < len(lb)-prefix && la[len(la)-1-suffix] == lb[len(lb)-1-suffix] {
		suffix++
	}
	if int64(len(la)-prefix-suffix)*int64(len(lb)-prefix-suffix) > maxDiffWork {
		return "", false
	}
	off := max(0, prefix-context)
	keep := min(suffix, context)
	la, lb = la[off:len(la)-suffix+keep], lb[off:len(lb)-suffix+keep]

	var out strings.Builder
	out.WriteString("--- " + quoteName("a"+path) + "\n")
	out.WriteString("+++ " + quoteName("b"+path) + "\n")
	for _, g := range difflib.NewMatcher(la, lb).GetGroupedOpCodes(context) {
		first, last := g[0], g[len(g)-1]
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(off+first.I1, off+last.I2), hunkRange(off+first.J1, off+last.J2))
		for _, c := range g {
			if c.Tag == 'e' {
				writeLines(&out, " ", la[c.I1:c.I2])
				continue
			}
			if c.Tag == 'r' || c.Tag == 'd' {
				writeLines(&out, "-", la[c.I1:c.I2])
			}
			if c.Tag == 'r' || c.Tag == 'i' {
				writeLines(&out, "+", lb[c.J1:c.J2])
			}
		}
	}
	return out.String(), true
}

// hunkRange formats the lines [start, stop) (counted from 0) for a hunk header.
func hunkRange(start, stop int) string {
	first, n := start+1, stop-start
	switch n {
	case 0:
		return strconv.Itoa(start) + ",0" // the line before an empty range
	case 1:
		return strconv.Itoa(first)
	}
	return strconv.Itoa(first) + "," + strconv.Itoa(n)
}

// writeLines writes lines to out, each after prefix.
func writeLines(out *strings.Builder, prefix string, lines []string) {
	for _, l := range lines {
		out.WriteString(prefix)
		out.WriteString(l)
	}
}

// isText reports whether b is text UnifiedDiff handles.
func isText(b []byte) bool {
	return len(b) <= MaxTextSize && bytes.IndexByte(b, 0) < 0 && utf8.Valid(b)
}

// splitLines splits text into lines that keep their "\n"; a last line without one is marked the way
// diff does, so that adding or removing the final newline is a visible change.
func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	lines := strings.SplitAfter(string(b), "\n")
	if last := lines[len(lines)-1]; last == "" {
		lines = lines[:len(lines)-1]
	} else {
		lines[len(lines)-1] = last + "\n\\ No newline at end of file\n"
	}
	return lines
}

// quoteName quotes a file name for a diff header if it holds anything that could break the line.
func quoteName(name string) string {
	if strings.ContainsFunc(name, func(r rune) bool { return !strconv.IsPrint(r) || r == '"' || r == '\\' }) {
		return strconv.Quote(name)
	}
	return name
}
