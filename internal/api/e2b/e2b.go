package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/httperr"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template"
)

// E2B compatibility, the control plane: the REST API that E2B's SDKs call, under /e2b, so that
// E2B_API_URL=<airlock>/e2b points them here. An E2B sandbox is an Airlock session (its ID is the
// session's): pausing keeps memory, a timeout pauses it (autoPause) or deletes it, and connecting
// resumes it. The API key is an Airlock API key, sent as X-API-KEY; the envd access token each create
// or connect hands out is an Airlock access token for the session (exec, files, ports), which the data
// plane (envd.go) takes as X-Access-Token. Tenancy, egress policy and credential bindings are the
// tenant's, as on /v1. Errors are E2B's: {"code": <HTTP status>, "message": "…"}.

// Prefix is the path E2B's API is served under: E2B_API_URL and E2B_SANDBOX_URL are <airlock>/e2b.
const Prefix = "/e2b"

const (
	// e2bEnvdVersion is the envd version reported: the SDKs gate features on it (0.5.7: uploads as
	// application/octet-stream; above it, file metadata and watch options the data plane lacks).
	e2bEnvdVersion = "0.5.7"
	// e2bClientID fills the deprecated clientID the SDKs still require.
	e2bClientID = "airlock"
	// e2bDefaultTimeout is the lifetime of a sandbox whose create or connect names none, as E2B's.
	e2bDefaultTimeout = 300
	// e2bMaxList bounds a page of GET /v2/sandboxes.
	e2bMaxList = 100
	// e2bNoEnd is the endAt of a session that has no end (made on /v1 without a timeout).
	e2bNoEnd = "9999-12-31T23:59:59Z"
)

// e2bRoutes are the E2B control plane's routes (the SDKs call both the v1 and v2 forms of create and
// connect).
func (s *controlPlane) e2bRoutes() []Route {
	return []Route{
		{"POST", Prefix + "/sandboxes", s.e2bAuth(s.e2bCreate)},
		{"POST", Prefix + "/v2/sandboxes", s.e2bAuth(s.e2bCreate)},
		{"GET", Prefix + "/sandboxes", s.e2bAuth(s.e2bListRunning)},
		{"GET", Prefix + "/v2/sandboxes", s.e2bAuth(s.e2bList)},
		{"GET", Prefix + "/sandboxes/{id}", s.e2bAuth(s.e2bGet)},
		{"GET", Prefix + "/sandboxes/metrics", s.e2bAuth(s.e2bSandboxesMetrics)},
		{"GET", Prefix + "/sandboxes/{id}/metrics", s.e2bAuth(s.e2bSandboxMetrics)},
		{"DELETE", Prefix + "/sandboxes/{id}", s.e2bAuth(s.e2bKill)},
		{"POST", Prefix + "/sandboxes/{id}/connect", s.e2bAuth(s.e2bConnect)},
		{"POST", Prefix + "/v2/sandboxes/{id}/connect", s.e2bAuth(s.e2bConnect)},
		{"POST", Prefix + "/sandboxes/{id}/resume", s.e2bAuth(s.e2bConnect)},
		{"POST", Prefix + "/sandboxes/{id}/timeout", s.e2bAuth(s.e2bSetTimeout)},
		{"POST", Prefix + "/sandboxes/{id}/pause", s.e2bAuth(s.e2bPause)},
		{"POST", Prefix + "/sandboxes/{id}/fork", s.e2bAuth(s.e2bFork)},
		{"PUT", Prefix + "/sandboxes/{id}/network", s.e2bAuth(s.e2bNetwork)},
		{"POST", Prefix + "/sandboxes/{id}/snapshots", s.e2bAuth(s.e2bCreateSnapshot)},
		{"GET", Prefix + "/snapshots", s.e2bAuth(s.e2bListSnapshots)},
		{"DELETE", Prefix + "/templates/{id}", s.e2bAuth(s.e2bDeleteTemplate)},
	}
}

// e2bErrorBody is E2B's error shape; the SDKs read code (the HTTP status) from the body.
type e2bErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// e2bError writes err in E2B's shape, with the status and message /v1 would give (a server fault
// logged to log).
func e2bError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	status := httperr.Status(err)
	apiutil.WriteJSON(w, status, e2bErrorBody{Code: status, Message: apiutil.ErrorDetail(log, r, err).Message})
}

// e2bAuth serves h to API keys sent as X-API-KEY (or Authorization: Bearer): read scope for GET,
// write for the rest. Access tokens are refused: they reach the data plane only.
func (s *controlPlane) e2bAuth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimSpace(r.Header.Get("X-API-Key"))
		if key == "" {
			key, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			key = strings.TrimSpace(key)
		}
		if key == "" {
			e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrUnauthenticated, "missing API key: send an Airlock API key as X-API-KEY (E2B_API_KEY)"))
			return
		}
		p, err := s.cp.Authenticate(r.Context(), key)
		if err != nil {
			e2bError(w, r, s.log, err)
			return
		}
		need := store.ScopeWrite
		if r.Method == http.MethodGet {
			need = store.ScopeRead
		}
		s.edge.Serve(w, r, p, key, func(w http.ResponseWriter, r *http.Request) {
			switch {
			case p.Token != nil:
				e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrPermissionDenied, "an access token reaches only its sandbox's envd; %s %s needs an API key", r.Method, r.URL.Path))
			case !p.Scope.Allows(need):
				e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrPermissionDenied, "this API key has scope %s; %s %s needs %s", p.Scope, r.Method, r.URL.Path, need))
			default:
				h(w, r)
			}
		})
	}
}

// e2bNewSandbox is the body of a create (E2B's NewSandbox and NewSandboxV2; allow_internet_access is
// snake case there too).
type e2bNewSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int              `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *e2bAutoResume    `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Network             *e2bNetwork       `json:"network"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
}

type e2bAutoResume struct {
	Enabled bool `json:"enabled"`
}

// e2bNetwork is E2B's sandbox network configuration. What Airlock's egress policy cannot express is
// refused with a message, never dropped.
type e2bNetwork struct {
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	AllowPublicTraffic  *bool           `json:"allowPublicTraffic"`
	Rules               json.RawMessage `json:"rules"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
	MaskRequestHost     *string         `json:"maskRequestHost"`
	HTTPSPorts          json.RawMessage `json:"httpsPorts"`
	AllowInternetAccess *bool           `json:"allow_internet_access"`
}

// e2bSandbox is what a create, connect or fork returns.
type e2bSandbox struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// e2bSandboxDetail is what GET /sandboxes/{id} and the list return.
type e2bSandboxDetail struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	ClientID    string            `json:"clientID"`
	StartedAt   string            `json:"startedAt"`
	EndAt       string            `json:"endAt"`
	State       string            `json:"state"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata"`
	Lifecycle   e2bLifecycle      `json:"lifecycle"`
}

type e2bLifecycle struct {
	OnTimeout  string `json:"onTimeout"` // "kill" or "pause"
	AutoResume bool   `json:"autoResume"`
}

func (s *controlPlane) e2bCreate(w http.ResponseWriter, r *http.Request) {
	var req e2bNewSandbox
	if err := decodeE2BBody(w, r, &req, true); err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	for name, v := range map[string]json.RawMessage{"mcp": req.MCP, "iam": req.IAM, "volumeMounts": req.VolumeMounts} {
		if len(v) > 0 && string(v) != "null" && string(v) != "[]" && string(v) != "{}" {
			e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrInvalidArgument, "%s is not supported by Airlock", name))
			return
		}
	}
	timeout, err := e2bTimeout(req.Timeout, true)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	allow := req.AllowInternetAccess
	if req.Network != nil && req.Network.AllowInternetAccess != nil {
		allow = req.Network.AllowInternetAccess
	}
	p, err := e2bPolicy(allow, req.Network)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	onTimeout := store.SessionTimeoutDelete
	if req.AutoPause != nil && *req.AutoPause {
		onTimeout = store.SessionTimeoutPause
	}
	tpl := req.TemplateID
	if apiutil.SessionIDPattern.MatchString(tpl) {
		// A snapshot's ID (e2b_snapshots.go).
		kept, err := s.e2bKept(r, tpl)
		if err != nil {
			e2bError(w, r, s.log, err)
			return
		}
		s.e2bCreateFromSnapshot(w, r, kept, &req, timeout, onTimeout, p)
		return
	}
	creq := controlplane.SessionRequest{
		CreateRequest: controlplane.CreateRequest{Template: tpl, Env: req.EnvVars, Metadata: req.Metadata,
			TimeoutSeconds: timeout, Network: &p},
		OnTimeout:  onTimeout,
		AutoResume: req.AutoResume != nil && req.AutoResume.Enabled,
		// E2B sandboxes neither pause when idle nor take rolling snapshots: they live until their timeout.
	}
	se, err := s.cp.CreateSession(r.Context(), apiutil.TenantOf(r), creq)
	if alt, ok := e2bTemplates[tpl]; ok && errors.Is(err, errdefs.ErrNotFound) && se.ID == "" {
		// E2B's names for the templates its SDKs default to, unless the operator made templates of them.
		creq.Template = alt
		se, err = s.cp.CreateSession(r.Context(), apiutil.TenantOf(r), creq)
	}
	if errors.Is(err, errdefs.ErrNotFound) && se.ID == "" && tpl != "" {
		// No template of that name: a snapshot's name, perhaps (templates come first).
		if kept, kerr := s.e2bKept(r, tpl); kerr == nil {
			s.e2bCreateFromSnapshot(w, r, kept, &req, timeout, onTimeout, p)
			return
		}
	}
	s.e2bCreated(w, r, se, err)
}

// e2bCreated answers a create of se: the sandbox, or err, after deleting se if it was recorded.
func (s *controlPlane) e2bCreated(w http.ResponseWriter, r *http.Request, se store.Session, err error) {
	if err != nil {
		if se.ID != "" { // recorded, then failed to boot: nothing of it should linger
			_ = s.cp.DeleteSession(context.WithoutCancel(r.Context()), apiutil.TenantOf(r), se.ID)
		}
		e2bError(w, r, s.log, err)
		return
	}
	out, err := s.e2bSandboxOf(r, se)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	apiutil.WriteJSON(w, http.StatusCreated, out)
}

// e2bTemplates are Airlock's templates for the names E2B's SDKs create with by default: "base" (the
// e2b SDK's) is the default template; "code-interpreter-v1" (@e2b/code-interpreter's) is the template
// the README builds from templates/code-interpreter.
var e2bTemplates = map[string]string{"": template.DefaultName, "base": template.DefaultName, "code-interpreter-v1": "code-interpreter"}

// e2bSandboxOf is se as a create or connect returns it, with its envd access token: the same one on
// every connect by the same API key (as E2B's is), until it comes within a day of its end.
func (s *controlPlane) e2bSandboxOf(r *http.Request, se store.Session) (e2bSandbox, error) {
	tok, err := s.cp.StableAccessToken(r.Context(), apiutil.TenantOf(r), apiutil.PrincipalOf(r).KeyID, controlplane.TokenRequest{
		Name: "e2b-envd", SessionID: se.ID, Scopes: []store.TokenScope{store.TokenExec, store.TokenFiles, store.TokenPorts},
		TTL: controlplane.MaxTokenTTL,
	})
	if err != nil {
		return e2bSandbox{}, err
	}
	// The traffic token is what E2B lets one share to reach the sandbox's ports only: a token of its own,
	// with the ports scope alone.
	traffic, err := s.cp.StableAccessToken(r.Context(), apiutil.TenantOf(r), apiutil.PrincipalOf(r).KeyID, controlplane.TokenRequest{
		Name: "e2b-traffic", SessionID: se.ID, Scopes: []store.TokenScope{store.TokenPorts}, TTL: controlplane.MaxTokenTTL,
	})
	if err != nil {
		return e2bSandbox{}, err
	}
	name := templateName(se.Spec.Template)
	out := e2bSandbox{SandboxID: se.ID, TemplateID: name, Alias: name, ClientID: e2bClientID, EnvdVersion: e2bEnvdVersion,
		EnvdAccessToken: tok, TrafficAccessToken: &traffic}
	if domain := s.edge.IngressDomain(); domain != "" {
		// Without E2B_SANDBOX_URL the SDKs reach envd at https://49983-<id>.<domain>: the ingress's
		// host form (behind TLS), which serves port 49983 of a session as its envd.
		out.Domain = &domain
	}
	return out, nil
}

// templateName is the name of a template reference (name@sha256:…).
func templateName(ref string) string {
	if name, _, err := template.ParseRef(ref); err == nil {
		return name
	}
	return ref
}

// e2bTimeout is a request's timeout in seconds: e2bDefaultTimeout when absent and optional, else
// between 1 and controlplane.MaxTimeout (invalid argument otherwise).
func e2bTimeout(v *int, optional bool) (int, error) {
	timeout := e2bDefaultTimeout
	switch {
	case v != nil:
		timeout = *v
	case !optional:
		return 0, apiutil.ClientErr(errdefs.ErrInvalidArgument, "timeout is required")
	}
	if timeout < 1 || time.Duration(timeout)*time.Second > controlplane.MaxTimeout {
		return 0, apiutil.ClientErr(errdefs.ErrInvalidArgument, "timeout must be between 1 and %d seconds, got %d", int(controlplane.MaxTimeout/time.Second), timeout)
	}
	return timeout, nil
}

// e2bPolicy is the egress policy of E2B's internet switch (nil: on) and network configuration.
// allowOut entries are allowed, then denyOut entries denied; everything else follows the switch
// (denyOut 0.0.0.0/0 turns it off). The address guards apply as to every sandbox.
func e2bPolicy(allowInternet *bool, n *e2bNetwork) (policy.Policy, error) {
	p := policy.Policy{Default: policy.ActionAllow}
	if allowInternet != nil && !*allowInternet {
		p.Default = policy.ActionDeny
	}
	if n == nil {
		return p, nil
	}
	for name, v := range map[string]json.RawMessage{"network.rules": n.Rules, "network.egressProxy": n.EgressProxy, "network.httpsPorts": n.HTTPSPorts} {
		if len(v) > 0 && string(v) != "null" && string(v) != "{}" && string(v) != "[]" {
			return p, apiutil.ClientErr(errdefs.ErrInvalidArgument, "%s is not supported by Airlock: inject credentials with its secrets and bindings (/v1/secrets)", name)
		}
	}
	if n.MaskRequestHost != nil && *n.MaskRequestHost != "" {
		return p, apiutil.ClientErr(errdefs.ErrInvalidArgument, "network.maskRequestHost is not supported by Airlock")
	}
	add := func(action, entry string) error {
		switch {
		case entry == "0.0.0.0/0" || entry == "::/0":
			if action == policy.ActionDeny {
				p.Default = policy.ActionDeny
				return nil
			}
			p.Rules = append(p.Rules, policy.Rule{Action: action, CIDRs: []string{entry}})
		case strings.Contains(entry, "/"):
			if _, err := netip.ParsePrefix(entry); err != nil {
				return apiutil.ClientErr(errdefs.ErrInvalidArgument, "network: %q is neither an address, a CIDR nor a domain", apiutil.Truncate(entry, 64))
			}
			p.Rules = append(p.Rules, policy.Rule{Action: action, CIDRs: []string{entry}})
		default:
			if a, err := netip.ParseAddr(entry); err == nil {
				p.Rules = append(p.Rules, policy.Rule{Action: action, CIDRs: []string{netip.PrefixFrom(a, a.BitLen()).String()}})
				return nil
			}
			p.Rules = append(p.Rules, policy.Rule{Action: action, Host: entry})
		}
		return nil
	}
	for _, e := range n.AllowOut {
		if err := add(policy.ActionAllow, e); err != nil {
			return p, err
		}
	}
	for _, e := range n.DenyOut {
		if err := add(policy.ActionDeny, e); err != nil {
			return p, err
		}
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("network: %w", err)
	}
	return p, nil
}

// decodeE2BBody reads a JSON body into v; an empty body is an empty object if optional. Unknown fields
// are ignored: E2B's SDKs send some this server has no use for (secure, autoPauseMemory).
func decodeE2BBody(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		if optional && errors.Is(err, io.EOF) {
			return nil
		}
		return apiutil.ClientErr(errdefs.ErrInvalidArgument, "invalid JSON body: %v", err)
	}
	return nil
}

// e2bSession returns the session {id} names, or not found (in E2B's words) for any other ID, and for a
// deleted session.
func (s *controlPlane) e2bSession(r *http.Request) (store.Session, error) {
	id := r.PathValue("id")
	if !apiutil.SessionIDPattern.MatchString(id) {
		return store.Session{}, apiutil.ClientErr(errdefs.ErrNotFound, "sandbox %q doesn't exist or you don't have access to it", apiutil.Truncate(id, 64))
	}
	se, err := s.cp.GetSession(r.Context(), apiutil.TenantOf(r), id)
	if err == nil && (se.State == store.SessionDeleting || se.State == store.SessionDeleted || controlplane.IsKept(se)) {
		// A kept snapshot is a snapshot to E2B (e2b_snapshots.go), not a sandbox.
		err = errdefs.ErrNotFound
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return se, apiutil.ClientErr(errdefs.ErrNotFound, "sandbox %q doesn't exist or you don't have access to it", id)
	}
	return se, err
}

func (s *controlPlane) e2bConnect(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := decodeE2BBody(w, r, &req, true); err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	timeout, err := e2bTimeout(req.Timeout, true)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	se, err := s.e2bSession(r)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	tenant, status := apiutil.TenantOf(r), http.StatusOK
	switch se.State {
	case store.SessionRunning:
		// A running sandbox's end only ever moves later on a connect.
		se, err = s.cp.SetSessionTimeout(r.Context(), tenant, se.ID, timeout, true)
	case store.SessionPaused, store.SessionFailed:
		if se, err = s.cp.SetSessionTimeout(r.Context(), tenant, se.ID, timeout, false); err == nil {
			se, err = s.cp.ResumeSession(r.Context(), tenant, se.ID)
		}
		status = http.StatusCreated
	default:
		err = apiutil.ClientErr(errdefs.ErrConflict, "sandbox %s is %s; try again in a moment", se.ID, se.State)
	}
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	out, err := s.e2bSandboxOf(r, se)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	apiutil.WriteJSON(w, status, out)
}

func (s *controlPlane) e2bKill(w http.ResponseWriter, r *http.Request) {
	se, err := s.e2bSession(r)
	if err == nil {
		err = s.cp.DeleteSession(r.Context(), apiutil.TenantOf(r), se.ID)
	}
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *controlPlane) e2bSetTimeout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := decodeE2BBody(w, r, &req, false); err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	timeout, err := e2bTimeout(req.Timeout, false)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	se, err := s.e2bSession(r)
	if err == nil {
		_, err = s.cp.SetSessionTimeout(r.Context(), apiutil.TenantOf(r), se.ID, timeout, false)
	}
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *controlPlane) e2bPause(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Memory *bool `json:"memory"`
	}
	if err := decodeE2BBody(w, r, &req, true); err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	se, err := s.e2bSession(r)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	if se.State == store.SessionPaused || se.State == store.SessionFailed {
		e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrConflict, "sandbox %s is already paused", se.ID))
		return
	}
	if _, err := s.cp.PauseSession(r.Context(), apiutil.TenantOf(r), se.ID); err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *controlPlane) e2bGet(w http.ResponseWriter, r *http.Request) {
	se, err := s.e2bSession(r)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	apiutil.WriteJSON(w, http.StatusOK, e2bDetailOf(se))
}

// e2bDetailOf is se as E2B describes a sandbox: running (also while it is created, paused or
// resumed: it answers) or paused (also failed: a connect resumes it from its last snapshot).
func e2bDetailOf(se store.Session) e2bSandboxDetail {
	state := "running"
	if se.State == store.SessionPaused || se.State == store.SessionFailed {
		state = "paused"
	}
	end := e2bNoEnd
	switch {
	case se.EndsAt != nil:
		end = se.EndsAt.UTC().Format(time.RFC3339Nano)
	case state == "paused" && se.PausedAt != nil:
		end = se.PausedAt.UTC().Format(time.RFC3339Nano)
	}
	onTimeout := "kill"
	if se.OnTimeout == store.SessionTimeoutPause {
		onTimeout = "pause"
	}
	meta := map[string]string{}
	for k, v := range se.Metadata {
		if !strings.HasPrefix(k, "airlock.") {
			meta[k] = v
		}
	}
	name := templateName(se.Spec.Template)
	return e2bSandboxDetail{SandboxID: se.ID, TemplateID: name, Alias: name, ClientID: e2bClientID,
		StartedAt: se.CreatedAt.UTC().Format(time.RFC3339Nano), EndAt: end, State: state,
		CPUCount: int(math.Ceil(float64(se.Spec.CPUMillicores) / 1000)), MemoryMB: se.Spec.MemoryMB, DiskSizeMB: se.Spec.DiskMB,
		EnvdVersion: e2bEnvdVersion, Metadata: meta, Lifecycle: e2bLifecycle{OnTimeout: onTimeout, AutoResume: se.AutoResume}}
}

// e2bListRunning is the deprecated GET /sandboxes: the running sandboxes, one page.
func (s *controlPlane) e2bListRunning(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	q.Set("state", "running")
	r.URL.RawQuery = q.Encode()
	s.e2bList(w, r)
}

// e2bList is GET /v2/sandboxes: metadata (E2B's query-encoded k=v&k=v), state (running, paused,
// comma-separated or repeated), template, startedAfter, order (desc, newest first, unless asc), limit
// (1-100) and nextToken; the next page's token is X-Next-Token.
func (s *controlPlane) e2bList(w http.ResponseWriter, r *http.Request) {
	f, err := e2bListFilter(r.URL.Query())
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	ses, next, err := s.cp.ListSessions(r.Context(), apiutil.TenantOf(r), f)
	if err != nil {
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			err = apiutil.ClientErr(errdefs.ErrInvalidArgument, "invalid nextToken")
		}
		e2bError(w, r, s.log, err)
		return
	}
	// The template and start filters apply page by page: a page may come out short, never wrong.
	q := r.URL.Query()
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrInvalidArgument, "startedAfter must be an RFC 3339 time, got %q", apiutil.Truncate(v, 40)))
			return
		}
	}
	out := make([]e2bSandboxDetail, 0, len(ses))
	for _, se := range ses {
		if (q.Get("template") != "" && templateName(se.Spec.Template) != q.Get("template")) || se.CreatedAt.Before(after) || controlplane.IsKept(se) {
			continue
		}
		out = append(out, e2bDetailOf(se))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	apiutil.WriteJSON(w, http.StatusOK, out)
}

func e2bListFilter(q url.Values) (store.SessionFilter, error) {
	f := store.SessionFilter{Limit: e2bMaxList, Cursor: q.Get("nextToken"), Descending: true}
	switch q.Get("order") {
	case "", "desc": // E2B's default: newest first
	case "asc":
		f.Descending = false
	default:
		return f, apiutil.ClientErr(errdefs.ErrInvalidArgument, "order must be asc or desc, got %q", apiutil.Truncate(q.Get("order"), 16))
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > e2bMaxList {
			return f, apiutil.ClientErr(errdefs.ErrInvalidArgument, "limit must be between 1 and %d, got %q", e2bMaxList, apiutil.Truncate(v, 16))
		}
		f.Limit = n
	}
	var states []string
	for _, v := range q["state"] {
		states = append(states, strings.Split(v, ",")...)
	}
	if len(states) == 0 {
		states = []string{"running", "paused"}
	}
	for _, st := range states {
		switch strings.TrimSpace(st) {
		case "running":
			f.States = append(f.States, store.SessionCreating, store.SessionRunning, store.SessionPausing, store.SessionResuming)
		case "paused":
			f.States = append(f.States, store.SessionPaused, store.SessionFailed)
		default:
			return f, apiutil.ClientErr(errdefs.ErrInvalidArgument, "state must be running or paused, got %q", apiutil.Truncate(st, 32))
		}
	}
	slices.Sort(f.States)
	f.States = slices.Compact(f.States)
	if raw := q.Get("metadata"); raw != "" {
		dec, err := url.QueryUnescape(raw)
		if err != nil {
			return f, apiutil.ClientErr(errdefs.ErrInvalidArgument, "metadata: %v", err)
		}
		f.Metadata = map[string]string{}
		for _, pair := range strings.Split(dec, "&") {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || strings.Contains(v, "=") {
				return f, apiutil.ClientErr(errdefs.ErrInvalidArgument, "metadata: want key=value pairs joined by &, got %q", apiutil.Truncate(pair, 64))
			}
			if k, err = url.QueryUnescape(k); err == nil {
				v, err = url.QueryUnescape(v)
			}
			if err != nil || k == "" {
				return f, apiutil.ClientErr(errdefs.ErrInvalidArgument, "metadata: bad pair %q", apiutil.Truncate(pair, 64))
			}
			f.Metadata[k] = v
		}
	}
	return f, nil
}

// e2bForkEntry is one entry of a fork's answer: a sandbox or why it could not be made.
type e2bForkEntry struct {
	Sandbox *e2bSandbox   `json:"sandbox,omitempty"`
	Error   *e2bErrorBody `json:"error,omitempty"`
}

func (s *controlPlane) e2bFork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int `json:"timeout"`
		Count   *int `json:"count"`
	}
	if err := decodeE2BBody(w, r, &req, true); err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > controlplane.MaxFork {
		e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrInvalidArgument, "count must be between 1 and %d, got %d", controlplane.MaxFork, count))
		return
	}
	timeout, err := e2bTimeout(req.Timeout, true)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	se, err := s.e2bSession(r)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	forks, err := s.cp.ForkSession(r.Context(), apiutil.TenantOf(r), se.ID, count, "")
	if err != nil && len(forks) == 0 {
		e2bError(w, r, s.log, err)
		return
	}
	out := make([]e2bForkEntry, 0, len(forks))
	for _, child := range forks {
		if child.State == store.SessionRunning {
			if child, err = s.cp.SetSessionTimeout(r.Context(), apiutil.TenantOf(r), child.ID, timeout, false); err == nil {
				var sb e2bSandbox
				if sb, err = s.e2bSandboxOf(r, child); err == nil {
					out = append(out, e2bForkEntry{Sandbox: &sb})
					continue
				}
			}
		} else {
			err = apiutil.ClientErr(errdefs.ErrUnavailable, "fork %s could not start: %s", child.ID, child.Reason)
		}
		_ = s.cp.DeleteSession(context.WithoutCancel(r.Context()), apiutil.TenantOf(r), child.ID)
		status := httperr.Status(err)
		out = append(out, e2bForkEntry{Error: &e2bErrorBody{Code: status, Message: apiutil.ErrorDetail(s.log, r, err).Message}})
	}
	apiutil.WriteJSON(w, http.StatusCreated, out)
}

func (s *controlPlane) e2bNetwork(w http.ResponseWriter, r *http.Request) {
	var req e2bNetwork
	if err := decodeE2BBody(w, r, &req, false); err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	p, err := e2bPolicy(req.AllowInternetAccess, &req)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	se, err := s.e2bSession(r)
	if err == nil && se.State != store.SessionRunning {
		err = apiutil.ClientErr(errdefs.ErrConflict, "sandbox %s is %s; connect to it first", se.ID, se.State)
	}
	if err == nil {
		_, err = s.cp.SetNetwork(r.Context(), apiutil.TenantOf(r), se.SandboxID, p)
	}
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
