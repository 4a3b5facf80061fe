package node

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestPinDaemon: the node runs sandboxes from a copy of the daemon binary named by its content; the
// same binary maps to the same copy, another build to another, and the copy is read-only.
func TestPinDaemon(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "airlock")
	if err := os.WriteFile(bin, []byte("build one"), 0o755); err != nil {
		t.Fatal(err)
	}
	daemons := filepath.Join(dir, "daemons")
	p1, err := pinDaemon(bin, daemons)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := pinDaemon(bin, daemons); err != nil || again != p1 {
		t.Fatalf("pinning the same binary again: %s %v; want %s", again, err, p1)
	}
	if err := os.WriteFile(bin, []byte("build two"), 0o755); err != nil {
		t.Fatal(err)
	}
	p2, err := pinDaemon(bin, daemons)
	if err != nil || p2 == p1 {
		t.Fatalf("pinning another build: %s %v; want a path other than %s", p2, err, p1)
	}
	for p, want := range map[string]string{p1: "build one", p2: "build two"} {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, []byte(want)) {
			t.Errorf("%s holds %q %v; want %q", p, b, err, want)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o555 {
			t.Errorf("%s: %v %v; want mode 0555", p, fi.Mode(), err)
		}
	}
	if entries, _ := os.ReadDir(daemons); len(entries) != 2 {
		t.Errorf("%d files under %s; want the two copies and nothing left over", len(entries), daemons)
	}
}
