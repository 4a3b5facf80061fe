package gateway

import (
	"bufio"
	"net"
	"testing"
)

// BenchmarkSplice measures the proxy's relay alone, on loopback and without a sandbox: a client reads
// a stream (or one byte, for the per-connection cost) from a server, directly and through splice with
// the proxy's accept and upstream dial in between. The difference between "direct" and "spliced" is
// the proxy's own cost; policy decisions, sniffing and the sandbox's network stack are not in it.
func BenchmarkSplice(b *testing.B) {
	for _, tc := range []struct {
		name string
		size int64
	}{{"conn-1B", 1}, {"stream-64MiB", 64 << 20}} {
		up := listenLoopback(b)
		go serveBytes(up, tc.size)
		px := listenLoopback(b)
		go serveSplice(px, up.Addr().String())
		for _, via := range []struct {
			name string
			addr string
		}{{"direct", up.Addr().String()}, {"spliced", px.Addr().String()}} {
			b.Run(tc.name+"/"+via.name, func(b *testing.B) {
				if tc.size > 1 {
					b.SetBytes(tc.size)
				}
				buf := make([]byte, 1<<20)
				for i := 0; i < b.N; i++ {
					c, err := net.Dial("tcp4", via.addr)
					if err != nil {
						b.Fatal(err)
					}
					var n int64
					for {
						k, err := c.Read(buf)
						n += int64(k)
						if err != nil {
							break
						}
					}
					c.Close()
					if n != tc.size {
						b.Fatalf("read %d bytes; want %d", n, tc.size)
					}
				}
			})
		}
	}
}

func listenLoopback(b *testing.B) net.Listener {
	b.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	return ln
}

// serveBytes answers every connection with size bytes, then closes it; it returns when ln is closed.
func serveBytes(ln net.Listener, size int64) {
	chunk := make([]byte, 1<<20)
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for n := size; n > 0; {
				k := min(n, int64(len(chunk)))
				if _, err := c.Write(chunk[:k]); err != nil {
					return
				}
				n -= k
			}
		}()
	}
}

// serveSplice relays every connection to upstream as the proxy does once it allowed one; it returns
// when ln is closed.
func serveSplice(ln net.Listener, upstream string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp4", upstream)
			if err != nil {
				return
			}
			defer up.Close()
			splice(c.(*net.TCPConn), bufio.NewReader(c), up.(*net.TCPConn), nil)
		}()
	}
}
