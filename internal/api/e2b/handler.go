// Package e2b is Airlock's E2B compatibility: E2B's control-plane REST API (e2b.go, snapshots.go,
// metrics.go) and what E2B's in-sandbox daemon, envd, serves to the SDKs (envd.go), under /e2b on the
// API's listener, so that E2B's unmodified SDKs work against Airlock (docs/E2B.md).
//
// It is a client of the control plane like /v1's handlers (internal/api), through the narrow
// interfaces below, and of the API server around it through Edge (audit, the access watch, the
// ingress); internal/api mounts its routes. It imports nothing of internal/api but the helpers both
// share (internal/api/apiutil).
package e2b

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
)

// Authenticator checks a credential (an API key or an access token), as every API route does.
type Authenticator interface {
	Authenticate(ctx context.Context, cred string) (controlplane.Principal, error)
}

// Sessions is the control plane as E2B's control-plane API calls it: an E2B sandbox is a session,
// an E2B snapshot a kept snapshot, and the envd access token an access token for the session.
type Sessions interface {
	CreateSession(ctx context.Context, tenantID string, req controlplane.SessionRequest) (store.Session, error)
	GetSession(ctx context.Context, tenantID, id string) (store.Session, error)
	ListSessions(ctx context.Context, tenantID string, f store.SessionFilter) ([]store.Session, string, error)
	DeleteSession(ctx context.Context, tenantID, id string) error
	SetSessionTimeout(ctx context.Context, tenantID, id string, secs int, extendOnly bool) (store.Session, error)
	PauseSession(ctx context.Context, tenantID, id string) (store.Session, error)
	ResumeSession(ctx context.Context, tenantID, id string) (store.Session, error)
	ForkSession(ctx context.Context, tenantID, id string, count int, fromSnapshot string) ([]store.Session, error)
	SetNetwork(ctx context.Context, tenantID, id string, p policy.Policy) (store.Sandbox, error)
	KeepSnapshot(ctx context.Context, tenantID, id, name string) (store.Session, error)
	CreateFromKept(ctx context.Context, tenantID, keptID string, req controlplane.FromKeptRequest) (store.Session, error)
	SessionMetrics(ctx context.Context, tenantID, id string, start, end time.Time) (string, []nodecontract.Sample, error)
	LatestSessionMetrics(ctx context.Context, tenantID string, ids []string) (map[string]nodecontract.Sample, error)
	StableAccessToken(ctx context.Context, tenantID, keyID string, req controlplane.TokenRequest) (string, error)
}

// Sandboxes is the control plane as envd's API calls it: a session's sandbox, the session's activity,
// and the processes and files in the sandbox.
type Sandboxes interface {
	SessionSandbox(ctx context.Context, tenantID, id string) (string, error)
	BeginWork(ctx context.Context, tenantID, sessionID, sbID string) (end func())
	StartProcess(ctx context.Context, tenantID, sandboxID string, c controlplane.Command, pty *controlplane.PTYSize, o controlplane.StreamOptions) (controlplane.Process, error)
	AttachProcess(ctx context.Context, tenantID, sandboxID, processID string, o controlplane.StreamOptions) (controlplane.Process, error)
	Processes(ctx context.Context, tenantID, sandboxID string) ([]controlplane.ProcessInfo, error)
	SignalProcess(ctx context.Context, tenantID, sandboxID, processID, sig string) error
	StatFile(ctx context.Context, tenantID, sandboxID, p string) (controlplane.FileInfo, error)
	ListFiles(ctx context.Context, tenantID, sandboxID, p string) ([]controlplane.FileInfo, error)
	ReadFile(ctx context.Context, tenantID, sandboxID, p string, w io.Writer) error
	WriteFile(ctx context.Context, tenantID, sandboxID, p string, r io.Reader, mode uint32) (controlplane.FileInfo, error)
	MakeDir(ctx context.Context, tenantID, sandboxID, p string) (controlplane.FileInfo, error)
	MoveFile(ctx context.Context, tenantID, sandboxID, from, to string) (controlplane.FileInfo, error)
	RemoveFile(ctx context.Context, tenantID, sandboxID, p string, recursive bool) error
}

// Service is all the control plane E2B's API calls (*controlplane.Service is one).
type Service interface {
	Authenticator
	Sessions
	Sandboxes
}

// Edge is what the API server around these handlers does for them, as it does for /v1's.
type Edge interface {
	// Serve serves h to r, whose credential cred authenticated as p: r's context carries p
	// (apiutil.PrincipalOf) and ends if cred stops holding (apiutil.AccessEnded), and the call is
	// recorded in the tenant's audit log.
	Serve(w http.ResponseWriter, r *http.Request, p controlplane.Principal, cred string, h http.HandlerFunc)
	// ServePort authenticates r and forwards it to port of the sandbox of session id, as the
	// ingress's path form does: rest is the escaped path to send upstream, prefix the path's prefix.
	ServePort(w http.ResponseWriter, r *http.Request, id string, port int, rest, prefix string)
	// IngressDomain is the domain of the ingress's host form ("" if there is none).
	IngressDomain() string
}

// Route is one route of E2B's API: a method, a ServeMux path pattern (under Prefix) and its handler.
type Route struct {
	Method, Pattern string
	Handler         http.HandlerFunc
}

// Handler serves E2B's API: the control plane's routes and envd's.
type Handler struct {
	control *controlPlane
	data    *dataPlane
}

// controlPlane serves E2B's control-plane REST API (e2b.go, snapshots.go, metrics.go).
type controlPlane struct {
	cp interface {
		Authenticator
		Sessions
	}
	edge Edge
	log  *slog.Logger
}

// dataPlane serves envd's API (envd.go).
type dataPlane struct {
	cp interface {
		Authenticator
		Sandboxes
	}
	edge Edge
	log  *slog.Logger
	// envdProcs are the processes the data plane started and follows.
	envdProcs envdProcs
}

// New returns the handlers of E2B's API over cp, served inside edge; log takes the server faults.
func New(cp Service, edge Edge, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.Default()
	}
	return &Handler{
		control: &controlPlane{cp: cp, edge: edge, log: log},
		data:    &dataPlane{cp: cp, edge: edge, log: log},
	}
}

// Routes are E2B's routes, to mount on the API's ServeMux (the SDKs call both the v1 and v2 forms of
// create and connect).
func (h *Handler) Routes() []Route {
	return append(h.control.e2bRoutes(), h.data.e2bEnvdRoutes()...)
}

// NotFound answers a request under Prefix that no route takes, in E2B's error shape.
func (h *Handler) NotFound(w http.ResponseWriter, r *http.Request) {
	e2bError(w, r, h.control.log, apiutil.ClientErr(errdefs.ErrNotFound, "no route %s %s", r.Method, r.URL.Path))
}

// ServePort serves a request under Prefix to another port of an E2B sandbox than envd's, which names
// the sandbox and the port in the E2b-Sandbox-Id and E2b-Sandbox-Port headers: the ingress forwards
// it (the code interpreter's /execute is one).
func (h *Handler) ServePort(w http.ResponseWriter, r *http.Request) { h.data.e2bPort(w, r) }
