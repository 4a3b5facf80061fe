package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHandler: the page and its files are served with the console's headers (a CSP that allows only
// this origin and no framing); nothing outside the embedded files is, and nothing but GET and HEAD.
func TestHandler(t *testing.T) {
	h := Handler()
	get := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	for _, c := range []struct {
		path, ctype, body string
	}{
		{"/console/", "text/html", `src="/console/app.js"`},
		{"/console/index.html", "text/html", "<title>Airlock console</title>"},
		{"/console/app.js", "javascript", "sessionStorage"},
		{"/console/style.css", "text/css", "--accent"},
		{"/console/terminal.js", "javascript", `"airlock.bearer."`},
		{"/console/vendor/xterm.js", "javascript", "Terminal"},
		{"/console/vendor/xterm.css", "text/css", ".xterm"},
	} {
		w := get("GET", c.path)
		if w.Code != 200 || !strings.Contains(w.Header().Get("Content-Type"), c.ctype) || !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("GET %s: %d %q, body has %q: %t", c.path, w.Code, w.Header().Get("Content-Type"), c.body, strings.Contains(w.Body.String(), c.body))
		}
		csp := w.Header().Get("Content-Security-Policy")
		for _, want := range []string{"frame-ancestors 'none'", "script-src http://example.com/console/ https://example.com/console/;",
			"style-src http://example.com/console/ https://example.com/console/;", "default-src 'none'", "connect-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %q", c.path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: CSP %q allows unsafe sources", c.path, csp)
		}
		if w.Header().Get("X-Frame-Options") != "DENY" || w.Header().Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("GET %s: headers %v", c.path, w.Header())
		}
	}
	for _, p := range []string{"/console/nope.js", "/console/../console.go", "/console/assets/app.js", "/console/%2e%2e/console.go"} {
		if w := get("GET", p); w.Code != 404 {
			t.Errorf("GET %s: %d, want 404", p, w.Code)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		if w := get(m, "/console/"); w.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s /console/: %d, want 405", m, w.Code)
		}
	}
}

// TestPolicyHost: a Host header unfit for the policy gives no source at all for scripts and styles,
// never a source it names.
func TestPolicyHost(t *testing.T) {
	r := httptest.NewRequest("GET", "/console/", nil)
	r.Host = "evil.example; script-src *"
	p := policy(r)
	if !strings.Contains(p, "script-src 'none';") || strings.Contains(p, "evil") || strings.Contains(p, "*") {
		t.Errorf("policy for a bad host: %q", p)
	}
	r.Host = "[::1]:8080"
	if p := policy(r); !strings.Contains(p, "script-src http://[::1]:8080/console/ https://[::1]:8080/console/;") {
		t.Errorf("policy for [::1]:8080: %q", p)
	}
}
