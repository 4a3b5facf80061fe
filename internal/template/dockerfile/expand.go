package dockerfile

import (
	"fmt"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// maxExpanded bounds what Expand returns.
const maxExpanded = 1 << 20

// maxNesting bounds how deep ${NAME:-word} may nest in word.
const maxNesting = 64

// Expand substitutes the variables in s, looked up with lookup (nil: none is set):
//
//	$NAME, ${NAME}   NAME's value; "" if NAME is unset
//	${NAME:-word}    word if NAME is unset or empty, else NAME's value
//	${NAME-word}     word if NAME is unset, else NAME's value
//	${NAME:+word}    word if NAME is set and not empty, else ""
//	${NAME+word}     word if NAME is set, else ""
//
// word is expanded in turn (it ends at the first '}' outside a nested ${...}). `\$` gives a literal '$'
// and `\\` a literal backslash; any other backslash, and a '$' followed by neither a name nor '{',
// stays as it is. NAME is a letter or '_', then letters, digits or '_'. An unterminated "${", a bad
// name, or another modifier (${NAME:?word}, ${NAME/a/b}, ...) is an error, as is a result over 1 MiB.
// Errors wrap errdefs.ErrInvalidArgument.
func Expand(s string, lookup func(name string) (string, bool)) (string, error) {
	e := expander{s: s, lookup: lookup}
	if _, err := e.run(0, true, -1); err != nil {
		return "", err
	}
	return e.out.String(), nil
}

// checkSyntax reports whether Expand would accept s, whatever the variables hold.
func checkSyntax(s string) error {
	e := expander{s: s}
	_, err := e.run(0, false, -1)
	return err
}

// expander is the state of one Expand.
type expander struct {
	s      string
	lookup func(string) (string, bool)
	out    strings.Builder
	depth  int // how many ${...} words are being read
}

// run reads e.s from i to its end or, when open is the index of a "${" whose word is being read, to the
// '}' that ends the word, and returns the index after what it read. It writes the expansion to e.out
// only if emit; without, it only checks the syntax.
func (e *expander) run(i int, emit bool, open int) (int, error) {
	s := e.s
	for i < len(s) {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s) && (s[i+1] == '$' || s[i+1] == '\\'):
			if err := e.write(emit, s[i+1:i+2]); err != nil {
				return 0, err
			}
			i += 2
		case c == '}' && open >= 0:
			return i + 1, nil
		case c == '$':
			var err error
			if i, err = e.variable(i, emit); err != nil {
				return 0, err
			}
		default:
			j := i + 1
			for j < len(s) && s[j] != '\\' && s[j] != '$' && (open < 0 || s[j] != '}') {
				j++
			}
			if err := e.write(emit, s[i:j]); err != nil {
				return 0, err
			}
			i = j
		}
	}
	if open >= 0 {
		return 0, e.errorf(open, "unterminated ${")
	}
	return i, nil
}

// variable reads the reference that starts with the '$' at i and returns the index after it.
func (e *expander) variable(i int, emit bool) (int, error) {
	s := e.s
	if i+1 < len(s) && s[i+1] == '{' {
		return e.braced(i, emit)
	}
	end := nameEnd(s, i+1)
	if end == i+1 {
		return i + 1, e.write(emit, "$") // not a reference
	}
	return end, e.value(emit, s[i+1:end])
}

// braced reads the ${...} that starts with the '$' at i and returns the index after it.
func (e *expander) braced(i int, emit bool) (int, error) {
	s := e.s
	start := i + 2
	end := nameEnd(s, start)
	switch {
	case end >= len(s):
		return 0, e.errorf(i, "unterminated ${")
	case end == start:
		return 0, e.errorf(i, "bad variable name")
	case s[end] == '}':
		return end + 1, e.value(emit, s[start:end])
	}
	name := s[start:end]
	colon := s[end] == ':'
	op := end
	if colon {
		op++
	}
	if op >= len(s) {
		return 0, e.errorf(i, "unterminated ${")
	}
	if s[op] != '-' && s[op] != '+' {
		return 0, e.errorf(i, "unsupported modifier %q (want :-, -, :+ or +)", s[end:op+1])
	}
	if e.depth++; e.depth > maxNesting {
		return 0, e.errorf(i, "${...} nested over %d deep", maxNesting)
	}
	defer func() { e.depth-- }()
	var v string
	var set bool
	if emit && e.lookup != nil {
		v, set = e.lookup(name)
	}
	useWord := !set || colon && v == "" // for '-'
	if s[op] == '+' {
		useWord = set && (!colon || v != "")
	} else if emit && !useWord {
		if err := e.write(true, v); err != nil {
			return 0, err
		}
	}
	return e.run(op+1, emit && useWord, i)
}

// value writes the value of the variable name.
func (e *expander) value(emit bool, name string) error {
	if !emit || e.lookup == nil {
		return nil
	}
	v, _ := e.lookup(name)
	return e.write(true, v)
}

// write appends v to the output if emit, within maxExpanded.
func (e *expander) write(emit bool, v string) error {
	if !emit {
		return nil
	}
	if e.out.Len()+len(v) > maxExpanded {
		return fmt.Errorf("expansion is over 1 MiB: %w", errdefs.ErrInvalidArgument)
	}
	e.out.WriteString(v)
	return nil
}

// errorf returns an error about the reference that starts at i.
func (e *expander) errorf(i int, format string, a ...any) error {
	ref := e.s[i:]
	if len(ref) > 40 {
		ref = ref[:40] + "..."
	}
	return fmt.Errorf("%s in %q: %w", fmt.Sprintf(format, a...), ref, errdefs.ErrInvalidArgument)
}

// nameEnd returns the index after the variable name that starts at i in s (i itself if none does).
func nameEnd(s string, i int) int {
	j := i
	for j < len(s) {
		c := s[j]
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || j > i && '0' <= c && c <= '9' {
			j++
			continue
		}
		break
	}
	return j
}
