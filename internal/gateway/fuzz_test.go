package gateway

import (
	"bufio"
	"bytes"
	"net/netip"
	"testing"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/gateway/policy"
)

// FuzzHTTPRequestHead runs the proxy's reading of a plain-HTTP request from a sandbox over arbitrary
// bytes: the sniff of the first bytes, the request head, the host, and what a flow record keeps. It must
// never panic, and what it keeps must stay within its bounds.
func FuzzHTTPRequestHead(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"POST /v1/files?x=1 HTTP/1.1\r\nHost: API.Example.Test.:8080\r\nContent-Length: 0\r\n\r\n",
		"GET /v1/%2e%2e/files HTTP/1.1\r\nHost: a\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
		"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n",
		"GET http://other.test/abs HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"PO",
		"\x16\x03\x01\x00\x05hello",
		"SSH-2.0-OpenSSH_9.0\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReader(bytes.NewReader(b))
		head := httpHead(br)
		if len(head) > maxMethodLen {
			t.Fatalf("httpHead returned %d bytes; at most %d", len(head), maxMethodLen)
		}
		if !bytes.HasPrefix(b, head) {
			t.Fatalf("httpHead returned %q, not a prefix of the input", head)
		}
		if !isHTTP(head) {
			return
		}
		host, req := readHTTPRequest(br)
		if req == nil {
			return
		}
		method, path := requestLine(req)
		// Clipped, then made valid UTF-8 (each invalid byte may become a 3-byte replacement).
		if !utf8.ValidString(method) || !utf8.ValidString(path) || len(method) > 3*maxFlowMethod || len(path) > 3*maxFlowPath {
			t.Fatalf("requestLine kept %q and %q", method, path)
		}
		// The policy's view of the same request must not panic either.
		m, err := policy.Compile(policy.Policy{Rules: []policy.Rule{{Action: "allow", Host: "api.example.test", Methods: []string{"GET"}, PathPrefix: "/v1"}}})
		if err != nil {
			t.Fatal(err)
		}
		_ = m.Request(policy.Conn{Host: host, IP: netip.MustParseAddr("203.0.113.2"), Port: 80}, req.Method, req.URL.EscapedPath())
	})
}
