package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv/s3test"
)

// lockedBuffer is a bytes.Buffer a process writes into while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// Replica is a control-plane replica (airlock server) run as a process of its own.
// s3Prefix is the key prefix replicas and nodes keep the snapshots under in the test's bucket.
const s3Prefix = "airlock/"

type Replica struct {
	// URL is its API's base URL, ClusterURL its cluster port's.
	URL, ClusterURL string

	// DataDir is its data directory.
	DataDir string

	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan struct{}
	// env is what its environment had added (StartReplica's env), for Restart.
	env []string
}

// ReplicaOptions are what the replicas of one cluster share.
type ReplicaOptions struct {
	// PostgresDSN is the database (pgtest.Start), S3 the bucket (s3test.Start) and MasterKeyFile the
	// master key (made by the first replica if missing).
	PostgresDSN   string
	S3            s3test.Server
	MasterKeyFile string
	// KeyFile is where the first replica on the database saves the operator's first API key.
	KeyFile string
	// Args are more flags for airlock server ("--gc-interval", "30s").
	Args []string
}

// StartReplica runs a replica until the test ends (or Stop, Kill) and waits until both its ports answer.
// env is added to its environment (faultinject.EnvVar, to crash it at a point).
func StartReplica(t testing.TB, name string, opts ReplicaOptions, env ...string) *Replica {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	for attempt := 1; ; attempt++ {
		r, err := launchReplica(t, dir, opts, env)
		if err == nil {
			t.Cleanup(func() {
				r.Stop()
				if t.Failed() {
					t.Logf("replica %s log:\n%s", name, r.log.String())
				}
			})
			return r
		}
		// A free port was taken before the replica bound it: try others.
		if attempt < 3 && strings.Contains(r.log.String(), "address already in use") {
			continue
		}
		t.Fatalf("airlock server %s: %v:\n%s", name, err, r.log.String())
	}
}

// launchReplica runs airlock server with its state in dir on free ports and waits until both its ports
// answer; an error if it exited or did not answer within 60 s (then it is killed).
func launchReplica(t testing.TB, dir string, opts ReplicaOptions, env []string) (*Replica, error) {
	addr, cluster := freePort(t), freePort(t)
	r := &Replica{URL: "http://" + addr, ClusterURL: "https://" + cluster, DataDir: dir, log: &lockedBuffer{}}
	return r, r.launch(t, opts, env)
}

// launch runs the replica's process at its addresses and waits until both its ports answer.
func (r *Replica) launch(t testing.TB, opts ReplicaOptions, env []string) error {
	addr, cluster := strings.TrimPrefix(r.URL, "http://"), strings.TrimPrefix(r.ClusterURL, "https://")
	r.done = make(chan struct{})
	r.env = env
	args := []string{"server", "--data-dir", r.DataDir, "--key-file", opts.KeyFile, "--listen", addr, "--cluster-listen", cluster,
		"--master-key-file", opts.MasterKeyFile, "--s3-endpoint", opts.S3.Endpoint, "--s3-bucket", opts.S3.Bucket, "--s3-prefix", s3Prefix, "--s3-insecure"}
	r.cmd = exec.Command(Binary(t), append(args, opts.Args...)...)
	r.cmd.Env = append(os.Environ(), "AIRLOCK_POSTGRES="+opts.PostgresDSN, "AWS_ACCESS_KEY_ID="+opts.S3.AccessKey, "AWS_SECRET_ACCESS_KEY="+opts.S3.SecretKey)
	r.cmd.Env = append(r.cmd.Env, env...)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		close(r.done)
		return err
	}
	done := r.done
	go func() { _ = r.cmd.Wait(); close(done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(r.URL + "/v1/health")
		if err == nil {
			resp.Body.Close()
			if c, err := net.Dial("tcp", cluster); err == nil {
				c.Close()
				return nil
			}
		}
		select {
		case <-done:
			return errors.New("exited")
		default:
		}
		if time.Now().After(deadline) {
			r.Kill()
			return errors.New("did not answer within 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart starts a replica that was killed (or stopped) again, on the same data directory and ports, as
// an operator's service manager would, and waits until it answers. It fails the test if it does not
// within a minute (a port still held is retried).
func (r *Replica) Restart(t testing.TB, opts ReplicaOptions) {
	t.Helper()
	<-r.done
	deadline := time.Now().Add(time.Minute)
	for {
		err := r.launch(t, opts, r.env)
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !strings.Contains(r.log.String(), "address already in use") {
			t.Fatalf("restart replica %s: %v:\n%s", r.DataDir, err, r.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// IO reports the bytes the replica's process has read and written so far through system calls: files,
// sockets and pipes alike (rchar + wchar of /proc/PID/io).
func (r *Replica) IO() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", r.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	var total int64
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && (k == "rchar" || k == "wchar") {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, err
			}
			total += n
		}
	}
	return total, nil
}

// Stop stops the replica as SIGTERM would. Calling it again is harmless.
func (r *Replica) Stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(time.Minute):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// Done is closed once the replica's process exited.
func (r *Replica) Done() <-chan struct{} { return r.done }

// Kill kills the replica with SIGKILL, as a crash would.
func (r *Replica) Kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// Logs returns what the replica logged so far.
func (r *Replica) Logs() string { return r.log.String() }

// APIKey reads the operator's first API key the first replica saved.
func (o ReplicaOptions) APIKey(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(o.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
