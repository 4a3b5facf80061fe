package node_test

import (
	"context"
	"errors"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/runtime"
)

// clock is a fake clock for the sampler, safe for its goroutine.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestSandboxMetrics: the node keeps a sandbox's readings with its CPU use between them (over its CPUs,
// its limit rounded up to whole cores), answers a window of them and a reading taken now when the window
// reaches the present, keeps at most SampleKeep, and drops them when the sandbox goes.
func TestSandboxMetrics(t *testing.T) {
	e := newEnv(t)
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	// The loop never fires on its own here: the test takes each round with SampleAll.
	node.SetMetricsClock(e.n, clk.now, time.Hour)
	ctx := t.Context()
	t0 := clk.now()
	limits := nodecontract.Limits{CPUMillis: 1500, MemoryBytes: 256 << 20, DiskBytes: 1 << 30}
	if err := e.n.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_m", TenantID: "tn_1", Template: "default", Limits: limits}); err != nil {
		t.Fatal(err)
	}
	// A sandbox just taken on has one reading: the one taken now, with no interval behind it yet (the
	// fake's CPU time at the start was 0).
	got, err := e.n.SandboxMetrics(ctx, "sb_m", time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []nodecontract.Sample{{Time: t0, CPUCount: 2}}; !cmp.Equal(got, want) {
		t.Errorf("a new sandbox's metrics: %+v; want %+v", got, want)
	}

	stats := runtime.Stats{MemoryUsed: 64 << 20, MemoryCache: 8 << 20, MemoryLimit: 256 << 20, DiskUsed: 10 << 20, DiskTotal: 1000 << 20}
	sample := func(cpu time.Duration, memUsed int64) {
		t.Helper()
		clk.advance(5 * time.Second)
		stats.CPUTime, stats.MemoryUsed = cpu, memUsed
		if err := e.d.SetStats("sb_m", stats); err != nil {
			t.Fatal(err)
		}
		node.SampleAll(e.n)
	}
	sample(5*time.Second, 70<<20)  // one of two cores: 50%
	sample(15*time.Second, 80<<20) // both: 100%
	sample(15*time.Second, 90<<20) // idle
	want := func(at time.Duration, pct float64, mem int64) nodecontract.Sample {
		return nodecontract.Sample{Time: t0.Add(at), CPUCount: 2, CPUUsedPct: pct, MemUsed: mem, MemCache: 8 << 20, MemTotal: 256 << 20,
			DiskUsed: 10 << 20, DiskTotal: 1000 << 20}
	}
	stored := []nodecontract.Sample{want(5*time.Second, 50, 70<<20), want(10*time.Second, 100, 80<<20), want(15*time.Second, 0, 90<<20)}
	// 2.5 s later, a core busy since the last reading: 2.5 s of 2 cores over 2.5 s.
	clk.advance(2500 * time.Millisecond)
	stats.CPUTime = 17500 * time.Millisecond
	if err := e.d.SetStats("sb_m", stats); err != nil {
		t.Fatal(err)
	}
	got, err = e.n.SandboxMetrics(ctx, "sb_m", time.Time{}, clk.now())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(append(append([]nodecontract.Sample(nil), stored...), want(17500*time.Millisecond, 50, 90<<20)), got); d != "" {
		t.Errorf("every reading and one now (-want +got):\n%s", d)
	}
	// A window in the past: its readings only, both bounds in.
	got, err = e.n.SandboxMetrics(ctx, "sb_m", t0.Add(5*time.Second), t0.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(stored[:2], got); d != "" {
		t.Errorf("a window of the past (-want +got):\n%s", d)
	}
	// A window after now holds nothing, and is still a list.
	if got, err := e.n.SandboxMetrics(ctx, "sb_m", clk.now().Add(time.Minute), clk.now().Add(time.Hour)); err != nil || got == nil || len(got) != 0 {
		t.Errorf("a window in the future: %#v, %v; want an empty list", got, err)
	}
	if _, err := e.n.SandboxMetrics(ctx, "sb_m", t0.Add(time.Minute), t0); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("start after end: %v; want invalid argument", err)
	}
	if _, err := e.n.SandboxMetrics(ctx, "sb_none", time.Time{}, time.Time{}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a sandbox the node does not run: %v; want failed precondition", err)
	}

	// The ring holds SampleKeep readings, the latest.
	for range node.SampleKeep + 10 {
		sample(stats.CPUTime, stats.MemoryUsed)
	}
	got, err = e.n.SandboxMetrics(ctx, "sb_m", time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != node.SampleKeep+1 || !got[0].Time.Equal(clk.now().Add(-(node.SampleKeep-1)*5*time.Second)) {
		t.Errorf("after %d more readings: %d, the first at %v; want the last %d and one now", node.SampleKeep+10, len(got), got[0].Time, node.SampleKeep)
	}

	if err := e.n.DestroySandbox(ctx, "sb_m"); err != nil {
		t.Fatal(err)
	}
	if node.HasMetrics(e.n, "sb_m") {
		t.Error("the node keeps the readings of a destroyed sandbox")
	}
	if _, err := e.n.SandboxMetrics(ctx, "sb_m", time.Time{}, time.Time{}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a destroyed sandbox's metrics: %v; want failed precondition", err)
	}
}

// TestSamplerStopsWithTheNode: the sampling loop reads every sandbox each interval, and ends with the
// node: no goroutine of it is left after Shutdown.
func TestSamplerStopsWithTheNode(t *testing.T) {
	e := newEnv(t)
	node.SetMetricsClock(e.n, time.Now, 20*time.Millisecond)
	ctx := t.Context()
	e.create(t, "sb_a")
	e.create(t, "sb_b")
	for _, id := range []string{"sb_a", "sb_b"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := e.n.SandboxMetrics(ctx, id, time.Time{}, time.Now().Add(-time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) >= 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d readings in 10 s at an interval of 20 ms", id, len(got))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !samplerRuns() {
		t.Fatal("no sampling goroutine while sandboxes run (the check below would pass for nothing)")
	}
	if err := e.n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if samplerRuns() {
		t.Error("the sampling goroutine outlived Shutdown")
	}
}

// samplerRuns reports whether a goroutine of the node's sampling loop runs.
func samplerRuns() bool {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	return strings.Contains(b.String(), "node.(*Local).sampleLoop")
}
