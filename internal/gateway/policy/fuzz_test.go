package policy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// FuzzPolicy decodes arbitrary JSON as a Policy, validates and compiles it, and queries the Matcher
// with an arbitrary connection and request. It checks that Validate and Compile agree, that a valid
// policy survives a JSON round trip, and the Matcher's guarantees: Connect never allows and asks for
// HTTP at once; when it does not ask for HTTP, Request agrees with it; and a guarded address is only
// ever allowed by a rule whose CIDRs lift the guard.
func FuzzPolicy(f *testing.F) {
	f.Add([]byte(`{}`), "example.com", []byte{93, 184, 215, 14}, uint16(443), "GET", "/")
	f.Add([]byte(`{"default":"allow"}`), "", []byte{127, 0, 0, 1}, uint16(80), "GET", "/")
	f.Add([]byte(`{"rules":[{"action":"allow","host":"*.example.com","ports":[443,"8000-8100"]}]}`),
		"a.b.example.com.", []byte{93, 184, 215, 14}, uint16(8080), "POST", "/x")
	f.Add([]byte(`{"rules":[{"name":"m","action":"allow","host":"api.example.com","methods":["GET"],"path_prefix":"/v1/models"},{"action":"deny","host":"*.example.com"}],"default":"allow"}`),
		"api.example.com", []byte{93, 184, 215, 14}, uint16(443), "GET", "/v1/models/%2e%2e/files")
	f.Add([]byte(`{"rules":[{"action":"allow","cidrs":["10.1.0.0/16","::ffff:169.254.169.254/128"]}]}`),
		"", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 169, 254, 169, 254}, uint16(80), "GET", "/")
	f.Add([]byte(`{"rules":[{"action":"deny","host":"x.com","path_prefix":"/admin"},{"action":"allow","host":"x.com"}]}`),
		"X.COM", []byte{1, 1, 1, 1}, uint16(443), "get", "//admin")
	f.Add([]byte(`{"rules":[{"action":"allow","host":"a.com","ports":[0]}]}`), "a.com", []byte{}, uint16(0), "", "")
	f.Fuzz(func(t *testing.T, data []byte, host string, ipBytes []byte, port uint16, method, path string) {
		var p Policy
		if err := json.Unmarshal(data, &p); err != nil {
			return
		}
		verr := p.Validate()
		m, cerr := Compile(p)
		if (verr == nil) != (cerr == nil) {
			t.Fatalf("Validate = %v but Compile = %v", verr, cerr)
		}
		if verr != nil {
			if !errors.Is(verr, errdefs.ErrInvalidArgument) {
				t.Fatalf("Validate = %v; want ErrInvalidArgument", verr)
			}
			return
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal valid policy: %v", err)
		}
		var back Policy
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal %s: %v", b, err)
		}
		if diff := cmp.Diff(p, back, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("JSON round trip (-orig +back):\n%s", diff)
		}

		addr, _ := netip.AddrFromSlice(ipBytes)
		c := Conn{Host: host, IP: addr, Port: port}
		cd := m.Connect(c)
		rd := m.Request(c, method, path)
		if cd.Allow && cd.NeedsHTTP {
			t.Fatalf("Connect(%+v) = %+v: allow and needs HTTP", c, cd)
		}
		if rd.NeedsHTTP {
			t.Fatalf("Request = %+v: needs HTTP", rd)
		}
		if !cd.NeedsHTTP && cd.Allow != rd.Allow {
			t.Fatalf("Connect(%+v) = %+v but Request(%q, %q) = %+v", c, cd, method, path, rd)
		}
		if cd.Rule == "" || rd.Rule == "" || cd.Reason == "" || rd.Reason == "" {
			t.Fatalf("empty rule or reason: %+v, %+v", cd, rd)
		}
		if !addr.IsValid() {
			if cd.Allow || rd.Allow {
				t.Fatalf("invalid address allowed: %+v %+v", cd, rd)
			}
			return
		}
		u := addr.Unmap().WithZone("")
		if g := guardFor(u, nil); g.ok {
			for _, d := range []Decision{cd, rd} {
				if !d.Allow {
					continue
				}
				lifted := false
				for _, r := range m.rules {
					if r.name != d.Rule {
						continue
					}
					for _, pfx := range r.cidrs {
						lifted = lifted || lifts(pfx, u, g)
					}
				}
				if !lifted {
					t.Fatalf("guarded %s (%s) allowed by %+v", addr, g.name, d)
				}
			}
		}
	})
}
