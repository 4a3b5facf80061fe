package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/app"
	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/testenv/s3test"
	"github.com/airlockrun/airlock/sdk/go/airlock"
	"golang.org/x/sys/unix"
)

// Node is a node in a process of its own (here: in the test's process, as airlock node run would run
// it) that joined the cluster of an Env.
type Node struct {
	ID      string
	DataDir string
	// Addr is its node API's address.
	Addr string

	cancel context.CancelFunc
	done   chan error
	log    *syncBuffer
	cmd    *exec.Cmd // with NodeOptions.Process
}

// NodeOptions tune StartNode.
type NodeOptions struct {
	// DataDir reuses a node's data directory (to test restarts); empty: a new one, and the node joins.
	DataDir string
	// Listen is the node API's address; empty: a free port on loopback.
	Listen string
	// MaxSandboxes bounds the node's sandboxes; zero: the default.
	MaxSandboxes int
	// SandboxAddresses is the range of the node's sandboxes' addresses (Process only); empty: the
	// default.
	SandboxAddresses string
	// ControlPlanes are the cluster ports the node reports to, in turn; empty: the Env's.
	ControlPlanes []string
	// BlobDir or S3 is the cluster's blob store the node writes snapshots into (S3 with the prefix
	// the replicas use, "airlock/"). Neither: the Env's DataDir/blobs, when it has one.
	BlobDir string
	S3      *s3test.Server
	// Process runs the node as a process of its own (airlock node run from the test binary), which
	// Kill can kill with SIGKILL; otherwise it runs in the test's process.
	Process bool
	// DiskBytes, if set, puts a new data directory on a file system of its own of that size (a tmpfs),
	// which a test can fill up.
	DiskBytes int64
}

// StartNode joins a node of ID id to e's cluster through the CLI (airlock node join, with a join token
// of its own) and runs it until the test ends (or Stop).
func StartNode(t testing.TB, e *Env, id string, opts NodeOptions) *Node {
	t.Helper()
	if e.ClusterURL == "" && len(opts.ControlPlanes) == 0 {
		t.Fatal("StartNode: the control plane has no cluster port (Options.Cluster)")
	}
	if opts.BlobDir == "" && opts.S3 == nil && e.DataDir != "" {
		opts.BlobDir = filepath.Join(e.DataDir, "blobs")
	}
	dir := opts.DataDir
	if dir == "" {
		var err error
		dir, err = os.MkdirTemp("", "airlock-test-node-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if opts.DiskBytes > 0 {
			if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", opts.DiskBytes)); err != nil {
				t.Fatalf("StartNode: a file system of its own for %s: %v", dir, err)
			}
			t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tok, err := e.Client.CreateJoinToken(ctx, airlock.CreateJoinTokenRequest{TTLSeconds: 3600, Description: "test node " + id})
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := cli.Run(ctx, []string{"--url", e.URL, "--data-dir", dir, "node", "join", "--token", tok.Token, "--id", id,
			"--host", "127.0.0.1", "--ca-fingerprint", tok.CAFingerprint}, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
			t.Fatalf("node join %s: %d %s %s", id, code, out.String(), errb.String())
		}
	}
	cps := opts.ControlPlanes
	if len(cps) == 0 {
		cps = []string{e.ClusterURL}
	}
	var n *Node
	for attempt := 1; ; attempt++ {
		listen := opts.Listen
		if listen == "" {
			listen = "127.0.0.1:0"
			if opts.Process {
				listen = freePort(t)
			}
		}
		var err error
		if n, err = launchNode(t, id, dir, cps, listen, opts); err == nil {
			break
		}
		// The free port was taken before the node bound it: try another.
		if opts.Process && opts.Listen == "" && attempt < 3 && strings.Contains(n.Logs(), "address already in use") {
			continue
		}
		t.Fatalf("node %s did not start: %v\n%s", id, err, n.Logs())
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stop node %s: %v", id, err)
		}
		if t.Failed() {
			t.Logf("node %s log:\n%s", id, n.Logs())
		}
	})
	return n
}

// launchNode runs node id (joined, with its state in dir) and waits until it serves; an error if it
// exited or did not serve within 60 s (then it is stopped).
func launchNode(t testing.TB, id, dir string, cps []string, listen string, opts NodeOptions) (*Node, error) {
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{ID: id, DataDir: dir, cancel: cancel, done: make(chan error, 1), log: logs}
	ready := make(chan string, 1)
	if opts.Process {
		n.cmd = exec.Command(Binary(t), "--data-dir", dir, "node", "run", "--listen", listen)
		for _, cp := range cps {
			n.cmd.Args = append(n.cmd.Args, "--control-plane", cp)
		}
		n.cmd.Stdout, n.cmd.Stderr = logs, logs
		if opts.MaxSandboxes > 0 {
			n.cmd.Args = append(n.cmd.Args, "--max-sandboxes", fmt.Sprint(opts.MaxSandboxes))
		}
		if opts.SandboxAddresses != "" {
			n.cmd.Args = append(n.cmd.Args, "--sandbox-addresses", opts.SandboxAddresses)
		}
		switch {
		case opts.S3 != nil:
			n.cmd.Args = append(n.cmd.Args, "--s3-endpoint", opts.S3.Endpoint, "--s3-bucket", opts.S3.Bucket, "--s3-prefix", s3Prefix, "--s3-insecure")
			n.cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+opts.S3.AccessKey, "AWS_SECRET_ACCESS_KEY="+opts.S3.SecretKey)
		case opts.BlobDir != "":
			n.cmd.Args = append(n.cmd.Args, "--blob-dir", opts.BlobDir)
		}
		if err := n.cmd.Start(); err != nil {
			cancel()
			return n, err
		}
		go func() {
			err := n.cmd.Wait()
			n.done <- err
		}()
		go func() {
			<-ctx.Done()
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
		}()
		go func() {
			for ctx.Err() == nil {
				if strings.Contains(logs.String(), "serves control planes at") {
					ready <- listen
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	} else {
		go n.runInProcess(ctx, DaemonBinary(t), Binary(t), cps, listen, opts, ready)
	}
	select {
	case n.Addr = <-ready:
		return n, nil
	case err := <-n.done:
		cancel()
		return n, fmt.Errorf("exited: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		<-n.done
		return n, fmt.Errorf("did not serve within 60s")
	}
}

// Kill kills a node started with NodeOptions.Process with SIGKILL, as a crash would: its sandboxes'
// processes stay behind (a later StartNode on its DataDir settles them).
func (n *Node) Kill() {
	if n.cmd == nil || n.cancel == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.done
	n.cancel()
	n.cancel = nil
}

// freePort returns a loopback address with a port free now.
func freePort(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Stop shuts the node down as SIGTERM would and reports what RunNode returned. Calling it again is
// harmless.
func (n *Node) Stop() error {
	if n.cancel == nil {
		return nil
	}
	n.cancel()
	n.cancel = nil
	select {
	case err := <-n.done:
		return err
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("node %s did not stop within 2 minutes", n.ID)
	}
}

// Logs returns what the node logged so far.
func (n *Node) Logs() string { return n.log.String() }

// runInProcess runs the node in the test's process until ctx ends.
func (n *Node) runInProcess(ctx context.Context, bin, keeperBin string, controlPlanes []string, listen string, opts NodeOptions, ready chan<- string) {
	n.done <- app.RunNode(ctx, app.NodeConfig{
		DataDir:       n.DataDir,
		ControlPlanes: controlPlanes,
		Listen:        listen,
		MaxSandboxes:  opts.MaxSandboxes,
		DaemonBinary:  bin,
		HostsOnly:     true, // tests never send a DNS query off this machine
		BlobDir:       opts.BlobDir,
		S3:            opts.S3.Config(s3Prefix),
		Logger:        slog.New(slog.NewTextHandler(n.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Out:           io.Discard,
		Ready:         func(addr string) { ready <- addr },
		KeeperBinary:  keeperBin,
	})
}
