package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// scanScript connects to each port of argv[1] and prints, for each, "open", "refused" or another
// errno, as one line "port:result".
const scanScript = `
import socket, sys, errno, time
host = sys.argv[1]
for spec in sys.argv[2:]:
    lo, _, hi = spec.partition("-")
    for port in range(int(lo), int(hi or lo) + 1):
        s = socket.socket()
        s.settimeout(3)
        t = time.time()
        r = s.connect_ex((host, port))
        s.close()
        print("%d:%s" % (port, "open" if r == 0 else errno.errorcode.get(r, str(r))))
`

// TestHonestRefusals: what no rule could allow is refused by the kernel at the SYN: in a default-deny
// sandbox a scan of any address shows nothing open (but port 53, the gateway's resolver) and connect()
// fails with ECONNREFUSED; with a host
// rule on port 443 that port still goes to the gateway (which decides by name), and a CIDR rule opens
// its own port of its own range and nothing else. A policy change moves the refusals with it.
func TestHonestRefusals(t *testing.T) {
	n := startNetEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	scan := func(id, host string, ports ...string) map[string]string {
		t.Helper()
		res := run(t, n.Env, id, airlock.ExecRequest{Cmd: append([]string{"python3", "-c", scanScript, host}, ports...), TimeoutSeconds: 120})
		out := map[string]string{}
		for _, l := range strings.Fields(res.Stdout) {
			port, result, _ := strings.Cut(l, ":")
			out[port] = result
		}
		if len(out) == 0 {
			t.Fatalf("scan of %s: %q (stderr %q)", host, res.Stdout, res.Stderr)
		}
		return out
	}
	denied := n.sandbox(t, nil)
	for _, host := range []string{"203.0.113.2", "192.0.2.1", "100.96.0.1", "127.0.0.1"} {
		// Port 53 is the gateway's DNS server's (over TCP too), for every sandbox: not scanned.
		for port, r := range scan(denied.ID, host, "1-52", "54-100", "443", "7000", "8080") {
			if r != "ECONNREFUSED" {
				t.Errorf("default deny: %s:%s is %s; want ECONNREFUSED", host, port, r)
			}
		}
	}

	sb := n.sandbox(t, &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{
		{Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"443"}},
		{Action: "allow", CIDRs: []string{"203.0.113.2/32"}, Ports: []airlock.PortRange{"7000"}},
	}})
	got := scan(sb.ID, "203.0.113.2", "80", "443", "7000", "7001")
	want := map[string]string{"80": "ECONNREFUSED", "443": "open", "7000": "open", "7001": "ECONNREFUSED"}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("with rules: 203.0.113.2:%s is %s; want %s", p, got[p], w)
		}
	}
	if got := scan(sb.ID, "198.51.100.1", "443", "7000")["7000"]; got != "ECONNREFUSED" {
		t.Errorf("the CIDR rule's port at another address is %s; want ECONNREFUSED", got)
	}
	// A change moves the refusals: now only 80, by name.
	if _, err := n.Client.SetNetwork(ctx, sb.ID, airlock.NetworkPolicy{Rules: []airlock.NetworkRule{
		{Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"80"}}}}); err != nil {
		t.Fatal(err)
	}
	got = scan(sb.ID, "203.0.113.2", "80", "443", "7000")
	want = map[string]string{"80": "open", "443": "ECONNREFUSED", "7000": "ECONNREFUSED"}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("after the change: 203.0.113.2:%s is %s; want %s", p, got[p], w)
		}
	}
	// Default allow refuses nothing in the kernel: the gateway decides (positive control for the scan).
	if _, err := n.Client.SetNetwork(ctx, sb.ID, airlock.NetworkPolicy{Default: "allow"}); err != nil {
		t.Fatal(err)
	}
	if got := scan(sb.ID, "203.0.113.2", "7000")["7000"]; got != "open" {
		t.Errorf("default allow: 203.0.113.2:7000 is %s; want open", got)
	}
}
