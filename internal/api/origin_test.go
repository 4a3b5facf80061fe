package api

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestCheckSameOrigin: a mutating call a browser marks as from another origin (or another site, or an
// opaque origin such as a sandbox's page) is refused; the same origin, the public URL's, reads, and
// clients that send neither header pass.
func TestCheckSameOrigin(t *testing.T) {
	s := &Server{}
	s.ing.publicURL, _ = url.Parse("https://airlock.example.com")
	for _, c := range []struct {
		method, origin, site string
		ok                   bool
	}{
		{"POST", "", "", true},
		{"POST", "http://api.test:8080", "same-origin", true},
		{"DELETE", "http://API.test:8080", "", true},
		{"POST", "https://airlock.example.com", "", true},
		{"POST", "", "none", true},
		{"GET", "https://evil.example", "cross-site", true},
		{"HEAD", "null", "cross-site", true},
		{"POST", "https://evil.example", "", false},
		{"POST", "http://api.test:8081", "", false},
		{"PUT", "null", "", false},
		{"DELETE", "", "cross-site", false},
		{"PATCH", "", "same-site", false},
		{"POST", "http://airlock.example.com", "", false},
		{"POST", "file://", "", false},
	} {
		r := httptest.NewRequest(c.method, "http://api.test:8080/v1/sessions", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.site != "" {
			r.Header.Set("Sec-Fetch-Site", c.site)
		}
		err := s.checkSameOrigin(r)
		if (err == nil) != c.ok {
			t.Errorf("%s from %q (%q): %v, want ok %t", c.method, c.origin, c.site, err, c.ok)
		}
	}
}

// TestSameOriginSparesPorts: a sandbox's port through the path form is the sandbox's own traffic; the
// API's other routes are checked before routing.
func TestSameOriginSparesPorts(t *testing.T) {
	for p, port := range map[string]bool{
		"/v1/sessions/se_x/ports/8080/form":  true,
		"/v1/sandboxes/sb_x/ports/3000":      true,
		"/v1/sandboxes/sb_x/ports/3000/":     true,
		"/v1/sessions/se_x/pause":            false,
		"/v1/sessions/se_x/portsx/1":         false,
		"/v1/sandboxes/sb_x/ports":           false,
		"/v1/sandboxes/sb_x/files/ports/1/a": false,
	} {
		if got := portPathPattern.MatchString(p); got != port {
			t.Errorf("%s: a port's path %t, want %t", p, got, port)
		}
	}
	s := New(nil, nil, nil)
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "http://api.test/v1/sessions", nil)
	r.Header.Set("Origin", "https://evil.example")
	s.ServeHTTP(w, r)
	if w.Code != 403 || !strings.Contains(w.Body.String(), "cross-origin") {
		t.Errorf("a cross-origin POST: %d %s", w.Code, w.Body)
	}
}
