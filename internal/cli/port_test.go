package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func TestParsePortMapping(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want portMapping
		bad  string // a part of the error
	}{
		{in: "8080", want: portMapping{Local: 8080, Remote: 8080}},
		{in: ":8080", want: portMapping{Local: 0, Remote: 8080}},
		{in: "0:8080", want: portMapping{Local: 0, Remote: 8080}},
		{in: "9000:8080", want: portMapping{Local: 9000, Remote: 8080}},
		{in: "65535:1", want: portMapping{Local: 65535, Remote: 1}},
		{in: "", bad: "want [LOCAL:]REMOTE"},
		{in: "0", bad: "want [LOCAL:]REMOTE"},
		{in: "x", bad: "want [LOCAL:]REMOTE"},
		{in: "65536", bad: "want [LOCAL:]REMOTE"},
		{in: "9000:", bad: `remote port "" is not in 1..65535`},
		{in: "9000:0", bad: `remote port "0" is not in 1..65535`},
		{in: "9000:70000", bad: `remote port "70000" is not in 1..65535`},
		{in: "9000:+80", bad: `remote port "+80"`},
		{in: "1:2:3", bad: `remote port "2:3"`},
		{in: "x:8080", bad: `local port "x" is not in 0..65535`},
		{in: "-1:8080", bad: `local port "-1"`},
		{in: "65536:8080", bad: `local port "65536"`},
		{in: " 80:8080", bad: `local port " 80"`},
	} {
		got, err := parsePortMapping(tc.in)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("parsePortMapping(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.bad)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parsePortMapping(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParsePortMappings(t *testing.T) {
	got, err := parsePortMappings([]string{"8080", ":8080", "0:9090", "9000:8080"})
	if err != nil {
		t.Fatal(err)
	}
	want := []portMapping{{8080, 8080}, {0, 8080}, {0, 9090}, {9000, 8080}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parsePortMappings (-want +got):\n%s", diff)
	}
	if _, err := parsePortMappings([]string{"8080", "8080:3000"}); err == nil || !strings.Contains(err.Error(), "local port 8080 is given twice") {
		t.Errorf("a local port twice: err = %v; want given twice", err)
	}
}

func TestSetPorts(t *testing.T) {
	for _, tc := range []struct {
		have, ports []int
		add         bool
		want        []int
	}{
		{have: nil, ports: []int{8080, 80, 8080}, add: true, want: []int{80, 8080}},
		{have: []int{3000, 80}, ports: []int{80, 443}, add: true, want: []int{80, 443, 3000}},
		{have: []int{80, 443, 3000}, ports: []int{443, 9999}, add: false, want: []int{80, 3000}},
		{have: []int{80}, ports: []int{80}, add: false, want: []int{}},
		{have: nil, ports: []int{80}, add: false, want: nil},
	} {
		have := append([]int(nil), tc.have...)
		got := setPorts(have, tc.ports, tc.add)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("setPorts(%v, %v, %v) (-want +got):\n%s", tc.have, tc.ports, tc.add, diff)
		}
		if diff := cmp.Diff(tc.have, have); diff != "" {
			t.Errorf("setPorts changed its input (-was +now):\n%s", diff)
		}
	}
}

// fakeTunnels opens tunnels to an in-memory sandbox: port 8080 answers each line with "8080 <line>",
// port 9090 closes the connection after its greeting, and every other port is closed.
type fakeTunnels struct {
	mu sync.Mutex
	// open counts the tunnels not closed yet; guarded by mu.
	open int
	// wg counts the fake servers' goroutines.
	wg sync.WaitGroup
}

var errPortClosed = errors.New("nothing listens on that port")

func (f *fakeTunnels) tunnel(ctx context.Context, port int) (net.Conn, error) {
	if port != 8080 && port != 9090 {
		return nil, fmt.Errorf("tunnel to port %d: %w", port, errPortClosed)
	}
	here, there := net.Pipe()
	f.mu.Lock()
	f.open++
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer func() {
			there.Close()
			f.mu.Lock()
			f.open--
			f.mu.Unlock()
		}()
		if port == 9090 {
			_, _ = io.WriteString(there, "bye\n")
			return
		}
		sc := bufio.NewScanner(there)
		for sc.Scan() {
			if _, err := fmt.Fprintf(there, "%d %s\n", port, sc.Text()); err != nil {
				return
			}
		}
	}()
	return here, nil
}

func (f *fakeTunnels) openCount() int { f.mu.Lock(); defer f.mu.Unlock(); return f.open }

// waitFor polls cond until it holds or a few seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// readLine reads one line from c with a deadline; "" and the error at EOF.
func readLine(t *testing.T, r *bufio.Reader, c net.Conn) (string, error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	s, err := r.ReadString('\n')
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("read from %s: %v", c.RemoteAddr(), err)
	}
	return s, err
}

func TestPortForwarder(t *testing.T) {
	ls, err := listenPorts("127.0.0.1", []portMapping{{0, 8080}, {0, 9090}, {0, 5432}})
	if err != nil {
		t.Fatal(err)
	}
	var ft fakeTunnels
	var mu sync.Mutex
	var reports []string
	f := &portForwarder{Tunnel: ft.tunnel, OnError: func(l portListener, err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, fmt.Sprintf("%d: %v", l.Remote, err))
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan struct{})
	go func() {
		defer close(served)
		f.Serve(ctx, ls)
	}()
	dial := func(l portListener) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}

	// Bytes flow both ways, on two connections at once.
	c1, r1 := dial(ls[0])
	c2, r2 := dial(ls[0])
	for i, c := range []net.Conn{c1, c2, c1} {
		r := map[net.Conn]*bufio.Reader{c1: r1, c2: r2}[c]
		if _, err := fmt.Fprintf(c, "hello %d\n", i); err != nil {
			t.Fatal(err)
		}
		if got, err := readLine(t, r, c); err != nil || got != fmt.Sprintf("8080 hello %d\n", i) {
			t.Errorf("echo %d = %q, %v; want %q", i, got, err, fmt.Sprintf("8080 hello %d\n", i))
		}
	}

	// The sandbox's side ends: the local connection ends too.
	c3, r3 := dial(ls[1])
	if got, err := readLine(t, r3, c3); got != "bye\n" || err != nil {
		t.Errorf("9090 = %q, %v; want bye", got, err)
	}
	if got, err := readLine(t, r3, c3); err != io.EOF {
		t.Errorf("after bye: %q, %v; want EOF", got, err)
	}

	// A tunnel that fails closes its connection only, and is reported.
	c4, r4 := dial(ls[2])
	if got, err := readLine(t, r4, c4); err != io.EOF {
		t.Errorf("port 5432 = %q, %v; want EOF", got, err)
	}
	waitFor(t, "the report of the failed tunnel", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports) == 1 })
	mu.Lock()
	if want := "5432: tunnel to port 5432: " + errPortClosed.Error(); reports[0] != want {
		t.Errorf("report = %q; want %q", reports[0], want)
	}
	mu.Unlock()
	if _, err := fmt.Fprintf(c1, "still\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := readLine(t, r1, c1); err != nil || got != "8080 still\n" {
		t.Errorf("after a failed tunnel: %q, %v; want 8080 still", got, err)
	}

	// The local side ends: the tunnel is closed.
	c2.Close()
	waitFor(t, "the tunnel of a closed connection to close", func() bool { return ft.openCount() == 1 })

	// Cancel: Serve closes the listeners and the connections, and returns.
	cancel()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if got, err := readLine(t, r1, c1); err != io.EOF {
		t.Errorf("after cancel: %q, %v; want EOF", got, err)
	}
	ft.wg.Wait()
	if n := ft.openCount(); n != 0 {
		t.Errorf("%d tunnels still open after Serve returned", n)
	}
	for _, l := range ls {
		if c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Serve returned", l.Addr())
		}
	}
	mu.Lock()
	if len(reports) != 1 {
		t.Errorf("reports = %q; want the failed tunnel's only", reports)
	}
	mu.Unlock()
}

func TestListenPortsClosesOnError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := localPort(free)
	free.Close()
	if _, err := listenPorts("127.0.0.1", []portMapping{{freePort, 1}, {localPort(busy), 2}}); err == nil {
		t.Fatal("listenPorts on a busy port: no error")
	}
	// The first listener was closed again: its port can be had.
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", freePort))
	if err != nil {
		t.Fatalf("port %d still held after a failed listenPorts: %v", freePort, err)
	}
	l.Close()
}

// portServer is a fake API for the port commands: sbA's ports, its network policy, access tokens and
// a tunnel to an echo server on port 8080.
type portServer struct {
	mu sync.Mutex
	// policy is sbA's network policy; puts counts its replacements; guarded by mu.
	policy airlock.NetworkPolicy
	puts   int
	// tokenReq is the last access token request; guarded by mu.
	tokenReq airlock.CreateAccessTokenRequest
}

func newPortServer(t *testing.T) (*portServer, string) {
	ps := &portServer{policy: airlock.NetworkPolicy{Default: "deny", PublicPorts: []int{3000}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/ports", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, airlock.PortList{Ports: []airlock.Port{
			{Port: 3000, Address: "0.0.0.0", Reachable: true, Public: true, URLs: &airlock.PortURLs{Path: "http://api/v1/sandboxes/" + sbA + "/ports/3000/"}},
			{Port: 5432, Address: "127.0.0.1", Reachable: false},
		}})
	})
	mux.HandleFunc("GET /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, airlock.Session{ID: r.PathValue("id"), State: airlock.StateRunning, SandboxID: sbA})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/network", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != sbA {
			writeErr(w, 404, "not_found", "sandbox "+r.PathValue("id")+" not found")
			return
		}
		ps.mu.Lock()
		defer ps.mu.Unlock()
		writeJSON(w, 200, ps.policy)
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/network", func(w http.ResponseWriter, r *http.Request) {
		var p airlock.NetworkPolicy
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			writeErr(w, 400, "invalid_argument", err.Error())
			return
		}
		ps.mu.Lock()
		defer ps.mu.Unlock()
		ps.policy = p
		ps.puts++
		writeJSON(w, 200, p)
	})
	mux.HandleFunc("POST /v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		var req airlock.CreateAccessTokenRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, 400, "invalid_argument", err.Error())
			return
		}
		ps.mu.Lock()
		ps.tokenReq = req
		ps.mu.Unlock()
		q := "?airlock_token=at_secret"
		writeJSON(w, 201, airlock.NewAccessToken{
			AccessToken: airlock.AccessToken{ID: "tok_1", SandboxID: req.SandboxID, SessionID: req.SessionID, Scopes: req.Scopes, Port: req.Port,
				ExpiresAt: time.Now().Add(time.Hour)},
			Token: "at_secret",
			URLs:  &airlock.PortURLs{Path: fmt.Sprintf("http://api/v1/x/%d/%s", req.Port, q), Host: fmt.Sprintf("http://%d-x.airlock.localhost/%s", req.Port, q)},
		})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/tunnels/{port}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("port") != "8080" {
			writeErr(w, 503, "port_closed", "nothing listens on port "+r.PathValue("port"))
			return
		}
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"airlock-tcp"}})
		if err != nil {
			return
		}
		nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
		defer nc.Close()
		_, _ = io.Copy(nc, nc)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return ps, srv.URL
}

func TestPortLs(t *testing.T) {
	_, url := newPortServer(t)
	code, out, errOut := run(t, url, "", "port", "ls", sbA)
	if code != 0 {
		t.Fatalf("port ls: exit %d, %s", code, errOut)
	}
	want := `PORT   ADDRESS     REACHABLE   PUBLIC   URL
3000   0.0.0.0     yes         yes      http://api/v1/sandboxes/` + sbA + `/ports/3000/
5432   127.0.0.1   no          no       -
`
	if out != want {
		t.Errorf("port ls:\n%s\nwant:\n%s", out, want)
	}
	code, out, _ = run(t, url, "", "--json", "port", "ls", sbA)
	var l airlock.PortList
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || len(l.Ports) != 2 {
		t.Errorf("port ls --json: exit %d, %v, %s", code, err, out)
	}
}

func TestPortURL(t *testing.T) {
	ps, url := newPortServer(t)
	code, out, errOut := run(t, url, "", "port", "url", sbA, "8080", "--ttl", "2h", "--name", "review")
	if code != 0 {
		t.Fatalf("port url: exit %d, %s", code, errOut)
	}
	want := "http://8080-x.airlock.localhost/?airlock_token=at_secret\nhttp://api/v1/x/8080/?airlock_token=at_secret\n"
	if out != want {
		t.Errorf("port url = %q; want %q", out, want)
	}
	if !strings.Contains(errOut, "tok_1") || !strings.Contains(errOut, "airlock token revoke tok_1") {
		t.Errorf("port url's note = %q; want the token's ID and how to revoke it", errOut)
	}
	ps.mu.Lock()
	got := ps.tokenReq
	ps.mu.Unlock()
	wantReq := airlock.CreateAccessTokenRequest{Name: "review", SandboxID: sbA, Scopes: []string{"ports"}, TTLSeconds: 7200, Port: 8080}
	if diff := cmp.Diff(wantReq, got); diff != "" {
		t.Errorf("token request (-want +got):\n%s", diff)
	}

	code, out, _ = run(t, url, "", "--json", "port", "url", "se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "3000")
	var tok airlock.NewAccessToken
	if err := json.Unmarshal([]byte(out), &tok); code != 0 || err != nil || tok.URLs == nil || tok.SessionID == "" || tok.Port != 3000 {
		t.Errorf("port url --json of a session: exit %d, %v, %s", code, err, out)
	}

	for _, args := range [][]string{{sbA, "0"}, {sbA, "x"}, {"nope", "80"}, {sbA, "80", "--ttl", "0s"}} {
		if code, _, errOut := run(t, url, "", append([]string{"port", "url"}, args...)...); code != 1 || errOut == "" {
			t.Errorf("port url %q: exit %d, %q; want an error", args, code, errOut)
		}
	}
}

func TestPortPublicPrivate(t *testing.T) {
	ps, url := newPortServer(t)
	for _, tc := range []struct {
		args []string
		out  string
		puts int
	}{
		{[]string{"public", sbA, "8080", "80", "8080"}, "Public ports of " + sbA + ": 80 3000 8080\n", 1},
		{[]string{"public", sbA, "80"}, "Public ports of " + sbA + ": 80 3000 8080\n", 1}, // no change, no PUT
		{[]string{"private", "se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "3000", "9"}, "Public ports of " + sbA + ": 80 8080\n", 2},
		{[]string{"private", sbA, "80", "8080"}, "Public ports of " + sbA + ": none\n", 3},
	} {
		code, out, errOut := run(t, url, "", append([]string{"port"}, tc.args...)...)
		if code != 0 || out != tc.out {
			t.Errorf("port %q: exit %d, %q, %s; want %q", tc.args, code, out, errOut, tc.out)
		}
		ps.mu.Lock()
		if ps.puts != tc.puts {
			t.Errorf("after port %q: %d PUTs; want %d", tc.args, ps.puts, tc.puts)
		}
		ps.mu.Unlock()
	}
	ps.mu.Lock()
	if ps.policy.Default != "deny" {
		t.Errorf("the rest of the policy changed: %+v", ps.policy)
	}
	ps.mu.Unlock()
	if code, _, errOut := run(t, url, "", "port", "public", sbA, "65536"); code != 1 || !strings.Contains(errOut, "1..65535") {
		t.Errorf("port public 65536: exit %d, %q", code, errOut)
	}
}

func TestPortForwardCmd(t *testing.T) {
	_, url := newPortServer(t)
	outR, outW := io.Pipe()
	var errOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--url", url, "--api-key", "k3y", "port-forward", sbA, ":8080", "0:5432"},
			Streams{In: strings.NewReader(""), Out: outW, Err: &errOut})
		outW.Close()
	}()
	sc := bufio.NewScanner(outR)
	var addrs []string
	for i := 0; i < 2 && sc.Scan(); i++ {
		addr, remote, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "Forwarding from "), " -> ")
		if !ok || remote != []string{"8080", "5432"}[i] {
			t.Fatalf("line %d = %q; want Forwarding from ADDRESS -> REMOTE", i, sc.Text())
		}
		addrs = append(addrs, addr)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	if len(addrs) != 2 {
		t.Fatalf("port-forward printed %q; want two listeners", addrs)
	}

	c, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := readLine(t, r, c); err != nil || got != "ping\n" {
		t.Errorf("through the tunnel: %q, %v; want ping", got, err)
	}

	closed, err := net.Dial("tcp", addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	if got, err := readLine(t, bufio.NewReader(closed), closed); err != io.EOF {
		t.Errorf("a closed port: %q, %v; want EOF", got, err)
	}
	_, lport, _ := net.SplitHostPort(addrs[1])
	waitFor(t, "the failed tunnel's report", func() bool { return strings.Contains(errOut.String(), "nothing listens on port 5432") })
	if got := errOut.String(); !strings.HasPrefix(got, "airlock: handling connection for "+lport+": ") {
		t.Errorf("stderr = %q; want airlock: handling connection for %s: …", got, lport)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("port-forward exited %d after cancel; want 0 (%s)", code, errOut.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("port-forward did not end after cancel")
	}
	if got, err := readLine(t, r, c); err != io.EOF {
		t.Errorf("after the end: %q, %v; want EOF", got, err)
	}
}

// syncBuffer is a strings.Builder that goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder // guarded by mu
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
