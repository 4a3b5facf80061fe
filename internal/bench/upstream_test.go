package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlockrun/airlock/internal/netns"
	"github.com/airlockrun/airlock/internal/testenv"
)

// upstream is a stand-in for the internet, cut down from the e2e package's: a network namespace wired to
// the host by a veth, with 203.0.113.2 (TEST-NET-3, routed nowhere on the internet; the host routes it
// to the namespace, so nothing here leaves this machine). Its servers:
//
//   - 443 HTTPS (certificate for upstreamName) and 80 plain HTTP: GET /blob?n=N answers N bytes,
//     anything else a short "ok";
//   - 7000 TCP: reads a decimal line N, sends N bytes and closes (the client speaks first);
//   - 7001 TCP: sends one line at once and closes (the server speaks first).
type upstream struct {
	IP netip.Addr
	// CAPEM is the certificate of the CA that signed the HTTPS server's certificate.
	CAPEM []byte
}

const upstreamName = "api.example.test"

// startUpstream makes the namespace and its servers; b.Cleanup removes all of it.
func startUpstream(b *testing.B) *upstream {
	b.Helper()
	dir := b.TempDir()
	nsPath := filepath.Join(dir, "ns")
	hostIf := fmt.Sprintf("albn%d", os.Getpid()%10000)
	u := &upstream{IP: netip.MustParseAddr("203.0.113.2")}
	if err := netns.Create(nsPath); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { netns.Remove(nsPath) })
	nsh, err := vnetns.GetFromPath(nsPath)
	if err != nil {
		b.Fatal(err)
	}
	defer nsh.Close()
	la := netlink.NewLinkAttrs()
	la.Name = hostIf
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(nsh))}); err != nil {
		b.Fatalf("add veth %s: %v", hostIf, err)
	}
	b.Cleanup(func() {
		if l, err := netlink.LinkByName(hostIf); err == nil {
			netlink.LinkDel(l)
		}
	})
	host, err := netlink.LinkByName(hostIf)
	must(b, err)
	must(b, netlink.AddrAdd(host, mustAddr("203.0.113.1/30")))
	must(b, netlink.LinkSetUp(host))
	in, err := netlink.NewHandleAt(nsh)
	must(b, err)
	defer in.Close()
	peer, err := in.LinkByName("eth0")
	must(b, err)
	must(b, in.AddrAdd(peer, mustAddr("203.0.113.2/30")))
	must(b, in.LinkSetUp(peer))
	if lo, err := in.LinkByName("lo"); err == nil {
		in.LinkSetUp(lo)
	}
	must(b, in.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: net.ParseIP("203.0.113.1")}))

	ca, caKey := testenv.NewTestCA(b)
	u.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	leaf := testenv.NewTestLeaf(b, ca, caKey, upstreamName)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	testenv.InNetns(b, nsPath, func() {
		for _, addr := range []string{"203.0.113.2:443", "203.0.113.2:80", "203.0.113.2:7000", "203.0.113.2:7001"} {
			ln, err := net.Listen("tcp4", addr)
			if err != nil {
				b.Fatal(err)
			}
			context.AfterFunc(ctx, func() { ln.Close() })
			wg.Add(1)
			switch addr {
			case "203.0.113.2:443":
				srv := &http.Server{Handler: http.HandlerFunc(serveBlob), TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}}}
				context.AfterFunc(ctx, func() { srv.Close() })
				go func() { defer wg.Done(); srv.ServeTLS(ln, "", "") }()
			case "203.0.113.2:80":
				srv := &http.Server{Handler: http.HandlerFunc(serveBlob)}
				context.AfterFunc(ctx, func() { srv.Close() })
				go func() { defer wg.Done(); srv.Serve(ln) }()
			case "203.0.113.2:7000":
				go func() { defer wg.Done(); serveStream(ln) }()
			default:
				go func() { defer wg.Done(); serveBanner(ln) }()
			}
		}
	})
	return u
}

// zeros is what the servers send; TLS encrypts it and nothing on the path compresses.
var zeros = make([]byte, 1<<20)

func serveBlob(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	if r.URL.Path != "/blob" || err != nil || n < 0 {
		fmt.Fprintln(w, "ok")
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	writeN(w, n)
}

func writeN(w interface{ Write([]byte) (int, error) }, n int64) {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return
		}
		n -= k
	}
}

func serveStream(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			n, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
			if err != nil {
				return
			}
			writeN(c, n)
		}()
	}
}

func serveBanner(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("hello\n"))
		c.Close()
	}
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func mustAddr(s string) *netlink.Addr {
	a, err := netlink.ParseAddr(s)
	if err != nil {
		panic(err)
	}
	return a
}
