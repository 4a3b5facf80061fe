//go:build !race

package qemu_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/netns"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/runtimetest"
	"github.com/airlockrun/airlock/internal/testenv"
)

var bootSeq atomic.Int64

// boot boots a VM of the package's template in a network namespace of its own and connects to its
// daemon.
func boot(t testing.TB, name string) (string, *link.Client) {
	t.Helper()
	d, tpl, _ := newDriver(t)
	dir := t.TempDir()
	ns := filepath.Join(dir, "ns")
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Remove(ns) })
	n := bootSeq.Add(1)
	ifName := fmt.Sprintf("alvh%s%d-%d", name, os.Getpid()%1000, n%100)
	if _, err := hostnet.Attach(ns, ifName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hostnet.Detach(ifName) })
	id := fmt.Sprintf("vmh%s%d-%d", name, os.Getpid()%10000, n)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := d.Create(ctx, runtime.Spec{ID: id, RootFS: tpl.RootFS, Init: node.InitArgs(), ControlDir: node.ControlDir,
		InitBinary: testenv.DaemonBinary(t), NetNS: ns}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), id) })
	conn, key, err := d.DialLink(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := link.Connect(ctx, conn, link.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return id, c
}

func run(t testing.TB, c *link.Client, script string) proto.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", script}, User: "root"})
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	return res
}

// TestHostileGuest: root in a VM owns its guest kernel, so the boundary is QEMU and the host. QEMU runs
// as no user of the host's, with no capability, under seccomp, in namespaces of its own (no network);
// the guest's root cannot take the daemon's ports; and a guest that crashes its own kernel stops only
// itself, leaving nothing once destroyed, while a second VM runs on (the positive control, with the
// first VM's exec before the attacks).
func TestHostileGuest(t *testing.T) {
	d, _, dir := newDriver(t)
	id, c := boot(t, "a")
	other, oc := boot(t, "b")
	if got := strings.TrimSpace(string(run(t, c, "id -u").Stdout)); got != "0" {
		t.Fatalf("root in the guest is %q", got)
	}

	// QEMU's confinement, read from the host.
	pidB, err := os.ReadFile(filepath.Join(dir, "runtime", "sandboxes", id, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(pidB))
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Uid:", "Gid:":
			for _, v := range f[1:] {
				if v == "0" {
					t.Errorf("QEMU runs as root: %s", line)
				}
			}
		case "CapEff:", "CapPrm:":
			if f[1] != "0000000000000000" {
				t.Errorf("QEMU has capabilities: %s", line)
			}
		case "Seccomp:":
			if f[1] != "2" {
				t.Errorf("QEMU is not under a seccomp filter: %s", line)
			}
		}
	}
	for _, ns := range []string{"net", "mnt", "ipc", "uts"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		its, err := os.Readlink("/proc/" + pid + "/ns/" + ns)
		if err != nil || its == mine {
			t.Errorf("QEMU's %s namespace is the host's (%s, %v)", ns, its, err)
		}
	}

	// The daemon's ports are its own: root cannot open them beside it.
	res := run(t, c, `n=0; for p in /sys/class/virtio-ports/*; do n=$((n+1)); if cat /dev/$(basename $p) </dev/null >/dev/null 2>/tmp/err & sleep 1; kill $! 2>/dev/null; then :; fi; cat /tmp/err; done; echo ports=$n`)
	out := string(res.Stdout)
	if !strings.Contains(out, "ports=2") || strings.Count(out, "busy") != 2 {
		t.Errorf("root opening the daemon's ports: %q %q; want both busy", out, res.Stderr)
	}

	// A guest that crashes its kernel stops itself only.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go c.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", "echo c > /proc/sysrq-trigger"}, User: "root"}) //nolint: the call ends with the VM
	st, err := d.Wait(ctx, id)
	if err != nil || st.Running {
		t.Fatalf("after the guest crashed its kernel: %+v, %v; want stopped", st, err)
	}
	if got := strings.TrimSpace(string(run(t, oc, "echo alive").Stdout)); got != "alive" {
		t.Errorf("the other VM after the first crashed: %q", got)
	}
	if err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if left := runtimetest.Leftovers(id, filepath.Join(dir, "runtime")); len(left) > 0 {
		t.Errorf("destroy of the crashed VM left: %s", strings.Join(left, "; "))
	}
	_ = other
}
