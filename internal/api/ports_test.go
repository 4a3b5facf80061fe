package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

func TestHostForm(t *testing.T) {
	s := New(nil, nil, nil)
	s.SetIngressDomain("Airlock.Localhost.")
	id := "sb_" + "abcdefghijklmnopqrstuvwxyz"
	for _, c := range []struct {
		host   string
		id     string
		port   int
		ok     bool
		errors bool
	}{
		{"8080-sb-abcdefghijklmnopqrstuvwxyz.airlock.localhost:7070", id, 8080, true, false},
		{"8080-SB_ABCDEFGHIJKLMNOPQRSTUVWXYZ.AIRLOCK.LOCALHOST.", id, 8080, true, false},
		{"1-se-abcdefghijklmnopqrstuvwxyz.airlock.localhost", "se_abcdefghijklmnopqrstuvwxyz", 1, true, false},
		{"127.0.0.1:7070", "", 0, false, false},
		{"airlock.localhost", "", 0, false, false},
		{"evil-airlock.localhost", "", 0, false, false},
		{"x.8080-sb-abcdefghijklmnopqrstuvwxyz.airlock.localhost", "", 0, true, true},
		{"99999-sb-abcdefghijklmnopqrstuvwxyz.airlock.localhost", "", 0, true, true},
		{"0-sb-abcdefghijklmnopqrstuvwxyz.airlock.localhost", "", 0, true, true},
		{"8080-sb-abcdefghijklmnopqrstuvwxy1.airlock.localhost", "", 0, true, true},
		{"8080-tn-abcdefghijklmnopqrstuvwxyz.airlock.localhost", "", 0, true, true},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = c.host
		gotID, gotPort, ok, err := s.hostForm(r)
		if ok != c.ok || (err != nil) != c.errors || gotID != c.id || gotPort != c.port {
			t.Errorf("host %q: %q %d %v %v; want %q %d %v error=%v", c.host, gotID, gotPort, ok, err, c.id, c.port, c.ok, c.errors)
		}
	}
}

func TestPortCredentials(t *testing.T) {
	r := httptest.NewRequest("GET", "/x?airlock_token=at_q", nil)
	r.Header.Add("Authorization", "Basic abc")
	r.Header.Add("Authorization", "BEARER  ak_key")
	if creds, from := portCredentials(r, true); !slices.Equal(creds, []string{"ak_key"}) || from != "header" {
		t.Errorf("header: %v %s", creds, from)
	}
	r = httptest.NewRequest("POST", "/e2b/execute", nil) // E2B's SDKs' headers
	r.Header.Set("X-Access-Token", "not-ours")
	r.Header.Set("E2B-Traffic-Access-Token", "at_traffic")
	if creds, from := portCredentials(r, false); !slices.Equal(creds, []string{"at_traffic"}) || from != "header" {
		t.Errorf("E2B's headers: %v %s", creds, from)
	}
	r = httptest.NewRequest("GET", "/x?airlock_token=ak_key", nil) // API keys never from a URL
	r.AddCookie(&http.Cookie{Name: "airlock_token", Value: "ak_k2"})
	if creds, _ := portCredentials(r, true); len(creds) != 0 {
		t.Errorf("an API key from the URL or a cookie was taken: %v", creds)
	}
	r = httptest.NewRequest("GET", "/x", nil)
	r.Header.Set("Cookie", "airlock_token=at_a; airlock_token=at_b")
	if creds, from := portCredentials(r, true); !slices.Equal(creds, []string{"at_a", "at_b"}) || from != "cookie" {
		t.Errorf("cookies: %v %s", creds, from)
	}
	if creds, _ := portCredentials(r, false); len(creds) != 0 {
		t.Errorf("a cookie in the path form: %v", creds)
	}
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://other.example"}, {"Origin": "%"}} {
		r := httptest.NewRequest("GET", "http://8080-sb-x.airlock.localhost/", nil)
		r.Header.Set("Cookie", "airlock_token=at_a")
		for k, v := range h {
			r.Header.Set(k, v)
		}
		if creds, _ := portCredentials(r, true); len(creds) != 0 {
			t.Errorf("cookie taken with %v", h)
		}
	}
	r = httptest.NewRequest("GET", "http://8080-sb-x.airlock.localhost/", nil)
	r.Header.Set("Cookie", "airlock_token=at_a")
	r.Header.Set("Origin", "http://8080-sb-x.airlock.localhost")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	if creds, _ := portCredentials(r, true); len(creds) != 1 {
		t.Errorf("cookie refused on a same-origin request")
	}
}

func TestStripCredentials(t *testing.T) {
	r := httptest.NewRequest("GET", "/x", nil)
	r.Header.Add("Authorization", "Bearer ak_key")
	r.Header.Add("Authorization", "bearer at_tok")
	r.Header.Add("Authorization", "Basic abc")
	r.Header.Add("Cookie", "a=1; airlock_token=at_tok")
	r.Header.Add("Cookie", `airlock_token=at_2;b="q v"`)
	r.Header.Set("Referer", "http://h/p?x=1&airlock_token=at_tok&y=2")
	r.Header.Add("X-Access-Token", "something")
	r.Header.Add("X-Access-Token", "at_envd")
	r.Header.Set("E2B-Traffic-Access-Token", "ak_key")
	r.Header.Add("X-API-Key", "x")
	r.Header.Add("X-API-Key", "ak_key")
	r.Header.Add("Sec-WebSocket-Protocol", "chat, airlock.bearer.YWtfa2V5")
	r.Header.Add("Sec-WebSocket-Protocol", "airlock.bearer.YXRfdG9r")
	r.Header.Add("X-Airlock-Interpreter-Key", "a client's guess")
	stripCredentials(r)
	if got := r.Header.Values("X-Airlock-Interpreter-Key"); len(got) != 0 {
		t.Errorf("a client's interpreter key reaches the sandbox: %v", got)
	}
	if got := r.Header.Values("Sec-WebSocket-Protocol"); !slices.Equal(got, []string{"chat"}) {
		t.Errorf("Sec-WebSocket-Protocol %v", got)
	}
	if len(r.Header.Values("X-Access-Token"))+len(r.Header.Values("E2B-Traffic-Access-Token"))+len(r.Header.Values("X-API-Key")) != 0 {
		t.Errorf("E2B's credential headers reach the sandbox: %v", r.Header)
	}
	if got := r.Header.Values("Authorization"); !slices.Equal(got, []string{"Basic abc"}) {
		t.Errorf("Authorization %v", got)
	}
	if got := r.Header.Values("Cookie"); !slices.Equal(got, []string{`a=1; b="q v"`}) {
		t.Errorf("Cookie %v", got)
	}
	if got := r.Header.Get("Referer"); got != "http://h/p?x=1&y=2" {
		t.Errorf("Referer %q", got)
	}
}

func TestWithoutParam(t *testing.T) {
	for raw, want := range map[string]string{
		"":                                   "",
		"b=2&a=1":                            "b=2&a=1",
		"b=2&airlock_token=at_x&a=1":         "b=2&a=1",
		"airlock%5Ftoken=at_x&airlock_token": "",
		"x=airlock_token":                    "x=airlock_token",
	} {
		if got := withoutParam(raw, "airlock_token"); got != want {
			t.Errorf("withoutParam(%q) = %q; want %q", raw, got, want)
		}
	}
}

func TestDropCookieAndCache(t *testing.T) {
	h := http.Header{}
	h.Add("Set-Cookie", "AIRLOCK_TOKEN=evil; Path=/")
	h.Add("Set-Cookie", "app=1; Domain=airlock.localhost; Path=/; HttpOnly")
	dropCookie(h, true)
	if got := h.Values("Set-Cookie"); !slices.Equal(got, []string{"app=1; Path=/; HttpOnly"}) {
		t.Errorf("Set-Cookie %v", got)
	}
	for in, want := range map[string]string{"": "private", "public, max-age=60": "private, max-age=60", "no-store": "no-store", "private": "private", "max-age=5": "private, max-age=5"} {
		if got := privateCache(in); got != want {
			t.Errorf("privateCache(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestCheckInterpreterPort: on the code interpreter's port a caller that may run code sends anything; a
// token without exec reaches the routes that run nothing of its own (health, contexts) and nothing
// else, however the path is spelt; other ports are not its business.
func TestCheckInterpreterPort(t *testing.T) {
	portsOnly := controlplane.Principal{Token: &store.AccessToken{Scopes: []store.TokenScope{store.TokenPorts}}}
	execPorts := controlplane.Principal{Token: &store.AccessToken{Scopes: []store.TokenScope{store.TokenExec, store.TokenPorts}}}
	apiKey := controlplane.Principal{Scope: store.ScopeWrite}
	for _, c := range []struct {
		p                 controlplane.Principal
		port              int
		method, rest, qry string
		ok                bool
	}{
		{portsOnly, 49999, "POST", "/execute", "", false},
		{portsOnly, 49999, "POST", "/%65xecute", "", false},
		{portsOnly, 49999, "POST", "//execute", "", false},
		{portsOnly, 49999, "POST", "/contexts/../execute", "", false},
		{portsOnly, 49999, "POST", "/contexts/%2e%2e/execute", "", false},
		{portsOnly, 49999, "POST", "/contexts/a/execute", "", false},
		{portsOnly, 49999, "POST", "/contexts", "x=1", false},
		{portsOnly, 49999, "PUT", "/contexts", "", false},
		{portsOnly, 49999, "GET", "/contexts/abc", "", false},
		{portsOnly, 49999, "DELETE", "/contexts", "", false},
		{portsOnly, 49999, "POST", "/health", "", false},
		{portsOnly, 49999, "GET", "/health", "", true},
		{portsOnly, 49999, "GET", "/contexts", "", true},
		{portsOnly, 49999, "POST", "/contexts", "", true},
		{portsOnly, 49999, "POST", "/contexts", "airlock_token=at_x", true},
		{portsOnly, 49999, "DELETE", "/contexts/0b1c-2d", "", true},
		{portsOnly, 49999, "POST", "/contexts/0b1c-2d/restart", "", true},
		{portsOnly, 8080, "POST", "/execute", "", true},
		{execPorts, 49999, "POST", "/execute", "", true},
		{apiKey, 49999, "POST", "/execute", "x=1", true},
	} {
		err := checkInterpreterPort(c.p, c.port, c.method, c.rest, c.qry)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("%v on port %d: %s %s?%s: %v; want allowed %v", c.p.Token != nil && c.p.Token.Allows(store.TokenExec), c.port, c.method, c.rest, c.qry, err, c.ok)
		}
	}
}
