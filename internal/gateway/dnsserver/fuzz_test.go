package dnsserver

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzHandleQuery feeds arbitrary bytes to the query handler as UDP and TCP messages. It must not
// panic; it must answer every message whose header it can read unless that is a response; and every
// answer must parse, carry the query's ID, fit the transport's size limit, and own its records by the
// question's name. Lookup must only ever see normalized names. The committed corpus is in
// testdata/fuzz/FuzzHandleQuery.
func FuzzHandleQuery(f *testing.F) {
	f.Add(buildQuery(f, 1, "api.example.com.", dnsmessage.TypeA, qopts{}), true)
	f.Add(buildQuery(f, 2, "many.example.com.", dnsmessage.TypeA, qopts{edns: 600}), true)
	f.Add(buildQuery(f, 3, "Api.Example.com.", dnsmessage.TypeAAAA, qopts{edns: 4096, version: 1}), false)
	f.Add(buildQuery(f, 4, "x.", dnsmessage.TypeTXT, qopts{questions: 2}), true)
	f.Add([]byte{0, 5, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0}, false)
	fake := newFake()
	close(fake.release)
	s := &Server{
		Lookup: func(ctx context.Context, client netip.Addr, name string, qtype dnsmessage.Type) ([]netip.Addr, error) {
			if name == "" || strings.HasSuffix(name, ".") || strings.ToLower(name) != name {
				panic("Lookup got an unnormalized name " + name)
			}
			return fake.Lookup(ctx, client, name, qtype)
		},
	}
	client := netip.MustParseAddr("10.0.0.2")
	f.Fuzz(func(t *testing.T, msg []byte, udp bool) {
		resp := s.handle(context.Background(), client, msg, udp)
		var qp dnsmessage.Parser
		qh, qerr := qp.Start(msg)
		if qerr != nil || qh.Response {
			if resp != nil {
				t.Fatalf("answered an unreadable header or a response: %x", resp)
			}
			return
		}
		if resp == nil {
			t.Fatal("no answer to a query")
		}
		var m dnsmessage.Message
		if err := m.Unpack(resp); err != nil {
			t.Fatalf("answer does not parse: %v", err)
		}
		if m.Header.ID != qh.ID || !m.Header.Response {
			t.Fatalf("answer header %+v to query %+v", m.Header, qh)
		}
		hasOPT := false
		for _, a := range m.Additionals {
			hasOPT = hasOPT || a.Header.Type == dnsmessage.TypeOPT
		}
		if udp && (len(resp) > ednsUDPSize || (!hasOPT && len(resp) > minUDPSize)) {
			t.Fatalf("UDP answer of %d bytes (OPT %v)", len(resp), hasOPT)
		}
		if len(m.Answers) > 0 {
			if len(m.Questions) != 1 {
				t.Fatalf("answers without one question: %+v", m)
			}
			for _, a := range m.Answers {
				if a.Header.Name != m.Questions[0].Name || a.Header.Type != m.Questions[0].Type {
					t.Fatalf("answer %v to question %v", a.Header, m.Questions[0])
				}
			}
		}
	})
}
