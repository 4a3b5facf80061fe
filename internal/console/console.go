// Package console serves Airlock's web console at /console: static files embedded in the binary (the
// hand-written sources under assets/ are what is served, with no build step), a single page that
// calls the API with the API key the user signs in with, kept in the browser tab's session storage
// only (never in a URL or a cookie, so no other site's page can make the browser use it).
//
// Every response carries a strict Content-Security-Policy (scripts, styles and calls to this origin
// only, no inline script, no framing), and the API refuses a mutating call a browser marks as coming
// from another site (api.Server's same-origin check); the API opens no CORS.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is served.
const Prefix = "/console/"

// policy is the console's Content-Security-Policy for a request: scripts, styles and fonts from the
// console's own files only (under Prefix, not anywhere on this origin: a sandbox's port is served
// under /v1/…/ports/ on it), calls to this origin, no inline script or style, no plugin, no framing by
// any page, no form posting elsewhere.
func policy(r *http.Request) string {
	files := "'none'"
	if hostPattern.MatchString(r.Host) {
		files = "http://" + r.Host + Prefix + " https://" + r.Host + Prefix
	}
	return "default-src 'none'; script-src " + files + "; style-src " + files + "; font-src " + files +
		"; img-src 'self' data:; connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
}

// hostPattern is a Host header fit to go into the policy: a name or an address, and a port.
var hostPattern = regexp.MustCompile(`^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$`)

// Handler serves the console under Prefix: its files by name, and its page for the console's own
// path. Only GET and HEAD.
func Handler() http.Handler {
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree always has assets/
	}
	static := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", policy(r))
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the console is read only: the API is at /v1", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r.URL.Path, "/console")), "/")
		if name == "" || name == "index.html" {
			// The page itself: never cached, so that a new binary's console is the one loaded.
			h.Set("Cache-Control", "no-store")
			b, _ := assets.ReadFile("assets/index.html")
			h.Set("Content-Type", "text/html; charset=utf-8")
			w.Write(b)
			return
		}
		if _, err := fs.Stat(files, name); err != nil {
			http.NotFound(w, r)
			return
		}
		h.Set("Cache-Control", "no-cache")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		r2.URL.RawPath = ""
		static.ServeHTTP(w, r2)
	})
}
