package snapfs

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestUnifiedDiffApplies checks, on random edits of random files, that applying the diff to a gives b.
func TestUnifiedDiffApplies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"alpha", "beta", "gamma", "delta", "", "}", "\treturn nil"}
	randLines := func(n int) []string {
		lines := make([]string, n)
		for i := range lines {
			lines[i] = words[rng.IntN(len(words))] + "\n"
		}
		return lines
	}
	for i := range 500 {
		a := randLines(rng.IntN(60))
		b := append([]string(nil), a...)
		for range rng.IntN(5) {
			at := rng.IntN(len(b) + 1)
			switch rng.IntN(3) {
			case 0:
				b = append(b[:at], append(randLines(1+rng.IntN(3)), b[at:]...)...)
			case 1:
				if at < len(b) {
					b = append(b[:at], b[at+1:]...)
				}
			case 2:
				if at < len(b) {
					b[at] = "changed " + strconv.Itoa(i) + "\n"
				}
			}
		}
		as, bs := strings.Join(a, ""), strings.Join(b, "")
		if rng.IntN(4) == 0 {
			as = strings.TrimSuffix(as, "\n")
		}
		if rng.IntN(4) == 0 {
			bs = strings.TrimSuffix(bs, "\n")
		}
		context := rng.IntN(5)
		diff, ok := UnifiedDiff("/f", []byte(as), []byte(bs), context)
		if !ok {
			t.Fatalf("UnifiedDiff(%q, %q) not ok", as, bs)
		}
		got, err := applyDiff(as, diff)
		if err != nil || got != bs {
			t.Fatalf("applying\n%s\nto %q = %q, %v; want %q", diff, as, got, err, bs)
		}
	}
}

// TestUnifiedDiffLarge checks hunk line numbers far into a file and that inputs that would make the
// line matcher quadratic are refused.
func TestUnifiedDiffLarge(t *testing.T) {
	var a strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&a, "line %d\n", i)
	}
	b := strings.Replace(a.String(), "line 15000\n", "LINE 15000\n", 1)
	diff, ok := UnifiedDiff("/big", []byte(a.String()), []byte(b), 1)
	want := "--- a/big\n+++ b/big\n@@ -15000,3 +15000,3 @@\n line 14999\n-line 15000\n+LINE 15000\n line 15001\n"
	if !ok || diff != want {
		t.Errorf("UnifiedDiff = %q, %v; want %q, true", diff, ok, want)
	}

	// Lines shared all over, in a different order: the matcher's worst case.
	var x, y strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&x, "%d\n", i)
		fmt.Fprintf(&y, "%d\n", i*7)
	}
	if diff, ok := UnifiedDiff("/f", []byte(x.String()), []byte(y.String()), 3); ok {
		t.Errorf("UnifiedDiff of 20000 × 20000 scattered lines = %d bytes, ok; want refused", len(diff))
	}
	// A whole file removed is cheap, however large.
	if _, ok := UnifiedDiff("/f", []byte(x.String()), nil, 3); !ok {
		t.Errorf("UnifiedDiff(large, empty) refused; want a diff")
	}
}

// applyDiff applies a unified diff made by UnifiedDiff to a.
func applyDiff(a, diff string) (string, error) {
	if diff == "" {
		return a, nil
	}
	src := splitLines([]byte(a))
	lines := strings.SplitAfter(diff, "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "--- ") || !strings.HasPrefix(lines[1], "+++ ") {
		return "", fmt.Errorf("no header")
	}
	var out []string
	next := 0 // the next line of src to use
	for i := 2; i < len(lines) && lines[i] != ""; {
		var aStart, aLen int
		if err := parseHunk(lines[i], &aStart, &aLen); err != nil {
			return "", err
		}
		i++
		if aLen > 0 {
			aStart-- // to 0-based; an empty range names the line before, which is the 0-based start
		}
		if aStart < next || aStart > len(src) {
			return "", fmt.Errorf("hunk %q out of order", lines[i-1])
		}
		out = append(out, src[next:aStart]...)
		next = aStart
		for i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "@@ ") {
			op, l := lines[i][0], lines[i][1:]
			i++
			if i < len(lines) && strings.HasPrefix(lines[i], "\\ ") {
				l += lines[i]
				i++
			}
			switch op {
			case ' ', '-':
				if next >= len(src) || src[next] != l {
					return "", fmt.Errorf("line %d: %q does not match", next+1, l)
				}
				next++
				if op == ' ' {
					out = append(out, l)
				}
			case '+':
				out = append(out, l)
			default:
				return "", fmt.Errorf("bad line %q", op)
			}
		}
	}
	out = append(out, src[next:]...)
	return strings.ReplaceAll(strings.Join(out, ""), "\n\\ No newline at end of file\n", ""), nil
}

// parseHunk reads the old range of a hunk header, "@@ -start[,len] +start[,len] @@".
func parseHunk(line string, start, n *int) error {
	var old string
	if _, err := fmt.Sscanf(line, "@@ -%s", &old); err != nil {
		return fmt.Errorf("bad hunk header %q: %w", line, err)
	}
	s, l, found := strings.Cut(old, ",")
	*n = 1
	var err error
	if found {
		if *n, err = strconv.Atoi(l); err != nil {
			return fmt.Errorf("bad hunk header %q: %w", line, err)
		}
	}
	if *start, err = strconv.Atoi(s); err != nil {
		return fmt.Errorf("bad hunk header %q: %w", line, err)
	}
	return nil
}
