package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// fakeLookup is the gateway's side of the server, by name.
type fakeLookup struct {
	release chan struct{} // "slow.example.com" waits for it (or ctx)

	mu      sync.Mutex
	calls   []string                  // "client name type"; guarded by mu
	answers map[string][][]netip.Addr // OnAnswer calls, by "client name"; guarded by mu
}

func newFake() *fakeLookup {
	return &fakeLookup{release: make(chan struct{}), answers: make(map[string][][]netip.Addr)}
}

func (f *fakeLookup) Lookup(ctx context.Context, client netip.Addr, name string, qtype dnsmessage.Type) ([]netip.Addr, error) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s %v", client, name, qtype))
	f.mu.Unlock()
	switch name {
	case "api.example.com":
		return []netip.Addr{
			netip.MustParseAddr("1.2.3.4"), netip.MustParseAddr("5.6.7.8"),
			netip.MustParseAddr("::ffff:9.9.9.9"), netip.MustParseAddr("2001:db8::1"),
		}, nil
	case "v4only.example.com":
		return []netip.Addr{netip.MustParseAddr("1.2.3.4")}, nil
	case "many.example.com":
		var out []netip.Addr
		for i := range 100 {
			out = append(out, netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}))
		}
		return out, nil
	case "missing.example.com":
		return nil, fmt.Errorf("lookup %s: %w", name, errdefs.ErrNotFound)
	case "broken.example.com":
		return nil, errors.New("upstream down")
	case "slow.example.com":
		select {
		case <-f.release:
			return []netip.Addr{netip.MustParseAddr("1.2.3.4")}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("policy of %s: %w", client, ErrRefusedName)
}

func (f *fakeLookup) OnAnswer(client netip.Addr, name string, addrs []netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := client.String() + " " + name
	f.answers[k] = append(f.answers[k], addrs)
}

func (f *fakeLookup) server() *Server {
	return &Server{Lookup: f.Lookup, OnAnswer: f.OnAnswer}
}

// running starts s on UDP and TCP sockets on addr ("127.0.0.1:0") and stops it when the test ends,
// checking that both Serve calls return nil.
type running struct {
	udp, tcp string
}

func start(t *testing.T, s *Server) running {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() { errc <- s.ServeUDP(ctx, pc) }()
	go func() { errc <- s.ServeTCP(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Serve returned %v; want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return after cancel")
			}
		}
	})
	return running{udp: pc.LocalAddr().String(), tcp: l.Addr().String()}
}

type qopts struct {
	class     dnsmessage.Class // zero means IN
	opcode    dnsmessage.OpCode
	response  bool
	edns      int // advertised UDP size; 0 means no OPT
	version   uint8
	questions int // zero means 1; negative means none
}

func buildQuery(t testing.TB, id uint16, name string, qtype dnsmessage.Type, o qopts) []byte {
	t.Helper()
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true, OpCode: o.opcode, Response: o.response}}
	class := o.class
	if class == 0 {
		class = dnsmessage.ClassINET
	}
	n := o.questions
	if n == 0 {
		n = 1
	}
	for range max(n, 0) {
		m.Questions = append(m.Questions, dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: qtype, Class: class})
	}
	if o.edns > 0 {
		var rh dnsmessage.ResourceHeader
		if err := rh.SetEDNS0(o.edns, dnsmessage.RCodeSuccess, false); err != nil {
			t.Fatal(err)
		}
		rh.TTL |= uint32(o.version) << 16
		m.Additionals = append(m.Additionals, dnsmessage.Resource{Header: rh, Body: &dnsmessage.OPTResource{}})
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exchange sends raw over transport ("udp" or "tcp") to addr and returns the response, or nil if
// none came within wait.
func exchange(t *testing.T, transport, addr string, raw []byte, wait time.Duration) []byte {
	t.Helper()
	c, err := net.Dial(transport, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return exchangeOn(t, c, transport, raw, wait)
}

func exchangeOn(t *testing.T, c net.Conn, transport string, raw []byte, wait time.Duration) []byte {
	t.Helper()
	c.SetDeadline(time.Now().Add(wait))
	if transport == "udp" {
		if _, err := c.Write(raw); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil {
			return nil
		}
		return buf[:n]
	}
	if _, err := c.Write(append([]byte{byte(len(raw) >> 8), byte(len(raw))}, raw...)); err != nil {
		t.Fatal(err)
	}
	var lb [2]byte
	if _, err := readFull(c, lb[:]); err != nil {
		return nil
	}
	buf := make([]byte, int(lb[0])<<8|int(lb[1]))
	if _, err := readFull(c, buf); err != nil {
		t.Fatalf("read tcp response body: %v", err)
	}
	return buf
}

// summary is what the tests compare of a response.
type summary struct {
	ID        uint16
	RCode     dnsmessage.RCode // extended when there is an OPT
	Truncated bool
	Question  string
	Answers   []string // "name type addr ttl"
	OPTSize   int      // 0 when no OPT
}

func summarize(t *testing.T, b []byte) summary {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpack response: %v", err)
	}
	if !m.Header.Response || !m.Header.RecursionAvailable {
		t.Errorf("response header %+v: want QR and RA set", m.Header)
	}
	s := summary{ID: m.Header.ID, RCode: m.Header.RCode, Truncated: m.Header.Truncated}
	if len(m.Questions) > 0 {
		s.Question = m.Questions[0].Name.String() + " " + m.Questions[0].Type.String()
	}
	for _, a := range m.Answers {
		var addr netip.Addr
		switch r := a.Body.(type) {
		case *dnsmessage.AResource:
			addr = netip.AddrFrom4(r.A)
		case *dnsmessage.AAAAResource:
			addr = netip.AddrFrom16(r.AAAA)
		}
		s.Answers = append(s.Answers, fmt.Sprintf("%s %v %s %d", a.Header.Name, a.Header.Type, addr, a.Header.TTL))
	}
	for _, a := range m.Additionals {
		if a.Header.Type == dnsmessage.TypeOPT {
			s.OPTSize = int(a.Header.Class)
			s.RCode = a.Header.ExtendedRCode(m.Header.RCode)
		}
	}
	return s
}

func TestServe(t *testing.T) {
	f := newFake()
	srv := start(t, f.server())
	manyA := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("many.example.com. TypeA 198.51.100.%d 30", i))
		}
		return out
	}
	tests := []struct {
		name       string
		raw        []byte
		want       summary
		tcp        *summary // when the TCP answer differs
		noResponse bool
	}{
		{name: "A", raw: buildQuery(t, 1, "Api.Example.COM.", dnsmessage.TypeA, qopts{}), want: summary{ID: 1, Question: "Api.Example.COM. TypeA", Answers: []string{
			"Api.Example.COM. TypeA 1.2.3.4 30", "Api.Example.COM. TypeA 5.6.7.8 30", "Api.Example.COM. TypeA 9.9.9.9 30",
		}}},
		{name: "AAAA", raw: buildQuery(t, 2, "api.example.com.", dnsmessage.TypeAAAA, qopts{}), want: summary{ID: 2, Question: "api.example.com. TypeAAAA", Answers: []string{
			"api.example.com. TypeAAAA 2001:db8::1 30",
		}}},
		{name: "AAAA none", raw: buildQuery(t, 3, "v4only.example.com.", dnsmessage.TypeAAAA, qopts{}), want: summary{ID: 3, Question: "v4only.example.com. TypeAAAA"}},
		{name: "TXT of allowed name", raw: buildQuery(t, 4, "api.example.com.", dnsmessage.TypeTXT, qopts{}), want: summary{ID: 4, Question: "api.example.com. TypeTXT"}},
		{name: "ANY", raw: buildQuery(t, 5, "api.example.com.", dnsmessage.TypeALL, qopts{}), want: summary{ID: 5, Question: "api.example.com. TypeALL"}},
		{name: "refused", raw: buildQuery(t, 6, "evil.example.com.", dnsmessage.TypeA, qopts{}), want: summary{ID: 6, RCode: dnsmessage.RCodeNameError, Question: "evil.example.com. TypeA"}},
		{name: "TXT of refused name", raw: buildQuery(t, 7, "evil.example.com.", dnsmessage.TypeTXT, qopts{}), want: summary{ID: 7, RCode: dnsmessage.RCodeNameError, Question: "evil.example.com. TypeTXT"}},
		{name: "not found", raw: buildQuery(t, 8, "missing.example.com.", dnsmessage.TypeA, qopts{}), want: summary{ID: 8, RCode: dnsmessage.RCodeNameError, Question: "missing.example.com. TypeA"}},
		{name: "lookup error", raw: buildQuery(t, 9, "broken.example.com.", dnsmessage.TypeA, qopts{}), want: summary{ID: 9, RCode: dnsmessage.RCodeServerFailure, Question: "broken.example.com. TypeA"}},
		{name: "two questions", raw: buildQuery(t, 10, "api.example.com.", dnsmessage.TypeA, qopts{questions: 2}), want: summary{ID: 10, RCode: dnsmessage.RCodeFormatError}},
		{name: "no question", raw: buildQuery(t, 11, "api.example.com.", dnsmessage.TypeA, qopts{questions: -1}), want: summary{ID: 11, RCode: dnsmessage.RCodeFormatError}},
		{name: "truncated question", raw: buildQuery(t, 12, "api.example.com.", dnsmessage.TypeA, qopts{})[:20], want: summary{ID: 12, RCode: dnsmessage.RCodeFormatError}},
		{name: "opcode status", raw: buildQuery(t, 13, "api.example.com.", dnsmessage.TypeA, qopts{opcode: 2}), want: summary{ID: 13, RCode: dnsmessage.RCodeNotImplemented}},
		{name: "class chaos", raw: buildQuery(t, 14, "version.bind.", dnsmessage.TypeTXT, qopts{class: dnsmessage.ClassCHAOS}), want: summary{ID: 14, RCode: dnsmessage.RCodeRefused, Question: "version.bind. TypeTXT"}},
		{name: "axfr", raw: buildQuery(t, 15, "example.com.", dnsmessage.TypeAXFR, qopts{}), want: summary{ID: 15, RCode: dnsmessage.RCodeRefused, Question: "example.com. TypeAXFR"}},
		{name: "root", raw: buildQuery(t, 16, ".", dnsmessage.TypeNS, qopts{}), want: summary{ID: 16, RCode: dnsmessage.RCodeRefused, Question: ". TypeNS"}},
		{name: "odd bytes in name", raw: buildQuery(t, 17, "a\\ b.example.com.", dnsmessage.TypeA, qopts{}), want: summary{ID: 17, RCode: dnsmessage.RCodeNameError, Question: "a\\ b.example.com. TypeA"}},
		{name: "edns", raw: buildQuery(t, 18, "api.example.com.", dnsmessage.TypeAAAA, qopts{edns: 4096}), want: summary{ID: 18, Question: "api.example.com. TypeAAAA", OPTSize: 1232, Answers: []string{
			"api.example.com. TypeAAAA 2001:db8::1 30",
		}}},
		{name: "edns version 1", raw: buildQuery(t, 19, "api.example.com.", dnsmessage.TypeA, qopts{edns: 1232, version: 1}), want: summary{ID: 19, RCode: 16, OPTSize: 1232}},
		{name: "too big for udp", raw: buildQuery(t, 20, "many.example.com.", dnsmessage.TypeA, qopts{}),
			want: summary{ID: 20, Question: "many.example.com. TypeA", Truncated: true},
			tcp:  &summary{ID: 20, Question: "many.example.com. TypeA", Answers: manyA(DefaultMaxAnswers)}},
		{name: "big with edns", raw: buildQuery(t, 21, "many.example.com.", dnsmessage.TypeA, qopts{edns: 1232}),
			want: summary{ID: 21, Question: "many.example.com. TypeA", OPTSize: 1232, Answers: manyA(DefaultMaxAnswers)}},
		{name: "small edns size counts as 512", raw: buildQuery(t, 22, "many.example.com.", dnsmessage.TypeA, qopts{edns: 100}),
			want: summary{ID: 22, Question: "many.example.com. TypeA", OPTSize: 1232, Truncated: true},
			tcp:  &summary{ID: 22, Question: "many.example.com. TypeA", OPTSize: 1232, Answers: manyA(DefaultMaxAnswers)}},
		{name: "response", raw: buildQuery(t, 23, "api.example.com.", dnsmessage.TypeA, qopts{response: true}), noResponse: true},
		{name: "short header", raw: []byte{0, 24, 1, 0}, noResponse: true},
		{name: "after garbage", raw: buildQuery(t, 25, "v4only.example.com.", dnsmessage.TypeA, qopts{}), want: summary{ID: 25, Question: "v4only.example.com. TypeA", Answers: []string{
			"v4only.example.com. TypeA 1.2.3.4 30",
		}}},
	}
	for _, transport := range []string{"udp", "tcp"} {
		addr := srv.udp
		if transport == "tcp" {
			addr = srv.tcp
		}
		for _, tt := range tests {
			t.Run(transport+"/"+tt.name, func(t *testing.T) {
				wait := 5 * time.Second
				if tt.noResponse {
					wait = 300 * time.Millisecond
				}
				resp := exchange(t, transport, addr, tt.raw, wait)
				if tt.noResponse {
					if resp != nil {
						t.Fatalf("got a response %x; want none", resp)
					}
					return
				}
				if resp == nil {
					t.Fatal("no response")
				}
				if transport == "udp" && len(resp) > 512 && tt.want.OPTSize == 0 {
					t.Errorf("UDP response of %d bytes without EDNS", len(resp))
				}
				want := tt.want
				if transport == "tcp" && tt.tcp != nil {
					want = *tt.tcp
				}
				if diff := cmp.Diff(want, summarize(t, resp)); diff != "" {
					t.Errorf("response (-want +got):\n%s", diff)
				}
			})
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	v4 := []netip.Addr{netip.MustParseAddr("1.2.3.4"), netip.MustParseAddr("5.6.7.8"), netip.MustParseAddr("9.9.9.9")}
	v6 := []netip.Addr{netip.MustParseAddr("2001:db8::1")}
	// Over UDP, then TCP: A, AAAA, AAAA with EDNS.
	want := [][]netip.Addr{v4, v6, v6, v4, v6, v6}
	if diff := cmp.Diff(want, f.answers["127.0.0.1 api.example.com"], cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("OnAnswer for api.example.com (-want +got):\n%s", diff)
	}
	if _, ok := f.answers["127.0.0.1 v4only.example.com"]; !ok {
		t.Error("OnAnswer not called for v4only.example.com")
	}
	for _, c := range f.calls {
		if strings.Contains(c, "version.bind") || strings.Contains(c, " b.example") || strings.Contains(c, "Api") {
			t.Errorf("unexpected lookup %q", c)
		}
	}
}

func TestZeroServerRefusesAll(t *testing.T) {
	srv := start(t, &Server{})
	resp := exchange(t, "udp", srv.udp, buildQuery(t, 7, "example.com.", dnsmessage.TypeA, qopts{}), 5*time.Second)
	if resp == nil {
		t.Fatal("no response")
	}
	if got := summarize(t, resp); got.RCode != dnsmessage.RCodeNameError {
		t.Errorf("rcode = %v; want NXDOMAIN", got.RCode)
	}
}

func TestTCPPipelining(t *testing.T) {
	srv := start(t, newFake().server())
	c, err := net.Dial("tcp", srv.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out []byte
	for i, name := range []string{"api.example.com.", "evil.example.com.", "v4only.example.com."} {
		q := buildQuery(t, uint16(100+i), name, dnsmessage.TypeA, qopts{})
		out = append(out, byte(len(q)>>8), byte(len(q)))
		out = append(out, q...)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	for i, want := range []dnsmessage.RCode{dnsmessage.RCodeSuccess, dnsmessage.RCodeNameError, dnsmessage.RCodeSuccess} {
		var lb [2]byte
		if _, err := readFull(c, lb[:]); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, int(lb[0])<<8|int(lb[1]))
		if _, err := readFull(c, buf); err != nil {
			t.Fatal(err)
		}
		got := summarize(t, buf)
		if got.ID != uint16(100+i) || got.RCode != want {
			t.Errorf("response %d: id %d rcode %v; want id %d rcode %v", i, got.ID, got.RCode, 100+i, want)
		}
	}
}

func TestTCPIdleTimeout(t *testing.T) {
	s := newFake().server()
	s.TCPIdleTimeout = 100 * time.Millisecond
	srv := start(t, s)
	c, err := net.Dial("tcp", srv.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0}) // half a length prefix, then silence
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatalf("Read = %v; want the server to close the idle connection", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestTCPMalformedFrameCloses(t *testing.T) {
	srv := start(t, newFake().server())
	c, err := net.Dial("tcp", srv.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0, 3, 1, 2, 3}) // shorter than a header
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("Read = %v; want the connection closed", err)
	}
}

func TestTCPConnLimit(t *testing.T) {
	s := newFake().server()
	s.MaxTCPConnsPerClient = 2
	srv := start(t, s)
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", srv.tcp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		// A round trip makes sure the server has accepted and counted the connection.
		if exchangeOn(t, c, "tcp", buildQuery(t, 1, "api.example.com.", dnsmessage.TypeA, qopts{}), 5*time.Second) == nil {
			t.Fatal("no response on an allowed connection")
		}
	}
	extra, err := net.Dial("tcp", srv.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if resp := exchangeOn(t, extra, "tcp", buildQuery(t, 2, "api.example.com.", dnsmessage.TypeA, qopts{}), 5*time.Second); resp != nil {
		t.Fatal("third connection of one client was served")
	}
	// Another client is not affected.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	other, err := d.Dial("tcp", srv.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if exchangeOn(t, other, "tcp", buildQuery(t, 3, "api.example.com.", dnsmessage.TypeA, qopts{}), 5*time.Second) == nil {
		t.Fatal("another client's connection was not served")
	}
	// Closing one frees a slot.
	conns[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", srv.tcp)
		if err != nil {
			t.Fatal(err)
		}
		resp := exchangeOn(t, c, "tcp", buildQuery(t, 4, "api.example.com.", dnsmessage.TypeA, qopts{}), time.Second)
		c.Close()
		if resp != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("slot not freed after a connection closed")
		}
	}
}

// fakeClock is a settable clock for rate-limit tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time // guarded by mu
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func dialFrom(t *testing.T, transport, local, addr string) net.Conn {
	t.Helper()
	var d net.Dialer
	switch transport {
	case "udp":
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(local)}
	case "tcp":
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial(transport, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRateLimit(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	s := newFake().server()
	s.QueriesPerSecond, s.Burst, s.now = 1, 3, clk.now
	srv := start(t, s)
	q := buildQuery(t, 1, "api.example.com.", dnsmessage.TypeA, qopts{})

	a := dialFrom(t, "udp", "127.0.0.1", srv.udp)
	answered := 0
	for range 5 {
		if exchangeOn(t, a, "udp", q, 300*time.Millisecond) != nil {
			answered++
		}
	}
	if answered != 3 {
		t.Errorf("client A: %d of 5 queries answered in a burst of 3; want 3", answered)
	}
	// Another client has its own bucket.
	b := dialFrom(t, "udp", "127.0.0.2", srv.udp)
	if exchangeOn(t, b, "udp", q, 5*time.Second) == nil {
		t.Error("client B starved by client A")
	}
	// TCP shares A's bucket and says REFUSED.
	at := dialFrom(t, "tcp", "127.0.0.1", srv.tcp)
	resp := exchangeOn(t, at, "tcp", q, 5*time.Second)
	if resp == nil || summarize(t, resp).RCode != dnsmessage.RCodeRefused {
		t.Errorf("client A over TCP with an empty bucket: %x; want REFUSED", resp)
	}
	// The bucket refills at the rate.
	clk.advance(time.Second)
	if exchangeOn(t, a, "udp", q, 5*time.Second) == nil {
		t.Error("client A not answered after a refill")
	}
	if exchangeOn(t, a, "udp", q, 300*time.Millisecond) != nil {
		t.Error("client A answered beyond its refill")
	}
}

func TestSlowClientDoesNotStarveOthers(t *testing.T) {
	f := newFake()
	s := f.server()
	s.MaxInFlightPerClient = 4
	srv := start(t, s)
	defer close(f.release)

	a := dialFrom(t, "udp", "127.0.0.1", srv.udp)
	for i := range 10 {
		if _, err := a.Write(buildQuery(t, uint16(i), "slow.example.com.", dnsmessage.TypeA, qopts{})); err != nil {
			t.Fatal(err)
		}
	}
	// Give the server time to take them in (and drop the ones beyond the cap).
	waitFor(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inFlight == 4
	})
	b := dialFrom(t, "udp", "127.0.0.2", srv.udp)
	if exchangeOn(t, b, "udp", buildQuery(t, 99, "api.example.com.", dnsmessage.TypeA, qopts{}), 5*time.Second) == nil {
		t.Fatal("client B not answered while client A's lookups hang")
	}
	if resp := exchangeOn(t, a, "udp", buildQuery(t, 98, "api.example.com.", dnsmessage.TypeA, qopts{}), 300*time.Millisecond); resp != nil {
		t.Errorf("client A answered beyond its in-flight cap: %+v", summarize(t, resp))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStopLeavesNoGoroutine(t *testing.T) {
	for _, how := range []string{"cancel", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			before := runtime.NumGoroutine()
			f := newFake()
			s := f.server()
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 2)
			go func() { errc <- s.ServeUDP(ctx, pc) }()
			go func() { errc <- s.ServeTCP(ctx, l) }()

			// A hanging UDP lookup, a hanging TCP lookup and an idle TCP connection.
			u, err := net.Dial("udp", pc.LocalAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			u.Write(buildQuery(t, 1, "slow.example.com.", dnsmessage.TypeA, qopts{}))
			tc, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer tc.Close()
			q := buildQuery(t, 2, "slow.example.com.", dnsmessage.TypeA, qopts{})
			tc.Write(append([]byte{byte(len(q) >> 8), byte(len(q))}, q...))
			idle, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer idle.Close()
			waitFor(t, func() bool {
				f.mu.Lock()
				defer f.mu.Unlock()
				return len(f.calls) == 2
			})

			wantErr := error(nil)
			if how == "cancel" {
				cancel()
			} else {
				sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer scancel()
				if err := s.Shutdown(sctx); err != nil {
					t.Fatalf("Shutdown: %v", err)
				}
				wantErr = ErrServerClosed
			}
			for range 2 {
				select {
				case err := <-errc:
					if !errors.Is(err, wantErr) || (wantErr == nil && err != nil) {
						t.Errorf("Serve returned %v; want %v", err, wantErr)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Serve did not return")
				}
			}
			if how == "shutdown" {
				pc2, err := net.ListenPacket("udp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				if err := s.ServeUDP(context.Background(), pc2); !errors.Is(err, ErrServerClosed) {
					t.Errorf("ServeUDP after Shutdown = %v; want ErrServerClosed", err)
				}
			}
			u.Close()
			tc.Close()
			idle.Close()
			deadline := time.Now().Add(10 * time.Second)
			for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > before {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines after stop; %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

func TestClientStatesAreSwept(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	s := &Server{now: clk.now}
	for i := range sweepAtLeast + 10 {
		c := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		if !s.admitUDP(c) {
			t.Fatalf("client %d not admitted", i)
		}
		s.releaseUDP(c)
	}
	clk.advance(time.Hour)
	s.admitUDP(netip.MustParseAddr("10.9.9.9"))
	s.mu.Lock()
	n := len(s.clients)
	s.mu.Unlock()
	if n > 20 {
		t.Errorf("%d client states kept after every bucket refilled; want the idle ones swept", n)
	}
}
