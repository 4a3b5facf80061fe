package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("print JSON: %w", err)
	}
	return nil
}

// jsonOrErr ends a command whose call returned v and err: with err if the call failed, or with v
// printed as JSON under --json. done reports whether it ended it; err is then the command's error.
func (g *globals) jsonOrErr(v any, err error) (done bool, _ error) {
	if err != nil {
		return true, err
	}
	if g.json {
		return true, printJSON(g.Out, v)
	}
	return false, nil
}

// deleteEach deletes each of ids with del, printing each ID deleted (but with --json) and each error,
// and fails with exit code 1 if any delete did.
func (g *globals) deleteEach(ctx context.Context, ids []string, del func(ctx context.Context, id string) error) error {
	failed := false
	for _, id := range ids {
		if err := del(ctx, id); err != nil {
			fmt.Fprintf(g.Err, "airlock: %s\n", g.explain(err))
			failed = true
			continue
		}
		if !g.json {
			fmt.Fprintln(g.Out, id)
		}
	}
	if failed {
		return &exitError{code: 1}
	}
	return nil
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)}
	t.row(header...)
	return t
}

// row adds a row; tabs and newlines in cells become spaces, so that a cell cannot break the layout.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = cleanCell(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("print table: %w", err)
	}
	return nil
}

// cleanCell replaces control characters (which could also drive the terminal: the text may come from a
// sandbox) with spaces, and "" with "-".
func cleanCell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// relTime formats t relative to now: "3m ago", "in 4m", or "-" for the zero time.
func relTime(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	if d < 0 {
		return shortDuration(-d) + " ago"
	}
	return "in " + shortDuration(d)
}

// shortDuration formats d rounded to its largest unit: 42s, 5m, 3h, 2d.
func shortDuration(d time.Duration) string {
	round := func(unit time.Duration) int { return int((d + unit/2) / unit) }
	switch {
	case d < time.Minute-time.Second/2:
		return fmt.Sprintf("%ds", round(time.Second))
	case d < time.Hour-time.Minute/2:
		return fmt.Sprintf("%dm", round(time.Minute))
	case d < 48*time.Hour-time.Hour/2:
		return fmt.Sprintf("%dh", round(time.Hour))
	default:
		return fmt.Sprintf("%dd", round(24*time.Hour))
	}
}

// shellJoin joins argv the way a shell would need it typed, quoting where needed.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = shellQuote(a)
	}
	return strings.Join(out, " ")
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// truncate shortens s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
