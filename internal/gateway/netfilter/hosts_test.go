package netfilter_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/gateway/netfilter"
	"github.com/airlockrun/airlock/internal/netns"
	"github.com/airlockrun/airlock/internal/testenv"
)

// TestNodesShareAHost: two nodes' tables on one host. A sandbox of node B reaches B's gateway, whose
// sockets carry the same mark as A's: A's table leaves B's sandboxes to B's. Also after A's gateway died
// and left its table.
func TestNodesShareAHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change nftables, make network namespaces and mark sockets")
	}
	marked := net.ListenConfig{Control: netfilter.MarkSocket(netfilter.GatewayMark)}
	ctx := context.Background()
	gateway := func(table, prefix string) (net.Listener, net.PacketConn) {
		t.Helper()
		proxy, err := marked.Listen(ctx, "tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		go func() {
			for {
				c, err := proxy.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(table))
				c.Close()
			}
		}()
		dns, err := marked.ListenPacket(ctx, "udp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dns.Close() })
		t.Cleanup(func() { netfilter.Remove(table) })
		if err := netfilter.Install(netfilter.Config{Table: table, IfacePrefix: prefix, SharedPrefix: "altx",
			ProxyPort: uint16(proxy.Addr().(*net.TCPAddr).Port), DNSPort: uint16(dns.LocalAddr().(*net.UDPAddr).Port)}); err != nil {
			t.Fatal(err)
		}
		return proxy, dns
	}
	proxyA, dnsA := gateway("airlock_test_nfa", "altxa")
	proxyB, _ := gateway("airlock_test_nfb", "altxb")

	ns := filepath.Join(t.TempDir(), "ns")
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Remove(ns) })
	addr, err := hostnet.Attach(ns, "altxb0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostnet.Detach("altxb0") })

	// From B's sandbox, any TCP goes to B's proxy (B's table redirects it there).
	reach := func(what string) {
		t.Helper()
		var got string
		var derr error
		testenv.InNetns(t, ns, func() {
			c, err := net.DialTimeout("tcp4", fmt.Sprintf("%s:%d", addr.Host, proxyB.Addr().(*net.TCPAddr).Port), 2*time.Second)
			if err != nil {
				derr = err
				return
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			b := make([]byte, 64)
			n, _ := c.Read(b)
			got = string(b[:n])
		})
		if derr != nil || got != "airlock_test_nfb" {
			t.Errorf("%s: B's sandbox reached %q, %v; want B's gateway", what, got, derr)
		}
	}
	reach("both gateways up")
	proxyA.Close()
	dnsA.Close()
	reach("A's gateway dead, its table left")
}

// TestForeignSharedPrefixInterface: a host interface whose name merely starts with the shared prefix
// (no node's sandbox veth: nothing redirects its traffic) does not reach a gateway's sockets directly.
// Positive control: an unmarked listener on the same address and path is reached.
func TestForeignSharedPrefixInterface(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change nftables, make network namespaces and mark sockets")
	}
	ctx := context.Background()
	const table = "airlock_test_nff"
	serve := func(lc net.ListenConfig, what string) int {
		ln, err := lc.Listen(ctx, "tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(what))
				c.Close()
			}
		}()
		return ln.Addr().(*net.TCPAddr).Port
	}
	proxyPort := serve(net.ListenConfig{Control: netfilter.MarkSocket(netfilter.GatewayMark)}, "gateway")
	plainPort := serve(net.ListenConfig{}, "plain")
	dns, err := (&net.ListenConfig{Control: netfilter.MarkSocket(netfilter.GatewayMark)}).ListenPacket(ctx, "udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dns.Close() })
	t.Cleanup(func() { netfilter.Remove(table) })
	if err := netfilter.Install(netfilter.Config{Table: table, IfacePrefix: "altfa", SharedPrefix: "altf",
		ProxyPort: uint16(proxyPort), DNSPort: uint16(dns.LocalAddr().(*net.UDPAddr).Port)}); err != nil {
		t.Fatal(err)
	}
	ns := filepath.Join(t.TempDir(), "ns")
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Remove(ns) })
	addr, err := hostnet.Attach(ns, "altfz0") // shared prefix, not the node's
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostnet.Detach("altfz0") })
	dial := func(port int) string {
		var got string
		testenv.InNetns(t, ns, func() {
			c, err := net.DialTimeout("tcp4", fmt.Sprintf("%s:%d", addr.Host, port), time.Second)
			if err != nil {
				got = "error: " + err.Error()
				return
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(time.Second))
			b := make([]byte, 64)
			n, _ := c.Read(b)
			got = string(b[:n])
		})
		return got
	}
	if got := dial(plainPort); got != "plain" {
		t.Fatalf("positive control: the unmarked listener from the foreign interface: %q", got)
	}
	if got := dial(proxyPort); got == "gateway" {
		t.Errorf("a foreign interface with the shared prefix reached the gateway's socket directly")
	}
}
