package airlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
)

// fakeProcess is a hand-written stand-in for the server side of the exec and attach WebSockets. For an exec
// stream it reads the ExecRequest, reports the process started, and then plays a small "cat": each stdin
// chunk comes back upper-cased on stdout and its length on stderr; control messages are recorded; on
// close_stdin it reports a dropped range and exits with code 7 (or by the signal it was sent last).
type fakeProcess struct {
	t *testing.T

	mu sync.Mutex
	// req is the ExecRequest received; guarded by mu.
	req *ExecRequest
	// controls are the control messages received; guarded by mu.
	controls []StreamMessage
	// query is the raw query of the upgrade request; guarded by mu.
	query string
	// auth is the Authorization header of the upgrade request; guarded by mu.
	auth string
}

func (f *fakeProcess) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case !strings.HasPrefix(r.URL.Path, "/v1/sandboxes/"):
	case strings.HasSuffix(r.URL.Path, "/exec/stream"), strings.HasSuffix(r.URL.Path, "/attach"):
		f.serveStream(w, r)
		return
	}
	{
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"sandbox not found"}}`))
		return
	}
}

func (f *fakeProcess) serveStream(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.query, f.auth = r.URL.RawQuery, r.Header.Get("Authorization")
	f.mu.Unlock()
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		f.t.Errorf("accept: %v", err)
		return
	}
	defer conn.CloseNow()
	ctx := r.Context()
	send := func(m StreamMessage) {
		b, _ := json.Marshal(m)
		if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
			f.t.Logf("server write: %v", err)
		}
	}
	if strings.HasSuffix(r.URL.Path, "/exec/stream") {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			f.t.Errorf("read exec request: %v", err)
			return
		}
		var req ExecRequest
		if typ != websocket.MessageText || json.Unmarshal(data, &req) != nil {
			f.t.Errorf("first message: got %v %q; want a JSON ExecRequest", typ, data)
			return
		}
		f.mu.Lock()
		f.req = &req
		f.mu.Unlock()
		switch req.Cmd[0] {
		case "fail":
			send(StreamMessage{Type: "error", Error: &ErrorDetail{Code: "failed_precondition", Message: "sandbox is not running"}})
			conn.Close(websocket.StatusNormalClosure, "")
			return
		case "vanish":
			send(StreamMessage{Type: "started", ProcessID: "p9"})
			conn.Close(websocket.StatusNormalClosure, "")
			return
		case "quick":
			code := 0
			send(StreamMessage{Type: "exit", ExitCode: &code})
			conn.Close(websocket.StatusNormalClosure, "")
			return
		}
		send(StreamMessage{Type: "started", ProcessID: "p1"})
	}
	lastSignal := ""
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return // the client went away
		}
		if typ == websocket.MessageBinary {
			if len(data) == 0 || data[0] != StreamStdin {
				f.t.Errorf("client binary frame: got first byte %v; want %d", data[:min(1, len(data))], StreamStdin)
				continue
			}
			out := append([]byte{StreamStdout}, bytes.ToUpper(data[1:])...)
			_ = conn.Write(ctx, websocket.MessageBinary, out)
			_ = conn.Write(ctx, websocket.MessageBinary, append([]byte{StreamStderr}, []byte(strings.Repeat("e", len(data)-1))...))
			continue
		}
		var m StreamMessage
		if err := json.Unmarshal(data, &m); err != nil {
			f.t.Errorf("client text frame %q: %v", data, err)
			continue
		}
		f.mu.Lock()
		f.controls = append(f.controls, m)
		f.mu.Unlock()
		switch m.Type {
		case "signal":
			lastSignal = m.Signal
		case "close_stdin":
			send(StreamMessage{Type: "dropped", Stream: "stdout", Bytes: 42})
			send(StreamMessage{Type: "future_message"})
			if lastSignal != "" {
				code := -1
				send(StreamMessage{Type: "exit", ExitCode: &code, Signal: lastSignal})
			} else {
				code := 7
				send(StreamMessage{Type: "exit", ExitCode: &code})
			}
			conn.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

func newStreamFake(t *testing.T) (*fakeProcess, *Client) {
	t.Helper()
	f := &fakeProcess{t: t}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, New(srv.URL, WithAPIKey("k3y"), WithHTTPClient(srv.Client()))
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestExecStream(t *testing.T) {
	f, c := newStreamFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stdout, stderr syncBuffer
	var dropped []string
	req := ExecRequest{Cmd: []string{"cat"}, Env: map[string]string{"A": "1"}, Cwd: "/w", User: "root", PTY: &PTYSize{Rows: 24, Cols: 80}}
	s, err := c.ExecStream(ctx, testID, req, StreamOptions{Stdout: &stdout, Stderr: &stderr,
		OnDropped: func(stream string, n int64) { dropped = append(dropped, fmt.Sprintf("%s:%d", stream, n)) }})
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	defer s.Close()
	if s.ProcessID() != "p1" {
		t.Errorf("ProcessID: got %q; want %q", s.ProcessID(), "p1")
	}
	if _, err := s.Write([]byte("hello ")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	big := strings.Repeat("x", maxStdinChunk+10) // sent as two messages
	if n, err := s.Write([]byte(big)); err != nil || n != len(big) {
		t.Fatalf("Write: got %d, %v; want %d, nil", n, err, len(big))
	}
	if err := s.Resize(50, 120); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	code, err := s.Wait()
	if err != nil || code != 7 || s.ExitSignal() != "" {
		t.Fatalf("Wait: got %d, %v, signal %q; want 7, nil, no signal", code, err, s.ExitSignal())
	}
	if want := "HELLO " + strings.ToUpper(big); stdout.String() != want {
		t.Errorf("stdout: got %d bytes; want %d", len(stdout.String()), len(want))
	}
	if want := strings.Repeat("e", 6+len(big)); stderr.String() != want {
		t.Errorf("stderr: got %d bytes; want %d", len(stderr.String()), len(want))
	}
	if diff := cmp.Diff([]string{"stdout:42"}, dropped); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if diff := cmp.Diff(&req, f.req); diff != "" {
		t.Errorf("exec request (-want +got):\n%s", diff)
	}
	wantControls := []StreamMessage{{Type: "resize", Rows: 50, Cols: 120}, {Type: "close_stdin"}}
	if diff := cmp.Diff(wantControls, f.controls); diff != "" {
		t.Errorf("control messages (-want +got):\n%s", diff)
	}
	if f.auth != "Bearer k3y" {
		t.Errorf("Authorization: got %q; want %q", f.auth, "Bearer k3y")
	}
	// After the exit, sends fail and Close is harmless.
	if _, err := s.Write([]byte("late")); err == nil {
		t.Errorf("Write after exit: got nil error")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestExecStreamSignal(t *testing.T) {
	_, c := newStreamFake(t)
	ctx := context.Background()
	s, err := c.ExecStream(ctx, testID, ExecRequest{Cmd: []string{"sleep"}}, StreamOptions{})
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	defer s.Close()
	if s.ExitSignal() != "" {
		t.Errorf("ExitSignal before the exit: got %q; want \"\"", s.ExitSignal())
	}
	if err := s.Signal("KILL"); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	code, err := s.Wait()
	if err != nil || code != -1 || s.ExitSignal() != "KILL" {
		t.Fatalf("Wait: got %d, %v, signal %q; want -1, nil, KILL", code, err, s.ExitSignal())
	}
	<-s.Done()
}

func TestExecStreamErrors(t *testing.T) {
	_, c := newStreamFake(t)
	ctx := context.Background()

	t.Run("error message", func(t *testing.T) {
		_, err := c.ExecStream(ctx, testID, ExecRequest{Cmd: []string{"fail"}}, StreamOptions{})
		if !errors.Is(err, ErrFailedPrecondition) {
			t.Fatalf("ExecStream: got %v; want a failed_precondition error", err)
		}
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Message != "sandbox is not running" {
			t.Errorf("APIError: got %+v", ae)
		}
	})
	t.Run("refused upgrade", func(t *testing.T) {
		c2 := New(c.BaseURL()+"/nowhere", WithAPIKey("k3y"))
		_, err := c2.ExecStream(ctx, testID, ExecRequest{Cmd: []string{"cat"}}, StreamOptions{})
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("ExecStream: got %v; want a not_found error", err)
		}
	})
	t.Run("closed before exit", func(t *testing.T) {
		s, err := c.ExecStream(ctx, testID, ExecRequest{Cmd: []string{"vanish"}}, StreamOptions{})
		if err != nil {
			t.Fatalf("ExecStream: %v", err)
		}
		defer s.Close()
		if _, err := s.Wait(); err == nil || errors.Is(err, ErrStreamClosed) {
			t.Errorf("Wait: got %v; want an error saying the server closed the stream", err)
		}
	})
	t.Run("exit before started", func(t *testing.T) {
		s, err := c.ExecStream(ctx, testID, ExecRequest{Cmd: []string{"quick"}}, StreamOptions{})
		if err != nil {
			t.Fatalf("ExecStream: %v", err)
		}
		defer s.Close()
		if code, err := s.Wait(); err != nil || code != 0 {
			t.Errorf("Wait: got %d, %v; want exit 0", code, err)
		}
	})
}

func TestStreamClose(t *testing.T) {
	_, c := newStreamFake(t)
	s, err := c.ExecStream(context.Background(), testID, ExecRequest{Cmd: []string{"cat"}}, StreamOptions{})
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Wait(); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("Wait after Close: got %v; want ErrStreamClosed", err)
	}
	if err := s.Resize(1, 1); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("Resize after Close: got %v; want ErrStreamClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestStreamContextCancel(t *testing.T) {
	_, c := newStreamFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.ExecStream(ctx, testID, ExecRequest{Cmd: []string{"cat"}}, StreamOptions{})
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	defer s.Close()
	cancel()
	if _, err := s.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait after cancel: got %v; want context.Canceled", err)
	}
}

func TestAttach(t *testing.T) {
	f, c := newStreamFake(t)
	ctx := context.Background()
	var stdout syncBuffer
	off := int64(5)
	s, err := c.Attach(ctx, testID, "p1", AttachOptions{StreamOptions: StreamOptions{Stdout: &stdout}, StdoutOffset: &off})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer s.Close()
	if s.ProcessID() != "p1" {
		t.Errorf("ProcessID: got %q; want p1", s.ProcessID())
	}
	if _, err := s.Write([]byte("abc")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	code, err := s.Wait()
	if err != nil || code != 7 {
		t.Fatalf("Wait: got %d, %v; want exit 7", code, err)
	}
	if stdout.String() != "ABC" {
		t.Errorf("stdout: got %q; want %q", stdout.String(), "ABC")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.query != "stdout_offset=5" {
		t.Errorf("query: got %q; want %q", f.query, "stdout_offset=5")
	}
	if f.req != nil {
		t.Errorf("attach sent an ExecRequest: %+v", f.req)
	}
}

func TestAttachNotFound(t *testing.T) {
	_, c := newStreamFake(t)
	c2 := New(c.BaseURL()+"/x", WithAPIKey("k3y"))
	if _, err := c2.Attach(context.Background(), testID, "p1", AttachOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Attach: got %v; want not_found", err)
	}
}
