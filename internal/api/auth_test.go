package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

func bearerProtocol(cred string) string {
	return bearerProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte(cred))
}

// TestCredential: the Authorization header's credential wins; the bearer subprotocol's is taken only
// on a WebSocket upgrade without one, and only when it decodes.
func TestCredential(t *testing.T) {
	upgrade := http.Header{"Upgrade": {"websocket"}, "Connection": {"keep-alive, Upgrade"}}
	for _, c := range []struct {
		name   string
		method string
		header http.Header
		want   string
	}{
		{"none", "GET", nil, ""},
		{"authorization", "GET", http.Header{"Authorization": {"Bearer ak_one "}}, "ak_one"},
		{"basic is no credential", "GET", http.Header{"Authorization": {"Basic YTpi"}}, ""},
		{"subprotocol on an upgrade", "GET", with(upgrade, "Sec-WebSocket-Protocol", StreamProtocol+", "+bearerProtocol("ak_two")), "ak_two"},
		{"subprotocol in its own header", "GET", with(with(upgrade, "Sec-WebSocket-Protocol", StreamProtocol), "Sec-WebSocket-Protocol", bearerProtocol("ak_two")), "ak_two"},
		{"authorization wins over the subprotocol", "GET", with(with(upgrade, "Sec-WebSocket-Protocol", bearerProtocol("ak_two")), "Authorization", "Bearer ak_one"), "ak_one"},
		{"a non-bearer authorization is not replaced by the subprotocol", "GET", with(with(upgrade, "Sec-WebSocket-Protocol", bearerProtocol("ak_two")), "Authorization", "Basic YTpi"), ""},
		{"subprotocol on a plain GET", "GET", http.Header{"Sec-WebSocket-Protocol": {bearerProtocol("ak_two")}}, ""},
		{"subprotocol without Connection: upgrade", "GET", http.Header{"Upgrade": {"websocket"}, "Sec-WebSocket-Protocol": {bearerProtocol("ak_two")}}, ""},
		{"subprotocol on a POST upgrade", "POST", with(upgrade, "Sec-WebSocket-Protocol", bearerProtocol("ak_two")), ""},
		{"padded base64", "GET", with(upgrade, "Sec-WebSocket-Protocol", bearerProtocolPrefix+base64.URLEncoding.EncodeToString([]byte("ak_x"))), ""},
		{"not base64url", "GET", with(upgrade, "Sec-WebSocket-Protocol", bearerProtocolPrefix+"a+b/"), ""},
		{"other subprotocols only", "GET", with(upgrade, "Sec-WebSocket-Protocol", "airlock.v1, chat"), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, "/v1/sandboxes/sb_x/exec/stream", nil)
			for k, vs := range c.header {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			if got := credential(r); got != c.want {
				t.Errorf("credential = %q; want %q", got, c.want)
			}
		})
	}
}

// with returns a copy of h with v added to k.
func with(h http.Header, k, v string) http.Header {
	h = h.Clone()
	h.Add(k, v)
	return h
}

// TestWebSocketBearer: a browser's WebSocket (which cannot set Authorization) authenticates with the
// key in its bearer subprotocol; the stream selects airlock.v1 and never echoes the key; a wrong key
// is refused, the subprotocol on a plain request is no credential, the Authorization header still
// works, a page of another origin is still refused, and the key is never logged.
func TestWebSocketBearer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cp, err := controlplane.New(controlplane.Config{Store: st, Logger: log, ReapInterval: time.Hour,
		DialNode: func(id, addr string, _ func(string) error) (controlplane.Node, error) {
			return nil, errors.New("no nodes in this test")
		}})
	if err != nil {
		t.Fatal(err)
	}
	_, key, _, err := cp.CreateTenant(ctx, "bearer", "")
	if err != nil {
		t.Fatal(err)
	}
	s := New(cp, log, nil)
	mux := http.NewServeMux()
	mux.Handle("/v1/", s)
	// A stream endpoint that needs no sandbox: the routes' authentication, then the streams' accept.
	mux.HandleFunc("GET /test/stream", s.auth(func(w http.ResponseWriter, r *http.Request) {
		conn, err := acceptStream(w, r)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		_ = conn.Write(r.Context(), websocket.MessageText, []byte(tenantOf(r)))
		conn.Close(websocket.StatusNormalClosure, "")
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http")

	dial := func(path string, protocols []string, header http.Header) (*websocket.Conn, *http.Response, error) {
		return websocket.Dial(ctx, wsURL+path, &websocket.DialOptions{Subprotocols: protocols, HTTPHeader: header})
	}

	t.Run("good key", func(t *testing.T) {
		conn, resp, err := dial("/test/stream", []string{StreamProtocol, bearerProtocol(key)}, nil)
		if err != nil {
			t.Fatalf("dial with the key in the subprotocol: %v (%v)", err, status(resp))
		}
		defer conn.CloseNow()
		if got := conn.Subprotocol(); got != StreamProtocol {
			t.Errorf("selected subprotocol %q; want %q", got, StreamProtocol)
		}
		if got := resp.Header.Values("Sec-WebSocket-Protocol"); len(got) != 1 || got[0] != StreamProtocol {
			t.Errorf("Sec-WebSocket-Protocol of the answer %q; want only %q", got, StreamProtocol)
		}
		if _, msg, err := conn.Read(ctx); err != nil || !strings.HasPrefix(string(msg), "tn_") {
			t.Errorf("read %q, %v; want the tenant", msg, err)
		}
	})
	t.Run("good key on a real stream route", func(t *testing.T) {
		// Authenticated, so the answer is the sandbox's: not found (not 401).
		_, resp, err := dial("/v1/sandboxes/sb_aaaaaaaaaaaaaaaaaaaaaaaaaa/exec/stream", []string{StreamProtocol, bearerProtocol(key)}, nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("exec stream of an unknown sandbox: %v, %v; want 404", status(resp), err)
		}
		_, resp, err = dial("/v1/sandboxes/sb_aaaaaaaaaaaaaaaaaaaaaaaaaa/processes/p1/attach", []string{StreamProtocol, bearerProtocol(key)}, nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("attach in an unknown sandbox: %v, %v; want 404", status(resp), err)
		}
	})
	t.Run("bad key", func(t *testing.T) {
		for _, protos := range [][]string{
			{StreamProtocol, bearerProtocol("ak_wrong")},
			{StreamProtocol, bearerProtocolPrefix + "!!"},
			{StreamProtocol},
		} {
			_, resp, err := dial("/test/stream", protos, nil)
			if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("dial offering %q: %v, %v; want 401", protos, status(resp), err)
			}
		}
	})
	t.Run("key in the subprotocol of a plain request", func(t *testing.T) {
		for _, path := range []string{"/v1/usage", "/v1/sandboxes/sb_aaaaaaaaaaaaaaaaaaaaaaaaaa/processes"} {
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
			req.Header.Set("Sec-WebSocket-Protocol", StreamProtocol+", "+bearerProtocol(key))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s with the key in Sec-WebSocket-Protocol: %d; want 401", path, resp.StatusCode)
			}
		}
	})
	t.Run("authorization header", func(t *testing.T) {
		conn, resp, err := dial("/test/stream", nil, http.Header{"Authorization": {"Bearer " + key}})
		if err != nil {
			t.Fatalf("dial with Authorization: %v (%v)", err, status(resp))
		}
		conn.CloseNow()
		if resp.Header.Get("Sec-WebSocket-Protocol") != "" {
			t.Errorf("a subprotocol was selected that the client did not offer: %q", resp.Header.Get("Sec-WebSocket-Protocol"))
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/usage", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Errorf("GET /v1/usage with Authorization: %d; want 200", r.StatusCode)
		}
	})
	t.Run("another origin", func(t *testing.T) {
		_, resp, err := dial("/test/stream", []string{StreamProtocol, bearerProtocol(key)}, http.Header{"Origin": {"https://evil.example"}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("dial from another origin: %v, %v; want 403", status(resp), err)
		}
	})
	for _, secret := range []string{key, base64.RawURLEncoding.EncodeToString([]byte(key))} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the key is in the logs:\n%s", logs.String())
		}
	}
}

func status(resp *http.Response) string {
	if resp == nil {
		return "no response"
	}
	return resp.Status
}
