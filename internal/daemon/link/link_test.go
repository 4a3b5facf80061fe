package link

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// fakeDaemon is the daemon end of a net.Pipe, driven by the test.
type fakeDaemon struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func newFake(t *testing.T, opts Options) (*Client, *fakeDaemon) {
	t.Helper()
	a, b := net.Pipe()
	c := NewClient(a, opts)
	t.Cleanup(func() { c.Close(); b.Close() })
	return c, &fakeDaemon{t: t, conn: b, r: bufio.NewReader(b)}
}

func (f *fakeDaemon) read() proto.Frame {
	f.t.Helper()
	fr, err := proto.ReadFrame(f.r)
	if err != nil {
		f.t.Fatalf("fake daemon read: %v", err)
	}
	return fr
}

func (f *fakeDaemon) write(t proto.Type, id uint32, payload []byte) {
	f.t.Helper()
	if err := proto.WriteFrame(f.conn, proto.Frame{Type: t, Stream: id, Payload: payload}); err != nil {
		f.t.Fatalf("fake daemon write: %v", err)
	}
}

func TestErrorsMatchSentinels(t *testing.T) {
	c, f := newFake(t, Options{})
	errc := make(chan error, 1)
	go func() { _, err := c.Stat(context.Background(), "/x"); errc <- err }()
	req := f.read()
	f.write(proto.TypeResponse, req.Stream, proto.EncodeResponse(nil, errors.Join(errors.New("stat /x"), errdefs.ErrNotFound)))
	err := <-errc
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "stat /x") {
		t.Errorf("Stat = %v; want ErrNotFound with the daemon's message", err)
	}
}

func TestCancelSendsCancelFrame(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"sleep", "9"}}); errc <- err }()
	req := f.read()
	cancel()
	fr := f.read()
	if fr.Type != proto.TypeCancel || fr.Stream != req.Stream {
		t.Errorf("after cancel the daemon got %s on stream %d; want cancel on %d", fr.Type, fr.Stream, req.Stream)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Exec = %v; want context.Canceled", err)
	}
	// A late response for the forgotten stream is ignored; the connection stays up.
	f.write(proto.TypeResponse, req.Stream, proto.EncodeResponse(proto.ExecResult{}, nil))
	go func() { errc <- c.Ping(context.Background()) }()
	ping := f.read()
	f.write(proto.TypeResponse, ping.Stream, proto.EncodeResponse(proto.PingResult{}, nil))
	if err := <-errc; err != nil {
		t.Errorf("Ping after a late response: %v", err)
	}
}

func TestHostileDaemon(t *testing.T) {
	tests := []struct {
		name string
		send func(f *fakeDaemon, id uint32)
	}{
		{"exceeds window", func(f *fakeDaemon, id uint32) {
			chunk := proto.AppendData(nil, proto.ChannelStdout, 0, make([]byte, proto.InitialWindow/2))
			for range 3 {
				if proto.WriteFrame(f.conn, proto.Frame{Type: proto.TypeData, Stream: id, Payload: chunk}) != nil {
					return // the client hung up
				}
			}
		}},
		{"oversized frame", func(f *fakeDaemon, id uint32) {
			f.conn.Write([]byte{0x7f, 0, 0, 0, byte(proto.TypeData), 0, 0, 0, byte(id)})
		}},
		{"bad data payload", func(f *fakeDaemon, id uint32) { f.write(proto.TypeData, id, []byte{1}) }},
		{"request from daemon", func(f *fakeDaemon, id uint32) { f.write(proto.TypeRequest, id, []byte(`{"op":"ping"}`)) }},
		{"over-granted window", func(f *fakeDaemon, id uint32) {
			f.write(proto.TypeWindow, id, proto.EncodeWindow(proto.InitialWindow))
			f.write(proto.TypeWindow, id, proto.EncodeWindow(proto.InitialWindow))
		}},
		{"event flood", func(f *fakeDaemon, id uint32) {
			for range proto.MaxQueuedEvents + 1 {
				if proto.WriteFrame(f.conn, proto.Frame{Type: proto.TypeEvent, Stream: id, Payload: []byte(`{"kind":"dropped"}`)}) != nil {
					return // the client hung up
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, f := newFake(t, Options{})
			// A call nobody reads from: what the daemon sends stays queued.
			go c.open(proto.OpReadFile, &proto.ReadFileRequest{Path: "/x"})
			req := f.read()
			go func() {
				for {
					if _, err := proto.ReadFrame(f.r); err != nil {
						return
					}
				}
			}()
			tt.send(f, req.Stream)
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("client kept the connection to a misbehaving daemon")
			}
			if !errors.Is(c.Err(), errdefs.ErrUnavailable) {
				t.Errorf("Err = %v; want ErrUnavailable", c.Err())
			}
		})
	}
}

func TestSummarizeArgs(t *testing.T) {
	req := &proto.ExecRequest{Argv: []string{"env"}, Env: []string{"TOKEN=s3cret", "A=b"}, Stdin: []byte("in")}
	got, _ := json.Marshal(summarizeArgs(req))
	if strings.Contains(string(got), "s3cret") || !strings.Contains(string(got), "TOKEN=\\u003credacted\\u003e") {
		t.Errorf("summary %s leaks or lacks the env key", got)
	}
	if req.Env[0] != "TOKEN=s3cret" {
		t.Errorf("summarizeArgs modified the request")
	}
	start := &proto.StartRequest{Argv: []string{"x"}, Env: []string{"K=v"}}
	got, _ = json.Marshal(summarizeArgs(start))
	if strings.Contains(string(got), "K=v") {
		t.Errorf("start summary %s leaks env", got)
	}
	// An identity's seed and interpreter key are secrets: neither in any encoding, the host name kept.
	id := proto.IdentityRequest{Seed: bytes.Repeat([]byte{0xa5}, proto.IdentitySeedSize), InterpreterKey: bytes.Repeat([]byte{0x5a}, proto.InterpreterKeySize),
		Hostname: "sb-host", Restored: true}
	for _, args := range []any{&id, id} {
		got, _ = json.Marshal(summarizeArgs(args))
		raw, _ := json.Marshal(id)
		var full map[string]any
		_ = json.Unmarshal(raw, &full)
		for _, secret := range []string{full["seed"].(string), full["interpreter_key"].(string), "a5a5a5", "5a5a5a"} {
			if strings.Contains(string(got), secret) {
				t.Errorf("identity summary %s leaks a secret", got)
			}
		}
		if !strings.Contains(string(got), "sb-host") {
			t.Errorf("identity summary %s lacks the host name", got)
		}
	}
}

func TestFileAuditConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := NewFileAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				a.Record(Entry{Time: time.Now(), Direction: ToSandbox, Stream: uint32(i*1000 + j), Type: "data", Size: j})
			}
		}()
	}
	wg.Wait()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a.Record(Entry{}) // after Close: ignored
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines; want 800", len(lines))
	}
	seen := map[uint32]bool{}
	for _, l := range lines {
		var e Entry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		seen[e.Stream] = true
	}
	if len(seen) != 800 {
		t.Errorf("%d distinct entries; want 800", len(seen))
	}
	fi, _ := os.Stat(path)
	if diff := cmp.Diff(os.FileMode(0o600), fi.Mode().Perm()); diff != "" {
		t.Errorf("mode mismatch (-want +got):\n%s", diff)
	}
}

// TestFileAuditRotates: a sandbox flooding its channel fills bounded room: past the size the file
// becomes PATH.1 and a new one starts, holding the newest entries.
func TestFileAuditRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := NewFileAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	a.SetMaxFileBytes(4 << 10)
	for j := range 1000 {
		a.Record(Entry{Time: time.Now(), Direction: ToSandbox, Stream: uint32(j), Type: "data", Size: j})
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	var last Entry
	for _, p := range []string{path, path + ".1"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 5<<10 {
			t.Errorf("%s: %d bytes; want about 4 KiB at most", p, fi.Size())
		}
	}
	older, _ := os.ReadFile(path + ".1")
	newer, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(older)+string(newer)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Stream != 999 {
		t.Errorf("newest entry: %+v, %v; want stream 999", last, err)
	}
}
