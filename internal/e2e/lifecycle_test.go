package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestCyclesLeaveNothing creates, uses and deletes sandboxes 50 times and checks the host's footprint —
// processes, mounts, cgroups, netns, network links, loop devices and files — is what it was.
func TestCyclesLeaveNothing(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	// One warm-up cycle first: the first sandbox makes runsc pin a shared, empty network namespace for
	// its gofers (StateDir/runsc/null-netns) that lives as long as Airlock and goes at shutdown
	// (TestRestartFindsState checks that). Everything per sandbox must be gone after each cycle.
	warm := create(t, e, airlock.CreateSandboxRequest{})
	if err := e.Client.DeleteSandbox(ctxT(t, time.Minute), warm.ID); err != nil {
		t.Fatal(err)
	}
	before, err := testenv.TakeFootprint(e.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	cycles := 50
	if testing.Short() {
		cycles = 5
	}
	for i := 0; i < cycles; i++ {
		sb := create(t, e, airlock.CreateSandboxRequest{})
		if res := run(t, e, sb.ID, airlock.ExecRequest{Cmd: []string{"sh", "-c", "echo $((6*7)) > /home/user/x; cat /home/user/x"}}); res.Stdout != "42\n" {
			t.Fatalf("cycle %d: exec = %+v", i, res)
		}
		if err := e.Client.DeleteSandbox(ctxT(t, time.Minute), sb.ID); err != nil {
			t.Fatalf("cycle %d: delete: %v", i, err)
		}
	}
	after, err := testenv.TakeFootprint(e.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(after); d != "" {
		t.Error(d)
	}
}

// TestTimeoutDestroys checks that a sandbox's timeout destroys it, and that it can be extended.
func TestTimeoutDestroys(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, time.Minute)
	sb := create(t, e, airlock.CreateSandboxRequest{TimeoutSeconds: 2})
	kept := create(t, e, airlock.CreateSandboxRequest{TimeoutSeconds: 2})
	if _, err := e.Client.SetTimeout(ctx, kept.ID, 120); err != nil {
		t.Fatal(err)
	}
	got := waitState(t, e, sb.ID, airlock.StateStopped, 20*time.Second)
	if got.Reason != "timeout" {
		t.Errorf("timed-out sandbox reason %q; want timeout", got.Reason)
	}
	if k, err := e.Client.GetSandbox(ctx, kept.ID); err != nil || k.State != airlock.StateRunning {
		t.Errorf("extended sandbox: %+v, %v; want running", k, err)
	}
}

// TestRestartFindsState stops Airlock as SIGTERM would, checks nothing is left on the host, and starts
// it again on the same data directory: the same key works and the sandboxes are recorded stopped.
func TestRestartFindsState(t *testing.T) {
	dir, err := os.MkdirTemp("", "airlock-restart-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := testenv.Start(t, testenv.Options{DataDir: dir})
	before, err := testenv.TakeFootprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, e, airlock.CreateSandboxRequest{Metadata: map[string]string{"keep": "me"}})
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	after, err := testenv.TakeFootprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(after); d != "" {
		t.Errorf("after shutdown: %s", d)
	}
	e2 := testenv.Start(t, testenv.Options{DataDir: dir})
	if e2.APIKey != e.APIKey {
		t.Errorf("API key changed across restart")
	}
	got, err := e2.Client.GetSandbox(ctxT(t, time.Minute), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != airlock.StateStopped || got.Metadata["keep"] != "me" {
		t.Errorf("after restart: %+v; want the sandbox recorded stopped with its metadata", got)
	}
	create(t, e2, airlock.CreateSandboxRequest{})
}

// TestBadInput sends malformed, oversized and hostile requests to every endpoint: each gets a 4xx with a
// code and a message, and nothing on the host changes.
func TestBadInput(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	sb := create(t, e, airlock.CreateSandboxRequest{})
	// A symlink planted inside that points out of the sandbox's tree, and one at the host's data dir.
	sh(t, e, sb.ID, "ln -s / /home/user/root; ln -s "+e.DataDir+" /home/user/data; ln -s /etc/shadow /home/user/shadow")
	hostMarker := e.DataDir + "/planted-by-test"
	sbURL := "/v1/sandboxes/" + sb.ID
	se, err := e.Client.CreateSession(context.Background(), airlock.CreateSessionRequest{})
	if err != nil || se.State != airlock.SessionRunning {
		t.Fatalf("create session: %+v %v", se, err)
	}
	seURL := "/v1/sessions/" + se.ID
	big := `{"template":"` + strings.Repeat("a", 2<<20) + `"}`
	cases := []struct {
		name, method, path, body string
		noAuth                   bool
		want                     int
	}{
		{"no key", "GET", "/v1/sandboxes", "", true, 401},
		{"malformed create", "POST", "/v1/sandboxes", `{"cpu":`, false, 400},
		{"create not an object", "POST", "/v1/sandboxes", `[1,2]`, false, 400},
		{"unknown field", "POST", "/v1/sandboxes", `{"cpus":1}`, false, 400},
		{"wrong type", "POST", "/v1/sandboxes", `{"cpu":"lots"}`, false, 400},
		{"two values", "POST", "/v1/sandboxes", `{} {}`, false, 400},
		{"oversize create", "POST", "/v1/sandboxes", big, false, 413},
		{"bad template", "POST", "/v1/sandboxes", `{"template":"../../etc"}`, false, 400},
		{"unknown template", "POST", "/v1/sandboxes", `{"template":"nosuch"}`, false, 404},
		{"bad state filter", "GET", "/v1/sandboxes?state=zombie", "", false, 400},
		{"bad limit", "GET", "/v1/sandboxes?limit=-3", "", false, 400},
		{"bad cursor", "GET", "/v1/sandboxes?cursor=not-a-cursor", "", false, 400},
		{"unknown query", "GET", "/v1/sandboxes?color=red", "", false, 400},
		{"bad id get", "GET", "/v1/sandboxes/..%2f..%2fetc", "", false, 400},
		{"bad id delete", "DELETE", "/v1/sandboxes/sb_x", "", false, 400},
		{"unknown id", "GET", "/v1/sandboxes/sb_aaaaaaaaaaaaaaaaaaaaaaaaaa", "", false, 404},
		{"bad timeout", "POST", sbURL + "/timeout", `{"timeout_seconds":-5}`, false, 400},
		{"timeout unknown field", "POST", sbURL + "/timeout", `{"timeout":5}`, false, 400},
		{"exec malformed", "POST", sbURL + "/exec", `{"cmd":["true"`, false, 400},
		{"exec empty cmd", "POST", sbURL + "/exec", `{"cmd":[]}`, false, 400},
		{"exec unknown field", "POST", sbURL + "/exec", `{"cmd":["true"],"shell":true}`, false, 400},
		{"exec bad cwd", "POST", sbURL + "/exec", `{"cmd":["true"],"cwd":"../.."}`, false, 400},
		{"exec bad user", "POST", sbURL + "/exec", `{"cmd":["true"],"user":"nosuchuser"}`, false, 400},
		{"exec oversize", "POST", sbURL + "/exec", big, false, 413},
		{"exec bad id", "POST", "/v1/sandboxes/nope/exec", `{"cmd":["true"]}`, false, 400},
		{"signal bad", "POST", sbURL + "/processes/p1/signal", `{"signal":"NOPE"}`, false, 400},
		{"signal unknown process", "POST", sbURL + "/processes/p1/signal", `{"signal":"TERM"}`, false, 404},
		{"signal bad process id", "POST", sbURL + "/processes/..%2f/signal", `{"signal":"TERM"}`, false, 400},
		{"file no path", "GET", sbURL + "/files", "", false, 400},
		{"file relative", "GET", sbURL + "/files?path=etc/passwd", "", false, 400},
		{"file dotdot", "GET", sbURL + "/files?path=/home/user/../../etc/shadow", "", false, 400},
		{"file NUL", "GET", sbURL + "/files?path=/etc/passwd%00", "", false, 400},
		{"file host database via symlink", "GET", sbURL + "/files?path=/home/user/data/airlock.db", "", false, 404},
		{"file host key via root link", "GET", sbURL + "/files?path=/home/user/root" + e.KeyFile, "", false, 404},
		{"file host path", "GET", sbURL + "/files?path=" + e.KeyFile, "", false, 404},
		{"file host database", "GET", sbURL + "/files?path=" + e.DataDir + "/airlock.db", "", false, 404},
		{"file dir", "GET", sbURL + "/files?path=/home", "", false, 400},
		{"put dotdot", "PUT", sbURL + "/files?path=/../" + hostMarker, "x", false, 400},
		{"put bad mode", "PUT", sbURL + "/files?path=/home/user/f&mode=999", "x", false, 400},
		{"stat dotdot", "GET", sbURL + "/files/stat?path=/..", "", false, 400},
		{"list missing", "GET", sbURL + "/files/list?path=/nope", "", false, 404},
		{"list file", "GET", sbURL + "/files/list?path=/etc/passwd", "", false, 400},
		{"mkdir dotdot", "POST", sbURL + "/files/mkdir", `{"path":"/home/../../x"}`, false, 400},
		{"mkdir unknown field", "POST", sbURL + "/files/mkdir", `{"path":"/x","mode":"777"}`, false, 400},
		{"move dotdot", "POST", sbURL + "/files/move", `{"from":"/etc/passwd","to":"/../../x"}`, false, 400},
		{"move missing", "POST", sbURL + "/files/move", `{"from":"/nope","to":"/home/user/x"}`, false, 404},
		{"delete root", "DELETE", sbURL + "/files?path=/", "", false, 400},
		{"delete bad flag", "DELETE", sbURL + "/files?path=/x&recursive=maybe", "", false, 400},
		{"tar dotdot", "GET", sbURL + "/files/tar?path=/a/../..", "", false, 400},
		{"tar upload garbage", "PUT", sbURL + "/files/tar?path=/home/user", "this is not a tar archive, not at all, no", false, 400},
		{"no route", "GET", "/v1/nothing", "", false, 404},
		{"processes bad id", "GET", "/v1/sandboxes/sb_%2e%2e/processes", "", false, 400},
		{"attach bad pid", "GET", sbURL + "/processes/a%20b/attach", "", false, 400},
		{"attach unknown pid", "GET", sbURL + "/processes/nosuchproc/attach", "", false, 404},
		{"attach bad offset", "GET", sbURL + "/processes/p1/attach?stdout_offset=-1", "", false, 400},
		{"stream bad id", "GET", "/v1/sandboxes/sb_nope/exec/stream", "", false, 400},
		{"stream unknown sandbox", "GET", "/v1/sandboxes/sb_aaaaaaaaaaaaaaaaaaaaaaaaaa/exec/stream", "", false, 404},
		{"session no key", "GET", "/v1/sessions", "", true, 401},
		{"session timeout", "POST", "/v1/sessions", `{"timeout_seconds":-60}`, false, 400},
		{"session timeout too long", "POST", "/v1/sessions", `{"timeout_seconds":86401}`, false, 400},
		{"session on timeout", "POST", "/v1/sessions", `{"timeout_seconds":60,"on_timeout":"explode"}`, false, 400},
		{"session set timeout", "POST", "/v1/sessions/se_aaaaaaaaaaaaaaaaaaaaaaaaaa/timeout", `{"timeout_seconds":-1}`, false, 400},
		{"session bad idle", "POST", "/v1/sessions", `{"idle_timeout_seconds":-1}`, false, 400},
		{"session reserved metadata", "POST", "/v1/sessions", `{"metadata":{"airlock.session":"x"}}`, false, 400},
		{"session unknown template", "POST", "/v1/sessions", `{"template":"nosuch"}`, false, 404},
		{"session bad id", "GET", "/v1/sessions/se_x", "", false, 400},
		{"session unknown id", "GET", "/v1/sessions/se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "", false, 404},
		{"session bad state filter", "GET", "/v1/sessions?state=asleep", "", false, 400},
		{"session pause with body", "POST", seURL + "/pause", `{"x":1}`, false, 400},
		{"session resume unknown", "POST", "/v1/sessions/se_aaaaaaaaaaaaaaaaaaaaaaaaaa/resume", "", false, 404},
		{"fork zero", "POST", seURL + "/fork", `{"count":0}`, false, 400},
		{"fork too many", "POST", seURL + "/fork", `{"count":101}`, false, 400},
		{"fork bad snapshot", "POST", seURL + "/fork", `{"count":1,"snapshot_id":"../x"}`, false, 400},
		{"fork unknown snapshot", "POST", seURL + "/fork", `{"count":1,"snapshot_id":"sn_aaaaaaaaaaaaaaaaaaaaaaaaaa"}`, false, 404},
		{"snapshot bad name", "POST", seURL + "/snapshots", `{"name":"../../x"}`, false, 400},
		{"snapshots bad state", "GET", seURL + "/snapshots?state=done", "", false, 400},
		{"snapshot bad id", "GET", seURL + "/snapshots/sn_..%2F..%2Fx", "", false, 400},
		{"retention negative", "PUT", "/v1/retention", `{"keep_all_seconds":-1}`, false, 400},
		{"retention unknown field", "PUT", "/v1/retention", `{"keep_weekly_seconds":1}`, false, 400},
		{"session rolling too often", "POST", "/v1/sessions", `{"rolling_interval_seconds":5}`, false, 400},
		{"restore neither", "POST", seURL + "/restore", `{}`, false, 400},
		{"restore bad snapshot", "POST", seURL + "/restore", `{"snapshot_id":"../x"}`, false, 400},
		{"restore unknown snapshot", "POST", seURL + "/restore", `{"snapshot_id":"sn_aaaaaaaaaaaaaaaaaaaaaaaaaa"}`, false, 404},
		{"diff bad from", "GET", seURL + "/diff?from=x&to=sn_aaaaaaaaaaaaaaaaaaaaaaaaaa", "", false, 400},
		{"snapshot file dotdot", "GET", seURL + "/snapshots/sn_aaaaaaaaaaaaaaaaaaaaaaaaaa/files?path=/a/../../etc/shadow", "", false, 400},
		{"snapshot unknown", "GET", seURL + "/snapshots/sn_aaaaaaaaaaaaaaaaaaaaaaaaaa", "", false, 404},
		{"session exec bad id", "POST", "/v1/sessions/nope/exec", `{"cmd":["true"]}`, false, 400},
		{"session exec unknown", "POST", "/v1/sessions/se_aaaaaaaaaaaaaaaaaaaaaaaaaa/exec", `{"cmd":["true"]}`, false, 404},
		{"session file dotdot", "GET", seURL + "/files?path=/home/user/../../etc/shadow", "", false, 400},
		{"session sandbox delete", "DELETE", "/v1/sandboxes/" + se.SandboxID, "", false, 409},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, e.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.noAuth {
				req.Header.Set("Authorization", "Bearer "+e.APIKey)
			}
			if tc.body != "" && strings.HasPrefix(tc.body, "{") || strings.HasPrefix(tc.body, "[") {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var eb airlock.ErrorBody
			if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
				t.Errorf("%s %s: body %q; want {\"error\":{\"code\",\"message\"}}", tc.method, tc.path, truncate(string(b)))
			}
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s: status %d (%s); want %d", tc.method, truncate(tc.path), resp.StatusCode, truncate(string(b)), tc.want)
			}
		})
	}
	// The exec stream: a malformed first message is an error message and a close, not a process.
	for _, first := range []string{`{"cmd":`, `{"cmd":[]}`, `{"cmd":["true"],"bogus":1}`, `{"cmd":["true"],"cwd":"/../.."}`} {
		ctx := ctxT(t, 30*time.Second)
		hdr := http.Header{"Authorization": {"Bearer " + e.APIKey}}
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.URL, "http")+sbURL+"/exec/stream", &websocket.DialOptions{HTTPHeader: hdr})
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Write(ctx, websocket.MessageText, []byte(first)); err != nil {
			t.Fatal(err)
		}
		_, msg, err := conn.Read(ctx)
		var m airlock.StreamMessage
		if err != nil || json.Unmarshal(msg, &m) != nil || m.Type != "error" || m.Error == nil || m.Error.Code != "invalid_argument" {
			t.Errorf("stream with first message %s: %q, %v; want an invalid_argument error message", first, msg, err)
		}
		conn.CloseNow()
	}
	if _, err := os.Stat(hostMarker); err == nil {
		t.Errorf("a request wrote %s on the host", hostMarker)
	}
	// The sandbox still works and is unharmed.
	if res := sh(t, e, sb.ID, "echo ok"); res.Stdout != "ok\n" {
		t.Errorf("sandbox after bad input: %+v", res)
	}
	// An idempotent create replays, and the same key with another body conflicts.
	do := func(body string) (int, []byte, http.Header) {
		req, _ := http.NewRequest("POST", e.URL+"/v1/sandboxes", bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+e.APIKey)
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header
	}
	s1, b1, _ := do(`{"metadata":{"try":"1"}}`)
	s2, b2, h2 := do(`{"metadata":{"try":"1"}}`)
	if s1 != 201 || s2 != 201 || !bytes.Equal(b1, b2) || h2.Get("Idempotent-Replayed") != "true" {
		t.Errorf("idempotent retry: %d %q / %d %q (replayed %q); want the same 201 twice", s1, truncate(string(b1)), s2, truncate(string(b2)), h2.Get("Idempotent-Replayed"))
	}
	if s3, b3, _ := do(`{"metadata":{"try":"2"}}`); s3 != 409 {
		t.Errorf("same key, other body: %d %q; want 409", s3, truncate(string(b3)))
	}
}
