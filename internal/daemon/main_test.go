package daemon_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
)

// TestMain lets the test binary act as the daemon binary (see runMain).
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("AIRLOCK_TEST_DAEMON_MAIN"); ok {
		os.Exit(daemon.Main(strings.Fields(args)))
	}
	os.Exit(m.Run())
}

func TestMainFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{}, 2},
		{[]string{"-bogus"}, 2},
		{[]string{"-socket", "/tmp/x", "-log-level", "loud"}, 2},
		{[]string{"-version"}, 0},
	} {
		if got := daemon.Main(tt.args); got != tt.want {
			t.Errorf("Main(%q) = %d; want %d", tt.args, got, tt.want)
		}
	}
}

// TestMainProcess runs Main in a child process (as a subreaper, reaping everything), uses it, and
// stops it with SIGTERM.
func TestMainProcess(t *testing.T) {
	dir, err := os.MkdirTemp("", "airlockd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "d.sock")
	args := []string{"-socket", socket, "-user", "me", "-uid", strconv.Itoa(os.Getuid()), "-gid", strconv.Itoa(os.Getgid()), "-home", dir}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_DAEMON_MAIN="+strings.Join(args, " "))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	var c *link.Client
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err = link.Dial(context.Background(), socket, link.Options{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not listen: %v", err)
		}
	}
	defer c.Close()
	ctx := testCtx(t)
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v, %v; want 0600", fi, err)
	}

	// An orphan (the backgrounded sleep) is re-parented to the daemon and must be reaped, not left a
	// zombie.
	res, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.1 & echo $!"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(orphan, 0); err == syscall.ESRCH {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d was not reaped (state %s)", orphan, procState(orphan))
		}
	}

	pidFile := filepath.Join(dir, "pid")
	if _, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 60"}}, link.ProcessOptions{}); err != nil {
		t.Fatal(err)
	}
	pid := waitPidFile(t, pidFile)

	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("daemon exited with %v; want 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not exit after SIGTERM")
	}
	waitGone(t, pid)
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Errorf("client connection still up after the daemon exited")
	}
}

func procState(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return string(b[i+2])
	}
	return "?"
}
