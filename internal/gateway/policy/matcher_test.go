package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
)

func mustCompile(t testing.TB, p Policy, opts CompileOptions) *Matcher {
	t.Helper()
	m, err := CompileWithOptions(p, opts)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return m
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

const pub = "93.184.215.14" // a public address

// verdict is the part of a Decision the tables compare; Reason is free text.
type verdict struct {
	Allow     bool
	Rule      string
	NeedsHTTP bool
}

func verdictOf(d Decision) verdict { return verdict{d.Allow, d.Rule, d.NeedsHTTP} }

func allow(rule string) verdict { return verdict{Allow: true, Rule: rule} }
func deny(rule string) verdict  { return verdict{Rule: rule} }
func needsHTTP(rule string) verdict {
	return verdict{Rule: rule, NeedsHTTP: true}
}

func TestConnect(t *testing.T) {
	type check struct {
		host string
		ip   string
		port uint16
		want verdict
	}
	tests := []struct {
		name   string
		p      Policy
		opts   CompileOptions
		checks []check
	}{
		{
			name: "zero policy denies",
			p:    Policy{},
			checks: []check{
				{"example.com", pub, 443, deny("default")},
				{"", pub, 80, deny("default")},
			},
		},
		{
			name: "default allow",
			p:    Policy{Default: "allow"},
			checks: []check{
				{"example.com", pub, 443, allow("default")},
				{"", pub, 22, allow("default")},
			},
		},
		{
			name: "exact host, case and trailing dot",
			p:    Policy{Rules: []Rule{{Name: "api", Action: "allow", Host: "API.Example.com."}}},
			checks: []check{
				{"api.example.com", pub, 443, allow("api")},
				{"API.EXAMPLE.COM", pub, 443, allow("api")},
				{"api.example.com.", pub, 443, allow("api")},
				{"api.example.com..", pub, 443, deny("default")},
				{"x.api.example.com", pub, 443, deny("default")},
				{"example.com", pub, 443, deny("default")},
				{"api.example.com.evil.com", pub, 443, deny("default")},
				{"", pub, 443, deny("default")},
				{"api.example.com:443", pub, 443, deny("default")}, // host with port is not a host name
			},
		},
		{
			name: "wildcard matches subdomains at any depth, not the apex",
			p:    Policy{Rules: []Rule{{Name: "w", Action: "allow", Host: "*.example.com"}}},
			checks: []check{
				{"a.example.com", pub, 443, allow("w")},
				{"a.b.c.example.com", pub, 443, allow("w")},
				{"A.Example.Com.", pub, 443, allow("w")},
				{"example.com", pub, 443, deny("default")},
				{"badexample.com", pub, 443, deny("default")},
				{".example.com", pub, 443, deny("default")},
				{"a.example.com.evil.org", pub, 443, deny("default")},
			},
		},
		{
			name: "first match wins",
			p: Policy{Default: "allow", Rules: []Rule{
				{Name: "deny-admin", Action: "deny", Host: "admin.example.com"},
				{Name: "allow-all-sub", Action: "allow", Host: "*.example.com"},
				{Name: "deny-all-sub", Action: "deny", Host: "*.example.com"},
			}},
			checks: []check{
				{"admin.example.com", pub, 443, deny("deny-admin")},
				{"www.example.com", pub, 443, allow("allow-all-sub")},
				{"other.org", pub, 443, allow("default")},
			},
		},
		{
			name: "ports",
			p: Policy{Rules: []Rule{
				{Action: "allow", Host: "a.com", Ports: []PortRange{Port(443), {8000, 8100}}},
			}},
			checks: []check{
				{"a.com", pub, 443, allow("rule[0]")},
				{"a.com", pub, 8000, allow("rule[0]")},
				{"a.com", pub, 8100, allow("rule[0]")},
				{"a.com", pub, 8101, deny("default")},
				{"a.com", pub, 80, deny("default")},
				{"a.com", pub, 0, deny("default")},
			},
		},
		{
			name: "cidrs alone and with host",
			p: Policy{Rules: []Rule{
				{Name: "doc", Action: "allow", CIDRs: []string{"203.0.113.7/32"}},
				{Name: "both", Action: "allow", Host: "b.com", CIDRs: []string{"198.51.100.0/24"}},
				{Name: "v6", Action: "allow", CIDRs: []string{"2001:db8::/32"}},
			}},
			checks: []check{
				{"", "203.0.113.7", 443, allow("doc")},
				{"anything.com", "203.0.113.7", 22, allow("doc")},
				{"", "::ffff:203.0.113.7", 443, allow("doc")}, // mapped form is the same address
				{"", "203.0.113.8", 443, deny("default")},
				{"b.com", "198.51.100.9", 443, allow("both")},
				{"c.com", "198.51.100.9", 443, deny("default")},
				{"b.com", pub, 443, deny("default")},
				{"", "2001:db8::1", 443, allow("v6")},
			},
		},
		{
			name: "mapped cidr in rule",
			p:    Policy{Rules: []Rule{{Name: "m", Action: "allow", CIDRs: []string{"::ffff:203.0.113.0/120"}}}},
			checks: []check{
				{"", "203.0.113.7", 443, allow("m")},
				{"", "::ffff:203.0.113.7", 443, allow("m")},
			},
		},
		{
			name: "guard beats host rules and default allow",
			p: Policy{Default: "allow", Rules: []Rule{
				{Name: "api", Action: "allow", Host: "api.example.com"},
				{Name: "world", Action: "allow", CIDRs: []string{"0.0.0.0/0", "::/0"}},
			}},
			checks: []check{
				{"api.example.com", pub, 443, allow("api")},
				{"api.example.com", "10.0.0.5", 443, deny("guard:private")},
				{"api.example.com", "172.16.3.4", 443, deny("guard:private")},
				{"api.example.com", "192.168.1.1", 443, deny("guard:private")},
				{"api.example.com", "127.0.0.1", 443, deny("guard:loopback")},
				{"api.example.com", "127.255.0.9", 443, deny("guard:loopback")},
				{"api.example.com", "::1", 443, deny("guard:loopback")},
				{"api.example.com", "0.0.0.0", 443, deny("guard:unspecified")},
				{"api.example.com", "::", 443, deny("guard:unspecified")},
				{"api.example.com", "169.254.169.254", 80, deny("guard:metadata")},
				{"api.example.com", "fd00:ec2::254", 80, deny("guard:metadata")},
				{"api.example.com", "169.254.1.1", 80, deny("guard:link-local")},
				{"api.example.com", "fe80::1", 80, deny("guard:link-local")},
				{"api.example.com", "fe80::1%eth0", 80, deny("guard:link-local")},
				{"api.example.com", "fd12:3456::1", 443, deny("guard:private")},
				{"api.example.com", "fc00::1", 443, deny("guard:private")},
				{"api.example.com", "100.64.0.1", 443, deny("guard:cgnat")},
				{"api.example.com", "100.127.255.254", 443, deny("guard:cgnat")},
				{"api.example.com", "224.0.0.251", 5353, deny("guard:multicast")},
				{"api.example.com", "ff02::fb", 5353, deny("guard:multicast")},
				{"api.example.com", "255.255.255.255", 9, deny("guard:broadcast")},
				{"api.example.com", "240.0.0.1", 9, deny("guard:reserved")},
				{"", "100.63.255.255", 443, allow("world")}, // just below CGNAT
				{"", "100.128.0.0", 443, allow("world")},    // just above
				{"", "172.32.0.1", 443, allow("world")},
				{"", "2606:4700::1111", 443, allow("world")},
			},
		},
		{
			name: "ipv4 in ipv6 forms cannot bypass the guard",
			p:    Policy{Default: "allow"},
			checks: []check{
				{"", "::ffff:127.0.0.1", 80, deny("guard:loopback")},
				{"", "::ffff:10.1.2.3", 80, deny("guard:private")},
				{"", "::ffff:169.254.169.254", 80, deny("guard:metadata")},
				{"", "::ffff:0.0.0.0", 80, deny("guard:unspecified")},
				{"", "64:ff9b::a9fe:a9fe", 80, deny("guard:metadata")}, // NAT64 169.254.169.254
				{"", "64:ff9b::7f00:1", 80, deny("guard:loopback")},
				{"", "64:ff9b::5db8:d70e", 80, allow("default")}, // NAT64 of a public address
				{"", "::a00:1", 80, deny("guard:private")},       // IPv4-compatible 10.0.0.1
				{"", "::ffff:0:a00:1", 80, deny("guard:private")},
				{"", "2002:a9fe:a9fe::1", 80, deny("guard:metadata")}, // 6to4
				{"", "2002:c0a8:101::1", 80, deny("guard:private")},
				{"", "2001::1", 80, deny("guard:reserved")}, // Teredo
				{"", "64:ff9b:1::1", 80, deny("guard:reserved")},
			},
		},
		{
			name: "explicit cidr lifts the guard, broader ones do not",
			p: Policy{Rules: []Rule{
				{Name: "no-db", Action: "deny", CIDRs: []string{"10.1.2.3/32"}},
				{Name: "internal", Action: "allow", CIDRs: []string{"10.1.0.0/16"}, Ports: []PortRange{Port(5432)}},
				{Name: "meta-broad", Action: "allow", CIDRs: []string{"169.254.0.0/16"}},
				{Name: "world", Action: "allow", CIDRs: []string{"0.0.0.0/0"}},
				{Name: "ula", Action: "allow", Host: "svc.corp", CIDRs: []string{"fd00::/8"}},
				{Name: "loop", Action: "allow", CIDRs: []string{"::ffff:127.0.0.1/128"}},
			}},
			opts: CompileOptions{Guards: mustGuards(t, []string{"10.1.0.0/16", "169.254.0.0/16", "fd00::/8", "127.0.0.1/32", "169.254.169.254/32"}, nil)},
			checks: []check{
				{"", "10.1.9.9", 5432, allow("internal")},
				{"", "::ffff:10.1.9.9", 5432, allow("internal")},
				{"", "10.1.9.9", 22, deny("guard:private")}, // the lifting rule's port does not match
				{"", "10.1.2.3", 5432, deny("no-db")},       // an earlier deny rule still wins
				{"", "10.2.0.1", 5432, deny("guard:private")},
				{"", "169.254.10.10", 80, allow("meta-broad")},
				{"", "169.254.169.254", 80, deny("guard:metadata")},
				{"", pub, 80, allow("world")},
				{"svc.corp", "fd00::5", 443, allow("ula")},
				{"other.corp", "fd00::5", 443, deny("guard:private")},
				{"", "127.0.0.1", 80, allow("loop")},
				{"", "127.0.0.2", 80, deny("guard:loopback")},
			},
		},
		{
			name: "only what the operator opened",
			p: Policy{Default: "allow", Rules: []Rule{
				{Name: "internal", Action: "allow", CIDRs: []string{"10.1.0.0/16"}},
				{Name: "meta", Action: "allow", CIDRs: []string{"169.254.169.254/32"}},
				{Name: "node", Action: "allow", CIDRs: []string{"10.1.0.5/32", "198.51.100.10/32"}},
				{Name: "loop", Action: "allow", CIDRs: []string{"127.0.0.1/32"}},
			}},
			opts: CompileOptions{Guards: mustGuards(t, []string{"10.1.0.0/16", "169.254.0.0/16"}, []string{"10.1.0.5/32", "198.51.100.10/32"})},
			checks: []check{
				{"", "10.1.9.9", 5432, allow("internal")},
				{"", "10.2.0.1", 5432, deny("guard:private")},          // not opened
				{"", "169.254.169.254", 80, deny("guard:metadata")},    // the operator's /16 does not open the /32
				{"", "10.1.0.5", 80, deny("guard:extra")},              // the node's own address, inside an opened range
				{"", "198.51.100.10", 80, deny("guard:extra")},         // the node's own public address
				{"", "127.0.0.1", 80, deny("guard:loopback")},          // never opened
				{"", "::ffff:127.0.0.1", 80, deny("guard:loopback")},   // nor in another form
				{"", "64:ff9b::a9fe:a9fe", 80, deny("guard:metadata")}, // NAT64
			},
		},
		{
			name: "metadata needs its own /32",
			p:    Policy{Rules: []Rule{{Name: "meta", Action: "allow", CIDRs: []string{"169.254.169.254/32"}}}},
			opts: CompileOptions{Guards: mustGuards(t, []string{"169.254.169.254/32"}, nil)},
			checks: []check{
				{"", "169.254.169.254", 80, allow("meta")},
				{"", "::ffff:169.254.169.254", 80, allow("meta")},
			},
		},
		{
			name: "guard extra",
			p:    Policy{Default: "allow", Rules: []Rule{{Name: "host", Action: "allow", CIDRs: []string{"198.51.100.10/32"}}}},
			opts: CompileOptions{Guards: mustGuards(t, []string{"198.51.100.10/32"}, nil), GuardExtra: []netip.Prefix{
				netip.MustParsePrefix("198.51.100.10/32"),
				netip.MustParsePrefix("198.51.100.11/32"),
				netip.MustParsePrefix("2001:db8::/64"),
			}},
			checks: []check{
				{"", "198.51.100.10", 22, allow("host")},
				{"", "198.51.100.11", 22, deny("guard:extra")},
				{"", "::ffff:198.51.100.11", 22, deny("guard:extra")},
				{"", "2001:db8::1", 22, deny("guard:extra")},
				{"", "198.51.100.12", 22, allow("default")},
			},
		},
		{
			name: "invalid ip",
			p:    Policy{Default: "allow"},
			checks: []check{
				{"example.com", "", 443, deny("guard:invalid")},
			},
		},
		{
			name: "http rules",
			p: Policy{Rules: []Rule{
				{Name: "models", Action: "allow", Host: "api.example.com", Methods: []string{"GET"}, PathPrefix: "/v1/models"},
				{Name: "deny-admin", Action: "deny", Host: "*.corp.com", PathPrefix: "/admin"},
				{Name: "corp", Action: "allow", Host: "*.corp.com"},
				{Name: "deny-del", Action: "deny", Host: "x.org", Methods: []string{"DELETE"}},
				{Name: "x-deny", Action: "deny", Host: "x.org"},
				{Name: "y-get", Action: "allow", Host: "y.org", Methods: []string{"GET"}},
				{Name: "y", Action: "allow", Host: "y.org"},
			}},
			checks: []check{
				{"api.example.com", pub, 443, needsHTTP("models")},
				{"api.example.com", "10.0.0.1", 443, deny("guard:private")}, // the guard needs no HTTP
				{"www.corp.com", pub, 443, needsHTTP("deny-admin")},
				{"x.org", pub, 443, deny("x-deny")}, // deny either way: no need to look
				{"y.org", pub, 443, allow("y")},     // allow either way
				{"z.org", pub, 443, deny("default")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustCompile(t, tt.p, tt.opts)
			for _, c := range tt.checks {
				var addr netip.Addr
				if c.ip != "" {
					addr = ip(c.ip)
				}
				conn := Conn{Host: c.host, IP: addr, Port: c.port}
				d := m.Connect(conn)
				if got := verdictOf(d); got != c.want {
					t.Errorf("Connect(%+v) = %+v (%s); want %+v", conn, got, d.Reason, c.want)
				}
				if d.Reason == "" {
					t.Errorf("Connect(%+v): empty reason", conn)
				}
			}
		})
	}
}

func TestRequest(t *testing.T) {
	m := mustCompile(t, Policy{Rules: []Rule{
		{Name: "models", Action: "allow", Host: "api.example.com", Methods: []string{"GET"}, PathPrefix: "/v1/models"},
		{Name: "uploads", Action: "allow", Host: "api.example.com", Methods: []string{"POST", "PUT"}, PathPrefix: "/v1/uploads/"},
		{Name: "deny-admin", Action: "deny", Host: "*.corp.com", PathPrefix: "/admin"},
		{Name: "deny-purge", Action: "deny", Host: "*.corp.com", Methods: []string{"PURGE"}},
		{Name: "corp", Action: "allow", Host: "*.corp.com"},
	}}, CompileOptions{})
	api := Conn{Host: "api.example.com", IP: ip(pub), Port: 443}
	corp := Conn{Host: "www.corp.com", IP: ip(pub), Port: 443}
	tests := []struct {
		name   string
		c      Conn
		method string
		path   string
		want   verdict
	}{
		{"exact prefix", api, "GET", "/v1/models", allow("models")},
		{"below prefix", api, "GET", "/v1/models/gpt", allow("models")},
		{"query ignored", api, "GET", "/v1/models?x=../../admin", allow("models")},
		{"method case", api, "get", "/v1/models", allow("models")},
		{"other method", api, "POST", "/v1/models", deny("default")},
		{"segment boundary", api, "GET", "/v1/modelsx", deny("default")},
		{"path case-sensitive", api, "GET", "/V1/models", deny("default")},
		{"parent", api, "GET", "/v1", deny("default")},
		{"dotdot escape", api, "GET", "/v1/models/../files", deny("default")},
		{"dotdot within", api, "GET", "/v1/models/a/../b", deny("default")},
		{"double slash", api, "GET", "/v1//models", deny("default")},
		{"encoded dotdot", api, "GET", "/v1/models/%2e%2e/files", deny("default")},
		{"encoded dotdot upper", api, "GET", "/v1/models/%2E%2E/files", deny("default")},
		{"encoded dot", api, "GET", "/v1/models/%2e/x", deny("default")},
		{"encoded slash", api, "GET", "/v1/models%2f..%2ffiles", deny("default")},
		{"encoded backslash", api, "GET", "/v1/models/..%5cfiles", deny("default")},
		{"double encoded", api, "GET", "/v1/models/%252e%252e/files", deny("default")},
		{"tomcat param", api, "GET", "/v1/models/..;/files", deny("default")},
		{"overlong dot", api, "GET", "/v1/models/%c0%ae%c0%ae/files", deny("default")},
		{"backslash", api, "GET", "/v1/models\\..\\files", deny("default")},
		{"encoded plain letters", api, "GET", "/v1/%6Dodels/x", allow("models")},
		{"encoded space", api, "GET", "/v1/models/a%20b", allow("models")},
		{"no leading slash", api, "GET", "v1/models", deny("default")},
		{"absolute uri", api, "GET", "http://api.example.com/v1/models", deny("default")},
		{"trailing slash prefix exact", api, "POST", "/v1/uploads/", allow("uploads")},
		{"trailing slash prefix below", api, "PUT", "/v1/uploads/f", allow("uploads")},
		{"trailing slash prefix parent", api, "POST", "/v1/uploads", deny("default")},
		{"other host", Conn{Host: "evil.com", IP: ip(pub), Port: 443}, "GET", "/v1/models", deny("default")},
		{"guarded ip", Conn{Host: "api.example.com", IP: ip("::ffff:10.0.0.1"), Port: 443}, "GET", "/v1/models", deny("guard:private")},
		{"invalid ip", Conn{Host: "api.example.com"}, "GET", "/v1/models", deny("guard:invalid")},
		{"corp ok", corp, "GET", "/index.html", allow("corp")},
		{"corp admin", corp, "GET", "/admin", deny("deny-admin")},
		{"corp admin below", corp, "POST", "/admin/users", deny("deny-admin")},
		{"corp admin encoded", corp, "GET", "/%61dmin", deny("deny-admin")},
		{"corp admin dotdot", corp, "GET", "/x/../admin", deny("deny-admin")},   // unsafe path matches deny rules
		{"corp admin dslash", corp, "GET", "//admin", deny("deny-admin")},       // likewise
		{"corp unsafe elsewhere", corp, "GET", "/a/./b", deny("deny-admin")},    // fail closed
		{"corp admin not prefix", corp, "GET", "/administrator", allow("corp")}, // segment-wise
		{"corp purge", corp, "PURGE", "/x", deny("deny-purge")},
		{"corp purge lower", corp, "purge", "/x", deny("deny-purge")},
		{"corp bad method", corp, "GE T", "/x", deny("deny-purge")},
		{"corp empty method", corp, "", "/x", deny("deny-purge")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := m.Request(tt.c, tt.method, tt.path)
			if got := verdictOf(d); got != tt.want {
				t.Errorf("Request(%+v, %q, %q) = %+v (%s); want %+v", tt.c, tt.method, tt.path, got, d.Reason, tt.want)
			}
		})
	}
}

func TestCanonicalPath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"/", "/", true},
		{"/a/b", "/a/b", true},
		{"/a/b/", "/a/b/", true},
		{"/a/b?c=d", "/a/b", true},
		{"/a/b?", "/a/b", true},
		{"/%41%62", "/Ab", true},
		{"/a%20b", "/a b", true},
		{"/a%23b", "/a#b", true},
		{"/caf%C3%A9", "/café", true},
		{"/a;b/c", "/a;b/c", true},
		{"/.well-known/x", "/.well-known/x", true},
		{"/a/...", "/a/...", true},
		{"", "", false},
		{"?x", "", false},
		{"a/b", "", false},
		{"*", "", false},
		{"//", "", false},
		{"//a", "", false},
		{"/a//b", "", false},
		{"/a/b//", "", false},
		{"/.", "", false},
		{"/..", "", false},
		{"/a/./b", "", false},
		{"/a/../b", "", false},
		{"/a/..", "", false},
		{"/a/../", "", false},
		{"/a/..;x/b", "", false},
		{"/a/.;x/b", "", false},
		{"/a/%2e/b", "", false},
		{"/a/%2E%2e/b", "", false},
		{"/a/.%2e/b", "", false},
		{"/a%2fb", "", false},
		{"/a%2Fb", "", false},
		{"/a%5cb", "", false},
		{"/a\\b", "", false},
		{"/a%25", "", false},
		{"/a%2", "", false},
		{"/a%", "", false},
		{"/a%zz", "", false},
		{"/a%00", "", false},
		{"/a%0a", "", false},
		{"/a\x00", "", false},
		{"/a b", "", false},
		{"/a#b", "", false},
		{"/a%7f", "", false},
		{"/%c0%af", "", false},
		{"/%ff", "", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			got, ok := CanonicalPath(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("CanonicalPath(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestAllowsName(t *testing.T) {
	tests := []struct {
		name  string
		p     Policy
		names map[string]bool
	}{
		{"zero", Policy{}, map[string]bool{"example.com": false}},
		{"default allow", Policy{Default: "allow"}, map[string]bool{"example.com": true, "": false, "1.2.3.4": false, "a b": false}},
		{"host rules", Policy{Rules: []Rule{
			{Action: "allow", Host: "api.example.com", Ports: []PortRange{Port(443)}},
			{Action: "allow", Host: "*.cdn.example.com", Methods: []string{"GET"}, PathPrefix: "/x"},
		}}, map[string]bool{
			"api.example.com":   true,
			"API.example.com.":  true,
			"a.cdn.example.com": true,
			"cdn.example.com":   false,
			"example.com":       false,
			"evil.com":          false,
		}},
		{"unconditional deny shadows", Policy{Default: "allow", Rules: []Rule{
			{Action: "deny", Host: "*.evil.com"},
			{Action: "allow", Host: "ok.evil.com"},
		}}, map[string]bool{"ok.evil.com": false, "x.evil.com": false, "evil.com": true}},
		{"conditional deny does not shadow", Policy{Rules: []Rule{
			{Action: "deny", Host: "a.com", Ports: []PortRange{Port(80)}},
			{Action: "deny", Host: "a.com", PathPrefix: "/admin"},
			{Action: "deny", Host: "a.com", CIDRs: []string{"203.0.113.0/24"}},
			{Action: "allow", Host: "a.com"},
		}}, map[string]bool{"a.com": true}},
		{"cidr-only allow does not make names resolvable", Policy{Rules: []Rule{
			{Action: "allow", CIDRs: []string{"203.0.113.0/24"}},
		}}, map[string]bool{"internal.example.com": false}},
		{"host with cidrs does", Policy{Rules: []Rule{
			{Action: "allow", Host: "internal.example.com", CIDRs: []string{"203.0.113.0/24"}},
		}}, map[string]bool{"internal.example.com": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustCompile(t, tt.p, CompileOptions{})
			for n, want := range tt.names {
				if got := m.AllowsName(n); got != want {
					t.Errorf("AllowsName(%q) = %v; want %v", n, got, want)
				}
			}
		})
	}
}

func TestCompileOptionsInvalid(t *testing.T) {
	_, err := CompileWithOptions(Policy{}, CompileOptions{GuardExtra: []netip.Prefix{{}}})
	if err == nil {
		t.Fatal("CompileWithOptions with an invalid guard prefix: nil error")
	}
}

func mustGuards(t *testing.T, open, host []string) *Guards {
	t.Helper()
	var o, h []netip.Prefix
	for _, s := range open {
		o = append(o, netip.MustParsePrefix(s))
	}
	for _, s := range host {
		h = append(h, netip.MustParsePrefix(s))
	}
	g, err := NewGuards(o, h)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGuardsCheck: a tenant's allow rule into a guarded range is refused unless the operator opened
// all of it; broad CIDRs and deny rules pass; the error names the rule, the CIDR and the range.
func TestGuardsCheck(t *testing.T) {
	g := mustGuards(t, []string{"10.20.0.0/16", "169.254.169.254/32"}, []string{"203.0.113.9/32"})
	for _, tc := range []struct {
		cidr, action string
		want         string // a substring of the error; "" for none
	}{
		{"10.20.1.0/24", "allow", ""},
		{"10.20.0.0/16", "allow", ""},
		{"169.254.169.254/32", "allow", ""},
		{"0.0.0.0/0", "allow", ""},
		{"::/0", "allow", ""},
		{"198.51.100.0/24", "allow", ""},
		{"10.0.0.0/8", "deny", ""},
		{"10.0.0.0/8", "allow", `cidr 10.0.0.0/8 is in the guarded range 10.0.0.0/8 (guard:private)`},
		{"10.21.0.0/16", "allow", "10.0.0.0/8 (guard:private)"},
		{"127.0.0.1/32", "allow", "127.0.0.0/8 (guard:loopback)"},
		{"::ffff:127.0.0.1/128", "allow", "127.0.0.0/8 (guard:loopback)"},
		{"169.254.0.0/16", "allow", "169.254.0.0/16 (guard:link-local)"},
		{"203.0.113.9/32", "allow", "203.0.113.9/32 (guard:extra)"},
		{"100.96.0.0/12", "allow", "guard:cgnat"},
		{"fd00::/8", "allow", "guard:private"},
	} {
		p := Policy{Rules: []Rule{{Name: "r", Action: tc.action, CIDRs: []string{tc.cidr}}}}
		err := g.Check(p)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %s: %v; want it accepted", tc.action, tc.cidr, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `rule "r"`) || !errors.Is(err, errdefs.ErrInvalidArgument)):
			t.Errorf("%s %s: %v; want an invalid-argument error naming rule \"r\" and %q", tc.action, tc.cidr, err, tc.want)
		}
	}
	if err := (*Guards)(nil).Check(Policy{Rules: []Rule{{Action: "allow", CIDRs: []string{"10.0.0.1/32"}}}}); err == nil {
		t.Error("nil Guards accepted a rule into a private range")
	}
}

// TestGuardsSetHost: a node address that appears after the policy was compiled is guarded at once.
func TestGuardsSetHost(t *testing.T) {
	g := mustGuards(t, nil, nil)
	m, err := CompileWithOptions(Policy{Default: "allow"}, CompileOptions{Guards: g})
	if err != nil {
		t.Fatal(err)
	}
	c := Conn{IP: netip.MustParseAddr("198.51.100.7"), Port: 80}
	if d := m.Connect(c); !d.Allow {
		t.Fatalf("before: %+v; want allowed", d)
	}
	if err := g.SetHost([]netip.Prefix{netip.MustParsePrefix("198.51.100.7/32")}); err != nil {
		t.Fatal(err)
	}
	if d := m.Connect(c); d.Allow || d.Rule != GuardExtra {
		t.Fatalf("after the node took the address: %+v; want guard:extra", d)
	}
}
