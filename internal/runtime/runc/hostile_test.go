package runc_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/netns"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/runc"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/testenv"
)

// TestRootIsNotHostRoot: root in a runc sandbox is an unprivileged host user in a user namespace of
// its own. It cannot mount, make namespaces, load modules, open raw or packet sockets, trace the host,
// write the template's read-only mounts, or see the host's processes; each attempt is first shown to
// work where it is allowed (here, as the test's own host root), the positive control.
func TestRootIsNotHostRoot(t *testing.T) {
	d, state, dir := newDriver(t)
	ctx := context.Background()
	tpl, err := template.NewHostRegistry(filepath.Join(dir, "templates")).Get(ctx, template.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	ns := filepath.Join(dir, "ns")
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Remove(ns) })
	ifName := fmt.Sprintf("alrh%d", os.Getpid()%10000)
	if _, err := hostnet.Attach(ns, ifName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hostnet.Detach(ifName) })
	id := fmt.Sprintf("rch%d", os.Getpid()%10000)
	if _, err := d.Create(ctx, runtime.Spec{ID: id, RootFS: tpl.RootFS, Mounts: tpl.Mounts, Init: node.InitArgs(), ControlDir: node.ControlDir,
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
	defer c.Close()
	exec := func(user, script string) proto.ExecResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		res, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", script}, User: user})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if got := strings.Fields(string(exec("root", "cat /proc/self/uid_map").Stdout)); len(got) != 3 || got[0] != "0" || got[1] != fmt.Sprint(runc.DefaultIDBase) {
		t.Errorf("root's uid map inside: %q; want 0 → %d", got, runc.DefaultIDBase)
	}
	py := func(code string) string { return `python3 -c '` + code + `'` }
	attacks := []struct{ name, script string }{
		{"mount a tmpfs", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m"},
		{"make a user namespace", "unshare -U true"},
		{"make a mount namespace", "unshare -m true"},
		{"open a packet socket", py("import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)")},
		{"open a raw socket", py("import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)")},
		// init_module and reboot must be refused as not permitted, not merely fail on their arguments.
		{"load a kernel module", py("import ctypes; l = ctypes.CDLL(None, use_errno=True); l.syscall(175, 0, 0, b\"\"); assert ctypes.get_errno() != 1")},
		{"write the host's /usr", "touch /usr/airlock-escape"},
		{"set the clock", "date -s 2000-01-01"},
		{"reboot", py("import ctypes; l = ctypes.CDLL(None, use_errno=True); l.syscall(169, 0xfee1dead, 0x28121969, 0x1234567); assert ctypes.get_errno() != 1")},
	}
	for _, a := range attacks {
		if res := exec("root", a.script); res.ExitCode == 0 {
			t.Errorf("root in the sandbox could %s", a.name)
		}
	}
	// The positive control: the same commands do what they say on the host as the test's root (the
	// harmless ones).
	for _, script := range []string{
		py("import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()"),
		"unshare -m true", "unshare -U true",
		// init_module of nothing fails on its argument, not its permission, for host root.
		py("import ctypes; l = ctypes.CDLL(None, use_errno=True); l.syscall(175, 0, 0, b\"\"); assert ctypes.get_errno() != 1"),
	} {
		if out, err := execHost(script); err != nil {
			t.Errorf("positive control %q failed on the host: %v %s", script, err, out)
		}
	}
	// No host process is visible; the sandbox's processes are few.
	if n := strings.TrimSpace(string(exec("root", "ls /proc | grep -c '^[0-9]'").Stdout)); len(n) > 2 {
		t.Errorf("root in the sandbox sees %s processes", n)
	}
	// The link key is root's inside, not the default user's.
	if res := exec("", "cat "+node.ControlDir+"/key"); res.ExitCode == 0 {
		t.Errorf("the default user read the link key")
	}
	// What root writes is owned, on the host, by the sandbox range, never by host root.
	exec("root", "echo x > /root-owned")
	var owner string
	_ = filepath.WalkDir(state, func(p string, de os.DirEntry, err error) error {
		if err == nil && de.Name() == "root-owned" {
			fi, _ := os.Lstat(p)
			owner = fmt.Sprint(fileUID(fi))
		}
		return nil
	})
	if owner != fmt.Sprint(runc.DefaultIDBase) {
		t.Errorf("a file root made in the sandbox is owned by host uid %q; want %d", owner, runc.DefaultIDBase)
	}
}
