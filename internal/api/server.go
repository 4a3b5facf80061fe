// Package api is the public HTTP API, /v1: JSON over HTTP, streams over WebSocket, errors as
// {"error":{"code":…,"message":…}}. It authenticates each request, validates its input, and calls the
// control plane; it is the one place where errors become HTTP statuses.
//
// The OpenAPI document in the repository's api/ directory describes every route; a test checks that the
// router and the document agree.
package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"

	apidoc "github.com/airlockrun/airlock/api"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// Server serves the public API.
type Server struct {
	cp  *controlplane.Service
	log *slog.Logger
	mux *http.ServeMux
	// metricsHandler serves GET /metrics; nil: 404.
	metricsHandler http.Handler

	// idem serializes requests that carry the same Idempotency-Key.
	idemMu sync.Mutex
	// idemLocks holds one lock per tenant+key while in use; guarded by idemMu.
	idemLocks map[string]*sync.Mutex
}

// Route is one route of the API: a method and a ServeMux path pattern.
type Route struct {
	Method  string
	Pattern string
}

// New returns the API server. metrics, if not nil, serves GET /metrics (the Prometheus exposition), which
// takes no API key: give it only metrics every client of the listener may see.
func New(cp *controlplane.Service, log *slog.Logger, metrics http.Handler) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cp: cp, log: log, mux: http.NewServeMux(), metricsHandler: metrics, idemLocks: map[string]*sync.Mutex{}}
	for _, r := range s.routes() {
		s.mux.HandleFunc(r.Method+" "+r.Pattern, r.handler)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.log, clientErr(errdefs.ErrNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return s
}

type route struct {
	Method, Pattern string
	handler         http.HandlerFunc
}

func (s *Server) routes() []route {
	return []route{
		{"GET", "/v1/health", s.health},
		{"GET", "/v1/openapi.yaml", s.openapi},
		{"GET", "/metrics", s.metrics},
		{"POST", "/v1/secrets", s.auth(s.createSecret)},
		{"GET", "/v1/secrets", s.auth(s.listSecrets)},
		{"GET", "/v1/secrets/{name}", s.auth(s.getSecret)},
		{"PUT", "/v1/secrets/{name}", s.auth(s.updateSecret)},
		{"DELETE", "/v1/secrets/{name}", s.auth(s.deleteSecret)},
		{"POST", "/v1/connections", s.auth(s.createConnection)},
		{"GET", "/v1/connections", s.auth(s.listConnections)},
		{"GET", "/v1/connections/{name}", s.auth(s.getConnection)},
		{"DELETE", "/v1/connections/{name}", s.auth(s.deleteConnection)},
		{"POST", "/v1/connections/{name}/authorize", s.auth(s.authorizeConnection)},
		{"POST", "/v1/connections/{name}/revoke", s.auth(s.revokeConnection)},
		{"GET", "/v1/oauth/callback", s.oauthCallback},
		{"POST", "/v1/sandboxes", s.auth(s.createSandbox)},
		{"GET", "/v1/sandboxes", s.auth(s.listSandboxes)},
		{"GET", "/v1/sandboxes/{id}", s.auth(s.getSandbox)},
		{"DELETE", "/v1/sandboxes/{id}", s.auth(s.deleteSandbox)},
		{"POST", "/v1/sandboxes/{id}/timeout", s.auth(s.setTimeout)},
		{"GET", "/v1/sandboxes/{id}/network", s.auth(s.getNetwork)},
		{"PUT", "/v1/sandboxes/{id}/network", s.auth(s.setNetwork)},
		{"GET", "/v1/sandboxes/{id}/egress", s.auth(s.egress)},
		{"POST", "/v1/sandboxes/{id}/exec", s.auth(s.exec)},
		{"GET", "/v1/sandboxes/{id}/exec/stream", s.auth(s.execStream)},
		{"GET", "/v1/sandboxes/{id}/processes", s.auth(s.listProcesses)},
		{"GET", "/v1/sandboxes/{id}/processes/{pid}/attach", s.auth(s.attach)},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", s.auth(s.signal)},
		{"GET", "/v1/sandboxes/{id}/files", s.auth(s.readFile)},
		{"PUT", "/v1/sandboxes/{id}/files", s.auth(s.writeFile)},
		{"DELETE", "/v1/sandboxes/{id}/files", s.auth(s.removeFile)},
		{"GET", "/v1/sandboxes/{id}/files/stat", s.auth(s.statFile)},
		{"GET", "/v1/sandboxes/{id}/files/list", s.auth(s.listFiles)},
		{"POST", "/v1/sandboxes/{id}/files/mkdir", s.auth(s.mkdir)},
		{"POST", "/v1/sandboxes/{id}/files/move", s.auth(s.move)},
		{"GET", "/v1/sandboxes/{id}/files/tar", s.auth(s.tarDownload)},
		{"PUT", "/v1/sandboxes/{id}/files/tar", s.auth(s.tarUpload)},
	}
}

// Routes reports every route the server serves, for the test that holds the OpenAPI document to them.
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.routes() {
		out = append(out, Route{Method: r.Method, Pattern: r.Pattern})
	}
	return out
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	s.mux.ServeHTTP(w, r)
}

type tenantKey struct{}

// auth checks the request's API key and puts its tenant in the context.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			key = ""
		}
		tenant, err := s.cp.Authenticate(r.Context(), strings.TrimSpace(key))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
			writeError(w, r, s.log, err)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	}
}

func tenantOf(r *http.Request) string { s, _ := r.Context().Value(tenantKey{}).(string); return s }

var sandboxIDPattern = regexp.MustCompile(`^sb_[a-z2-7]{26}$`)

// sandboxID returns the {id} of the path, or an invalid-argument error.
func sandboxID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !sandboxIDPattern.MatchString(id) {
		return "", clientErr(errdefs.ErrInvalidArgument, "invalid sandbox id %q: want sb_ followed by 26 characters", truncate(id, 64))
	}
	return id, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(apidoc.OpenAPI)
}

func toAPI(sb store.Sandbox) airlock.Sandbox {
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	np, _ := controlplane.NetworkPolicy(sb) // stored by the control plane, which checked it
	return airlock.Sandbox{
		Network: fromPolicy(np),
		ID:      sb.ID, Template: sb.Template, State: string(sb.State), Reason: sb.Reason,
		CPU: sb.Spec.CPUMillicores, MemoryMB: sb.Spec.MemoryMB, DiskMB: sb.Spec.DiskMB,
		TimeoutSeconds: sb.Spec.TimeoutSeconds, Metadata: md,
		CreatedAt: sb.CreatedAt, StartedAt: sb.StartedAt, EndsAt: sb.EndsAt, StoppedAt: sb.StoppedAt,
	}
}

// maxIdempotencyKey bounds the Idempotency-Key header.
const maxIdempotencyKey = 255

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrTooLarge, "request body is larger than %d bytes", maxJSONBody))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req airlock.CreateSandboxRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKey {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "Idempotency-Key is longer than %d bytes", maxIdempotencyKey))
		return
	}
	op := "POST /v1/sandboxes"
	sum := sha256.Sum256(body)
	if key != "" {
		unlock := s.lockIdem(tenant + "\x00" + key)
		defer unlock()
		rec, err := s.cp.GetIdempotency(r.Context(), tenant, key)
		switch {
		case err == nil:
			if rec.Op != op || !bytes.Equal(rec.RequestHash, sum[:]) {
				writeError(w, r, s.log, clientErr(errdefs.ErrConflict, "Idempotency-Key %q was already used with a different request", truncate(key, 64)))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(rec.ResponseStatus)
			_, _ = w.Write(rec.ResponseBody)
			return
		case !errors.Is(err, errdefs.ErrNotFound):
			writeError(w, r, s.log, err)
			return
		}
	}
	creq := controlplane.CreateRequest{
		Template: req.Template, Env: req.Env, CPUMillicores: req.CPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB,
		TimeoutSeconds: req.TimeoutSeconds, Metadata: req.Metadata,
	}
	if req.Network != nil {
		p, err := toPolicy(*req.Network)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		creq.Network = &p
	}
	sb, err := s.cp.CreateSandbox(r.Context(), tenant, creq)
	if err != nil && sb.ID == "" {
		writeError(w, r, s.log, err)
		return
	}
	if err != nil {
		s.log.Error("create sandbox", "sandbox", sb.ID, "err", err)
	}
	// A sandbox that failed to boot is still created: it is reported, failed, with its reason.
	var buf bytes.Buffer
	_ = jsonEncode(&buf, toAPI(sb))
	if key != "" {
		if err := s.cp.PutIdempotency(context.WithoutCancel(r.Context()), store.IdempotencyRecord{
			TenantID: tenant, Key: key, Op: op, RequestHash: sum[:], ResponseStatus: http.StatusCreated, ResponseBody: buf.Bytes(),
		}); err != nil {
			s.log.Warn("save idempotency record", "err", err)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/sandboxes/"+sb.ID)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(buf.Bytes())
}

func (s *Server) lockIdem(k string) func() {
	s.idemMu.Lock()
	m := s.idemLocks[k]
	if m == nil {
		m = &sync.Mutex{}
		s.idemLocks[k] = m
	}
	s.idemMu.Unlock()
	m.Lock()
	return func() {
		m.Unlock()
		s.idemMu.Lock()
		if s.idemLocks[k] == m && m.TryLock() {
			delete(s.idemLocks, k)
			m.Unlock()
		}
		s.idemMu.Unlock()
	}
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.SandboxFilter{Cursor: q.Get("cursor")}
	for k, vs := range q {
		switch {
		case k == "state":
			for _, v := range vs {
				for _, st := range strings.Split(v, ",") {
					state := store.SandboxState(strings.TrimSpace(st))
					if !state.Valid() {
						writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "unknown state %q: want one of creating, running, stopping, stopped, failed", truncate(st, 32)))
						return
					}
					f.States = append(f.States, state)
				}
			}
		case k == "limit":
			n, err := strconv.Atoi(q.Get("limit"))
			if err != nil || n < 1 || n > store.MaxListLimit {
				writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "limit must be an integer between 1 and %d", store.MaxListLimit))
				return
			}
			f.Limit = n
		case k == "cursor":
		case strings.HasPrefix(k, "metadata."):
			if f.Metadata == nil {
				f.Metadata = map[string]string{}
			}
			f.Metadata[strings.TrimPrefix(k, "metadata.")] = vs[0]
		default:
			writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "unknown query parameter %q: want state, limit, cursor or metadata.<key>", truncate(k, 64)))
			return
		}
	}
	sbs, next, err := s.cp.ListSandboxes(r.Context(), tenantOf(r), f)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := airlock.SandboxList{Sandboxes: make([]airlock.Sandbox, 0, len(sbs)), NextCursor: next}
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, toAPI(sb))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	sb, err := s.cp.GetSandbox(r.Context(), tenantOf(r), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toAPI(sb))
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := s.cp.DeleteSandbox(r.Context(), tenantOf(r), id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req airlock.SetTimeoutRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	sb, err := s.cp.SetTimeout(r.Context(), tenantOf(r), id, req.TimeoutSeconds)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toAPI(sb))
}
