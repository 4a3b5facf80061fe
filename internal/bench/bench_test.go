// Package bench holds Airlock's benchmarks: real sandboxes driven through the public API with the Go SDK,
// the way a user's agent would. Each reports the median (p50_ms) and p90_ms of its iterations besides
// the mean, since this kind of machine is shared and noisy. Run:
//
//	sudo go test -run '^$' -bench . -benchtime 20x ./internal/bench/
package bench

import (
	"bytes"
	"context"
	"os/exec"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// timings records iteration times and reports their percentiles.
type timings struct {
	mu sync.Mutex
	// d is guarded by mu.
	d []time.Duration
}

func (t *timings) add(d time.Duration) {
	t.mu.Lock()
	t.d = append(t.d, d)
	t.mu.Unlock()
}

func (t *timings) report(b *testing.B) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.d) == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(t.d, 0.5)), "p50_ms")
	b.ReportMetric(ms(percentile(t.d, 0.9)), "p90_ms")
}

// percentile returns the p-th percentile (0..1, nearest rank, rounding down) of d, sorting d.
func percentile(d []time.Duration, p float64) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(float64(len(d)-1)*p)]
}

func mustCreate(b *testing.B, c *airlock.Client) *airlock.Sandbox {
	b.Helper()
	return mustCreateOn(b, c, "")
}

// mustCreateOn creates a sandbox on runtime rt ("": the default).
func mustCreateOn(b *testing.B, c *airlock.Client, rt string) *airlock.Sandbox {
	b.Helper()
	sb, err := c.CreateSandbox(context.Background(), airlock.CreateSandboxRequest{TimeoutSeconds: 600, Runtime: rt})
	if err != nil {
		b.Fatal(err)
	}
	if sb.State != airlock.StateRunning {
		b.Fatalf("sandbox %s: %s", sb.State, sb.Reason)
	}
	return sb
}

// BenchmarkColdCreateToFirstExec: from the create request until the first exec in the new sandbox has
// completed, then delete (not timed); on gvisor and, where runc is installed, on runc (target of issue
// 20: ≤ 100 ms).
func BenchmarkColdCreateToFirstExec(b *testing.B) {
	e := testenv.Start(b, testenv.Options{})
	for _, rt := range []string{"gvisor", "runc"} {
		b.Run(rt, func(b *testing.B) {
			if rt == "runc" {
				if _, err := exec.LookPath("runc"); err != nil {
					b.Skip("runc is not installed")
				}
			}
			coldCreate(b, e, rt)
		})
	}
}

func coldCreate(b *testing.B, e *testenv.Env, rt string) {
	coldCreateFrom(b, e, airlock.CreateSandboxRequest{TimeoutSeconds: 600, Runtime: rt})
}

// coldCreateFrom times create to first exec of sandboxes made with req; the first, which builds or
// mounts the template, is not timed.
func coldCreateFrom(b *testing.B, e *testenv.Env, req airlock.CreateSandboxRequest) {
	createThenExec(b, e, req, "true")
}

// createThenExec times create to the end of a first exec of cmd (which must succeed) in sandboxes made
// with req; the first, which builds or mounts the template, is not timed.
func createThenExec(b *testing.B, e *testenv.Env, req airlock.CreateSandboxRequest, cmd ...string) {
	createThenExecAfter(b, e, req, nil, cmd...)
}

// createThenExecAfter is createThenExec that calls before (if not nil), untimed, before each create.
func createThenExecAfter(b *testing.B, e *testenv.Env, req airlock.CreateSandboxRequest, before func(), cmd ...string) {
	ctx := context.Background()
	create := func() *airlock.Sandbox {
		sb, err := e.Client.CreateSandbox(ctx, req)
		if err != nil || sb.State != airlock.StateRunning {
			b.Fatalf("create: %+v, %v", sb, err)
		}
		return sb
	}
	_ = e.Client.DeleteSandbox(ctx, create().ID)
	var tm timings
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if before != nil {
			b.StopTimer()
			before()
			b.StartTimer()
		}
		start := time.Now()
		sb := create()
		if res, err := e.Client.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: cmd}); err != nil || res.ExitCode != 0 {
			b.Fatalf("exec %q: %+v, %v", cmd, res, err)
		}
		tm.add(time.Since(start))
		b.StopTimer()
		if err := e.Client.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	tm.report(b)
}

// BenchmarkExecTrue: the round trip of a run-to-completion exec of `true` in a running sandbox, over
// the HTTP API.
func BenchmarkExecTrue(b *testing.B) {
	e := testenv.Start(b, testenv.Options{})
	execTrue(b, e.Client)
}

// execTrue times b.N execs of `true` through c in a sandbox it creates, after one untimed exec (the
// first, which opens the control plane's channel to the sandbox's daemon), and reports their p50 and
// p90.
func execTrue(b *testing.B, c *airlock.Client) {
	b.Helper()
	ctx := context.Background()
	sb := mustCreate(b, c)
	execOnce := func() {
		res, err := c.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec true: %+v, %v", res, err)
		}
	}
	execOnce()
	var tm timings
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		execOnce()
		tm.add(time.Since(start))
	}
	b.StopTimer()
	tm.report(b)
}

// BenchmarkWriteRead1MiB: write a 1 MiB file into a sandbox and read it back, over the HTTP API.
func BenchmarkWriteRead1MiB(b *testing.B) {
	e := testenv.Start(b, testenv.Options{})
	ctx := context.Background()
	sb := mustCreate(b, e.Client)
	data := bytes.Repeat([]byte("airlock!"), 1<<17)
	var tm timings
	b.SetBytes(int64(2 * len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := e.Client.WriteFile(ctx, sb.ID, "/home/user/bench.bin", bytes.NewReader(data), 0o644); err != nil {
			b.Fatal(err)
		}
		got, err := e.Client.ReadFile(ctx, sb.ID, "/home/user/bench.bin")
		if err != nil || len(got) != len(data) {
			b.Fatalf("read back %d bytes, %v", len(got), err)
		}
		tm.add(time.Since(start))
	}
	tm.report(b)
}

// BenchmarkConcurrentCreate10: ten creates at once, until all ten sandboxes run; then they are deleted
// (not timed).
func BenchmarkConcurrentCreate10(b *testing.B) {
	e := testenv.Start(b, testenv.Options{})
	ctx := context.Background()
	mustCreate(b, e.Client)
	var tm timings
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		ids := make([]string, 10)
		var wg sync.WaitGroup
		errs := make(chan error, 10)
		for j := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
				if err != nil {
					errs <- err
					return
				}
				ids[j] = sb.ID
			}()
		}
		wg.Wait()
		tm.add(time.Since(start))
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		b.StopTimer()
		for _, id := range ids {
			if err := e.Client.DeleteSandbox(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	tm.report(b)
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{5, 1, 3, 2, 4, 9, 7, 8, 6, 10}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0, 1}, {0.5, 5}, {0.9, 9}, {1, 10}} {
		if got := percentile(d, tc.p); got != tc.want {
			t.Errorf("percentile(%v) = %v; want %v", tc.p, got, tc.want)
		}
	}
}
