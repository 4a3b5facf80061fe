package dockerfile

import (
	"errors"
	"strings"
)

// Words and quotes, as Docker's shell-like lexer reads the arguments it expands: words are split at
// spaces outside quotes; the escape character makes the next character literal outside quotes and, in
// double quotes, before '"', '$' and itself; single quotes make everything literal. The escape
// character is a byte, '\\' or '`', so these work on bytes: no byte of a multi-byte UTF-8 character is
// ASCII.

// errUnterminated reports a quote that is not closed.
var errUnterminated = errors.New("unterminated quote")

// isSpace reports whether c separates words.
func isSpace(c byte) bool {
	return strings.IndexByte(spaces, c) >= 0
}

// splitWords splits s at spaces outside quotes, keeping quotes and escapes in the words. With an
// unterminated quote, it returns the words up to the end and errUnterminated.
func splitWords(s string, esc byte) ([]string, error) {
	var words []string
	var quote byte
	start := -1 // the start of the word being read
	for i := 0; i < len(s); i++ {
		c := s[i]
		if quote == 0 && isSpace(c) {
			if start >= 0 {
				words = append(words, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
		case c == esc:
			i++ // the next byte is escaped (in double quotes too, as far as finding their end goes)
		case quote == '"':
			if c == '"' {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		}
	}
	if start >= 0 {
		words = append(words, s[start:])
	}
	if quote != 0 {
		return words, errUnterminated
	}
	return words, nil
}

// indexUnquoted returns the index of the first c in s outside quotes and not escaped, or -1.
func indexUnquoted(s string, c, esc byte) int {
	var quote byte
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case quote == '\'':
			if b == '\'' {
				quote = 0
			}
		case b == esc:
			i++
		case quote == '"':
			if b == '"' {
				quote = 0
			}
		case b == '\'' || b == '"':
			quote = b
		case b == c:
			return i
		}
	}
	return -1
}

// unquote removes the quotes of s and resolves its escapes, and returns s in Expand's syntax: a '$'
// outside single quotes and not escaped stays a '$', for Expand to expand; a literal '$' or backslash is
// written `\$` or `\\`.
func unquote(s string, esc byte) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	literal := func(c byte) {
		if c == '$' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == esc:
			if i+1 < len(s) {
				i++
			}
			literal(s[i])
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return "", errUnterminated
			}
			for _, q := range []byte(s[i+1 : i+1+end]) {
				literal(q)
			}
			i += 1 + end
		case c == '"':
			closed := false
			for i++; i < len(s); i++ {
				c := s[i]
				if c == '"' {
					closed = true
					break
				}
				switch {
				case c == esc && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '$' || s[i+1] == esc):
					i++
					literal(s[i])
				case c == '$':
					b.WriteByte('$')
				default:
					literal(c)
				}
			}
			if !closed {
				return "", errUnterminated
			}
		case c == '$':
			b.WriteByte('$')
		default:
			literal(c)
		}
	}
	return b.String(), nil
}
