// Package s3test runs a real S3-compatible server for tests: versitygw (github.com/versity/versitygw,
// built from the Go module proxy by scripts/test.sh) over a temporary directory, on a loopback port.
// Start gives each caller its own bucket on a server private to the test; tests skip when versitygw is
// not installed.
package s3test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	blobs3 "github.com/airlockrun/airlock/internal/blob/s3"
)

// Version is the versitygw release scripts/test.sh installs.
const Version = "v1.8.0"

// Server is a running S3-compatible server.
type Server struct {
	// Endpoint is host:port (plain HTTP).
	Endpoint string
	// AccessKey and SecretKey are its root credentials.
	AccessKey, SecretKey string
	// Bucket was made for the caller.
	Bucket string

	p *proc
}

// Config returns the blob/s3 configuration of the bucket under prefix; nil for a nil Server.
func (s *Server) Config(prefix string) *blobs3.Config {
	if s == nil {
		return nil
	}
	return &blobs3.Config{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: prefix, Insecure: true, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
}

var buckets atomic.Int64

// Start runs versitygw for the test (stopped when it ends) and makes a bucket in it.
func Start(t testing.TB) Server {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		t.Skipf("needs versitygw on PATH, a real S3-compatible server (scripts/test.sh installs %s)", Version)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "data")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	srv := Server{Endpoint: addr, AccessKey: "airlocktest", SecretKey: "airlock-test-secret-" + filepath.Base(dir),
		Bucket: fmt.Sprintf("airlock-test-%d", buckets.Add(1))}
	srv.p = &proc{bin: bin, addr: addr, root: root, logPath: filepath.Join(dir, "versitygw.log"),
		env: append(os.Environ(), "HOME="+dir, "ROOT_ACCESS_KEY_ID="+srv.AccessKey, "ROOT_SECRET_ACCESS_KEY="+srv.SecretKey)}
	if err := srv.p.start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	t.Cleanup(srv.p.kill)
	srv.ready(t, true)
	return srv
}

// ready waits until the server answers (and, with makeBucket, has made the bucket), up to 30 s.
func (s Server) ready(t testing.TB, makeBucket bool) {
	t.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if makeBucket {
			err = c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{})
		} else {
			_, err = c.BucketExists(ctx, s.Bucket)
		}
		if err == nil {
			return
		}
		select {
		case <-s.p.done():
			t.Fatalf("versitygw exited: %s", s.p.log())
		case <-ctx.Done():
			t.Fatalf("versitygw on %s did not answer for bucket %s: %v; log: %s", s.Endpoint, s.Bucket, err, s.p.log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Restart kills the server with SIGKILL, as a crash would, and starts it again on the same port and
// data, returning once it answers.
func (s Server) Restart(t testing.TB) {
	t.Helper()
	s.p.kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.p.start()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("start versitygw again: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.ready(t, false)
}

// proc is the server's process, started again by Restart.
type proc struct {
	bin, addr, root, logPath string
	env                      []string

	mu sync.Mutex
	// cmd is the process running now and exited closed once it was reaped; guarded by mu.
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *proc) log() string { b, _ := os.ReadFile(p.logPath); return strings.TrimSpace(string(b)) }

func (p *proc) done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// start starts the server (appending to its log).
func (p *proc) start() error {
	logf, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(p.bin, "--port", p.addr, "posix", p.root)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server dies with the test process, also one that is killed (Pdeathsig). Pdeathsig fires when
	// the thread that started the child exits, and Go ends threads whose goroutine exits locked (the
	// network-namespace code does), so the child is started and waited for on a thread of its own.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		runtime.UnlockOSThread()
		close(exited)
	}()
	if err := <-started; err != nil {
		return err
	}
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return nil
}

// kill kills the server running now, if any, and waits until it was reaped.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// freePort returns a loopback address with a port that was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
