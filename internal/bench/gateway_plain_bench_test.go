package bench

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/netns"
)

// The gateway's own cost, without a sandbox: the same client runs as a plain host process in a
// network namespace routed through a gateway exactly as a sandbox's is (veth, nftables redirect to the
// transparent proxy), against the same process in the host's namespace going straight to the upstream.
// Both paths cross one veth to the upstream's namespace; the gateway path adds the namespace's veth and
// the proxy. This is the fair baseline for the issue-3 targets (the sandbox benchmarks above also count
// gVisor's network stack).

// plainGW is a gateway with two registered namespaces: pass (TLS to the upstream passed through) and
// inject (TLS to the upstream intercepted, a bearer token injected, re-encrypted upstream).
type plainGW struct {
	up          *upstream
	gw          *gateway.Gateway
	dir         string
	pass, inj   string // namespace paths
	injectCAPEM string // the inject namespace's interception CA, which its client trusts
}

func startPlainGateway(b *testing.B) *plainGW {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root for namespaces and nftables")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		b.Skip("needs nsenter")
	}
	up := startUpstream(b)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(up.CAPEM)
	prefix := fmt.Sprintf("algw%d", os.Getpid()%1000)
	gw, err := gateway.New(gateway.Config{
		Table: "airlock_bench", IfacePrefix: prefix, HostsOnly: true, UpstreamRoots: roots, KernelRefusals: true,
		Hosts: map[string][]netip.Addr{upstreamName: {up.IP}},
		Secret: func(context.Context, string, string, string) ([]byte, error) {
			return []byte("bench-token-0123456789"), nil
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gw.Close() })
	g := &plainGW{up: up, gw: gw, dir: b.TempDir()}
	rules := []policy.Rule{
		{Name: "https", Action: policy.ActionAllow, Host: upstreamName, Ports: []policy.PortRange{policy.Port(443)}},
		{Name: "http", Action: policy.ActionAllow, Host: upstreamName, Ports: []policy.PortRange{policy.Port(80)}},
		{Name: "tcp", Action: policy.ActionAllow, CIDRs: []string{up.IP.String() + "/32"}, Ports: []policy.PortRange{{First: 7000, Last: 7001}}},
	}
	for i, ns := range []struct {
		dst   *string
		creds []policy.Credential
	}{
		{&g.pass, nil},
		{&g.inj, []policy.Credential{{Name: "bench", Host: upstreamName, Secret: "k", Header: "Authorization", Format: "Bearer {secret}"}}},
	} {
		path := filepath.Join(g.dir, fmt.Sprintf("ns%d", i))
		if err := netns.Create(path); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = netns.Remove(path) })
		ifName := fmt.Sprintf("%s-%d", prefix, i)
		addr, err := hostnet.Attach(path, ifName)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = hostnet.Detach(ifName) })
		id := fmt.Sprintf("bench-%d", i)
		if err := gw.Register(id, "tn_bench", addr.Sandbox, policy.Policy{Rules: rules, Credentials: ns.creds}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { gw.Unregister(id) })
		*ns.dst = path
	}
	pem, err := gw.CACertPEM("bench-1")
	if err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string][]byte{"netclient.py": []byte(netclient), "ca.pem": up.CAPEM, "inject-ca.pem": pem} {
		if err := os.WriteFile(filepath.Join(g.dir, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	g.injectCAPEM = filepath.Join(g.dir, "inject-ca.pem")
	return g
}

// run runs the client in the namespace at ns ("" for the host's) and returns the times it printed.
// "{ca}" in args is the upstream's CA file, or the interception CA's for the inject namespace.
func (g *plainGW) run(b *testing.B, ns string, args ...string) []time.Duration {
	b.Helper()
	ca := filepath.Join(g.dir, "ca.pem")
	if ns == g.inj {
		ca = g.injectCAPEM
	}
	argv := []string{"python3", filepath.Join(g.dir, "netclient.py")}
	for _, a := range args {
		argv = append(argv, strings.ReplaceAll(a, "{ca}", ca))
	}
	if ns != "" {
		argv = append([]string{"nsenter", "--net=" + ns}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		b.Fatalf("%v: %v: %s", argv, err, out)
	}
	var d []time.Duration
	for _, f := range strings.Fields(string(out)) {
		s, err := strconv.ParseFloat(f, 64)
		if err != nil {
			b.Fatalf("client printed %q", out)
		}
		d = append(d, time.Duration(s*float64(time.Second)))
	}
	return d
}

// throughput downloads size bytes per iteration through the gateway (namespace ns) and directly, in
// alternating order, and reports both medians and their ratio.
func (g *plainGW) throughput(b *testing.B, ns string, size int64, args ...string) {
	var gw, direct []float64
	rate := func(d []time.Duration) float64 {
		if len(d) != 1 {
			b.Fatalf("client printed %d times; want 1", len(d))
		}
		return float64(size) / 1e6 / d[0].Seconds()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			gw = append(gw, rate(g.run(b, ns, args...)))
			direct = append(direct, rate(g.run(b, "", args...)))
		} else {
			direct = append(direct, rate(g.run(b, "", args...)))
			gw = append(gw, rate(g.run(b, ns, args...)))
		}
	}
	b.StopTimer()
	mg, md := median(gw), median(direct)
	b.ReportMetric(mg, "gw_MB/s")
	b.ReportMetric(md, "direct_MB/s")
	b.ReportMetric(mg/md, "ratio")
}

// BenchmarkGatewayThroughput: 64 MiB downloads from a plain process through the gateway and straight.
// Targets (issue 3): ratio ≥ 0.8 for passthrough TLS, ≥ 0.5 with injection.
func BenchmarkGatewayThroughput(b *testing.B) {
	g := startPlainGateway(b)
	size := fmt.Sprint(downloadSize)
	ip := g.up.IP.String()
	b.Run("tls-passthrough", func(b *testing.B) {
		g.throughput(b, g.pass, downloadSize, "get-tls", ip, "443", upstreamName, "{ca}", size)
	})
	b.Run("tls-injection", func(b *testing.B) {
		// Directly, the client verifies the upstream's own certificate and sends no token.
		var gw, direct []float64
		rate := func(d []time.Duration) float64 { return float64(downloadSize) / 1e6 / d[0].Seconds() }
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			gw = append(gw, rate(g.run(b, g.inj, "get-tls", ip, "443", upstreamName, "{ca}", size)))
			direct = append(direct, rate(g.run(b, "", "get-tls", ip, "443", upstreamName, "{ca}", size)))
		}
		b.StopTimer()
		mg, md := median(gw), median(direct)
		b.ReportMetric(mg, "gw_MB/s")
		b.ReportMetric(md, "direct_MB/s")
		b.ReportMetric(mg/md, "ratio")
	})
	b.Run("tcp", func(b *testing.B) {
		g.throughput(b, g.pass, downloadSize, "get-tcp", ip, tcpPort, size)
	})
	b.Run("http", func(b *testing.B) {
		g.throughput(b, g.pass, downloadSize, "get-http", ip, "80", upstreamName, size)
	})
}

// BenchmarkGatewayLatency: per fresh connection, the time to the first byte of the answer through the
// gateway and straight; reports the p50s and the added p50. Target (issue 3): added p50 ≤ 1 ms for
// passthrough.
func BenchmarkGatewayLatency(b *testing.B) {
	g := startPlainGateway(b)
	ip := g.up.IP.String()
	for _, tc := range []struct {
		name string
		ns   string
		args []string
	}{
		{"tcp-client-first-9B", g.pass, []string{"lat-tcp9", ip, tcpPort}},
		{"tls-passthrough", g.pass, []string{"lat-tls", ip, "443", upstreamName, "{ca}"}},
		{"tls-injection", g.inj, []string{"lat-tls", ip, "443", upstreamName, "{ca}"}},
		{"http", g.pass, []string{"lat-http", ip, "80", upstreamName}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			args := append(tc.args[:len(tc.args):len(tc.args)], "40")
			var gw, direct []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				gw = append(gw, g.run(b, tc.ns, args...)...)
				direct = append(direct, g.run(b, "", args...)...)
			}
			b.StopTimer()
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			gp50, dp50 := percentile(gw, 0.5), percentile(direct, 0.5)
			b.ReportMetric(ms(gp50), "gw_p50_ms")
			b.ReportMetric(ms(dp50), "direct_p50_ms")
			b.ReportMetric(ms(gp50-dp50), "added_p50_ms")
		})
	}
}
