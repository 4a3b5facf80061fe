package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

const (
	sbA = "sb_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	sbB = "sb_bbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// fakeServer is a hand-written stand-in for the API: enough of it for the CLI's commands. Files live in
// an in-memory map; sbA exists, everything else is not found.
type fakeServer struct {
	t *testing.T

	mu sync.Mutex
	// bodies are the JSON bodies received, by "METHOD path"; guarded by mu.
	bodies map[string]string
	// auth is the last Authorization header; guarded by mu.
	auth string
	// files maps paths of sbA to contents ("" with isDir for directories); guarded by mu.
	files map[string]string
	dirs  map[string]bool
	// tarUploads are the entry names of uploaded archives, by target dir; guarded by mu.
	tarUploads map[string][]string
	// createState is the state a created sandbox reports; guarded by mu.
	createState string
}

func newFakeServer(t *testing.T) (*fakeServer, string) {
	f := &fakeServer{t: t, bodies: map[string]string{}, files: map[string]string{}, dirs: map[string]bool{"/": true, "/home/user": true},
		tarUploads: map[string][]string{}, createState: airlock.StateRunning}
	mux := http.NewServeMux()
	sandbox := func(state string) airlock.Sandbox {
		ends := time.Now().Add(5 * time.Minute)
		return airlock.Sandbox{ID: sbA, Template: "default", State: state, CPU: 500, MemoryMB: 1024, DiskMB: 1024,
			TimeoutSeconds: 600, Metadata: map[string]string{"k": "v"}, CreatedAt: time.Now().Add(-time.Minute), EndsAt: &ends, Node: "node-a"}
	}
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		f.mu.Lock()
		state := f.createState
		f.mu.Unlock()
		sb := sandbox(state)
		if state == airlock.StateFailed {
			sb.Reason = "runsc exploded"
		}
		writeJSON(w, 201, sb)
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		failed := sandbox(airlock.StateFailed)
		failed.ID, failed.Reason = sbB, "out of\tmemory"
		writeJSON(w, 200, airlock.SandboxList{Sandboxes: []airlock.Sandbox{sandbox(airlock.StateRunning), failed}})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/egress", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		end := time.Now().Add(-2 * time.Minute)
		writeJSON(w, 200, airlock.FlowList{Flows: []airlock.Flow{
			{Start: end.Add(-1500 * time.Millisecond), End: end, DurationMS: 1500, SandboxID: sbA, DstIP: "203.0.113.2", DstPort: 443,
				Host: "api.example.com", Protocol: "tls", Decision: "allow", Rule: "api", BytesSent: 517, BytesReceived: 4096},
			{Start: end, End: end, SandboxID: sbA, DstIP: "203.0.113.2", DstPort: 80, Host: "api.example.com", Protocol: "http",
				Decision: "deny", Rule: "default", Method: "POST", Path: "/v1/files"},
		}})
	})
	metrics := func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		writeJSON(w, 200, airlock.MetricList{SandboxID: sbA, Metrics: []airlock.Metric{
			{Time: t, CPUCount: 2, CPUUsedPct: 37.5, MemoryUsedBytes: 96 << 20, MemoryCacheBytes: 3 << 19, MemoryTotalBytes: 512 << 20,
				DiskUsedBytes: 50 << 20, DiskTotalBytes: 1000 << 20}}})
	}
	mux.HandleFunc("GET /v1/sandboxes/{id}/metrics", metrics)
	mux.HandleFunc("GET /v1/sessions/{id}/metrics", metrics)
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		if r.PathValue("id") != sbA {
			writeErr(w, 404, "not_found", "sandbox "+r.PathValue("id")+" not found")
			return
		}
		writeJSON(w, 200, sandbox(airlock.StateRunning))
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		if r.PathValue("id") != sbA {
			writeErr(w, 404, "not_found", "sandbox "+r.PathValue("id")+" not found")
			return
		}
		w.WriteHeader(204)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/timeout", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		writeJSON(w, 200, sandbox(airlock.StateRunning))
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/processes", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		code := 3
		writeJSON(w, 200, airlock.ProcessList{Processes: []airlock.Process{
			{ID: "p1", PID: 10, Cmd: []string{"sleep", "100"}, User: "user", Running: true, StartedAt: time.Now()},
			{ID: "p2", PID: 11, Cmd: []string{"sh", "-c", "exit 3"}, User: "root", PTY: true, ExitCode: &code, StartedAt: time.Now()},
		}})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/stat", func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("path")
		f.mu.Lock()
		defer f.mu.Unlock()
		switch content, isFile := f.files[p]; {
		case f.dirs[p]:
			writeJSON(w, 200, airlock.FileInfo{Name: filepath.Base(p), Path: p, Type: "dir", Mode: "0755"})
		case isFile:
			writeJSON(w, 200, airlock.FileInfo{Name: filepath.Base(p), Path: p, Type: "file", Size: int64(len(content)), Mode: "0600"})
		default:
			writeErr(w, 404, "not_found", p+" not found")
		}
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		content, ok := f.files[r.URL.Query().Get("path")]
		f.mu.Unlock()
		if !ok {
			writeErr(w, 404, "not_found", "no file")
			return
		}
		_, _ = io.WriteString(w, content)
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p := r.URL.Query().Get("path")
		f.mu.Lock()
		f.files[p] = string(b)
		f.bodies["PUT "+p] = r.URL.Query().Get("mode")
		f.mu.Unlock()
		writeJSON(w, 200, airlock.FileInfo{Name: filepath.Base(p), Path: p, Type: "file", Size: int64(len(b))})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/mkdir", func(w http.ResponseWriter, r *http.Request) {
		var req airlock.MkdirRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.dirs[req.Path] = true
		f.mu.Unlock()
		writeJSON(w, 200, airlock.FileInfo{Path: req.Path, Type: "dir"})
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files/tar", func(w http.ResponseWriter, r *http.Request) {
		tr := tar.NewReader(r.Body)
		var names []string
		for {
			hdr, err := tr.Next()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(tr)
			names = append(names, hdr.Name+"="+string(b))
		}
		f.mu.Lock()
		f.tarUploads[r.URL.Query().Get("path")] = names
		f.mu.Unlock()
		w.WriteHeader(204)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/tar", func(w http.ResponseWriter, r *http.Request) {
		base := filepath.Base(r.URL.Query().Get("path"))
		tw := tar.NewWriter(w)
		_ = tw.WriteHeader(&tar.Header{Name: base + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		_ = tw.WriteHeader(&tar.Header{Name: base + "/r.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6})
		_, _ = io.WriteString(tw, "result")
		_ = tw.Close()
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/exec/stream", f.execStream)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeServer) record(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	key := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		key += "?" + r.URL.RawQuery
	}
	f.bodies[key] = string(b)
	f.auth = r.Header.Get("Authorization")
}

// execStream plays a process: "exit N" exits with N at once; "killed" dies of SIGKILL; anything else
// echoes stdin to stdout and exits 0 when stdin closes.
func (f *fakeServer) execStream(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := r.Context()
	_, data, err := conn.Read(ctx)
	if err != nil {
		return
	}
	var req airlock.ExecRequest
	_ = json.Unmarshal(data, &req)
	f.mu.Lock()
	f.bodies["EXEC"] = string(data)
	f.mu.Unlock()
	send := func(m airlock.StreamMessage) {
		b, _ := json.Marshal(m)
		_ = conn.Write(ctx, websocket.MessageText, b)
	}
	exit := func(code int, sig string) {
		send(airlock.StreamMessage{Type: "exit", ExitCode: &code, Signal: sig})
		conn.Close(websocket.StatusNormalClosure, "")
	}
	send(airlock.StreamMessage{Type: "started", ProcessID: "p1"})
	_ = conn.Write(ctx, websocket.MessageBinary, append([]byte{airlock.StreamStderr}, "starting\n"...))
	switch {
	case len(req.Cmd) == 2 && req.Cmd[0] == "exit":
		code, _ := strconv.Atoi(req.Cmd[1])
		exit(code, "")
		return
	case req.Cmd[0] == "killed":
		exit(-1, "KILL")
		return
	}
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			data[0] = airlock.StreamStdout
			_ = conn.Write(ctx, websocket.MessageBinary, data)
			continue
		}
		var m airlock.StreamMessage
		_ = json.Unmarshal(data, &m)
		if m.Type == "close_stdin" {
			exit(0, "")
			return
		}
	}
}

// file, mode, body, upload, dir and lastAuth read the fake's records under its lock.
func (f *fakeServer) file(p string) string { f.mu.Lock(); defer f.mu.Unlock(); return f.files[p] }
func (f *fakeServer) body(k string) string { f.mu.Lock(); defer f.mu.Unlock(); return f.bodies[k] }
func (f *fakeServer) upload(d string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tarUploads[d]
}
func (f *fakeServer) dir(p string) bool { f.mu.Lock(); defer f.mu.Unlock(); return f.dirs[p] }
func (f *fakeServer) lastAuth() string  { f.mu.Lock(); defer f.mu.Unlock(); return f.auth }
func (f *fakeServer) hasBody(k string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.bodies[k]
	return ok
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, airlock.ErrorBody{Error: airlock.ErrorDetail{Code: code, Message: msg}})
}

// run runs the CLI with args against url and reports its exit code, stdout and stderr.
func run(t *testing.T, url, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	all := append([]string{"--url", url, "--api-key", "k3y"}, args...)
	code := Run(context.Background(), all, Streams{In: strings.NewReader(stdin), Out: &out, Err: &errOut})
	return code, out.String(), errOut.String()
}

func TestSandboxCreate(t *testing.T) {
	f, url := newFakeServer(t)
	t.Setenv("AIRLOCK_CLI_TEST_TOKEN", "tok")
	code, out, errOut := run(t, url, "", "sandbox", "create", "--template", "py", "--cpu", "0.5", "--memory", "1G",
		"--disk", "2048", "--timeout", "10m", "-e", "A=1", "-e", "AIRLOCK_CLI_TEST_TOKEN", "--metadata", "k=v")
	if code != 0 || out != sbA+"\n" {
		t.Fatalf("create: exit %d, stdout %q, stderr %q; want 0 and the ID", code, out, errOut)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(f.body("POST /v1/sandboxes")), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"template": "py", "cpu": 500.0, "memory_mb": 1024.0, "disk_mb": 2048.0, "timeout_seconds": 600.0,
		"env": map[string]any{"A": "1", "AIRLOCK_CLI_TEST_TOKEN": "tok"}, "metadata": map[string]any{"k": "v"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	if f.lastAuth() != "Bearer k3y" {
		t.Errorf("Authorization: got %q; want Bearer k3y", f.lastAuth())
	}

	code, out, _ = run(t, url, "", "--json", "sandbox", "create")
	var sb airlock.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.ID != sbA {
		t.Errorf("create --json: exit %d, stdout %q; want the sandbox as JSON", code, out)
	}

	f.mu.Lock()
	f.createState = airlock.StateFailed
	f.mu.Unlock()
	code, out, errOut = run(t, url, "", "sandbox", "create")
	if code != 1 || out != sbA+"\n" || !strings.Contains(errOut, "airlock: sandbox "+sbA+" failed to start: runsc exploded") {
		t.Errorf("failed create: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	code, _, errOut = run(t, url, "", "sandbox", "create", "--memory", "lots")
	if code != 1 || !strings.HasPrefix(errOut, "airlock: --memory \"lots\"") {
		t.Errorf("bad flag: exit %d, stderr %q", code, errOut)
	}
}

func TestSandboxLs(t *testing.T) {
	f, url := newFakeServer(t)
	code, out, errOut := run(t, url, "", "sandbox", "ls", "--state", "running,failed", "-l", "k=v", "--limit", "5")
	if code != 0 {
		t.Fatalf("ls: exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("ls printed %d lines; want a header and 2 rows:\n%s", len(lines), out)
	}
	if fields := strings.Fields(lines[0]); !cmp.Equal(fields, []string{"ID", "STATE", "TEMPLATE", "NODE", "CREATED", "ENDS", "REASON"}) {
		t.Errorf("header: got %q", lines[0])
	}
	if fields := strings.Fields(lines[1]); len(fields) < 7 || fields[0] != sbA || fields[1] != "running" || fields[3] != "node-a" || fields[4] != "1m" || fields[6] != "in" {
		t.Errorf("row 1: got %q", lines[1])
	}
	if !strings.Contains(lines[2], "out of memory") || !strings.Contains(lines[2], sbB) {
		t.Errorf("row 2: got %q; want the failed sandbox and its reason", lines[2])
	}
	if !f.hasBody("GET /v1/sandboxes?limit=5&metadata.k=v&state=running%2Cfailed") {
		t.Errorf("requests: want the filters in the query")
	}

	code, out, _ = run(t, url, "", "sandbox", "ls", "--json", "--limit", "1")
	var l airlock.SandboxList
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.Sandboxes) != 1 {
		t.Errorf("ls --json --limit 1: exit %d, stdout %q; want one sandbox", code, out)
	}
}

func TestSandboxGetRmTimeout(t *testing.T) {
	f, url := newFakeServer(t)
	code, out, _ := run(t, url, "", "sandbox", "get", sbA)
	if code != 0 || !strings.Contains(out, "State:") || !strings.Contains(out, "k=v") || !strings.Contains(out, "500m") {
		t.Errorf("get: exit %d, stdout %q", code, out)
	}
	code, _, errOut := run(t, url, "", "sandbox", "get", sbB)
	if want := "airlock: get sandbox " + sbB + ": sandbox " + sbB + " not found (not_found)\n"; code != 1 || errOut != want {
		t.Errorf("get unknown: exit %d, stderr %q; want 1, %q", code, errOut, want)
	}
	code, out, errOut = run(t, url, "", "sandbox", "rm", sbA, sbB)
	if code != 1 || out != sbA+"\n" || !strings.Contains(errOut, sbB+" not found") {
		t.Errorf("rm: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = run(t, url, "", "sandbox", "timeout", sbA, "1h")
	if code != 0 || !strings.Contains(out, sbA+" ends at") {
		t.Errorf("timeout: exit %d, stdout %q", code, out)
	}
	if got := f.body("POST /v1/sandboxes/" + sbA + "/timeout"); got != `{"timeout_seconds":3600}` {
		t.Errorf("timeout body: got %q", got)
	}
}

func TestPs(t *testing.T) {
	_, url := newFakeServer(t)
	code, out, _ := run(t, url, "", "ps", sbA)
	if code != 0 {
		t.Fatalf("ps: exit %d", code)
	}
	for _, want := range []string{"running", "exited 3", "sh -c 'exit 3'", "yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("ps output lacks %q:\n%s", want, out)
		}
	}
}

func TestExec(t *testing.T) {
	f, url := newFakeServer(t)
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantCode int
		wantOut  string
	}{
		{"stdin echoed", []string{"exec", "-e", "A=1", "-w", "/tmp", sbA, "--", "cat", "-n"}, "hello\n", 0, "hello\n"},
		{"exit code", []string{"exec", sbA, "exit", "7"}, "", 7, ""},
		{"killed", []string{"exec", sbA, "--", "killed"}, "", 137, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t, url, tt.stdin, tt.args...)
			if code != tt.wantCode || out != tt.wantOut || errOut != "starting\n" {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errOut, tt.wantCode, tt.wantOut, "starting\n")
			}
		})
	}
	var req airlock.ExecRequest
	_ = json.Unmarshal([]byte(f.body("EXEC")), &req)
	if req.PTY != nil {
		t.Errorf("exec without -t asked for a PTY")
	}

	code, _, errOut := run(t, url, "", "exec")
	if code != 1 || !strings.Contains(errOut, "want a sandbox") {
		t.Errorf("exec without a sandbox: exit %d, stderr %q", code, errOut)
	}
	// Without a command: the template's own, which the request leaves out.
	run(t, url, "", "exec", sbA)
	var sent map[string]any
	if err := json.Unmarshal([]byte(f.body("EXEC")), &sent); err != nil || sent["cmd"] != nil {
		t.Errorf("exec without a command sent %v (%v); want no cmd", sent, err)
	}
	code, _, errOut = run(t, url, "", "exec", "-t", sbA, "--", "bash")
	if code != 1 || !strings.Contains(errOut, "needs a terminal") {
		t.Errorf("exec -t without a terminal: exit %d, stderr %q", code, errOut)
	}
}

func TestExecRequestShape(t *testing.T) {
	f, url := newFakeServer(t)
	if code, _, errOut := run(t, url, "x", "exec", "-e", "A=1", "-w", "/tmp", "-u", "root", sbA, "--", "cat", "-n"); code != 0 {
		t.Fatalf("exec: exit %d, stderr %q", code, errOut)
	}
	var req airlock.ExecRequest
	if err := json.Unmarshal([]byte(f.body("EXEC")), &req); err != nil {
		t.Fatal(err)
	}
	want := airlock.ExecRequest{Cmd: []string{"cat", "-n"}, Env: map[string]string{"A": "1"}, Cwd: "/tmp", User: "root"}
	if diff := cmp.Diff(want, req); diff != "" {
		t.Errorf("exec request (-want +got):\n%s", diff)
	}
}

func TestCp(t *testing.T) {
	f, url := newFakeServer(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(local, []byte("my notes"), 0o640); err != nil {
		t.Fatal(err)
	}
	// A file into an existing directory keeps its name and mode.
	if code, _, errOut := run(t, url, "", "cp", local, sbA+":/home/user/"); code != 0 {
		t.Fatalf("cp file up: exit %d, stderr %q", code, errOut)
	}
	if f.file("/home/user/notes.txt") != "my notes" || f.body("PUT /home/user/notes.txt") != "0640" {
		t.Errorf("uploaded file: %q mode %q", f.file("/home/user/notes.txt"), f.body("PUT /home/user/notes.txt"))
	}
	// Stdin to a file.
	if code, _, errOut := run(t, url, "from stdin", "cp", "-", sbA+":/home/user/in.txt"); code != 0 || f.file("/home/user/in.txt") != "from stdin" {
		t.Errorf("cp - : exit %d, stderr %q, file %q", code, errOut, f.file("/home/user/in.txt"))
	}
	// A file back, into a local directory, then to stdout.
	out := t.TempDir()
	if code, _, errOut := run(t, url, "", "cp", sbA+":/home/user/notes.txt", out); code != 0 {
		t.Fatalf("cp file down: exit %d, stderr %q", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(out, "notes.txt")); err != nil || string(b) != "my notes" {
		t.Errorf("downloaded file: %q, %v", b, err)
	}
	if code, stdout, _ := run(t, url, "", "cp", sbA+":/home/user/notes.txt", "-"); code != 0 || stdout != "my notes" {
		t.Errorf("cp to stdout: exit %d, stdout %q", code, stdout)
	}

	// A directory into an existing directory goes inside it; to a new path, it takes that name.
	src := filepath.Join(dir, "proj")
	makeTree(t, src, map[string]string{"a.txt": "A", "sub/b.txt": "B"})
	if code, _, errOut := run(t, url, "", "cp", src, sbA+":/home/user"); code != 0 {
		t.Fatalf("cp dir up: exit %d, stderr %q", code, errOut)
	}
	if diff := cmp.Diff([]string{"proj/=", "proj/a.txt=A", "proj/sub/=", "proj/sub/b.txt=B"}, f.upload("/home/user")); diff != "" {
		t.Errorf("archive into an existing dir (-want +got):\n%s", diff)
	}
	if code, _, errOut := run(t, url, "", "cp", src, sbA+":/home/user/copy"); code != 0 {
		t.Fatalf("cp dir up to a new name: exit %d, stderr %q", code, errOut)
	}
	if !f.dir("/home/user/copy") {
		t.Errorf("the new directory was not created")
	}
	if diff := cmp.Diff([]string{"a.txt=A", "sub/=", "sub/b.txt=B"}, f.upload("/home/user/copy")); diff != "" {
		t.Errorf("archive into a new dir (-want +got):\n%s", diff)
	}

	// A directory down: into an existing directory, and to a new name.
	if code, _, errOut := run(t, url, "", "cp", sbA+":/home/user", out); code != 0 {
		t.Fatalf("cp dir down: exit %d, stderr %q", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(out, "user", "r.txt")); err != nil || string(b) != "result" {
		t.Errorf("downloaded dir: %q, %v", b, err)
	}
	if code, _, errOut := run(t, url, "", "cp", sbA+":/home/user", filepath.Join(out, "renamed")); code != 0 {
		t.Fatalf("cp dir down to a new name: exit %d, stderr %q", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(out, "renamed", "r.txt")); err != nil || string(b) != "result" {
		t.Errorf("downloaded renamed dir: %q, %v", b, err)
	}

	for _, args := range [][]string{{"a", "b"}, {sbA + ":/a", sbB + ":/b"}} {
		if code, _, errOut := run(t, url, "", append([]string{"cp"}, args...)...); code != 1 {
			t.Errorf("cp %q: exit %d, stderr %q; want 1", args, code, errOut)
		}
	}
}

func TestAPIKeyResolution(t *testing.T) {
	f, url := newFakeServer(t)
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "api-key"), []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	call := func(env map[string]string, args ...string) string {
		t.Helper()
		for _, k := range []string{EnvURL, EnvAPIKey, EnvDataDir, EnvKeyFile} {
			t.Setenv(k, env[k])
		}
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), append(args, "sandbox", "get", sbA), Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		return f.lastAuth()
	}
	noFile := filepath.Join(t.TempDir(), "none")
	if got := call(map[string]string{EnvURL: url, EnvDataDir: dataDir, EnvKeyFile: noFile}); got != "Bearer from-file" {
		t.Errorf("key from the data dir of an older installation: got %q", got)
	}
	keyFile := filepath.Join(t.TempDir(), "api-key")
	if err := os.WriteFile(keyFile, []byte("from-key-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := call(map[string]string{EnvURL: url, EnvDataDir: dataDir, EnvKeyFile: keyFile}); got != "Bearer from-key-file" {
		t.Errorf("key from the key file: got %q", got)
	}
	if got := call(map[string]string{EnvURL: url, EnvDataDir: dataDir, EnvAPIKey: "from-env"}); got != "Bearer from-env" {
		t.Errorf("key from the environment: got %q", got)
	}
	if got := call(map[string]string{EnvURL: "http://127.0.0.1:1", EnvAPIKey: "from-env"}, "--url", url, "--api-key", "from-flag"); got != "Bearer from-flag" {
		t.Errorf("key from the flag: got %q", got)
	}
}

func TestErrorHints(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, 401, "unauthenticated", "missing API key")
	}))
	defer srv.Close()
	t.Setenv(EnvAPIKey, "")
	t.Setenv(EnvKeyFile, filepath.Join(t.TempDir(), "no-key")) // not the host's ~/.config/airlock/api-key
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"--url", srv.URL, "--data-dir", t.TempDir(), "ps", sbA}, Streams{Out: &out, Err: &errOut})
	if code != 1 || !strings.Contains(errOut.String(), "missing API key (unauthenticated) (no --api-key, no AIRLOCK_API_KEY") {
		t.Errorf("unauthenticated: exit %d, stderr %q", code, errOut.String())
	}

	ln := httptest.NewServer(http.NotFoundHandler())
	dead := ln.URL
	ln.Close()
	errOut.Reset()
	code = Run(context.Background(), []string{"--url", dead, "--api-key", "k", "ps", sbA}, Streams{Out: &out, Err: &errOut})
	if code != 1 || !strings.Contains(errOut.String(), "is `airlock up` running at "+dead) {
		t.Errorf("connection refused: exit %d, stderr %q", code, errOut.String())
	}
}
