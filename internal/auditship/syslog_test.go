package auditship_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/auditship"
)

func entryOf(t testing.TB, l []byte) auditship.Entry {
	t.Helper()
	e, err := auditship.ParseEntry(l)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func entries(t testing.TB, l *fakeLog) []auditship.Entry {
	t.Helper()
	var out []auditship.Entry
	for _, ln := range bytes.Split(bytes.TrimSpace(l.export(0)), []byte("\n")) {
		out = append(out, entryOf(t, ln))
	}
	return out
}

// checkMessage parses m and checks it carries e as FormatSyslog promises.
func checkMessage(t *testing.T, m []byte, e auditship.Entry) syslogMsg {
	t.Helper()
	p, err := parseSyslog(m)
	if err != nil {
		t.Fatalf("message %q: %v", m, err)
	}
	want := map[string]string{"tenant": e.Tenant, "seq": strconv.FormatInt(e.Seq, 10), "hash": e.Hash}
	if tr, ok := p.Params["truncated"]; ok {
		want["truncated"] = tr
	}
	if diff := cmp.Diff(want, p.Params); diff != "" {
		t.Errorf("structured data (-want +got):\n%s", diff)
	}
	if p.PRI != 110 || p.App != "airlock" || p.MsgID != e.Kind || p.SDID != auditship.SDID || !p.HasBOM {
		t.Errorf("message %q: PRI %d app %q msgid %q sd-id %q BOM %v; want 110 airlock %q %s true", m, p.PRI, p.App, p.MsgID, p.SDID, p.HasBOM, e.Kind, auditship.SDID)
	}
	if ts, _ := time.Parse(time.RFC3339Nano, p.Time); !ts.Equal(e.Time) {
		t.Errorf("TIMESTAMP %s; want the entry's time %s", p.Time, e.Time)
	}
	return p
}

func TestFormatSyslog(t *testing.T) {
	e := entries(t, newFakeLog(`tn_"odd\]`, 1))[0]
	m := auditship.FormatSyslog(e, "host-1", "42", 0)
	p := checkMessage(t, m, e)
	if !bytes.Equal(p.Msg, e.Line) || p.Host != "host-1" || p.ProcID != "42" {
		t.Errorf("message %q: MSG, HOSTNAME or PROCID not as given", m)
	}
	// Header fields that would break the format are the nil value.
	e.Kind = "two words"
	if p := checkMessage(t, auditship.FormatSyslog(e, "", "x y", 0), e2(e, "-")); p.Host != "-" || p.ProcID != "-" {
		t.Errorf("empty HOSTNAME and PROCID with a space = %q %q; want - -", p.Host, p.ProcID)
	}

	// Over the limit: the MSG is cut at a character's boundary and the structured data says so.
	l := newFakeLog("tn_a", 0)
	l.addDetail(1, `{"cmd":"`+strings.Repeat("é", 5000)+`"}`)
	big := entries(t, l)[0]
	for _, limit := range []int{480, 1000, 1001, 1002, 8192} {
		m := auditship.FormatSyslog(big, "host-1", "42", limit)
		if len(m) > limit {
			t.Errorf("limit %d: message of %d bytes", limit, len(m))
		}
		p := checkMessage(t, m, big)
		if p.Params["truncated"] != strconv.Itoa(len(big.Line)) {
			t.Errorf("limit %d: truncated=%q; want the line's length %d", limit, p.Params["truncated"], len(big.Line))
		}
		if !bytes.HasPrefix(big.Line, p.Msg) || !utf8.Valid(p.Msg) || len(m) < limit-1 {
			t.Errorf("limit %d: MSG of %d bytes (message %d) is not the line's start cut at a character, as long as fits", limit, len(p.Msg), len(m))
		}
	}
}

func e2(e auditship.Entry, kind string) auditship.Entry { e.Kind = kind; return e }

// FuzzFormatSyslog: whatever the entry holds, the message parses as RFC 5424, keeps its limit, and
// its MSG is the line or the line's start.
func FuzzFormatSyslog(f *testing.F) {
	f.Add("tn_a", "api", []byte(`{"x":"y"}`), 0)
	f.Add(`t"]\`, "da emon", []byte("\xff\xfe é"), 480)
	f.Add("", "", []byte{}, 600)
	f.Fuzz(func(t *testing.T, tenant, kind string, line []byte, limit int) {
		if limit != 0 {
			limit = 480 + (limit%2000+2000)%2000
		}
		if !utf8.ValidString(tenant) {
			return // the server's JSON is UTF-8
		}
		e := auditship.Entry{Line: line, Tenant: tenant, Seq: 7, Kind: kind, Hash: "abc", Time: time.Unix(1700000000, 123456000)}
		m := auditship.FormatSyslog(e, "h", "1", limit)
		p, err := parseSyslog(m)
		if err != nil {
			t.Fatalf("message %q: %v", m, err)
		}
		if limit > 0 && len(m) > limit && len(p.Msg) > 0 {
			t.Fatalf("message of %d bytes over the limit %d, with a MSG", len(m), limit)
		}
		if p.Params["tenant"] != tenant || p.Params["seq"] != "7" || !bytes.HasPrefix(line, p.Msg) {
			t.Fatalf("message %q does not carry the entry", m)
		}
		if _, cut := p.Params["truncated"]; !cut && !bytes.Equal(p.Msg, line) {
			t.Fatalf("MSG cut without saying so: %q", m)
		}
	})
}

// TestSyslogUDP: one datagram per entry, in order; an entry too long for a datagram arrives cut,
// and says so.
func TestSyslogUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	l := newFakeLog("tn_a", 3)
	l.addDetail(1, `{"cmd":"`+strings.Repeat("x", 20000)+`"}`)
	l.add(2)
	want := entries(t, l)
	s, err := auditship.NewSyslog(auditship.SyslogConfig{Network: "udp", Addr: pc.LocalAddr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := (&auditship.Shipper{Source: l.Source, Sink: s}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	for _, e := range want {
		_ = pc.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("entry %d: %v", e.Seq, err)
		}
		p := checkMessage(t, buf[:n], e)
		if e.Seq == 4 {
			if n > auditship.DefaultMaxUDP || p.Params["truncated"] != strconv.Itoa(len(e.Line)) || !bytes.HasPrefix(e.Line, p.Msg) {
				t.Errorf("the long entry: %d bytes, truncated=%q", n, p.Params["truncated"])
			}
		} else if !bytes.Equal(p.Msg, e.Line) {
			t.Errorf("entry %d: MSG %q; want the line", e.Seq, p.Msg)
		}
	}
}

// syslogServer is a real syslog receiver on loopback over TCP (or TLS): it reads octet-counted
// frames. With closeAfter > 0 it closes each connection after that many messages.
type syslogServer struct {
	ln         net.Listener
	closeAfter int

	mu sync.Mutex
	// msgs are the frames received, conns and closed the connections accepted and closed, errs what
	// was wrong with the frames; guarded by mu.
	msgs   [][]byte
	conns  int
	closed int
	errs   []error
}

func startSyslogServer(t *testing.T, tlsCfg *tls.Config, closeAfter int) *syslogServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	s := &syslogServer{ln: ln, closeAfter: closeAfter}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					c.Close()
					s.mu.Lock()
					s.closed++
					s.mu.Unlock()
				}()
				br := bufio.NewReader(c)
				for n := 0; s.closeAfter == 0 || n < s.closeAfter; n++ {
					m, err := readOctetCounted(br)
					s.mu.Lock()
					if err != nil {
						if !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "closed") {
							s.errs = append(s.errs, err)
						}
						s.mu.Unlock()
						return
					}
					s.msgs = append(s.msgs, m)
					s.mu.Unlock()
				}
			}()
		}
	}()
	return s
}

func (s *syslogServer) received() ([][]byte, int, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.msgs...), s.conns, append([]error(nil), s.errs...)
}

func (s *syslogServer) waitFor(t *testing.T, n int) [][]byte {
	t.Helper()
	var msgs [][]byte
	waitFor(t, strconv.Itoa(n)+" syslog messages", func() bool { msgs, _, _ = s.received(); return len(msgs) >= n })
	return msgs
}

// TestSyslogStream: over TCP and TLS, octet-counted RFC 5424 messages, one per entry; a connection
// the server closed is dialed again before the next batch, and no message is lost to it.
func TestSyslogStream(t *testing.T) {
	pool, cert := testCA(t)
	for _, network := range []string{"tcp", "tls"} {
		t.Run(network, func(t *testing.T) {
			var srvTLS *tls.Config
			if network == "tls" {
				srvTLS = &tls.Config{Certificates: []tls.Certificate{cert}}
			}
			srv := startSyslogServer(t, srvTLS, 3)
			l := newFakeLog("tn_a", 9)
			want := entries(t, l)
			s, err := auditship.NewSyslog(auditship.SyslogConfig{Network: network, Addr: srv.ln.Addr().String(), RootCAs: pool})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			for i := 0; i < 9; i += 3 {
				if err := s.Ship(ctx, want[i:i+3]); err != nil {
					t.Fatalf("batch %d: %v", i/3, err)
				}
				srv.waitFor(t, i+3)
				waitFor(t, "the server to close the connection", func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return srv.closed == i/3+1 })
			}
			msgs, conns, errs := srv.received()
			if len(errs) > 0 || conns != 3 {
				t.Errorf("server: %d connections, errors %v; want 3, none", conns, errs)
			}
			if len(msgs) != len(want) {
				t.Fatalf("received %d messages; want %d", len(msgs), len(want))
			}
			for i, e := range want {
				if p := checkMessage(t, msgs[i], e); !bytes.Equal(p.Msg, e.Line) {
					t.Errorf("message %d: MSG %q; want the line", i, p.Msg)
				}
			}
		})
	}
}

// testCA returns a CA's pool and a server certificate it signed for 127.0.0.1.
func testCA(t *testing.T) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test syslog CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &leafKey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}
}

// TestSyslogTLS: over TLS with the server's CA the messages arrive; with another CA (or the
// system's) the certificate is refused, as an error retrying does not mend.
func TestSyslogTLS(t *testing.T) {
	pool, cert := testCA(t)
	srv := startSyslogServer(t, &tls.Config{Certificates: []tls.Certificate{cert}}, 0)
	l := newFakeLog("tn_a", 5)
	s, err := auditship.NewSyslog(auditship.SyslogConfig{Network: "tls", Addr: srv.ln.Addr().String(), RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := (&auditship.Shipper{Source: l.Source, Sink: s}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	msgs := srv.waitFor(t, 5)
	for i, e := range entries(t, l) {
		checkMessage(t, msgs[i], e)
	}

	other, _ := testCA(t)
	for name, roots := range map[string]*x509.CertPool{"another CA": other, "the system's CAs": nil} {
		s, err := auditship.NewSyslog(auditship.SyslogConfig{Network: "tls", Addr: srv.ln.Addr().String(), RootCAs: roots})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Ship(context.Background(), entries(t, l)[:1])
		if !auditship.IsPermanent(err) || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: Ship = %v; want a permanent certificate error", name, err)
		}
	}
	if msgs, _, _ := srv.received(); len(msgs) != 5 {
		t.Errorf("the server received %d messages; want only the 5 over the trusted connection", len(msgs))
	}
}

func TestNewSyslogRefuses(t *testing.T) {
	for _, c := range []auditship.SyslogConfig{
		{Network: "quic", Addr: "127.0.0.1:514"},
		{Network: "udp", Addr: "127.0.0.1"},
		{Network: "udp", Addr: ":514"},
		{Network: "tcp", Addr: "127.0.0.1:99999"},
		{Network: "udp", Addr: "127.0.0.1:514", MaxUDP: 100},
	} {
		if _, err := auditship.NewSyslog(c); err == nil {
			t.Errorf("NewSyslog(%+v) = nil error", c)
		}
	}
}
