package e2e

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// The red-team battery (issue 19): attacks run as root inside real sandboxes, through the API as a
// tenant would drive them; each asserts containment, and each has a positive control showing that the
// attack was real. Host canary files are checked unchanged, and no new host file appears beside them,
// after every step; a bystander sandbox and the API stay healthy throughout. Other batteries cover the
// rest: TestHostile (fork bomb, memory bomb, disk fill, host files and processes), TestEgressBypassAttempts
// and TestGuardsAreTheOperators (egress and guards), TestEgressFloodStaysInItsSandbox (connection flood),
// and internal/runtime/gvisor's TestLinkDirPlantedFiles and TestDaemonRedirect (the link at the driver).

// plantScript plants, as root, in every directory of the sandbox it can write, links to the host's
// canaries (absolute, and relative enough to climb out of any host directory), under the names the
// host side uses (wake, key, daemon files, image files), plus FIFOs, sockets and directories of links.
const plantScript = `
set -e
c="$1"
for d in /run/airlock /home/user /tmp /root / /etc /var/tmp /dev/shm /run; do
  [ -d "$d" ] || continue
  for n in wake key wake.tmp link.json fs.tar memory checkpoint.img console.log config.json pid; do
    ln -sfn "$c/master.key" "$d/$n" 2>/dev/null || true
  done
  ln -sfn "../../../../../../../../../../$c/shadow" "$d/climb" 2>/dev/null || true
  ln -sfn "$c/created-by-sandbox" "$d/create-me" 2>/dev/null || true
  ln -sfn "$c" "$d/dir-link" 2>/dev/null || true
  mkfifo "$d/fifo" 2>/dev/null || true
  python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$d/sock" 2>/dev/null || true
  mkdir -p "$d/nest" && ln -sfn "$c/airlock.db" "$d/nest/db" 2>/dev/null || true
done
echo planted
`

// TestRedTeam runs the battery on gVisor, the default runtime (TestRedTeamVM on microVMs). Its subtests
// are the attacks; the closing log line counts them.
func TestRedTeam(t *testing.T) {
	testenv.RequireSandboxes(t)
	redTeam(t, "", testenv.Options{})
}

// redTeam runs the battery on runtime rt ("": the default) in a server started with opts.
func redTeam(t *testing.T, rt string, opts testenv.Options) {
	dir := dataDir(t)
	opts.DataDir = dir
	e := testenv.Start(t, opts)
	can := testenv.NewCanaries(t)
	// A VM's files are on its own disk, never in a host directory: there is nothing of it for the host
	// to see.
	isVM := strings.HasPrefix(rt, "vm")
	create := func(t *testing.T, e *testenv.Env, req airlock.CreateSandboxRequest) *airlock.Sandbox {
		t.Helper()
		req.Runtime = rt
		return create(t, e, req)
	}
	newSession := func(t *testing.T, e *testenv.Env, req airlock.CreateSessionRequest) *airlock.Session {
		t.Helper()
		req.Runtime = rt
		return newSession(t, e, req)
	}
	bystander := create(t, e, airlock.CreateSandboxRequest{TimeoutSeconds: 1800})
	healthy := func(t *testing.T, after string) {
		t.Helper()
		ctx := ctxT(t, time.Minute)
		if err := e.Client.Health(ctx); err != nil {
			t.Errorf("after %s the API is not healthy: %v", after, err)
		}
		if res := sh(t, e, bystander.ID, "echo fine"); res.Stdout != "fine\n" {
			t.Errorf("after %s the bystander sandbox answers %+v", after, res)
		}
		can.Check(t, after)
	}
	rootSh := func(t *testing.T, id, script string, args ...string) *airlock.ExecResult {
		t.Helper()
		return run(t, e, id, airlock.ExecRequest{User: "root", TimeoutSeconds: 120, Cmd: append([]string{"sh", "-c", script, "sh"}, args...)})
	}

	var planted string // the session of the first attack, kept for the server restart at the end
	t.Run("links planted everywhere, every lifecycle operation", func(t *testing.T) {
		ctx := ctxT(t, 5*time.Minute)
		rolling := 15
		se, err := e.Client.CreateSession(ctx, airlock.CreateSessionRequest{Runtime: rt, IdleTimeoutSeconds: never(), RollingIntervalSeconds: &rolling})
		if err != nil {
			t.Fatal(err)
		}
		// Positive control: the planted links do lead to the canaries, for whoever follows them.
		if res := rootSh(t, se.ID, plantScript, can.Dir); strings.TrimSpace(res.Stdout) != "planted" {
			t.Fatalf("plant: %+v", res)
		}
		if isVM {
			if res := rootSh(t, se.ID, "readlink /run/airlock/wake"); strings.TrimSpace(res.Stdout) != filepath.Join(can.Dir, "master.key") {
				t.Fatalf("positive control: the guest has the planted link %q; want it to lead to the canary", res.Stdout)
			}
		} else if target, err := os.Readlink(filepath.Join(dir, "runtime", "sandboxes", se.SandboxID, "link", "wake")); err != nil || target != filepath.Join(can.Dir, "master.key") {
			t.Fatalf("positive control: the host sees the planted link %q, %v; want it to lead to the canary", target, err)
		}
		sh(t, e, se.ID, "echo data > /home/user/data; mkdir -p /home/user/out")
		step := func(name string, f func() error) {
			t.Helper()
			if err := f(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			healthy(t, name)
		}
		step("exec", func() error { sh(t, e, se.ID, "ls -la /run/airlock / >/dev/null"); return nil })
		step("copy in through a link", func() error {
			_, err := e.Client.WriteFile(ctx, se.ID, "/home/user/wake", strings.NewReader("written\n"), 0o644)
			return err
		})
		step("copy out through a link", func() error {
			b, err := e.Client.ReadFile(ctx, se.ID, "/home/user/climb")
			if err == nil && strings.Contains(string(b), "canary") {
				t.Errorf("read through a planted link returned a host canary: %q", b)
			}
			return nil
		})
		step("tar out a directory with FIFOs and sockets", func() error {
			tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			rc, err := e.Client.DownloadTar(tctx, se.ID, "/tmp")
			if err != nil {
				return nil // refused is contained too
			}
			defer rc.Close()
			_, err = io.Copy(io.Discard, rc)
			return err
		})
		var first *airlock.Snapshot
		step("snapshot", func() error {
			sn, err := e.Client.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{Name: "planted"})
			if err != nil {
				return err
			}
			first, err = e.Client.WaitSnapshot(ctx, se.ID, sn.ID)
			if err == nil && first.State != "complete" {
				t.Errorf("snapshot with links planted: %s (%s); want complete", first.State, first.Reason)
			}
			return err
		})
		step("rolling snapshot", func() error {
			deadline := time.Now().Add(90 * time.Second)
			for time.Now().Before(deadline) {
				l, err := e.Client.ListSnapshots(ctx, se.ID, airlock.ListOptions{})
				if err != nil {
					return err
				}
				for _, s := range l.Snapshots {
					if s.Trigger == "rolling" && s.State == "complete" {
						return nil
					}
				}
				sh(t, e, se.ID, "date >> /home/user/data") // a change for the next rolling snapshot
				time.Sleep(2 * time.Second)
			}
			t.Error("no rolling snapshot completed within 90 s with links planted")
			return nil
		})
		step("pause", func() error { _, err := e.Client.PauseSession(ctx, se.ID); return err })
		step("resume", func() error {
			s, err := e.Client.ResumeSession(ctx, se.ID)
			if err == nil && s.State != airlock.SessionRunning {
				t.Errorf("resume with links planted: %s (%s)", s.State, s.Reason)
			}
			return err
		})
		step("planted links carried over", func() error {
			if res := rootSh(t, se.ID, "readlink /run/airlock/wake; cat /home/user/wake"); !strings.Contains(res.Stdout, can.Dir) || !strings.Contains(res.Stdout, "written") {
				t.Errorf("after resume: %+v; want the planted link and the copied file", res)
			}
			return nil
		})
		step("fork", func() error {
			f, err := e.Client.ForkSession(ctx, se.ID, airlock.ForkSessionRequest{Count: 1})
			if err != nil {
				return err
			}
			for _, s := range f.Sessions {
				if res := sh(t, e, s.ID, "hostname; cat /home/user/data | head -1"); !strings.Contains(res.Stdout, "data") {
					t.Errorf("fork %s: %+v", s.ID, res)
				}
				if err := e.Client.DeleteSession(ctx, s.ID); err != nil {
					return err
				}
			}
			return nil
		})
		step("restore", func() error {
			_, err := e.Client.RestoreSession(ctx, se.ID, airlock.RestoreSessionRequest{SnapshotID: first.ID})
			return err
		})
		planted = se.ID
	})

	t.Run("daemon redirect", func(t *testing.T) {
		ctx := ctxT(t, 3*time.Minute)
		b := newSession(t, e, airlock.CreateSessionRequest{IdleTimeoutSeconds: never()})
		a := newSession(t, e, airlock.CreateSessionRequest{IdleTimeoutSeconds: never()})
		rootSh(t, a.ID, `setsid nohup sh -c 'while :; do ln -sfn ../../$0/link/daemon.sock /run/airlock/daemon.sock; done' "$1" >/dev/null 2>&1 & sleep 0.3`, b.SandboxID)
		// Positive control: the link points where the old node would have dialled.
		if target, _ := os.Readlink(filepath.Join(dir, "runtime", "sandboxes", a.SandboxID, "link", "daemon.sock")); target != "" && !strings.Contains(target, b.SandboxID) {
			t.Logf("link seen by the host: %q", target)
		}
		for range 2 {
			if sn, err := e.Client.SnapshotSession(ctx, a.ID, airlock.CreateSnapshotRequest{}); err == nil {
				_, _ = e.Client.WaitSnapshot(ctx, a.ID, sn.ID)
			}
		}
		res, err := e.Client.Exec(ctx, a.ID, airlock.ExecRequest{Cmd: []string{"hostname"}})
		if err == nil && strings.TrimSpace(res.Stdout) == b.SandboxID {
			t.Fatalf("exec in A ran in B: %q", res.Stdout)
		}
		t.Logf("exec in A after the redirect: %v, %v", res, err)
		if res := sh(t, e, b.ID, "hostname"); strings.TrimSpace(res.Stdout) != b.SandboxID {
			t.Errorf("B's hostname %q; want %s", res.Stdout, b.SandboxID)
		}
		healthy(t, "the redirect attempt")
	})

	t.Run("kill and ptrace the daemon", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{})
		res := rootSh(t, sb.ID, `python3 - <<'EOF'
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
# Positive control: a child of our own can be traced.
pid = os.fork()
if pid == 0:
    time.sleep(5); os._exit(0)
r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
print("child", r, ctypes.get_errno())
os.kill(pid, signal.SIGKILL)
r = libc.ptrace(16, 1, None, None)
print("daemon", r, ctypes.get_errno())
EOF`)
		t.Logf("ptrace: %q", res.Stdout)
		if !strings.Contains(res.Stdout, "child 0") {
			t.Errorf("positive control: ptrace of an own child failed: %q (stderr %q)", res.Stdout, res.Stderr)
		}
		if strings.Contains(res.Stdout, "daemon 0 ") {
			t.Errorf("root in the sandbox attached ptrace to the daemon: %q", res.Stdout)
		}
		// Signals to the daemon: the sandbox's root may end its own sandbox, nothing else.
		kres, kerr := e.Client.Exec(ctxT(t, time.Minute), sb.ID, airlock.ExecRequest{User: "root", Cmd: []string{"sh", "-c",
			"for s in TERM STOP SEGV KILL; do kill -$s 1 && echo sent $s || echo refused $s; done"}})
		t.Logf("kill of the daemon: %+v, %v", kres, kerr)
		// Whatever the signals did, the sandbox either still answers or has stopped cleanly.
		time.Sleep(time.Second)
		got, err := e.Client.GetSandbox(ctxT(t, time.Minute), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == airlock.StateRunning {
			if r := sh(t, e, sb.ID, "echo alive"); r.Stdout != "alive\n" {
				t.Errorf("running sandbox after the signals: %+v", r)
			}
		} else if got.Reason == "" {
			t.Errorf("sandbox %s after the signals, without a reason", got.State)
		}
		healthy(t, "ptrace and kill of the daemon")
	})

	t.Run("proc and sys writes, mounts", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{})
		hostname, _ := os.ReadFile("/proc/sys/kernel/hostname")
		dropCaches, _ := os.ReadFile("/proc/sys/vm/overcommit_memory")
		res := rootSh(t, sb.ID, `
for f in /proc/sys/kernel/hostname /proc/sys/vm/overcommit_memory /proc/sysrq-trigger /proc/sys/kernel/core_pattern /sys/kernel/mm/transparent_hugepage/enabled /sys/fs/cgroup/cgroup.procs; do
  if (echo 1 > $f) 2>/dev/null; then echo "wrote $f"; else echo "refused $f"; fi
done
mount -t tmpfs none /mnt 2>/dev/null && echo "mounted tmpfs" || echo "refused mount"
mount --bind / /mnt 2>/dev/null && echo "mounted bind" || echo "refused bind"
unshare -m true 2>/dev/null && echo "unshared" || echo "refused unshare"
mount | head -1 >/dev/null && echo "mount lists"`)
		t.Logf("writes and mounts: %q", res.Stdout)
		for _, bad := range []string{"mounted tmpfs", "mounted bind", "wrote /proc/sysrq-trigger", "wrote /proc/sys/kernel/core_pattern", "wrote /sys/"} {
			if strings.Contains(res.Stdout, bad) {
				t.Errorf("inside: %q", bad)
			}
		}
		if !strings.Contains(res.Stdout, "mount lists") {
			t.Errorf("positive control: mount did not run at all: %+v", res)
		}
		if h, _ := os.ReadFile("/proc/sys/kernel/hostname"); string(h) != string(hostname) {
			t.Errorf("the host's hostname changed: %q to %q", hostname, h)
		}
		if d, _ := os.ReadFile("/proc/sys/vm/overcommit_memory"); string(d) != string(dropCaches) {
			t.Errorf("the host's vm.overcommit_memory changed: %q to %q", dropCaches, d)
		}
		healthy(t, "proc and sys writes")
	})

	t.Run("inode exhaustion", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{DiskMB: 64})
		var before, after unixStatfs
		statfsInodes(t, dir, &before)
		res := run(t, e, sb.ID, airlock.ExecRequest{TimeoutSeconds: 300, Cmd: []string{"python3", "-c", `
import os
os.makedirs("/home/user/i", exist_ok=True)
n = 0
try:
    while n < 2000000:
        open("/home/user/i/%d" % n, "w").close()
        n += 1
except OSError as e:
    print(n, e.errno)
`}})
		t.Logf("inode exhaustion: %q", res.Stdout)
		if f := strings.Fields(res.Stdout); len(f) != 2 || (f[1] != "28" && f[1] != "122") {
			t.Errorf("inode exhaustion: %q (stderr %q); want it stopped by ENOSPC or EDQUOT", res.Stdout, res.Stderr)
		}
		statfsInodes(t, dir, &after)
		if used := int64(before.ffree) - int64(after.ffree); used > 10000 {
			t.Errorf("the host lost %d inodes to the sandbox", used)
		}
		if r := sh(t, e, sb.ID, "rm -rf /home/user/i && echo ok"); r.Stdout != "ok\n" {
			t.Errorf("sandbox after inode exhaustion: %+v", r)
		}
		healthy(t, "inode exhaustion")
	})

	t.Run("DNS flood", func(t *testing.T) {
		sb := create(t, e, airlock.CreateSandboxRequest{Network: &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{{Action: "allow", Host: "*.example.test"}}}})
		res := run(t, e, sb.ID, airlock.ExecRequest{TimeoutSeconds: 120, Cmd: []string{"python3", "-c", `
import socket, struct, time, random
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
def q(name):
    hdr = struct.pack(">HHHHHH", random.randrange(65536), 0x0100, 1, 0, 0, 0)
    return hdr + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
sent, end = 0, time.time() + 5
while time.time() < end:
    try:
        s.sendto(q("x%d.example.test" % sent), ("100.96.0.1", 53))
        sent += 1
    except BlockingIOError:
        time.sleep(0.001)
print(sent)
`}})
		t.Logf("DNS queries sent in 5 s: %q", strings.TrimSpace(res.Stdout))
		if res.ExitCode != 0 {
			t.Errorf("DNS flood: %+v", res)
		}
		healthy(t, "the DNS flood")
	})
	// The last operation on the planted session: the server restarts (its sessions pause at shutdown
	// and resume after), then the session is deleted.
	if planted != "" {
		ctx := ctxT(t, 3*time.Minute)
		if err := e.Stop(); err != nil {
			t.Fatal(err)
		}
		healthyHost := func(after string) { can.Check(t, after) }
		healthyHost("the server stopped")
		e = testenv.Start(t, opts)
		bystander = create(t, e, airlock.CreateSandboxRequest{TimeoutSeconds: 1800})
		if s, err := e.Client.GetSession(ctx, planted); err != nil {
			t.Fatal(err)
		} else if s.State != airlock.SessionRunning {
			if _, err := e.Client.ResumeSession(ctx, planted); err != nil {
				t.Fatalf("resume after the restart: %v", err)
			}
		}
		if res := rootSh(t, planted, "readlink /run/airlock/wake"); !strings.Contains(res.Stdout, can.Dir) {
			t.Errorf("after the restart: %+v; want the planted link still there", res)
		}
		healthy(t, "the server restart")
		if err := e.Client.DeleteSession(ctx, planted); err != nil {
			t.Fatal(err)
		}
		healthy(t, "delete")
	}
	name := rt
	if name == "" {
		name = "gvisor"
	}
	t.Logf("red-team battery on %s: 7 attacks (links planted through 13 operations, daemon redirect, ptrace and kill of the daemon, proc and sys writes with mounts, inode exhaustion, DNS flood), each contained", name)
}

// dataDir returns a data directory for servers the test starts (and restarts) itself, removed at the
// end with the mounts they leave in it (a template image's, kept for the next start).
func dataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mounts, _ := os.ReadFile("/proc/self/mounts")
		var under []string
		for _, l := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
				under = append(under, f[1])
			}
		}
		for i := len(under) - 1; i >= 0; i-- {
			_ = unix.Unmount(under[i], unix.MNT_DETACH)
		}
		os.RemoveAll(dir)
	})
	return dir
}

// unixStatfs is what statfsInodes reads: the free inodes of a file system.
type unixStatfs struct{ ffree uint64 }

func statfsInodes(t *testing.T, path string, out *unixStatfs) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	out.ffree = st.Ffree
}
