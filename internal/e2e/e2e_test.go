// Package e2e holds end-to-end tests: a real Airlock (SQLite, gVisor sandboxes, the real daemon) driven
// through the public API with the Go SDK, as a user would.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func create(t *testing.T, e *testenv.Env, req airlock.CreateSandboxRequest) *airlock.Sandbox {
	t.Helper()
	sb, err := e.Client.CreateSandbox(ctxT(t, time.Minute), req)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	if sb.State != airlock.StateRunning {
		t.Fatalf("created sandbox is %s (%s); want running", sb.State, sb.Reason)
	}
	return sb
}

func run(t *testing.T, e *testenv.Env, id string, req airlock.ExecRequest) *airlock.ExecResult {
	t.Helper()
	res, err := e.Client.Exec(ctxT(t, 2*time.Minute), id, req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Cmd, err)
	}
	return res
}

func sh(t *testing.T, e *testenv.Env, id, script string) *airlock.ExecResult {
	t.Helper()
	return run(t, e, id, airlock.ExecRequest{Cmd: []string{"bash", "-c", script}})
}

func TestExecPython(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	sb := create(t, e, airlock.CreateSandboxRequest{Env: map[string]string{"GREETING": "hi"}})
	res := run(t, e, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", "print(6*7)"}})
	if res.ExitCode != 0 || res.Stdout != "42\n" {
		t.Fatalf("python3 print(6*7) = exit %d, stdout %q, stderr %q; want 0, \"42\\n\"", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = sh(t, e, sb.ID, "echo out; echo err >&2; echo $GREETING $HOME $(id -un) $(pwd); exit 3")
	if res.ExitCode != 3 || res.Stdout != "out\nhi /home/user user /home/user\n" || res.Stderr != "err\n" {
		t.Errorf("exec = %+v; want exit 3 with separate streams, env, non-root user in its home", res)
	}
	// Every message on the daemon channel is in the sandbox's audit log; env values are not.
	run(t, e, sb.ID, airlock.ExecRequest{Cmd: []string{"true"}, Env: map[string]string{"TOKEN": "s3cr3t-value-4711"}})
	audit, err := os.ReadFile(filepath.Join(e.DataDir, "node", "audit", sb.ID+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(audit), `"op":"exec"`) || strings.Count(string(audit), "\n") < 4 {
		t.Errorf("audit log lacks the exec calls:\n%s", truncate(string(audit)))
	}
	if strings.Contains(string(audit), "s3cr3t-value-4711") {
		t.Errorf("audit log holds an env value")
	}
	res = run(t, e, sb.ID, airlock.ExecRequest{Cmd: []string{"id", "-u"}, User: "root"})
	if strings.TrimSpace(res.Stdout) != "0" {
		t.Errorf("id -u as root = %q; want 0", res.Stdout)
	}
	res = run(t, e, sb.ID, airlock.ExecRequest{Cmd: []string{"cat"}, Stdin: "fed\n"})
	if res.Stdout != "fed\n" {
		t.Errorf("cat with stdin = %q; want %q", res.Stdout, "fed\n")
	}
	res = run(t, e, sb.ID, airlock.ExecRequest{Cmd: []string{"sleep", "30"}, TimeoutSeconds: 1})
	if !res.TimedOut {
		t.Errorf("sleep 30 with a 1 s timeout = %+v; want timed_out", res)
	}
}

func TestFiles(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 2*time.Minute)
	c := e.Client
	sb := create(t, e, airlock.CreateSandboxRequest{})
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if _, err := c.WriteFile(ctx, sb.ID, "/home/user/dir/data.bin", bytes.NewReader(data), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadFile(ctx, sb.ID, "/home/user/dir/data.bin")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v; want the 1 MiB written", len(got), err)
	}
	fi, err := c.Stat(ctx, sb.ID, "/home/user/dir/data.bin")
	if err != nil || fi.Size != int64(len(data)) || fi.Type != "file" || fi.Mode != "0600" {
		t.Fatalf("stat = %+v, %v", fi, err)
	}
	if res := sh(t, e, sb.ID, "stat -c '%U %a' /home/user/dir/data.bin"); res.Stdout != "user 600\n" {
		t.Errorf("owner and mode inside = %q; want user 600", res.Stdout)
	}
	if _, err := c.Mkdir(ctx, sb.ID, "/home/user/a/b/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Move(ctx, sb.ID, "/home/user/dir/data.bin", "/home/user/a/b/c/moved.bin"); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListFiles(ctx, sb.ID, "/home/user/a/b/c")
	if err != nil || len(list.Entries) != 1 || list.Entries[0].Name != "moved.bin" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	tr, err := c.DownloadTar(ctx, sb.ID, "/home/user/a")
	if err != nil {
		t.Fatal(err)
	}
	archive, err := io.ReadAll(tr)
	tr.Close()
	if err != nil || len(archive) < len(data) {
		t.Fatalf("tar download: %d bytes, %v", len(archive), err)
	}
	if err := c.UploadTar(ctx, sb.ID, "/home/user/restored", bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	if res := sh(t, e, sb.ID, "cmp /home/user/restored/a/b/c/moved.bin /home/user/a/b/c/moved.bin && echo same"); res.Stdout != "same\n" {
		t.Errorf("tar round trip: %+v", res)
	}
	if err := c.Remove(ctx, sb.ID, "/home/user/a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, sb.ID, "/home/user/a"); !errors.Is(err, airlock.ErrNotFound) {
		t.Errorf("stat after remove = %v; want ErrNotFound", err)
	}
}

func TestExecStreamAndAttach(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 2*time.Minute)
	sb := create(t, e, airlock.CreateSandboxRequest{})
	var out bytes.Buffer
	st, err := e.Client.ExecStream(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"cat"}}, airlock.StreamOptions{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("hello over the stream\n")); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	code, err := st.Wait()
	if err != nil || code != 0 || out.String() != "hello over the stream\n" {
		t.Fatalf("stream cat: exit %d, %v, out %q", code, err, out.String())
	}

	// A PTY process, left running, then re-attached after the client went away.
	var pty bytes.Buffer
	st, err = e.Client.ExecStream(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c", "tty; stty size; for i in 1 2 3; do echo tick $i; sleep 0.5; done"}, PTY: &airlock.PTYSize{Rows: 33, Cols: 101}}, airlock.StreamOptions{Stdout: &pty})
	if err != nil {
		t.Fatal(err)
	}
	pid := st.ProcessID()
	st.Close() // the client goes away
	time.Sleep(2 * time.Second)
	procs, err := e.Client.ListProcesses(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range procs.Processes {
		found = found || p.ID == pid
	}
	if !found {
		t.Fatalf("process %s not listed in %+v", pid, procs)
	}
	// From the first byte: the client that went away may have been sent output it never wrote out (it
	// closed first), and an attach without an offset resumes after what was sent.
	var again bytes.Buffer
	from := int64(0)
	at, err := e.Client.Attach(ctx, sb.ID, pid, airlock.AttachOptions{StreamOptions: airlock.StreamOptions{Stdout: &again}, StdoutOffset: &from})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := at.Wait(); err != nil || code != 0 {
		t.Fatalf("attach wait: %d, %v", code, err)
	}
	all := again.String()
	for _, want := range []string{"/dev/pts/", "33 101", "tick 1", "tick 3"} {
		if !strings.Contains(all, want) {
			t.Errorf("PTY output %q lacks %q", all, want)
		}
	}
}

// hostAddr returns a non-loopback address of this machine, where a test server can listen.
func hostAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	return "127.0.0.1"
}

// TestHostile runs the abuse cases: each must stay inside its sandbox.
func TestHostile(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 10*time.Minute)
	c := e.Client

	t.Run("fork bomb", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{MemoryMB: 1024})
		res := run(t, e, sb.ID, airlock.ExecRequest{TimeoutSeconds: 60, Cmd: []string{"python3", "-c", `
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print(n, e.errno)
        break
    if pid == 0:
        try:
            os.execv("/bin/sleep", ["sleep", "20"])
        finally:
            os._exit(0)
    n += 1
`}})
		fields := strings.Fields(res.Stdout)
		if len(fields) != 2 {
			t.Fatalf("fork bomb output %q (stderr %q); want the count of forks and the errno", res.Stdout, res.Stderr)
		}
		n, _ := strconv.Atoi(fields[0])
		if n > 512 || fields[1] != "11" {
			t.Errorf("forked %d processes, stopped by errno %s; want at most 512 (the process limit), stopped by EAGAIN (11)", n, fields[1])
		}
		if err := exec.Command("true").Run(); err != nil {
			t.Errorf("host cannot fork after the bomb: %v", err)
		}
		sh(t, e, sb.ID, "pkill -u user sleep; pkill -u user python3; true")
		if res := sh(t, e, sb.ID, "echo alive"); res.Stdout != "alive\n" {
			t.Errorf("sandbox after the bomb: %+v", res)
		}
	})

	t.Run("memory bomb", func(t *testing.T) {
		bystander := create(t, e, airlock.CreateSandboxRequest{})
		sb := create(t, e, airlock.CreateSandboxRequest{MemoryMB: 128})
		_, _ = c.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", "x = bytearray(1 << 30); print(len(x))"}, TimeoutSeconds: 60})
		got := waitState(t, e, sb.ID, airlock.StateFailed, 30*time.Second)
		if !strings.Contains(got.Reason, "memory") {
			t.Errorf("memory bomb: sandbox %s, reason %q; want failed, out of memory", got.State, got.Reason)
		}
		if res := sh(t, e, bystander.ID, "echo unaffected"); res.Stdout != "unaffected\n" {
			t.Errorf("bystander sandbox: %+v", res)
		}
	})

	t.Run("disk fill", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{DiskMB: 64})
		var before, after syscallStatfs
		statfs(t, e.DataDir, &before)
		res := sh(t, e, sb.ID, "dd if=/dev/zero of=/home/user/fill bs=1M count=200 2>&1; echo rc=$?")
		if !strings.Contains(res.Stdout, "No space left on device") {
			t.Errorf("dd of 200 MiB on a 64 MiB disk: %q; want No space left on device", res.Stdout)
		}
		statfs(t, e.DataDir, &after)
		if used := int64(before.avail-after.avail) * before.bsize; used > 100<<20 {
			t.Errorf("host lost %d MiB to a 64 MiB sandbox disk", used>>20)
		}
		if res := sh(t, e, sb.ID, "rm /home/user/fill && echo ok"); res.Stdout != "ok\n" {
			t.Errorf("sandbox after disk fill: %+v", res)
		}
	})

	t.Run("host files", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{})
		for _, p := range []string{e.KeyFile, e.DataDir, "/root/.bash_history", filepath.Join(e.DataDir, "airlock.db")} {
			for _, user := range []string{"user", "root"} {
				res := run(t, e, sb.ID, airlock.ExecRequest{User: user, Cmd: []string{"cat", p}})
				if res.ExitCode == 0 {
					t.Errorf("as %s, cat %s succeeded: %q", user, p, truncate(res.Stdout))
				}
			}
			if _, err := c.ReadFile(ctx, sb.ID, p); err == nil {
				t.Errorf("files API read of host path %s succeeded", p)
			}
		}
		res := run(t, e, sb.ID, airlock.ExecRequest{User: "root", Cmd: []string{"cat", "/etc/shadow"}})
		host, _ := os.ReadFile("/etc/shadow")
		if strings.Contains(res.Stdout, "$") || (len(host) > 0 && res.Stdout == string(host)) {
			t.Errorf("/etc/shadow inside holds password hashes or the host's file: %q", truncate(res.Stdout))
		}
		if res := run(t, e, sb.ID, airlock.ExecRequest{User: "root", Cmd: []string{"ls", "-A", "/root"}}); strings.TrimSpace(res.Stdout) != "" {
			t.Errorf("/root inside is not empty: %q", res.Stdout)
		}
	})

	t.Run("host processes invisible", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{})
		res := sh(t, e, sb.ID, "ls /proc | grep -c '^[0-9]'; cat /proc/1/cmdline | tr '\\0' ' '")
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		n, _ := strconv.Atoi(lines[0])
		if n == 0 || n > 10 {
			t.Errorf("sandbox sees %d processes; want only its own few", n)
		}
		if len(lines) < 2 || !strings.Contains(lines[1], "/.airlock/init") {
			t.Errorf("PID 1 inside is %q; want the daemon", lines)
		}
		mine := fmt.Sprintf("/proc/%d", os.Getpid())
		if res := sh(t, e, sb.ID, "cat "+mine+"/cmdline"); strings.Contains(res.Stdout, "test") {
			t.Errorf("sandbox reads the test process's cmdline: %q", res.Stdout)
		}
	})

	t.Run("no network route out", func(t *testing.T) {
		ln, err := net.Listen("tcp", hostAddr(t)+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				conn.Write([]byte("reached"))
				conn.Close()
			}
		}()
		sb := create(t, e, airlock.CreateSandboxRequest{})
		res := run(t, e, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", fmt.Sprintf(`
import socket
try:
    s = socket.create_connection((%q, %d), timeout=3)
    print("connected", s.recv(16))
except OSError as e:
    print("blocked", e)
`, ln.Addr().(*net.TCPAddr).IP.String(), ln.Addr().(*net.TCPAddr).Port)}})
		if !strings.HasPrefix(res.Stdout, "blocked") {
			t.Errorf("connect to a host server from inside: %q (stderr %q); want blocked", res.Stdout, res.Stderr)
		}
		res = sh(t, e, sb.ID, "cat /proc/net/route | wc -l; python3 -c 'import socket; socket.getaddrinfo(\"example.com\", 80)' 2>&1 | tail -1")
		if strings.Contains(res.Stdout, "example.com") && !strings.Contains(res.Stdout, "rror") {
			t.Errorf("name resolution works inside: %q", res.Stdout)
		}
	})

	t.Run("template read-only", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{})
		for _, user := range []string{"user", "root"} {
			res := run(t, e, sb.ID, airlock.ExecRequest{User: user, Cmd: []string{"bash", "-c", "echo evil > /usr/bin/airlock-evil"}})
			if res.ExitCode == 0 {
				t.Errorf("as %s, writing /usr/bin succeeded", user)
			}
		}
		if _, err := os.Stat("/usr/bin/airlock-evil"); err == nil {
			os.Remove("/usr/bin/airlock-evil")
			t.Fatal("a sandbox wrote into the host's /usr")
		}
		tplPasswd := filepath.Join(e.DataDir, "templates", "default", "rootfs", "etc", "passwd")
		before, _ := os.ReadFile(tplPasswd)
		res := run(t, e, sb.ID, airlock.ExecRequest{User: "root", Cmd: []string{"bash", "-c", "echo evil:x:0:0::/:/bin/sh >> /etc/passwd && tail -1 /etc/passwd"}})
		after, _ := os.ReadFile(tplPasswd)
		if !bytes.Equal(before, after) {
			t.Errorf("root inside changed the template's /etc/passwd (exec said %q)", res.Stdout)
		}
		other := create(t, e, airlock.CreateSandboxRequest{})
		if res := sh(t, e, other.ID, "grep -c evil /etc/passwd"); strings.TrimSpace(res.Stdout) != "0" {
			t.Errorf("another sandbox sees the first one's change to /etc/passwd")
		}
	})

	t.Run("runtime killed", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{})
		if err := syscall.Kill(sandboxPID(t, e, sb.ID), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		got := waitState(t, e, sb.ID, airlock.StateFailed, 30*time.Second)
		if got.Reason == "" {
			t.Errorf("sandbox whose runtime was killed is failed without a reason")
		}
	})

	t.Run("daemon killed", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{})
		out, err := exec.Command("runsc", "--root="+filepath.Join(e.DataDir, "runtime", "runsc"), "kill", sb.ID, "KILL").CombinedOutput()
		if err != nil {
			t.Fatalf("runsc kill: %v: %s", err, out)
		}
		got := waitState(t, e, sb.ID, airlock.StateFailed, 30*time.Second)
		if got.Reason == "" {
			t.Errorf("sandbox whose daemon was killed is failed without a reason")
		}
		if _, err := c.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, airlock.ErrFailedPrecondition) {
			t.Errorf("exec in a failed sandbox = %v; want ErrFailedPrecondition", err)
		}
	})
}

// sandboxPID reads the host PID of a sandbox's gVisor sandbox process from runsc.
func sandboxPID(t *testing.T, e *testenv.Env, id string) int {
	t.Helper()
	out, err := exec.Command("runsc", "--root="+filepath.Join(e.DataDir, "runtime", "runsc"), "state", id).Output()
	if err != nil {
		t.Fatalf("runsc state %s: %v", id, err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		t.Fatalf("runsc state %s: %q, %v", id, out, err)
	}
	return st.Pid
}

func waitState(t *testing.T, e *testenv.Env, id, state string, limit time.Duration) *airlock.Sandbox {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		sb, err := e.Client.GetSandbox(ctxT(t, 10*time.Second), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == state {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s (%s) after %s; want %s", id, sb.State, sb.Reason, limit, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
