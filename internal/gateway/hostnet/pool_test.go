package hostnet

import (
	"net/netip"
	"testing"
)

func TestSetPool(t *testing.T) {
	old := Pool
	t.Cleanup(func() { Pool = old })
	for _, bad := range []string{"10.0.0.0/14", "100.64.0.0/8", "100.96.0.0/31", "fd00::/64", "100.128.0.0/14"} {
		if err := SetPool(netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("SetPool(%s) took it; want refused", bad)
		}
	}
	if Pool != old {
		t.Fatalf("a refused pool changed Pool to %s", Pool)
	}
	if err := SetPool(netip.MustParsePrefix("100.100.1.2/14")); err != nil || Pool != netip.MustParsePrefix("100.100.0.0/14") {
		t.Errorf("SetPool(100.100.1.2/14) = %v, Pool %s; want 100.100.0.0/14", err, Pool)
	}
}
