package sni

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"testing"
)

// FuzzParseClientHello feeds arbitrary bytes to ParseClientHello. It must not panic; a name it
// returns must be a valid lowercase host name; it may ask for more data only below the cap; and Peek
// over the same bytes must agree with it. The committed corpus in testdata/fuzz/FuzzParseClientHello
// holds real ClientHellos from crypto/tls (whole, fragmented and truncated) and malformed ones.
func FuzzParseClientHello(f *testing.F) {
	f.Add(captureClientHello(f, &tls.Config{ServerName: "api.example.com"}))
	f.Add(refragment(captureClientHello(f, &tls.Config{ServerName: "a.b", MaxVersion: tls.VersionTLS12}), 64))
	f.Add(buildHello(helloOpts{extensions: sniExt(0, "example.com")}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := ParseClientHello(b)
		switch {
		case err == nil:
			if name != "" {
				if h, ok := hostname([]byte(name)); !ok || h != name {
					t.Fatalf("returned invalid or non-lowercase name %q", name)
				}
			}
		case errors.Is(err, ErrNeedMore):
			if len(b) >= MaxClientHelloLen {
				t.Fatalf("ErrNeedMore for %d bytes", len(b))
			}
			if name != "" {
				t.Fatalf("name %q with ErrNeedMore", name)
			}
			return // Peek would hit EOF
		default:
			if name != "" {
				t.Fatalf("name %q with error %v", name, err)
			}
		}
		pname, perr := Peek(bufio.NewReaderSize(bytes.NewReader(b), MaxClientHelloLen))
		if pname != name || (perr == nil) != (err == nil) {
			t.Fatalf("Peek = %q, %v; ParseClientHello = %q, %v", pname, perr, name, err)
		}
	})
}
