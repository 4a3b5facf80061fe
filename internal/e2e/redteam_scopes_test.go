package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestRedTeamCodeInterpreter: two classes of attack on the code-interpreter template, on one server
// with the template built as the README builds it.
//
// scopes: the interpreter on port 49999 runs Python for whoever reaches it. A ports-only token (E2B's
// trafficAccessToken, `--scope ports`, a port URL's) tries /execute through the path form (also
// escaped, and behind a context's path), the host form, a URL token, a tunnel, and E2B's port header
// and host; anyone tries a public 49999; a raw request through an exec token's tunnel comes without the
// key. None of them runs code, nor does a ports-only token that sends the real key. E2B's traffic token
// still manages contexts (as E2B's SDK does), and a context it makes in a directory where a module was
// planted does not run it. Positive controls: an exec token runs code through the port (its guessed
// key replaced by the API's) and with the key through a tunnel, an API key and an exec-only token
// through …/code/run, E2B's envd token through E2B's port header; a ports-only token and anyone (a
// public port) reach another port's server. The key never reaches a client, the server's log or the
// audit logs.
//
// identity: every sandbox of the template is restored from one start snapshot with its kernel running,
// and every fork of a session from the session's: two tenants' (and two forks') first random numbers
// in the interpreter differ, and so do their machine IDs and host names. Positive control: a session's
// own pause and resume keeps its random state (a seeded sequence goes on) and its identity.
func TestRedTeamCodeInterpreter(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{DefaultImage: testenv.CodeInterpreterImage(t)})
	ctxDir, err := filepath.Abs("../../templates/code-interpreter")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("--url", e.URL, "--api-key", e.APIKey, "template", "build", "code-interpreter", ctxDir)
	if code != 0 || !strings.Contains(out, "Start: ") {
		t.Fatalf("template build code-interpreter: %d %q %s", code, out, errOut)
	}
	t.Run("scopes", func(t *testing.T) { redTeamInterpreterScopes(t, e) })
	t.Run("identity", func(t *testing.T) { redTeamIdentity(t, e) })
}

// pwn is code that leaves a mark in the sandbox and says so: whether an attempt ran code is read from
// the sandbox, not from the answer.
func pwn(mark string) []byte {
	b, _ := json.Marshal(map[string]string{"code": fmt.Sprintf("open('/tmp/pwned-%s', 'w').write('x')\nprint('ran-%s')", mark, mark)})
	return b
}

func redTeamInterpreterScopes(t *testing.T, e *testenv.Env) {
	ctx := ctxT(t, 15*time.Minute)
	c := e.Client
	se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{Template: "code-interpreter"})
	if err != nil {
		t.Fatal(err)
	}
	startPortServer(t, e, se.ID) // HTTP on 8080: another port's server
	token := func(scopes ...string) string {
		t.Helper()
		tok, err := c.CreateAccessToken(ctx, airlock.CreateAccessTokenRequest{SessionID: se.ID, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	portsOnly, execPorts, execOnly := token("ports"), token("exec", "ports"), token("exec")
	var ident proto.IdentityFileContents
	if raw := run(t, e, se.ID, airlock.ExecRequest{User: "root", Cmd: []string{"cat", proto.IdentityFile}}).Stdout; json.Unmarshal([]byte(raw), &ident) != nil || ident.InterpreterKey == "" {
		t.Errorf("the sandbox's identity file: %q; want its interpreter key", raw)
		ident.InterpreterKey = "no-key"
	}
	key := ident.InterpreterKey
	jsonCT := map[string]string{"Content-Type": "application/json"}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	ran := func(id, mark string) bool {
		t.Helper()
		return sh(t, e, id, "test -e /tmp/pwned-"+mark+" && echo yes || true").Stdout == "yes\n"
	}
	path := func(id string, port int, rest string) string {
		kind := "sandboxes"
		if strings.HasPrefix(id, "se_") {
			kind = "sessions"
		}
		return fmt.Sprintf("%s/v1/%s/%s/ports/%d%s", e.URL, kind, id, port, rest)
	}
	hc := hostClient(e, false)
	var answers []*http.Response // every answer that reached the client: none may carry the key

	// E2B's sandbox of the same template: its envd token (exec, files, ports) and its traffic token
	// (ports only, what E2B says to share).
	var e2b struct {
		SandboxID          string `json:"sandboxID"`
		EnvdAccessToken    string `json:"envdAccessToken"`
		TrafficAccessToken string `json:"trafficAccessToken"`
	}
	status, body, _ := do(t, http.DefaultClient, "POST", e.URL+"/e2b/sandboxes", "", with(jsonCT, "X-API-Key", e.APIKey),
		[]byte(`{"templateID":"code-interpreter-v1","timeout":600}`))
	if status != http.StatusCreated && status != http.StatusOK || decodeJSONInto(body, &e2b) != nil || e2b.TrafficAccessToken == "" || e2b.EnvdAccessToken == "" {
		t.Fatalf("E2B create: %d %s", status, body)
	}
	e2bPort := func(tokenHeader, tok string) map[string]string {
		return with(jsonCT, "E2b-Sandbox-Id", e2b.SandboxID, "E2b-Sandbox-Port", "49999", tokenHeader, tok)
	}

	// The attacks: each must be refused before it runs code.
	for _, a := range []struct {
		name, url, cred string
		hdr             map[string]string
		client          *http.Client
		id              string
	}{
		{"path form, ports-only token", path(se.ID, 49999, "/execute"), portsOnly, jsonCT, http.DefaultClient, se.ID},
		{"path form, ports-only token in the URL", path(se.ID, 49999, "/execute?airlock_token="+portsOnly), "", jsonCT, http.DefaultClient, se.ID},
		{"path form, ports-only token with the real key", path(se.ID, 49999, "/execute"), portsOnly, with(jsonCT, "X-Airlock-Interpreter-Key", key), http.DefaultClient, se.ID},
		{"host form, ports-only token", hostURL(e, se.ID, 49999, "/execute"), portsOnly, jsonCT, hc, se.ID},
		{"E2B port header, traffic token", e.URL + "/e2b/execute", "", e2bPort("E2B-Traffic-Access-Token", e2b.TrafficAccessToken), http.DefaultClient, e2b.SandboxID},
		{"E2B host, traffic token", hostURL(e, e2b.SandboxID, 49999, "/execute"), "", with(jsonCT, "E2B-Traffic-Access-Token", e2b.TrafficAccessToken), hc, e2b.SandboxID},
		{"path form, ports-only token, execute escaped", path(se.ID, 49999, "/%65xecute"), portsOnly, jsonCT, http.DefaultClient, se.ID},
		{"path form, ports-only token, execute behind contexts", path(se.ID, 49999, "/contexts/%2e%2e/execute"), portsOnly, jsonCT, http.DefaultClient, se.ID},
	} {
		mark := strings.NewReplacer(" ", "-", ",", "", "'", "").Replace(a.name)
		status, body, resp := do(t, a.client, "POST", a.url, a.cred, a.hdr, pwn(mark))
		answers = append(answers, resp)
		if status != http.StatusForbidden || ran(a.id, mark) {
			t.Errorf("%s: %d %q, code ran: %v; want 403 and nothing run", a.name, status, truncate(body), ran(a.id, mark))
		} else if !strings.Contains(body, "exec") {
			t.Errorf("%s: %q; want a message that says exec scope is needed", a.name, truncate(body))
		}
	}
	// A ports-only token's tunnel to the interpreter: refused; had it opened, a raw request would run.
	if conn, err := airlock.New(e.URL, airlock.WithAPIKey(portsOnly)).Tunnel(ctx, se.ID, 49999); err == nil {
		status, body := rawExecute(t, conn, "", pwn("tunnel"))
		t.Errorf("a ports-only token's tunnel to 49999 opened (the interpreter answered %d %q, code ran: %v); want it refused", status, truncate(body), ran(se.ID, "tunnel"))
	} else if !isCode(err, "permission_denied") {
		t.Errorf("a ports-only token's tunnel to 49999: %v; want permission denied", err)
	}
	// Defence in depth: a request that reaches the interpreter without the API (a tunnel of a token
	// that may run code, which the API cannot add a header to) runs nothing without the key...
	conn, err := airlock.New(e.URL, airlock.WithAPIKey(execPorts)).Tunnel(ctx, se.ID, 49999)
	if err != nil {
		t.Fatalf("an exec token's tunnel to 49999: %v", err)
	}
	if status, body := rawExecute(t, conn, "", pwn("rawtunnel")); status != http.StatusForbidden || ran(se.ID, "rawtunnel") {
		t.Errorf("a request to the interpreter without its key: %d %q; want 403 and nothing run", status, truncate(body))
	}
	// ...and runs with it (the positive control: the tunnel reaches the interpreter).
	conn, err = airlock.New(e.URL, airlock.WithAPIKey(execPorts)).Tunnel(ctx, se.ID, 49999)
	if err != nil {
		t.Fatal(err)
	}
	if status, body := rawExecute(t, conn, key, pwn("keyedtunnel")); status != http.StatusOK || !ran(se.ID, "keyedtunnel") {
		t.Errorf("a request to the interpreter with its key: %d %q; want the code run", status, truncate(body))
	}

	// A public 49999 is not anyone's interpreter; a public 8080 is anyone's server (the control).
	sb := create(t, e, airlock.CreateSandboxRequest{Template: "code-interpreter", Network: &airlock.NetworkPolicy{PublicPorts: []int{8080, 49999}}})
	startPortServer(t, e, sb.ID)
	status, body, resp := do(t, http.DefaultClient, "POST", path(sb.ID, 49999, "/execute"), "", jsonCT, pwn("public"))
	answers = append(answers, resp)
	if status == http.StatusOK || ran(sb.ID, "public") {
		t.Errorf("an anonymous request to a public 49999: %d %q, code ran: %v; want it refused", status, truncate(body), ran(sb.ID, "public"))
	}
	if status, body, _ := do(t, http.DefaultClient, "GET", path(sb.ID, 8080, "/x"), "", nil, nil); status != http.StatusOK {
		t.Errorf("an anonymous request to a public 8080: %d %q; want the server's answer", status, truncate(body))
	}

	// Positive controls: what may run code does, through every door; a ports-only token reaches the
	// other port.
	status, body, resp = do(t, http.DefaultClient, "POST", path(se.ID, 49999, "/execute"), execPorts,
		with(jsonCT, "X-Airlock-Interpreter-Key", "a-guess"), pwn("exectoken"))
	answers = append(answers, resp)
	if status != http.StatusOK || !strings.Contains(body, "ran-exectoken") || !ran(se.ID, "exectoken") {
		t.Errorf("an exec token through the port (with a guessed key, which the API replaces): %d %q; want the code run", status, truncate(body))
	}
	status, body, resp = do(t, http.DefaultClient, "POST", e.URL+"/e2b/execute", "", e2bPort("X-Access-Token", e2b.EnvdAccessToken), pwn("envd"))
	answers = append(answers, resp)
	if status != http.StatusOK || !strings.Contains(body, "ran-envd") || !ran(e2b.SandboxID, "envd") {
		t.Errorf("E2B's envd token through its port header: %d %q; want the code run", status, truncate(body))
	}
	for name, cl := range map[string]*airlock.Client{"API key": c, "exec-only token": airlock.New(e.URL, airlock.WithAPIKey(execOnly))} {
		if ex, err := cl.RunCode(ctx, se.ID, airlock.RunCodeRequest{Code: "6 * 7"}, nil); err != nil || ex.Text() != "42" {
			t.Errorf("%s: …/code/run: %+v, %v; want 42", name, ex, err)
		}
	}
	status, body, resp = do(t, http.DefaultClient, "GET", path(se.ID, 8080, "/x"), portsOnly, nil, nil)
	answers = append(answers, resp)
	if status != http.StatusOK {
		t.Errorf("a ports-only token to port 8080: %d %q; want the server's answer", status, truncate(body))
	}

	// E2B's SDK manages contexts with its traffic token alone: that reaches the interpreter's context
	// routes, which run nothing of the caller's. A kernel starts where only root writes and then moves
	// to its directory, so a module planted in that directory (by any process of the sandbox: /tmp is
	// everyone's) does not run when a context is made there.
	sh(t, e, e2b.SandboxID, `mkdir -p /tmp/evil && printf 'open("/tmp/pwned-context", "w").write("x")\n' > /tmp/evil/json.py`)
	status, body, resp = do(t, http.DefaultClient, "POST", e.URL+"/e2b/contexts", "", e2bPort("E2B-Traffic-Access-Token", e2b.TrafficAccessToken),
		[]byte(`{"cwd":"/tmp/evil"}`))
	answers = append(answers, resp)
	var made struct {
		ID  string `json:"id"`
		Cwd string `json:"cwd"`
	}
	if status != http.StatusOK || decodeJSONInto(body, &made) != nil || made.Cwd != "/tmp/evil" || ran(e2b.SandboxID, "context") {
		t.Errorf("the traffic token makes a context in a directory with a planted module: %d %q, the module ran: %v; want the context, and nothing run",
			status, truncate(body), ran(e2b.SandboxID, "context"))
	}
	if made.ID != "" {
		ex, err := c.RunCode(ctx, e2b.SandboxID, airlock.RunCodeRequest{ContextID: made.ID, Code: "import os\nos.getcwd()"}, nil)
		if err != nil || ex.Text() != "'/tmp/evil'" && ex.Text() != "/tmp/evil" {
			t.Errorf("the context made by the traffic token: %+v, %v; want it working in /tmp/evil", ex, err)
		}
		if status, body, _ := do(t, http.DefaultClient, "DELETE", e.URL+"/e2b/contexts/"+made.ID, "", e2bPort("E2B-Traffic-Access-Token", e2b.TrafficAccessToken), nil); status != http.StatusNoContent {
			t.Errorf("the traffic token removes the context: %d %q; want 204", status, truncate(body))
		}
	}
	if status, body, _ := do(t, hc, "GET", hostURL(e, e2b.SandboxID, 49999, "/health"), "", with(nil, "E2B-Traffic-Access-Token", e2b.TrafficAccessToken), nil); status != http.StatusOK {
		t.Errorf("the traffic token to the interpreter's /health: %d %q; want its answer", status, truncate(body))
	}

	// The key goes nowhere but the interpreter.
	for _, r := range answers {
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, key) {
					t.Errorf("an answer's header %s carries the interpreter key", k)
				}
			}
		}
	}
	if strings.Contains(e.Logs(), key) {
		t.Error("the server's log holds the interpreter key")
	}
	assertNotInDir(t, filepath.Join(e.DataDir, "audit"), key)
	rc, err := c.ExportAudit(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	audit, _ := io.ReadAll(rc)
	rc.Close()
	if len(audit) == 0 || bytes.Contains(audit, []byte(key)) {
		t.Errorf("the tenant's audit log (%d bytes) holds the interpreter key, or is empty", len(audit))
	}
}

func decodeJSONInto(body string, v any) error { return json.Unmarshal([]byte(body), v) }

// rawExecute sends one POST /execute over conn (a tunnel to the interpreter), with the key if not
// empty, and returns the status and the body's start. It closes conn.
func rawExecute(t *testing.T, conn io.ReadWriteCloser, key string, body []byte) (int, string) {
	t.Helper()
	defer conn.Close()
	req, _ := http.NewRequest("POST", "http://interpreter/execute", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-Airlock-Interpreter-Key", key)
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		t.Fatalf("write through the tunnel: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("read through the tunnel: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b)
}

func redTeamIdentity(t *testing.T, e *testenv.Env) {
	ctx := ctxT(t, 15*time.Minute)
	c := e.Client
	other, err := c.CreateTenant(ctx, "identity-other")
	if err != nil {
		t.Fatal(err)
	}
	oc := airlock.New(e.URL, airlock.WithAPIKey(other.APIKey.Key))
	const draw = "import random\nrandom.random()"
	first := func(cl *airlock.Client, id string) string {
		t.Helper()
		ex, err := cl.RunCode(ctx, id, airlock.RunCodeRequest{Code: draw}, nil)
		if err != nil || ex.Text() == "" {
			t.Fatalf("%s: %s: %+v, %v", id, draw, ex, err)
		}
		return ex.Text()
	}
	// whoami is the sandbox's machine ID and host name.
	whoami := func(cl *airlock.Client, id string) string {
		t.Helper()
		res, err := cl.Exec(ctx, id, airlock.ExecRequest{Cmd: []string{"sh", "-c", "cat /etc/machine-id; hostname"}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Stdout
	}
	type sandbox struct {
		who  string
		cl   *airlock.Client
		id   string
		draw string
		ids  string
	}
	// Three sessions of the template: one of each tenant and another of the first (a warm one, if the
	// pool has it ready), each restored from the start snapshot with the kernel running.
	var got []sandbox
	for _, s := range []struct {
		who string
		cl  *airlock.Client
	}{{"tenant A", c}, {"tenant B", oc}, {"tenant A again", c}} {
		se, err := s.cl.CreateSession(ctx, airlock.CreateSessionRequest{Template: "code-interpreter"})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, sandbox{s.who, s.cl, se.ID, first(s.cl, se.ID), whoami(s.cl, se.ID)})
	}
	// Two forks of the first session: restored from its snapshot, kernel and all.
	forks, err := c.ForkSession(ctx, got[0].id, airlock.ForkSessionRequest{Count: 2})
	if err != nil || len(forks.Sessions) != 2 {
		t.Fatalf("fork: %+v, %v", forks, err)
	}
	for i, f := range forks.Sessions {
		got = append(got, sandbox{fmt.Sprintf("fork %d", i+1), c, f.ID, first(c, f.ID), whoami(c, f.ID)})
	}
	for i, a := range got {
		if len(strings.Fields(a.ids)) != 2 {
			t.Errorf("%s: machine ID and host name %q; want both", a.who, a.ids)
		}
		for _, b := range got[i+1:] {
			if a.draw == b.draw {
				t.Errorf("%s and %s drew the same first random number %s: their interpreters share a random state", a.who, b.who, a.draw)
			}
			for j, what := range []string{"machine ID", "host name"} {
				if fa, fb := strings.Fields(a.ids), strings.Fields(b.ids); len(fa) == 2 && len(fb) == 2 && fa[j] == fb[j] {
					t.Errorf("%s and %s have the same %s %q", a.who, b.who, what, fa[j])
				}
			}
		}
	}

	// Positive control: a session's own pause and resume keeps its state, random state included: the
	// sequence seeded before the pause goes on after the resume (0.9664535356921388 is CPython's first
	// draw after random.seed(1234)), and its identity stays.
	own := got[2]
	if _, err := c.RunCode(ctx, own.id, airlock.RunCodeRequest{Code: "import random\nrandom.seed(1234)"}, nil); err != nil {
		t.Fatal(err)
	}
	epoch := func() string {
		t.Helper()
		var ident proto.IdentityFileContents
		raw := run(t, e, own.id, airlock.ExecRequest{User: "root", Cmd: []string{"cat", proto.IdentityFile}}).Stdout
		if err := json.Unmarshal([]byte(raw), &ident); err != nil {
			t.Fatalf("the identity file: %q: %v", raw, err)
		}
		return ident.Epoch
	}
	before := epoch()
	if _, err := c.PauseSession(ctx, own.id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSession(ctx, own.id); err != nil {
		t.Fatal(err)
	}
	if ex, err := c.RunCode(ctx, own.id, airlock.RunCodeRequest{Code: "random.random()"}, nil); err != nil || ex.Text() != "0.9664535356921388" {
		t.Errorf("after the session's own pause and resume: %+v, %v; want the seeded sequence going on (0.9664535356921388)", ex, err)
	}
	if ids := whoami(c, own.id); strings.Fields(ids)[0] != strings.Fields(own.ids)[0] || epoch() != before {
		t.Errorf("after the session's own pause and resume: machine ID and host name %q, epoch changed %v; want the machine ID %q and the epoch kept",
			ids, epoch() != before, strings.Fields(own.ids)[0])
	}
	// The snapshots taken here (the fork's, the pause's) are stored before the server stops: a stop waits
	// a minute for uploads in flight, and these are the interpreter's (about 110 MB each).
	for _, id := range []string{got[0].id, own.id} {
		l, err := c.ListSnapshots(ctx, id, airlock.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, sn := range l.Snapshots {
			if _, err := c.WaitSnapshot(ctx, id, sn.ID); err != nil {
				t.Errorf("snapshot %s of %s: %v", sn.ID, id, err)
			}
		}
	}
}
