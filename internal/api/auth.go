package api

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// authenticate checks the request's credential and returns the request with its principal in the
// context, held to its credential (see accessWatch) until the caller calls release; or it writes the
// error and returns nil.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (_ *http.Request, release func()) {
	cred := credential(r)
	p, err := s.cp.Authenticate(r.Context(), cred)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
		writeError(w, r, s.log, err)
		return nil, nil
	}
	return s.withPrincipal(r, p, cred, nil)
}

// withPrincipal returns r with p, who authenticated with cred, in its context, held to cred (and to
// still, if not nil) until release is called.
func (s *Server) withPrincipal(r *http.Request, p controlplane.Principal, cred string, still func(context.Context, controlplane.Principal) error) (_ *http.Request, release func()) {
	ctx, release := s.watch.hold(r.Context(), cred, still)
	return r.WithContext(apiutil.WithPrincipal(ctx, p)), release
}

// StreamProtocol is the WebSocket subprotocol of the exec and attach streams. A client that offers
// it (a browser must, to send its credential as bearerProtocolPrefix) gets it selected.
const StreamProtocol = "airlock.v1"

// bearerProtocolPrefix starts the WebSocket subprotocol that carries a credential: the prefix, then
// the credential in unpadded base64url. A browser cannot set the Authorization header of a
// WebSocket, and a credential must never travel in a URL, so the console offers two subprotocols,
// StreamProtocol and this one. The server never selects it, so it is never echoed back, and takes
// it only on a WebSocket upgrade that has no Authorization header.
const bearerProtocolPrefix = "airlock.bearer."

// credential returns the request's credential: the Authorization header's bearer credential, or, on
// a WebSocket upgrade without an Authorization header, the one in its bearer subprotocol. It is ""
// when there is none (or the subprotocol's is not valid base64url), which Authenticate refuses.
func credential(r *http.Request) string {
	if auth := r.Header.Get("Authorization"); auth != "" {
		cred, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok {
			return ""
		}
		return strings.TrimSpace(cred)
	}
	if !isWebSocketUpgrade(r) {
		return ""
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, proto := range strings.Split(v, ",") {
			enc, ok := strings.CutPrefix(strings.TrimSpace(proto), bearerProtocolPrefix)
			if !ok {
				continue
			}
			b, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil {
				return ""
			}
			return string(b)
		}
	}
	return ""
}

// isWebSocketUpgrade reports whether r asks for a WebSocket (RFC 6455 4.1): a GET with Upgrade:
// websocket and Connection: upgrade.
func isWebSocketUpgrade(r *http.Request) bool {
	if r.Method != http.MethodGet || !headerHasToken(r.Header, "Upgrade", "websocket") {
		return false
	}
	return headerHasToken(r.Header, "Connection", "upgrade")
}

// headerHasToken reports whether one of the comma-separated values of header name is token, ignoring
// case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// auth serves h to API keys with read scope for GET and write scope for every other method. Access
// tokens are refused: they reach only the work routes (see work).
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		need := store.ScopeWrite
		if r.Method == http.MethodGet {
			need = store.ScopeRead
		}
		s.withScope(need, false, h)(w, r)
	}
}

// admin serves h to API keys with admin scope.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return s.withScope(store.ScopeAdmin, false, h)
}

// operator serves h to admin keys of the operator tenant.
func (s *Server) operator(h http.HandlerFunc) http.HandlerFunc {
	return s.withScope(store.ScopeAdmin, true, h)
}

func (s *Server) withScope(need store.Scope, operator bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r, release := s.authenticate(w, r)
		if r == nil {
			return
		}
		defer release()
		// Refusals are recorded too, except the operator routes' 404 to other tenants.
		p := principalOf(r)
		if operator && p.Token == nil && p.Scope.Allows(need) && !p.Operator {
			writeError(w, r, s.log, clientErr(errdefs.ErrNotFound, "no route %s %s", r.Method, r.URL.Path))
			return
		}
		s.audited(w, r, func(w http.ResponseWriter, r *http.Request) {
			switch {
			case p.Token != nil:
				writeError(w, r, s.log, clientErr(errdefs.ErrPermissionDenied,
					"an access token reaches only the exec, process and file routes of its sandbox or session; %s %s needs an API key", r.Method, r.URL.Path))
			case !p.Scope.Allows(need):
				writeError(w, r, s.log, clientErr(errdefs.ErrPermissionDenied, "this API key has scope %s; %s %s needs %s", p.Scope, r.Method, r.URL.Path, need))
			default:
				h(w, r)
			}
		})
	}
}

// work serves a work route ({id} is a sandbox, or a session if session is set) to API keys with scope
// need, and to access tokens for that very sandbox or session with token scope tok. A token for another
// object gets not found, as a foreign tenant's key does.
func (s *Server) work(need store.Scope, tok store.TokenScope, session bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r, release := s.authenticate(w, r)
		if r == nil {
			return
		}
		defer release()
		s.audited(w, r, func(w http.ResponseWriter, r *http.Request) {
			p := principalOf(r)
			if p.Token == nil {
				if !p.Scope.Allows(need) {
					writeError(w, r, s.log, clientErr(errdefs.ErrPermissionDenied, "this API key has scope %s; %s %s needs %s", p.Scope, r.Method, r.URL.Path, need))
					return
				}
				h(w, r)
				return
			}
			id, kind := p.Token.SandboxID, "sandbox"
			if session {
				id, kind = p.Token.SessionID, "session"
			}
			if id == "" || id != r.PathValue("id") {
				writeError(w, r, s.log, clientErr(errdefs.ErrNotFound, "%s %s not found", kind, truncate(r.PathValue("id"), 64)))
				return
			}
			if !p.Token.Allows(tok) {
				writeError(w, r, s.log, clientErr(errdefs.ErrPermissionDenied, "this access token has scopes %s; %s %s needs %s",
					apiutil.JoinTokenScopes(p.Token.Scopes), r.Method, r.URL.Path, tok))
				return
			}
			h(w, r)
		})
	}
}

// principalOf is the principal r authenticated as (apiutil.PrincipalOf).
func principalOf(r *http.Request) controlplane.Principal { return apiutil.PrincipalOf(r) }

// tenantOf is the tenant of r's principal (apiutil.TenantOf).
func tenantOf(r *http.Request) string { return apiutil.TenantOf(r) }

var (
	tenantIDPattern = regexp.MustCompile(`^tn_[a-z2-7]{26}$`)
	keyIDPattern    = regexp.MustCompile(`^key_[a-z2-7]{26}$`)
	tokenIDPattern  = regexp.MustCompile(`^tok_[a-z2-7]{26}$`)
)

// pathID returns the {id} of the path if it matches pattern, or an invalid-argument error naming what.
func pathID(r *http.Request, pattern *regexp.Regexp, what, want string) (string, error) {
	id := r.PathValue("id")
	if !pattern.MatchString(id) {
		return "", clientErr(errdefs.ErrInvalidArgument, "invalid %s id %q: want %s", what, truncate(id, 64), want)
	}
	return id, nil
}

func toTenant(t store.Tenant) wire.Tenant {
	kp := t.KeyProvider
	if kp == "" {
		kp = "local"
	}
	return wire.Tenant{ID: t.ID, Name: t.Name, Operator: t.Operator, Disabled: t.DisabledAt != nil, DisabledAt: t.DisabledAt,
		CreatedAt: t.CreatedAt, Quotas: wire.Quotas(t.Quotas), KeyProvider: kp}
}

func toAPIKey(k store.APIKey) wire.APIKey {
	return wire.APIKey{ID: k.ID, Name: k.Name, Scope: string(k.Scope), Prefix: k.Prefix, CreatedAt: k.CreatedAt,
		LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt}
}

func toToken(t store.AccessToken) wire.AccessToken {
	scopes := make([]string, len(t.Scopes))
	for i, sc := range t.Scopes {
		scopes[i] = string(sc)
	}
	return wire.AccessToken{ID: t.ID, Name: t.Name, SandboxID: t.SandboxID, SessionID: t.SessionID, Scopes: scopes,
		Port: t.Port, Prefix: t.Prefix, CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt}
}

func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	ts, err := s.cp.ListTenants(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.TenantList{Tenants: make([]wire.Tenant, 0, len(ts))}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, s.withRuntimes(r.Context(), toTenant(t)))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateTenantRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	t, key, k, err := s.cp.CreateTenant(r.Context(), req.Name, req.KeyProvider)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.Header().Set("Location", "/v1/tenants/"+t.ID)
	writeJSON(w, http.StatusCreated, wire.CreatedTenant{Tenant: s.withRuntimes(r.Context(), toTenant(t)), APIKey: wire.NewAPIKey{APIKey: toAPIKey(k), Key: key}})
}

func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, tenantIDPattern, "tenant", "tn_ followed by 26 characters")
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	t, err := s.cp.GetTenant(r.Context(), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, s.withRuntimes(r.Context(), toTenant(t)))
}

// withRuntimes adds to t the runtimes the tenant may use.
func (s *Server) withRuntimes(ctx context.Context, t wire.Tenant) wire.Tenant {
	names, _, err := s.cp.TenantRuntimes(ctx, t.ID)
	switch {
	case err != nil:
	case names == nil:
		t.Runtimes = []string{"*"}
	default:
		t.Runtimes = names
	}
	return t
}

func (s *Server) updateTenant(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, tenantIDPattern, "tenant", "tn_ followed by 26 characters")
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req wire.UpdateTenantRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	t, err := s.cp.GetTenant(r.Context(), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if req.Quotas != nil {
		q := store.TenantQuotas(*req.Quotas)
		if err := q.Validate(); err != nil {
			writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "quotas must not be negative"))
			return
		}
		if t, err = s.cp.SetTenantQuotas(r.Context(), id, q); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	if req.Disabled != nil {
		if t, err = s.cp.SetTenantDisabled(r.Context(), id, *req.Disabled); err != nil {
			writeError(w, r, s.log, err)
			return
		}
		s.watch.kick()
	}
	if req.Runtimes != nil {
		if _, err := s.cp.SetTenantRuntimes(r.Context(), id, *req.Runtimes); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.withRuntimes(r.Context(), toTenant(t)))
}

func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	q, u, err := s.cp.Usage(r.Context(), tenantOf(r))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p := principalOf(r)
	writeJSON(w, http.StatusOK, wire.Usage{Quotas: wire.Quotas(q), Usage: wire.Quotas(u), Tenant: p.TenantID, Operator: p.Operator})
}

func (s *Server) listAPIKeys(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	ks, err := s.cp.ListAPIKeys(r.Context(), tenantOf(r))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.APIKeyList{APIKeys: make([]wire.APIKey, 0, len(ks))}
	for _, k := range ks {
		out.APIKeys = append(out.APIKeys, toAPIKey(k))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createAPIKey(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateAPIKeyRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	key, k, err := s.cp.CreateAPIKey(r.Context(), tenantOf(r), req.Name, store.Scope(req.Scope))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.Header().Set("Location", "/v1/api-keys/"+k.ID)
	writeJSON(w, http.StatusCreated, wire.NewAPIKey{APIKey: toAPIKey(k), Key: key})
}

func (s *Server) revokeAPIKey(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, keyIDPattern, "API key", "key_ followed by 26 characters")
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if id == principalOf(r).KeyID {
		writeError(w, r, s.log, clientErr(errdefs.ErrFailedPrecondition, "an API key cannot revoke itself; revoke it with another admin key"))
		return
	}
	if err := s.cp.RevokeAPIKey(r.Context(), tenantOf(r), id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.watch.kick() // its open streams end now, not at the next round
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	var f store.AccessTokenFilter
	for k, vs := range r.URL.Query() {
		switch k {
		case "sandbox_id":
			f.SandboxID = vs[0]
		case "session_id":
			f.SessionID = vs[0]
		default:
			writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "unknown query parameter %q: want sandbox_id or session_id", truncate(k, 64)))
			return
		}
	}
	ts, err := s.cp.ListAccessTokens(r.Context(), tenantOf(r), f)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.AccessTokenList{Tokens: make([]wire.AccessToken, 0, len(ts))}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, toToken(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateAccessTokenRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if req.SandboxID != "" && !sandboxIDPattern.MatchString(req.SandboxID) {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "invalid sandbox_id %q: want sb_ followed by 26 characters", truncate(req.SandboxID, 64)))
		return
	}
	if req.SessionID != "" && !apiutil.SessionIDPattern.MatchString(req.SessionID) {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "invalid session_id %q: want se_ followed by 26 characters", truncate(req.SessionID, 64)))
		return
	}
	if req.TTLSeconds < 0 || req.TTLSeconds > int64(controlplane.MaxTokenTTL/time.Second) {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "ttl_seconds must be between 1 and %d", int64(controlplane.MaxTokenTTL/time.Second)))
		return
	}
	treq := controlplane.TokenRequest{Name: req.Name, SandboxID: req.SandboxID, SessionID: req.SessionID, TTL: time.Duration(req.TTLSeconds) * time.Second,
		Port: req.Port}
	for _, sc := range req.Scopes {
		treq.Scopes = append(treq.Scopes, store.TokenScope(sc))
	}
	p := principalOf(r)
	cred, tok, err := s.cp.CreateAccessToken(r.Context(), p.TenantID, p.KeyID, treq)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.NewAccessToken{AccessToken: toToken(tok), Token: cred}
	if tok.Port != 0 && len(tok.Scopes) == 1 { // only a ports-only token may travel in a URL
		out.URLs = s.portURLs(r, tok.SandboxID+tok.SessionID, tok.Port, cred)
	}
	w.Header().Set("Location", "/v1/tokens/"+tok.ID)
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, tokenIDPattern, "access token", "tok_ followed by 26 characters")
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := s.cp.RevokeAccessToken(r.Context(), tenantOf(r), id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.watch.kick() // its open streams end now, not at the next round
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getKey(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	t, err := s.cp.GetTenant(r.Context(), tenantOf(r))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.TenantKey{Provider: toTenant(t).KeyProvider, Status: "available"}
	if err := s.cp.CheckTenantKey(r.Context(), t.ID); err != nil {
		if !errors.Is(err, errdefs.ErrKeyUnavailable) {
			writeError(w, r, s.log, err)
			return
		}
		out.Status, out.Error = "unavailable", err.Error()
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) rotateKey(w http.ResponseWriter, r *http.Request) {
	if err := onlyEmptyBody(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	id, err := s.cp.RotateTenantKey(r.Context(), tenantOf(r))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.RotatedKey{KeyID: id})
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	var req wire.RevokeKeyRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if req.Confirm != tenantOf(r) {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument,
			"revoking the key destroys it for good: nothing of the tenant can be decrypted afterwards; to go on, send confirm: %q", tenantOf(r)))
		return
	}
	if err := s.cp.RevokeTenantKey(r.Context(), tenantOf(r)); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
