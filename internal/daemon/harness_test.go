package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon"
	"github.com/airlockrun/airlock/internal/daemon/link"
)

// testDaemon is a daemon served in-process on a temporary unix socket.
type testDaemon struct {
	socket string
	home   string
	cancel context.CancelFunc
	done   chan error
}

// testConfig runs processes as the current user, with a temporary home.
func testConfig(t testing.TB) daemon.Config {
	t.Helper()
	name := "me"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return daemon.Config{
		DefaultUser: daemon.User{Name: name, UID: os.Getuid(), GID: os.Getgid(), Home: t.TempDir()},
	}
}

// startDaemon serves a daemon until the test ends, then checks that Serve returned nil and left no
// goroutines behind.
func startDaemon(t testing.TB, cfg daemon.Config) *testDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlockd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &testDaemon{socket: socket, home: cfg.DefaultUser.Home, cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- daemon.Serve(ctx, ln, cfg, nil) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-d.done:
			if err != nil {
				t.Errorf("Serve returned %v; want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after cancel")
			return
		}
		checkNoLeaks(t)
	})
	return d
}

// dial connects a client that is closed when the test ends.
func (d *testDaemon) dial(t testing.TB, opts link.Options) *link.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := link.Dial(ctx, d.socket, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// checkNoLeaks fails if goroutines of the daemon or link packages are still running.
func checkNoLeaks(t testing.TB) {
	t.Helper()
	var stacks string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		leaked := false
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "airlock/internal/daemon") && !strings.Contains(g, "checkNoLeaks") &&
				!strings.Contains(g, "testing.tRunner") && !strings.Contains(g, "testing.runBenchmarks") && !strings.Contains(g, "testing.(*B)") {
				leaked = true
			}
		}
		if !leaked {
			return
		}
	}
	t.Errorf("goroutines leaked:\n%s", stacks)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer is a bytes.Buffer safe for concurrent use, with a way to wait for contents.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls until the buffer contains want.
func (b *syncBuffer) waitFor(t testing.TB, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output %q does not contain %q", b.String(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func isErr(err, target error) bool { return errors.Is(err, target) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// dialMux connects to the daemon through a link.Mux and returns n clients sharing that one connection,
// closed (with the Mux) when the test ends.
func (d *testDaemon) dialMux(t testing.TB, n int, opts link.Options) []*link.Client {
	t.Helper()
	conn, err := net.Dial("unix", d.socket)
	if err != nil {
		t.Fatal(err)
	}
	m := link.NewMux(conn, nil)
	t.Cleanup(func() { m.Close() })
	var cs []*link.Client
	for range n {
		c := link.NewClient(m.Pipe(), opts)
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}
