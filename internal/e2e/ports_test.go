package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlockrun/airlock/internal/gateway/netfilter"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// echoed is what the test server in the sandbox answers on its JSON route: the request as it arrived.
type echoed struct {
	Method   string              `json:"method"`
	Path     string              `json:"path"`
	RawQuery string              `json:"raw_query"`
	Proto    string              `json:"proto"`
	Host     string              `json:"host"`
	Headers  map[string][]string `json:"headers"`
	Cookies  []string            `json:"cookies"`
}

// startPortServer copies the test server into sandbox (or session) id and starts it: HTTP (and h2c) on
// 8080, TCP echo on 7000; a Python server on 127.0.0.1:3000 only. It waits until 8080 is listening.
func startPortServer(t *testing.T, e *testenv.Env, id string) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	bin, err := os.ReadFile(testenv.PortServer(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.WriteFile(ctx, id, "/home/user/portserver", bytes.NewReader(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	sh(t, e, id, "cd /home/user && setsid nohup ./portserver -http 0.0.0.0:8080 -tcp 0.0.0.0:7000 >ps.out 2>&1 & "+
		"setsid nohup python3 -m http.server --bind 127.0.0.1 3000 >py.out 2>&1 &")
	deadline := time.Now().Add(time.Minute)
	for {
		ps, err := e.Client.ListPorts(ctx, id)
		if err != nil {
			t.Fatalf("list ports: %v", err)
		}
		open := map[int]bool{}
		for _, p := range ps.Ports {
			open[p.Port] = true
		}
		if open[8080] && open[7000] && open[3000] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test servers did not come up: ports %+v; %s", ps.Ports, sh(t, e, id, "cat /home/user/ps.out /home/user/py.out").Stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// hostClient returns an HTTP client that sends every request, whatever its host, to the API's address:
// what a wildcard DNS name for the ingress domain does. h2c makes it speak cleartext HTTP/2.
func hostClient(e *testenv.Env, h2c bool) *http.Client {
	u, _ := url.Parse(e.URL)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, u.Host)
	}}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// hostURL is the host form of port of id under the test server's ingress domain.
func hostURL(e *testenv.Env, id string, port int, path string) string {
	u, _ := url.Parse(e.URL)
	return fmt.Sprintf("http://%d-%s.airlock.localhost:%s%s", port, strings.Replace(id, "_", "-", 1), u.Port(), path)
}

// do sends one request and returns the status, the body and the response.
func do(t *testing.T, c *http.Client, method, u, cred string, hdr map[string]string, body []byte) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, time.Minute), method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

func decodeEcho(t *testing.T, body string) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("the sandbox's server answered %q: %v", truncate(body), err)
	}
	return e
}

// errCode returns the API error code of a JSON error body.
func errCode(body string) string {
	var b airlock.ErrorBody
	_ = json.Unmarshal([]byte(body), &b)
	return b.Error.Code
}

// TestPortForwarding reaches servers inside a sandbox through the ingress: HTTP by both URL forms, a
// WebSocket echo, gRPC over cleartext HTTP/2, a TCP echo through `airlock port-forward`; and checks who
// may: no credential 401, another tenant's key or token 404, a token without the port 403, a port URL
// and its cookie, a public port; and that credentials never reach the sandbox.
func TestPortForwarding(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 5*time.Minute)
	sb := create(t, e, airlock.CreateSandboxRequest{})
	startPortServer(t, e, sb.ID)
	plain := &http.Client{}
	key := e.APIKey

	t.Run("path form", func(t *testing.T) {
		u := e.Client.PortURL(sb.ID, 8080) + "a/b%2Fc?x=1&airlock_token=at_dropped"
		status, body, resp := do(t, plain, "POST", u, key, map[string]string{"Cookie": "app=1", "X-Forwarded-For": "6.6.6.6"}, []byte("hello"))
		if status != 200 {
			t.Fatalf("POST %s: %d %s", u, status, body)
		}
		got := decodeEcho(t, body)
		if got.Method != "POST" || got.Path != "/a/b/c" || got.RawQuery != "x=1" {
			t.Errorf("the sandbox got %s %s ?%s; want POST /a/b/c ?x=1", got.Method, got.Path, got.RawQuery)
		}
		if _, ok := got.Headers["Authorization"]; ok {
			t.Errorf("the API key reached the sandbox: %v", got.Headers["Authorization"])
		}
		if strings.Contains(body, key) || strings.Contains(body, "at_dropped") {
			t.Errorf("a credential reached the sandbox: %s", body)
		}
		if xf := got.Headers["X-Forwarded-For"]; len(xf) != 1 || strings.Contains(xf[0], "6.6.6.6") {
			t.Errorf("X-Forwarded-For %v: want only the client's address, not the spoofed one", xf)
		}
		if p := got.Headers["X-Forwarded-Prefix"]; len(p) != 1 || p[0] != "/v1/sandboxes/"+sb.ID+"/ports/8080" {
			t.Errorf("X-Forwarded-Prefix %v", p)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox") {
			t.Errorf("the path form's pages run as the API's origin: Content-Security-Policy %q", csp)
		}
		// Credentials in any Authorization header, any case, go; other schemes reach the app.
		req, _ := http.NewRequestWithContext(ctx, "GET", e.Client.PortURL(sb.ID, 8080), nil)
		req.Header.Add("Authorization", "Basic dXNlcjpwdw==")
		req.Header.Add("Authorization", "bearer "+key)
		r2, err := plain.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b2, _ := io.ReadAll(r2.Body)
		r2.Body.Close()
		if got := decodeEcho(t, string(b2)); r2.StatusCode != 200 || strings.Join(got.Headers["Authorization"], ",") != "Basic dXNlcjpwdw==" {
			t.Errorf("two Authorization headers: %d, the sandbox got %v", r2.StatusCode, got.Headers["Authorization"])
		}
		// Nothing the sandbox answers acts on the API's origin.
		if _, _, resp := do(t, plain, "GET", e.Client.PortURL(sb.ID, 8080)+"set-cookie", key, nil, nil); len(resp.Header.Values("Set-Cookie")) != 0 {
			t.Errorf("the path form passed Set-Cookie: %v", resp.Header.Values("Set-Cookie"))
		}
		// Without the trailing slash: redirected to it.
		status, body, resp = do(t, hostClient(e, false), "GET", strings.TrimSuffix(e.Client.PortURL(sb.ID, 8080), "/"), key, nil, nil)
		if status/100 != 3 || !strings.HasSuffix(resp.Header.Get("Location"), "/ports/8080/") {
			t.Errorf("port URL without its slash: %d %s %v", status, body, resp.Header)
		}
	})

	t.Run("host form", func(t *testing.T) {
		hc := hostClient(e, false)
		status, body, _ := do(t, hc, "GET", hostURL(e, sb.ID, 8080, "/page?q=2"), key, nil, nil)
		if status != 200 {
			t.Fatalf("host form: %d %s", status, body)
		}
		got := decodeEcho(t, body)
		if got.Path != "/page" || got.RawQuery != "q=2" || !strings.HasPrefix(got.Host, "8080-sb-") {
			t.Errorf("the sandbox got path %q query %q host %q", got.Path, got.RawQuery, got.Host)
		}
		// The host form never serves the API.
		status, body, _ = do(t, hc, "GET", hostURL(e, sb.ID, 8080, "/v1/sandboxes"), key, nil, nil)
		if status != 200 || decodeEcho(t, body).Path != "/v1/sandboxes" {
			t.Errorf("host form /v1/sandboxes: %d %s; want the sandbox's answer", status, truncate(body))
		}
		u, _ := url.Parse(e.URL)
		status, body, _ = do(t, hc, "GET", "http://nonsense.airlock.localhost:"+u.Port()+"/", key, nil, nil)
		if status != 404 || !strings.Contains(body, "no sandbox port") {
			t.Errorf("a host that names no port: %d %s", status, body)
		}
	})

	t.Run("websocket", func(t *testing.T) {
		for _, form := range []struct {
			name string
			url  string
			hc   *http.Client
		}{
			{"path", strings.Replace(e.Client.PortURL(sb.ID, 8080), "http", "ws", 1) + "ws", plain},
			{"host", strings.Replace(hostURL(e, sb.ID, 8080, "/ws"), "http", "ws", 1), hostClient(e, false)},
		} {
			c, _, err := websocket.Dial(ctx, form.url, &websocket.DialOptions{HTTPClient: form.hc,
				HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
			if err != nil {
				t.Fatalf("%s form: dial %s: %v", form.name, form.url, err)
			}
			for i := range 3 {
				msg := fmt.Sprintf("echo %d via %s", i, form.name)
				if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				typ, b, err := c.Read(ctx)
				if err != nil || typ != websocket.MessageText || string(b) != msg {
					t.Errorf("%s form: echo %q: got %v %q %v", form.name, msg, typ, b, err)
				}
			}
			c.Close(websocket.StatusNormalClosure, "")
		}
	})

	t.Run("grpc over h2c", func(t *testing.T) {
		msg := []byte("a gRPC message through the ingress")
		frame := make([]byte, 5+len(msg))
		binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
		copy(frame[5:], msg)
		for _, u := range []string{e.Client.PortURL(sb.ID, 8080) + "grpc.Echo/Echo", hostURL(e, sb.ID, 8080, "/grpc.Echo/Echo")} {
			status, body, resp := do(t, hostClient(e, true), "POST", u, key, map[string]string{"Content-Type": "application/grpc", "TE": "trailers"}, frame)
			if status != 200 || resp.ProtoMajor != 2 {
				t.Fatalf("gRPC %s: %d %s %s", u, status, resp.Proto, body)
			}
			if body != string(frame) {
				t.Errorf("gRPC %s: echo %q; want %q", u, body, frame)
			}
			if gs := resp.Trailer.Get("Grpc-Status"); gs != "0" {
				t.Errorf("gRPC %s: trailer Grpc-Status %q (trailers %v); want 0", u, gs, resp.Trailer)
			}
		}
	})

	t.Run("tcp through port-forward", func(t *testing.T) {
		cmd := exec.Command(testenv.Binary(t), "--url", e.URL, "--api-key", key, "port-forward", sb.ID, ":7000")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		m := regexp.MustCompile(`127\.0\.0\.1:(\d+) -> 7000`).FindStringSubmatch(line)
		if err != nil || m == nil {
			t.Fatalf("port-forward printed %q (%v); stderr %s", line, err, stderr.String())
		}
		for i := range 3 {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			msg := strings.Repeat(fmt.Sprintf("tcp echo %d ", i), 10000) + "\n"
			go func() { _, _ = io.WriteString(c, msg) }()
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			got, err := bufio.NewReaderSize(c, 1<<20).ReadString('\n')
			if err != nil || got != msg {
				t.Errorf("TCP echo %d through port-forward: %d bytes, %v; want %d bytes", i, len(got), err, len(msg))
			}
			c.Close()
		}
		// The SDK's tunnel: a port with nothing on it is refused with the clear error.
		if _, err := e.Client.Tunnel(ctx, sb.ID, 7001); !isCode(err, "port_not_open") {
			t.Errorf("tunnel to a closed port: %v; want port_not_open", err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		u := e.Client.PortURL(sb.ID, 8080)
		if status, body, resp := do(t, plain, "GET", u, "", nil, nil); status != 401 || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("no credential: %d %s; want 401", status, body)
		}
		if status, body, _ := do(t, hostClient(e, false), "GET", hostURL(e, sb.ID, 8080, "/"), "", nil, nil); status != 401 {
			t.Errorf("no credential, host form: %d %s; want 401", status, body)
		}
		if status, body, _ := do(t, plain, "GET", u, "at_"+strings.Repeat("x", 43), nil, nil); status != 401 {
			t.Errorf("a made-up token: %d %s; want 401", status, body)
		}
		if status, body, _ := do(t, plain, "GET", e.Client.PortURL("sb_"+strings.Repeat("a", 26), 8080), key, nil, nil); status != 404 || errCode(body) != "not_found" {
			t.Errorf("no such sandbox: %d %s; want 404 not_found", status, body)
		}
		status, body, _ := do(t, plain, "GET", e.Client.PortURL(sb.ID, 8081), key, nil, nil)
		if status != 502 || errCode(body) != "port_not_open" || !strings.Contains(body, "nothing listens on port 8081") {
			t.Errorf("a closed port: %d %s; want 502 port_not_open", status, body)
		}
		status, body, _ = do(t, plain, "GET", e.Client.PortURL(sb.ID, 3000), key, nil, nil)
		if status != 502 || errCode(body) != "port_not_open" || !strings.Contains(body, "127.0.0.1 only") {
			t.Errorf("a port open on loopback only: %d %s; want 502 port_not_open naming 127.0.0.1", status, body)
		}

		// Another tenant: its key, and its token for its own sandbox, find nothing here.
		ct, err := e.Client.CreateTenant(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		b := airlock.New(e.URL, airlock.WithAPIKey(ct.APIKey.Key))
		if status, body, _ := do(t, plain, "GET", u, ct.APIKey.Key, nil, nil); status != 404 {
			t.Errorf("another tenant's key: %d %s; want 404", status, body)
		}
		bsb, err := b.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		btok, err := b.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: bsb.ID, Scopes: []string{"ports"}})
		if err != nil {
			t.Fatal(err)
		}
		if status, body, _ := do(t, plain, "GET", u, btok.Token, nil, nil); status != 404 {
			t.Errorf("another tenant's token: %d %s; want 404", status, body)
		}
		if status, body, _ := do(t, plain, "GET", u+"?airlock_token="+btok.Token, "", nil, nil); status != 404 {
			t.Errorf("another tenant's token as a port URL: %d %s; want 404", status, body)
		}
		if _, err := b.Tunnel(ctx, sb.ID, 7000); !isCode(err, "not_found") {
			t.Errorf("another tenant's tunnel: %v; want not_found", err)
		}

		// Tokens of this tenant: without the ports scope, or for another port.
		exec, err := e.Client.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"exec"}})
		if err != nil {
			t.Fatal(err)
		}
		if status, body, _ := do(t, plain, "GET", u, exec.Token, nil, nil); status != 403 {
			t.Errorf("a token without ports: %d %s; want 403", status, body)
		}
		one, err := e.Client.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"ports"}, Port: 7000})
		if err != nil {
			t.Fatal(err)
		}
		if status, body, _ := do(t, plain, "GET", u, one.Token, nil, nil); status != 403 || !strings.Contains(body, "port 7000 only") {
			t.Errorf("a token for port 7000 on 8080: %d %s; want 403", status, body)
		}
		if c, err := airlock.New(e.URL, airlock.WithAPIKey(one.Token)).Tunnel(ctx, sb.ID, 7000); err != nil {
			t.Errorf("a token for port 7000, tunnel to it: %v", err)
		} else {
			c.Close()
		}
		ro, err := e.Client.CreateAPIKey(ctx, "read-only", airlock.ScopeRead)
		if err != nil {
			t.Fatal(err)
		}
		if status, body, _ := do(t, plain, "GET", u, ro.Key, nil, nil); status != 403 {
			t.Errorf("a read-only key: %d %s; want 403", status, body)
		}
	})

	t.Run("port URL and cookie", func(t *testing.T) {
		tok, err := e.Client.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"ports"}, Port: 8080, TTLSeconds: 600})
		if err != nil {
			t.Fatal(err)
		}
		if tok.URLs == nil || tok.URLs.Host == "" || !strings.Contains(tok.URLs.Path, "airlock_token=") {
			t.Fatalf("a port token's URLs: %+v", tok.URLs)
		}
		hc := hostClient(e, false)
		// Opened in a browser: the token goes into a cookie, and out of the address.
		status, body, resp := do(t, hc, "GET", tok.URLs.Host, "", nil, nil)
		if status != http.StatusSeeOther || strings.Contains(resp.Header.Get("Location"), "airlock_token") {
			t.Fatalf("GET %s: %d %s, Location %q; want 303 to the URL without the token", tok.URLs.Host, status, body, resp.Header.Get("Location"))
		}
		var cookie *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == "airlock_token" {
				cookie = c
			}
		}
		if cookie == nil || !cookie.HttpOnly || cookie.Value != tok.Token || cookie.Domain != "" {
			t.Fatalf("the port URL set no HttpOnly host-only cookie: %v", resp.Header["Set-Cookie"])
		}
		// The path form (for programs) takes the token from the URL on every request.
		status, body, _ = do(t, plain, "GET", tok.URLs.Path, "", nil, nil)
		if status != 200 || decodeEcho(t, body).RawQuery != "" {
			t.Errorf("the path form's port URL: %d %s; want 200 and no token upstream", status, truncate(body))
		}
		// A token that could do more than reach ports is not taken from a URL.
		both, err := e.Client.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"ports", "exec"}, Port: 8080})
		if err != nil {
			t.Fatal(err)
		}
		if both.URLs != nil {
			t.Errorf("a ports+exec token came with URLs: %+v", both.URLs)
		}
		if status, body, _ = do(t, plain, "GET", e.Client.PortURL(sb.ID, 8080)+"?airlock_token="+both.Token, "", nil, nil); status != 403 {
			t.Errorf("a ports+exec token in a URL: %d %s; want 403", status, body)
		}
		// The cookie alone reaches the port; the sandbox never sees it.
		withCookie := map[string]string{"Cookie": "airlock_token=" + tok.Token + "; app=1"}
		status, body, _ = do(t, hc, "GET", hostURL(e, sb.ID, 8080, "/next"), "", withCookie, nil)
		if status != 200 {
			t.Fatalf("with the cookie: %d %s", status, body)
		}
		if got := decodeEcho(t, body); strings.Join(got.Cookies, ",") != "app" || strings.Contains(body, tok.Token) {
			t.Errorf("the sandbox got cookies %v (body %s); want only app", got.Cookies, truncate(body))
		}
		// Not from another site's (or another sandbox's) page.
		withCookie["Sec-Fetch-Site"] = "same-site"
		if status, body, _ = do(t, hc, "GET", hostURL(e, sb.ID, 8080, "/next"), "", withCookie, nil); status != 401 {
			t.Errorf("the cookie on a same-site request: %d %s; want 401", status, body)
		}
		// Nor from a page of another origin.
		delete(withCookie, "Sec-Fetch-Site")
		withCookie["Origin"] = hostURL(e, sb.ID, 7000, "")
		if status, body, _ = do(t, hc, "GET", hostURL(e, sb.ID, 8080, "/next"), "", withCookie, nil); status != 401 {
			t.Errorf("the cookie with a foreign Origin: %d %s; want 401", status, body)
		}
		delete(withCookie, "Origin")
		// A cookie the sandbox planted first does not lock the user out.
		withCookie["Cookie"] = "airlock_token=at_planted; airlock_token=" + tok.Token
		if status, body, _ = do(t, hc, "GET", hostURL(e, sb.ID, 8080, "/next"), "", withCookie, nil); status != 200 {
			t.Errorf("a planted cookie before the real one: %d %s; want 200", status, body)
		}
		withCookie["Cookie"] = "airlock_token=" + tok.Token + "; app=1"
		// The sandbox cannot set or clear the ingress's cookie.
		_, _, resp = do(t, hc, "GET", hostURL(e, sb.ID, 8080, "/set-cookie"), "", withCookie, nil)
		if sc := resp.Header.Values("Set-Cookie"); len(sc) != 1 || !strings.HasPrefix(sc[0], "app=1") {
			t.Errorf("Set-Cookie from the sandbox: %v; want only app=1", sc)
		}
		// A revoked token's URL stops working.
		if err := e.Client.RevokeAccessToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		if status, body, _ = do(t, hc, "GET", tok.URLs.Host, "", nil, nil); status != 401 {
			t.Errorf("a revoked port URL: %d %s; want 401", status, body)
		}
	})

	t.Run("public port", func(t *testing.T) {
		if _, err := e.Client.SetNetwork(ctx, sb.ID, airlock.NetworkPolicy{PublicPorts: []int{8080}}); err != nil {
			t.Fatal(err)
		}
		if status, body, _ := do(t, plain, "GET", e.Client.PortURL(sb.ID, 8080), "", nil, nil); status != 200 {
			t.Errorf("a public port without a credential: %d %s", status, body)
		}
		if status, body, _ := do(t, hostClient(e, false), "GET", hostURL(e, sb.ID, 8080, "/"), "", nil, nil); status != 200 {
			t.Errorf("a public port without a credential, host form: %d %s", status, body)
		}
		if status, body, _ := do(t, plain, "GET", e.Client.PortURL(sb.ID, 7000), "", nil, nil); status != 401 {
			t.Errorf("another port stays private: %d %s; want 401", status, body)
		}
		ps, err := e.Client.ListPorts(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps.Ports {
			if p.Public != (p.Port == 8080) || p.Reachable != (p.Port != 3000) {
				t.Errorf("listed port %+v", p)
			}
		}
		if _, err := e.Client.SetNetwork(ctx, sb.ID, airlock.NetworkPolicy{}); err != nil {
			t.Fatal(err)
		}
		if status, _, _ := do(t, plain, "GET", e.Client.PortURL(sb.ID, 8080), "", nil, nil); status != 401 {
			t.Errorf("a port made private again: %d; want 401", status)
		}
	})

	t.Run("no bypass from the host", func(t *testing.T) {
		// The sandbox's own address, as it sees it.
		res := run(t, e, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c",
			`import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("192.0.2.1", 9)); print(s.getsockname()[0])`}})
		ip := strings.TrimSpace(res.Stdout)
		if net.ParseIP(ip) == nil {
			t.Fatalf("sandbox address %q (%s)", ip, res.Stderr)
		}
		addr := net.JoinHostPort(ip, "8080")
		if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			c.Close()
			t.Errorf("a host process reached %s straight, past the ingress", addr)
		}
		// With the ingress's mark the same dial works: the rule is what refuses it.
		d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			_ = rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, int(netfilter.IngressMark))
			})
			return serr
		}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("the marked dial to %s: %v", addr, err)
		}
		c.Close()
	})
}

func isCode(err error, code string) bool {
	var ae *airlock.APIError
	return asAPIError(err, &ae) && ae.Code == code
}

// TestPortWakesPausedSession: a request for a port of a paused session resumes it and is served, in
// both URL forms; the time to the first byte is logged.
func TestPortWakesPausedSession(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 5*time.Minute)
	se := newSession(t, e, airlock.CreateSessionRequest{})
	startPortServer(t, e, se.ID)
	for i, form := range []struct {
		url string
		hc  *http.Client
	}{
		{e.Client.PortURL(se.ID, 8080) + "woken", &http.Client{}},
		{hostURL(e, se.ID, 8080, "/woken"), hostClient(e, false)},
	} {
		if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
			t.Fatal(err)
		}
		if got, err := e.Client.GetSession(ctx, se.ID); err != nil || got.State != airlock.SessionPaused {
			t.Fatalf("after pause: %+v %v", got, err)
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", form.url, nil)
		req.Header.Set("Authorization", "Bearer "+e.APIKey)
		start := time.Now()
		resp, err := form.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, 1)
		_, err = io.ReadFull(resp.Body, first)
		ttfb := time.Since(start)
		rest, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil {
			t.Fatalf("request %d to the paused session: %d %s%s (%v)", i, resp.StatusCode, first, rest, err)
		}
		if got := decodeEcho(t, string(first)+string(rest)); got.Path != "/woken" {
			t.Errorf("the woken session got path %q", got.Path)
		}
		t.Logf("paused session woken by a request (%s form): first byte after %v", []string{"path", "host"}[i], ttfb.Round(time.Millisecond))
		if got, err := e.Client.GetSession(ctx, se.ID); err != nil || got.State != airlock.SessionRunning {
			t.Errorf("after the request: %+v %v", got, err)
		}
	}
}

// TestPortAbuse: a flood of tunnels is bounded per sandbox (429, and the bound frees as they close); a
// hostile server in the sandbox (a header too large, an answer that is not HTTP) gets a clear 502 and
// harms nothing else.
func TestPortAbuse(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{IngressMaxConns: 4})
	ctx := ctxT(t, 5*time.Minute)
	sb := create(t, e, airlock.CreateSandboxRequest{})
	startPortServer(t, e, sb.ID)

	var open []net.Conn
	for i := range 4 {
		c, err := e.Client.Tunnel(ctx, sb.ID, 7000)
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		open = append(open, c)
	}
	if _, err := e.Client.Tunnel(ctx, sb.ID, 7000); !isCode(err, "resource_exhausted") {
		t.Errorf("a fifth tunnel past a bound of 4: %v; want resource_exhausted", err)
	}
	if status, body, _ := do(t, &http.Client{}, "GET", e.Client.PortURL(sb.ID, 8080), e.APIKey, nil, nil); status != 429 {
		t.Errorf("a request past the bound: %d %s; want 429", status, body)
	}
	open[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := e.Client.Tunnel(ctx, sb.ID, 7000)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a tunnel after one closed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range open[1:] {
		c.Close()
	}

	// Hostile servers: 8090 answers with a 2 MiB header, 8091 with something that is not HTTP.
	hostile := `
import socket, threading
def serve(port, answer):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.recv(65536)
        try: c.sendall(answer)
        except OSError: pass
        c.close()
threading.Thread(target=serve, args=(8092, b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\nSet-Cookie: airlock_token=evil\r\nService-Worker-Allowed: /\r\n\r\n" +
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nok")).start()
threading.Thread(target=serve, args=(8090, b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (2 << 20) + b"\r\nContent-Length: 2\r\n\r\nok")).start()
serve(8091, b"SSH-2.0-not-http\r\n\r\n")
`
	if _, err := e.Client.WriteFile(ctx, sb.ID, "/home/user/hostile.py", strings.NewReader(hostile), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, e, sb.ID, "cd /home/user && setsid nohup python3 hostile.py >hostile.out 2>&1 &")
	for _, port := range []int{8090, 8091} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, body, _ := do(t, &http.Client{}, "GET", e.Client.PortURL(sb.ID, port), e.APIKey, nil, nil)
			if status == 502 && errCode(body) == "bad_gateway" {
				break
			}
			if errCode(body) != "port_not_open" || time.Now().After(deadline) {
				t.Fatalf("hostile server on %d: %d %s; want 502 bad_gateway", port, status, truncate(body))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// An informational answer first: it is not relayed, and the final answer keeps the sandboxing.
	status, body, resp := do(t, &http.Client{}, "GET", e.Client.PortURL(sb.ID, 8092), e.APIKey, nil, nil)
	if status != 200 || body != "ok" || !strings.HasPrefix(resp.Header.Get("Content-Security-Policy"), "sandbox") ||
		resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("Service-Worker-Allowed") != "" {
		t.Errorf("after a 103: %d %q %v; want 200 with the sandbox CSP and none of the 103's headers", status, body, resp.Header)
	}
	// Nothing else was harmed: the API and the other server answer.
	if status, body, _ := do(t, &http.Client{}, "GET", e.Client.PortURL(sb.ID, 8080), e.APIKey, nil, nil); status != 200 {
		t.Errorf("the well-behaved server after the hostile ones: %d %s", status, truncate(body))
	}

	// A revoked token ends its open tunnel (checked every 10 s); a destroyed sandbox ends the rest.
	tok, err := e.Client.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"ports"}})
	if err != nil {
		t.Fatal(err)
	}
	byToken, err := airlock.New(e.URL, airlock.WithAPIKey(tok.Token)).Tunnel(ctx, sb.ID, 7000)
	if err != nil {
		t.Fatal(err)
	}
	byKey, err := e.Client.Tunnel(ctx, sb.ID, 7000)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Client.RevokeAccessToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	_ = byToken.SetReadDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	if _, err := byToken.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the tunnel of a revoked token: read %v after %v; want it closed", err, time.Since(start))
	} else {
		t.Logf("the tunnel of a revoked token closed %v after the revoke", time.Since(start).Round(100*time.Millisecond))
	}
	if err := e.Client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_ = byKey.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := byKey.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a tunnel into a deleted sandbox: read %v; want it closed", err)
	}
}
