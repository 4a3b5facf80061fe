package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
)

// TestMuxSharesOneDaemon: clients sharing one connection through a link.Mux (the node's own, and control
// planes reaching the sandbox through the node) run calls at once without seeing each other's streams;
// a process one starts, another attaches to and waits for; one client going away leaves the others and
// the process alone.
func TestMuxSharesOneDaemon(t *testing.T) {
	d := startDaemon(t, testConfig(t))
	cs := d.dialMux(t, 3, link.Options{})
	ctx := testCtx(t)

	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i, c := range cs {
		for j := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				want := fmt.Sprintf("client %d call %d", i, j)
				res, err := c.Exec(ctx, proto.ExecRequest{Argv: []string{"echo", want}})
				if err != nil {
					errs <- err
				} else if string(res.Stdout) != want+"\n" {
					errs <- fmt.Errorf("client %d call %d got %q", i, j, res.Stdout)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	var out bytes.Buffer
	p, err := cs[0].Start(ctx, proto.StartRequest{Argv: []string{"sh", "-c", "read x; echo got $x"}, Stdin: true}, link.ProcessOptions{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	cs[0].Close() // the starter goes; the process lives on
	var out2 bytes.Buffer
	p2, err := cs[1].Attach(ctx, p.ID(), link.ProcessOptions{Stdout: &out2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	st, err := p2.Wait(ctx)
	if err != nil || st.ExitCode != 0 || !strings.Contains(out2.String(), "got hello") {
		t.Fatalf("attached through another client: %+v %v %q", st, err, out2.String())
	}
	if err := cs[2].Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkPingMux is BenchmarkPing through a link.Mux.
func BenchmarkPingMux(b *testing.B) {
	d := startDaemon(b, testConfig(b))
	c := d.dialMux(b, 1, link.Options{})[0]
	ctx := context.Background()
	for b.Loop() {
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteRead1MiBMux is BenchmarkWriteRead1MiB through a link.Mux.
func BenchmarkWriteRead1MiBMux(b *testing.B) {
	d := startDaemon(b, testConfig(b))
	benchWriteRead(b, d.dialMux(b, 1, link.Options{})[0])
}
