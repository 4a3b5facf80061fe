package e2e

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// server is `airlock up` run as its own process, as a user runs it.
type server struct {
	cmd *exec.Cmd
	url string
	log *bytes.Buffer
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startServer(t *testing.T, dataDir, addr string, env ...string) *server {
	t.Helper()
	return startServerArgs(t, dataDir, addr, nil, env...)
}

// startServerArgs is startServer with more flags for "airlock up".
func startServerArgs(t *testing.T, dataDir, addr string, args []string, env ...string) *server {
	t.Helper()
	var log bytes.Buffer
	cmd := exec.Command(testenv.Binary(t), append([]string{"up", "--data-dir", dataDir, "--key-file", testenv.KeyFile(dataDir), "--listen", addr}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, url: "http://" + addr, log: &log}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.url + "/v1/health")
		if err == nil {
			resp.Body.Close()
			return s
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("airlock up did not answer within 30s:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCrashRecovery kills the server with SIGKILL while a sandbox runs a process, starts it again, and
// checks that the sandbox was re-adopted with its process and files; then SIGTERM leaves nothing behind.
func TestCrashRecovery(t *testing.T) {
	testenv.RequireSandboxes(t)
	dir, err := os.MkdirTemp("", "airlock-crash-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	addr := freeAddr(t)
	srv := startServer(t, dir, addr)
	t.Cleanup(func() { os.Remove(testenv.KeyFile(dir)) })
	key, err := os.ReadFile(testenv.KeyFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	c := airlock.New(srv.url, airlock.WithAPIKey(strings.TrimSpace(string(key))))
	ctx := ctxT(t, 3*time.Minute)
	sb, err := c.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil || sb.State != airlock.StateRunning {
		t.Fatalf("create: %+v, %v", sb, err)
	}
	if _, err := c.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"sh", "-c", "echo kept > /home/user/f"}}); err != nil {
		t.Fatal(err)
	}
	caBefore, err := c.ReadFile(ctx, sb.ID, "/etc/ssl/certs/airlock-sandbox-ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.ExecStream(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c", "for i in $(seq 1 40); do echo n$i; sleep 0.25; done"}}, airlock.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := st.ProcessID()
	st.Close()

	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.cmd.Wait()
	srv = startServer(t, dir, addr)
	defer func() {
		srv.cmd.Process.Signal(syscall.SIGTERM)
		srv.cmd.Wait()
	}()

	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != airlock.StateRunning {
		t.Fatalf("after a crash and restart: %+v, %v; want the sandbox running\n%s", got, err, srv.log.String())
	}
	res, err := c.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"cat", "/home/user/f"}})
	if err != nil || res.Stdout != "kept\n" {
		t.Fatalf("exec after restart: %+v, %v", res, err)
	}
	// The sandbox keeps the interception CA it trusts: the restarted gateway loaded it, not a new one.
	if caAfter, err := c.ReadFile(ctx, sb.ID, "/etc/ssl/certs/airlock-sandbox-ca.pem"); err != nil || !bytes.Equal(caAfter, caBefore) {
		t.Errorf("sandbox CA after restart differs (%v): the gateway made a new CA", err)
	}
	var out bytes.Buffer
	at, err := c.Attach(ctx, sb.ID, pid, airlock.AttachOptions{StreamOptions: airlock.StreamOptions{Stdout: &out}})
	if err != nil {
		t.Fatalf("re-attach to %s after restart: %v", pid, err)
	}
	if code, err := at.Wait(); err != nil || code != 0 || !strings.Contains(out.String(), "n40") {
		t.Errorf("re-attached process: exit %d, %v, output %q; want it to run to n40", code, err, out.String())
	}

	before, err := testenv.TakeFootprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Files) == 0 {
		t.Fatal("footprint does not see the running sandbox's directory")
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.cmd.Wait(); err != nil {
		t.Errorf("airlock up exited with %v after SIGTERM:\n%s", err, srv.log.String())
	}
	after, err := testenv.TakeFootprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Files) != 0 || len(after.NetNS) != 0 || len(after.Cgroups) != 0 || len(after.Processes) != 0 {
		t.Errorf("after SIGTERM the host still has: %+v", after)
	}
	for _, l := range after.LoopDevices {
		if strings.HasPrefix(l, dir) {
			t.Errorf("after SIGTERM a loop device remains: %s", l)
		}
	}
	for _, m := range after.Mounts {
		if strings.HasPrefix(m, dir) {
			t.Errorf("after SIGTERM a mount remains: %s", m)
		}
	}
}
