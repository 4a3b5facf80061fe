package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	apidoc "github.com/airlockrun/airlock/api"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/internal/testenv/oauthtest"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// wantCode fails t unless err is an API error with the given HTTP status.
func wantCode(t *testing.T, what string, err error, status int) {
	t.Helper()
	var ae *airlock.APIError
	if !errors.As(err, &ae) || ae.Status != status {
		t.Errorf("%s: got %v; want HTTP %d", what, err, status)
	}
}

// TestScopesAndTokens checks API key scopes, access tokens for one sandbox or session, tenant
// disabling and key revocation, through the API as a user would.
func TestScopesAndTokens(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 3*time.Minute)
	op := e.Client
	as := func(key string) *airlock.Client { return airlock.New(e.URL, airlock.WithAPIKey(key)) }

	// A read key reads but changes nothing.
	rk, err := op.CreateAPIKey(ctx, "reader", airlock.ScopeRead)
	if err != nil || rk.Scope != "read" || !strings.HasPrefix(rk.Key, "ak_") {
		t.Fatalf("create read key = %+v, %v", rk, err)
	}
	reader := as(rk.Key)
	if _, err := reader.ListSandboxes(ctx, airlock.ListOptions{}); err != nil {
		t.Errorf("read key lists sandboxes: %v", err)
	}
	_, err = reader.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	wantCode(t, "read key creates a sandbox", err, http.StatusForbidden)
	_, err = reader.CreateAPIKey(ctx, "escalate", airlock.ScopeAdmin)
	wantCode(t, "read key makes a key", err, http.StatusForbidden)
	wk, err := op.CreateAPIKey(ctx, "writer", airlock.ScopeWrite)
	if err != nil {
		t.Fatal(err)
	}
	_, err = as(wk.Key).ListAPIKeys(ctx)
	wantCode(t, "write key lists keys", err, http.StatusForbidden)
	_, err = op.CreateAPIKey(ctx, "bad", "root")
	wantCode(t, "unknown scope", err, http.StatusBadRequest)

	// An access token reaches its own sandbox's routes, as its scopes allow, and nothing else.
	sb1 := create(t, e, airlock.CreateSandboxRequest{})
	sb2 := create(t, e, airlock.CreateSandboxRequest{})
	tok, err := as(wk.Key).CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb1.ID, Scopes: []string{"exec"}, Name: "agent"})
	if err != nil || !strings.HasPrefix(tok.Token, "at_") || tok.SandboxID != sb1.ID {
		t.Fatalf("create token = %+v, %v", tok, err)
	}
	agent := as(tok.Token)
	if res, err := agent.Exec(ctx, sb1.ID, airlock.ExecRequest{Cmd: []string{"echo", "hi"}}); err != nil || res.Stdout != "hi\n" {
		t.Errorf("token execs in its sandbox = %+v, %v", res, err)
	}
	_, err = agent.Exec(ctx, sb2.ID, airlock.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, "token execs in another sandbox", err, http.StatusNotFound)
	_, err = agent.ReadFile(ctx, sb1.ID, "/etc/hostname")
	wantCode(t, "exec token reads a file", err, http.StatusForbidden)
	_, err = agent.GetSandbox(ctx, sb1.ID)
	wantCode(t, "token gets the sandbox", err, http.StatusForbidden)
	_, err = agent.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb1.ID, Scopes: []string{"files"}})
	wantCode(t, "token makes a token", err, http.StatusForbidden)
	_, err = agent.ListSandboxes(ctx, airlock.ListOptions{})
	wantCode(t, "token lists sandboxes", err, http.StatusForbidden)
	_, err = op.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb1.ID, Scopes: []string{"root"}})
	wantCode(t, "unknown token scope", err, http.StatusBadRequest)
	_, err = op.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb1.ID, Scopes: []string{"exec"}, TTLSeconds: 8 * 86400})
	wantCode(t, "token ttl above 7 days", err, http.StatusBadRequest)

	// A session token works on the session's routes.
	se, err := op.CreateSession(ctx, airlock.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stok, err := op.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SessionID: se.ID, Scopes: []string{"files"}, TTLSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	sagent := airlock.New(e.URL, airlock.WithAPIKey(stok.Token))
	if _, err := sagent.WriteFile(ctx, se.ID, "/home/user/note", strings.NewReader("x"), 0o644); err != nil {
		t.Errorf("session token writes a file: %v", err)
	}
	_, err = sagent.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, "files token execs", err, http.StatusForbidden)
	time.Sleep(1100 * time.Millisecond)
	_, err = sagent.ReadFile(ctx, se.ID, "/home/user/note")
	wantCode(t, "expired token", err, http.StatusUnauthorized)

	// Revocation takes effect at once, for tokens and keys.
	if err := op.RevokeAccessToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	_, err = agent.Exec(ctx, sb1.ID, airlock.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, "revoked token", err, http.StatusUnauthorized)
	l, err := op.ListAccessTokens(ctx, sb1.ID, "")
	if err != nil || len(l.Tokens) != 1 || l.Tokens[0].RevokedAt == nil {
		t.Errorf("tokens of %s = %+v, %v; want the one revoked", sb1.ID, l, err)
	}
	if err := op.RevokeAPIKey(ctx, rk.ID); err != nil {
		t.Fatal(err)
	}
	_, err = reader.ListSandboxes(ctx, airlock.ListOptions{})
	wantCode(t, "revoked key", err, http.StatusUnauthorized)

	// Tenants: only the operator manages them; a disabled tenant's keys are refused until enabled.
	ct, err := op.CreateTenant(ctx, "beta")
	if err != nil || ct.APIKey.Scope != "admin" || ct.Tenant.Operator {
		t.Fatalf("create tenant = %+v, %v", ct, err)
	}
	beta := as(ct.APIKey.Key)
	_, err = beta.ListTenants(ctx)
	wantCode(t, "non-operator lists tenants", err, http.StatusNotFound)
	if _, err := beta.ListSandboxes(ctx, airlock.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	betaSb, err := beta.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	yes, no := true, false
	if _, err := op.UpdateTenant(ctx, ct.Tenant.ID, airlock.UpdateTenantRequest{Disabled: &yes}); err != nil {
		t.Fatal(err)
	}
	if got, err := op.GetSandbox(ctx, betaSb.ID); err == nil {
		t.Errorf("the operator sees another tenant's sandbox: %+v", got)
	}
	_, err = beta.ListSandboxes(ctx, airlock.ListOptions{})
	wantCode(t, "disabled tenant", err, http.StatusForbidden)
	if _, err := op.UpdateTenant(ctx, ct.Tenant.ID, airlock.UpdateTenantRequest{Disabled: &no}); err != nil {
		t.Fatal(err)
	}
	if got, err := beta.GetSandbox(ctx, betaSb.ID); err != nil || got.State == airlock.StateRunning {
		t.Errorf("a disabled tenant's sandbox = %+v, %v; want it stopped", got, err)
	}
	tl, err := op.ListTenants(ctx)
	if err != nil || len(tl.Tenants) != 2 || !tl.Tenants[0].Operator {
		t.Errorf("tenants = %+v, %v", tl, err)
	}
	me := tl.Tenants[0].ID
	_, err = op.UpdateTenant(ctx, me, airlock.UpdateTenantRequest{Disabled: &yes})
	wantCode(t, "disable the operator tenant", err, http.StatusConflict)

	// No key or token is kept in plain text: not in the database, not anywhere in the data directory
	// (the operator's first key, which airlock up saves for the CLI, is outside it).
	if strings.HasPrefix(e.KeyFile, e.DataDir+"/") {
		t.Errorf("the first key is saved in the data directory: %s", e.KeyFile)
	}
	assertNotInDirExcept(t, e.DataDir, "", rk.Key, wk.Key, tok.Token, stok.Token, ct.APIKey.Key, e.APIKey)
}

// assertNotInDirExcept is assertNotInDir that skips one file.
func assertNotInDirExcept(t *testing.T, dir, except string, needles ...string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || p == except {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for i, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				t.Errorf("%s holds credential %d in plain text", p, i)
			}
		}
		return nil
	})
}

// TestCrossTenantEveryRoute walks every route of the OpenAPI document with another tenant's admin key
// and the first tenant's objects: every route that names one of them answers 404, every other route
// answers without a trace of them, and the first tenant loses nothing.
func TestCrossTenantEveryRoute(t *testing.T) {
	// The OAuth provider listens on loopback, which the operator opens.
	e := testenv.Start(t, testenv.Options{EgressAllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	ctx := ctxT(t, 5*time.Minute)
	a := e.Client

	// Tenant A's objects: a sandbox with a process, a session with a snapshot, a secret, a connection,
	// an API key and an access token.
	sb := create(t, e, airlock.CreateSandboxRequest{Metadata: map[string]string{"owner": "tenant-a-marker"}})
	st, err := a.ExecStream(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"sleep", "600"}}, airlock.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := st.ProcessID()
	se, err := a.CreateSession(ctx, airlock.CreateSessionRequest{Metadata: map[string]string{"owner": "tenant-a-marker"}})
	if err != nil {
		t.Fatal(err)
	}
	sn, err := a.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{Name: "tenant-a-snap"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitSnapshot(ctx, se.ID, sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateSecret(ctx, "tenant-a-secret", "value-of-a"); err != nil {
		t.Fatal(err)
	}
	idp := oauthtest.Start(t, oauthtest.Options{RedirectURI: e.URL + "/v1/oauth/callback"})
	if _, err := a.CreateConnection(ctx, airlock.CreateConnectionRequest{Name: "tenant-a-conn", Flow: "authorization_code",
		Provider: airlock.OAuthProvider{Issuer: idp.Issuer, ClientID: oauthtest.WebClientID, ClientSecret: oauthtest.ClientSecret}}); err != nil {
		t.Fatal(err)
	}
	ak, err := a.CreateAPIKey(ctx, "tenant-a-key", airlock.ScopeWrite)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := a.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"exec", "files"}})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := a.ListTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tenantA := tl.Tenants[0].ID

	ct, err := a.CreateTenant(ctx, "intruder")
	if err != nil {
		t.Fatal(err)
	}
	bKey := ct.APIKey.Key
	// What must never appear in an answer to B, unless B's request itself named it.
	traces := []string{sb.ID, se.ID, sn.ID, "tenant-a-marker", "tenant-a-snap", "tenant-a-secret", "tenant-a-conn", ak.ID, tok.ID, tenantA, pid}

	path := "/home/user/f.txt"
	// Per route: the path's parameters are A's objects; query and body make a valid request, so that
	// only ownership can refuse it.
	reqs := map[string]struct{ query, body string }{
		"GET /v1/tenants":                                       {},
		"POST /v1/tenants":                                      {body: `{"name":"x"}`},
		"GET /v1/tenants/{id}":                                  {},
		"PATCH /v1/tenants/{id}":                                {body: `{"disabled":true,"quotas":{"sessions":1}}`},
		"GET /v1/nodes":                                         {},
		"GET /v1/templates":                                     {},
		"GET /v1/templates/{name}":                              {},
		"PUT /v1/templates/{name}":                              {body: "not an image"},
		"DELETE /v1/templates/{name}":                           {},
		"POST /v1/templates/{name}/pull":                        {body: `{"image":"127.0.0.1:1/x:y","insecure":true}`},
		"POST /v1/templates/{name}/build":                       {body: "not a tar"},
		"GET /v1/templates/{name}/export":                       {},
		"PUT /v1/templates/{name}/runtimes":                     {body: `{"runtimes":["vm"]}`},
		"DELETE /v1/nodes/{id}":                                 {},
		"PUT /v1/nodes/{id}/bound":                              {body: `{"max_sandboxes":1}`},
		"POST /v1/nodes/{id}/drain":                             {},
		"POST /v1/nodes/{id}/undrain":                           {},
		"GET /v1/nodes/join-tokens":                             {},
		"POST /v1/nodes/join-tokens":                            {body: `{"ttl_seconds":60}`},
		"DELETE /v1/nodes/join-tokens/{id}":                     {},
		"GET /v1/usage":                                         {},
		"GET /v1/audit":                                         {},
		"GET /v1/key":                                           {},
		"POST /v1/key/rotate":                                   {},
		"POST /v1/key/revoke":                                   {body: `{"confirm":"` + tenantA + `"}`},
		"GET /v1/api-keys":                                      {},
		"POST /v1/api-keys":                                     {body: `{"name":"b","scope":"read"}`},
		"DELETE /v1/api-keys/{id}":                              {},
		"GET /v1/tokens":                                        {query: "sandbox_id=" + sb.ID},
		"POST /v1/tokens":                                       {body: `{"sandbox_id":"` + sb.ID + `","scopes":["exec"]}`},
		"DELETE /v1/tokens/{id}":                                {},
		"POST /v1/secrets":                                      {body: `{"name":"b-secret","value":"v"}`},
		"GET /v1/secrets":                                       {},
		"GET /v1/secrets/{name}":                                {},
		"PUT /v1/secrets/{name}":                                {body: `{"value":"overwritten"}`},
		"DELETE /v1/secrets/{name}":                             {},
		"POST /v1/connections":                                  {body: `{"name":"b-conn","flow":"authorization_code","provider":{"issuer":"` + idp.Issuer + `","client_id":"` + oauthtest.WebClientID + `"}}`},
		"GET /v1/connections":                                   {},
		"GET /v1/connections/{name}":                            {},
		"DELETE /v1/connections/{name}":                         {},
		"POST /v1/connections/{name}/authorize":                 {},
		"POST /v1/connections/{name}/revoke":                    {},
		"POST /v1/sessions":                                     {body: `{"template":"no-such-template"}`},
		"GET /v1/sessions":                                      {query: "metadata.owner=tenant-a-marker"},
		"GET /v1/sessions/{id}":                                 {},
		"DELETE /v1/sessions/{id}":                              {},
		"POST /v1/sessions/{id}/pause":                          {},
		"POST /v1/sessions/{id}/resume":                         {},
		"POST /v1/sessions/{id}/timeout":                        {body: `{"timeout_seconds":60}`},
		"POST /v1/sessions/{id}/fork":                           {body: `{"count":1}`},
		"POST /v1/sessions/{id}/snapshots":                      {body: `{"name":"b"}`},
		"GET /v1/sessions/{id}/snapshots":                       {},
		"PATCH /v1/sessions/{id}/snapshots/{snapshot}":          {body: `{"pinned":false}`},
		"GET /v1/sessions/{id}/snapshots/{snapshot}":            {},
		"POST /v1/sessions/{id}/restore":                        {body: `{"snapshot_id":"` + sn.ID + `"}`},
		"GET /v1/sessions/{id}/timeline":                        {},
		"GET /v1/sessions/{id}/snapshots/{snapshot}/files":      {query: "path=" + path},
		"GET /v1/sessions/{id}/snapshots/{snapshot}/files/list": {query: "path=/home/user"},
		"GET /v1/retention":                                     {},
		"PUT /v1/retention":                                     {body: `{"keep_all_seconds":60}`},
		"GET /v1/log-retention":                                 {},
		"PUT /v1/log-retention":                                 {body: `{"seconds":86400}`},
		"GET /v1/sessions/{id}/diff":                            {query: "from=" + sn.ID + "&to=" + sn.ID},
		"POST /v1/sandboxes":                                    {body: `{"template":"no-such-template"}`},
		"GET /v1/sandboxes":                                     {query: "metadata.owner=tenant-a-marker"},
		"GET /v1/sandboxes/{id}":                                {},
		"DELETE /v1/sandboxes/{id}":                             {},
		"GET /v1/sandboxes/{id}/network":                        {},
		"PUT /v1/sandboxes/{id}/network":                        {body: `{"default":"allow"}`},
		"GET /v1/sandboxes/{id}/egress":                         {},
		"GET /v1/sandboxes/{id}/metrics":                        {query: "start=0"},
		"GET /v1/sessions/{id}/metrics":                         {query: "start=0"},
		"POST /v1/sandboxes/{id}/timeout":                       {body: `{"timeout_seconds":60}`},
		"POST /{kind}/{id}/exec":                                {body: `{"cmd":["true"]}`},
		"GET /{kind}/{id}/exec/stream":                          {},
		"GET /{kind}/{id}/processes":                            {},
		"GET /{kind}/{id}/processes/{pid}/attach":               {},
		"POST /{kind}/{id}/processes/{pid}/signal":              {body: `{"signal":"TERM"}`},
		"GET /{kind}/{id}/files":                                {query: "path=" + path},
		"PUT /{kind}/{id}/files":                                {query: "path=" + path, body: "overwritten"},
		"DELETE /{kind}/{id}/files":                             {query: "path=" + path},
		"GET /{kind}/{id}/files/stat":                           {query: "path=" + path},
		"GET /{kind}/{id}/files/list":                           {query: "path=/home/user"},
		"POST /{kind}/{id}/files/mkdir":                         {body: `{"path":"/home/user/d"}`},
		"POST /{kind}/{id}/files/move":                          {body: `{"from":"` + path + `","to":"/home/user/g"}`},
		"GET /{kind}/{id}/files/tar":                            {query: "path=/home/user"},
		"PUT /{kind}/{id}/files/tar":                            {query: "path=/home/user", body: ""},
		"GET /{kind}/{id}/ports":                                {},
		"GET /{kind}/{id}/tunnels/{port}":                       {},
		"GET /{kind}/{id}/ports/{port}/{path...}":               {},
		"POST /{kind}/{id}/ports/{port}/{path...}":              {body: "from-b"},
		"PUT /{kind}/{id}/ports/{port}/{path...}":               {body: "from-b"},
		"PATCH /{kind}/{id}/ports/{port}/{path...}":             {body: "from-b"},
		"DELETE /{kind}/{id}/ports/{port}/{path...}":            {},
		"POST /{kind}/{id}/code/run":                            {body: `{"code":"1"}`},
		"GET /{kind}/{id}/code/contexts":                        {},
		"POST /{kind}/{id}/code/contexts":                       {body: `{}`},
		"DELETE /{kind}/{id}/code/contexts/{ctx}":               {},
		"POST /{kind}/{id}/code/contexts/{ctx}/restart":         {},
	}
	public := map[string]bool{"GET /v1/health": true, "GET /v1/openapi.yaml": true, "GET /metrics": true, "GET /v1/oauth/callback": true,
		"POST /v1/nodes/join": true}

	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(apidoc.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	walked := 0
	for p, item := range doc.Paths {
		for m := range item {
			method := strings.ToUpper(m)
			switch method {
			case "GET", "POST", "PUT", "PATCH", "DELETE":
			default:
				continue
			}
			route := method + " " + p
			if public[route] {
				continue
			}
			key := route
			if rest, ok := strings.CutPrefix(p, "/v1/sandboxes/{id}"); ok && isWork(rest) {
				key = method + " /{kind}/{id}" + rest
			} else if rest, ok := strings.CutPrefix(p, "/v1/sessions/{id}"); ok && isWork(rest) {
				key = method + " /{kind}/{id}" + rest
			}
			rq, ok := reqs[key]
			if !ok {
				t.Errorf("%s: the cross-tenant walk has no request for this route; add one", route)
				continue
			}
			walked++
			url := e.URL + fill(p, sb.ID, se.ID, sn.ID, pid, tenantA, ak.ID, tok.ID)
			if rq.query != "" {
				url += "?" + rq.query
			}
			// WebSocket routes get a real handshake: the refusal must come before any upgrade.
			ws := strings.HasSuffix(p, "/stream") || strings.HasSuffix(p, "/attach") || strings.Contains(p, "/tunnels/")
			status, body := call(t, ctx, method, url, bKey, rq.body, ws)
			if strings.Contains(p, "{") {
				if status != http.StatusNotFound {
					t.Errorf("%s with another tenant's key: %d %s; want 404", route, status, truncate(body))
				}
				continue
			}
			if status >= 500 {
				t.Errorf("%s with another tenant's key: %d %s", route, status, truncate(body))
			}
			if route == "GET /v1/audit" {
				// B's own audit log records B's own attempts, with the IDs B sent: not a leak.
				continue
			}
			for _, tr := range traces {
				if strings.Contains(body, tr) && !strings.Contains(url+rq.body, tr) {
					t.Errorf("%s with another tenant's key: the answer holds %q: %s", route, tr, truncate(body))
				}
			}
		}
	}
	if walked < 60 {
		t.Errorf("walked %d routes; the document has more", walked)
	}
	// B's PUT of the log retention set B's own: A's is as it was.
	if lr, err := a.LogRetention(ctx); err != nil || lr.Seconds != 0 {
		t.Errorf("A's log retention after B's walk: %+v, %v; want A's own, unset", lr, err)
	}
	// E2B's routes that read a sandbox's (a session's) metrics, which the document does not describe:
	// A's session is not found, or left out.
	if status, body := call(t, ctx, "GET", e.URL+"/e2b/sandboxes/"+se.ID+"/metrics", bKey, "", false); status != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
		t.Errorf("E2B's GET /sandboxes/{id}/metrics with another tenant's key: %d %s; want E2B's 404", status, truncate(body))
	}
	if status, body := call(t, ctx, "GET", e.URL+"/e2b/sandboxes/metrics?sandbox_ids="+se.ID, bKey, "", false); status != http.StatusOK || strings.Contains(body, se.ID) {
		t.Errorf("E2B's GET /sandboxes/metrics with another tenant's key: %d %s; want nothing of A's", status, truncate(body))
	}

	// A lost nothing.
	if got, err := a.GetSandbox(ctx, sb.ID); err != nil || got.State != airlock.StateRunning {
		t.Errorf("A's sandbox after the walk: %+v, %v", got, err)
	}
	if res := sh(t, e, sb.ID, "test -e /home/user/g || test -e /home/user/d && echo touched; echo ok"); res.Stdout != "ok\n" {
		t.Errorf("A's sandbox files after the walk: %q", res.Stdout)
	}
	if got, err := a.GetSession(ctx, se.ID); err != nil || got.State != "running" {
		t.Errorf("A's session after the walk: %+v, %v", got, err)
	}
	if got, err := a.GetSnapshot(ctx, se.ID, sn.ID); err != nil || !got.Pinned { // named, so pinned
		t.Errorf("A's snapshot after the walk: %+v, %v", got, err)
	}
	if _, err := a.GetSecret(ctx, "tenant-a-secret"); err != nil {
		t.Errorf("A's secret after the walk: %v", err)
	}
	if c, err := a.GetConnection(ctx, "tenant-a-conn"); err != nil || c.Status != "pending" {
		t.Errorf("A's connection after the walk: %+v, %v", c, err)
	}
	keys, err := a.ListAPIKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys.APIKeys {
		if k.RevokedAt != nil {
			t.Errorf("A's key %s was revoked by the walk", k.Name)
		}
	}
	if toks, err := a.ListAccessTokens(ctx, sb.ID, ""); err != nil || len(toks.Tokens) != 1 || toks.Tokens[0].RevokedAt != nil {
		t.Errorf("A's token after the walk: %+v, %v", toks, err)
	}
	if ts, err := a.ListTenants(ctx); err != nil || ts.Tenants[0].Disabled || ts.Tenants[0].Quotas != (airlock.Quotas{}) {
		t.Errorf("A's tenant after the walk: %+v, %v", ts, err)
	}
	if ps, err := a.ListProcesses(ctx, sb.ID); err != nil || len(ps.Processes) == 0 {
		t.Errorf("A's process after the walk: %+v, %v", ps, err)
	}
	st.Close()
}

// isWork reports whether rest (the path after a sandbox's or session's ID) is a work route, served
// alike for a sandbox and a session: exec, processes, files, ports (the list, tunnels and the ingress)
// and the code interpreter.
func isWork(rest string) bool {
	for _, p := range []string{"/exec", "/processes", "/files", "/ports", "/tunnels/", "/code/"} {
		if strings.HasPrefix(rest, p) {
			return true
		}
	}
	return false
}

// fill puts tenant A's objects into a path's parameters; a port is 8080 (nothing listens there) and a
// port's path is x.
func fill(p, sandbox, session, snapshot, pid, tenant, key, token string) string {
	id := sandbox
	switch {
	case strings.HasPrefix(p, "/v1/sessions/"):
		id = session
	case strings.HasPrefix(p, "/v1/tenants/"):
		id = tenant
	case strings.HasPrefix(p, "/v1/api-keys/"):
		id = key
	case strings.HasPrefix(p, "/v1/tokens/"):
		id = token
	}
	name := "tenant-a-secret"
	if strings.HasPrefix(p, "/v1/connections/") {
		name = "tenant-a-conn"
	}
	return strings.NewReplacer("{id}", id, "{snapshot}", snapshot, "{pid}", pid, "{name}", name,
		"{port}", "8080", "{path...}", "x", "{ctx}", "ctx-1").Replace(p)
}

// call makes one request with key and returns the status and body. websocket asks for an upgrade.
func call(t *testing.T, ctx context.Context, method, url, key, body string, websocket bool) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if strings.HasPrefix(body, "{") {
		req.Header.Set("Content-Type", "application/json")
	}
	if websocket {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// TestQuotas checks a tenant's quotas: creates, forks and snapshots past them get 429 with a message,
// nothing is lost, and a pause is never refused.
func TestQuotas(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 4*time.Minute)
	ct, err := e.Client.CreateTenant(ctx, "small")
	if err != nil {
		t.Fatal(err)
	}
	c := airlock.New(e.URL, airlock.WithAPIKey(ct.APIKey.Key))
	setQuotas := func(q airlock.Quotas) {
		t.Helper()
		tn, err := e.Client.UpdateTenant(ctx, ct.Tenant.ID, airlock.UpdateTenantRequest{Quotas: &q})
		if err != nil || tn.Quotas != q {
			t.Fatalf("set quotas %+v = %+v, %v", q, tn, err)
		}
	}
	_, err = e.Client.UpdateTenant(ctx, ct.Tenant.ID, airlock.UpdateTenantRequest{Quotas: &airlock.Quotas{Sessions: -1}})
	wantCode(t, "negative quota", err, http.StatusBadRequest)
	setQuotas(airlock.Quotas{RunningSandboxes: 2, Sessions: 1})

	sb, err := c.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	wantCode(t, "a third running sandbox", err, http.StatusTooManyRequests)
	var ae *airlock.APIError
	if errors.As(err, &ae) && (ae.Code != "resource_exhausted" || !strings.Contains(ae.Message, "quota")) {
		t.Errorf("quota error = %q %q; want resource_exhausted naming the quota", ae.Code, ae.Message)
	}
	_, err = c.ForkSession(ctx, se.ID, airlock.ForkSessionRequest{Count: 1})
	wantCode(t, "a fork past the sessions quota", err, http.StatusTooManyRequests)
	u, err := c.Usage(ctx)
	if err != nil || u.Usage.RunningSandboxes != 2 || u.Usage.Sessions != 1 || u.Quotas.RunningSandboxes != 2 {
		t.Errorf("usage = %+v, %v; want 2 running sandboxes and 1 session of quotas 2 and 1", u, err)
	}

	// Deleting a sandbox frees its place.
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSandbox(ctx, airlock.CreateSandboxRequest{}); err != nil {
		t.Errorf("create after a delete freed a place: %v", err)
	}

	// The snapshot quota refuses snapshots, never a pause; the session resumes afterwards.
	if _, err := c.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c", "echo kept > /home/user/f"}}); err != nil {
		t.Fatal(err)
	}
	setQuotas(airlock.Quotas{RunningSandboxes: 2, Sessions: 1, SnapshotBytes: 1})
	first, err := c.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{})
	if err != nil { // nothing is stored yet: under the quota
		t.Fatal(err)
	}
	if _, err := c.WaitSnapshot(ctx, se.ID, first.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{})
	wantCode(t, "a snapshot past the snapshot quota", err, http.StatusTooManyRequests)
	if p, err := c.PauseSession(ctx, se.ID); err != nil || p.State != "paused" {
		t.Fatalf("pause past the snapshot quota = %+v, %v; want paused", p, err)
	}
	// Resuming needs a running sandbox: with the quota full, it is refused and the session stays paused.
	setQuotas(airlock.Quotas{RunningSandboxes: 1, Sessions: 1, SnapshotBytes: 1})
	_, err = c.ResumeSession(ctx, se.ID)
	wantCode(t, "a resume past the running sandboxes quota", err, http.StatusTooManyRequests)
	if got, err := c.GetSession(ctx, se.ID); err != nil || got.State != "paused" {
		t.Errorf("session after a refused resume = %+v, %v; want paused", got, err)
	}
	setQuotas(airlock.Quotas{})
	res, err := c.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"cat", "/home/user/f"}})
	if err != nil || res.Stdout != "kept\n" {
		t.Errorf("resumed session's file = %+v, %v", res, err)
	}
}
