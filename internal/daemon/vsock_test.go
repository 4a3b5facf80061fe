package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

func TestParseVMAddr(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want vmAddr
		bad  bool
	}{
		{in: "/dev/vport0p1", want: vmAddr{dev: "/dev/vport0p1", connFD: -1}},
		{in: "vsock:1022", want: vmAddr{port: 1022, connFD: -1}},
		{in: "vsock:1023,conn=3", want: vmAddr{port: 1023, connFD: 3}},
		{in: "vsock:1", want: vmAddr{port: 1, connFD: -1}},
		{in: "vsock:1024", bad: true},       // a port the guest's users may bind
		{in: "vsock:4294967295", bad: true}, // VMADDR_PORT_ANY
		{in: "vsock:0", bad: true},
		{in: "vsock:", bad: true},
		{in: "vsock:x", bad: true},
		{in: "vsock:-5", bad: true},
		{in: "vsock:1023,conn=", bad: true},
		{in: "vsock:1023,conn=2", bad: true}, // a standard descriptor
		{in: "vsock:1023,fd=3", bad: true},
		{in: "vport0p1", bad: true},
		{in: "", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseVMAddr(tc.in)
			if tc.bad {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("parseVMAddr(%q) = %+v, %v; want ErrInvalidArgument", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseVMAddr(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if got.String() != tc.in {
				t.Errorf("String() = %q; want %q", got.String(), tc.in)
			}
		})
	}
}

func TestVsockParam(t *testing.T) {
	link, ctl, ok, err := vsockParam([]string{"console=ttyS0", "airlock.vsock=1022,1023", "--", "vminit"})
	if err != nil || !ok || link.port != 1022 || ctl.port != 1023 || link.connFD != -1 {
		t.Fatalf("vsockParam = %+v, %+v, %t, %v", link, ctl, ok, err)
	}
	if _, _, ok, err := vsockParam([]string{"console=ttyS0", "virtio_mmio.device=4K@0xd0000000:5"}); ok || err != nil {
		t.Fatalf("without the parameter: %t, %v; want false, nil", ok, err)
	}
	for _, bad := range []string{"airlock.vsock=1022", "airlock.vsock=1022,", "airlock.vsock=1022,1023,conn=3x", "airlock.vsock=2000,1023"} {
		if _, _, _, err := vsockParam([]string{bad}); err == nil {
			t.Errorf("vsockParam(%q) took it", bad)
		}
	}
}

// fakeBlock makes a /sys/block of disks: name -> serial ("" none) and read-only flag.
func fakeBlock(t *testing.T, disks map[string][2]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, d := range disks {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if d[0] != "" {
			os.WriteFile(filepath.Join(p, "serial"), []byte(d[0]+"\n"), 0o644)
		}
		os.WriteFile(filepath.Join(p, "ro"), []byte(d[1]+"\n"), 0o644)
	}
	return dir
}

func TestPickDisks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		disks      map[string][2]string
		root, disk string
	}{
		{"serials", map[string][2]string{"vda": {VMDiskSerial, "0"}, "vdb": {VMRootSerial, "1"}}, "vdb", "vda"},
		// Firecracker: serials of its own, the template's image read-only.
		{"read-only flag", map[string][2]string{"vda": {"2049123", "1"}, "vdb": {"2049456", "0"}}, "vda", "vdb"},
		{"no serial file", map[string][2]string{"vda": {"", "0"}, "vdb": {"", "1"}}, "vdb", "vda"},
		{"one disk so far", map[string][2]string{"vda": {"2049123", "1"}}, "", ""},
		{"two writable", map[string][2]string{"vda": {"1", "0"}, "vdb": {"2", "0"}}, "", ""},
		// One serial seen: the other is awaited by its serial, never guessed.
		{"half the serials", map[string][2]string{"vda": {VMRootSerial, "1"}, "vdb": {"x", "0"}}, "vda", ""},
		{"not a virtio disk", map[string][2]string{"sda": {"", "1"}, "vdb": {"", "0"}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, disk := pickDisks(fakeBlock(t, tc.disks))
			if root != tc.root || disk != tc.disk {
				t.Fatalf("pickDisks = %q, %q; want %q, %q", root, disk, tc.root, tc.disk)
			}
		})
	}
}

// TestServeVsockControl serves the control channel over connections as the node makes them over vsock
// (a unix listener stands in; the logic is the same): messages of the newest connection are applied,
// reports go to it, and an older one is closed.
func TestServeVsockControl(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "ctl"))
	if err != nil {
		t.Fatal(err)
	}
	wake := make(chan struct{}, 1)
	v := &vmControl{dir: dir, wake: wake, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	// The connection the init handed over.
	firstNode, firstGuest := net.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		v.serveVsock(ln, firstGuest)
	}()
	r1 := bufio.NewReader(firstNode)
	expectReport := func(r *bufio.Reader, want proto.VMReport) {
		t.Helper()
		for {
			var rep proto.VMReport
			if err := proto.ReadVMLine(r, &rep); err != nil {
				t.Fatalf("read report: %v", err)
			}
			if rep == want {
				return
			}
		}
	}
	go v.setListening(true)
	expectReport(r1, proto.VMReport{Seq: 0, Listening: true})

	// The node connects anew (after a snapshot): the first connection is closed, the new one served.
	c2, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	expectReport(r2, proto.VMReport{Seq: 0, Listening: true})
	firstNode.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, r1); err != nil {
		t.Fatalf("the older connection: %v; want it closed", err)
	}
	key := bytes.Repeat([]byte{7}, proto.LinkKeySize)
	if err := proto.WriteVMLine(c2, proto.VMControl{Seq: 41, Key: key, Wake: true}); err != nil {
		t.Fatal(err)
	}
	expectReport(r2, proto.VMReport{Seq: 41, Listening: true})
	if b, err := os.ReadFile(filepath.Join(dir, proto.ControlKey)); err != nil || !bytes.Equal(b, key) {
		t.Fatalf("key file: %x, %v; want %x", b, err, key)
	}
	select {
	case <-wake:
	default:
		t.Fatal("a wake message sent no wake")
	}
	// A malformed message is refused, on the connection it came on.
	if err := proto.WriteVMLine(c2, proto.VMControl{Seq: 42, Key: []byte("short")}); err != nil {
		t.Fatal(err)
	}
	var rep proto.VMReport
	if err := proto.ReadVMLine(r2, &rep); err != nil || rep.Seq != 42 || rep.Error == "" {
		t.Fatalf("report of a bad message: %+v, %v; want an error for 42", rep, err)
	}
	ln.Close()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("serveVsock did not end when its listener closed")
	}
}

// TestReadFirstControl: the guest's init skips junk and malformed messages before the first good one.
func TestReadFirstControl(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("garbage\n")
	proto.WriteVMLine(&b, proto.VMControl{Seq: 1, Key: []byte("short")})
	proto.WriteVMLine(&b, proto.VMControl{Seq: 2, Argv: []string{"/.airlock/init"}})
	m, err := readFirstControl(bufio.NewReader(&b))
	if err != nil || m.Seq != 2 {
		t.Fatalf("readFirstControl = %+v, %v; want seq 2", m, err)
	}
	if _, err := readFirstControl(bufio.NewReader(&b)); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %v; want EOF", err)
	}
}

// TestVsockListener listens on a real vsock port where the kernel has vsock, and checks that Close ends
// a waiting Accept. (A connection needs a VM, or vsock_loopback.)
func TestVsockListener(t *testing.T) {
	ln, err := listenVsock(40000 + uint32(os.Getpid()%20000))
	if errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Skipf("no vsock here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end Accept")
	}
}
