package api

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// checkSameOrigin refuses a mutating call (any method but GET, HEAD and OPTIONS) that a browser says
// comes from a page of another origin: Sec-Fetch-Site other than same-origin or none (a user's own
// navigation), or an Origin header that is neither this request's host nor the public URL's. Clients
// that are not browsers send neither header and pass. The API's keys travel in a header, never a
// cookie, so another site's page cannot borrow them anyway; this is the second lock. Sandboxes' ports
// (the ingress, and the path form /v1/…/ports/N/…) are the sandboxes' own traffic and are not checked.
func (s *Server) checkSameOrigin(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return clientErr(errdefs.ErrPermissionDenied, "a %s call from a page of another site (Sec-Fetch-Site: %s) is refused: the API opens no cross-origin calls", r.Method, truncate(site, 32))
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") {
		if strings.EqualFold(u.Host, r.Host) {
			return nil
		}
		if pu := s.ing.publicURL; pu != nil && strings.EqualFold(u.Host, pu.Host) && u.Scheme == pu.Scheme {
			return nil
		}
	}
	return clientErr(errdefs.ErrPermissionDenied, "a %s call from the page at origin %q is refused: the API opens no cross-origin calls", r.Method, truncate(origin, 100))
}
