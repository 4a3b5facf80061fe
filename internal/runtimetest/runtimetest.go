// Package runtimetest is the conformance suite of runtime drivers, the way containerd's snapshotter
// suite runs against every snapshotter: each driver this machine can run calls Run from a test of its
// own, and the suite boots real sandboxes with the real daemon through it. It checks what the node
// counts on: boot, exec, files, limits (memory, CPU, processes, disk), the network namespace the node
// prepared, that Destroy leaves nothing on the host, and — for drivers that declare it — checkpoint and
// restore with live memory, twice from one image (a fork).
package runtimetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/netns"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/template"
)

// Harness is what a driver's test gives the suite.
type Harness struct {
	// Driver is the driver under test, with its state under StateDir (and ExtraDirs, all checked for
	// leftovers).
	Driver    runtime.Driver
	StateDir  string
	ExtraDirs []string
	// Template is the template to boot (template.NewHostRegistry's default will do).
	Template template.Template
	// DaemonBinary is the in-sandbox daemon's binary (testenv.DaemonBinary).
	DaemonBinary string
	// Scratch is a directory of the test's for network namespaces and images.
	Scratch string
	// DialTimeout bounds connecting to a booted sandbox's daemon and its handshake; zero: 15 s. An
	// emulated VM held to a quarter of a core (CPULimit) needs longer.
	DialTimeout time.Duration
}

// seq numbers the suite's sandboxes and veths across runs in one process.
var seq atomic.Int64

// Run runs the suite against h's driver.
func Run(t *testing.T, h Harness) {
	s := &suite{h: h}
	t.Run("Boot", s.testBoot)
	t.Run("Files", s.testFiles)
	t.Run("HiddenHostEntries", s.testHidden)
	t.Run("Network", s.testNetwork)
	t.Run("MemoryLimit", s.testMemory)
	t.Run("ProcessLimit", s.testProcesses)
	t.Run("DiskLimit", s.testDisk)
	t.Run("CPULimit", s.testCPU)
	t.Run("Stats", s.testStats)
	t.Run("DestroyLeavesNothing", s.testDestroy)
	t.Run("CheckpointRestore", s.testCheckpoint)
	t.Run("FilesOnlyCheckpoint", s.testFilesOnly)
}

// filesOnly reports whether the driver's checkpoints hold files only.
func (s *suite) filesOnly() bool {
	f, ok := s.h.Driver.(runtime.FilesOnly)
	return ok && f.FilesOnly()
}

// testFilesOnly: a driver whose checkpoints hold files only gets its files back in a sandbox restored
// (twice) from the image, its processes started anew, while the original runs on; a paused one stays
// frozen until Unpause.
func (s *suite) testFilesOnly(t *testing.T) {
	cp, ok := s.h.Driver.(runtime.Checkpointer)
	rs, ok2 := s.h.Driver.(runtime.Restorer)
	if !ok || !ok2 || !s.filesOnly() {
		t.Skip("the driver declares no files-only checkpoint")
	}
	b := s.boot(t, runtime.Limits{})
	ctx := t.Context()
	sh(t, b.c, "echo kept > /home/user/kept && rm -f /etc/hostname.bak; echo new > /etc/runtimetest-new; (setsid nohup sleep 600 >/dev/null 2>&1 &)")
	if err := b.c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(s.h.Scratch, "img-"+b.id)
	if err := cp.Checkpoint(ctx, b.id, img, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(img) })
	orig := s.dial(t, b.id)
	if got := sh(t, orig, "cat /home/user/kept; pgrep -x sleep >/dev/null && echo sleeping"); got != "kept\nsleeping" {
		t.Errorf("the original after a leave-running checkpoint: %q", got)
	}
	for range 2 {
		spec, _ := s.spec(t, runtime.Limits{})
		if _, err := rs.Restore(ctx, spec, img); err != nil {
			t.Fatalf("restore: %v", err)
		}
		t.Cleanup(func() { _ = s.h.Driver.Destroy(context.Background(), spec.ID) })
		c := s.dial(t, spec.ID)
		if got := sh(t, c, "cat /home/user/kept /etc/runtimetest-new; stat -c %U /home/user/kept"); got != "kept\nnew\nroot" {
			t.Errorf("files in the restored sandbox: %q", got)
		}
		if res := run(t, c, "root", "pgrep -x sleep"); res.ExitCode == 0 {
			t.Errorf("a process of the checkpointed sandbox runs in the restored one: %s", res.Stdout)
		}
	}
	// Paused: frozen until Unpause.
	if err := orig.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	img2 := filepath.Join(s.h.Scratch, "img2-"+b.id)
	if err := cp.Checkpoint(ctx, b.id, img2, runtime.CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(img2) })
	if st, err := s.h.Driver.Status(ctx, b.id); err != nil || !st.Paused {
		t.Errorf("after a pausing checkpoint: %+v, %v; want paused", st, err)
	}
	p, ok := s.h.Driver.(runtime.Pauser)
	if !ok {
		t.Fatal("a files-only driver must let a paused sandbox run on (runtime.Pauser)")
	}
	if err := p.Unpause(ctx, b.id); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, s.dial(t, b.id), "cat /home/user/kept"); got != "kept" {
		t.Errorf("after Unpause: %q", got)
	}
}

type suite struct{ h Harness }

// box is one booted sandbox of the suite.
type box struct {
	id   string
	addr string // its address on its veth
	c    *link.Client
}

// spec makes a network namespace with a veth for a new sandbox, as the node does, and returns its spec.
func (s *suite) spec(t *testing.T, limits runtime.Limits) (runtime.Spec, string) {
	t.Helper()
	n := seq.Add(1)
	id := fmt.Sprintf("rtt%d-%d", os.Getpid()%10000, n)
	ns := filepath.Join(s.h.Scratch, "ns-"+id)
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Remove(ns) })
	ifName := fmt.Sprintf("alrt%d-%d", os.Getpid()%1000, n%1000)
	addr, err := hostnet.Attach(ns, ifName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hostnet.Detach(ifName) })
	return runtime.Spec{ID: id, RootFS: s.h.Template.RootFS, Mounts: s.h.Template.Mounts, Masks: s.h.Template.Masks, Init: node.InitArgs(),
		ControlDir: node.ControlDir, InitBinary: s.h.DaemonBinary, NetNS: ns, Limits: limits}, addr.Sandbox.String()
}

// boot creates a sandbox with limits and connects to its daemon; the test's cleanup destroys it.
func (s *suite) boot(t *testing.T, limits runtime.Limits) *box {
	t.Helper()
	spec, addr := s.spec(t, limits)
	return s.bootSpec(t, spec, addr)
}

// bootSpec creates a sandbox of spec (from s.spec, with its address addr) and connects to its daemon;
// the test's cleanup destroys it.
func (s *suite) bootSpec(t *testing.T, spec runtime.Spec, addr string) *box {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.h.Driver.Create(ctx, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = s.h.Driver.Destroy(context.Background(), spec.ID) })
	return &box{id: spec.ID, addr: addr, c: s.dial(t, spec.ID)}
}

// dial connects to sandbox id's daemon as the node does: through the driver, proving the key.
func (s *suite) dial(t *testing.T, id string) *link.Client {
	t.Helper()
	timeout := s.h.DialTimeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		conn, key, err := s.h.Driver.DialLink(ctx, id)
		if err == nil {
			var c *link.Client
			if c, err = link.Connect(ctx, conn, link.Options{Key: key}); err == nil {
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			conn.Close()
		}
		if ctx.Err() != nil {
			t.Fatalf("dial sandbox %s: %v", id, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run runs script with sh as user (root or "" for the default user) and returns its result.
func run(t *testing.T, c *link.Client, user, script string) proto.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"sh", "-c", script}, User: user})
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	return res
}

// sh runs script as root and returns its trimmed stdout; a failure fails the test.
func sh(t *testing.T, c *link.Client, script string) string {
	t.Helper()
	res := run(t, c, "root", script)
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d: %s %s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func (s *suite) testBoot(t *testing.T) {
	b := s.boot(t, runtime.Limits{})
	ctx := t.Context()
	if got := sh(t, b.c, "echo hello"); got != "hello" {
		t.Errorf("echo: %q", got)
	}
	// The default user is not root; root is root inside (whatever it maps to outside).
	if got := strings.TrimSpace(string(run(t, b.c, "", "id -u").Stdout)); got == "0" || got == "" {
		t.Errorf("the default user's uid is %q; want a non-root one", got)
	}
	if got := sh(t, b.c, "id -u"); got != "0" {
		t.Errorf("root's uid inside is %q", got)
	}
	st, err := s.h.Driver.Status(ctx, b.id)
	if err != nil || !st.Running {
		t.Errorf("Status = %+v, %v; want running", st, err)
	}
	ids, err := s.h.Driver.List(ctx)
	if err != nil || !contains(ids, b.id) {
		t.Errorf("List = %v, %v; want it to hold %s", ids, err, b.id)
	}
	// A second sandbox of the same ID is refused, and the first runs on.
	spec, _ := s.spec(t, runtime.Limits{})
	spec.ID = b.id
	if _, err := s.h.Driver.Create(ctx, spec); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second create of %s: %v; want already exists", b.id, err)
	}
	if got := sh(t, b.c, "echo still"); got != "still" {
		t.Errorf("after the refused create: %q", got)
	}
	if _, err := s.h.Driver.Status(ctx, "rtt-no-such"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status of an unknown sandbox: %v; want not found", err)
	}
}

func (s *suite) testFiles(t *testing.T) {
	b := s.boot(t, runtime.Limits{})
	// The root is writable through the sandbox's own layer; the template is never written.
	sh(t, b.c, "echo layer > /etc/runtimetest-marker && mkdir -p /home/user/d && echo home > /home/user/d/f")
	if got := sh(t, b.c, "cat /etc/runtimetest-marker /home/user/d/f"); got != "layer\nhome" {
		t.Errorf("files read back: %q", got)
	}
	if _, err := os.Stat(filepath.Join(s.h.Template.RootFS, "etc", "runtimetest-marker")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a write in the sandbox reached the template: %v", err)
	}
	// The template's read-only mounts stay read-only, for root too.
	for _, m := range s.h.Template.Mounts {
		if !m.ReadOnly {
			continue
		}
		if res := run(t, b.c, "root", "touch "+m.Destination+"/runtimetest-x"); res.ExitCode == 0 {
			t.Errorf("root wrote into the read-only mount %s", m.Destination)
		}
	}
	// Another sandbox sees none of it.
	o := s.boot(t, runtime.Limits{})
	if res := run(t, o.c, "root", "cat /etc/runtimetest-marker"); res.ExitCode == 0 {
		t.Errorf("another sandbox sees the first one's file")
	}
}

// testHidden: what a template's host directory holds that not every host user may read is hidden from
// root inside by the spec's masks (a file others may not read, a directory others may not enter), and
// the rest of the directory is shown.
func (s *suite) testHidden(t *testing.T) {
	if len(s.h.Template.Mounts) == 0 {
		t.Skip("the template shows no host directory")
	}
	// Outside the test's private directories: the sandbox's root (a host user for some drivers) must
	// reach it to mount it.
	host, err := os.MkdirTemp("", "rtt-hidden-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(host) })
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{"open", 0o644}, {"secret", 0o600}, {"private/inner", 0o644}, {"sub/key", 0o640}} {
		p := filepath.Join(host, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("content of "+f.path+"\n"), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for p, mode := range map[string]os.FileMode{"": 0o755, "private": 0o700} {
		if err := os.Chmod(filepath.Join(host, p), mode); err != nil {
			t.Fatal(err)
		}
	}
	const dest = "/mnt/rtt-hidden"
	masks, err := template.ScanHidden(host, dest)
	if err != nil {
		t.Fatal(err)
	}
	if len(masks) != 3 {
		t.Fatalf("the scan hides %v; want private, secret and sub/key", masks)
	}
	spec, addr := s.spec(t, runtime.Limits{})
	spec.Mounts = append(append([]runtime.Mount(nil), spec.Mounts...), runtime.Mount{Source: host, Destination: dest, ReadOnly: true})
	spec.Masks = append(append([]runtime.Mask(nil), spec.Masks...), masks...)
	b := s.bootSpec(t, spec, addr)
	// Positive control: the directory is there, with what everyone may read.
	if got := sh(t, b.c, "cat "+dest+"/open; ls "+dest+" | tr '\\n' ' '"); got != "content of open\nopen private secret sub" {
		t.Errorf("the host directory shows %q; want its readable file and its four entries", got)
	}
	for _, script := range []string{"cat " + dest + "/secret", "cat " + dest + "/sub/key", "cat " + dest + "/private/inner",
		"ls -A " + dest + "/private", "python3 -c 'import os,sys; print(open(sys.argv[1]).read())' " + dest + "/secret"} {
		res := run(t, b.c, "root", script)
		if strings.Contains(string(res.Stdout), "content of") || strings.Contains(string(res.Stdout), "inner") {
			t.Errorf("root reads a hidden host entry: %q: %q", script, res.Stdout)
		}
	}
}

func (s *suite) testNetwork(t *testing.T) {
	b := s.boot(t, runtime.Limits{})
	// The sandbox is in the namespace the node prepared: the address of its veth is its own.
	got := sh(t, b.c, `python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('100.64.0.1', 9)); print(s.getsockname()[0])"`)
	if got != b.addr {
		t.Errorf("the sandbox's address is %q; want its veth's %s", got, b.addr)
	}
}

func (s *suite) testMemory(t *testing.T) {
	b := s.boot(t, runtime.Limits{MemoryBytes: 256 << 20})
	// Holding twice the limit fails: the process (or the sandbox) is killed, never the host's memory.
	res, err := b.c.Exec(t.Context(), proto.ExecRequest{Argv: []string{"python3", "-c", "b = bytearray(512 << 20); b[::4096] = b'x' * len(b[::4096]); print('held')"}, User: "root"})
	if err == nil && res.ExitCode == 0 && strings.Contains(string(res.Stdout), "held") {
		t.Fatalf("a sandbox limited to 256 MiB held 512 MiB")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, serr := s.h.Driver.Status(ctx, b.id)
	t.Logf("over the memory limit: exec %v (exit %d); sandbox %+v %v", err, res.ExitCode, st, serr)
	if serr == nil && !st.Running && !strings.Contains(st.Reason, "memory") {
		t.Errorf("the sandbox stopped for %q; want the reason to name the memory limit", st.Reason)
	}
}

func (s *suite) testProcesses(t *testing.T) {
	b := s.boot(t, runtime.Limits{Processes: 64})
	// The default user cannot run more processes than the limit (and some room for the daemon's): its
	// forks fail beyond it. The children end by themselves, so the sandbox can fork again after.
	res := run(t, b.c, "", `python3 -c "
import os, time
n = 0
for i in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    n += 1
print(n)
"`)
	count, _ := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	t.Logf("processes started of 200 under a limit of 64: %d", count)
	if count == 0 || count > 64+32 {
		t.Errorf("%d processes started under a limit of 64 (%s)", count, res.Stderr)
	}
	time.Sleep(3 * time.Second)
	sh(t, b.c, "true")
}

func (s *suite) testDisk(t *testing.T) {
	b := s.boot(t, runtime.Limits{DiskBytes: 64 << 20})
	res := run(t, b.c, "root", "dd if=/dev/zero of=/home/user/big bs=1M count=128 conv=fsync 2>&1")
	if res.ExitCode == 0 || !strings.Contains(string(res.Stdout), "No space left") {
		t.Errorf("wrote 128 MiB into a 64 MiB disk: exit %d: %s", res.ExitCode, res.Stdout)
	}
	size := sh(t, b.c, "stat -c %s /home/user/big")
	if n, _ := strconv.ParseInt(size, 10, 64); n > 64<<20 {
		t.Errorf("the file holds %d bytes on a 64 MiB disk", n)
	}
	// The sandbox runs on, and frees what it removes.
	sh(t, b.c, "rm /home/user/big && dd if=/dev/zero of=/home/user/small bs=1M count=8 2>/dev/null")
}

func (s *suite) testCPU(t *testing.T) {
	m, ok := s.h.Driver.(runtime.CPUMeter)
	if !ok {
		t.Skip("the driver does not meter CPU")
	}
	b := s.boot(t, runtime.Limits{CPUMillis: 250})
	ctx := t.Context()
	before, err := m.CPUTime(ctx, b.id)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Two busy loops for 3 s: a quarter of a core allows about 0.75 s of CPU.
	sh(t, b.c, "for i in 1 2; do timeout 3 sh -c 'while :; do :; done' & done; wait; true")
	wall := time.Since(start)
	after, err := m.CPUTime(ctx, b.id)
	if err != nil {
		t.Fatal(err)
	}
	used := after - before
	t.Logf("CPU used %v in %v under a quarter of a core", used, wall)
	if used > wall*45/100 {
		t.Errorf("CPU used %v in %v; want about a quarter of it", used, wall)
	}
}

// testStats: a driver that reads a sandbox's resource use sees its memory grow while a process holds
// 64 MiB, its disk grow by a 48 MiB file, and its CPU time grow by a busy second; the totals are the
// limits; a sandbox that is gone is not found.
func (s *suite) testStats(t *testing.T) {
	r, ok := s.h.Driver.(runtime.StatsReader)
	if !ok {
		t.Skip("the driver does not read resource use")
	}
	const memLimit, diskLimit = 384 << 20, 256 << 20
	b := s.boot(t, runtime.Limits{MemoryBytes: memLimit, DiskBytes: diskLimit})
	ctx := t.Context()
	before, err := r.Stats(ctx, b.id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("idle: %+v", before)
	if before.MemoryLimit != memLimit {
		t.Errorf("memory limit %d; want %d", before.MemoryLimit, memLimit)
	}
	// The file system's own overhead is a few percent of the image.
	if before.DiskTotal > diskLimit || before.DiskTotal < diskLimit*9/10 {
		t.Errorf("disk total %d; want a little under %d", before.DiskTotal, diskLimit)
	}
	if before.MemoryUsed <= 0 || before.MemoryUsed > memLimit || before.DiskUsed < 0 || before.DiskUsed > before.DiskTotal {
		t.Errorf("idle readings out of range: %+v", before)
	}
	// A process that holds 64 MiB (every page touched) until it is killed, a 48 MiB file, a busy second.
	sh(t, b.c, `(setsid nohup python3 -c "
import time
b = bytearray(64 << 20)
b[::4096] = b'x' * len(b[::4096])
open('/tmp/held', 'w').close()
time.sleep(600)
" >/dev/null 2>&1 &)
while [ ! -e /tmp/held ]; do sleep 0.05; done
dd if=/dev/urandom of=/home/user/stats-file bs=1M count=48 conv=fsync 2>/dev/null
timeout 1 sh -c 'while :; do :; done'; true`)
	after, err := r.Stats(ctx, b.id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after: %+v", after)
	if got := after.MemoryUsed - before.MemoryUsed; got < 48<<20 {
		t.Errorf("memory used grew by %d MiB while a process held 64 MiB", got>>20)
	}
	if got := after.DiskUsed - before.DiskUsed; got < 44<<20 || got > 64<<20 {
		t.Errorf("disk used grew by %d MiB after a 48 MiB file was written", got>>20)
	}
	if got := after.CPUTime - before.CPUTime; got < 500*time.Millisecond {
		t.Errorf("CPU time grew by %v over a busy second", got)
	}
	if after.MemoryLimit != memLimit || after.DiskTotal != before.DiskTotal {
		t.Errorf("the totals changed: %+v, then %+v", before, after)
	}
	if err := s.h.Driver.Destroy(ctx, b.id); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Stats(ctx, b.id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stats after destroy: %v; want not found", err)
	}
	if _, err := r.Stats(ctx, "../../etc"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Stats of a bad ID: %v; want invalid argument", err)
	}
}

func (s *suite) testDestroy(t *testing.T) {
	b := s.boot(t, runtime.Limits{})
	sh(t, b.c, "(setsid nohup sleep 600 >/dev/null 2>&1 &); echo x > /home/user/x")
	ctx := t.Context()
	if err := s.h.Driver.Destroy(ctx, b.id); err != nil {
		t.Fatal(err)
	}
	// Processes killed with the sandbox may stay a moment as zombies until the host reaps them.
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left = Leftovers(b.id, append([]string{s.h.StateDir}, s.h.ExtraDirs...)...)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("destroy left on the host: %s", strings.Join(left, "; "))
	}
	if err := s.h.Driver.Destroy(ctx, b.id); err != nil {
		t.Errorf("a second destroy: %v", err)
	}
	if err := s.h.Driver.Destroy(ctx, "rtt-never-was"); err != nil {
		t.Errorf("destroy of an unknown sandbox: %v", err)
	}
	if _, err := s.h.Driver.Status(ctx, b.id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status after destroy: %v; want not found", err)
	}
	ids, _ := s.h.Driver.List(ctx)
	if contains(ids, b.id) {
		t.Errorf("List after destroy still holds %s", b.id)
	}
}

func (s *suite) testCheckpoint(t *testing.T) {
	cp, ok := s.h.Driver.(runtime.Checkpointer)
	rs, ok2 := s.h.Driver.(runtime.Restorer)
	if !ok || !ok2 || s.filesOnly() {
		t.Skip("the driver declares no checkpoint with memory")
	}
	b := s.boot(t, runtime.Limits{})
	ctx := t.Context()
	// A process counting in memory; the count goes to a file.
	sh(t, b.c, `cat > /home/user/count.py <<'EOF'
import os, time
b = os.urandom(8 << 20)
n = 0
while True:
    n += 1
    open("/home/user/count.new", "w").write("%d %d" % (sum(b[::65536]), n))
    os.rename("/home/user/count.new", "/home/user/count")
    time.sleep(0.05)
EOF
(setsid nohup python3 /home/user/count.py >/dev/null 2>&1 &); echo layer > /home/user/layer`)
	var first []string
	deadline := time.Now().Add(30 * time.Second)
	for len(first) != 2 && time.Now().Before(deadline) {
		first = strings.Fields(string(run(t, b.c, "root", "cat /home/user/count 2>/dev/null").Stdout))
		time.Sleep(50 * time.Millisecond)
	}
	if len(first) != 2 {
		t.Fatal("the counter never counted")
	}
	if err := b.c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(s.h.Scratch, "img-"+b.id)
	if err := cp.Checkpoint(ctx, b.id, img, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(img) })
	// The original runs on.
	orig := s.dial(t, b.id)
	waitCount(t, orig, atoi(first[1]))
	// Twice from one image: a fork.
	for range 2 {
		spec, _ := s.spec(t, runtime.Limits{})
		if _, err := rs.Restore(ctx, spec, img); err != nil {
			t.Fatalf("restore: %v", err)
		}
		t.Cleanup(func() { _ = s.h.Driver.Destroy(context.Background(), spec.ID) })
		c := s.dial(t, spec.ID)
		got := waitCount(t, c, atoi(first[1]))
		if got[0] != first[0] {
			t.Errorf("the restored process's memory sums to %s; it was %s", got[0], first[0])
		}
		if l := sh(t, c, "cat /home/user/layer"); l != "layer" {
			t.Errorf("the restored layer holds %q", l)
		}
	}
}

// waitCount waits until the counter in c's sandbox passes after and returns its fields.
func waitCount(t *testing.T, c *link.Client, after int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		f := strings.Fields(string(run(t, c, "root", "cat /home/user/count 2>/dev/null").Stdout))
		if len(f) == 2 && atoi(f[1]) > after {
			return f
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the counter did not pass %d", after)
	return nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Leftovers lists what of sandbox id is still on the host: processes whose command line or cgroup
// names it, mounts whose path names it, cgroups named after it, and entries under dirs named after it.
func Leftovers(id string, dirs ...string) []string {
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if st, err := os.ReadFile(filepath.Join(p, "stat")); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && strings.HasPrefix(string(st[i:]), ") Z") {
				continue // a zombie: gone, but for its parent's wait
			}
		}
		for _, f := range []string{"cmdline", "cgroup"} {
			b, err := os.ReadFile(filepath.Join(p, f))
			if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), id) {
				left = append(left, "process "+filepath.Base(p)+" ("+f+")")
				break
			}
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// The sandbox's network namespace is the node's (here the suite's), not the driver's.
			if strings.Contains(sc.Text(), id) && !strings.Contains(sc.Text(), " nsfs ") {
				left = append(left, "mount "+sc.Text())
			}
		}
		f.Close()
	}
	ctrls, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range ctrls {
		root := filepath.Join("/sys/fs/cgroup", c.Name())
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.Count(p[len(root):], "/") > 3 {
				return filepath.SkipDir
			}
			if d.Name() == id {
				left = append(left, "cgroup "+p)
				return filepath.SkipDir
			}
			return nil
		})
	}
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.Contains(d.Name(), id) {
				left = append(left, "file "+p)
				if d.IsDir() {
					return filepath.SkipDir
				}
			}
			return nil
		})
	}
	return left
}
