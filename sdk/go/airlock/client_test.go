package airlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const testID = "sb_abcdefghijklmnopqrstuvwxyz"

// recorded is one request as the fake server saw it.
type recorded struct {
	Method      string
	Path        string // escaped path
	Query       string // raw query
	ContentType string
	Body        string
}

// fakeAPI is a hand-written stand-in for the API server: it records each request and answers with the
// status, headers and body set for "METHOD /path", or 404 not_found.
type fakeAPI struct {
	t *testing.T

	mu sync.Mutex
	// reqs are the requests seen so far; guarded by mu.
	reqs []recorded
	// auth is the Authorization header of the last request; guarded by mu.
	auth, ua, idem string

	replies map[string]reply
}

type reply struct {
	status int
	header map[string]string
	body   string
}

func newFake(t *testing.T, replies map[string]reply) (*fakeAPI, *Client) {
	t.Helper()
	f := &fakeAPI{t: t, replies: replies}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, New(srv.URL+"/", WithAPIKey("k3y"), WithHTTPClient(srv.Client()))
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		f.t.Errorf("read request body: %v", err)
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, recorded{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"), Body: string(body)})
	f.auth, f.ua, f.idem = r.Header.Get("Authorization"), r.Header.Get("User-Agent"), r.Header.Get("Idempotency-Key")
	f.mu.Unlock()

	rep, ok := f.replies[r.Method+" "+r.URL.Path]
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"no route"}}`)
		return
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	if rep.status == 0 {
		rep.status = http.StatusOK
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (f *fakeAPI) last() recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		f.t.Fatal("no request was made")
	}
	return f.reqs[len(f.reqs)-1]
}

const sandboxJSON = `{"id":"sb_abcdefghijklmnopqrstuvwxyz","template":"default","state":"running","cpu":1000,"memory_mb":512,
"disk_mb":1024,"timeout_seconds":300,"metadata":{"owner":"alice"},"created_at":"2026-01-02T03:04:05Z",
"ends_at":"2026-01-02T03:09:05Z"}`

func TestCreateSandbox(t *testing.T) {
	f, c := newFake(t, map[string]reply{
		"POST /v1/sandboxes": {status: 201, header: map[string]string{"Idempotent-Replayed": "true"}, body: sandboxJSON},
	})
	var replayed bool
	sb, err := c.CreateSandbox(context.Background(), CreateSandboxRequest{CPU: 500, Metadata: map[string]string{"owner": "alice"}},
		WithIdempotencyKey("key-1"), WithReplayed(&replayed))
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	ends := time.Date(2026, 1, 2, 3, 9, 5, 0, time.UTC)
	want := &Sandbox{ID: testID, Template: "default", State: StateRunning, CPU: 1000, MemoryMB: 512, DiskMB: 1024,
		TimeoutSeconds: 300, Metadata: map[string]string{"owner": "alice"}, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), EndsAt: &ends}
	if diff := cmp.Diff(want, sb); diff != "" {
		t.Errorf("sandbox (-want +got):\n%s", diff)
	}
	if !replayed {
		t.Errorf("replayed: got false; want true")
	}
	got := f.last()
	wantReq := recorded{Method: "POST", Path: "/v1/sandboxes", ContentType: "application/json",
		Body: `{"cpu":500,"metadata":{"owner":"alice"}}`}
	if diff := cmp.Diff(wantReq, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	if f.auth != "Bearer k3y" {
		t.Errorf("Authorization: got %q; want %q", f.auth, "Bearer k3y")
	}
	if f.idem != "key-1" {
		t.Errorf("Idempotency-Key: got %q; want %q", f.idem, "key-1")
	}
	if f.ua != userAgent {
		t.Errorf("User-Agent: got %q; want %q", f.ua, userAgent)
	}
}

// TestRequestShapes checks the method, path, query and body of every plain call.
func TestRequestShapes(t *testing.T) {
	fileInfo := `{"name":"a","path":"/a","type":"file","size":3,"mode":"0644","mod_time":"2026-01-02T03:04:05Z"}`
	replies := map[string]reply{
		"GET /v1/health":                                        {body: `{"status":"ok"}`},
		"GET /v1/sandboxes":                                     {body: `{"sandboxes":[]}`},
		"GET /v1/sandboxes/" + testID:                           {body: sandboxJSON},
		"DELETE /v1/sandboxes/" + testID:                        {status: 204},
		"POST /v1/sandboxes/" + testID + "/timeout":             {body: sandboxJSON},
		"POST /v1/sandboxes/" + testID + "/exec":                {body: `{"exit_code":3,"stdout":"hi\n","stderr":"","duration_ms":5}`},
		"GET /v1/sandboxes/" + testID + "/processes":            {body: `{"processes":[{"id":"p1","pid":7,"cmd":["sleep","9"],"user":"user","pty":false,"running":true,"started_at":"2026-01-02T03:04:05Z"}]}`},
		"POST /v1/sandboxes/" + testID + "/processes/p1/signal": {status: 204},
		"GET /v1/sandboxes/" + testID + "/files":                {body: "raw\x00bytes"},
		"PUT /v1/sandboxes/" + testID + "/files":                {body: fileInfo},
		"DELETE /v1/sandboxes/" + testID + "/files":             {status: 204},
		"GET /v1/sandboxes/" + testID + "/files/stat":           {body: fileInfo},
		"GET /v1/sandboxes/" + testID + "/files/list":           {body: `{"entries":[` + fileInfo + `]}`},
		"POST /v1/sandboxes/" + testID + "/files/mkdir":         {body: fileInfo},
		"POST /v1/sandboxes/" + testID + "/files/move":          {body: fileInfo},
		"GET /v1/sandboxes/" + testID + "/files/tar":            {body: "TAR"},
		"PUT /v1/sandboxes/" + testID + "/files/tar":            {status: 204},
		"GET /v1/sandboxes/" + testID + "/egress": {body: `{"flows":[{"start":"2026-01-02T03:04:05Z","end":"2026-01-02T03:04:06Z","duration_ms":1000,` +
			`"sandbox_id":"` + testID + `","src_port":40000,"dst_ip":"203.0.113.2","dst_port":443,"host":"api.example.com","protocol":"tls",` +
			`"decision":"allow","rule":"api","bytes_sent":517,"bytes_received":4096}]}`},
		"GET /v1/sandboxes/" + testID + "/metrics": {body: `{"sandbox_id":"` + testID + `","metrics":[{"time":"2026-01-02T03:04:05Z","cpu_count":2,` +
			`"cpu_used_pct":12.5,"memory_used_bytes":1,"memory_cache_bytes":2,"memory_total_bytes":3,"disk_used_bytes":4,"disk_total_bytes":5}]}`},
		"GET /v1/sessions/se_1/metrics": {body: `{"metrics":[]}`},
	}
	ctx := context.Background()
	base := "/v1/sandboxes/" + testID
	tests := []struct {
		name string
		call func(c *Client) error
		want recorded
	}{
		{"health", func(c *Client) error { return c.Health(ctx) },
			recorded{Method: "GET", Path: "/v1/health"}},
		{"list", func(c *Client) error {
			_, err := c.ListSandboxes(ctx, ListOptions{States: []string{"running", "failed"}, Metadata: map[string]string{"owner": "a b"}, Limit: 10, Cursor: "c1"})
			return err
		}, recorded{Method: "GET", Path: "/v1/sandboxes", Query: "cursor=c1&limit=10&metadata.owner=a+b&state=running%2Cfailed"}},
		{"list zero", func(c *Client) error { _, err := c.ListSandboxes(ctx, ListOptions{}); return err },
			recorded{Method: "GET", Path: "/v1/sandboxes"}},
		{"get", func(c *Client) error { _, err := c.GetSandbox(ctx, testID); return err },
			recorded{Method: "GET", Path: base}},
		{"delete", func(c *Client) error { return c.DeleteSandbox(ctx, testID) },
			recorded{Method: "DELETE", Path: base}},
		{"timeout", func(c *Client) error { _, err := c.SetTimeout(ctx, testID, 60); return err },
			recorded{Method: "POST", Path: base + "/timeout", ContentType: "application/json", Body: `{"timeout_seconds":60}`}},
		{"exec", func(c *Client) error {
			res, err := c.Exec(ctx, testID, ExecRequest{Cmd: []string{"echo", "hi"}, Env: map[string]string{"A": "1"}, Cwd: "/tmp", User: "root", Stdin: "x", TimeoutSeconds: 9})
			if err == nil && (res.ExitCode != 3 || res.Stdout != "hi\n" || res.DurationMS != 5) {
				t.Errorf("exec result: got %+v", res)
			}
			return err
		}, recorded{Method: "POST", Path: base + "/exec", ContentType: "application/json",
			Body: `{"cmd":["echo","hi"],"env":{"A":"1"},"cwd":"/tmp","user":"root","stdin":"x","timeout_seconds":9}`}},
		{"processes", func(c *Client) error {
			ps, err := c.ListProcesses(ctx, testID)
			if err == nil && (len(ps.Processes) != 1 || ps.Processes[0].ID != "p1" || ps.Processes[0].PID != 7 || !ps.Processes[0].Running) {
				t.Errorf("processes: got %+v", ps)
			}
			return err
		}, recorded{Method: "GET", Path: base + "/processes"}},
		{"signal", func(c *Client) error { return c.SignalProcess(ctx, testID, "p1", "TERM") },
			recorded{Method: "POST", Path: base + "/processes/p1/signal", ContentType: "application/json", Body: `{"signal":"TERM"}`}},
		{"read file", func(c *Client) error {
			b, err := c.ReadFile(ctx, testID, "/home/user/a b.txt")
			if err == nil && string(b) != "raw\x00bytes" {
				t.Errorf("ReadFile: got %q; want %q", b, "raw\x00bytes")
			}
			return err
		}, recorded{Method: "GET", Path: base + "/files", Query: "path=%2Fhome%2Fuser%2Fa+b.txt"}},
		{"write file", func(c *Client) error {
			fi, err := c.WriteFile(ctx, testID, "/a", strings.NewReader("abc"), 0o755)
			if err == nil && (fi.Name != "a" || fi.Size != 3 || fi.Mode != "0644") {
				t.Errorf("WriteFile: got %+v", fi)
			}
			return err
		}, recorded{Method: "PUT", Path: base + "/files", Query: "mode=0755&path=%2Fa", ContentType: "application/octet-stream", Body: "abc"}},
		{"write file setuid", func(c *Client) error {
			_, err := c.WriteFile(ctx, testID, "/a", bytes.NewReader(nil), 0o700|fs.ModeSetuid)
			return err
		}, recorded{Method: "PUT", Path: base + "/files", Query: "mode=4700&path=%2Fa", ContentType: "application/octet-stream"}},
		{"write file default mode", func(c *Client) error { _, err := c.WriteFile(ctx, testID, "/a", nil, 0); return err },
			recorded{Method: "PUT", Path: base + "/files", Query: "path=%2Fa", ContentType: "application/octet-stream"}},
		{"remove", func(c *Client) error { return c.Remove(ctx, testID, "/a", false) },
			recorded{Method: "DELETE", Path: base + "/files", Query: "path=%2Fa"}},
		{"remove recursive", func(c *Client) error { return c.Remove(ctx, testID, "/a", true) },
			recorded{Method: "DELETE", Path: base + "/files", Query: "path=%2Fa&recursive=true"}},
		{"stat", func(c *Client) error { _, err := c.Stat(ctx, testID, "/a"); return err },
			recorded{Method: "GET", Path: base + "/files/stat", Query: "path=%2Fa"}},
		{"list files", func(c *Client) error {
			l, err := c.ListFiles(ctx, testID, "/")
			if err == nil && len(l.Entries) != 1 {
				t.Errorf("ListFiles: got %d entries; want 1", len(l.Entries))
			}
			return err
		}, recorded{Method: "GET", Path: base + "/files/list", Query: "path=%2F"}},
		{"mkdir", func(c *Client) error { _, err := c.Mkdir(ctx, testID, "/d/e"); return err },
			recorded{Method: "POST", Path: base + "/files/mkdir", ContentType: "application/json", Body: `{"path":"/d/e"}`}},
		{"move", func(c *Client) error { _, err := c.Move(ctx, testID, "/a", "/b"); return err },
			recorded{Method: "POST", Path: base + "/files/move", ContentType: "application/json", Body: `{"from":"/a","to":"/b"}`}},
		{"download tar", func(c *Client) error {
			rc, err := c.DownloadTar(ctx, testID, "/d")
			if err != nil {
				return err
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if string(b) != "TAR" {
				t.Errorf("DownloadTar: got %q; want %q", b, "TAR")
			}
			return err
		}, recorded{Method: "GET", Path: base + "/files/tar", Query: "path=%2Fd"}},
		{"egress", func(c *Client) error {
			since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600))
			l, err := c.Egress(ctx, testID, EgressOptions{Decision: DecisionDeny, Host: "api.example.com", HostContains: "exa", Since: since, Until: since.Add(time.Hour), Limit: 5})
			want := Flow{Start: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), End: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC), DurationMS: 1000,
				SandboxID: testID, SrcPort: 40000, DstIP: "203.0.113.2", DstPort: 443, Host: "api.example.com", Protocol: ProtocolTLS,
				Decision: DecisionAllow, Rule: "api", BytesSent: 517, BytesReceived: 4096}
			if err == nil && (len(l.Flows) != 1 || !cmp.Equal(l.Flows[0], want)) {
				t.Errorf("Egress: got %+v; want one flow %+v", l, want)
			}
			return err
		}, recorded{Method: "GET", Path: base + "/egress", Query: "decision=deny&host=api.example.com&host_contains=exa&limit=5&since=2026-01-02T03%3A04%3A05%2B01%3A00&until=2026-01-02T04%3A04%3A05%2B01%3A00"}},
		{"egress zero", func(c *Client) error { _, err := c.Egress(ctx, testID, EgressOptions{}); return err },
			recorded{Method: "GET", Path: base + "/egress"}},
		{"metrics", func(c *Client) error {
			start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			l, err := c.SandboxMetrics(ctx, testID, MetricsOptions{Start: start, End: start.Add(time.Minute)})
			want := MetricList{SandboxID: testID, Metrics: []Metric{{Time: start, CPUCount: 2, CPUUsedPct: 12.5, MemoryUsedBytes: 1,
				MemoryCacheBytes: 2, MemoryTotalBytes: 3, DiskUsedBytes: 4, DiskTotalBytes: 5}}}
			if err == nil && !cmp.Equal(*l, want) {
				t.Errorf("SandboxMetrics: got %+v; want %+v", l, want)
			}
			return err
		}, recorded{Method: "GET", Path: base + "/metrics", Query: "end=2026-01-02T03%3A05%3A05Z&start=2026-01-02T03%3A04%3A05Z"}},
		{"session metrics", func(c *Client) error {
			l, err := c.SessionMetrics(ctx, "se_1", MetricsOptions{})
			if err == nil && (l.SandboxID != "" || l.Metrics == nil || len(l.Metrics) != 0) {
				t.Errorf("SessionMetrics of a paused session: got %+v; want none", l)
			}
			return err
		}, recorded{Method: "GET", Path: "/v1/sessions/se_1/metrics"}},
		{"upload tar", func(c *Client) error { return c.UploadTar(ctx, testID, "/d", strings.NewReader("TAR")) },
			recorded{Method: "PUT", Path: base + "/files/tar", Query: "path=%2Fd", ContentType: "application/x-tar", Body: "TAR"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, c := newFake(t, replies)
			if err := tt.call(c); err != nil {
				t.Fatalf("call: %v", err)
			}
			if diff := cmp.Diff(tt.want, f.last()); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllSandboxes(t *testing.T) {
	var mu sync.Mutex
	var cursors []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		cursors = append(cursors, r.URL.Query().Get("cursor"))
		mu.Unlock()
		switch r.URL.Query().Get("cursor") {
		case "":
			_, _ = io.WriteString(w, `{"sandboxes":[{"id":"sb_1"},{"id":"sb_2"}],"next_cursor":"c2"}`)
		case "c2":
			_, _ = io.WriteString(w, `{"sandboxes":[{"id":"sb_3"}]}`)
		}
	}))
	defer srv.Close()
	c := New(srv.URL)
	var ids []string
	for sb, err := range c.AllSandboxes(context.Background(), ListOptions{Limit: 2}) {
		if err != nil {
			t.Fatalf("AllSandboxes: %v", err)
		}
		ids = append(ids, sb.ID)
	}
	if diff := cmp.Diff([]string{"sb_1", "sb_2", "sb_3"}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"", "c2"}, cursors); diff != "" {
		t.Errorf("cursors (-want +got):\n%s", diff)
	}
}

// TestAllSessionsAndSnapshots: the session and snapshot iterators fetch every page of their list, in
// order, and an error ends the iteration after it is yielded.
func TestAllSessionsAndSnapshots(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Path + "?" + r.URL.Query().Get("cursor")
		switch key {
		case "/v1/sessions?":
			_, _ = io.WriteString(w, `{"sessions":[{"id":"se_1"}],"next_cursor":"c2"}`)
		case "/v1/sessions?c2":
			_, _ = io.WriteString(w, `{"sessions":[{"id":"se_2"}]}`)
		case "/v1/sessions/se_1/snapshots?":
			_, _ = io.WriteString(w, `{"snapshots":[{"id":"sn_1"},{"id":"sn_2"}],"next_cursor":"c2"}`)
		case "/v1/sessions/se_1/snapshots?c2":
			_, _ = io.WriteString(w, `{"snapshots":[{"id":"sn_3"}]}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"`+key+`"}}`)
		}
	}))
	defer srv.Close()
	c := New(srv.URL)
	ctx := context.Background()
	var sessions, snapshots []string
	for se, err := range c.AllSessions(ctx, ListOptions{}) {
		if err != nil {
			t.Fatalf("AllSessions: %v", err)
		}
		sessions = append(sessions, se.ID)
	}
	for sn, err := range c.AllSnapshots(ctx, "se_1", ListOptions{}) {
		if err != nil {
			t.Fatalf("AllSnapshots: %v", err)
		}
		snapshots = append(snapshots, sn.ID)
	}
	if diff := cmp.Diff([]string{"se_1", "se_2"}, sessions); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"sn_1", "sn_2", "sn_3"}, snapshots); diff != "" {
		t.Errorf("snapshots (-want +got):\n%s", diff)
	}
	var errs int
	for _, err := range c.AllSnapshots(ctx, "se_nope", ListOptions{}) {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("AllSnapshots of a missing session: got %v; want not found", err)
		}
		errs++
	}
	if errs != 1 {
		t.Errorf("AllSnapshots of a missing session yielded %d times; want once, the error", errs)
	}
}

// TestErrors checks that every error the API can report matches its sentinel with errors.Is.
func TestErrors(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		body     string
		sentinel error
		want     APIError
	}{
		{"not found", 404, `{"error":{"code":"not_found","message":"sandbox sb_x not found"}}`, ErrNotFound,
			APIError{404, "not_found", "sandbox sb_x not found"}},
		{"invalid", 400, `{"error":{"code":"invalid_argument","message":"bad"}}`, ErrInvalidArgument, APIError{400, "invalid_argument", "bad"}},
		{"exists", 409, `{"error":{"code":"already_exists","message":"m"}}`, ErrAlreadyExists, APIError{409, "already_exists", "m"}},
		{"conflict", 409, `{"error":{"code":"conflict","message":"m"}}`, ErrConflict, APIError{409, "conflict", "m"}},
		{"precondition", 409, `{"error":{"code":"failed_precondition","message":"m"}}`, ErrFailedPrecondition, APIError{409, "failed_precondition", "m"}},
		{"unauthenticated", 401, `{"error":{"code":"unauthenticated","message":"m"}}`, ErrUnauthenticated, APIError{401, "unauthenticated", "m"}},
		{"denied", 403, `{"error":{"code":"permission_denied","message":"m"}}`, ErrPermissionDenied, APIError{403, "permission_denied", "m"}},
		{"exhausted", 429, `{"error":{"code":"resource_exhausted","message":"m"}}`, ErrResourceExhausted, APIError{429, "resource_exhausted", "m"}},
		{"too large", 413, `{"error":{"code":"too_large","message":"m"}}`, ErrTooLarge, APIError{413, "too_large", "m"}},
		{"unavailable", 503, `{"error":{"code":"unavailable","message":"m"}}`, ErrUnavailable, APIError{503, "unavailable", "m"}},
		{"deadline", 504, `{"error":{"code":"deadline_exceeded","message":"m"}}`, ErrDeadlineExceeded, APIError{504, "deadline_exceeded", "m"}},
		{"internal", 500, `{"error":{"code":"internal","message":"internal error"}}`, ErrInternal, APIError{500, "internal", "internal error"}},
		{"unknown code", 418, `{"error":{"code":"teapot","message":"m"}}`, ErrInternal, APIError{418, "teapot", "m"}},
		{"proxy html", 502, "<html>\n<b>Bad Gateway</b></html>", ErrUnavailable, APIError{502, "unavailable", "HTTP 502 Bad Gateway: <html> <b>Bad Gateway</b></html>"}},
		{"empty 404", 404, "", ErrNotFound, APIError{404, "not_found", "HTTP 404 Not Found"}},
		{"binary body", 500, "\x00\x01", ErrInternal, APIError{500, "internal", "HTTP 500 Internal Server Error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newFake(t, map[string]reply{"GET /v1/sandboxes/" + testID: {status: tt.status, body: tt.body}})
			_, err := c.GetSandbox(context.Background(), testID)
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("errors.Is(%v, %v): got false; want true", err, tt.sentinel)
			}
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v (%T) is not an *APIError", err, err)
			}
			if diff := cmp.Diff(tt.want, *ae); diff != "" {
				t.Errorf("APIError (-want +got):\n%s", diff)
			}
			for _, other := range []error{ErrNotFound, ErrConflict, ErrUnavailable} {
				if other != tt.sentinel && errors.Is(err, other) {
					t.Errorf("errors.Is(%v, %v): got true; want false", err, other)
				}
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	_, c := newFake(t, nil)
	_, err := c.GetSandbox(context.Background(), testID)
	want := "get sandbox " + testID + ": no route (not_found)"
	if err == nil || err.Error() != want {
		t.Errorf("error: got %v; want %q", err, want)
	}
}

func TestNewDefaults(t *testing.T) {
	c := New("")
	if c.BaseURL() != DefaultBaseURL {
		t.Errorf("BaseURL: got %q; want %q", c.BaseURL(), DefaultBaseURL)
	}
	c = New("http://h:1/prefix/", WithAPIKey("secret"))
	if got, want := c.url("/v1/health", nil), "http://h:1/prefix/v1/health"; got != want {
		t.Errorf("url: got %q; want %q", got, want)
	}
	if v := c.LogValue().String(); strings.Contains(v, "secret") {
		t.Errorf("LogValue %q shows the API key", v)
	}
}

func TestDecodeBadJSON(t *testing.T) {
	_, c := newFake(t, map[string]reply{"GET /v1/sandboxes/" + testID: {body: "{not json"}})
	if _, err := c.GetSandbox(context.Background(), testID); err == nil {
		t.Fatal("GetSandbox of a malformed body: got nil error")
	}
}

func FuzzErrorFromResponse(f *testing.F) {
	f.Add(404, []byte(`{"error":{"code":"not_found","message":"m"}}`))
	f.Add(502, []byte("<html>bad gateway</html>"))
	f.Add(500, []byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		e := errorFromResponse(&http.Response{StatusCode: status, Body: io.NopCloser(bytes.NewReader(body))})
		if e.Code == "" {
			t.Errorf("empty code for status %d body %q", status, body)
		}
		_ = e.Error()
		var eb ErrorBody
		if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" && e.Code != eb.Error.Code {
			t.Errorf("code: got %q; want %q", e.Code, eb.Error.Code)
		}
	})
}

func TestPortRangeJSON(t *testing.T) {
	in := []PortRange{"443", "8000-8100", "0443"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `[443,"8000-8100","0443"]`; got != want {
		t.Errorf("Marshal = %s; want %s", got, want)
	}
	var back []PortRange
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 3 || back[0] != "443" || back[1] != "8000-8100" {
		t.Errorf("Unmarshal = %v, %v", back, err)
	}
}
