package netfilter

import (
	"os"
	"testing"

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
	want := map[string]int{"guard": 5, "redirect": 3, "input": 8, "forward": 2, "output": 1}
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
