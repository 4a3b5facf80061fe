package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// TestQuiesceAndWake: for a checkpoint the daemon lets go of its connection and socket, keeps its
// processes, and listens again on the wake signal.
func TestQuiesceAndWake(t *testing.T) {
	cfg := testConfig(t)
	wake := make(chan struct{}, 1)
	sock := make(chan string, 1)
	cfg.Listen = func() (net.Listener, error) { s := <-sock; sock <- s; return net.Listen("unix", s) }
	cfg.Wake = wake
	d := startDaemon(t, cfg)
	sock <- d.socket
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := d.dial(t, link.Options{})
	p, err := c.Start(ctx, proto.StartRequest{Argv: []string{"sleep", "30"}}, link.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after quiesce: %v; want it gone", err)
	}
	if _, err := net.Dial("unix", d.socket); err == nil {
		t.Fatal("dialed a quiesced daemon")
	}
	wake <- struct{}{}
	var c2 *link.Client
	for c2 == nil {
		if c2, err = link.Dial(ctx, d.socket, link.Options{}); err != nil {
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	defer c2.Close()
	ps, err := c2.ListProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].ID != p.ID() || ps[0].Exit != nil {
		t.Fatalf("processes after wake: %+v; want the sleep still running", ps)
	}
	// A stray wake while not quiesced changes nothing; quiescing twice is fine.
	wake <- struct{}{}
	if err := c2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestQuiesceRefusedWithoutListen: a daemon that could not listen again refuses to quiesce.
func TestQuiesceRefusedWithoutListen(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := d.dial(t, link.Options{})
	if err := c.Quiesce(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("quiesce: %v; want ErrFailedPrecondition", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("the connection should survive a refused quiesce: %v", err)
	}
}

// TestQuiesceWakeControl: a change of the control directory's wake file wakes a quiesced daemon as the
// signal does; a wake file that stays as it was when the daemon quiesced does not wake it.
func TestQuiesceWakeControl(t *testing.T) {
	cfg := testConfig(t)
	sock := make(chan string, 1)
	cfg.Listen = func() (net.Listener, error) { s := <-sock; sock <- s; return net.Listen("unix", s) }
	cfg.Wake = make(chan struct{})
	cfg.Control = t.TempDir()
	wakeFile := filepath.Join(cfg.Control, proto.ControlWake)
	d := startDaemon(t, cfg)
	sock <- d.socket
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := d.dial(t, link.Options{})
	if err := os.WriteFile(wakeFile, []byte("1"), 0o600); err != nil { // before the quiesce
		t.Fatal(err)
	}
	if err := c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(d.socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket 50ms after a quiesce with an unchanged wake file: %v; want the daemon still quiesced", err)
	}
	if err := os.WriteFile(wakeFile, []byte("2"), 0o600); err != nil {
		t.Fatal(err)
	}
	var c2 *link.Client
	var err error
	for c2 == nil {
		if c2, err = link.Dial(ctx, d.socket, link.Options{}); err != nil {
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	defer c2.Close()
	if err := c2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHello: a daemon proves it holds the link key of its control directory; a client with another
// key, or a daemon without a key, gets ErrNotProven, and a client without a key is not asked for one.
func TestHello(t *testing.T) {
	key := bytes.Repeat([]byte{7}, proto.LinkKeySize)
	cfg := testConfig(t)
	cfg.Control = t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg.Control, proto.ControlKey), key, 0o400); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := link.Dial(ctx, d.socket, link.Options{Key: key, Shared: true})
	if err != nil {
		t.Fatalf("dial with the right key: %v", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping after the proof: %v", err)
	}
	c.Close()
	other := bytes.Repeat([]byte{8}, proto.LinkKeySize)
	if c, err := link.Dial(ctx, d.socket, link.Options{Key: other}); !errors.Is(err, link.ErrNotProven) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial with another key: %v; want ErrNotProven", err)
	}
}

// TestHelloWithoutKey: a daemon without a control directory cannot prove anything; a client without
// a key does not ask it to.
func TestHelloWithoutKey(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := link.Dial(ctx, d.socket, link.Options{Key: bytes.Repeat([]byte{7}, proto.LinkKeySize)}); !errors.Is(err, link.ErrNotProven) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial a daemon without a key: %v; want ErrNotProven", err)
	}
	c := d.dial(t, link.Options{})
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping without a proof asked: %v", err)
	}
}

// TestWakeTakesControlEnv: a daemon woken with an environment file in its control directory (restored
// from a template's start snapshot) starts its processes from that environment, not the one it was
// checkpointed with; a bad file is ignored; without one the environment stays.
func TestWakeTakesControlEnv(t *testing.T) {
	cfg := testConfig(t)
	sock := make(chan string, 1)
	cfg.Listen = func() (net.Listener, error) { s := <-sock; sock <- s; return net.Listen("unix", s) }
	cfg.Wake = make(chan struct{})
	cfg.Control = t.TempDir()
	cfg.Env = []string{"FROM=checkpoint", "KEEP=1"}
	wakeFile := filepath.Join(cfg.Control, proto.ControlWake)
	envFile := filepath.Join(cfg.Control, proto.ControlEnv)
	d := startDaemon(t, cfg)
	sock <- d.socket
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := d.dial(t, link.Options{})
	printed := func(c *link.Client) string {
		t.Helper()
		res, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"/bin/sh", "-c", `echo "$FROM ${KEEP:-none}"`}})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
	// quiesceAndWake writes env (nil: no file) and wakes the daemon; it returns a new client.
	round := 0
	quiesceAndWake := func(c *link.Client, env []byte) *link.Client {
		t.Helper()
		if err := c.Quiesce(ctx); err != nil {
			t.Fatal(err)
		}
		c.Close()
		os.Remove(envFile)
		if env != nil {
			if err := os.WriteFile(envFile, env, 0o400); err != nil {
				t.Fatal(err)
			}
		}
		round++
		if err := os.WriteFile(wakeFile, []byte(strconv.Itoa(round)), 0o600); err != nil {
			t.Fatal(err)
		}
		for {
			c2, err := link.Dial(ctx, d.socket, link.Options{})
			if err == nil {
				return c2
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if got := printed(c); got != "checkpoint 1" {
		t.Fatalf("before: %q", got)
	}
	c = quiesceAndWake(c, nil)
	if got := printed(c); got != "checkpoint 1" {
		t.Errorf("after a wake without an environment file: %q; want the same environment", got)
	}
	c = quiesceAndWake(c, []byte("FROM=restored\x00"))
	if got := printed(c); got != "restored none" {
		t.Errorf("after a wake with an environment file: %q; want only the file's", got)
	}
	c = quiesceAndWake(c, []byte("NOT AN ENTRY"))
	defer c.Close()
	if got := printed(c); got != "restored none" {
		t.Errorf("after a wake with a bad environment file: %q; want the environment unchanged", got)
	}
}
