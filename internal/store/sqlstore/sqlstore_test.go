package sqlstore

import "testing"

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT 1": "SELECT 1",
		"SELECT a FROM t WHERE id = ? AND x IN (?, ?)": "SELECT a FROM t WHERE id = $1 AND x IN ($2, $3)",
		"? ? ? ? ? ? ? ? ? ? ?":                        "$1 $2 $3 $4 $5 $6 $7 $8 $9 $10 $11",
	} {
		if got := Rebind(in); got != want {
			t.Errorf("Rebind(%q) = %q; want %q", in, got, want)
		}
	}
}
