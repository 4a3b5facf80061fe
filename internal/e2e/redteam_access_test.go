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
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestRedTeamAccess is the red-team battery's part on access (issue 40): a credential's power ends
// where the product says it does. Each subtest is an attack by a holder of a credential that should no
// longer work, with a positive control showing the same path works with one that should. One server
// serves them all.
func TestRedTeamAccess(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{DataDir: dataDir(t)})
	as := func(key string) *airlock.Client { return airlock.New(e.URL, airlock.WithAPIKey(key)) }
	ctx := ctxT(t, 10*time.Minute)
	wk, err := e.Client.CreateAPIKey(ctx, "writer", airlock.ScopeWrite)
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, e, airlock.CreateSandboxRequest{TimeoutSeconds: 1800})

	t.Run("a token dies with the key that made it", func(t *testing.T) {
		k, err := e.Client.CreateAPIKey(ctx, "short-lived", airlock.ScopeWrite)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := as(k.Key).CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"exec"}})
		if err != nil {
			t.Fatal(err)
		}
		other, err := as(wk.Key).CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"exec"}})
		if err != nil {
			t.Fatal(err)
		}
		// Positive control: the token runs commands while its key lives.
		if res, err := as(tok.Token).Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"echo", "ok"}}); err != nil || res.Stdout != "ok\n" {
			t.Fatalf("positive control: the token execs = %+v, %v", res, err)
		}
		if err := e.Client.RevokeAPIKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		_, err = as(tok.Token).Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"echo", "still"}})
		wantCode(t, "a token of a revoked key execs", err, http.StatusUnauthorized)
		if err == nil || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("the refusal %v does not say the token was revoked", err)
		}
		// Another key's token lives on.
		if _, err := as(other.Token).Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"true"}}); err != nil {
			t.Errorf("a token of a live key: %v", err)
		}
		l, err := e.Client.ListAccessTokens(ctx, sb.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, lt := range l.Tokens {
			switch lt.ID {
			case tok.ID:
				if lt.CreatedBy != k.ID || lt.RevokedAt == nil {
					t.Errorf("the listed token of the revoked key: created_by %q, revoked_at %v; want %s and set", lt.CreatedBy, lt.RevokedAt, k.ID)
				}
			case other.ID:
				if lt.CreatedBy != wk.ID || lt.RevokedAt != nil {
					t.Errorf("the listed token of the live key: created_by %q, revoked_at %v; want %s and unset", lt.CreatedBy, lt.RevokedAt, wk.ID)
				}
			}
		}
		// A disabled tenant's tokens are refused as well, and work again once it is enabled.
		ct, err := e.Client.CreateTenant(ctx, "to-disable")
		if err != nil {
			t.Fatal(err)
		}
		tn, tkey := ct.Tenant, ct.APIKey.Key
		tsb, err := as(tkey).CreateSandbox(ctx, airlock.CreateSandboxRequest{TimeoutSeconds: 600})
		if err != nil {
			t.Fatal(err)
		}
		ttok, err := as(tkey).CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: tsb.ID, Scopes: []string{"files"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := as(ttok.Token).ReadFile(ctx, tsb.ID, "/etc/hostname"); err != nil {
			t.Fatalf("positive control: the other tenant's token reads: %v", err)
		}
		disabled := true
		if _, err := e.Client.UpdateTenant(ctx, tn.ID, airlock.UpdateTenantRequest{Disabled: &disabled}); err != nil {
			t.Fatal(err)
		}
		_, err = as(ttok.Token).ReadFile(ctx, tsb.ID, "/etc/hostname")
		wantCode(t, "a disabled tenant's token reads", err, http.StatusForbidden)
	})

	t.Run("a revoked credential's open streams end within two seconds", func(t *testing.T) {
		var took []time.Duration
		for i := range 10 {
			// Alternate: a token revoked, then the API key that made a token revoked.
			k, err := e.Client.CreateAPIKey(ctx, fmt.Sprintf("stream-%d", i), airlock.ScopeWrite)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := as(k.Key).CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: sb.ID, Scopes: []string{"exec"}})
			if err != nil {
				t.Fatal(err)
			}
			var out lockedBuffer
			st, err := as(tok.Token).ExecStream(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"sh", "-c", "while :; do echo tick; sleep 0.2; done"}},
				airlock.StreamOptions{Stdout: &out})
			if err != nil {
				t.Fatal(err)
			}
			// Positive control: the stream of a valid credential runs on.
			if !eventually(5*time.Second, func() bool { return strings.Count(out.String(), "tick") >= 3 }) {
				t.Fatalf("positive control: the stream printed %q", out.String())
			}
			select {
			case <-st.Done():
				t.Fatalf("the stream of a valid token ended by itself")
			default:
			}
			start := time.Now()
			if i%2 == 0 {
				err = e.Client.RevokeAccessToken(ctx, tok.ID)
			} else {
				err = e.Client.RevokeAPIKey(ctx, k.ID)
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-st.Done():
				took = append(took, time.Since(start))
			case <-time.After(10 * time.Second):
				t.Fatalf("the stream of a revoked token still runs 10 s after the revoke")
			}
			_, werr := st.Wait()
			if werr == nil || !strings.Contains(werr.Error(), "revoked") {
				t.Errorf("the stream ended with %v; want a reason that says the token was revoked", werr)
			}
			st.Close()
		}
		slices.Sort(took)
		t.Logf("a revoked credential's stream ended after (sorted) %v: median %v", took, took[len(took)/2])
		if med := took[len(took)/2]; med > 2*time.Second {
			t.Errorf("median time for a revoked credential's stream to end: %v; want at most 2 s", med)
		}
	})

	t.Run("an envd process stream ends with its token", func(t *testing.T) {
		se, envd, _ := e2bCreate(t, e, wk.Key)
		body, stop := envdStart(t, e, se, envd, "while :; do echo tick; sleep 0.2; done")
		defer stop()
		// Positive control: output flows on the stream.
		if _, err := readEnvelopeUntil(body, "tick"); err != nil {
			t.Fatalf("positive control: the envd stream: %v", err)
		}
		l, err := e.Client.ListAccessTokens(ctx, "", se)
		if err != nil {
			t.Fatal(err)
		}
		for _, lt := range l.Tokens {
			if lt.Name == "e2b-envd" {
				if err := as(wk.Key).RevokeAccessToken(ctx, lt.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		start := time.Now()
		end, err := readEnvelopeUntil(body, "")
		if err != nil {
			t.Fatalf("the envd stream after the revoke: %v", err)
		}
		if !strings.Contains(end, "unauthenticated") || !strings.Contains(end, "revoked") {
			t.Errorf("the envd stream ended with %q; want an unauthenticated error that says revoked", end)
		}
		t.Logf("the envd stream ended %v after the revoke: %s", time.Since(start), end)
	})

	t.Run("connects hand out the same tokens, not new ones", func(t *testing.T) {
		se, envd, traffic := e2bCreate(t, e, wk.Key)
		for i := range 300 {
			envd2, traffic2 := e2bConnect(t, e, wk.Key, se)
			if envd2 != envd || traffic2 != traffic {
				t.Fatalf("connect %d gave other tokens than the create", i)
			}
		}
		l, err := e.Client.ListAccessTokens(ctx, "", se)
		if err != nil {
			t.Fatal(err)
		}
		live := 0
		for _, lt := range l.Tokens {
			if lt.RevokedAt == nil {
				live++
			}
		}
		if live > 2 {
			t.Errorf("after 300 connects the session has %d live tokens; want 2", live)
		}
		// Positive control: the token the connects gave works for envd.
		if code := envdGet(t, e, se, envd, "/e2b/files?path=/etc/hostname"); code != http.StatusOK {
			t.Errorf("the connects' envd token reads a file: %d", code)
		}
		// Another key connecting gets its own token, which dies with that key.
		k, err := e.Client.CreateAPIKey(ctx, "connector", airlock.ScopeWrite)
		if err != nil {
			t.Fatal(err)
		}
		envdK, _ := e2bConnect(t, e, k.Key, se)
		if envdK == envd {
			t.Fatal("another key's connect gave the first key's token")
		}
		if err := e.Client.RevokeAPIKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if code := envdGet(t, e, se, envdK, "/e2b/files?path=/etc/hostname"); code != http.StatusUnauthorized {
			t.Errorf("the envd token of a revoked key reads a file: %d; want 401", code)
		}
		if code := envdGet(t, e, se, envd, "/e2b/files?path=/etc/hostname"); code != http.StatusOK {
			t.Errorf("the first key's envd token after another key's revoke: %d; want 200", code)
		}
	})

	t.Run("live tokens are capped", func(t *testing.T) {
		capped := create(t, e, airlock.CreateSandboxRequest{TimeoutSeconds: 600})
		var ids []string
		for i := range 100 {
			tok, err := as(wk.Key).CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: capped.ID, Scopes: []string{"files"}})
			if err != nil {
				t.Fatalf("token %d of 100: %v", i, err)
			}
			ids = append(ids, tok.ID)
		}
		_, err := as(wk.Key).CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: capped.ID, Scopes: []string{"files"}})
		wantCode(t, "the 101st live token of a sandbox", err, http.StatusTooManyRequests)
		if err == nil || !strings.Contains(err.Error(), "live access tokens") {
			t.Errorf("the refusal %v does not say why", err)
		}
		// Revoking one makes room.
		if err := e.Client.RevokeAccessToken(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := as(wk.Key).CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SandboxID: capped.ID, Scopes: []string{"files"}}); err != nil {
			t.Errorf("a token after a revoke made room: %v", err)
		}
	})
}

// revokeAcrossReplicas opens streams with tokens through the replica at url, revokes each token through
// c (another replica) and checks that the stream ends within 2 s (median of 5), saying why.
func revokeAcrossReplicas(t *testing.T, url string, c *airlock.Client, sessionID string) {
	t.Helper()
	ctx := ctxT(t, 5*time.Minute)
	var took []time.Duration
	for range 5 {
		tok, err := c.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SessionID: sessionID, Scopes: []string{"exec"}})
		if err != nil {
			t.Fatal(err)
		}
		var out lockedBuffer
		st, err := airlock.New(url, airlock.WithAPIKey(tok.Token)).ExecStream(ctx, sessionID,
			airlock.ExecRequest{Cmd: []string{"sh", "-c", "while :; do echo tick; sleep 0.2; done"}}, airlock.StreamOptions{Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		if !eventually(10*time.Second, func() bool { return strings.Count(out.String(), "tick") >= 2 }) {
			t.Fatalf("positive control: the stream through the other replica printed %q", out.String())
		}
		start := time.Now()
		if err := c.RevokeAccessToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		select {
		case <-st.Done():
			took = append(took, time.Since(start))
		case <-time.After(15 * time.Second):
			t.Fatal("a stream through one replica still runs 15 s after its token was revoked through another")
		}
		if _, err := st.Wait(); err == nil || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("the stream ended with %v; want a reason that says revoked", err)
		}
		st.Close()
	}
	slices.Sort(took)
	t.Logf("streams ended after a revoke through another replica (sorted): %v", took)
	if med := took[len(took)/2]; med > 2*time.Second {
		t.Errorf("median time for a stream to end after a revoke through another replica: %v; want at most 2 s", med)
	}
}

// lockedBuffer is a bytes.Buffer safe for one writer and readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// eventually polls cond until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// e2bCall makes an E2B API call with key and decodes the answer into out.
func e2bCall(t *testing.T, e *testenv.Env, key, method, path string, body, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(t.Context(), method, e.URL+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, data)
	}
}

type e2bTokens struct {
	SandboxID          string `json:"sandboxID"`
	EnvdAccessToken    string `json:"envdAccessToken"`
	TrafficAccessToken string `json:"trafficAccessToken"`
}

// e2bCreate creates an E2B sandbox with key and returns its ID and tokens.
func e2bCreate(t *testing.T, e *testenv.Env, key string) (id, envd, traffic string) {
	t.Helper()
	var out e2bTokens
	e2bCall(t, e, key, "POST", "/e2b/sandboxes", map[string]any{"templateID": "base", "timeout": 600}, &out)
	if out.SandboxID == "" || out.EnvdAccessToken == "" || out.TrafficAccessToken == "" {
		t.Fatalf("E2B create answered %+v", out)
	}
	return out.SandboxID, out.EnvdAccessToken, out.TrafficAccessToken
}

// e2bConnect connects to the E2B sandbox id with key and returns its tokens.
func e2bConnect(t *testing.T, e *testenv.Env, key, id string) (envd, traffic string) {
	t.Helper()
	var out e2bTokens
	e2bCall(t, e, key, "POST", "/e2b/sandboxes/"+id+"/connect", map[string]any{"timeout": 600}, &out)
	return out.EnvdAccessToken, out.TrafficAccessToken
}

// envdGet makes a GET of envd's with the envd token and returns the status.
func envdGet(t *testing.T, e *testenv.Env, id, token, path string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", e.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// envdStart starts script in the E2B sandbox id through envd's Process/Start (Connect's streaming
// protocol, JSON), without a Connect-Timeout-Ms, and returns the answer's body.
func envdStart(t *testing.T, e *testenv.Env, id, token, script string) (*bufio.Reader, func()) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "sh", "args": []string{"-c", script}}})
	var env bytes.Buffer
	env.WriteByte(0)
	_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
	env.Write(msg)
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "POST", e.URL+"/e2b/process.Process/Start", &env)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("envd Start: %d %s", resp.StatusCode, data)
	}
	return bufio.NewReader(resp.Body), func() { cancel(); resp.Body.Close() }
}

// readEnvelopeUntil reads Connect envelopes from body until one (whose data, for a process event, is
// base64 in the JSON) contains want, and returns it; with want "", until the end-of-stream envelope,
// which it returns.
func readEnvelopeUntil(body *bufio.Reader, want string) (string, error) {
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(body, hdr[:]); err != nil {
			return "", fmt.Errorf("read envelope: %w", err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > 1<<20 {
			return "", errors.New("envelope too large")
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(body, data); err != nil {
			return "", fmt.Errorf("read envelope: %w", err)
		}
		end := hdr[0]&2 != 0
		if want == "" && end {
			return string(data), nil
		}
		if end {
			return "", fmt.Errorf("the stream ended: %s", data)
		}
		if want != "" && strings.Contains(decodeEvent(data), want) {
			return string(data), nil
		}
	}
}

// decodeEvent returns a process event's output as text, or the event's JSON.
func decodeEvent(data []byte) string {
	var ev struct {
		Event struct {
			Data *struct {
				Stdout []byte `json:"stdout"`
			} `json:"data"`
		} `json:"event"`
	}
	if json.Unmarshal(data, &ev) == nil && ev.Event.Data != nil {
		return string(ev.Event.Data.Stdout)
	}
	return string(data)
}
