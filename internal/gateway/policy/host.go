package policy

import (
	"fmt"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// hostPattern is a compiled Rule.Host: an exact name, or (wildcard) the suffix ".example.com" that
// a name must end with after at least one more label.
type hostPattern struct {
	name     string // lowercase, no trailing dot; for a wildcard, the part after "*."
	wildcard bool
}

func parseHostPattern(s string) (*hostPattern, error) {
	rest, wildcard := strings.CutPrefix(s, "*.")
	n, ok := NormalizeHost(rest)
	if !ok {
		return nil, fmt.Errorf("host %q: want a host name of [a-z0-9-] labels, optionally prefixed by \"*.\": %w", s, errdefs.ErrInvalidArgument)
	}
	return &hostPattern{name: n, wildcard: wildcard}, nil
}

// match reports whether the normalized host name h matches the pattern. An empty h matches nothing.
func (p *hostPattern) match(h string) bool {
	if h == "" {
		return false
	}
	if !p.wildcard {
		return h == p.name
	}
	return len(h) > len(p.name)+1 && strings.HasSuffix(h, p.name) && h[len(h)-len(p.name)-1] == '.'
}

// NormalizeHost returns s lowercased and without one trailing dot, and whether s is a valid host name:
// dot-separated labels of ASCII letters, digits and hyphens, each 1–63 bytes and neither starting nor
// ending with a hyphen, at most 253 bytes in all, the last label not all digits (so an IPv4 literal is
// not a host name). It is the normalization every Matcher method applies to the names it is given.
func NormalizeHost(s string) (string, bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return "", false
	}
	b := make([]byte, len(s))
	labelStart := 0
	allDigits := true
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			l := i - labelStart
			if l == 0 || l > 63 || b[labelStart] == '-' || b[i-1] == '-' {
				return "", false
			}
			if i == len(s) && allDigits {
				return "", false
			}
			if i < len(s) {
				b[i] = '.'
			}
			labelStart = i + 1
			allDigits = true
			continue
		}
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
			allDigits = false
		case c >= 'a' && c <= 'z', c == '-':
			allDigits = false
		case c >= '0' && c <= '9':
		default:
			return "", false
		}
		b[i] = c
	}
	return string(b), true
}
