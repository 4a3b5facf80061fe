package api

import (
	"net/http"

	"github.com/airlockrun/airlock/internal/controlplane"
)

// e2bEdge is what the server does for E2B's handlers (e2b.Edge): it holds their requests to their
// credentials and records them in the audit log as it does /v1's, and forwards to sandboxes' ports
// through its ingress.
type e2bEdge struct{ s *Server }

// Serve serves h to r, authenticated as p with cred: held to cred while it lasts, and audited.
func (e e2bEdge) Serve(w http.ResponseWriter, r *http.Request, p controlplane.Principal, cred string, h http.HandlerFunc) {
	r, release := e.s.withPrincipal(r, p, cred, nil)
	defer release()
	e.s.audited(w, r, h)
}

// ServePort forwards r to port of session id's sandbox as the ingress's path form does.
func (e e2bEdge) ServePort(w http.ResponseWriter, r *http.Request, id string, port int, rest, prefix string) {
	e.s.servePort(w, r, id, port, rest, prefix, false)
}

// IngressDomain is the domain of the ingress's host form ("" if it has none).
func (e e2bEdge) IngressDomain() string { return e.s.ing.domain }
