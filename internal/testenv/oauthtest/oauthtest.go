// Package oauthtest runs a real OpenID Connect provider on loopback for tests: zitadel/oidc's
// provider (authorization code with PKCE, device flow, refresh tokens, RFC 7009 revocation,
// userinfo) over its in-memory example storage, with a test user, and a "browser" that signs in.
//
// The provider tells clients that access tokens live for Options.AccessTokenLifetime, so refreshes
// can be tested in seconds; it counts the refreshes and revocations it serves.
package oauthtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The test user, and the clients the provider knows.
const (
	Username       = "test-user@127.0.0.1"
	Password       = "verysecure"
	WebClientID    = "airlock-web"
	DeviceClientID = "airlock-device"
	ClientSecret   = "client-secret-5be1f0"
)

// Options configures a Provider.
type Options struct {
	// RedirectURI is the callback the web client may redirect to. Required for the code flow.
	RedirectURI string
	// AccessTokenLifetime is the lifetime the provider announces for access tokens. Zero: 5 minutes.
	AccessTokenLifetime time.Duration
}

// Provider is a running OpenID Connect provider.
type Provider struct {
	// Issuer is the provider's URL (http on 127.0.0.1); discovery is under it.
	Issuer string

	refreshes   atomic.Int64
	revocations atomic.Int64
}

// Start runs a provider until the test ends.
func Start(t testing.TB, o Options) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{Issuer: "http://" + ln.Addr().String()}
	clients := map[string]*storage.Client{
		WebClientID:    storage.WebClient(WebClientID, ClientSecret, o.RedirectURI),
		DeviceClientID: storage.DeviceClient(DeviceClientID, ClientSecret),
	}
	lifetime := o.AccessTokenLifetime
	if lifetime <= 0 {
		lifetime = 5 * time.Minute
	}
	users := storage.NewUserStore(p.Issuer)
	st := &store{Storage: storage.NewStorageWithClients(users, clients), users: users, p: p, lifetime: lifetime}
	router := exampleop.SetupServer(p.Issuer, st, nil, false)
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// Refreshes reports how many refresh grants the provider has served.
func (p *Provider) Refreshes() int { return int(p.refreshes.Load()) }

// Revocations reports how many revocation requests the provider has served.
func (p *Provider) Revocations() int { return int(p.revocations.Load()) }

// UserInfo calls the userinfo endpoint with an access token and reports the HTTP status: 200 for a
// token the provider issued and still honours.
func (p *Provider) UserInfo(ctx context.Context, accessToken string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.Issuer+"/userinfo", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+accessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// SignIn plays the user's browser for the authorization code flow: it opens authURL, signs in as the
// test user, and follows the redirects to the client's callback. It returns the callback's status
// and body.
func (p *Provider) SignIn(ctx context.Context, authURL string) (int, string, error) {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := get(ctx, c, authURL)
	if err != nil {
		return 0, "", err
	}
	id := resp.Request.URL.Query().Get("authRequestID")
	resp.Body.Close()
	if id == "" {
		return 0, "", fmt.Errorf("the authorization URL led to %s, not the login page", resp.Request.URL)
	}
	form := url.Values{"id": {id}, "username": {Username}, "password": {Password}}
	resp, err = post(ctx, c, p.Issuer+"/login/username", form)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body), nil
}

// EnterDeviceCode plays the user for the device flow: signs in as the test user on the verification
// page, enters userCode and allows (or denies) the device.
func (p *Provider) EnterDeviceCode(ctx context.Context, userCode string, allow bool) error {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	form := url.Values{"user_code": {userCode}, "username": {Username}, "password": {Password}}
	resp, err := post(ctx, c, p.Issuer+"/device/login", form)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Request.URL.Path != "/device/login" {
		return fmt.Errorf("device login went to %s: %s", resp.Request.URL, body)
	}
	action := "denied"
	if allow {
		action = "allowed"
	}
	resp, err = post(ctx, c, p.Issuer+"/device/confirm", url.Values{"action": {action}})
	if err != nil {
		return err
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), action) {
		return fmt.Errorf("device confirm: HTTP %d: %s", resp.StatusCode, body)
	}
	return nil
}

func get(ctx context.Context, c *http.Client, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}

func post(ctx context.Context, c *http.Client, u string, form url.Values) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.Do(req)
}

// store adapts the example storage: short announced token lifetimes, counters, refresh tokens for
// the device client, and device-flow tokens bound to their client (which the example leaves out).
type store struct {
	*storage.Storage
	users    storage.UserStore
	p        *Provider
	lifetime time.Duration
}

func (s *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil || id != DeviceClientID {
		return c, err
	}
	return refreshingClient{c}, nil
}

func (s *store) CreateAccessToken(ctx context.Context, req op.TokenRequest) (string, time.Time, error) {
	id, _, err := s.Storage.CreateAccessToken(ctx, asAuthRequest(req))
	return id, time.Now().Add(s.lifetime), err
}

func (s *store) CreateAccessAndRefreshTokens(ctx context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	if current != "" {
		s.p.refreshes.Add(1)
	}
	a, r, _, err := s.Storage.CreateAccessAndRefreshTokens(ctx, asAuthRequest(req), current)
	return a, r, time.Now().Add(s.lifetime), err
}

// CompleteDeviceAuthorization names the user by ID, as the rest of the storage expects (the example
// passes the username).
func (s *store) CompleteDeviceAuthorization(ctx context.Context, userCode, username string) error {
	u := s.users.GetUserByUsername(username)
	if u == nil {
		return fmt.Errorf("no user %q", username)
	}
	return s.Storage.CompleteDeviceAuthorization(ctx, userCode, u.ID)
}

func (s *store) RevokeToken(ctx context.Context, token, userID, clientID string) *oidc.Error {
	s.p.revocations.Add(1)
	return s.Storage.RevokeToken(ctx, token, userID, clientID)
}

// asAuthRequest turns a device flow's request into the auth request the example storage knows how
// to bind to its client.
func asAuthRequest(req op.TokenRequest) op.TokenRequest {
	if d, ok := req.(*op.DeviceAuthorizationState); ok {
		return &storage.AuthRequest{ApplicationID: d.ClientID, UserID: d.Subject, Scopes: d.Scopes}
	}
	return req
}

// refreshingClient lets the device client use refresh tokens.
type refreshingClient struct{ op.Client }

func (c refreshingClient) GrantTypes() []oidc.GrantType {
	return append(c.Client.GrantTypes(), oidc.GrantTypeRefreshToken)
}
