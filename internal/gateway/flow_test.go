package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlockrun/airlock/internal/gateway/policy"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	d, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-acc
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { d.Close(); s.Close() })
	return d.(*net.TCPConn), s.(*net.TCPConn)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// TestSpliceCounts: splice relays everything both ways, bytes the proxy buffered first, and counts
// exactly what it relayed.
func TestSpliceCounts(t *testing.T) {
	client, c := tcpPair(t)  // the sandbox's end and the proxy's
	up, server := tcpPair(t) // the proxy's upstream end and the server's
	head := []byte("HEAD-BYTES")
	toUp := randomBytes(1 << 20)
	toClient := randomBytes(3 << 19)

	// The client's first bytes are already in the proxy's reader, as after sniffing.
	if _, err := client.Write(head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if _, err := br.Peek(len(head)); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var serverGot, clientGot []byte
	wg.Add(3)
	go func() { // the server: read all, answer, close
		defer wg.Done()
		go func() { _, _ = server.Write(toClient); _ = server.CloseWrite() }()
		serverGot, _ = io.ReadAll(server)
	}()
	go func() { // the client: send, half-close, read all
		defer wg.Done()
		_, _ = client.Write(toUp)
		_ = client.CloseWrite()
	}()
	go func() {
		defer wg.Done()
		clientGot, _ = io.ReadAll(client)
	}()
	sent, received := splice(c, br, up, nil)
	wg.Wait()
	want := append(append([]byte{}, head...), toUp...)
	if !bytes.Equal(serverGot, want) || !bytes.Equal(clientGot, toClient) {
		t.Fatalf("relayed %d bytes up (want %d, equal %v), %d down (want %d, equal %v)",
			len(serverGot), len(want), bytes.Equal(serverGot, want), len(clientGot), len(toClient), bytes.Equal(clientGot, toClient))
	}
	if sent != int64(len(want)) || received != int64(len(toClient)) {
		t.Errorf("splice counted %d sent, %d received; want %d, %d", sent, received, len(want), len(toClient))
	}
}

// flowRecorder is a FlowSink that keeps what it records.
type flowRecorder struct {
	mu sync.Mutex
	// flows is guarded by mu.
	flows []Flow
}

func (r *flowRecorder) Record(f Flow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flows = append(r.flows, f)
}

func (r *flowRecorder) all() []Flow {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Flow(nil), r.flows...)
}

// countingConn counts the bytes read from a connection.
type countingConn struct {
	net.Conn
	mu sync.Mutex
	// n is guarded by mu.
	n int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.n += int64(n)
	c.mu.Unlock()
	return n, err
}

func (c *countingConn) count() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// TestProxyHTTPFlows: one flow per request, allowed or refused, with its method, its path without the
// query, its rule, and exactly the bytes relayed each way; a protocol switch relays what the upstream
// sent right after its response head, and counts it.
func TestProxyHTTPFlows(t *testing.T) {
	// The upstream: counts what it reads; /ws switches protocols and speaks first.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var upConn *countingConn
	var upWritten int64
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		raw, err := ln.Accept()
		if err != nil {
			return
		}
		defer raw.Close()
		upConn = &countingConn{Conn: raw}
		cw := &countingWriter{w: raw}
		r := bufio.NewReader(upConn)
		for {
			req, err := http.ReadRequest(r)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if req.URL.Path == "/ws" {
				// The head and the first frame in one write: the proxy's reader gets both.
				_, _ = io.WriteString(cw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nSERVER-FIRST")
				buf := make([]byte, 5)
				if _, err := io.ReadFull(r, buf); err == nil {
					_, _ = cw.Write(append([]byte("echo:"), buf...))
				}
				upWritten = cw.n
				return
			}
			body := strings.Repeat("b", 1000)
			_, _ = io.WriteString(cw, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"+body)
		}
	}()
	upAddr := netip.MustParseAddrPort(ln.Addr().String())

	// The upstream is on loopback, which the operator opens here.
	guards, err := policy.NewGuards([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.CompileWithOptions(policy.Policy{Rules: []policy.Rule{
		{Name: "read", Action: policy.ActionAllow, Host: "up.test", CIDRs: []string{"127.0.0.1/32"}, Methods: []string{"GET"}},
	}}, policy.CompileOptions{Guards: guards})
	if err != nil {
		t.Fatal(err)
	}
	rec := &flowRecorder{}
	g := &Gateway{cfg: Config{Flows: rec, DialTimeout: 5 * time.Second}, log: slog.New(slog.DiscardHandler)}
	s := &sandbox{id: "sb_x", tenant: "tn_x", names: map[netip.Addr]string{}, conns: map[uint64]context.CancelFunc{}}
	s.matcher.Store(m)

	client, c := tcpPair(t)
	// A relay that loses bytes shows as a read that never ends: fail instead.
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	// Three requests on one connection: two allowed GETs (one with a query), then a switch to another
	// protocol; then a refused POST on a second connection.
	reqs := "GET /a?secret=1 HTTP/1.1\r\nHost: up.test\r\n\r\n" +
		"GET /b HTTP/1.1\r\nHost: up.test\r\nX-Pad: " + strings.Repeat("p", 300) + "\r\n\r\n" +
		"GET /ws HTTP/1.1\r\nHost: up.test\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n"
	if _, err := io.WriteString(client, reqs); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(c, 32<<10)
	first, err := http.ReadRequest(br)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	base := Flow{Start: start, SandboxID: s.id, TenantID: s.tenant, SrcPort: 1234, DstIP: upAddr.Addr(), DstPort: upAddr.Port(), Host: "up.test", Protocol: ProtoHTTP}
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.proxyHTTP(context.Background(), s, c, br, first, base, "up.test", upAddr.Addr(), upAddr.Port(), func(ctx context.Context) (halfConn, error) {
			return g.dial(ctx, upAddr.Addr(), upAddr.Port())
		}, false)
	}()
	// The client reads the two responses and the switch's head and first frame, then speaks.
	cr := &countingConn{Conn: client}
	crr := bufio.NewReader(cr)
	for range 2 {
		resp, err := http.ReadResponse(crr, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	resp, err := http.ReadResponse(crr, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("third response: %v, %v; want 101", resp, err)
	}
	buf := make([]byte, len("SERVER-FIRST"))
	if _, err := io.ReadFull(crr, buf); err != nil || string(buf) != "SERVER-FIRST" {
		t.Fatalf("after the switch the client read %q, %v; want SERVER-FIRST (sent with the 101 head)", buf, err)
	}
	_, _ = io.WriteString(client, "hello")
	echo := make([]byte, 10)
	if _, err := io.ReadFull(crr, echo); err != nil || string(echo) != "echo:hello" {
		t.Fatalf("echo %q, %v", echo, err)
	}
	_ = client.CloseWrite()
	_, _ = io.Copy(io.Discard, crr)
	<-done
	<-upDone

	// A refused POST on another connection: a 403, nothing upstream.
	client2, c2 := tcpPair(t)
	_, _ = io.WriteString(client2, "POST /upload?x=1 HTTP/1.1\r\nHost: up.test\r\nContent-Length: 0\r\n\r\n")
	br2 := bufio.NewReader(c2)
	post, err := http.ReadRequest(br2)
	if err != nil {
		t.Fatal(err)
	}
	g.proxyHTTP(context.Background(), s, c2, br2, post, base, "up.test", upAddr.Addr(), upAddr.Port(), func(ctx context.Context) (halfConn, error) {
		return g.dial(ctx, upAddr.Addr(), upAddr.Port())
	}, false)
	c2.Close()
	if resp, err := http.ReadResponse(bufio.NewReader(client2), nil); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("refused POST: %v, %v; want a 403", resp, err)
	}

	got := rec.all()
	want := []Flow{
		{Method: "GET", Path: "/a", Decision: DecisionAllow, Rule: "read"},
		{Method: "GET", Path: "/b", Decision: DecisionAllow, Rule: "read"},
		{Method: "GET", Path: "/ws", Decision: DecisionAllow, Rule: "read"},
		{Method: "POST", Path: "/upload", Decision: DecisionDeny, Rule: "guard:loopback"}, // no allow rule lifts the guard for a POST
	}
	for i := range want {
		want[i].SandboxID, want[i].TenantID, want[i].SrcPort, want[i].Host, want[i].Protocol = s.id, s.tenant, 1234, "up.test", ProtoHTTP
		want[i].DstIP, want[i].DstPort = upAddr.Addr(), upAddr.Port()
	}
	opts := cmp.Options{
		cmpopts.IgnoreFields(Flow{}, "Start", "End", "Reason", "BytesSent", "BytesReceived"),
		cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Fatalf("flows (-want +got):\n%s", diff)
	}
	var sent, received int64
	for i, f := range got {
		if f.End.Before(f.Start) || f.Start.Before(start) {
			t.Errorf("flow %d: start %v, end %v", i, f.Start, f.End)
		}
		sent += f.BytesSent
		received += f.BytesReceived
		if i < 3 && (f.BytesSent == 0 || f.BytesReceived == 0) {
			t.Errorf("flow %d (%s %s): %d sent, %d received; want bytes both ways", i, f.Method, f.Path, f.BytesSent, f.BytesReceived)
		}
	}
	if got[3].BytesSent != 0 || got[3].BytesReceived != 0 {
		t.Errorf("refused POST counted %d sent, %d received; want 0 (the 403 is the gateway's)", got[3].BytesSent, got[3].BytesReceived)
	}
	// Every byte the upstream read, and every byte it wrote (which the client read), is counted once.
	if sent != upConn.count() || received != upWritten || received != cr.count() {
		t.Errorf("flows count %d sent, %d received; the upstream read %d and wrote %d, the client read %d", sent, received, upConn.count(), upWritten, cr.count())
	}
}

func TestHTTPHeadDoesNotWaitForOtherProtocols(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"GET / HTTP/1.1\r\n", "GET "},
		{"OPTIONS * HTTP/1.1\r\n", "OPTIONS "},
		{"hi", "h"},          // no method starts with "h": decided on the first byte
		{"PI", "PI"},         // "P" could start PUT, POST or PATCH; "PI" cannot
		{"\x00\x01", "\x00"}, // binary
		{"PO", "PO"},         // could still become POST: waits (bounded by the sniff deadline in the proxy)
	} {
		client, server := net.Pipe()
		go func() {
			client.Write([]byte(tc.in))
			// Then nothing more: a reader that waits for more bytes than could matter would block.
		}()
		br := bufio.NewReader(server)
		done := make(chan []byte, 1)
		go func() { done <- httpHead(br) }()
		select {
		case got := <-done:
			if string(got) != tc.want {
				t.Errorf("httpHead(%q) = %q; want %q", tc.in, got, tc.want)
			}
		case <-time.After(2 * time.Second):
			if tc.want != "PO" {
				t.Errorf("httpHead(%q) blocked", tc.in)
			}
		}
		client.Close()
		server.Close()
	}
}

// TestAdmitNeverExceedsTheLimit: many connections admitted at once never take more slots than
// limits.max_connections (deciding and taking a slot are one step), and a freed slot is taken again.
func TestAdmitNeverExceedsTheLimit(t *testing.T) {
	s := &sandbox{id: "sb_x", tenant: "tn_x", names: map[netip.Addr]string{}, conns: map[uint64]context.CancelFunc{}}
	lim := policy.Limits{MaxConnections: 16, ConnectionsPerSecond: policy.MaxConnectionsPerSecond}
	const tries = 400
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		forgets []func()
		refused int
	)
	start := make(chan struct{})
	for range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			forget, why, _, ok := s.admit(lim, time.Now(), func() {})
			mu.Lock()
			defer mu.Unlock()
			if ok {
				forgets = append(forgets, forget)
			} else if why != "" {
				refused++
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(forgets) != lim.MaxConnections || refused != tries-lim.MaxConnections {
		t.Fatalf("%d admitted, %d refused of %d at once; want exactly %d admitted (limits.max_connections)", len(forgets), refused, tries, lim.MaxConnections)
	}
	forgets[0]()
	if _, why, _, ok := s.admit(lim, time.Now(), func() {}); !ok {
		t.Fatalf("after one connection ended: refused (%s); want its slot free", why)
	}
	if _, why, _, ok := s.admit(lim, time.Now(), func() {}); ok || !strings.Contains(why, "limits.max_connections") {
		t.Fatalf("past the limit again: ok=%v %q; want refused naming limits.max_connections", ok, why)
	}
}
