package keeper

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const cgroupRoot = "/sys/fs/cgroup"

// testCgroup makes a cgroup parent of the test's own, with a child cgroup sb in the freezer and pids
// hierarchies, and removes them at the end. It skips without root or those hierarchies.
func testCgroup(t *testing.T) (parent string, join func(pid int)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes cgroups")
	}
	hier := []string{"freezer", "pids"}
	for _, h := range hier {
		if _, err := os.Stat(filepath.Join(cgroupRoot, h, "cgroup.procs")); err != nil {
			t.Skipf("needs the cgroup v1 %s hierarchy at %s: %v", h, cgroupRoot, err)
		}
	}
	parent = fmt.Sprintf("/airlock-keeper-test-%d", os.Getpid())
	for _, h := range hier {
		if err := os.MkdirAll(filepath.Join(cgroupRoot, h, parent, "sb"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, h := range hier {
			_ = write(filepath.Join(cgroupRoot, h, parent, "freezer.state"), "THAWED")
			for i := 0; i < 100; i++ {
				_ = os.Remove(filepath.Join(cgroupRoot, h, parent, "sb"))
				if os.Remove(filepath.Join(cgroupRoot, h, parent)) == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	return parent, func(pid int) {
		t.Helper()
		for _, h := range hier {
			if err := write(filepath.Join(cgroupRoot, h, parent, "sb", "cgroup.procs"), strconv.Itoa(pid)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// proc is a process a test started, waited for once.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// start starts a shell loop (forking all the time with fork), in the cgroup if join is set.
func start(t *testing.T, fork bool, join func(int)) *proc {
	t.Helper()
	script := "while :; do sleep 1; done"
	if fork {
		script = "while :; do sleep 0.01 & done"
	}
	p := &proc{cmd: exec.Command("sh", "-c", script), done: make(chan struct{})}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	if join != nil {
		join(p.cmd.Process.Pid)
	}
	return p
}

// exited waits up to d for p to end and reports whether SIGKILL ended it.
func exited(p *proc, d time.Duration) (bool, error) {
	select {
	case <-p.done:
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true, nil
		}
		return false, fmt.Errorf("ended otherwise: %v", p.err)
	case <-time.After(d):
		return false, nil
	}
}

// TestFenceKillsTheSubtreeOnly: every process under the parent dies, forking ones included; one
// outside it lives on (the positive control).
func TestFenceKillsTheSubtreeOnly(t *testing.T) {
	parent, join := testCgroup(t)
	quiet := start(t, false, join)
	forker := start(t, true, join)
	outside := start(t, false, nil)
	time.Sleep(100 * time.Millisecond) // let the forker fork
	killed, left, err := Fence(cgroupRoot, []string{parent})
	if err != nil || left != 0 || killed < 2 {
		t.Fatalf("Fence: killed %d, left %d, err %v; want at least 2 killed, none left", killed, left, err)
	}
	for name, cmd := range map[string]*proc{"quiet": quiet, "forker": forker} {
		if ok, err := exited(cmd, 5*time.Second); !ok {
			t.Errorf("%s process in the cgroup was not killed: %v", name, err)
		}
	}
	if ok, _ := exited(outside, 300*time.Millisecond); ok {
		t.Error("a process outside the cgroup was killed")
	}
	if n := len(procs(filepath.Join(cgroupRoot, "pids", parent))); n != 0 {
		t.Errorf("%d processes left in the cgroup", n)
	}
}

// TestLease: while the node renews, the sandboxes run; when it stops renewing (or dies), they are
// stopped once the lease lapses, and the keeper exits once nothing is left and no node holds it. A
// release makes it exit without stopping anything.
func TestLease(t *testing.T) {
	parent, join := testCgroup(t)
	run := func(t *testing.T) (string, chan error) {
		sock := filepath.Join(t.TempDir(), "keeper.sock")
		done := make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() {
			done <- Run(ctx, Config{Socket: sock, Cgroups: []string{parent}, Lease: 300 * time.Millisecond, Tick: 20 * time.Millisecond})
		}()
		return sock, done
	}
	attach := func(t *testing.T, sock string) *Client {
		c, err := Attach(context.Background(), sock, func() error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("renewed then dropped", func(t *testing.T) {
		sock, done := run(t)
		c := attach(t, sock)
		sb := start(t, false, join)
		for i := 0; i < 10; i++ { // 1 s, three leases long
			if err := c.Renew(300 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ok, _ := exited(sb, 10*time.Millisecond); ok {
			t.Fatal("the sandbox was stopped while its lease was renewed")
		}
		c.Close() // the node dies
		t0 := time.Now()
		if ok, err := exited(sb, 5*time.Second); !ok {
			t.Fatalf("the sandbox ran on after its lease lapsed: %v", err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("stopped %s after the node left; the lease was 300 ms", d)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the keeper did not exit with nothing left to guard")
		}
	})

	t.Run("taken over by a restarted node", func(t *testing.T) {
		sock, _ := run(t)
		c := attach(t, sock)
		sb := start(t, false, join)
		_ = c.Renew(300 * time.Millisecond)
		c.Close()
		c2 := attach(t, sock) // the node started again in time
		for i := 0; i < 8; i++ {
			if err := c2.Renew(300 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ok, _ := exited(sb, 10*time.Millisecond); ok {
			t.Fatal("the sandbox was stopped though the restarted node renewed its lease")
		}
		if err := c2.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		_ = sb.cmd.Process.Kill()
	})

	t.Run("released", func(t *testing.T) {
		sock, done := run(t)
		c := attach(t, sock)
		sb := start(t, false, join)
		if err := c.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		time.Sleep(500 * time.Millisecond) // past the lease
		if ok, _ := exited(sb, 10*time.Millisecond); ok {
			t.Fatal("a released keeper stopped the sandbox")
		}
	})

	t.Run("bad renewals detach", func(t *testing.T) {
		sock, _ := run(t)
		c := attach(t, sock)
		if err := c.send("renew 99999999999\n"); err != nil {
			t.Fatal(err)
		}
		sb := start(t, false, join)
		if ok, err := exited(sb, 5*time.Second); !ok {
			t.Fatalf("a lease renewed beyond MaxLease was kept: %v", err)
		}
	})
}

func TestOneKeeperPerSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "keeper.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = Run(ctx, Config{Socket: sock, Cgroups: []string{"/airlock-keeper-none"}, CgroupRoot: t.TempDir()})
	}()
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		} else if i > 200 {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if err := Run(ctx, Config{Socket: sock, Cgroups: []string{"/x"}}); err == nil {
		t.Fatal("a second keeper took a socket a live one answers at")
	}
	for _, bad := range []string{"", "/", "relative", "/a/../b"} {
		if err := Run(ctx, Config{Socket: sock + "2", Cgroups: []string{bad}}); err == nil {
			t.Errorf("cgroup parent %q accepted", bad)
		}
	}
}
