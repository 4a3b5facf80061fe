//go:build !race

package qemu_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/netns"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/vm/qemu"
	"github.com/airlockrun/airlock/internal/runtimetest"
	"github.com/airlockrun/airlock/internal/testenv"
)

var bootSeq atomic.Int64

// boot boots a VM of the package's template in a network namespace of its own and connects to its
// daemon.
func boot(t testing.TB, name string) (string, *link.Client) {
	t.Helper()
	return bootWith(t, name, runtime.Limits{})
}

// bootWith boots as boot does, with limits.
func bootWith(t testing.TB, name string, limits runtime.Limits) (string, *link.Client) {
	t.Helper()
	id, _, c := startVM(t, name, limits, "")
	return id, c
}

// startVM creates a VM (or, with img, restores one from that image) in a network namespace of its own
// with a veth, as the node does, and connects to its daemon; it returns the VM's ID, its address on
// the veth, and the client. The test's cleanup destroys it.
func startVM(t testing.TB, name string, limits runtime.Limits, img string) (string, string, *link.Client) {
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
	addr, err := hostnet.Attach(ns, ifName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hostnet.Detach(ifName) })
	id := fmt.Sprintf("vmh%s%d-%d", name, os.Getpid()%10000, n)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := runtime.Spec{ID: id, RootFS: tpl.RootFS, Init: node.InitArgs(), ControlDir: node.ControlDir,
		InitBinary: testenv.DaemonBinary(t), NetNS: ns, Limits: limits}
	if img == "" {
		_, err = d.Create(ctx, spec)
	} else {
		_, err = d.Restore(ctx, spec, img)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), id) })
	return id, addr.Sandbox.String(), connect(t, d, id)
}

// connect connects to sandbox id's daemon as the node does: through the driver, proving the key.
func connect(t testing.TB, d *qemu.Driver, id string) *link.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, key, err := d.DialLink(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := link.Connect(ctx, conn, link.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
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

// TestHostileGuest: the boundary is QEMU and the host, and inside, the guest's root is a container's.
// QEMU runs as no user of the host's (nor another VM's), with no capability, under seccomp, in
// namespaces of its own (no network); the guest's root cannot take the daemon's ports, has a
// container's capabilities only and cannot reach its kernel's levers; and a guest that ends its init
// (its kernel stops) stops only itself, leaving nothing once destroyed, while a second VM runs on (the
// positive control, with the first VM's exec before the attacks).
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
	otherPID, err := os.ReadFile(filepath.Join(dir, "runtime", "sandboxes", other, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	otherStatus, _ := os.ReadFile("/proc/" + strings.TrimSpace(string(otherPID)) + "/status")
	if uidLine(status) == "" || uidLine(status) == uidLine(otherStatus) {
		t.Errorf("two VMs' QEMUs share a uid: %q and %q", uidLine(status), uidLine(otherStatus))
	}
	for _, ns := range []string{"net", "mnt", "ipc", "uts", "pid"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		its, err := os.Readlink("/proc/" + pid + "/ns/" + ns)
		if err != nil || its == mine {
			t.Errorf("QEMU's %s namespace is the host's (%s, %v)", ns, its, err)
		}
	}

	// QEMU's root is its jail, which holds only QEMU's files, the kernel and the initramfs: root's,
	// none writable by QEMU's uid, no /proc, /sys, /etc or /tmp of the host's.
	jail := filepath.Join(dir, "runtime", "sandboxes", id, "root")
	if its, err := os.Readlink("/proc/" + pid + "/root"); err != nil || its != jail {
		t.Errorf("QEMU's root is %q (%v), want its jail %s", its, err, jail)
	}
	files := 0
	err = filepath.WalkDir(jail, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, jail)
		switch {
		case st.Uid != 0 || st.Mode&0o022 != 0:
			t.Errorf("jail %s: uid %d, mode %o: QEMU could write it", rel, st.Uid, st.Mode&0o7777)
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		case st.Mode&unix.S_IFMT == unix.S_IFREG:
			files++
		case rel == "/dev/kvm" && st.Mode&unix.S_IFMT == unix.S_IFCHR && d.Accel() == "kvm":
		default:
			t.Errorf("jail %s: mode %o is no regular file or directory", rel, st.Mode)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	for _, p := range []string{"/proc", "/sys", "/etc", "/tmp", "/var", "/dev/null"} {
		if _, err := os.Lstat("/proc/" + pid + "/root" + p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("QEMU's jail has %s (%v)", p, err)
		}
	}
	if files < 5 || files > 200 {
		t.Errorf("QEMU's jail holds %d files", files)
	}

	// The daemon's ports are its own: root cannot open them beside it.
	res := run(t, c, `n=0; for p in /sys/class/virtio-ports/*; do n=$((n+1)); if cat /dev/$(basename $p) </dev/null >/dev/null 2>/tmp/err & sleep 1; kill $! 2>/dev/null; then :; fi; cat /tmp/err; done; echo ports=$n`)
	out := string(res.Stdout)
	if !strings.Contains(out, "ports=2") || strings.Count(out, "busy") != 2 {
		t.Errorf("root opening the daemon's ports: %q %q; want both busy", out, res.Stderr)
	}

	// The guest's root cannot reach its kernel's levers (sysrq, sysctls, module loads, the helpers
	// the kernel runs with every capability) ...
	locks := `for f in /proc/sysrq-trigger /proc/sys/kernel/core_pattern /proc/sys/kernel/modprobe /proc/sys/kernel/usermodehelper/bset /sys/kernel/uevent_helper /proc/sys/kernel/modules_disabled; do
  if (echo 0 > $f) 2>/dev/null; then echo "wrote $f"; fi
done
mount -o remount,rw /proc/sys 2>/dev/null && echo remounted
grep -q . /proc/sys/kernel/modules_disabled && echo readable`
	lres, lerr := c.Exec(context.Background(), proto.ExecRequest{Argv: []string{"sh", "-c", locks}, User: "root"})
	if lerr != nil || strings.TrimSpace(string(lres.Stdout)) != "readable" {
		t.Errorf("guest root at its kernel's levers: %q (%v, stderr %q); want every write refused (and the positive control: a read)", lres.Stdout, lerr, lres.Stderr)
	}
	// Its capabilities are a container's (gVisor's and runc's set), on every thread the daemon starts
	// processes from.
	for range 3 {
		if got := strings.TrimSpace(string(run(t, c, "grep CapBnd /proc/self/status").Stdout)); got != "CapBnd:\t00000000a00405fb" {
			t.Errorf("the guest's root has bounding set %q; want the container set a00405fb", got)
		}
	}
	// ... but ending its init stops its kernel, and only its own.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go c.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", "kill -TERM 1; kill -SEGV 1"}, User: "root"}) //nolint: the call ends with the VM
	st, err := d.Wait(ctx, id)
	if err != nil || st.Running {
		t.Fatalf("after the guest ended its init: %+v, %v; want stopped", st, err)
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
}

// uidLine is the Uid line of a /proc/PID/status.
func uidLine(status []byte) string {
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Uid:") {
			return line
		}
	}
	return ""
}

// restore restores the image at img as a new VM (see startVM).
func restore(t testing.TB, img string) (string, string, *link.Client) {
	t.Helper()
	return startVM(t, "r", runtime.Limits{}, img)
}

// TestForkIdentity: VMs restored from one checkpoint are each their own machine: their host name is
// their ID, their address their own veth's, their machine ID and random numbers their own, their clock
// the host's; the link key is new (the image's key is refused), and the original, paused by the
// checkpoint, runs on after Unpause.
func TestForkIdentity(t *testing.T) {
	d, _, _ := newDriver(t)
	id, c := boot(t, "f")
	before := run(t, c, "cat /etc/machine-id").Stdout
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "img")
	if err := d.Checkpoint(ctx, id, img, runtime.CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Status(ctx, id); err != nil || !st.Paused {
		t.Errorf("after a pausing checkpoint: %+v, %v; want paused", st, err)
	}
	seen := map[string]string{}
	for range 2 {
		fid, addr, fc := restore(t, img)
		out := string(run(t, fc, `hostname; cat /etc/machine-id; python3 -c "import os; print(os.urandom(16).hex())"; python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('100.64.0.1', 9)); print(s.getsockname()[0])"; date +%s`).Stdout)
		f := strings.Fields(out)
		if len(f) != 5 {
			t.Fatalf("identity of %s: %q", fid, out)
		}
		if f[0] != fid {
			t.Errorf("host name %q; want %s", f[0], fid)
		}
		if f[1] == strings.TrimSpace(string(before)) {
			t.Errorf("the fork kept its parent's machine id")
		}
		if f[3] != addr {
			t.Errorf("address %s; want its veth's %s", f[3], addr)
		}
		if now := time.Now().Unix(); atoi(f[4]) < now-30 || atoi(f[4]) > now+30 {
			t.Errorf("the guest's clock says %s; the host's %d", f[4], now)
		}
		for _, v := range f[1:3] {
			if other, dup := seen[v]; dup {
				t.Errorf("%s and %s share %s", other, fid, v)
			}
			seen[v] = fid
		}
	}
	if err := d.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
	oc := connect(t, d, id)
	if got := strings.TrimSpace(string(run(t, oc, "cat /etc/machine-id").Stdout)); got != strings.TrimSpace(string(before)) {
		t.Errorf("the original after Unpause: machine id %q; want %q", got, before)
	}
}

func atoi(s string) int64 {
	var n int64
	fmt.Sscan(s, &n)
	return n
}
