// Package sqlitetest opens throwaway SQLite stores for tests of the packages that keep things in the
// Store.
package sqlitetest

import (
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// Open returns a new, empty store in a temporary directory, closed when the test ends.
func Open(t testing.TB) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
