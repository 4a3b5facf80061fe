package e2e

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// hostIP returns an IPv4 address of this host's own that is not loopback, for a server the sandboxes
// must not reach.
func hostIP(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				ip = ip.Unmap()
				if ip.Is4() && !ip.IsLoopback() && !netip.MustParsePrefix("100.64.0.0/10").Contains(ip) {
					return ip
				}
			}
		}
	}
	t.Skip("this host has no IPv4 address besides loopback and CGNAT")
	return netip.Addr{}
}

// TestGuardsAreTheOperators: a tenant cannot lift the guard on the node's own address or the cloud
// metadata address (the third attack of issue 19): a rule naming either is refused at create and at
// update with a 400 that names the guarded range, and a sandbox that allows everything reaches neither
// (the flow log names the guard). Positive controls: the same server is reached from the host, and
// the public test upstream from the sandbox.
func TestGuardsAreTheOperators(t *testing.T) {
	testenv.RequireSandboxes(t)
	up := startUpstream(t)
	ip := hostIP(t)
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("host-secret")) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	if resp, err := http.Get("http://" + ln.Addr().String()); err != nil {
		t.Fatalf("positive control: the host server from the host: %v", err)
	} else {
		resp.Body.Close()
	}

	e := testenv.Start(t, testenv.Options{Hosts: map[string][]netip.Addr{"metadata.example.test": {up.MetadataIP}, "api.example.test": {up.IP}}})
	n := &netEnv{Env: e, up: up}
	ctx := ctxT(t, 2*time.Minute)

	refused := []struct {
		cidr, guard string
	}{
		{ip.String() + "/32", ip.String() + "/32 (guard:extra)"},
		{"169.254.169.254/32", "169.254.169.254/32 (guard:metadata)"},
		{"127.0.0.2/32", "127.0.0.0/8 (guard:loopback)"},
		{"10.0.0.0/8", "10.0.0.0/8 (guard:private)"},
		{"100.96.0.0/12", "100.64.0.0/10 (guard:cgnat)"},
	}
	for _, r := range refused {
		p := &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{{Name: "lift", Action: "allow", CIDRs: []string{r.cidr}, Ports: []airlock.PortRange{airlock.PortRange(strconv.Itoa(port))}}}}
		_, err := n.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{Network: p})
		if !errorsIsInvalid(err) || !strings.Contains(err.Error(), r.guard) || !strings.Contains(err.Error(), "operator") {
			t.Errorf("create with an allow rule into %s: %v; want a 400 naming %s", r.cidr, err, r.guard)
		}
	}
	if l, err := n.Client.ListSandboxes(ctx, airlock.ListOptions{}); err != nil || len(l.Sandboxes) != 0 {
		t.Errorf("sandboxes after refused creates: %+v, %v; want none", l, err)
	}

	sb := n.sandbox(t, &airlock.NetworkPolicy{Default: "allow"})
	for _, r := range refused {
		p := airlock.NetworkPolicy{Default: "allow", Rules: []airlock.NetworkRule{{Name: "lift", Action: "allow", CIDRs: []string{r.cidr}}}}
		if _, err := n.Client.SetNetwork(ctx, sb.ID, p); !errorsIsInvalid(err) || !strings.Contains(err.Error(), r.guard) {
			t.Errorf("update to an allow rule into %s: %v; want a 400 naming %s", r.cidr, err, r.guard)
		}
	}
	if p, err := n.Client.GetNetwork(ctx, sb.ID); err != nil || p.Default != "allow" || len(p.Rules) != 0 {
		t.Errorf("policy after refused updates: %+v, %v; want it unchanged", p, err)
	}

	if got := n.probe(t, sb.ID, true, "http", ip.String(), strconv.Itoa(port), ip.String()); strings.Contains(got, "host-secret") {
		t.Errorf("a default-allow sandbox reached the node's own address: %s", got)
	}
	if got := n.probe(t, sb.ID, true, "http", "169.254.169.254", "80", "metadata.example.test"); strings.Contains(got, upstreamMarker) {
		t.Errorf("a default-allow sandbox reached the metadata address: %s", got)
	}
	if got := n.probe(t, sb.ID, false, "http", up.IP.String(), "80", "api.example.test"); !strings.Contains(got, upstreamMarker) {
		t.Errorf("positive control: the public upstream from the sandbox: %s", got)
	}
	flows := waitFlows(t, n, sb.ID,
		flowSpec{protocol: "http", decision: airlock.DecisionDeny, host: ip.String(), port: port, method: "GET"},
		flowSpec{protocol: "http", decision: airlock.DecisionDeny, host: "metadata.example.test", port: 80, method: "GET"})
	for _, f := range flows {
		if f.Decision == airlock.DecisionDeny && f.DstPort == port && f.Rule != "guard:extra" {
			t.Errorf("flow to the node's own address decided by %q (%s); want guard:extra", f.Rule, f.Reason)
		}
		if f.Decision == airlock.DecisionDeny && f.Host == "metadata.example.test" && f.Rule != "guard:metadata" {
			t.Errorf("flow to the metadata address decided by %q (%s); want guard:metadata", f.Rule, f.Reason)
		}
	}
}
