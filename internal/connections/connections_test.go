package connections_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/connections"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/secrets"
	"github.com/airlockrun/airlock/internal/testenv/oauthtest"
)

const tenant = "tn_test"

// env is a Manager whose callback URL is served by a test server, against a real provider.
type env struct {
	m        *connections.Manager
	p        *oauthtest.Provider
	dir      string
	callback string
	newM     func() *connections.Manager
}

func newEnv(t *testing.T, lifetime time.Duration) *env {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{dir: t.TempDir(), callback: "http://" + ln.Addr().String() + "/v1/oauth/callback"}
	e.p = oauthtest.Start(t, oauthtest.Options{RedirectURI: e.callback, AccessTokenLifetime: lifetime})
	keyring, err := local.New(filepath.Join(e.dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	e.newM = func() *connections.Manager {
		st, err := secrets.NewFileStorage(filepath.Join(e.dir, "connections"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := connections.New(connections.Config{Keys: keyring, Storage: st, RedirectURL: e.callback, Guards: loopbackOpen(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	e.m = e.newM()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		c, err := e.m.Callback(r.Context(), q.Get("state"), q.Get("code"), q.Get("error"), q.Get("error_description"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte("connected " + c.Name))
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

// loopbackOpen returns guards whose operator opened 127.0.0.1, where the test provider listens.
func loopbackOpen(t *testing.T) *policy.Guards {
	t.Helper()
	g, err := policy.NewGuards([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func (e *env) provider(clientID string) connections.Provider {
	return connections.Provider{Issuer: e.p.Issuer, ClientID: clientID, ClientSecret: oauthtest.ClientSecret, Scopes: []string{"openid", "offline_access"}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func waitFor(t *testing.T, what string, d time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAuthorizationCodeFlowRefreshAndRevoke(t *testing.T) {
	e := newEnv(t, 3*time.Second)
	ctx := ctxT(t)
	c, auth, err := e.m.Create(ctx, tenant, "github", connections.FlowAuthorizationCode, e.provider(oauthtest.WebClientID))
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != connections.StatusPending || !c.HasClientSecret || c.Provider.ClientSecret != "" {
		t.Fatalf("created %+v; want pending, the secret stored and not reported", c)
	}
	if !strings.Contains(auth.URL, "code_challenge_method=S256") || !strings.Contains(auth.URL, "code_challenge=") {
		t.Fatalf("authorization URL %q has no PKCE challenge", auth.URL)
	}
	if _, err := e.m.Token(ctx, tenant, "github"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("token of a pending connection: %v; want ErrFailedPrecondition", err)
	}
	status, body, err := e.p.SignIn(ctx, auth.URL)
	if err != nil || status != http.StatusOK || body != "connected github" {
		t.Fatalf("sign in: %d %q %v", status, body, err)
	}
	// The state is single-use.
	if _, err := e.m.Callback(ctx, strings.Split(strings.Split(auth.URL, "state=")[1], "&")[0], "x", "", ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("replayed callback: %v; want ErrInvalidArgument", err)
	}
	first, err := e.m.Token(ctx, tenant, "github")
	if err != nil {
		t.Fatal(err)
	}
	if code, err := e.p.UserInfo(ctx, string(first)); err != nil || code != http.StatusOK {
		t.Fatalf("userinfo with the connection's token: %d %v", code, err)
	}
	// Refresh before expiry, in the background: after two lifetimes the token changed at least twice,
	// and every token handed out meanwhile was valid.
	seen := map[string]bool{string(first): true}
	deadline := time.Now().Add(7 * time.Second)
	for time.Now().Before(deadline) {
		tok, err := e.m.Token(ctx, tenant, "github")
		if err != nil {
			t.Fatalf("token during refreshes: %v", err)
		}
		seen[string(tok)] = true
		time.Sleep(200 * time.Millisecond)
	}
	c, err = e.m.Get(ctx, tenant, "github")
	if err != nil {
		t.Fatal(err)
	}
	if e.p.Refreshes() < 2 || len(seen) < 3 || c.Refreshes < 2 || c.TokenExpiresAt == nil || time.Until(*c.TokenExpiresAt) <= 0 {
		t.Fatalf("after 7 s with 3 s tokens: provider refreshes %d, distinct tokens %d, connection %+v; want ≥2 refreshes", e.p.Refreshes(), len(seen), c)
	}
	t.Logf("refreshes %d, distinct tokens %d", e.p.Refreshes(), len(seen))
	// A restart keeps the connection and its refresh schedule.
	_ = e.m.Close()
	e.m = e.newM()
	if err := e.m.Start(ctx, []string{tenant}); err != nil {
		t.Fatal(err)
	}
	before := e.p.Refreshes()
	waitFor(t, "a refresh after the restart", 10*time.Second, func() bool { return e.p.Refreshes() > before })
	tok, err := e.m.Token(ctx, tenant, "github")
	if err != nil {
		t.Fatal(err)
	}
	// Revoke: the provider is told, and no token is handed out any more.
	c, err = e.m.Revoke(ctx, tenant, "github")
	if err != nil || c.Status != connections.StatusRevoked || c.Error != "" || c.CanRefresh {
		t.Fatalf("revoke: %+v %v", c, err)
	}
	if e.p.Revocations() == 0 {
		t.Errorf("the provider saw no revocation")
	}
	if code, _ := e.p.UserInfo(ctx, string(tok)); code == http.StatusOK {
		t.Errorf("the provider still honours the revoked access token")
	}
	if _, err := e.m.Token(ctx, tenant, "github"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("token after revoke: %v; want ErrFailedPrecondition", err)
	}
	refreshes := e.p.Refreshes()
	time.Sleep(4 * time.Second)
	if e.p.Refreshes() != refreshes {
		t.Errorf("a revoked connection kept refreshing")
	}
	// Nothing secret on disk in the clear.
	assertNotOnDisk(t, e.dir, tok, []byte(oauthtest.ClientSecret))
	// Delete removes it.
	if err := e.m.Delete(ctx, tenant, "github"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Get(ctx, tenant, "github"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get after delete: %v; want ErrNotFound", err)
	}
}

func TestDeviceFlow(t *testing.T) {
	e := newEnv(t, time.Minute)
	ctx := ctxT(t)
	_, auth, err := e.m.Create(ctx, tenant, "dev", connections.FlowDevice, e.provider(oauthtest.DeviceClientID))
	if err != nil {
		t.Fatal(err)
	}
	if auth.UserCode == "" || auth.VerificationURI == "" || auth.URL != "" {
		t.Fatalf("device authorization %+v; want a user code and a verification URI", auth)
	}
	if err := e.p.EnterDeviceCode(ctx, auth.UserCode, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the device flow to complete", 30*time.Second, func() bool {
		c, err := e.m.Get(ctx, tenant, "dev")
		return err == nil && c.Status == connections.StatusActive
	})
	tok, err := e.m.Token(ctx, tenant, "dev")
	if err != nil {
		t.Fatal(err)
	}
	if code, err := e.p.UserInfo(ctx, string(tok)); err != nil || code != http.StatusOK {
		t.Fatalf("userinfo with the device token: %d %v", code, err)
	}
	c, _ := e.m.Get(ctx, tenant, "dev")
	if !c.CanRefresh {
		t.Errorf("device connection %+v holds no refresh token", c)
	}

	// A denied device sign-in fails the connection with the provider's reason.
	_, auth, err = e.m.Create(ctx, tenant, "denied", connections.FlowDevice, e.provider(oauthtest.DeviceClientID))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.EnterDeviceCode(ctx, auth.UserCode, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the denied device flow to fail", 30*time.Second, func() bool {
		c, err := e.m.Get(ctx, tenant, "denied")
		return err == nil && c.Status == connections.StatusFailed
	})
	c, _ = e.m.Get(ctx, tenant, "denied")
	if !strings.Contains(c.Error, "access_denied") {
		t.Errorf("denied connection error %q; want access_denied", c.Error)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, time.Minute)
	ctx := ctxT(t)
	good := e.provider(oauthtest.WebClientID)
	for _, tc := range []struct {
		name, conn string
		flow       connections.Flow
		p          func(p *connections.Provider)
		want       error
	}{
		{"bad name", "a/b", connections.FlowAuthorizationCode, nil, errdefs.ErrInvalidArgument},
		{"bad flow", "x", "implicit", nil, errdefs.ErrInvalidArgument},
		{"no client", "x", connections.FlowAuthorizationCode, func(p *connections.Provider) { p.ClientID = "" }, errdefs.ErrInvalidArgument},
		{"http to a remote host", "x", connections.FlowAuthorizationCode, func(p *connections.Provider) { p.Issuer = "http://192.0.2.1/" }, errdefs.ErrInvalidArgument},
		{"file URL", "x", connections.FlowAuthorizationCode, func(p *connections.Provider) { p.Issuer = "file:///etc/passwd" }, errdefs.ErrInvalidArgument},
		{"no endpoints", "x", connections.FlowAuthorizationCode, func(p *connections.Provider) { p.Issuer = "" }, errdefs.ErrInvalidArgument},
		{"scope with space", "x", connections.FlowAuthorizationCode, func(p *connections.Provider) { p.Scopes = []string{"a b"} }, errdefs.ErrInvalidArgument},
		{"secret with newline", "x", connections.FlowAuthorizationCode, func(p *connections.Provider) { p.ClientSecret = "a\nb" }, errdefs.ErrInvalidArgument},
		{"issuer not serving discovery", "x", connections.FlowAuthorizationCode, func(p *connections.Provider) { p.Issuer = "http://127.0.0.1:1" }, errdefs.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			if tc.p != nil {
				tc.p(&p)
			}
			_, _, err := e.m.Create(ctx, tenant, tc.conn, tc.flow, p)
			if !errors.Is(err, tc.want) {
				t.Fatalf("create: %v; want %v", err, tc.want)
			}
		})
	}
	if cs, err := e.m.List(ctx, tenant); err != nil || len(cs) != 0 {
		t.Errorf("after failed creates: %v %v; want nothing stored", cs, err)
	}
	if _, _, err := e.m.Create(ctx, tenant, "dup", connections.FlowAuthorizationCode, good); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.m.Create(ctx, tenant, "dup", connections.FlowAuthorizationCode, good); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second create: %v; want ErrAlreadyExists", err)
	}
	// A forged or stale state is refused and changes nothing; a provider error fails the connection.
	if _, err := e.m.Callback(ctx, "forged", "code", "", ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("forged state: %v", err)
	}
	_, auth, err := e.m.Authorize(ctx, tenant, "dup")
	if err != nil {
		t.Fatal(err)
	}
	state := strings.Split(strings.Split(auth.URL, "state=")[1], "&")[0]
	c, err := e.m.Callback(ctx, state, "", "access_denied", "the user said no")
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || c.Status != connections.StatusFailed || !strings.Contains(c.Error, "the user said no") {
		t.Errorf("callback with an error: %+v %v", c, err)
	}
	// Another tenant sees nothing.
	if _, err := e.m.Get(ctx, "tn_other", "dup"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("other tenant: %v; want ErrNotFound", err)
	}
}

// assertNotOnDisk fails if any file under dir contains one of the needles.
func assertNotOnDisk(t *testing.T, dir string, needles ...[]byte) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, n := range needles {
			if bytes.Contains(b, n) {
				t.Errorf("%s holds a secret in the clear", p)
			}
		}
		return nil
	})
}

// TestProviderGuards: a provider's endpoints in a guarded range the operator has not opened are
// refused by address at create, with a 400 naming the range (TestGuardedClient checks the addresses
// dialed). Positive control: the same provider with the operator's loopback opened works (the other
// tests).
func TestProviderGuards(t *testing.T) {
	dir := t.TempDir()
	keyring, err := local.New(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := secrets.NewFileStorage(filepath.Join(dir, "connections"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := connections.New(connections.Config{Keys: keyring, Storage: st, RedirectURL: "http://127.0.0.1:1/v1/oauth/callback"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()
	p := oauthtest.Start(t, oauthtest.Options{RedirectURI: "http://127.0.0.1:1/v1/oauth/callback"})
	for _, tc := range []struct{ issuer, want string }{
		{p.Issuer, "guard:loopback"},
		{"https://169.254.169.254/", "guard:metadata"},
		{"https://10.1.2.3/", "guard:private"},
		{"https://[::ffff:127.0.0.1]/", "guard:loopback"},
	} {
		_, _, err := m.Create(ctx, tenant, "x", connections.FlowAuthorizationCode,
			connections.Provider{Issuer: tc.issuer, ClientID: "c", ClientSecret: "s"})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("issuer %s: %v; want invalid argument naming %s", tc.issuer, err, tc.want)
		}
	}
	if cs, err := m.List(ctx, tenant); err != nil || len(cs) != 0 {
		t.Errorf("after refused creates: %v %v; want nothing stored", cs, err)
	}
}
