package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// netEnv is an Airlock with the upstream stand-in and probe tooling in place.
type netEnv struct {
	*testenv.Env
	up *upstream
	// runtime runs its sandboxes ("": the default).
	runtime string
}

func startNetEnv(t *testing.T) *netEnv {
	t.Helper()
	testenv.RequireSandboxes(t)
	return startNetEnvWith(t, "", testenv.Options{})
}

// startNetEnvWith is startNetEnv for sandboxes on runtime rt, with opts besides the network's.
func startNetEnvWith(t *testing.T, rt string, opts testenv.Options) *netEnv {
	t.Helper()
	up := startUpstream(t)
	opts.Hosts = map[string][]netip.Addr{
		"api.example.test":      {up.IP},
		"other.example.test":    {up.IP},
		"bad.example.test":      {up.IP}, // the upstream's certificate does not name it
		"metadata.example.test": {up.MetadataIP},
	}
	opts.ExtraRootsPEM = up.CAPEM
	// The operator opens the metadata address to tenants' rules, so that one can name it, and
	// loopback, where the tests' OAuth provider listens.
	opts.EgressAllowPrivate = []netip.Prefix{netip.MustParsePrefix(up.MetadataIP.String() + "/32"), netip.MustParsePrefix("127.0.0.1/32")}
	return &netEnv{Env: testenv.Start(t, opts), up: up, runtime: rt}
}

// sandbox creates a sandbox with policy p and puts the probe script and the upstream's CA in it.
func (n *netEnv) sandbox(t *testing.T, p *airlock.NetworkPolicy) *airlock.Sandbox {
	t.Helper()
	sb := create(t, n.Env, airlock.CreateSandboxRequest{Network: p, Runtime: n.runtime})
	ctx := ctxT(t, time.Minute)
	probe, err := os.ReadFile("testdata/probe.py")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.WriteFile(ctx, sb.ID, "/home/user/probe.py", bytes.NewReader(probe), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.WriteFile(ctx, sb.ID, "/home/user/ca.pem", bytes.NewReader(n.up.CAPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	return sb
}

// probe runs one probe in the sandbox (as user, or as root) and returns its line.
func (n *netEnv) probe(t *testing.T, id string, root bool, args ...string) string {
	t.Helper()
	user := ""
	if root {
		user = "root"
	}
	res := run(t, n.Env, id, airlock.ExecRequest{User: user, Cmd: append([]string{"python3", "/home/user/probe.py"}, args...), TimeoutSeconds: 30})
	if res.ExitCode != 0 {
		t.Fatalf("probe %v: exit %d: %s %s", args, res.ExitCode, res.Stdout, res.Stderr)
	}
	return strings.TrimSpace(res.Stdout)
}

func hostIPv4(t *testing.T) string {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !strings.HasPrefix(ipn.IP.String(), "203.0.113.") && !strings.HasPrefix(ipn.IP.String(), "100.") {
			return ipn.IP.String()
		}
	}
	t.Skip("the host has no non-loopback IPv4 address to aim at")
	return ""
}

// TestEgressBypassAttempts: a sandbox with the default policy reaches nothing, and a sandbox allowed one
// HTTPS host reaches that host and nothing else, however it tries.
func TestEgressBypassAttempts(t *testing.T) {
	egressBypass(t, startNetEnv(t))
}

// egressBypass runs TestEgressBypassAttempts's attempts in n.
func egressBypass(t *testing.T, n *netEnv) {
	hostIP := hostIPv4(t)
	// A service of the host's own on its address, and the API's port.
	hostLn, err := net.Listen("tcp4", hostIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go serveEcho(hostLn)
	hostPort := fmt.Sprint(hostLn.Addr().(*net.TCPAddr).Port)
	apiURL, _ := url.Parse(n.URL)
	apiPort := apiURL.Port()

	closed := n.sandbox(t, nil)
	allowed := n.sandbox(t, &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{
		{Name: "api", Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"443"}},
	}})
	// A host rule on a port where the upstream speaks neither TLS nor HTTP: the name the sandbox resolved
	// allows no raw TCP to its address.
	rawByName := n.sandbox(t, &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{
		{Name: "api-7000", Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"7000"}},
	}})
	if got := n.probe(t, rawByName.ID, false, "resolve", "api.example.test"); !strings.Contains(got, "203.0.113.2") {
		t.Fatalf("resolve in the raw-by-name sandbox: %s", got)
	}
	// Another sandbox serving on 8080, to try reaching from the first.
	neighbour := n.sandbox(t, nil)
	st, err := n.Client.ExecStream(ctxT(t, time.Minute), neighbour.ID, airlock.ExecRequest{Cmd: []string{"python3", "-m", "http.server", "8080"}}, airlock.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	neighbourIP := strings.TrimSpace(sh(t, n.Env, neighbour.ID, "ip -4 -o addr show eth0 2>/dev/null | awk '{print $4}' | cut -d/ -f1; python3 -c 'import socket; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.connect((\"203.0.113.2\",9)); print(s.getsockname()[0])' 2>/dev/null | tail -1").Stdout)
	if lines := strings.Fields(neighbourIP); len(lines) > 0 {
		neighbourIP = lines[len(lines)-1]
	}
	up := n.up.IP.String()

	type attempt struct {
		name    string
		sb      *airlock.Sandbox
		root    bool
		args    []string
		mustNot string // the result must not contain this (besides not starting with OK, unless allowOK)
		allowOK bool   // an OK result is fine as long as mustNot is absent (e.g. a 403 from the gateway)
	}
	attempts := []attempt{
		{"IP literal HTTPS port", closed, false, []string{"tcp", up, "443"}, upstreamMarker, false},
		{"IP literal raw TCP", closed, false, []string{"tcp", up, "7000"}, upstreamMarker, false},
		{"IP literal plain HTTP", closed, false, []string{"http", up, "80", up}, upstreamMarker, true},
		{"hostname plain HTTP", closed, false, []string{"http", up, "80", "api.example.test"}, upstreamMarker, true},
		{"hostname HTTPS", closed, false, []string{"https", up, "443", "api.example.test", "/home/user/ca.pem"}, upstreamMarker, false},
		{"name resolution", closed, false, []string{"resolve", "api.example.test"}, "203.0.113", false},
		{"UDP", closed, false, []string{"udp", up, "7001"}, upstreamMarker, false},
		{"ICMP ping socket", closed, false, []string{"ping", up}, "", false},
		{"raw socket as root", closed, true, []string{"raw", up}, "", false},
		{"IPv6", closed, false, []string{"tcp6", "fd00::2", "80"}, "", false},
		{"DNS to another resolver (UDP)", closed, false, []string{"dns", "api.example.test", up, "udp"}, "203.0.113.2", false},
		{"DNS to another resolver (TCP)", closed, false, []string{"dns", "api.example.test", up, "tcp"}, "203.0.113.2", false},
		{"host service on its address", closed, false, []string{"tcp", hostIP, hostPort}, upstreamMarker, false},
		{"API port on the host's address", closed, false, []string{"http", hostIP, apiPort, hostIP, "GET", "/v1/health"}, "ok", true},
		{"host loopback service", closed, false, []string{"tcp", "127.0.0.1", hostPort}, upstreamMarker, false},
		{"API port on loopback", closed, false, []string{"http", "127.0.0.1", apiPort, "127.0.0.1", "GET", "/v1/health"}, "ok", true},
		{"another sandbox", closed, false, []string{"http", neighbourIP, "8080", neighbourIP}, "Directory listing", true},
		{"metadata address", allowed, false, []string{"http", "169.254.169.254", "80", "169.254.169.254"}, upstreamMarker, true},
		{"allowed name on another port", allowed, false, []string{"tcp", up, "7000"}, upstreamMarker, false},
		{"raw TCP to a name only a host rule allows", rawByName, false, []string{"tcp", up, "7000"}, upstreamMarker, false},
		{"allowed SNI toward the host's address", allowed, false, []string{"https", hostIP, hostPort, "api.example.test", "/home/user/ca.pem"}, upstreamMarker, false},
		{"other name on the allowed address", allowed, false, []string{"https", up, "443", "other.example.test", "/home/user/ca.pem"}, upstreamMarker, false},
		{"plain HTTP to the allowed host", allowed, false, []string{"http", up, "80", "api.example.test"}, upstreamMarker, true},
		{"DNS of a name not allowed", allowed, false, []string{"resolve", "other.example.test"}, "203.0.113", false},
		{"metadata via an allowed-looking name", allowed, false, []string{"http", "169.254.169.254", "80", "metadata.example.test"}, upstreamMarker, true},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			got := n.probe(t, a.sb.ID, a.root, a.args...)
			t.Logf("%v: %s", a.args, got)
			if (!a.allowOK && strings.HasPrefix(got, "OK")) || (a.mustNot != "" && strings.Contains(got, a.mustNot)) {
				t.Errorf("probe %v from %s got through: %s", a.args, a.sb.ID, got)
			}
		})
	}
	// Changing routes inside, as root, changes nothing: everything still goes through the host veth.
	t.Run("routes changed inside", func(t *testing.T) {
		sh(t, n.Env, closed.ID, "true")
		res := run(t, n.Env, closed.ID, airlock.ExecRequest{User: "root", Cmd: []string{"sh", "-c", "ip route add 203.0.113.0/24 dev eth0 2>&1; ip route add 169.254.0.0/16 dev eth0 2>&1; true"}})
		_ = res
		if got := n.probe(t, closed.ID, false, "tcp", up, "7000"); strings.HasPrefix(got, "OK") {
			t.Errorf("after changing routes inside, raw TCP to the upstream got through: %s", got)
		}
	})

	// What the allowed sandbox may do, it can do.
	if got := n.probe(t, allowed.ID, false, "https", "api.example.test", "443", "api.example.test", "/home/user/ca.pem"); !strings.Contains(got, upstreamMarker) {
		t.Errorf("allowed HTTPS to api.example.test failed: %s", got)
	}
	if got := n.probe(t, allowed.ID, false, "resolve", "api.example.test"); got != "OK 203.0.113.2" {
		t.Errorf("allowed name resolves to %q; want OK 203.0.113.2", got)
	}
}

// TestEgressPolicyLive: policy changes apply to new connections within a second, without a restart; a
// method/path rule refuses with a 403 naming the rule; private addresses need a CIDR rule.
func TestEgressPolicyLive(t *testing.T) {
	n := startNetEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	sb := n.sandbox(t, &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{
		{Name: "models-read", Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"80"}, Methods: []string{"GET"}, PathPrefix: "/v1/models"},
	}})
	if got := n.probe(t, sb.ID, false, "http", "api.example.test", "80", "api.example.test", "GET", "/v1/models"); !strings.Contains(got, upstreamMarker) {
		t.Errorf("GET /v1/models: %s; want the upstream's answer", got)
	}
	got := n.probe(t, sb.ID, false, "http", "api.example.test", "80", "api.example.test", "POST", "/v1/files")
	if !strings.Contains(got, "403") || strings.Contains(got, upstreamMarker) {
		t.Errorf("POST /v1/files: %s; want a 403 from the gateway", got)
	}
	res := run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import socket
s = socket.create_connection(("api.example.test", 80), timeout=3)
s.sendall(b"POST /v1/files HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
print(s.recv(4096).decode())`}})
	if !strings.Contains(res.Stdout, "models-read") && !strings.Contains(res.Stdout, "default") {
		t.Errorf("403 body does not name the rule: %q", res.Stdout)
	}
	// A second request on the same connection for another host is refused.
	if got := n.probe(t, sb.ID, false, "http", "api.example.test", "80", "api.example.test", "GET", "/v1/models", "other.example.test"); strings.Count(got, upstreamMarker) > 1 || !strings.Contains(got, "403") {
		t.Errorf("host switch on a kept-alive connection: %s; want the second request refused", got)
	}

	// Open everything to the upstream's HTTPS, then close it again: each change is in force within 1 s.
	if _, err := n.Client.SetNetwork(ctx, sb.ID, airlock.NetworkPolicy{Rules: []airlock.NetworkRule{{Action: "allow", Host: "*.example.test", Ports: []airlock.PortRange{"443"}}}}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	if got := n.probe(t, sb.ID, false, "https", "other.example.test", "443", "other.example.test", "/home/user/ca.pem"); !strings.Contains(got, upstreamMarker) {
		t.Errorf("after allowing *.example.test:443: %s", got)
	}
	if _, err := n.Client.SetNetwork(ctx, sb.ID, airlock.NetworkPolicy{}); err != nil {
		t.Fatal(err)
	}
	if got := n.probe(t, sb.ID, false, "tcp", "203.0.113.2", "443"); strings.HasPrefix(got, "OK") {
		t.Errorf("after denying all again: %s", got)
	}
	t.Logf("two policy changes applied and probed in %s", time.Since(changed))
	if p, err := n.Client.GetNetwork(ctx, sb.ID); err != nil || p.Default != "deny" || len(p.Rules) != 0 {
		t.Errorf("GetNetwork = %+v, %v; want deny all", p, err)
	}

	// An allowed name that resolves to a private address is refused, unless a CIDR rule names it (in a
	// range the operator opened: TestGuardsAreTheOperators has one that did not).
	if _, err := n.Client.SetNetwork(ctx, sb.ID, airlock.NetworkPolicy{Rules: []airlock.NetworkRule{{Action: "allow", Host: "metadata.example.test"}}}); err != nil {
		t.Fatal(err)
	}
	if got := n.probe(t, sb.ID, false, "http", "169.254.169.254", "80", "metadata.example.test"); strings.Contains(got, upstreamMarker) {
		t.Errorf("allowed name resolving to the metadata address got through: %s", got)
	}
	if _, err := n.Client.SetNetwork(ctx, sb.ID, airlock.NetworkPolicy{Rules: []airlock.NetworkRule{{Action: "allow", Host: "metadata.example.test", CIDRs: []string{"169.254.169.254/32"}}}}); err != nil {
		t.Fatal(err)
	}
	if got := n.probe(t, sb.ID, false, "http", "169.254.169.254", "80", "metadata.example.test"); !strings.Contains(got, upstreamMarker) {
		t.Errorf("with a CIDR rule naming it, the address is still refused: %s", got)
	}

	// Bad policies are refused with a clear message, and change nothing.
	for _, bad := range []airlock.NetworkPolicy{
		{Default: "maybe"},
		{Rules: []airlock.NetworkRule{{Action: "allow"}}},
		{Rules: []airlock.NetworkRule{{Action: "allow", Host: "bad host"}}},
		{Rules: []airlock.NetworkRule{{Action: "allow", CIDRs: []string{"10.0.0.0/33"}}}},
		{Rules: []airlock.NetworkRule{{Action: "allow", Host: "a.test", Ports: []airlock.PortRange{"70000"}}}},
	} {
		if _, err := n.Client.SetNetwork(ctx, sb.ID, bad); err == nil || !strings.Contains(err.Error(), "invalid_argument") && !errorsIsInvalid(err) {
			t.Errorf("SetNetwork(%+v) = %v; want invalid argument", bad, err)
		}
	}
}

func errorsIsInvalid(err error) bool {
	var ae *airlock.APIError
	return asAPIError(err, &ae) && ae.Code == "invalid_argument"
}

// TestEgressHTTPSInterception: method and path rules on an HTTPS host are enforced by terminating TLS
// with the sandbox's own CA (its certificate is in the sandbox's trust store, its key is not) and
// re-encrypting to the upstream, which must present a certificate the gateway verifies.
func TestEgressHTTPSInterception(t *testing.T) {
	n := startNetEnv(t)
	sb := n.sandbox(t, &airlock.NetworkPolicy{Rules: []airlock.NetworkRule{
		{Name: "models-read", Action: "allow", Host: "api.example.test", Ports: []airlock.PortRange{"443"}, Methods: []string{"GET"}, PathPrefix: "/v1/models"},
		{Name: "bad-read", Action: "allow", Host: "bad.example.test", Ports: []airlock.PortRange{"443"}, Methods: []string{"GET"}},
	}})
	got := n.probe(t, sb.ID, false, "https", "api.example.test", "443", "api.example.test", "system", "/v1/models")
	if !strings.Contains(got, upstreamMarker+" GET api.example.test /v1/models") {
		t.Errorf("GET https://api.example.test/v1/models: %s; want the upstream's answer", got)
	}
	got = n.probe(t, sb.ID, false, "https", "api.example.test", "443", "api.example.test", "system", "/v1/files", "POST")
	if !strings.Contains(got, "403") || strings.Contains(got, upstreamMarker) {
		t.Errorf("POST https://api.example.test/v1/files: %s; want a 403 from the gateway", got)
	}
	// An upstream whose certificate does not verify: the sandbox gets an error, never the upstream.
	got = n.probe(t, sb.ID, false, "https", "bad.example.test", "443", "bad.example.test", "system", "/")
	if strings.Contains(got, upstreamMarker) || !strings.Contains(got, "502") {
		t.Errorf("GET https://bad.example.test/ (certificate for other names): %s; want a 502 from the gateway", got)
	}
	// The sandbox trusts its CA through the system bundle, and holds no private key anywhere.
	res := run(t, n.Env, sb.ID, airlock.ExecRequest{User: "root", Cmd: []string{"sh", "-c",
		"grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/airlock-sandbox-ca.pem; grep -rlI 'PRIVATE KEY' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr --exclude-dir=dev 2>/dev/null | head -5; echo end"}})
	lines := strings.Fields(res.Stdout)
	if len(lines) != 2 || lines[0] != "1" || lines[1] != "end" {
		t.Errorf("trust store and key scan inside: %q; want the CA certificate and no private key", res.Stdout)
	}
	flows, err := n.Client.Egress(ctxT(t, time.Minute), sb.ID, airlock.EgressOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied int
	for _, f := range flows.Flows {
		if f.Host == "api.example.test" && f.Decision == "allow" {
			allowed++
		}
		if f.Host == "api.example.test" && f.Decision == "deny" && f.Method == "POST" {
			denied++
		}
	}
	if allowed == 0 || denied == 0 {
		t.Errorf("flow log has %d allowed and %d denied intercepted requests; want both", allowed, denied)
	}
}

// TestCredentialInjection: the sandbox calls the upstream with a placeholder or no auth at all, and the
// upstream receives the real secret; nothing inside the sandbox holds the secret.
func TestCredentialInjection(t *testing.T) {
	n := startNetEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	const secret = "real-secret-7c1d9e2f"
	const placeholder = "AIRLOCK-PLACEHOLDER-0001"
	if _, err := n.Client.CreateSecret(ctx, "upstream-token", secret); err != nil {
		t.Fatal(err)
	}
	sb := create(t, n.Env, airlock.CreateSandboxRequest{
		Env: map[string]string{"API_KEY": placeholder},
		Network: &airlock.NetworkPolicy{
			Rules: []airlock.NetworkRule{{Action: "allow", Host: "*.example.test", Ports: []airlock.PortRange{"443", "80"}}},
			Credentials: []airlock.CredentialBinding{
				{Name: "api-bearer", Host: "api.example.test", Secret: "upstream-token", Header: "Authorization", Format: "Bearer {secret}"},
				{Name: "other-placeholder", Host: "other.example.test", Secret: "upstream-token", Placeholder: placeholder},
			},
		},
	})
	// No auth at all: the gateway sets the header.
	res := run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import urllib.request
print(urllib.request.urlopen("https://api.example.test/v1/models", timeout=5).read().decode())`}})
	if !strings.Contains(res.Stdout, `auth="Bearer `+secret+`"`) {
		t.Errorf("upstream saw %q (stderr %q); want the injected bearer token", res.Stdout, res.Stderr)
	}
	// The placeholder from the sandbox's environment is swapped for the value.
	res = run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import os, urllib.request
req = urllib.request.Request("https://other.example.test/x", headers={"Authorization": "Bearer " + os.environ["API_KEY"]})
print(urllib.request.urlopen(req, timeout=5).read().decode())`}})
	if !strings.Contains(res.Stdout, `auth="Bearer `+secret+`"`) {
		t.Errorf("upstream saw %q (stderr %q); want the placeholder replaced", res.Stdout, res.Stderr)
	}
	// Only where the binding says: a placeholder in other headers or the URL stays a placeholder, so an
	// upstream that echoes them sends back nothing of the secret.
	res = run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import os, urllib.request
k = os.environ["API_KEY"]
req = urllib.request.Request("https://other.example.test/echo?key=" + k, headers={"Authorization": "Bearer " + k,
    "X-Other": k, "Cookie": "s=" + k, "Origin": "https://" + k + ".test", "Referer": "https://x.test/" + k})
print(urllib.request.urlopen(req, timeout=5).read().decode())`}})
	if strings.Contains(res.Stdout, secret) || strings.Count(res.Stdout, placeholder) != 5 {
		t.Errorf("echo of the other headers and the URL: %q (stderr %q); want the placeholder five times and no secret", res.Stdout, res.Stderr)
	}
	// TRACE would echo the injected header back: refused on an intercepted connection.
	res = run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen(urllib.request.Request("https://api.example.test/v1/models", method="TRACE"), timeout=5).read().decode())
except urllib.error.HTTPError as e:
    print("HTTP", e.code)`}})
	if strings.Contains(res.Stdout, secret) || strings.Contains(res.Stdout, upstreamMarker) || !strings.Contains(res.Stdout, "HTTP 403") {
		t.Errorf("TRACE: %q; want a 403 from the gateway", res.Stdout)
	}
	// An upstream that switches protocols for a request that did not ask: refused, nothing relayed.
	res = run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("https://api.example.test/switch", timeout=5).read().decode())
except urllib.error.HTTPError as e:
    print("HTTP", e.code)
except Exception as e:
    print("ERR", e)`}})
	if strings.Contains(res.Stdout, secret) || strings.Contains(res.Stdout, "RAW-AFTER-101") || !strings.Contains(res.Stdout, "HTTP 502") {
		t.Errorf("unasked 101: %q; want a 502 from the gateway", res.Stdout)
	}
	// Plain HTTP never carries a credential.
	res = run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import urllib.request
print(urllib.request.urlopen("http://api.example.test/plain", timeout=5).read().decode())`}})
	if strings.Contains(res.Stdout, secret) || !strings.Contains(res.Stdout, upstreamMarker) {
		t.Errorf("plain HTTP: %q; want the upstream reached without the secret", res.Stdout)
	}
	// A scan from inside, as root: environment, every file, every process's environ and memory, and any
	// private key (the CA's) on disk.
	script, err := os.ReadFile("testdata/scan.py")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.WriteFile(ctx, sb.ID, "/root/scan.py", bytes.NewReader(script), 0o700); err != nil {
		t.Fatal(err)
	}
	reversed := []byte(secret)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	scan := run(t, n.Env, sb.ID, airlock.ExecRequest{User: "root", TimeoutSeconds: 300, Cmd: []string{"python3", "/root/scan.py", string(reversed)}})
	if f := strings.Fields(scan.Stdout); len(f) != 6 || strings.Join(f[:5], " ") != "0 0 0 0 0" || f[5] == "control=0" {
		t.Errorf("scan inside: env files environ memory keyfiles = %q (stderr %q); want 0 0 0 0 0 and a working memory scan", scan.Stdout, scan.Stderr)
	}
	t.Logf("scan inside: %s", strings.TrimSpace(scan.Stdout))
	flows, err := n.Client.Egress(ctx, sb.ID, airlock.EgressOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound := map[string]bool{}
	for _, f := range flows.Flows {
		if f.Binding != "" {
			bound[f.Binding] = true
		}
	}
	if !bound["api-bearer"] || !bound["other-placeholder"] {
		t.Errorf("flow log bindings %v; want both bindings named", bound)
	}
	// Revoking the secret stops injection: the request fails at the gateway.
	if err := n.Client.DeleteSecret(ctx, "upstream-token"); err != nil {
		t.Fatal(err)
	}
	res = run(t, n.Env, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", `
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("https://api.example.test/v1/models", timeout=5).read().decode())
except urllib.error.HTTPError as e:
    print("HTTP", e.code)`}})
	if strings.Contains(res.Stdout, secret) || !strings.Contains(res.Stdout, "HTTP 502") {
		t.Errorf("after deleting the secret: %q; want a 502 from the gateway", res.Stdout)
	}
}
