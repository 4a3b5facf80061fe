package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// The ingress: requests for a port of a sandbox (or of a session: its current sandbox, resumed first if it
// is paused) are forwarded from the node into the sandbox's network namespace. Two forms reach it:
//
//   - the path form, /v1/sandboxes/{id}/ports/{port}/{path...}, on the API's own address, for programs;
//   - the host form, <port>-<id>.<ingress domain> with the ID's underscore written as a dash, for
//     browsers: each port of each sandbox is an origin of its own.
//
// HTTP/1.1, WebSocket (any Upgrade) and HTTP/2 pass through; gRPC (HTTP/2 with an application/grpc
// content type) goes to the sandbox as cleartext HTTP/2. Raw TCP goes through a tunnel,
// /v1/sandboxes/{id}/tunnels/{port}: a WebSocket whose binary messages carry the stream.
//
// Every request needs a credential, unless the port is public (the network policy's public_ports): an
// API key (write scope) or an access token with scope ports, for that sandbox or session (and, if the
// token names one, that port), in the Authorization header; an access token also as the airlock_token
// query parameter (a port URL). In the host form that parameter sets a cookie, host-only, which later
// requests carry. The credential never reaches the sandbox: the header, the parameter and the cookie
// are removed before forwarding.

const (
	// portTokenParam is the query parameter, and the cookie, that carries an access token.
	portTokenParam = "airlock_token"
	// tunnelProtocol is the WebSocket subprotocol of a TCP tunnel.
	tunnelProtocol = "airlock-tcp"
)

// portMethods are the methods the path form serves.
var portMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// hostLabel is the first label of a host-form name: <port>-<kind>-<id>.
var hostLabel = regexp.MustCompile(`^([0-9]{1,5})-(sb|se)[-_]([a-z2-7]{26})$`)

// DefaultMaxPortConns bounds the requests and tunnels in progress through the ingress per sandbox.
const DefaultMaxPortConns = 1024

// maxUpstreamHeader bounds the response header a sandbox's server may send.
const maxUpstreamHeader = 1 << 20

// ingress holds the transports into sandboxes.
type ingress struct {
	domain string // the host form's base domain, lower case; "" disables the host form
	// publicURL is where clients reach the API (scheme and host of the URLs handed out); nil: as the
	// request reached it.
	publicURL *url.URL
	once      sync.Once
	h1        *http.Transport
	h2c       *http.Transport

	mu       sync.Mutex
	maxConns int            // per sandbox; 0: DefaultMaxPortConns
	conns    map[string]int // requests and tunnels in progress, by sandbox ID; guarded by mu
	anon     map[string]int // of them, those to public ports without a credential; guarded by mu
}

// acquire counts one more request or tunnel into sandbox id, or refuses it past the bound (half of it
// for public requests without a credential, so they cannot crowd out the owner's); release undoes it.
func (g *ingress) acquire(id string, public bool) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	max := g.maxConns
	if max == 0 {
		max = DefaultMaxPortConns
	}
	if g.conns[id] >= max {
		return nil, clientErr(errdefs.ErrResourceExhausted, "sandbox %s has %d requests and tunnels in progress through the ingress, the most it may", id, max)
	}
	if public && g.anon[id] >= (max+1)/2 {
		return nil, clientErr(errdefs.ErrResourceExhausted, "too many requests in progress to the public ports of %s", id)
	}
	if g.conns == nil {
		g.conns, g.anon = map[string]int{}, map[string]int{}
	}
	g.conns[id]++
	if public {
		g.anon[id]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			if g.conns[id]--; g.conns[id] <= 0 {
				delete(g.conns, id)
			}
			if public {
				if g.anon[id]--; g.anon[id] <= 0 {
					delete(g.anon, id)
				}
			}
			g.mu.Unlock()
		})
	}, nil
}

// portTargetKey carries a request's resolved controlplane.PortTarget to the transports' dial.
type portTargetKey struct{}

// transports returns the HTTP/1.1 and the cleartext HTTP/2 transport into sandboxes. Their "host" is
// <sandbox ID>:<port>, so idle connections are pooled per sandbox port; the dial goes through the
// control plane, with the request's resolved target.
func (s *Server) transports() (h1, h2c *http.Transport) {
	s.ing.once.Do(func() {
		dial := func(ctx context.Context, _, addr string) (net.Conn, error) {
			t, _ := ctx.Value(portTargetKey{}).(controlplane.PortTarget)
			host, portStr, err := net.SplitHostPort(addr)
			port, _ := strconv.Atoi(portStr)
			if err != nil || host != t.SandboxID {
				return nil, fmt.Errorf("ingress: dial %s without its target: %w", addr, errdefs.ErrInternal)
			}
			return s.cp.DialPort(ctx, t, port)
		}
		s.ing.h1 = &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
			DisableCompression: true, ExpectContinueTimeout: time.Second, MaxResponseHeaderBytes: maxUpstreamHeader}
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		s.ing.h2c = &http.Transport{DialContext: dial, Protocols: &p, IdleConnTimeout: 90 * time.Second, DisableCompression: true,
			MaxResponseHeaderBytes: maxUpstreamHeader}
	})
	return s.ing.h1, s.ing.h2c
}

// SetIngressLimit bounds the requests and tunnels in progress through the ingress per sandbox; 0:
// DefaultMaxPortConns.
func (s *Server) SetIngressLimit(n int) {
	s.ing.mu.Lock()
	s.ing.maxConns = n
	s.ing.mu.Unlock()
}

// SetPublicURL sets the API's URL as clients reach it (e.g. behind a TLS proxy), for the port URLs the
// API hands out; "" means as each request reached it.
func (s *Server) SetPublicURL(u string) error {
	if u == "" {
		s.ing.publicURL = nil
		return nil
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return fmt.Errorf("public URL %q: want http(s)://host[:port]", u)
	}
	s.ing.publicURL = pu
	return nil
}

// SetIngressDomain enables the host form under domain (e.g. "airlock.localhost"); "" disables it.
func (s *Server) SetIngressDomain(domain string) {
	s.ing.domain = strings.ToLower(strings.Trim(domain, "."))
}

// hostForm reports the target of a host-form request, ok false if r's host is not under the ingress
// domain. A host under the domain that names no port is an error.
func (s *Server) hostForm(r *http.Request) (id string, port int, ok bool, err error) {
	if s.ing.domain == "" {
		return "", 0, false, nil
	}
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(strings.TrimSuffix(host, "."), "."+s.ing.domain)
	if !ok {
		return "", 0, false, nil
	}
	m := hostLabel.FindStringSubmatch(label)
	if m == nil {
		return "", 0, true, clientErr(errdefs.ErrNotFound, "no sandbox port at %s: want <port>-<sandbox or session id>.%s", truncate(host, 128), s.ing.domain)
	}
	port, _ = strconv.Atoi(m[1])
	if port < 1 || port > 65535 {
		return "", 0, true, clientErr(errdefs.ErrInvalidArgument, "port %s: want 1..65535", m[1])
	}
	return m[2] + "_" + m[3], port, true, nil
}

// servePortHost serves a host-form request.
func (s *Server) servePortHost(w http.ResponseWriter, r *http.Request, id string, port int) {
	r.SetPathValue("id", id)
	r.SetPathValue("port", strconv.Itoa(port))
	kind := "sandboxes"
	if strings.HasPrefix(id, "se_") {
		kind = "sessions"
	}
	r.Pattern = r.Method + " " + "{port}-{id}." + s.ing.domain + " (/v1/" + kind + "/{id}/ports/{port}/)"
	s.servePort(w, r, id, port, r.URL.EscapedPath(), "", true)
}

// portPath serves the path form; session says whether {id} is a session.
func (s *Server) portPath(session bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := sandboxID(r)
		if session {
			id, err = sessionID(r)
		}
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		port, err := portOf(r)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		// The path after the port, as the client encoded it.
		prefix := "/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port)
		if session {
			prefix = "/v1/sessions/" + id + "/ports/" + strconv.Itoa(port)
		}
		rest, ok := strings.CutPrefix(r.URL.EscapedPath(), prefix)
		if !ok || !strings.HasPrefix(rest, "/") {
			writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "path %q does not start with %s/", truncate(r.URL.Path, 128), prefix))
			return
		}
		s.servePort(w, r, id, port, rest, prefix, false)
	}
}

func portOf(r *http.Request) (int, error) {
	v := r.PathValue("port")
	port, err := strconv.Atoi(v)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != v {
		return 0, clientErr(errdefs.ErrInvalidArgument, "invalid port %q: want a number in 1..65535", truncate(v, 16))
	}
	return port, nil
}

// portAccess is who a port request is served to.
type portAccess struct {
	p      controlplane.Principal // TenantID only, for public access
	cred   string                 // the credential that authorized it; "" for public access
	from   string                 // where cred came from: "header", "query" or "cookie"
	public bool                   // no credential: the port is public
}

// bearers returns the Airlock credentials (ak_…, at_…) in r's Authorization headers, whatever the case
// of the scheme and however many headers there are.
func bearers(r *http.Request) []string {
	var out []string
	for _, v := range r.Header.Values("Authorization") {
		scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " ")
		cred = strings.TrimSpace(cred)
		if ok && strings.EqualFold(scheme, "Bearer") && isAirlockCredential(cred) {
			out = append(out, cred)
		}
	}
	return out
}

func isAirlockCredential(v string) bool {
	return strings.HasPrefix(v, controlplane.AccessTokenPrefix) || strings.HasPrefix(v, "ak_")
}

// e2bCredentialHeaders are the headers E2B's SDKs carry a sandbox's tokens in.
var e2bCredentialHeaders = []string{"X-Access-Token", "E2B-Traffic-Access-Token"}

// maxCookieTries bounds the airlock_token cookies tried: a sandbox may have planted some.
const maxCookieTries = 4

// portCredentials lists the request's candidate credentials, in order: Airlock credentials in the
// Authorization header (API keys or access tokens), else an access token in the airlock_token query
// parameter, else (host form only) access tokens in airlock_token cookies. API keys are taken only
// from the header: they do not belong in URLs or cookies.
func portCredentials(r *http.Request, hostForm bool) (creds []string, from string) {
	if b := bearers(r); len(b) > 0 {
		return b[:1], "header"
	}
	// E2B's SDKs send a sandbox's tokens in headers of their own (X-Access-Token, the envd access
	// token; E2B-Traffic-Access-Token), to its ports too (the code interpreter's).
	for _, h := range e2bCredentialHeaders {
		if v := strings.TrimSpace(r.Header.Get(h)); isAirlockCredential(v) {
			return []string{v}, "header"
		}
	}
	if v := r.URL.Query().Get(portTokenParam); strings.HasPrefix(v, controlplane.AccessTokenPrefix) {
		return []string{v}, "query"
	}
	if !hostForm || !cookieAllowed(r) {
		return nil, ""
	}
	for _, c := range r.CookiesNamed(portTokenParam) {
		if strings.HasPrefix(c.Value, controlplane.AccessTokenPrefix) && len(creds) < maxCookieTries {
			creds = append(creds, c.Value)
		}
	}
	return creds, "cookie"
}

// cookieAllowed reports whether the ingress's cookie may authorize r: only on requests from the sandbox
// port's own pages, or a navigation, never from another site's or another sandbox's page (they share the
// ingress domain, so a browser calls them "same-site" and sends the cookie along).
func cookieAllowed(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return false
		}
	}
	return true
}

// servePort authenticates a port request, resolves its sandbox and forwards it. rest is the escaped
// path to send upstream; prefix the path form's prefix ("" for the host form). A credential that does
// not open the port still gets it if the port is public.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id string, port int, rest, prefix string, hostForm bool) {
	creds, from := portCredentials(r, hostForm)
	var refusal error
	var refused *controlplane.Principal
	check := func(p controlplane.Principal) error {
		if err := checkPortPrincipal(p, id, port, from); err != nil {
			return err
		}
		return checkInterpreterPort(p, port, r.Method, rest, r.URL.RawQuery)
	}
	for _, cred := range creds {
		p, err := s.cp.Authenticate(r.Context(), cred)
		if err == nil {
			if err = check(p); err == nil {
				// Held to the credential, and to the port's staying open to it, while it lasts.
				r, release := s.withPrincipal(r, p, cred, func(_ context.Context, p controlplane.Principal) error {
					return check(p)
				})
				defer release()
				s.audited(w, r, func(w http.ResponseWriter, r *http.Request) {
					s.forwardPort(w, r, portAccess{p: p, cred: cred, from: from}, id, port, rest, prefix, hostForm)
				})
				return
			}
			refused = &p
		}
		if refusal == nil {
			refusal = err
		}
	}
	if tenant, err := s.cp.PublicPort(r.Context(), id, port); err == nil {
		// Public: anyone may; nothing to record in the tenant's audit log.
		s.forwardPort(w, r, portAccess{p: controlplane.Principal{TenantID: tenant}, public: true}, id, port, rest, prefix, hostForm)
		return
	} else if refusal == nil || from == "cookie" {
		refusal = err // no credential, or only stale cookies: say what is missing
		refused = nil
	}
	if errors.Is(refusal, errdefs.ErrUnauthenticated) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
	}
	if refused != nil {
		// A valid credential that does not reach the port: recorded, like refusals on other routes.
		r = r.WithContext(apiutil.WithPrincipal(r.Context(), *refused))
		s.audited(w, r, func(w http.ResponseWriter, r *http.Request) { writeError(w, r, s.log, refusal) })
		return
	}
	writeError(w, r, s.log, refusal)
}

// checkPortPrincipal checks that p may reach port of the sandbox or session id: an API key with write
// scope, or an access token for that object with scope ports (and that port, if it names one); a token
// from a URL or a cookie must have no scope but ports. A token for another object gets not found, as
// another tenant's key does (through ResolvePort).
func checkPortPrincipal(p controlplane.Principal, id string, port int, from string) error {
	if p.Token == nil {
		if !p.Scope.Allows(store.ScopeWrite) {
			return clientErr(errdefs.ErrPermissionDenied, "this API key has scope %s; reaching a sandbox's ports needs write", p.Scope)
		}
		return nil
	}
	tokID, kind := p.Token.SandboxID, "sandbox"
	if strings.HasPrefix(id, "se_") {
		tokID, kind = p.Token.SessionID, "session"
	}
	switch {
	case tokID != id:
		return clientErr(errdefs.ErrNotFound, "%s %s not found", kind, truncate(id, 64))
	case !p.Token.Allows(store.TokenPorts):
		return clientErr(errdefs.ErrPermissionDenied, "this access token has scopes %s; reaching a port needs ports", apiutil.JoinTokenScopes(p.Token.Scopes))
	case !p.Token.AllowsPort(port):
		return clientErr(errdefs.ErrPermissionDenied, "this access token reaches port %d only, not %d", p.Token.Port, port)
	case from != "header" && len(p.Token.Scopes) != 1:
		return clientErr(errdefs.ErrPermissionDenied, "a token in a URL or a cookie must have the ports scope only (this one has %s): the page it opens could read it", apiutil.JoinTokenScopes(p.Token.Scopes))
	}
	return nil
}

// mayRunCode reports whether p may run code in its sandbox: an API key (reaching a port takes write
// scope) or an access token with scope exec.
func mayRunCode(p controlplane.Principal) bool {
	return p.Token == nil || p.Token.Allows(store.TokenExec)
}

// interpreterRoutes are the code interpreter's routes that run nothing of the caller's: its health and
// its contexts (a kernel starts in a directory only root writes; see server.py). E2B's SDK reaches them
// with its traffic token, a token without exec.
var interpreterRoutes = regexp.MustCompile(`^/(health|contexts(/[A-Za-z0-9-]{1,64}(/restart)?)?)$`)

// checkInterpreterPort checks a request for the code interpreter's port (anything else passes): a
// caller that may run code may send anything; one that may not, only a request for interpreterRoutes
// (rest, the escaped path, matched whole; no query), never an /execute. The interpreter demands its key
// of /execute besides.
func checkInterpreterPort(p controlplane.Principal, port int, method, rest, rawQuery string) error {
	if port != interpreterPort || mayRunCode(p) {
		return nil
	}
	ok := withoutParam(rawQuery, portTokenParam) == "" && interpreterRoutes.MatchString(rest)
	switch {
	case !ok:
	case rest == "/health":
		ok = method == http.MethodGet || method == http.MethodHead
	case rest == "/contexts":
		ok = method == http.MethodGet || method == http.MethodPost
	case strings.HasSuffix(rest, "/restart"):
		ok = method == http.MethodPost
	default:
		ok = method == http.MethodDelete
	}
	if ok {
		return nil
	}
	return interpreterRefusal(p.Token.Scopes)
}

// interpreterRefusal is the answer to a token without exec scope that would run code through the code
// interpreter's port (or reach it by a tunnel, which the API cannot look into).
func interpreterRefusal(scopes []store.TokenScope) error {
	return clientErr(errdefs.ErrPermissionDenied, "port %d is the code interpreter's, which runs code: that needs scopes exec and ports (this access token has %s; "+
		"without exec it reaches the interpreter's contexts only); run code with …/code/run", interpreterPort, apiutil.JoinTokenScopes(scopes))
}

// Response headers that act on the whole origin. The path form serves every sandbox under the API's
// origin, so a sandbox's answer must not set them there.
var originWideHeaders = []string{"Set-Cookie", "Clear-Site-Data", "Service-Worker-Allowed", "Strict-Transport-Security",
	"Alt-Svc", "NEL", "Report-To", "Reporting-Endpoints", "WWW-Authenticate"}

// recheckEvery is how often a public port's upgraded connection is checked again: a port made private
// ends it. (A credential's requests are held to it every second: accessWatch.)
const recheckEvery = 10 * time.Second

// forwardPort resolves the sandbox (resuming a paused session) and proxies the request to port.
func (s *Server) forwardPort(w http.ResponseWriter, r *http.Request, a portAccess, id string, port int, rest, prefix string, hostForm bool) {
	if port == interpreterPort && a.public {
		// A public port is anyone's; the code interpreter runs code only for those who may.
		writeError(w, r, s.log, s.publicErr(a, port, id, clientErr(errdefs.ErrPermissionDenied, "port %d is the code interpreter's and is never public", port)))
		return
	}
	t, err := s.cp.ResolvePort(r.Context(), a.p.TenantID, id)
	if err != nil {
		writeError(w, r, s.log, s.publicErr(a, port, id, err))
		return
	}
	if hostForm && a.from == "query" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		// A port URL opened in a browser: keep the token in a cookie, and take it out of the address, where
		// the page's scripts and its Referer would carry it into the sandbox.
		c := &http.Cookie{Name: portTokenParam, Value: a.cred, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
			Secure: r.TLS != nil, MaxAge: int(time.Until(a.p.Token.ExpiresAt).Seconds())}
		w.Header().Set("Set-Cookie", c.String())
		w.Header().Set("Referrer-Policy", "no-referrer")
		u := *r.URL
		u.Scheme, u.Host, u.RawQuery = "", "", withoutParam(r.URL.RawQuery, portTokenParam)
		http.Redirect(w, r, u.String(), http.StatusSeeOther)
		return
	}
	// The interpreter's key, for a caller that may run code, and no other.
	var interpreterKey string
	if port == interpreterPort && !a.public && mayRunCode(a.p) {
		if interpreterKey, err = s.cp.InterpreterKey(r.Context(), t); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	release, err := s.ing.acquire(t.SandboxID, a.public)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	defer release()
	defer s.cp.BeginPortWork(t.TenantID, t.SessionID, t.SandboxID)()
	ctx, cancel := context.WithCancel(context.WithValue(r.Context(), portTargetKey{}, t))
	defer cancel()
	if a.public && r.Header.Get("Upgrade") != "" {
		// A credential's requests are held to it (accessWatch); a public port's upgrades to the port's
		// staying public.
		go s.recheck(ctx, cancel, id, port)
	}
	h1, h2c := s.transports()
	tr := h1
	if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		tr = h2c
	}
	// The API's own headers are not the sandbox's to send.
	w.Header().Del("Cache-Control")
	w.Header().Del("X-Content-Type-Options")
	rp := &httputil.ReverseProxy{
		// Streamed answers (no Content-Length: server-sent events, long polls) are flushed as they
		// come; FlushInterval 0 leaves the others buffered.
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetXForwarded()
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = net.JoinHostPort(t.SandboxID, strconv.Itoa(port))
			pr.Out.Host = pr.In.Host
			path, err := url.PathUnescape(rest)
			if err != nil {
				path = rest
			}
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, rest
			pr.Out.URL.RawQuery = withoutParam(pr.Out.URL.RawQuery, portTokenParam)
			if prefix != "" {
				pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
				// No cookie of the API's origin is the sandbox's: its answers never set one there.
				pr.Out.Header.Del("Cookie")
			}
			stripCredentials(pr.Out)
			if interpreterKey != "" {
				pr.Out.Header.Set(interpreterKeyHeader, interpreterKey)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			h := resp.Header
			h.Del(interpreterKeyHeader) // a server that echoes it gives the caller nothing it may keep
			dropCookie(h, hostForm)
			if !hostForm {
				for _, k := range originWideHeaders {
					h.Del(k)
				}
				// The sandbox's pages must not run as the API's origin.
				h.Set("Content-Security-Policy", "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads")
			} else {
				h.Del("Clear-Site-Data")
			}
			if !a.public {
				h.Set("Cache-Control", privateCache(h.Get("Cache-Control")))
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.portError(w, r, a, t, port, err)
		},
	}
	// The transport may still be reading the request's body (to its end) when the sandbox's server has
	// answered and the answer is being copied: an HTTP/1 handler's request body closes once its answer
	// starts unless it is full duplex, which failed the transport's write and with it the answer (seen
	// with E2B's code interpreter: a POST answered as soon as its body was read).
	_ = http.NewResponseController(w).EnableFullDuplex()
	rp.ServeHTTP(finalOnly{w}, r.WithContext(ctx))
}

// finalOnly drops the informational (1xx) answers a sandbox's server sends before its answer: their
// headers would reach the client without the ingress's checks (http.ReverseProxy relays them as they
// come). Upgrades (101) do not go through WriteHeader.
type finalOnly struct{ http.ResponseWriter }

func (w finalOnly) WriteHeader(code int) {
	if code >= 200 {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w finalOnly) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// privateCache returns a Cache-Control value that keeps shared caches from storing an answer that needed
// a credential.
func privateCache(cc string) string {
	l := strings.ToLower(cc)
	switch {
	case cc == "":
		return "private"
	case strings.Contains(l, "no-store"), strings.Contains(l, "private"):
		return cc
	}
	var parts []string
	for _, d := range strings.Split(cc, ",") {
		if !strings.EqualFold(strings.TrimSpace(d), "public") {
			parts = append(parts, strings.TrimSpace(d))
		}
	}
	return strings.Join(append([]string{"private"}, parts...), ", ")
}

// recheck checks a public port's long connection every recheckEvery and calls cancel (which ends the
// connection) once the port is no longer public.
func (s *Server) recheck(ctx context.Context, cancel context.CancelFunc, id string, port int) {
	tick := time.NewTicker(recheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_, err := s.cp.PublicPort(ctx, id, port)
		if err != nil && ctx.Err() == nil && !errors.Is(err, errdefs.ErrInternal) && !errors.Is(err, errdefs.ErrUnavailable) {
			s.log.Info("ingress connection ended: its port is no longer public", "target", id, "port", port, "err", err)
			cancel()
			return
		}
	}
}

// withoutParam returns the raw query without the parameters named name, the others as they were.
func withoutParam(raw, name string) string {
	if !strings.Contains(raw, name) {
		return raw
	}
	var kept []string
	for _, part := range strings.Split(raw, "&") {
		k, _, _ := strings.Cut(part, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == name {
			continue
		}
		kept = append(kept, part)
	}
	return strings.Join(kept, "&")
}

// stripCredentials removes every Airlock credential from a request bound for a sandbox: in any
// Authorization header, a WebSocket's bearer subprotocol, E2B's token headers, the airlock_token
// cookie, and a Referer that carries a port URL's token.
func stripCredentials(r *http.Request) {
	if vs := r.Header.Values("Sec-WebSocket-Protocol"); len(vs) > 0 {
		r.Header.Del("Sec-WebSocket-Protocol")
		var kept []string
		for _, v := range vs {
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" && !strings.HasPrefix(p, bearerProtocolPrefix) {
					kept = append(kept, p)
				}
			}
		}
		if len(kept) > 0 {
			r.Header.Set("Sec-WebSocket-Protocol", strings.Join(kept, ", "))
		}
	}
	if vs := r.Header.Values("Authorization"); len(vs) > 0 {
		r.Header.Del("Authorization")
		for _, v := range vs {
			scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " ")
			if ok && strings.EqualFold(scheme, "Bearer") && isAirlockCredential(strings.TrimSpace(cred)) {
				continue
			}
			r.Header.Add("Authorization", v)
		}
	}
	if vs := r.Header.Values("Cookie"); len(vs) > 0 {
		r.Header.Del("Cookie")
		var kept []string
		for _, v := range vs {
			for _, c := range strings.Split(v, ";") {
				name, _, _ := strings.Cut(c, "=")
				if strings.TrimSpace(name) != portTokenParam && strings.TrimSpace(c) != "" {
					kept = append(kept, strings.TrimSpace(c))
				}
			}
		}
		if len(kept) > 0 {
			r.Header.Set("Cookie", strings.Join(kept, "; "))
		}
	}
	// E2B's token headers are never the sandbox's, whatever they hold and however many there are; an
	// API key in E2B's API key header neither. The interpreter's key is the API's to add.
	for _, h := range e2bCredentialHeaders {
		r.Header.Del(h)
	}
	r.Header.Del(interpreterKeyHeader)
	for _, v := range r.Header.Values("X-Api-Key") {
		if isAirlockCredential(strings.TrimSpace(v)) {
			r.Header.Del("X-Api-Key")
			break
		}
	}
	if ref := r.Header.Get("Referer"); strings.Contains(ref, portTokenParam) {
		if u, err := url.Parse(ref); err == nil {
			u.RawQuery = withoutParam(u.RawQuery, portTokenParam)
			r.Header.Set("Referer", u.String())
		} else {
			r.Header.Del("Referer")
		}
	}
}

// dropCookie removes the sandbox's attempts to set or clear the ingress's cookie; in the host form it
// also makes every cookie host-only (no Domain), so one sandbox's origin cannot set cookies for others.
func dropCookie(h http.Header, hostForm bool) {
	vs := h.Values("Set-Cookie")
	if len(vs) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, v := range vs {
		name, _, _ := strings.Cut(v, "=")
		if strings.EqualFold(strings.TrimSpace(name), portTokenParam) {
			continue
		}
		if hostForm {
			parts := strings.Split(v, ";")
			kept := parts[:1]
			for _, attr := range parts[1:] {
				k, _, _ := strings.Cut(strings.TrimSpace(attr), "=")
				if !strings.EqualFold(k, "Domain") {
					kept = append(kept, attr)
				}
			}
			v = strings.Join(kept, ";")
		}
		h.Add("Set-Cookie", v)
	}
}

// publicErr is err for an authenticated caller; a public port's anonymous caller gets the same code
// without the details (the session's sandbox, addresses, states).
func (s *Server) publicErr(a portAccess, port int, id string, err error) error {
	if !a.public || errors.Is(err, errdefs.ErrInternal) {
		return err
	}
	for _, e := range []error{errdefs.ErrPortClosed, errdefs.ErrBadGateway, errdefs.ErrNotFound, errdefs.ErrConflict,
		errdefs.ErrFailedPrecondition, errdefs.ErrResourceExhausted, errdefs.ErrUnavailable, errdefs.ErrDeadlineExceeded,
		errdefs.ErrKeyUnavailable, errdefs.ErrPermissionDenied} {
		if errors.Is(err, e) {
			return clientErr(e, "port %d of %s is not available", port, id)
		}
	}
	return err
}

// portError reports a failed forward: the port not open (with a hint when the server listens on
// loopback only), the server gone, or the client gone.
func (s *Server) portError(w http.ResponseWriter, r *http.Request, a portAccess, t controlplane.PortTarget, port int, err error) {
	if r.Context().Err() != nil {
		return // the client went away, or its access ended
	}
	switch {
	case errors.Is(err, errdefs.ErrPortClosed) && !a.public:
		err = clientErr(errdefs.ErrPortClosed, "%s", s.closedPortMessage(r.Context(), t, port))
	case errors.Is(err, errdefs.ErrPortClosed), errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrFailedPrecondition),
		errors.Is(err, errdefs.ErrUnavailable):
	default:
		err = clientErr(errdefs.ErrBadGateway, "the server on port %d of sandbox %s: %v", port, t.SandboxID, err)
	}
	id := t.SessionID
	if id == "" {
		id = t.SandboxID
	}
	writeError(w, r, s.log, s.publicErr(a, port, id, err))
}

// closedPortMessage says that nothing listens on port, and, if a server listens on it on loopback only,
// how to make it reachable.
func (s *Server) closedPortMessage(ctx context.Context, t controlplane.PortTarget, port int) string {
	msg := fmt.Sprintf("nothing listens on port %d in sandbox %s", port, t.SandboxID)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ps, err := s.cp.ListeningPorts(ctx, t)
	if err != nil {
		return msg
	}
	for _, lp := range ps {
		if lp.Port == port && !lp.Reachable {
			return fmt.Sprintf("port %d in sandbox %s is open on %s only: listen on 0.0.0.0 (or ::) to reach it through Airlock", port, t.SandboxID, lp.Address)
		}
	}
	return msg
}

// listPorts serves GET …/ports: the TCP ports processes in the sandbox listen on.
func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) {
	id, t, ok := s.portTarget(w, r)
	if !ok {
		return
	}
	defer s.cp.BeginWork(r.Context(), t.TenantID, t.SessionID, t.SandboxID)()
	ps, err := s.cp.ListeningPorts(r.Context(), t)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	pub := map[int]bool{}
	if np, err := controlplane.NetworkPolicy(t.Sandbox); err == nil {
		for _, p := range np.PublicPorts {
			pub[p] = true
		}
	}
	out := wire.PortList{Ports: []wire.Port{}}
	tok := principalOf(r).Token
	for _, p := range ps {
		if tok != nil && tok.Port != 0 && tok.Port != p.Port {
			continue // a token for one port sees that one
		}
		out.Ports = append(out.Ports, wire.Port{Port: p.Port, Address: p.Address.String(), Reachable: p.Reachable,
			Public: pub[p.Port], URLs: s.portURLs(r, id, p.Port, "")})
	}
	writeJSON(w, http.StatusOK, out)
}

// portTarget resolves the sandbox or session of a work route's {id} for the request's tenant (resuming
// a paused session), or answers the error and reports false.
func (s *Server) portTarget(w http.ResponseWriter, r *http.Request) (string, controlplane.PortTarget, bool) {
	id, err := sandboxID(r)
	if strings.HasPrefix(r.URL.Path, "/v1/sessions/") {
		id, err = sessionID(r)
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return "", controlplane.PortTarget{}, false
	}
	t, err := s.cp.ResolvePort(r.Context(), tenantOf(r), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return "", controlplane.PortTarget{}, false
	}
	return id, t, true
}

// portURLs returns the two URL forms of a port of the sandbox or session id, as the client reached
// this server, with token (if any) as their airlock_token.
func (s *Server) portURLs(r *http.Request, id string, port int, token string) *wire.PortURLs {
	scheme, host := "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if s.ing.publicURL != nil {
		scheme, host = s.ing.publicURL.Scheme, s.ing.publicURL.Host
	}
	kind := "sandboxes"
	if strings.HasPrefix(id, "se_") {
		kind = "sessions"
	}
	q := ""
	if token != "" {
		q = "?" + portTokenParam + "=" + url.QueryEscape(token)
	}
	u := &wire.PortURLs{Path: fmt.Sprintf("%s://%s/v1/%s/%s/ports/%d/%s", scheme, host, kind, id, port, q)}
	if s.ing.domain != "" {
		hostPort := ""
		if _, p, err := net.SplitHostPort(host); err == nil {
			hostPort = ":" + p
		}
		u.Host = fmt.Sprintf("%s://%d-%s.%s%s/%s", scheme, port, strings.Replace(id, "_", "-", 1), s.ing.domain, hostPort, q)
	}
	return u
}

// tunnel serves GET …/tunnels/{port}: a WebSocket that carries a TCP connection to port in the sandbox,
// its binary messages the stream's bytes. The connection is made before the WebSocket is accepted, so
// a port that is not open is an ordinary error answer.
func (s *Server) tunnel(w http.ResponseWriter, r *http.Request) {
	port, err := portOf(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if p := principalOf(r); p.Token != nil && !p.Token.AllowsPort(port) {
		writeError(w, r, s.log, clientErr(errdefs.ErrPermissionDenied, "this access token reaches port %d only, not %d", p.Token.Port, port))
		return
	} else if port == interpreterPort && !mayRunCode(p) {
		writeError(w, r, s.log, interpreterRefusal(p.Token.Scopes))
		return
	}
	_, t, ok := s.portTarget(w, r)
	if !ok {
		return
	}
	release, err := s.ing.acquire(t.SandboxID, false)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	defer release()
	defer s.cp.BeginPortWork(t.TenantID, t.SessionID, t.SandboxID)()
	up, err := s.cp.DialPort(r.Context(), t, port)
	if err != nil {
		if errors.Is(err, errdefs.ErrPortClosed) {
			err = clientErr(errdefs.ErrPortClosed, "%s", s.closedPortMessage(r.Context(), t, port))
		}
		writeError(w, r, s.log, err)
		return
	}
	defer up.Close()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{tunnelProtocol}})
	if err != nil {
		return // Accept answered the client
	}
	ws.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	// The request is held to its credential (accessWatch): once that no longer holds, the tunnel closes
	// saying why.
	onAccessEnd(r.Context(), func(reason error) {
		ws.Close(websocket.StatusPolicyViolation, closeReason(reason))
		cancel()
	})
	nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	defer nc.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, nc); done <- struct{}{} }()
	go func() { _, _ = io.Copy(nc, up); done <- struct{}{} }()
	select { // either side ended, or the access did: end both
	case <-done:
	case <-ctx.Done():
	}
}
