package gvisor_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/netns"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/gvisor"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/testenv"
)

// rig boots sandboxes with the real daemon, each in its own network namespace with a veth, as the
// node does.
type rig struct {
	d    *gvisor.Driver
	tpl  template.Template
	bin  string
	dir  string
	next int
}

func newRig(t testing.TB) *rig {
	testenv.RequireSandboxes(t)
	dir := t.TempDir()
	d, err := gvisor.New(gvisor.Config{StateDir: filepath.Join(dir, "runtime"), CgroupParent: "/airlock-test-ckpt",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	tpl, err := template.NewHostRegistry(filepath.Join(dir, "templates")).Get(context.Background(), template.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{d: d, tpl: tpl, bin: testenv.DaemonBinary(t), dir: dir}
}

// spec makes a network namespace with a veth for sandbox id and returns its spec and the sandbox's
// address.
func (r *rig) spec(t testing.TB, id string) (runtime.Spec, string) {
	r.next++
	ns := filepath.Join(r.dir, "ns-"+id)
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Remove(ns) })
	ifName := fmt.Sprintf("alck%d-%d", os.Getpid()%1000, r.next)
	addr, err := hostnet.Attach(ns, ifName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hostnet.Detach(ifName) })
	return runtime.Spec{ID: id, RootFS: r.tpl.RootFS, Mounts: r.tpl.Mounts, Masks: r.tpl.Masks,
		Init: node.InitArgs(), ControlDir: node.ControlDir,
		InitBinary: r.bin, NetNS: ns, Limits: runtime.Limits{MemoryBytes: 512 << 20}}, addr.Sandbox.String()
}

func (r *rig) dial(t testing.TB, sb runtime.Sandbox) *link.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// The daemon may still be between bind and listen (after a wake): retry briefly, as the node does.
	var c *link.Client
	var err error
	for c == nil {
		if c, err = dialLink(ctx, r.d, sb.ID); err != nil {
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func sh(t *testing.T, c *link.Client, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", script}, User: "root"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d: %s %s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// TestCheckpointRestore: a process's memory, its open file and the files of the writable layer come back
// in a sandbox restored under a new ID and network namespace, twice from one image (a fork), while the
// original keeps running.
func TestCheckpointRestore(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	specA, _ := r.spec(t, "ckpt-a")
	a, err := r.d.Create(ctx, specA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "ckpt-a") })
	ca := r.dial(t, a)
	// A counter that lives only in memory, printed through a file descriptor it keeps open.
	sh(t, ca, `set -e
mkdir -p /home/user/w
echo kept > /home/user/w/file
rm /etc/os-release
setsid nohup python3 -c '
import time
f = open("/home/user/w/count", "a", buffering=1)
n = 0
while True:
    n += 1
    f.write("%d\n" % n)
    time.sleep(0.1)
' >/dev/null 2>&1 &
setsid nohup python3 -m http.server 8080 --bind 127.0.0.1 --directory /home/user/w >/dev/null 2>&1 &
sleep 1`)
	img := filepath.Join(r.dir, "img")
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ca.Quiesce(qctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := r.d.Checkpoint(ctx, "ckpt-a", img, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint (leave running): %v", time.Since(start))
	ca = r.dial(t, a) // the daemon listens again
	atCheckpoint := lastCount(t, sh(t, ca, "tail -n 1 /home/user/w/count"))
	time.Sleep(500 * time.Millisecond)
	if n := lastCount(t, sh(t, ca, "tail -n 1 /home/user/w/count")); n <= atCheckpoint {
		t.Fatalf("the original stopped counting after the checkpoint: %d then %d", atCheckpoint, n)
	}
	for _, id := range []string{"ckpt-b", "ckpt-c"} {
		start := time.Now()
		spec, addr := r.spec(t, id)
		b, err := r.d.Restore(ctx, spec, img)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("restore %s: %v", id, time.Since(start))
		t.Cleanup(func() { _ = r.d.Destroy(context.Background(), id) })
		cb := r.dial(t, b)
		// The network stack takes the new namespace's address; the listener inside still serves.
		got := sh(t, cb, `python3 -c "
import socket, urllib.request
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('100.96.0.1', 53)); print(s.getsockname()[0])
print(urllib.request.urlopen('http://127.0.0.1:8080/file', timeout=5).read().decode().strip())"`)
		if got != addr+"\nkept" {
			t.Errorf("%s: address and listener %q; want %q", id, got, addr+"\nkept")
		}
		if got := sh(t, cb, "cat /home/user/w/file; test -e /etc/os-release && echo back || echo gone"); got != "kept\ngone" {
			t.Errorf("%s: files %q; want the layer as checkpointed", id, got)
		}
		time.Sleep(500 * time.Millisecond)
		out := sh(t, cb, "cat /home/user/w/count")
		lines := strings.Fields(out)
		// The count continues from where the image was taken, without a gap or a restart at 1.
		for i := 1; i < len(lines); i++ {
			if lastCount(t, lines[i]) != lastCount(t, lines[i-1])+1 {
				t.Fatalf("%s: count jumps from %s to %s", id, lines[i-1], lines[i])
			}
		}
		if n := lastCount(t, lines[len(lines)-1]); n <= atCheckpoint-5 || len(lines) < 3 {
			t.Fatalf("%s: count at %d (%d lines); want it to continue past about %d", id, n, len(lines), atCheckpoint)
		}
	}
}

func lastCount(t *testing.T, s string) int {
	t.Helper()
	f := strings.Fields(s)
	if len(f) == 0 {
		t.Fatalf("no count in %q", s)
	}
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatalf("count %q: %v", s, err)
	}
	return n
}

// dialLink connects to sandbox id's daemon as the node does: through the driver, with the key.
func dialLink(ctx context.Context, d *gvisor.Driver, id string) (*link.Client, error) {
	conn, key, err := d.DialLink(ctx, id)
	if err != nil {
		return nil, err
	}
	return link.Connect(ctx, conn, link.Options{Key: key})
}

// TestRestoreQuiesced: a sandbox restored ahead of its use (a warm pool's) does not answer until Wake,
// which gives it the environment of the create that takes it; its processes then go on where the image
// was taken. Left longer than the park time, it is paused (nothing in it runs) and Wake resumes it.
func TestRestoreQuiesced(t *testing.T) {
	r := newRig(t)
	gvisor.SetParkAfter(t, 2*time.Second)
	ctx := context.Background()
	specA, _ := r.spec(t, "warm-a")
	a, err := r.d.Create(ctx, specA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "warm-a") })
	ca := r.dial(t, a)
	sh(t, ca, `setsid nohup sh -c 'n=0; while :; do n=$((n+1)); echo $n >> /tmp/count; sleep 0.05; done' >/dev/null 2>&1 &
sleep 0.2`)
	img := filepath.Join(r.dir, "img")
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ca.Quiesce(qctx); err != nil {
		t.Fatal(err)
	}
	if err := r.d.Checkpoint(ctx, "warm-a", img, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id     string
		wait   time.Duration
		paused bool
	}{{"warm-b", 300 * time.Millisecond, false}, {"warm-c", 3 * time.Second, true}} {
		spec, _ := r.spec(t, tc.id)
		spec.ControlEnv = []string{"IGNORED=1"} // Wake gives the environment, not the restore
		b, err := r.d.RestoreQuiesced(ctx, spec, img)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.d.Destroy(context.Background(), tc.id) })
		time.Sleep(tc.wait)
		if c, err := dialLink(ctx, r.d, tc.id); err == nil {
			c.Close()
			t.Fatalf("%s: the daemon of a quiesced restore answers before Wake", tc.id)
		}
		if st, err := r.d.Status(ctx, tc.id); err != nil || !st.Running || st.Paused != tc.paused {
			t.Fatalf("%s: status after %v = %+v, %v; want running, paused %v", tc.id, tc.wait, st, err, tc.paused)
		}
		start := time.Now()
		if err := r.d.Wake(ctx, tc.id, []string{"PATH=/usr/bin:/bin", "WARM=taken"}); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: wake after %v: %v", tc.id, tc.wait, time.Since(start))
		cb := r.dial(t, b)
		if got := sh(t, cb, `echo "$WARM${IGNORED:-}"`); got != "taken" {
			t.Errorf("%s: environment after Wake = %q; want the one Wake gave", tc.id, got)
		}
		if st, err := r.d.Status(ctx, tc.id); err != nil || st.Paused {
			t.Errorf("%s: status after Wake = %+v, %v; want running", tc.id, st, err)
		}
		before := lastCount(t, sh(t, cb, "tail -n 1 /tmp/count"))
		time.Sleep(300 * time.Millisecond)
		if after := lastCount(t, sh(t, cb, "tail -n 1 /tmp/count")); after <= before {
			t.Errorf("%s: the restored loop stopped: %d then %d", tc.id, before, after)
		}
	}
	if err := r.d.Wake(ctx, "../warm-b", nil); err == nil {
		t.Error("Wake of a bad ID succeeded")
	}
}
