package gateway

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// TestHostCannotReachGateway: a process on the host (here over loopback, not a sandbox veth) reaches
// neither the gateway's proxy nor its DNS server; once the gateway is closed, its ports are free for
// others again.
func TestHostCannotReachGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change nftables and mark sockets")
	}
	g, err := New(Config{Table: "airlock_test_gw", IfacePrefix: "altgw"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	proxy := fmt.Sprintf("127.0.0.1:%d", g.proxy.Addr().(*net.TCPAddr).Port)
	dns := fmt.Sprintf("127.0.0.1:%d", g.dnsTCP.Addr().(*net.TCPAddr).Port)
	for _, addr := range []string{proxy, dns} {
		if c, err := net.DialTimeout("tcp4", addr, 500*time.Millisecond); err == nil {
			c.Close()
			t.Errorf("a host process connected to the gateway at %s", addr)
		}
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", proxy)
	if err != nil {
		t.Fatalf("the closed gateway's port: %v", err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp4", proxy, 2*time.Second)
	if err != nil {
		t.Fatalf("a listener on the closed gateway's port: %v", err)
	}
	c.Close()
}
