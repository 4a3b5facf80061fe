package api

import (
	"errors"
	"html/template"
	"net/http"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/connections"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/secrets"
)

func toConnection(c connections.Connection) wire.Connection {
	return wire.Connection{
		Name: c.Name, Flow: string(c.Flow), Status: string(c.Status), HasClientSecret: c.HasClientSecret, Error: c.Error,
		Provider: wire.OAuthProvider{Issuer: c.Provider.Issuer, AuthorizationURL: c.Provider.AuthorizationURL,
			TokenURL: c.Provider.TokenURL, DeviceAuthorizationURL: c.Provider.DeviceAuthorizationURL,
			RevocationURL: c.Provider.RevocationURL, ClientID: c.Provider.ClientID, Scopes: c.Provider.Scopes},
		CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt, ConnectedAt: c.ConnectedAt, TokenExpiresAt: c.TokenExpiresAt,
		RefreshedAt: c.RefreshedAt, Refreshes: c.Refreshes, CanRefresh: c.CanRefresh,
	}
}

func toSignIn(c connections.Connection, a connections.Authorization) wire.ConnectionSignIn {
	return wire.ConnectionSignIn{Connection: toConnection(c), Authorization: wire.ConnectionAuthorization{
		URL: a.URL, UserCode: a.UserCode, VerificationURI: a.VerificationURI, VerificationURIComplete: a.VerificationURIComplete, ExpiresAt: a.ExpiresAt}}
}

// connectionName returns the {name} of the path, checked.
func connectionName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := secrets.ValidateName(name); err != nil {
		return "", clientErr(errdefs.ErrInvalidArgument, "invalid connection name %q: want 1-128 letters, digits or _.-", truncate(name, 64))
	}
	return name, nil
}

func (s *Server) createConnection(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateConnectionRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := secrets.ValidateName(req.Name); err != nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "invalid connection name %q: want 1-128 letters, digits or _.-", truncate(req.Name, 64)))
		return
	}
	p := req.Provider
	c, a, err := s.cp.CreateConnection(r.Context(), tenantOf(r), req.Name, connections.Flow(req.Flow), connections.Provider{
		Issuer: p.Issuer, AuthorizationURL: p.AuthorizationURL, TokenURL: p.TokenURL, DeviceAuthorizationURL: p.DeviceAuthorizationURL,
		RevocationURL: p.RevocationURL, ClientID: p.ClientID, ClientSecret: p.ClientSecret, Scopes: p.Scopes})
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.Header().Set("Location", "/v1/connections/"+c.Name)
	writeJSON(w, http.StatusCreated, toSignIn(c, a))
}

func (s *Server) listConnections(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	cs, err := s.cp.ListConnections(r.Context(), tenantOf(r))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.ConnectionList{Connections: make([]wire.Connection, 0, len(cs))}
	for _, c := range cs {
		out.Connections = append(out.Connections, toConnection(c))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getConnection(w http.ResponseWriter, r *http.Request) {
	name, err := connectionName(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	c, err := s.cp.GetConnection(r.Context(), tenantOf(r), name)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toConnection(c))
}

func (s *Server) authorizeConnection(w http.ResponseWriter, r *http.Request) {
	name, err := connectionName(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	c, a, err := s.cp.AuthorizeConnection(r.Context(), tenantOf(r), name)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toSignIn(c, a))
}

func (s *Server) revokeConnection(w http.ResponseWriter, r *http.Request) {
	name, err := connectionName(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	c, err := s.cp.RevokeConnection(r.Context(), tenantOf(r), name)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toConnection(c))
}

func (s *Server) deleteConnection(w http.ResponseWriter, r *http.Request) {
	name, err := connectionName(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := s.cp.DeleteConnection(r.Context(), tenantOf(r), name); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// callbackPage is what the user's browser shows at the end of the authorization code flow.
var callbackPage = template.Must(template.New("callback").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Airlock</title></head>
<body><h1>{{.Title}}</h1><p>{{.Message}}</p></body></html>
`))

// oauthCallback finishes the authorization code flow. It takes no API key: the provider redirects the
// user's browser here, and the single-use state (bound to the tenant and connection when the flow
// started, and to its PKCE verifier) is what authorizes the call.
func (s *Server) oauthCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page := struct{ Title, Message string }{}
	status := http.StatusOK
	c, err := s.cp.ConnectionCallback(r.Context(), q.Get("state"), q.Get("code"), truncate(q.Get("error"), 128), truncate(q.Get("error_description"), 300))
	switch {
	case err == nil:
		page.Title, page.Message = "Connected", "Connection "+c.Name+" is signed in. You can close this window."
	case errors.Is(err, errdefs.ErrInvalidArgument), errors.Is(err, errdefs.ErrFailedPrecondition):
		status = http.StatusBadRequest
		page.Title, page.Message = "Sign-in failed", apiutil.TrimSentinel(err.Error(), err)
	default:
		s.log.Error("oauth callback failed", "err", err)
		status = http.StatusInternalServerError
		page.Title, page.Message = "Sign-in failed", "internal error; try again"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_ = callbackPage.Execute(w, page)
}
