package sni

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// captureClientHello runs a crypto/tls client over a net.Pipe and returns the first TLS record it
// writes: its ClientHello.
func captureClientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tls.Client(client, cfg).Handshake() // fails once the server side closes
	}()
	server.SetDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, recordHeaderLen)
	if _, err := io.ReadFull(server, hdr); err != nil {
		t.Fatalf("read record header: %v", err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(server, body); err != nil {
		t.Fatalf("read record body: %v", err)
	}
	server.Close()
	client.Close()
	<-done
	return append(hdr, body...)
}

// refragment splits the handshake payload of the single record rec into records of at most size
// bytes each.
func refragment(rec []byte, size int) []byte {
	payload := rec[recordHeaderLen:]
	var out []byte
	for len(payload) > 0 {
		n := min(size, len(payload))
		out = append(out, recordTypeHandshake, rec[1], rec[2], byte(n>>8), byte(n))
		out = append(out, payload[:n]...)
		payload = payload[n:]
	}
	return out
}

func TestParseRealClientHello(t *testing.T) {
	tests := []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"tls13", &tls.Config{ServerName: "api.example.com"}, "api.example.com"},
		{"tls12 only", &tls.Config{ServerName: "api.example.com", MaxVersion: tls.VersionTLS12}, "api.example.com"},
		{"tls10 only", &tls.Config{ServerName: "old.example.com", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS10}, "old.example.com"},
		{"mixed case", &tls.Config{ServerName: "API.Example.COM"}, "api.example.com"},
		{"trailing dot", &tls.Config{ServerName: "api.example.com."}, "api.example.com"}, // crypto/tls strips it
		{"no server name", &tls.Config{InsecureSkipVerify: true}, ""},
		{"ip address", &tls.Config{ServerName: "10.0.0.1"}, ""}, // crypto/tls sends no SNI for IPs
		{"alpn and session", &tls.Config{ServerName: "x.y.z", NextProtos: []string{"h2", "http/1.1"}, ClientSessionCache: tls.NewLRUClientSessionCache(1)}, "x.y.z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hello := captureClientHello(t, tt.cfg)
			got, err := ParseClientHello(hello)
			if err != nil || got != tt.want {
				t.Fatalf("ParseClientHello = %q, %v; want %q, nil", got, err, tt.want)
			}
			// Bytes after the ClientHello are not its business.
			if got, err := ParseClientHello(append(bytes.Clone(hello), 0x17, 3, 3, 0, 1, 0)); err != nil || got != tt.want {
				t.Errorf("with trailing record: %q, %v; want %q, nil", got, err, tt.want)
			}
			// Every proper prefix asks for more.
			for i := range len(hello) {
				if _, err := ParseClientHello(hello[:i]); !errors.Is(err, ErrNeedMore) {
					t.Fatalf("ParseClientHello(hello[:%d]) error = %v; want ErrNeedMore", i, err)
				}
			}
			// The same ClientHello fragmented into many records.
			for _, size := range []int{1, 3, 7, 100, 512} {
				frag := refragment(hello, size)
				if len(frag) > MaxClientHelloLen {
					if _, err := ParseClientHello(frag); !errors.Is(err, errdefs.ErrTooLarge) {
						t.Errorf("fragments of %d: error = %v; want ErrTooLarge", size, err)
					}
					continue
				}
				if got, err := ParseClientHello(frag); err != nil || got != tt.want {
					t.Errorf("fragments of %d: %q, %v; want %q, nil", size, got, err, tt.want)
				}
				for _, i := range []int{0, 4, 5, 6, len(frag) / 2, len(frag) - 1} {
					if _, err := ParseClientHello(frag[:i]); !errors.Is(err, ErrNeedMore) {
						t.Errorf("fragments of %d, prefix %d: error = %v; want ErrNeedMore", size, i, err)
					}
				}
			}
		})
	}
}

func TestPeek(t *testing.T) {
	hello := captureClientHello(t, &tls.Config{ServerName: "peek.example.com"})
	for _, in := range []struct {
		name string
		data []byte
	}{
		{"one record", hello},
		{"fragmented", refragment(hello, 50)},
	} {
		t.Run(in.name, func(t *testing.T) {
			stream := append(bytes.Clone(in.data), "rest"...)
			br := bufio.NewReaderSize(iotest.OneByteReader(bytes.NewReader(stream)), MaxClientHelloLen)
			got, err := Peek(br)
			if err != nil || got != "peek.example.com" {
				t.Fatalf("Peek = %q, %v; want %q, nil", got, err, "peek.example.com")
			}
			all, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(all, stream) {
				t.Errorf("Peek consumed input: read back %d bytes; want %d", len(all), len(stream))
			}
		})
	}
	t.Run("small buffer", func(t *testing.T) {
		br := bufio.NewReaderSize(bytes.NewReader(hello), 16)
		if _, err := Peek(br); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Peek with 16-byte buffer: error = %v; want ErrInvalidArgument", err)
		}
	})
	t.Run("early eof", func(t *testing.T) {
		br := bufio.NewReaderSize(bytes.NewReader(hello[:100]), MaxClientHelloLen)
		if _, err := Peek(br); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("Peek of truncated hello: error = %v; want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		br := bufio.NewReaderSize(bytes.NewReader(nil), MaxClientHelloLen)
		if _, err := Peek(br); !errors.Is(err, io.EOF) {
			t.Errorf("Peek of empty stream: error = %v; want io.EOF", err)
		}
	})
	t.Run("http", func(t *testing.T) {
		br := bufio.NewReaderSize(strings.NewReader("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), MaxClientHelloLen)
		if _, err := Peek(br); !errors.Is(err, ErrNotTLS) {
			t.Errorf("Peek of HTTP: error = %v; want ErrNotTLS", err)
		}
		if b, _ := br.Peek(3); string(b) != "GET" {
			t.Errorf("Peek consumed %q", b)
		}
	})
}

// helloOpts describe a hand-built ClientHello; zero values give a valid one.
type helloOpts struct {
	version      []byte // legacy_version
	sessionID    []byte
	suites       []byte
	compression  []byte
	extensions   []byte // raw extensions block content; nil with noExtensions omits the block
	noExtensions bool
	trailing     []byte // after the extensions block, inside the message
}

func ext(typ int, data []byte) []byte {
	return append([]byte{byte(typ >> 8), byte(typ), byte(len(data) >> 8), byte(len(data))}, data...)
}

// sniExt builds a server_name extension with one entry per name, each of type nameType.
func sniExt(nameType byte, names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, nameType, byte(len(n)>>8), byte(len(n)))
		list = append(list, n...)
	}
	return ext(extServerName, append([]byte{byte(len(list) >> 8), byte(len(list))}, list...))
}

func buildHello(o helloOpts) []byte {
	body := o.version
	if body == nil {
		body = []byte{3, 3}
	}
	body = append(bytes.Clone(body), make([]byte, 32)...)
	body = append(body, byte(len(o.sessionID)))
	body = append(body, o.sessionID...)
	suites := o.suites
	if suites == nil {
		suites = []byte{0x13, 0x01}
	}
	body = append(body, byte(len(suites)>>8), byte(len(suites)))
	body = append(body, suites...)
	comp := o.compression
	if comp == nil {
		comp = []byte{0}
	}
	body = append(body, byte(len(comp)))
	body = append(body, comp...)
	if !o.noExtensions {
		body = append(body, byte(len(o.extensions)>>8), byte(len(o.extensions)))
		body = append(body, o.extensions...)
	}
	body = append(body, o.trailing...)
	msg := append([]byte{handshakeTypeClientHello, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{recordTypeHandshake, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

func TestParseClientHello(t *testing.T) {
	good := sniExt(0, "example.com")
	tests := []struct {
		name    string
		in      []byte
		want    string
		wantErr error // nil: success
	}{
		{"valid", buildHello(helloOpts{extensions: good}), "example.com", nil},
		{"other extensions", buildHello(helloOpts{extensions: append(append(ext(10, []byte{0, 2, 0, 29}), good...), ext(43, []byte{2, 3, 4})...)}), "example.com", nil},
		{"no extensions block", buildHello(helloOpts{noExtensions: true}), "", nil},
		{"empty extensions", buildHello(helloOpts{}), "", nil},
		{"other name type only", buildHello(helloOpts{extensions: sniExt(1, "x")}), "", nil},
		{"punycode", buildHello(helloOpts{extensions: sniExt(0, "xn--bcher-kva.example")}), "xn--bcher-kva.example", nil},
		{"digits in labels", buildHello(helloOpts{extensions: sniExt(0, "1.2.3.example")}), "1.2.3.example", nil},
		{"max name", buildHello(helloOpts{extensions: sniExt(0, strings.Repeat("a.", 126)+"a")}), strings.Repeat("a.", 126) + "a", nil},

		{"empty input", nil, "", ErrNeedMore},
		{"http", []byte("GET / HTTP/1.1\r\n"), "", ErrNotTLS},
		{"one byte not tls", []byte{'G'}, "", ErrNotTLS},
		{"application data", []byte{0x17, 3, 3, 0, 5, 1, 2, 3, 4, 5}, "", ErrNotTLS},
		{"bad record version", []byte{0x16, 2, 0, 0, 5}, "", errdefs.ErrInvalidArgument},
		{"zero record length", []byte{0x16, 3, 1, 0, 0}, "", errdefs.ErrInvalidArgument},
		{"record too long", []byte{0x16, 3, 1, 0x40, 0x01}, "", errdefs.ErrInvalidArgument},
		{"not client hello", []byte{0x16, 3, 1, 0, 4, 2, 0, 0, 0}, "", errdefs.ErrInvalidArgument},
		{"message over cap", []byte{0x16, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff}, "", errdefs.ErrTooLarge},
		{"message just over cap", []byte{0x16, 3, 1, 0, 4, 1, 0, 0x40, 0x00}, "", errdefs.ErrTooLarge},
		{"interleaved record", append([]byte{0x16, 3, 1, 0, 2, 1, 0}, 0x15, 3, 1, 0, 2, 1, 0), "", errdefs.ErrInvalidArgument},
		{"trailing handshake bytes", func() []byte {
			h := buildHello(helloOpts{extensions: good})
			h = append(h, 0xff)
			h[4]++
			return h
		}(), "", errdefs.ErrInvalidArgument},
		{"bad legacy version", buildHello(helloOpts{version: []byte{2, 0}, extensions: good}), "", errdefs.ErrInvalidArgument},
		{"long session id", buildHello(helloOpts{sessionID: make([]byte, 33), extensions: good}), "", errdefs.ErrInvalidArgument},
		{"odd suites", buildHello(helloOpts{suites: []byte{1, 2, 3}, extensions: good}), "", errdefs.ErrInvalidArgument},
		{"no suites", buildHello(helloOpts{suites: []byte{}, extensions: good}), "", errdefs.ErrInvalidArgument},
		{"no compression", buildHello(helloOpts{compression: []byte{}, extensions: good}), "", errdefs.ErrInvalidArgument},
		{"data after extensions", buildHello(helloOpts{extensions: good, trailing: []byte{0}}), "", errdefs.ErrInvalidArgument},
		{"truncated extension", buildHello(helloOpts{extensions: good[:len(good)-1]}), "", errdefs.ErrInvalidArgument},
		{"duplicate sni", buildHello(helloOpts{extensions: append(bytes.Clone(good), good...)}), "", errdefs.ErrInvalidArgument},
		{"duplicate other", buildHello(helloOpts{extensions: append(ext(10, nil), ext(10, nil)...)}), "", errdefs.ErrInvalidArgument},
		{"two host names", buildHello(helloOpts{extensions: sniExt(0, "a.com", "b.com")}), "", errdefs.ErrInvalidArgument},
		{"empty list", buildHello(helloOpts{extensions: ext(0, []byte{0, 0})}), "", errdefs.ErrInvalidArgument},
		{"list length short", buildHello(helloOpts{extensions: ext(0, []byte{0, 1, 0, 0, 1, 'a'})}), "", errdefs.ErrInvalidArgument},
		{"list length long", buildHello(helloOpts{extensions: ext(0, []byte{0, 9, 0, 0, 1, 'a'})}), "", errdefs.ErrInvalidArgument},
		{"empty name", buildHello(helloOpts{extensions: sniExt(0, "")}), "", errdefs.ErrInvalidArgument},
		{"trailing dot", buildHello(helloOpts{extensions: sniExt(0, "example.com.")}), "", errdefs.ErrInvalidArgument},
		{"empty label", buildHello(helloOpts{extensions: sniExt(0, "a..com")}), "", errdefs.ErrInvalidArgument},
		{"ipv4", buildHello(helloOpts{extensions: sniExt(0, "10.0.0.1")}), "", errdefs.ErrInvalidArgument},
		{"ipv6", buildHello(helloOpts{extensions: sniExt(0, "::1")}), "", errdefs.ErrInvalidArgument},
		{"space", buildHello(helloOpts{extensions: sniExt(0, "a b.com")}), "", errdefs.ErrInvalidArgument},
		{"nul", buildHello(helloOpts{extensions: sniExt(0, "a.com\x00.evil")}), "", errdefs.ErrInvalidArgument},
		{"underscore", buildHello(helloOpts{extensions: sniExt(0, "a_b.com")}), "", errdefs.ErrInvalidArgument},
		{"port", buildHello(helloOpts{extensions: sniExt(0, "a.com:443")}), "", errdefs.ErrInvalidArgument},
		{"utf8", buildHello(helloOpts{extensions: sniExt(0, "bücher.de")}), "", errdefs.ErrInvalidArgument},
		{"hyphen edge", buildHello(helloOpts{extensions: sniExt(0, "a-.com")}), "", errdefs.ErrInvalidArgument},
		{"label 64", buildHello(helloOpts{extensions: sniExt(0, strings.Repeat("a", 64)+".com")}), "", errdefs.ErrInvalidArgument},
		{"name 255", buildHello(helloOpts{extensions: sniExt(0, strings.Repeat("a.", 127)+"a")}), "", errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseClientHello(tt.in)
			if tt.wantErr == nil {
				if err != nil || got != tt.want {
					t.Fatalf("ParseClientHello = %q, %v; want %q, nil", got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ParseClientHello = %q, %v; want error %v", got, err, tt.wantErr)
			}
			if got != "" {
				t.Errorf("ParseClientHello returned name %q with error", got)
			}
		})
	}
}

func TestMaxSize(t *testing.T) {
	// A ClientHello padded to exactly fill one maximal record parses; one byte more does not fit.
	pad := func(n int) []byte {
		base := buildHello(helloOpts{extensions: sniExt(0, "big.example.com")})
		extra := n - len(base) - 4 // padding extension header
		return buildHello(helloOpts{extensions: append(sniExt(0, "big.example.com"), ext(21, make([]byte, extra))...)})
	}
	full := pad(MaxClientHelloLen)
	if len(full) != MaxClientHelloLen {
		t.Fatalf("built %d bytes; want %d", len(full), MaxClientHelloLen)
	}
	if got, err := ParseClientHello(full); err != nil || got != "big.example.com" {
		t.Errorf("maximal ClientHello: %q, %v; want big.example.com, nil", got, err)
	}
	if _, err := ParseClientHello(full[:MaxClientHelloLen-1]); !errors.Is(err, ErrNeedMore) {
		t.Errorf("maximal ClientHello less one byte: %v; want ErrNeedMore", err)
	}
	over := refragment(full, maxRecordPayload-1)
	if _, err := ParseClientHello(over); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("maximal ClientHello in two records: %v; want ErrTooLarge", err)
	}
	if _, err := ParseClientHello(over[:MaxClientHelloLen]); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("cap bytes of an oversized ClientHello: %v; want ErrTooLarge", err)
	}
}
