package netfilter

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/nftables"
)

func TestInstallReplaceRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change nftables")
	}
	const table = "airlock_test_nf"
	t.Cleanup(func() { Remove(table) })
	cfg := Config{Table: table, IfacePrefix: "altst", ProxyPort: 15001, DNSPort: 15053}
	if err := Install(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.ProxyPort = 15002
	if err := Install(cfg); err != nil {
		t.Fatalf("re-install (replace): %v", err)
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, ch := range chains {
		if ch.Table.Name != table {
			continue
		}
		rules, err := c.GetRules(ch.Table, ch)
		if err != nil {
			t.Fatal(err)
		}
		got[ch.Name] = len(rules)
	}
	want := map[string]int{"guard": 5, "redirect": 3, "input": 12, "forward": 2, "output": 1}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("chain %s has %d rules; want %d (all chains: %v)", name, got[name], n, got)
		}
	}
	if err := Remove(table); err != nil {
		t.Fatal(err)
	}
	tables, _ := c.ListTablesOfFamily(nftables.TableFamilyINet)
	for _, tb := range tables {
		if tb.Name == table {
			t.Errorf("table %s still exists after Remove", table)
		}
	}
	if err := Remove(table); err != nil {
		t.Errorf("Remove of a missing table: %v", err)
	}
	if err := Install(Config{Table: table}); err == nil {
		t.Errorf("Install of an incomplete config succeeded")
	}
}

// TestGatewaySocketsOnly: from anywhere but a sandbox veth, the gateway's sockets (marked GatewayMark)
// cannot be reached, over TCP or UDP; an unmarked socket on the same port can, so a table left behind
// by a gateway that died does not block a service that later takes one of its ports.
func TestGatewaySocketsOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change nftables and mark sockets")
	}
	const table = "airlock_test_nfmark"
	t.Cleanup(func() { Remove(table) })
	marked := net.ListenConfig{Control: MarkSocket(GatewayMark)}
	ctx := context.Background()
	proxy, err := marked.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	dns, err := marked.ListenPacket(ctx, "udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dns.Close()
	proxyAddr, dnsAddr := proxy.Addr().String(), dns.LocalAddr().String()
	if err := Install(Config{Table: table, IfacePrefix: "altsm",
		ProxyPort: uint16(proxy.Addr().(*net.TCPAddr).Port), DNSPort: uint16(dns.LocalAddr().(*net.UDPAddr).Port)}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	if c, err := net.DialTimeout("tcp4", proxyAddr, 500*time.Millisecond); err == nil {
		c.Close()
		t.Errorf("a host process connected to the gateway's marked TCP socket %s", proxyAddr)
	}
	if udpReaches(t, dns, dnsAddr) {
		t.Errorf("a host process's datagram reached the gateway's marked UDP socket %s", dnsAddr)
	}

	// The gateway is gone, its table stays; another service takes the same ports.
	proxy.Close()
	dns.Close()
	var lc net.ListenConfig
	svc, err := lc.Listen(ctx, "tcp4", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	go func() {
		for {
			c, err := svc.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp4", proxyAddr, 2*time.Second)
	if err != nil {
		t.Errorf("an unmarked service on a dead gateway's TCP port: %v", err)
	} else {
		c.Close()
	}
	usvc, err := lc.ListenPacket(ctx, "udp4", dnsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer usvc.Close()
	if !udpReaches(t, usvc, dnsAddr) {
		t.Errorf("an unmarked service on a dead gateway's UDP port got no datagram")
	}
}

// udpReaches reports whether a datagram sent from a new socket to addr arrives at pc within 500 ms.
func udpReaches(t *testing.T, pc net.PacketConn, addr string) bool {
	t.Helper()
	c, err := net.Dial("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	pc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 16)
	n, _, err := pc.ReadFrom(buf)
	return err == nil && string(buf[:n]) == "ping"
}
