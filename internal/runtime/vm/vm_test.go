package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// guestSocket listens where a VMM would and runs guest on each connection, as a hostile guest may
// behave.
func guestSocket(t *testing.T, guest func(c net.Conn)) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "port.sock")
	ln, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); guest(c) }()
		}
	}()
	return p
}

// TestDialLink: the node finds the guest's ack after what an earlier connection left (and a forged
// ack of another nonce), and the link starts right after it; a guest that never answers, or floods,
// fails the dial within its deadline.
func TestDialLink(t *testing.T) {
	p := guestSocket(t, func(c net.Conn) {
		c.Write([]byte("stale frames of the last connection"))
		c.Write(append(append([]byte(nil), proto.VMAck...), bytes.Repeat([]byte{1}, proto.VMNonceSize)...))
		sync := make([]byte, len(proto.VMSync)+proto.VMNonceSize)
		if _, err := io.ReadFull(c, sync); err != nil || !bytes.HasPrefix(sync, proto.VMSync) {
			return
		}
		c.Write(append(append([]byte(nil), proto.VMAck...), sync[len(proto.VMSync):]...))
		c.Write([]byte("hello"))
	})
	conn, err := DialLink(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	if _, err := io.ReadFull(conn, b); err != nil || string(b) != "hello" {
		t.Errorf("after the handshake: %q, %v", b, err)
	}
	conn.Close()

	silent := guestSocket(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := DialLink(ctx, silent); err == nil {
		t.Error("a guest that never answered was dialled")
	}
	flood := guestSocket(t, func(c net.Conn) {
		junk := bytes.Repeat([]byte{0}, 64<<10)
		for {
			if _, err := c.Write(junk); err != nil {
				return
			}
		}
	})
	if _, err := DialLink(t.Context(), flood); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a flooding guest: %v; want invalid argument", err)
	}
}

// TestControl: reports are followed past bad lines; Wait returns once the message is applied and the
// daemon listens, fails for a message the guest refused, and ends with the connection or ctx.
func TestControl(t *testing.T) {
	got := make(chan proto.VMControl, 4)
	p := guestSocket(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			var m proto.VMControl
			if err := proto.ReadVMLine(r, &m); err != nil {
				return
			}
			got <- m
			c.Write([]byte("garbage\n" + strings.Repeat("x", 100) + "\n"))
			if m.Hostname == "forge" {
				// A report of a message never sent, claiming the daemon listens.
				proto.WriteVMLine(c, proto.VMReport{Seq: m.Seq + 1000, Listening: true})
				continue
			}
			if m.Hostname == "refuse" {
				proto.WriteVMLine(c, proto.VMReport{Seq: m.Seq, Error: "no"})
				continue
			}
			proto.WriteVMLine(c, proto.VMReport{Seq: m.Seq, Listening: m.Wake})
		}
	})
	c, err := DialControl(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seq, err := c.Send(proto.VMControl{Hostname: "a"})
	if err != nil || seq <= 0 {
		t.Fatalf("Send: %d, %v", seq, err)
	}
	if err := c.Wait(t.Context(), seq, false); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m.Seq != seq || m.Hostname != "a" {
		t.Errorf("the guest got %+v", m)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := c.Wait(ctx, seq, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait for listening before the daemon listens: %v", err)
	}
	fseq, _ := c.Send(proto.VMControl{Hostname: "forge"})
	<-got
	ctx2, cancel2 := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel2()
	if err := c.Wait(ctx2, fseq, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait after a forged report: %v; want it to go on waiting", err)
	}
	seq, _ = c.Send(proto.VMControl{Wake: true})
	if err := c.Wait(t.Context(), seq, true); err != nil {
		t.Error(err)
	}
	seq, _ = c.Send(proto.VMControl{Hostname: "refuse"})
	if err := c.Wait(t.Context(), seq, false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a refused message: %v", err)
	}
	c.conn.Close()
	if err := c.Wait(t.Context(), seq+1, false); err == nil {
		t.Error("Wait on a closed connection returned nil")
	}
}

// TestModuleOrder: with the guest kernel installed, every module a guest needs comes after what it
// depends on.
func TestModuleOrder(t *testing.T) {
	k, err := FindKernel("")
	if err != nil {
		t.Skipf("no guest kernel (scripts/install.sh unpacks it): %v", err)
	}
	order, err := ModuleOrder(k, GuestModules)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range order {
		names = append(names, modName(p))
	}
	t.Logf("load order: %v", names)
	for _, m := range GuestModules {
		if !slices.Contains(names, m) {
			t.Errorf("%s is not in the order", m)
		}
	}
	for i, p := range order {
		deps, _, err := modDeps(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range deps {
			if j := slices.Index(names, d); j < 0 || j > i {
				t.Errorf("%s comes before its dependency %s", names[i], d)
			}
		}
	}
	if _, err := ModuleOrder(k, []string{"no_such_module"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an unknown module: %v", err)
	}
}

// TestInitramfs: the archive is newc with /init and the modules, and is made once per input.
func TestInitramfs(t *testing.T) {
	k, err := FindKernel("")
	if err != nil {
		t.Skipf("no guest kernel (scripts/install.sh unpacks it): %v", err)
	}
	dir := t.TempDir()
	daemon := filepath.Join(dir, "daemon")
	os.WriteFile(daemon, []byte("#!/bin/true\n"), 0o755)
	p, err := Initramfs(filepath.Join(dir, "cache"), k, daemon)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if !bytes.HasPrefix(b, []byte("070701")) || !bytes.Contains(b, []byte("init\x00")) || !bytes.Contains(b, []byte("modules/order\x00")) || !bytes.Contains(b, []byte("TRAILER!!!\x00")) {
		t.Errorf("not the archive expected (%d bytes)", len(b))
	}
	if again, err := Initramfs(filepath.Join(dir, "cache"), k, daemon); err != nil || again != p {
		t.Errorf("a second call: %s, %v; want %s", again, err, p)
	}
	os.WriteFile(daemon, []byte("#!/bin/false\n"), 0o755)
	if other, err := Initramfs(filepath.Join(dir, "cache"), k, daemon); err != nil || other == p {
		t.Errorf("a new daemon: %s, %v; want a new archive", other, err)
	}
}

// TestProbeCached: the probe's answer is kept for the files it depends on; a changed file probes again.
func TestProbeCached(t *testing.T) {
	dir := t.TempDir()
	vmm, cache := filepath.Join(dir, "vmm"), filepath.Join(dir, "run", "probe")
	if err := os.WriteFile(vmm, []byte("v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := 0
	probe := func() bool { calls++; return true }
	if !ProbeCached(cache, []string{vmm}, probe) || !ProbeCached(cache, []string{vmm}, probe) || calls != 1 {
		t.Fatalf("two calls: %d probes; want one, its answer kept", calls)
	}
	if err := os.WriteFile(vmm, []byte("version 2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if ProbeCached(cache, []string{vmm}, func() bool { calls++; return false }) || calls != 2 {
		t.Errorf("after the VMM changed: %d probes; want a second one, its answer", calls)
	}
	if err := os.WriteFile(cache, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ProbeCached(cache, []string{vmm}, probe); calls != 3 {
		t.Errorf("over a garbled cache: %d probes; want a third", calls)
	}
	if ProbeCached("", []string{vmm}, probe); calls != 4 {
		t.Errorf("without a cache: %d probes; want a fourth", calls)
	}
}
