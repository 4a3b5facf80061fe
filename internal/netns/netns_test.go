package netns

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCreateRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	p := filepath.Join(t.TempDir(), "ns")
	if err := Create(p); err != nil {
		t.Fatal(err)
	}
	// The test's goroutine may move between threads; every thread but a locked one must stay in the
	// process's namespace, so any thread will do.
	var own, made unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &own); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(p, &made); err != nil {
		t.Fatal(err)
	}
	if own.Ino == made.Ino {
		t.Fatalf("namespace at %s is the test's own namespace", p)
	}
	if err := Create(p); err == nil {
		t.Errorf("second Create at the same path succeeded; want an error")
	}
	if err := Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("after Remove, stat %s: %v; want not exist", p, err)
	}
	if err := Remove(p); err != nil {
		t.Errorf("Remove of a missing namespace: %v; want nil", err)
	}
}
