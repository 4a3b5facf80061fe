package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// daemonNode is the fake node with a real daemon behind every sandbox's link: one served in-process on
// a unix socket, running processes as the current user on this host's files (paths in the tests are
// under a temporary directory).
type daemonNode struct {
	*fakeNode
	cl *link.Client

	mu sync.Mutex
	// stale is how many Links from now return a channel that closed already, as one a checkpoint
	// replaced does; guarded by mu.
	stale int
	links int // guarded by mu
}

func (n *daemonNode) Link(ctx context.Context, id string) (*link.Client, error) {
	if !n.isRunning(id) {
		return nil, errors.New("sandbox not running on the fake node")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.links++
	if n.stale > 0 {
		n.stale--
		a, b := net.Pipe()
		b.Close()
		cl := link.NewClient(a, link.Options{})
		<-cl.Done()
		return cl, nil
	}
	return n.cl, nil
}

// setupIO returns a Service whose sandboxes' links reach an in-process daemon, a running sandbox of its
// tenant, and a temporary directory to work in.
func setupIO(t *testing.T, cfg daemon.Config) (s *Service, tenant, sandboxID, dir string) {
	t.Helper()
	ctx := context.Background()
	sockDir, err := os.MkdirTemp("", "cpio")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	socket := filepath.Join(sockDir, "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	name := "me"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	dir = t.TempDir()
	cfg.DefaultUser = daemon.User{Name: name, UID: os.Getuid(), GID: os.Getgid(), Home: dir}
	dctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Serve(dctx, ln, cfg, nil) }()
	cl, err := link.Dial(ctx, socket, link.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("daemon did not stop")
		}
	})

	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	s = newService(t, st, &daemonNode{fakeNode: newFakeNode(t), cl: cl}, clk)
	key, err := s.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, p.TenantID, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return s, p.TenantID, sb.ID, dir
}

// failWriter fails the test if anything is written to it.
type failWriter struct{ t *testing.T }

func (w failWriter) Write(p []byte) (int, error) {
	w.t.Errorf("%d bytes written where none should be", len(p))
	return len(p), nil
}

func TestSandboxIOFiles(t *testing.T) {
	ctx := context.Background()
	s, tn, id, dir := setupIO(t, daemon.Config{})

	// WriteFile makes the missing parent and describes what it wrote.
	p := filepath.Join(dir, "a/b/data.txt")
	fi, err := s.WriteFile(ctx, tn, id, p, strings.NewReader("hello"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Name != "data.txt" || fi.Path != p || fi.Type != FileTypeFile || fi.Size != 5 || fi.Mode != 0o600 || fi.ModTime.IsZero() {
		t.Errorf("WriteFile = %+v; want a 5-byte regular file, mode 0600", fi)
	}
	var buf bytes.Buffer
	if err := s.ReadFile(ctx, tn, id, p, &buf); err != nil || buf.String() != "hello" {
		t.Errorf("ReadFile = %q, %v; want hello", buf.String(), err)
	}
	if fi, err := s.StatFile(ctx, tn, id, filepath.Join(dir, "a")); err != nil || fi.Type != FileTypeDir {
		t.Errorf("StatFile of the made parent = %+v, %v; want a dir", fi, err)
	}

	// ReadFile refuses what is not a regular file, and a missing one, before writing anything.
	err = s.ReadFile(ctx, tn, id, filepath.Join(dir, "a"), failWriter{t})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || err.Error() != filepath.Join(dir, "a")+" is a dir, not a regular file: invalid argument" {
		t.Errorf("ReadFile of a dir = %v; want invalid argument naming it a dir", err)
	}
	if err := os.Symlink("b/data.txt", filepath.Join(dir, "a/link")); err != nil {
		t.Fatal(err)
	}
	if err := s.ReadFile(ctx, tn, id, filepath.Join(dir, "a/link"), failWriter{t}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ReadFile of a symlink = %v; want invalid argument", err)
	}
	if err := s.ReadFile(ctx, tn, id, filepath.Join(dir, "nope"), failWriter{t}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ReadFile of a missing file = %v; want not found", err)
	}

	// List, mkdir, move, remove.
	list, err := s.ListFiles(ctx, tn, id, filepath.Join(dir, "a"))
	if err != nil || len(list) != 2 || list[0].Name != "b" || list[1].Name != "link" || list[1].Type != FileTypeSymlink || list[1].Target != "b/data.txt" {
		t.Errorf("ListFiles = %+v, %v; want b and the symlink link -> b/data.txt", list, err)
	}
	if fi, err := s.MakeDir(ctx, tn, id, filepath.Join(dir, "x/y")); err != nil || fi.Type != FileTypeDir || fi.Name != "y" {
		t.Errorf("MakeDir = %+v, %v", fi, err)
	}
	moved := filepath.Join(dir, "x/y/moved.txt")
	if fi, err := s.MoveFile(ctx, tn, id, p, moved); err != nil || fi.Path != moved || fi.Size != 5 {
		t.Errorf("MoveFile = %+v, %v", fi, err)
	}
	if _, err := s.MoveFile(ctx, tn, id, p, moved); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("MoveFile of a missing file = %v; want not found", err)
	}
	if err := s.RemoveFile(ctx, tn, id, filepath.Join(dir, "x"), false); err == nil {
		t.Error("RemoveFile of a non-empty dir without recursive succeeded")
	}
	if err := s.RemoveFile(ctx, tn, id, filepath.Join(dir, "a"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StatFile(ctx, tn, id, filepath.Join(dir, "a")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("StatFile after RemoveFile = %v; want not found", err)
	}

	// Tar down and up (into a directory TarUpload makes).
	if err := s.TarDownload(ctx, tn, id, filepath.Join(dir, "nope"), failWriter{t}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("TarDownload of a missing path = %v; want not found", err)
	}
	var archive bytes.Buffer
	if err := s.TarDownload(ctx, tn, id, filepath.Join(dir, "x"), &archive); err != nil || archive.Len() == 0 {
		t.Fatalf("TarDownload = %d bytes, %v", archive.Len(), err)
	}
	if err := s.TarUpload(ctx, tn, id, filepath.Join(dir, "restored/here"), &archive); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := s.ReadFile(ctx, tn, id, filepath.Join(dir, "restored/here/x/y/moved.txt"), &buf); err != nil || buf.String() != "hello" {
		t.Errorf("file after the tar round trip = %q, %v; want hello", buf.String(), err)
	}

	// The reader's own error comes back wrapped, as the API's upload cap needs.
	big := http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(make([]byte, 1<<20))), 1000)
	_, err = s.WriteFile(ctx, tn, id, filepath.Join(dir, "big"), big, 0)
	if mbe := new(http.MaxBytesError); !errors.As(err, &mbe) {
		t.Errorf("WriteFile over a capped reader = %v; want the *http.MaxBytesError", err)
	}
	big = http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(make([]byte, 1<<20))), 1000)
	if mbe := new(http.MaxBytesError); !errors.As(s.TarUpload(ctx, tn, id, filepath.Join(dir, "t"), big), &mbe) {
		t.Error("TarUpload over a capped reader did not return the *http.MaxBytesError")
	}

	if err := CheckPath("/a/../b"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("CheckPath(/a/../b) = %v; want invalid argument", err)
	}
	if err := CheckPath("/a/b"); err != nil {
		t.Errorf("CheckPath(/a/b) = %v", err)
	}
}

func TestSandboxIOExec(t *testing.T) {
	ctx := context.Background()
	s, tn, id, dir := setupIO(t, daemon.Config{})
	res, err := s.Exec(ctx, tn, id, Command{Argv: []string{"sh", "-c", "echo out $X $(pwd); echo err >&2; exit 3"}, Env: []string{"X=hi"}, Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "out hi "+dir+"\n" || string(res.Stderr) != "err\n" || res.TimedOut || res.StdoutTruncated {
		t.Errorf("Exec = %+v; want exit 3, out hi %s, err", res, dir)
	}
	res, err = s.Exec(ctx, tn, id, Command{Argv: []string{"cat"}, Stdin: []byte("fed")})
	if err != nil || string(res.Stdout) != "fed" {
		t.Errorf("Exec cat with stdin = %+v, %v", res, err)
	}
	res, err = s.Exec(ctx, tn, id, Command{Argv: []string{"head", "-c", "100", "/dev/zero"}, MaxOutput: 10})
	if err != nil || len(res.Stdout) != 10 || !res.StdoutTruncated {
		t.Errorf("Exec with MaxOutput 10 = %d bytes, truncated %v, %v; want 10, truncated", len(res.Stdout), res.StdoutTruncated, err)
	}
	res, err = s.Exec(ctx, tn, id, Command{Argv: []string{"sleep", "30"}, Timeout: 100 * time.Millisecond})
	if err != nil || !res.TimedOut || res.Signal == "" {
		t.Errorf("Exec past its timeout = %+v, %v; want timed out, killed", res, err)
	}
	if _, err := s.Exec(ctx, tn, id, Command{Argv: []string{"true"}, Cwd: "relative"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Exec with a relative cwd = %v; want invalid argument", err)
	}

	// A sandbox that is not the tenant's, or not running, takes no calls.
	if _, err := s.Exec(ctx, "tn_other", id, Command{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Exec in another tenant's sandbox = %v; want not found", err)
	}
	if err := s.CheckIO(ctx, tn, id); err != nil {
		t.Errorf("CheckIO of a running sandbox = %v", err)
	}
	if err := s.DeleteSandbox(ctx, tn, id); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckIO(ctx, tn, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("CheckIO of a stopped sandbox = %v; want failed precondition", err)
	}
	if _, err := s.StatFile(ctx, tn, id, dir); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("StatFile in a stopped sandbox = %v; want failed precondition", err)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestSandboxIOProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, tn, id, _ := setupIO(t, daemon.Config{OutputBuffer: 1024})

	// Start, feed stdin, close it, wait.
	var out, errs lockedBuffer
	p, err := s.StartProcess(ctx, tn, id, Command{Argv: []string{"sh", "-c", "cat; echo bye >&2"}}, nil, StreamOptions{Stdout: &out, Stderr: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("typed\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil || st != (ExitStatus{}) || out.String() != "typed\n" || errs.String() != "bye\n" {
		t.Errorf("Wait = %+v, %v, stdout %q, stderr %q; want exit 0 with the echo", st, err, out.String(), errs.String())
	}
	procs, err := s.Processes(ctx, tn, id)
	if err != nil || len(procs) != 1 || procs[0].ID != p.ID() || procs[0].Running || procs[0].Exit == nil || procs[0].Exit.ExitCode != 0 ||
		procs[0].Argv[0] != "sh" || procs[0].PID == 0 || procs[0].StartTime.IsZero() {
		t.Errorf("Processes = %+v, %v; want the exited sh", procs, err)
	}

	// A PTY process: resize through the adapter, then read the size it sees.
	out = lockedBuffer{}
	p, err = s.StartProcess(ctx, tn, id, Command{Argv: []string{"sh", "-c", "read x; stty size"}}, &PTYSize{Rows: 10, Cols: 20}, StreamOptions{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(ctx, 33, 101); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.ExitCode != 0 || !strings.Contains(out.String(), "33 101") {
		t.Errorf("PTY process = %+v, %v, output %q; want exit 0 and the size 33 101", st, err, out.String())
	}

	// Detach, let the output overflow the sandbox's buffer, attach again from the start: the loss is
	// reported by stream name; then a signal ends the process.
	p, err = s.StartProcess(ctx, tn, id, Command{Argv: []string{"sh", "-c", "sleep 0.3; head -c 5000 /dev/zero; echo; echo ready; exec sleep 30"}}, nil, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.ID()
	p.Detach()
	if _, err := p.Wait(ctx); err == nil {
		t.Error("Wait after Detach reported an exit")
	}
	procs, err = s.Processes(ctx, tn, id)
	if err != nil {
		t.Fatal(err)
	}
	running := false
	for _, pi := range procs {
		running = running || pi.ID == pid && pi.Running
	}
	if !running {
		t.Fatalf("detached process %s not running in %+v", pid, procs)
	}
	time.Sleep(1500 * time.Millisecond) // the process printed, unattached, and sleeps
	type drop struct {
		stream string
		bytes  int64
	}
	var (
		dmu   sync.Mutex
		drops []drop
	)
	out = lockedBuffer{}
	from := int64(0)
	a, err := s.AttachProcess(ctx, tn, id, pid, StreamOptions{Stdout: &out, StdoutOffset: &from, OnDropped: func(stream string, n int64) {
		dmu.Lock()
		drops = append(drops, drop{stream, n})
		dmu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID() != pid {
		t.Errorf("attached to %s; want %s", a.ID(), pid)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "ready"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("attached output %q lacks ready", out.String())
		}
	}
	if err := a.Signal(ctx, "TERM"); err != nil {
		t.Fatal(err)
	}
	st, err = a.Wait(ctx)
	if err != nil || st.Signal != "SIGTERM" {
		t.Errorf("Wait after SIGTERM = %+v, %v; want killed by SIGTERM", st, err)
	}
	dmu.Lock()
	if len(drops) == 0 || drops[0].stream != StreamStdout || drops[0].bytes <= 0 {
		t.Errorf("OnDropped calls %+v; want stdout bytes lost beyond the 1 KiB buffer", drops)
	}
	dmu.Unlock()

	if err := s.SignalProcess(ctx, tn, id, "nosuchproc", "TERM"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SignalProcess of an unknown process = %v; want not found", err)
	}
	if _, err := s.AttachProcess(ctx, tn, id, "nosuchproc", StreamOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("AttachProcess of an unknown process = %v; want not found", err)
	}
}

// TestSandboxIOSendsNotStartedAgain: a call that never reached the daemon (its channel had moved) is sent
// again on a new one, up to notStartedTries times; an upload is not once part of it was read.
func TestSandboxIOSendsNotStartedAgain(t *testing.T) {
	ctx := context.Background()
	s, tn, id, _ := setupIO(t, daemon.Config{})
	n := s.sandboxes.nodes.local.(*daemonNode)
	setStale := func(k int) {
		n.mu.Lock()
		n.stale, n.links = k, 0
		n.mu.Unlock()
	}
	links := func() int {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.links
	}
	setStale(notStartedTries - 1)
	res, err := s.Exec(ctx, tn, id, Command{Argv: []string{"echo", "once"}})
	if err != nil || string(res.Stdout) != "once\n" {
		t.Fatalf("Exec after %d moved channels = %q, %v", notStartedTries-1, res.Stdout, err)
	}
	if got := links(); got != notStartedTries {
		t.Errorf("Exec took %d channels; want %d", got, notStartedTries)
	}
	setStale(notStartedTries)
	if _, err := s.Exec(ctx, tn, id, Command{Argv: []string{"true"}}); !errors.Is(err, link.ErrNotStarted) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Exec with every channel moved = %v; want not started (unavailable)", err)
	}
	if got := links(); got != notStartedTries {
		t.Errorf("Exec took %d channels; want %d, then give up", got, notStartedTries)
	}

	in := &countingReader{r: strings.NewReader("abc")}
	if err := in.unsent(link.ErrNotStarted); !errors.Is(err, link.ErrNotStarted) {
		t.Errorf("unsent before a byte was read = %v; want still not started", err)
	}
	io.ReadAll(in)
	if err := in.unsent(fmt.Errorf("write: %w", link.ErrNotStarted)); errors.Is(err, link.ErrNotStarted) || !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "3 bytes") {
		t.Errorf("unsent after the upload was read = %v; want unavailable, final, saying how much was read", err)
	}
}
