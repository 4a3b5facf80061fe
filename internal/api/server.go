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
	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/api/e2b"
	"github.com/airlockrun/airlock/internal/console"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// Server serves the public API.
type Server struct {
	cp  *controlplane.Service
	log *slog.Logger
	mux *http.ServeMux
	// metricsHandler serves GET /metrics; nil: 404.
	metricsHandler http.Handler

	// audit records authenticated calls in their tenants' audit logs; nil: none.
	audit AuditLog

	// idem serializes requests that carry the same Idempotency-Key.
	idemMu sync.Mutex
	// idemLocks holds one lock per tenant+key while in use; guarded by idemMu.
	idemLocks map[string]*sync.Mutex

	// ing forwards requests into sandboxes' ports (see ports.go).
	ing ingress

	// e2b serves E2B's API under /e2b (internal/api/e2b), mounted on mux.
	e2b *e2b.Handler

	// watch ends the requests in progress whose credential stops holding (access.go).
	watch accessWatch
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
	s.watch = accessWatch{every: AccessRecheckInterval, log: log,
		auth: func(ctx context.Context, cred string) (controlplane.Principal, error) {
			return s.cp.Authenticate(ctx, cred)
		}}
	for _, r := range s.routes() {
		s.mux.HandleFunc(r.Method+" "+r.Pattern, r.handler)
	}
	// E2B's API (internal/api/e2b) is documented in docs/E2B.md, not in Airlock's OpenAPI document.
	s.e2b = e2b.New(cp, e2bEdge{s}, log)
	for _, r := range s.e2b.Routes() {
		s.mux.HandleFunc(r.Method+" "+r.Pattern, r.Handler)
	}
	// The web console (internal/console): its files, and its page at /console.
	s.mux.Handle(console.Prefix, console.Handler())
	s.mux.Handle("GET /console", http.RedirectHandler(console.Prefix, http.StatusMovedPermanently))
	s.mux.HandleFunc(e2b.Prefix+"/", s.e2b.NotFound)
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
	routes := []route{
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
		{"POST", "/v1/sessions", s.auth(s.createSession)},
		{"GET", "/v1/sessions", s.auth(s.listSessions)},
		{"GET", "/v1/sessions/{id}", s.auth(s.getSession)},
		{"DELETE", "/v1/sessions/{id}", s.auth(s.deleteSession)},
		{"POST", "/v1/sessions/{id}/pause", s.auth(s.pauseSession)},
		{"POST", "/v1/sessions/{id}/resume", s.auth(s.resumeSession)},
		{"POST", "/v1/sessions/{id}/timeout", s.auth(s.setSessionTimeout)},
		{"POST", "/v1/sessions/{id}/fork", s.auth(s.forkSession)},
		{"POST", "/v1/sessions/{id}/snapshots", s.auth(s.createSnapshot)},
		{"GET", "/v1/sessions/{id}/snapshots", s.auth(s.listSnapshots)},
		{"GET", "/v1/sessions/{id}/snapshots/{snapshot}", s.auth(s.getSnapshot)},
		{"PATCH", "/v1/sessions/{id}/snapshots/{snapshot}", s.auth(s.updateSnapshot)},
		{"POST", "/v1/sessions/{id}/restore", s.auth(s.restoreSession)},
		{"GET", "/v1/sessions/{id}/timeline", s.auth(s.timeline)},
		{"GET", "/v1/sessions/{id}/snapshots/{snapshot}/files", s.auth(s.readSnapshotFile)},
		{"GET", "/v1/sessions/{id}/snapshots/{snapshot}/files/list", s.auth(s.listSnapshotFiles)},
		{"GET", "/v1/sessions/{id}/diff", s.auth(s.diffSnapshots)},
		{"GET", "/v1/tenants", s.operator(s.listTenants)},
		{"POST", "/v1/tenants", s.operator(s.createTenant)},
		{"GET", "/v1/tenants/{id}", s.operator(s.getTenant)},
		{"PATCH", "/v1/tenants/{id}", s.operator(s.updateTenant)},
		{"GET", "/v1/templates", s.auth(s.listTemplates)},
		{"GET", "/v1/templates/{name}", s.auth(s.getTemplate)},
		{"PUT", "/v1/templates/{name}", s.operator(s.importTemplate)},
		{"DELETE", "/v1/templates/{name}", s.operator(s.deleteTemplate)},
		{"POST", "/v1/templates/{name}/pull", s.operator(s.pullTemplate)},
		{"POST", "/v1/templates/{name}/build", s.operator(s.buildTemplate)},
		{"GET", "/v1/templates/{name}/export", s.operator(s.exportTemplate)},
		{"PUT", "/v1/templates/{name}/runtimes", s.operator(s.setTemplateRuntimes)},
		{"GET", "/v1/nodes", s.operator(s.listNodes)},
		{"DELETE", "/v1/nodes/{id}", s.operator(s.removeNode)},
		{"PUT", "/v1/nodes/{id}/bound", s.operator(s.setNodeBound)},
		{"POST", "/v1/nodes/{id}/drain", s.operator(s.drainNode)},
		{"POST", "/v1/nodes/{id}/undrain", s.operator(s.undrainNode)},
		{"POST", "/v1/nodes/join", s.joinNode},
		{"GET", "/v1/nodes/join-tokens", s.operator(s.listJoinTokens)},
		{"POST", "/v1/nodes/join-tokens", s.operator(s.createJoinToken)},
		{"DELETE", "/v1/nodes/join-tokens/{id}", s.operator(s.deleteJoinToken)},
		{"GET", "/v1/usage", s.auth(s.usage)},
		{"GET", "/v1/key", s.auth(s.getKey)},
		{"GET", "/v1/audit", s.admin(s.exportAudit)},
		{"GET", "/v1/log-retention", s.admin(s.getLogRetention)},
		{"PUT", "/v1/log-retention", s.admin(s.setLogRetention)},
		{"POST", "/v1/key/rotate", s.admin(s.rotateKey)},
		{"POST", "/v1/key/revoke", s.admin(s.revokeKey)},
		{"GET", "/v1/api-keys", s.admin(s.listAPIKeys)},
		{"POST", "/v1/api-keys", s.admin(s.createAPIKey)},
		{"DELETE", "/v1/api-keys/{id}", s.admin(s.revokeAPIKey)},
		{"GET", "/v1/tokens", s.auth(s.listTokens)},
		{"POST", "/v1/tokens", s.auth(s.createToken)},
		{"DELETE", "/v1/tokens/{id}", s.auth(s.revokeToken)},
		{"GET", "/v1/retention", s.auth(s.getRetention)},
		{"PUT", "/v1/retention", s.auth(s.setRetention)},
		{"POST", "/v1/sandboxes", s.auth(s.createSandbox)},
		{"GET", "/v1/sandboxes", s.auth(s.listSandboxes)},
		{"GET", "/v1/sandboxes/{id}", s.auth(s.getSandbox)},
		{"DELETE", "/v1/sandboxes/{id}", s.auth(s.deleteSandbox)},
		{"POST", "/v1/sandboxes/{id}/timeout", s.auth(s.setTimeout)},
		{"GET", "/v1/sandboxes/{id}/network", s.auth(s.getNetwork)},
		{"PUT", "/v1/sandboxes/{id}/network", s.auth(s.setNetwork)},
		{"GET", "/v1/sandboxes/{id}/egress", s.auth(s.egress)},
		// Metrics (metrics.go): an API key with read scope, or an access token of the sandbox or session
		// with scope exec (which runs what they measure). A ports-only token, such as E2B's traffic
		// token, is shared with those who should reach a server, not watch the sandbox.
		{"GET", "/v1/sandboxes/{id}/metrics", s.work(store.ScopeRead, store.TokenExec, false, s.sandboxMetrics)},
		{"GET", "/v1/sessions/{id}/metrics", s.work(store.ScopeRead, store.TokenExec, true, s.sessionMetrics)},
	}
	// Exec, process and file work, on a sandbox and on a session (which goes to the session's sandbox,
	// resuming it if it is paused and resumes automatically).
	// An access token for the sandbox or session reaches them too, if it has the route's token scope.
	// An API key needs write, except for the routes that only read.
	type workRoute struct {
		route
		token store.TokenScope
		scope store.Scope
	}
	exec, files, read, write := store.TokenExec, store.TokenFiles, store.ScopeRead, store.ScopeWrite
	work := []workRoute{
		{route{"POST", "/exec", s.exec}, exec, write},
		{route{"GET", "/exec/stream", s.execStream}, exec, write},
		{route{"GET", "/processes", s.listProcesses}, exec, read},
		{route{"GET", "/processes/{pid}/attach", s.attach}, exec, write},
		{route{"POST", "/processes/{pid}/signal", s.signal}, exec, write},
		{route{"GET", "/files", s.readFile}, files, read},
		{route{"PUT", "/files", s.writeFile}, files, write},
		{route{"DELETE", "/files", s.removeFile}, files, write},
		{route{"GET", "/files/stat", s.statFile}, files, read},
		{route{"GET", "/files/list", s.listFiles}, files, read},
		{route{"POST", "/files/mkdir", s.mkdir}, files, write},
		{route{"POST", "/files/move", s.move}, files, write},
		{route{"GET", "/files/tar", s.tarDownload}, files, read},
		{route{"PUT", "/files/tar", s.tarUpload}, files, write},
	}
	for _, w := range work {
		routes = append(routes,
			route{w.Method, "/v1/sandboxes/{id}" + w.Pattern, s.work(w.scope, w.token, false, s.tracked(w.handler))},
			route{w.Method, "/v1/sessions/{id}" + w.Pattern, s.work(w.scope, w.token, true, s.viaSession(w.handler))})
	}
	// Ports (ports.go): the listening ports and TCP tunnels are work routes that resolve the session
	// themselves; the path form of the ingress authenticates on its own (cookies, public ports).
	for _, kind := range []struct {
		prefix  string
		session bool
	}{{"/v1/sandboxes/{id}", false}, {"/v1/sessions/{id}", true}} {
		routes = append(routes,
			route{"GET", kind.prefix + "/ports", s.work(read, store.TokenPorts, kind.session, s.listPorts)},
			route{"GET", kind.prefix + "/tunnels/{port}", s.work(write, store.TokenPorts, kind.session, s.tunnel)},
			// The code interpreter (code.go): the interpreter server's port, reached as the ingress does.
			route{"POST", kind.prefix + "/code/run", s.work(write, exec, kind.session, s.runCode)},
			route{"GET", kind.prefix + "/code/contexts", s.work(read, exec, kind.session, s.listCodeContexts)},
			route{"POST", kind.prefix + "/code/contexts", s.work(write, exec, kind.session, s.createCodeContext)},
			route{"DELETE", kind.prefix + "/code/contexts/{ctx}", s.work(write, exec, kind.session, s.codeContextOp(false))},
			route{"POST", kind.prefix + "/code/contexts/{ctx}/restart", s.work(write, exec, kind.session, s.codeContextOp(true))})
		for _, m := range portMethods {
			routes = append(routes, route{m, kind.prefix + "/ports/{port}/{path...}", s.portPath(kind.session)})
		}
	}
	return routes
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
	// A host under the ingress domain is a sandbox's port, never the API.
	if id, port, ok, err := s.hostForm(r); ok {
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		if port == e2b.EnvdPort && strings.HasPrefix(id, "se_") {
			// E2B's envd of a session (an E2B sandbox), as the SDKs address it without E2B_SANDBOX_URL.
			r.Header.Set("E2b-Sandbox-Id", id)
			r.Header.Del("E2b-Sandbox-Port")
			r.URL.Path, r.URL.RawPath = e2b.Prefix+r.URL.Path, ""
			s.mux.ServeHTTP(w, r)
			return
		}
		s.servePortHost(w, r, id, port)
		return
	}
	if p := r.Header.Get("E2b-Sandbox-Port"); p != "" && p != strconv.Itoa(e2b.EnvdPort) && strings.HasPrefix(r.URL.Path, e2b.Prefix+"/") {
		// Another port of an E2B sandbox than envd's, as E2B_SANDBOX_URL routes it (the code
		// interpreter's): the ingress's.
		s.e2b.ServePort(w, r)
		return
	}
	// A sandbox's port through the path form is the sandbox's own web traffic (its pages, under an
	// opaque origin, post to it), not a call of the API's.
	if !portPathPattern.MatchString(r.URL.Path) {
		if err := s.checkSameOrigin(r); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

var sandboxIDPattern = regexp.MustCompile(`^sb_[a-z2-7]{26}$`)

// portPathPattern matches the path form of a sandbox's or session's port (see portPath).
var portPathPattern = regexp.MustCompile(`^/v1/(sandboxes|sessions)/[^/]+/ports/[0-9]+(/|$)`)

// sandboxID returns the {id} of the path, or an invalid-argument error.
func sandboxID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !sandboxIDPattern.MatchString(id) {
		return "", clientErr(errdefs.ErrInvalidArgument, "invalid sandbox id %q: want sb_ followed by 26 characters", truncate(id, 64))
	}
	return id, nil
}

// truncate cuts s to n bytes for a message (apiutil.Truncate).
func truncate(s string, n int) string { return apiutil.Truncate(s, n) }

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wire.Health{Status: "ok"})
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(apidoc.OpenAPI)
}

func toAPI(sb store.Sandbox) wire.Sandbox {
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	np, _ := controlplane.NetworkPolicy(sb) // stored by the control plane, which checked it
	return wire.Sandbox{
		Network: fromPolicy(np),
		ID:      sb.ID, Template: sb.Template, State: string(sb.State), Reason: sb.Reason,
		CPU: sb.Spec.CPUMillicores, MemoryMB: sb.Spec.MemoryMB, DiskMB: sb.Spec.DiskMB,
		TimeoutSeconds: sb.Spec.TimeoutSeconds, Metadata: md,
		CreatedAt: sb.CreatedAt, StartedAt: sb.StartedAt, EndsAt: sb.EndsAt, StoppedAt: sb.StoppedAt,
		Runtime: runtimeOf(md), RuntimeReason: md[controlplane.RuntimeReasonMetadataKey], Abilities: abilitiesOf(md),
		Node: sb.NodeID,
	}
}

// runtimeOf reads the runtime from a sandbox's or session's metadata: gVisor for those made before
// runtimes were chosen.
func runtimeOf(md map[string]string) string {
	if rt := md[controlplane.RuntimeMetadataKey]; rt != "" {
		return rt
	}
	return controlplane.DefaultRuntime
}

// abilitiesOf reads what the runtime can do from a sandbox's or session's metadata (gVisor's, for
// those made before runtimes were chosen).
func abilitiesOf(md map[string]string) []string {
	a, ok := md[controlplane.AbilitiesMetadataKey]
	if !ok {
		return []string{"memory_snapshots", "fork"}
	}
	if a == "" {
		return []string{}
	}
	return strings.Split(a, ",")
}

// maxIdempotencyKey bounds the Idempotency-Key header.
const maxIdempotencyKey = 255

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateSandboxRequest
	body, err := readJSON(w, r, &req)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.idempotent(w, r, "POST /v1/sandboxes", body, func() (int, any, string, error) {
		creq := controlplane.CreateRequest{
			Template: req.Template, Env: req.Env, CPUMillicores: req.CPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB,
			TimeoutSeconds: req.TimeoutSeconds, Metadata: req.Metadata, Runtime: req.Runtime,
		}
		if req.Network != nil {
			p, err := toPolicy(*req.Network)
			if err != nil {
				return 0, nil, "", err
			}
			creq.Network = &p
		}
		sb, err := s.cp.CreateSandbox(r.Context(), tenantOf(r), creq)
		if err != nil && sb.ID == "" {
			return 0, nil, "", err
		}
		if err != nil {
			s.log.Error("create sandbox", "sandbox", sb.ID, "err", err)
		}
		// A sandbox that failed to boot is still created: it is reported, failed, with its reason.
		return http.StatusCreated, toAPI(sb), "/v1/sandboxes/" + sb.ID, nil
	})
}

// readJSON reads the request body (bounded) and decodes it into v; it returns the body, for the
// idempotency record's hash.
func readJSON(w http.ResponseWriter, r *http.Request, v any) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		return nil, clientErr(errdefs.ErrTooLarge, "request body is larger than %d bytes", maxJSONBody)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err := decodeJSON(w, r, v); err != nil {
		return nil, err
	}
	return body, nil
}

// idempotent answers a create with run, honouring the request's Idempotency-Key: the first answer
// (status and body) is stored, and a retry with the same key, operation and body gets it again
// (Idempotent-Replayed: true) without running anything; the same key with another request is a
// conflict. Retries with one key are serialized.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, op string, body []byte, run func() (status int, v any, location string, err error)) {
	tenant := tenantOf(r)
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKey {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "Idempotency-Key is longer than %d bytes", maxIdempotencyKey))
		return
	}
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
	status, v, location, err := run()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var buf bytes.Buffer
	_ = jsonEncode(&buf, v)
	if key != "" {
		if err := s.cp.PutIdempotency(context.WithoutCancel(r.Context()), store.IdempotencyRecord{
			TenantID: tenant, Key: key, Op: op, RequestHash: sum[:], ResponseStatus: status, ResponseBody: buf.Bytes(),
		}); err != nil {
			s.log.Warn("save idempotency record", "err", err)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if location != "" {
		w.Header().Set("Location", location)
	}
	w.WriteHeader(status)
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
	lq, err := parseListQuery(r, func(v string) bool { return store.SandboxState(v).Valid() }, "creating, running, stopping, stopped, failed")
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	f := store.SandboxFilter{Cursor: lq.cursor, Limit: lq.limit, Metadata: lq.metadata}
	for _, st := range lq.states {
		f.States = append(f.States, store.SandboxState(st))
	}
	sbs, next, err := s.cp.ListSandboxes(r.Context(), tenantOf(r), f)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.SandboxList{Sandboxes: make([]wire.Sandbox, 0, len(sbs)), NextCursor: next}
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, toAPI(sb))
	}
	writeJSON(w, http.StatusOK, out)
}

// listQuery is the query of a list request: state (comma-separated, repeatable), limit, cursor and
// metadata.<key> filters.
type listQuery struct {
	states   []string
	metadata map[string]string
	limit    int
	cursor   string
}

// parseListQuery reads a list request's query; valid says which states exist, named in errors by names.
func parseListQuery(r *http.Request, valid func(string) bool, names string) (listQuery, error) {
	q := r.URL.Query()
	lq := listQuery{cursor: q.Get("cursor")}
	for k, vs := range q {
		switch {
		case k == "state":
			for _, v := range vs {
				for _, st := range strings.Split(v, ",") {
					st = strings.TrimSpace(st)
					if !valid(st) {
						return lq, clientErr(errdefs.ErrInvalidArgument, "unknown state %q: want one of %s", truncate(st, 32), names)
					}
					lq.states = append(lq.states, st)
				}
			}
		case k == "limit":
			n, err := strconv.Atoi(q.Get("limit"))
			if err != nil || n < 1 || n > store.MaxListLimit {
				return lq, clientErr(errdefs.ErrInvalidArgument, "limit must be an integer between 1 and %d", store.MaxListLimit)
			}
			lq.limit = n
		case k == "cursor":
		case strings.HasPrefix(k, "metadata."):
			if lq.metadata == nil {
				lq.metadata = map[string]string{}
			}
			lq.metadata[strings.TrimPrefix(k, "metadata.")] = vs[0]
		default:
			return lq, clientErr(errdefs.ErrInvalidArgument, "unknown query parameter %q: want state, limit, cursor or metadata.<key>", truncate(k, 64))
		}
	}
	return lq, nil
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
	s.timeoutCall(w, r, sandboxID, func(id string, secs int) (any, error) {
		sb, err := s.cp.SetTimeout(r.Context(), tenantOf(r), id, secs)
		return toAPI(sb), err
	})
}

// timeoutCall serves a POST …/{id}/timeout: the {id} idOf accepts and the SetTimeoutRequest's seconds
// go to set, whose result is the answer.
func (s *Server) timeoutCall(w http.ResponseWriter, r *http.Request, idOf func(*http.Request) (string, error), set func(id string, secs int) (any, error)) {
	id, err := idOf(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req wire.SetTimeoutRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out, err := set(id, req.TimeoutSeconds)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
