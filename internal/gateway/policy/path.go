package policy

import (
	"strings"
	"unicode/utf8"
)

// CanonicalPath returns the canonical form of an HTTP request path and whether the path is safe, that
// is, whether every server would read it the same way. Rule.PathPrefix is matched against this form.
//
// p is the path as sent on the wire (the request-target in origin form, such as
// http.Request.URL.EscapedPath() or RequestURI). Canonicalization:
//   - drops the query: everything from the first "?";
//   - decodes every percent-escape ("%6D" → "m"), so encoded and plain spellings match alike.
//
// The path is unsafe (ok false) when it:
//   - does not start with "/" (so "*" and absolute URLs are unsafe: pass the path part);
//   - holds a malformed escape ("%", "%4", "%zz");
//   - holds an encoded "/" ("%2F"), "\" ("%5C") or "%" ("%25", to rule out double decoding);
//   - holds a literal "#", "\" or space, or a control byte, literal or encoded;
//   - decodes to invalid UTF-8 (such as overlong forms of "." or "/");
//   - has a "." or ".." segment, literal or encoded ("%2e%2E"), also with parameters (".;x", "..;x");
//   - has an empty segment ("//"), except that one trailing "/" is kept.
//
// Unsafe paths are not rewritten because servers disagree on how to resolve them; see Matcher.Request
// for how they are treated. Paths are case-sensitive.
func CanonicalPath(p string) (string, bool) {
	return canonicalPath(p)
}

func canonicalPath(p string) (string, bool) {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" || p[0] != '/' {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) {
				return "", false
			}
			hi, ok1 := unhex(p[i+1])
			lo, ok2 := unhex(p[i+2])
			if !ok1 || !ok2 {
				return "", false
			}
			v := hi<<4 | lo
			if v == '/' || v == '\\' || v == '%' || v < 0x20 || v == 0x7f {
				return "", false
			}
			b.WriteByte(v)
			i += 2
		case c == '\\' || c == '#' || c <= 0x20 || c == 0x7f:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	out := b.String()
	if !utf8.ValidString(out) {
		return "", false
	}
	// out starts with "/"; check the segments after it.
	segs := out[1:]
	for len(segs) > 0 {
		seg, rest, more := strings.Cut(segs, "/")
		if seg == "" {
			return "", false // "//" (a trailing "/" ends the loop before reaching here)
		}
		base, _, _ := strings.Cut(seg, ";")
		if base == "." || base == ".." {
			return "", false
		}
		if !more {
			break
		}
		segs = rest
	}
	return out, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// pathHasPrefix reports whether canonical path c is prefix or lies below it: equal, or prefix ends
// with "/", or the next byte of c is "/". So "/v1/files" matches "/v1/files" and "/v1/files/x" but
// not "/v1/filesystem"; "/v1/" matches "/v1/x" but not "/v1".
func pathHasPrefix(c, prefix string) bool {
	if !strings.HasPrefix(c, prefix) {
		return false
	}
	return len(c) == len(prefix) || prefix[len(prefix)-1] == '/' || c[len(prefix)] == '/'
}
