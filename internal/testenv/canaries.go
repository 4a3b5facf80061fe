package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Canaries are host files that no sandbox may change, in a directory where no file may appear: the
// targets of the links that attack tests plant inside sandboxes.
type Canaries struct {
	// Dir holds the canaries.
	Dir string
}

// canaryNames are the canaries' file names, as sorted as os.ReadDir returns them.
var canaryNames = []string{"airlock.db", "master.key", "shadow"}

// NewCanaries makes the canaries in a temporary directory of t's.
func NewCanaries(t testing.TB) *Canaries {
	t.Helper()
	c := &Canaries{Dir: t.TempDir()}
	for _, n := range canaryNames {
		if err := os.WriteFile(filepath.Join(c.Dir, n), []byte("canary "+n+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// Check fails t if a canary changed or a file appeared beside them; after says what just happened.
func (c *Canaries) Check(t testing.TB, after string) {
	t.Helper()
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, canaryNames) {
		t.Errorf("after %s the host canary directory holds %q; want the canaries only", after, names)
	}
	for _, n := range canaryNames {
		if b, err := os.ReadFile(filepath.Join(c.Dir, n)); err != nil || string(b) != "canary "+n+"\n" {
			t.Errorf("after %s the host canary %s is %q, %v; want it unchanged", after, n, b, err)
		}
	}
}
