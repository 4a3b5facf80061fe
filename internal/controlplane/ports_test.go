package controlplane

import (
	"net/netip"
	"testing"
)

func TestParseProcNetTCP(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2 1 0000000000000000 100 0 0 10 0
   2: 0201A8C0:1F90 0101A8C0:D431 01 00000000:00000000 00:00000000 00000000  1000        0 3 1 0000000000000000 100 0 0 10 0
   3: garbage
   4: 00000000:ZZZZ 00000000:0000 0A
`
	tcp6 := `  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:1389 00000000000000000000000000000000:0000 0A 00000000:00000000
   1: 00000000000000000000000001000000:1388 00000000000000000000000000000000:0000 0A 00000000:00000000
`
	got := append(parseProcNetTCP([]byte(tcp)), parseProcNetTCP([]byte(tcp6))...)
	want := []ListeningPort{
		{Port: 8080, Address: netip.MustParseAddr("0.0.0.0"), Reachable: true},
		{Port: 3000, Address: netip.MustParseAddr("127.0.0.1"), Reachable: false},
		{Port: 5001, Address: netip.MustParseAddr("::"), Reachable: true},
		{Port: 5000, Address: netip.MustParseAddr("::1"), Reachable: false},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("port %d: got %+v; want %+v", i, got[i], want[i])
		}
	}
}
