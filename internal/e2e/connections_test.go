package e2e

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv/oauthtest"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestOAuthConnection: a connection signs in against a real OpenID Connect provider (authorization
// code flow with PKCE, through Airlock's callback), the gateway injects its access token into a
// sandbox's requests, refreshes happen before expiry without the sandbox noticing, and revoking the
// connection stops injection.
func TestOAuthConnection(t *testing.T) {
	n := startNetEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	idp := oauthtest.Start(t, oauthtest.Options{RedirectURI: n.URL + "/v1/oauth/callback", AccessTokenLifetime: 3 * time.Second})
	si, err := n.Client.CreateConnection(ctx, airlock.CreateConnectionRequest{Name: "idp", Flow: "authorization_code",
		Provider: airlock.OAuthProvider{Issuer: idp.Issuer, ClientID: oauthtest.WebClientID, ClientSecret: oauthtest.ClientSecret,
			Scopes: []string{"openid", "offline_access"}}})
	if err != nil {
		t.Fatal(err)
	}
	if si.Connection.Status != "pending" || !strings.HasPrefix(si.Authorization.URL, idp.Issuer) {
		t.Fatalf("created %+v", si)
	}
	status, body, err := idp.SignIn(ctx, si.Authorization.URL)
	if err != nil || status != http.StatusOK || !strings.Contains(body, "Connected") {
		t.Fatalf("sign in through Airlock's callback: %d %q %v", status, body, err)
	}
	c, err := n.Client.GetConnection(ctx, "idp")
	if err != nil || c.Status != "active" || !c.CanRefresh {
		t.Fatalf("after sign-in: %+v %v", c, err)
	}

	sb := create(t, n.Env, airlock.CreateSandboxRequest{Network: &airlock.NetworkPolicy{
		Rules:       []airlock.NetworkRule{{Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"443"}}},
		Credentials: []airlock.CredentialBinding{{Name: "idp-bearer", Host: "api.example.test", Connection: "idp"}},
	}})
	// Eight seconds of requests with no credentials of its own, across two refreshes.
	refreshes := idp.Refreshes()
	res := run(t, n.Env, sb.ID, airlock.ExecRequest{TimeoutSeconds: 60, Cmd: []string{"python3", "-c", `
import time, urllib.request
end = time.time() + 8
while time.time() < end:
    print(urllib.request.urlopen("https://api.example.test/v1/me", timeout=5).read().decode().strip(), flush=True)
    time.sleep(0.4)`}})
	if res.ExitCode != 0 {
		t.Fatalf("requests across refreshes: exit %d: %s", res.ExitCode, res.Stderr)
	}
	tokens := map[string]bool{}
	var last string
	for _, m := range regexp.MustCompile(`auth="Bearer ([^"]+)"`).FindAllStringSubmatch(res.Stdout, -1) {
		tokens[m[1]] = true
		last = m[1]
	}
	if len(tokens) < 2 || idp.Refreshes()-refreshes < 2 {
		t.Fatalf("upstream saw %d distinct tokens with %d refreshes in 8 s of 3 s tokens; want ≥2 of each (output %q)", len(tokens), idp.Refreshes()-refreshes, res.Stdout)
	}
	// The token injected is one the provider issued and honours. (A token replaced by a refresh is
	// dropped by the provider, so check one that no refresh followed.)
	honoured := false
	for range 5 {
		before := idp.Refreshes()
		res := run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import urllib.request
print(urllib.request.urlopen("https://api.example.test/v1/me", timeout=5).read().decode())`}})
		m := regexp.MustCompile(`auth="Bearer ([^"]+)"`).FindStringSubmatch(res.Stdout)
		if m == nil {
			t.Fatalf("no token injected: %q %q", res.Stdout, res.Stderr)
		}
		code, err := idp.UserInfo(ctx, m[1])
		if err != nil {
			t.Fatal(err)
		}
		if idp.Refreshes() != before {
			continue // refreshed meanwhile; try again
		}
		honoured = code == http.StatusOK
		last = m[1]
		break
	}
	if !honoured {
		t.Errorf("the provider does not honour the injected token")
	}
	t.Logf("%d requests, %d distinct tokens, %d refreshes", strings.Count(res.Stdout, upstreamMarker), len(tokens), idp.Refreshes()-refreshes)

	// Revoke: the provider hears of it, and the next request fails at the gateway.
	if c, err = n.Client.RevokeConnection(ctx, "idp"); err != nil || c.Status != "revoked" {
		t.Fatalf("revoke: %+v %v", c, err)
	}
	if idp.Revocations() == 0 {
		t.Errorf("the provider saw no revocation")
	}
	res = run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("https://api.example.test/v1/me", timeout=5).read().decode())
except urllib.error.HTTPError as e:
    print("HTTP", e.code)`}})
	if strings.Contains(res.Stdout, "Bearer") || !strings.Contains(res.Stdout, "HTTP 502") {
		t.Errorf("after revoking: %q; want a 502 from the gateway and no token upstream", res.Stdout)
	}
	// Nothing of the connection in the data directory in the clear.
	assertNotInDir(t, n.DataDir, last, oauthtest.ClientSecret)
}
