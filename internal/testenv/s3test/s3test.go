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
	logPath := filepath.Join(dir, "versitygw.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own copy
	log := func() string { b, _ := os.ReadFile(logPath); return strings.TrimSpace(string(b)) }
	cmd := exec.Command(bin, "--port", addr, "posix", root)
	cmd.Env = append(os.Environ(), "HOME="+dir, "ROOT_ACCESS_KEY_ID="+srv.AccessKey, "ROOT_SECRET_ACCESS_KEY="+srv.SecretKey)
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
		t.Fatalf("start versitygw: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	c, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err = c.MakeBucket(ctx, srv.Bucket, minio.MakeBucketOptions{})
		if err == nil {
			return srv
		}
		select {
		case <-exited:
			t.Fatalf("versitygw exited: %s", log())
		case <-ctx.Done():
			t.Fatalf("versitygw on %s did not make bucket %s: %v; log: %s", addr, srv.Bucket, err, log())
		case <-time.After(50 * time.Millisecond):
		}
	}
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
