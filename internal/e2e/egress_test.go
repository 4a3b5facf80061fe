package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// flowSpec picks one flow out of a log.
type flowSpec struct {
	protocol, decision, host string
	port                     int
	method                   string
}

func (s flowSpec) String() string {
	return fmt.Sprintf("%s %s %s:%d %s", s.decision, s.protocol, s.host, s.port, s.method)
}

func (s flowSpec) find(flows []airlock.Flow) []airlock.Flow {
	var out []airlock.Flow
	for _, f := range flows {
		if f.Protocol == s.protocol && f.Decision == s.decision && f.Host == s.host && f.DstPort == s.port && f.Method == s.method {
			out = append(out, f)
		}
	}
	return out
}

// waitFlows polls the sandbox's egress log until every spec has a flow (flows are recorded when they end,
// a moment after the client in the sandbox saw its answer) and returns the log.
func waitFlows(t *testing.T, n *netEnv, id string, specs ...flowSpec) []airlock.Flow {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	deadline := time.Now().Add(15 * time.Second)
	for {
		l, err := n.Client.Egress(ctx, id, airlock.EgressOptions{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var missing []string
		for _, s := range specs {
			if len(s.find(l.Flows)) == 0 {
				missing = append(missing, s.String())
			}
		}
		if len(missing) == 0 {
			return l.Flows
		}
		if time.Now().After(deadline) {
			t.Fatalf("flows missing from the egress log: %v\nlog: %+v", missing, l.Flows)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrapeEgress reads the egress counters from /metrics, without an API key.
func scrapeEgress(t *testing.T, base string) map[string]float64 {
	t.Helper()
	return scrapeMetrics(t, base, "airlock_egress_")
}

// scrapeMetrics reads the series whose names start with prefix from /metrics, without an API key.
func scrapeMetrics(t *testing.T, base, prefix string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics without a key: %s %s", resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[name] = v
	}
	return out
}

// TestEgressFlowLog: every connection a sandbox opens, allowed or refused, TLS, plain HTTP (each request)
// or raw TCP, shows in its egress log with the decision, the rule, the name, the protocol and the bytes
// each way; the counters on /metrics move with it; the log survives the sandbox, and a connection still
// open when the sandbox is deleted is ended and logged.
func TestEgressFlowLog(t *testing.T) {
	n := startNetEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	sb := n.sandbox(t, &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{
		{Name: "api-tls", Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"443"}},
		{Name: "api-read", Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"80"}, Methods: []string{"GET"}},
		// Raw TCP is decided on its address (a host rule lets only TLS and HTTP through).
		{Name: "echo", Action: "allow", CIDRs: []string{"203.0.113.2/32"}, Ports: []airlock.PortRange{"7000"}},
	}})
	before := scrapeEgress(t, n.URL)

	probes := []struct {
		args []string
		ok   bool // the probe must reach the upstream
	}{
		{[]string{"https", "api.example.test", "443", "api.example.test", "/home/user/ca.pem"}, true},
		{[]string{"https", "203.0.113.2", "443", "other.example.test", "/home/user/ca.pem"}, false},
		{[]string{"http", "api.example.test", "80", "api.example.test", "GET", "/v1/models?key=s3cr3t-query-4711"}, true},
		{[]string{"http", "api.example.test", "80", "api.example.test", "POST", "/v1/files"}, false},
		// Two requests on one connection; the second switches host and is refused.
		{[]string{"http", "api.example.test", "80", "api.example.test", "GET", "/v1/keep", "other.example.test"}, true},
		{[]string{"tcp", "api.example.test", "7000", "hello"}, true},
		// Raw bytes to a port a host rule opens for TLS: the gateway refuses them (and logs it). A port no
		// rule opens (7002) is refused by the kernel at the SYN, before the gateway: no flow.
		{[]string{"tcp", "api.example.test", "443", "hello"}, false},
		{[]string{"tcp", "api.example.test", "7002"}, false},
	}
	for _, p := range probes {
		got := n.probe(t, sb.ID, false, p.args...)
		if reached := strings.Contains(got, upstreamMarker); reached != p.ok {
			t.Errorf("probe %v: %s; want reached=%v", p.args, got, p.ok)
		}
	}

	// A request head that does not parse, on a connection the policy would allow: refused with a 400
	// (this used to crash the gateway).
	res := run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import socket
s = socket.create_connection(("api.example.test", 80), timeout=3)
s.sendall(b"GET /\r\nHost: api.example.test\r\n\r\n")
print(s.recv(200).decode())`}})
	if !strings.Contains(res.Stdout, "400") {
		t.Errorf("malformed request head: %q %q; want a 400 from the gateway", res.Stdout, res.Stderr)
	}

	tlsOK := flowSpec{"tls", "allow", "api.example.test", 443, ""}
	tlsDenied := flowSpec{"tls", "deny", "other.example.test", 443, ""}
	httpGet := flowSpec{"http", "allow", "api.example.test", 80, "GET"}
	httpPost := flowSpec{"http", "deny", "api.example.test", 80, "POST"}
	tcpOK := flowSpec{"tcp", "allow", "api.example.test", 7000, ""}
	tcpDenied := flowSpec{"tcp", "deny", "api.example.test", 443, ""}
	hostSwitch := flowSpec{"http", "deny", "api.example.test", 80, "GET"}
	malformed := flowSpec{"http", "deny", "api.example.test", 80, ""}
	flows := waitFlows(t, n, sb.ID, tlsOK, tlsDenied, httpGet, httpPost, tcpOK, tcpDenied, hostSwitch, malformed)

	if kernel := (flowSpec{"tcp", "deny", "api.example.test", 7002, ""}).find(flows); len(kernel) != 0 {
		t.Errorf("a flow for port 7002, which no rule opens: %+v; want the kernel to have refused it before the gateway", kernel)
	}
	one := func(s flowSpec, rule string) airlock.Flow {
		t.Helper()
		fs := s.find(flows)
		if len(fs) == 0 {
			t.Fatalf("no %s flow", s)
		}
		f := fs[0]
		if f.Rule != rule {
			t.Errorf("%s: rule %q (%s); want %q", s, f.Rule, f.Reason, rule)
		}
		if f.SandboxID != sb.ID || f.TenantID == "" || f.DstIP != "203.0.113.2" || f.SrcPort == 0 || f.End.Before(f.Start) || f.Start.IsZero() {
			t.Errorf("%s: flow %+v; want this sandbox, its tenant, 203.0.113.2, a source port and a start before the end", s, f)
		}
		if f.Binding != "" {
			t.Errorf("%s: binding %q; want none", s, f.Binding)
		}
		if s.decision == "allow" && (f.BytesSent == 0 || f.BytesReceived == 0 || f.Error != "") {
			t.Errorf("%s: %d bytes sent, %d received, error %q; want bytes both ways", s, f.BytesSent, f.BytesReceived, f.Error)
		}
		if s.decision == "deny" && (f.BytesSent != 0 || f.BytesReceived != 0) {
			t.Errorf("%s: %d bytes sent, %d received; want none for a refusal", s, f.BytesSent, f.BytesReceived)
		}
		return f
	}
	one(tlsOK, "api-tls")
	one(tlsDenied, "default")
	one(httpPost, "default")
	one(tcpDenied, "not-tls-or-http")
	one(malformed, "malformed-http")
	if f := one(tcpOK, "echo"); f.BytesSent != int64(len("hello")) || f.BytesReceived < int64(len(upstreamMarker)+1) {
		t.Errorf("raw TCP: %d bytes sent, %d received; want exactly 5 sent and at least the marker line back", f.BytesSent, f.BytesReceived)
	}
	gets := httpGet.find(flows)
	paths := map[string]airlock.Flow{}
	for _, f := range gets {
		paths[f.Path] = f
	}
	if f, ok := paths["/v1/models"]; !ok || f.Rule != "api-read" || f.BytesSent == 0 || f.BytesReceived == 0 {
		t.Errorf("GET /v1/models: %+v (all allowed GETs: %+v); want rule api-read, the path without its query, bytes both ways", f, gets)
	}
	keep, ok := paths["/v1/keep"]
	if !ok {
		t.Errorf("no flow for the first request of the kept-alive connection; allowed GETs: %+v", gets)
	}
	if sw := one(hostSwitch, "host-changed"); ok && sw.SrcPort != keep.SrcPort {
		t.Errorf("the two requests of one connection have source ports %d and %d; want the same", keep.SrcPort, sw.SrcPort)
	}
	if f := httpPost.find(flows); len(f) > 0 && f[0].Path != "/v1/files" {
		t.Errorf("denied POST path %q; want /v1/files", f[0].Path)
	}

	// Filters.
	deny, err := n.Client.Egress(ctx, sb.ID, airlock.EgressOptions{Decision: airlock.DecisionDeny})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range deny.Flows {
		if f.Decision != airlock.DecisionDeny {
			t.Errorf("decision=deny returned %+v", f)
		}
	}
	if len(deny.Flows) != 5 {
		t.Errorf("decision=deny returned %d flows; want 5 (TLS, POST, host switch, malformed, TCP)", len(deny.Flows))
	}
	other, err := n.Client.Egress(ctx, sb.ID, airlock.EgressOptions{Host: "other.example.test"})
	if err != nil || len(other.Flows) != 1 || other.Flows[0].Protocol != "tls" {
		t.Errorf("host=other.example.test = %+v, %v; want the refused TLS flow only", other, err)
	}
	latest, err := n.Client.Egress(ctx, sb.ID, airlock.EgressOptions{Limit: 1})
	if err != nil || len(latest.Flows) != 1 || !latest.Flows[0].End.Equal(flows[0].End) {
		t.Errorf("limit=1 = %+v, %v; want the newest flow", latest, err)
	}
	if _, err := n.Client.Egress(ctx, sb.ID, airlock.EgressOptions{Decision: "maybe"}); !errorsIsInvalid(err) {
		t.Errorf("decision=maybe: %v; want invalid_argument", err)
	}
	if _, err := n.Client.Egress(ctx, "sb_"+strings.Repeat("a", 26), airlock.EgressOptions{}); err == nil {
		t.Error("the egress log of a sandbox that does not exist was served")
	}

	// The counters moved with the log: compare with a log read that saw no new flow meanwhile.
	after := scrapeEgress(t, n.URL)
	again, err := n.Client.Egress(ctx, sb.ID, airlock.EgressOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Flows) == len(flows) {
		var allow, denied, sent, recv float64
		for _, f := range flows {
			if f.Decision == "allow" {
				allow++
			} else {
				denied++
			}
			sent += float64(f.BytesSent)
			recv += float64(f.BytesReceived)
		}
		for name, want := range map[string]float64{
			`airlock_egress_flows_total{decision="allow"}`:     allow,
			`airlock_egress_flows_total{decision="deny"}`:      denied,
			`airlock_egress_bytes_total{direction="sent"}`:     sent,
			`airlock_egress_bytes_total{direction="received"}`: recv,
		} {
			if got := after[name] - before[name]; got != want {
				t.Errorf("%s moved by %v; want %v (the log's)", name, got, want)
			}
		}
	} else {
		t.Logf("the log grew while scraping (%d then %d flows): only checking that the counters moved", len(flows), len(again.Flows))
		for _, name := range []string{`airlock_egress_flows_total{decision="allow"}`, `airlock_egress_flows_total{decision="deny"}`, `airlock_egress_bytes_total{direction="sent"}`, `airlock_egress_bytes_total{direction="received"}`} {
			if after[name] <= before[name] {
				t.Errorf("%s did not move: %v then %v", name, before[name], after[name])
			}
		}
	}

	// The log file: 0600, and nothing of the query string.
	path := filepath.Join(n.DataDir, "node", "flows", sb.ID+".jsonl")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v; want 0600", path, fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), "s3cr3t-query-4711") {
		t.Errorf("the flow log holds a query string")
	}

	// A connection still open when the sandbox is deleted is ended, and logged; the log outlives the
	// sandbox.
	st, err := n.Client.ExecStream(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import socket, time
s = socket.create_connection(("api.example.test", 7000), timeout=5)
s.sendall(b"x" * 1000)
s.recv(100)
open("/tmp/connected", "w").close()
time.sleep(600)`}}, airlock.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if res := sh(t, n.Env, sb.ID, "test -f /tmp/connected && echo yes"); strings.TrimSpace(res.Stdout) == "yes" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the long-lived connection did not come up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := n.Client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	l, err := n.Client.Egress(ctx, sb.ID, airlock.EgressOptions{Limit: 1000})
	if err != nil {
		t.Fatalf("egress log of the deleted sandbox: %v", err)
	}
	var long *airlock.Flow
	for _, f := range tcpOK.find(l.Flows) {
		if f.BytesSent == 1000 {
			long = &f
		}
	}
	if long == nil {
		t.Fatalf("the connection open at delete is not in the log (it must be ended and logged by the time delete returns): %+v", tcpOK.find(l.Flows))
	}
	if long.BytesReceived < int64(len(upstreamMarker)) || long.Rule != "echo" {
		t.Errorf("the connection open at delete: %+v; want the echo rule and the upstream's bytes", long)
	}
	if len(l.Flows) < len(flows)+1 {
		t.Errorf("after delete the log has %d flows; want at least %d", len(l.Flows), len(flows)+1)
	}
}
