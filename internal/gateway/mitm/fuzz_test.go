package mitm

import (
	"strings"
	"testing"
)

// FuzzCanonicalHost feeds canonicalHost what a sandbox can put in SNI.
func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"example.com", "EXAMPLE.com.", "a_b.example", "1.2.3.4", "::1", "*.x.com", "", "..", "xn--bcher-kva.example"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		h, err := canonicalHost(host)
		if err != nil {
			return
		}
		if len(h) == 0 || len(h) > 253 || h != strings.ToLower(h) || strings.ContainsAny(h, "*:/ \x00[]") {
			t.Fatalf("canonicalHost(%q) = %q: not a canonical DNS name", host, h)
		}
		if again, err := canonicalHost(h); err != nil || again != h {
			t.Fatalf("canonicalHost(%q) = %q, %v; want it idempotent", h, again, err)
		}
	})
}
