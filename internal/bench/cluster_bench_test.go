package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// BenchmarkClusterLoad is issue 8's load figure: two control-plane replicas (airlock server) and three
// nodes (airlock node run), each a process of its own, on PostgreSQL and an S3 server. Each iteration
// creates 200 sandboxes (8 at a time, through both replicas in turn; each deleted once it runs, not
// timed) and makes 10,000 reconnects (a get and an exec of true on one of 20 sandboxes, 16 at a time,
// through both replicas). It reports each phase's throughput and its p50 and p99. Run with
// -benchtime 1x.
func BenchmarkClusterLoad(b *testing.B) {
	clients := testenv.StartCluster(b, 2, 3).Clients
	ctx := context.Background()
	// A first sandbox on each node builds its template and warms it up.
	var warm []string
	for range 3 {
		warm = append(warm, mustCreate(b, clients[0]).ID)
	}
	for _, id := range warm {
		_ = clients[0].DeleteSandbox(ctx, id)
	}

	const creates, reconnects, targets = 200, 10000, 20
	b.ResetTimer()
	for range b.N {
		var created timings
		start := time.Now()
		run(b, creates, 8, func(i int) error {
			c := clients[i%2]
			t0 := time.Now()
			sb, err := c.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
			if err != nil {
				return err
			}
			if sb.State != airlock.StateRunning {
				return fmt.Errorf("sandbox %s is %s (%s)", sb.ID, sb.State, sb.Reason)
			}
			created.add(time.Since(t0))
			return c.DeleteSandbox(ctx, sb.ID)
		})
		createFor := time.Since(start)

		b.StopTimer()
		ids := make([]string, targets)
		for i := range ids {
			ids[i] = mustCreate(b, clients[i%2]).ID
		}
		b.StartTimer()
		var again timings
		start = time.Now()
		run(b, reconnects, 16, func(i int) error {
			c := clients[i%2]
			id := ids[i%targets]
			t0 := time.Now()
			if _, err := c.GetSandbox(ctx, id); err != nil {
				return err
			}
			res, err := c.Exec(ctx, id, airlock.ExecRequest{Cmd: []string{"true"}})
			if err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return fmt.Errorf("true exited %d", res.ExitCode)
			}
			again.add(time.Since(t0))
			return nil
		})
		againFor := time.Since(start)
		b.StopTimer()
		for _, id := range ids {
			_ = clients[0].DeleteSandbox(ctx, id)
		}
		b.StartTimer()

		b.ReportMetric(float64(creates)/createFor.Seconds(), "creates/s")
		b.ReportMetric(ms(percentile(created.d, 0.5)), "create_p50_ms")
		b.ReportMetric(ms(percentile(created.d, 0.99)), "create_p99_ms")
		b.ReportMetric(float64(reconnects)/againFor.Seconds(), "reconnects/s")
		b.ReportMetric(ms(percentile(again.d, 0.5)), "reconnect_p50_ms")
		b.ReportMetric(ms(percentile(again.d, 0.99)), "reconnect_p99_ms")
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// run calls f(0..n-1), par at a time, and fails b on the first error.
func run(b *testing.B, n, par int, f func(i int) error) {
	b.Helper()
	work := make(chan int)
	errs := make(chan error, par)
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
