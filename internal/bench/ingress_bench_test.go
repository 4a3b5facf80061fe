package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/gateway/netfilter"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// BenchmarkIngress: small HTTP requests to a server in a sandbox (the test server's JSON route), through
// the ingress (the path form, with an API key, as a program would) and straight into the sandbox's
// network namespace from the host (a socket with the ingress's mark, dialing the sandbox's address: the
// floor the ingress adds to). Each iteration is 200 requests over keep-alive connections from c
// concurrent clients; it reports requests per second over the iteration and the median and p90 of the
// single requests' latencies.
func BenchmarkIngress(b *testing.B) {
	testenv.RequireSandboxes(b)
	e := testenv.Start(b, testenv.Options{})
	ctx := context.Background()
	sb := mustCreate(b, e.Client)
	bin, err := os.ReadFile(testenv.PortServer(b))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.Client.WriteFile(ctx, sb.ID, "/home/user/portserver", bytes.NewReader(bin), 0o755); err != nil {
		b.Fatal(err)
	}
	res, err := e.Client.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c",
		`cd /home/user && (setsid nohup ./portserver -http 0.0.0.0:8080 >ps.out 2>&1 &) && sleep 0.5 && python3 -c '
import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("192.0.2.1", 9)); print(s.getsockname()[0])'`}})
	if err != nil {
		b.Fatal(err)
	}
	ip := strings.TrimSpace(res.Stdout)
	if net.ParseIP(ip) == nil {
		b.Fatalf("sandbox address %q (%s)", ip, res.Stderr)
	}

	marked := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, int(netfilter.IngressMark))
		}); err != nil {
			return err
		}
		return serr
	}}
	direct := &http.Client{Transport: &http.Transport{DialContext: marked.DialContext, MaxIdleConnsPerHost: 64, DisableCompression: true}}
	viaIngress := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	targets := []struct {
		name string
		c    *http.Client
		url  string
		key  string
	}{
		{"direct", direct, "http://" + net.JoinHostPort(ip, "8080") + "/bench", ""},
		{"ingress", viaIngress, e.Client.PortURL(sb.ID, 8080) + "bench", e.APIKey},
	}
	for _, conc := range []int{1, 8} {
		for _, tg := range targets {
			b.Run(fmt.Sprintf("%s/c%d", tg.name, conc), func(b *testing.B) {
				get := func() error {
					req, _ := http.NewRequestWithContext(ctx, "GET", tg.url, nil)
					if tg.key != "" {
						req.Header.Set("Authorization", "Bearer "+tg.key)
					}
					resp, err := tg.c.Do(req)
					if err != nil {
						return err
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						return fmt.Errorf("status %d", resp.StatusCode)
					}
					return nil
				}
				for range 20 { // warm the connections
					if err := get(); err != nil {
						b.Fatal(err)
					}
				}
				const perIter = 200
				var tm timings
				var rps []float64
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					start := time.Now()
					var wg sync.WaitGroup
					errc := make(chan error, conc)
					for w := range conc {
						n := perIter / conc
						if w < perIter%conc {
							n++
						}
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range n {
								t0 := time.Now()
								if err := get(); err != nil {
									errc <- err
									return
								}
								tm.add(time.Since(t0))
							}
						}()
					}
					wg.Wait()
					close(errc)
					if err := <-errc; err != nil {
						b.Fatal(err)
					}
					rps = append(rps, perIter/time.Since(start).Seconds())
				}
				b.StopTimer()
				tm.report(b)
				b.ReportMetric(median(rps), "req/s")
			})
		}
	}
}
