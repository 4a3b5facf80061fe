package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// floodScript opens connections to the upstream's TCP echo port as fast as it can for a few seconds,
// holding them all, then prints how many connected and how many of those the gateway kept or reset.
const floodScript = `
import socket, time, json, sys
held, ok, other = [], 0, 0
end = time.time() + float(sys.argv[1])
while time.time() < end:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("203.0.113.2", 7000))
        ok += 1
        held.append(s)
    except OSError:
        other += 1
        s.close()
time.sleep(1)
alive, reset = 0, 0
for s in held:
    s.setblocking(False)
    try:
        if s.recv(1):
            alive += 1  # the echo server's greeting
        else:
            reset += 1  # closed
    except BlockingIOError:
        alive += 1
    except OSError:
        reset += 1
print(json.dumps({"ok": ok, "other": other, "alive": alive, "reset": reset}))
`

// TestEgressFloodStaysInItsSandbox: one sandbox floods the gateway with connections; past its limits
// its new connections are reset at once, its flow log says so in a few records, not
// one per connection, and a second sandbox's HTTPS requests all succeed meanwhile (their latency is
// logged; benchmarks, not this test, judge it).
func TestEgressFloodStaysInItsSandbox(t *testing.T) {
	n := startNetEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	pol := func(l *airlock.NetworkLimits) *airlock.NetworkPolicy {
		return &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{
			{Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"443"}},
			{Action: "allow", CIDRs: []string{"203.0.113.2/32"}, Ports: []airlock.PortRange{"7000"}},
		}, Limits: l}
	}
	flooder := n.sandbox(t, pol(&airlock.NetworkLimits{MaxConnections: 64, ConnectionsPerSecond: 50}))
	victim := n.sandbox(t, pol(nil))
	get := `python3 -c '
import ssl, time, urllib.request
ctx = ssl.create_default_context(cafile="/home/user/ca.pem")
t = time.time()
body = urllib.request.urlopen("https://api.example.test/v1/models", timeout=10, context=ctx).read().decode()
print("%.1f %s" % ((time.time() - t) * 1000, body.split()[0]))'`
	base := latencies(t, n, victim.ID, get, 5)

	var wg sync.WaitGroup
	var flood *airlock.ExecResult
	wg.Add(1)
	go func() {
		defer wg.Done()
		flood = run(t, n.Env, flooder.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", floodScript, "6"}, TimeoutSeconds: 60})
	}()
	time.Sleep(time.Second)
	during := latencies(t, n, victim.ID, get, 10)
	wg.Wait()

	var counts struct{ OK, Other, Alive, Reset int }
	if err := json.Unmarshal([]byte(strings.TrimSpace(flood.Stdout)), &counts); err != nil {
		t.Fatalf("flood output %q (stderr %q): %v", flood.Stdout, flood.Stderr, err)
	}
	t.Logf("flood: %d connections, %d failed to connect; of those, %d alive, %d reset; victim p50 %.1f ms before, %.1f ms during",
		counts.OK, counts.Other, counts.Alive, counts.Reset, median(base), median(during))
	if counts.Alive > 64 || counts.Alive < 32 {
		t.Errorf("the flooding sandbox holds %d live connections; want about its limit, 64", counts.Alive)
	}
	if counts.Reset < 100 {
		t.Errorf("%d of the flooding sandbox's connections were reset; want its limits to refuse most", counts.Reset)
	}
	flows, err := n.Client.Egress(ctx, flooder.ID, airlock.EgressOptions{Decision: airlock.DecisionDeny, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	limits := 0
	for _, f := range flows.Flows {
		if f.Rule == "limit" {
			limits++
		}
	}
	if limits == 0 || limits > 12 {
		t.Errorf("%d limit records in the flooder's flow log for %d refusals; want a few (at most one a second)", limits, counts.Reset)
	}
	// Bad limits are refused with a 400 naming the field.
	if _, err := n.Client.SetNetwork(ctx, victim.ID, airlock.NetworkPolicy{Limits: &airlock.NetworkLimits{MaxConnections: -1}}); !errorsIsInvalid(err) || !strings.Contains(err.Error(), "limits.max_connections") {
		t.Errorf("max_connections -1: %v; want a 400 naming limits.max_connections", err)
	}
	if _, err := n.Client.SetNetwork(ctx, victim.ID, airlock.NetworkPolicy{Limits: &airlock.NetworkLimits{ConnectionsPerSecond: 1 << 20}}); !errorsIsInvalid(err) || !strings.Contains(err.Error(), "limits.connections_per_second") {
		t.Errorf("connections_per_second 1<<20: %v; want a 400 naming limits.connections_per_second", err)
	}
}

// latencies runs script in sandbox id k times; each run must print its latency in ms and the
// upstream's marker.
func latencies(t *testing.T, n *netEnv, id, script string, k int) []float64 {
	t.Helper()
	var out []float64
	for range k {
		res := sh(t, n.Env, id, script)
		var ms float64
		var marker string
		if _, err := fmt.Sscan(res.Stdout, &ms, &marker); err != nil || marker != upstreamMarker {
			t.Fatalf("request from the second sandbox: %q (stderr %q); want it to succeed", res.Stdout, res.Stderr)
		}
		out = append(out, ms)
	}
	return out
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
