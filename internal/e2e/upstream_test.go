package e2e

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlockrun/airlock/internal/netns"
	"github.com/airlockrun/airlock/internal/testenv"
)

// upstream is a stand-in for the internet: a network namespace the test makes, wired to the host by a
// veth, with servers the sandboxes may or may not reach. Its address, 203.0.113.2, is in a documentation
// range (TEST-NET-3), which is routed nowhere on the internet and which the gateway does not guard, so
// it plays a public server. The host routes it to the namespace: nothing here ever leaves this machine.
type upstream struct {
	ns     string
	hostIf string
	IP     netip.Addr
	// CAPEM is the certificate of the CA that signed the HTTPS server's certificate.
	CAPEM []byte
	// Marker is in every answer the upstream servers give, so a test can tell it reached them.
	Marker string
	// MetadataIP is bound inside the namespace too, with a server on port 80, and routed to from the
	// host for the test's duration.
	MetadataIP netip.Addr
}

const upstreamMarker = "reached-the-upstream-7f3a"

// startUpstream makes the namespace and its servers: HTTPS on 443 (cert for api.example.test and
// other.example.test), HTTP on 80, a TCP echo on 7000, a UDP echo on 7001, and a DNS server on 53 (UDP
// and TCP) that answers every name with 203.0.113.2 — a resolver the sandbox must never get to use.
func startUpstream(t *testing.T) *upstream {
	t.Helper()
	dir := t.TempDir()
	u := &upstream{ns: filepath.Join(dir, "ns"), hostIf: fmt.Sprintf("alup%d", os.Getpid()%10000),
		IP: netip.MustParseAddr("203.0.113.2"), Marker: upstreamMarker, MetadataIP: netip.MustParseAddr("169.254.169.254")}
	if err := netns.Create(u.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Remove(u.ns) })
	nsh, err := vnetns.GetFromPath(u.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	la := netlink.NewLinkAttrs()
	la.Name = u.hostIf
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(nsh))}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(u.hostIf); err == nil {
			netlink.LinkDel(l)
		}
	})
	host, _ := netlink.LinkByName(u.hostIf)
	must(t, netlink.AddrAdd(host, mustAddr("203.0.113.1/30")))
	must(t, netlink.LinkSetUp(host))
	in, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	peer, _ := in.LinkByName("eth0")
	must(t, in.AddrAdd(peer, mustAddr("203.0.113.2/30")))
	must(t, in.AddrAdd(peer, mustAddr("169.254.169.254/32")))
	must(t, in.LinkSetUp(peer))
	if lo, err := in.LinkByName("lo"); err == nil {
		in.LinkSetUp(lo)
	}
	must(t, in.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: net.ParseIP("203.0.113.1")}))
	// The host reaches the metadata address through the upstream namespace while the test runs.
	mdRoute := &netlink.Route{Dst: &net.IPNet{IP: net.ParseIP("169.254.169.254").To4(), Mask: net.CIDRMask(32, 32)}, Gw: net.ParseIP("203.0.113.2")}
	must(t, netlink.RouteAdd(mdRoute))
	t.Cleanup(func() { netlink.RouteDel(mdRoute) })

	ca, caKey := testenv.NewTestCA(t)
	u.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	leaf := testenv.NewTestLeaf(t, ca, caKey, "api.example.test", "other.example.test")

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	testenv.InNetns(t, u.ns, func() {
		hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/echo": // every header but Authorization, and the URL, back to the sender
				fmt.Fprintf(w, "%s url=%s\n", upstreamMarker, r.URL.String())
				for k, vs := range r.Header {
					if k != "Authorization" {
						fmt.Fprintf(w, "%s: %s\n", k, strings.Join(vs, ","))
					}
				}
				return
			case "/switch": // 101 whether asked or not, then raw bytes
				hj, ok := w.(http.Hijacker)
				if !ok {
					http.Error(w, "no hijack", 500)
					return
				}
				c, bw, err := hj.Hijack()
				if err != nil {
					return
				}
				defer c.Close()
				bw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nRAW-AFTER-101 auth=" + r.Header.Get("Authorization") + "\n")
				bw.Flush()
				return
			}
			fmt.Fprintf(w, "%s %s %s %s auth=%q\n", upstreamMarker, r.Method, r.Host, r.URL.Path, r.Header.Get("Authorization"))
		})
		for _, addr := range []string{"203.0.113.2:443", "203.0.113.2:80", "169.254.169.254:80", "203.0.113.2:7000", "203.0.113.2:53"} {
			ln, err := net.Listen("tcp4", addr)
			if err != nil {
				t.Fatal(err)
			}
			context.AfterFunc(ctx, func() { ln.Close() })
			wg.Add(1)
			switch addr {
			case "203.0.113.2:443":
				srv := &http.Server{Handler: hello, TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}}}
				go func() { defer wg.Done(); srv.ServeTLS(ln, "", "") }()
			case "203.0.113.2:7000":
				go func() { defer wg.Done(); serveEcho(ln) }()
			case "203.0.113.2:53":
				go func() { defer wg.Done(); serveDNSTCP(ln) }()
			default:
				srv := &http.Server{Handler: hello}
				go func() { defer wg.Done(); srv.Serve(ln) }()
			}
		}
		for _, addr := range []string{"203.0.113.2:7001", "203.0.113.2:53"} {
			pc, err := net.ListenPacket("udp4", addr)
			if err != nil {
				t.Fatal(err)
			}
			context.AfterFunc(ctx, func() { pc.Close() })
			wg.Add(1)
			if addr == "203.0.113.2:53" {
				go func() { defer wg.Done(); serveDNSUDP(pc) }()
			} else {
				go func() { defer wg.Done(); serveUDPEcho(pc) }()
			}
		}
	})
	return u
}

func serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.Write([]byte(upstreamMarker + "\n"))
			io.Copy(c, c)
		}()
	}
}

func serveUDPEcho(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		pc.WriteTo(append([]byte(upstreamMarker+" "), buf[:n]...), addr)
	}
}

// rogueAnswer answers any DNS question with 203.0.113.2.
func rogueAnswer(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) == 0 {
		return nil
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
	b.StartQuestions()
	b.Question(qs[0])
	b.StartAnswers()
	b.AResource(dnsmessage.ResourceHeader{Name: qs[0].Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: [4]byte{203, 0, 113, 2}})
	out, _ := b.Finish()
	return out
}

func serveDNSUDP(pc net.PacketConn) {
	buf := make([]byte, 512)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if a := rogueAnswer(buf[:n]); a != nil {
			pc.WriteTo(a, addr)
		}
	}
}

func serveDNSTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var l [2]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return
			}
			q := make([]byte, int(l[0])<<8|int(l[1]))
			if _, err := io.ReadFull(c, q); err != nil {
				return
			}
			a := rogueAnswer(q)
			c.Write(append([]byte{byte(len(a) >> 8), byte(len(a))}, a...))
		}()
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustAddr(s string) *netlink.Addr {
	a, err := netlink.ParseAddr(s)
	if err != nil {
		panic(err)
	}
	return a
}
