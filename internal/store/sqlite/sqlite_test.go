package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite" // the driver, for reading the file behind the Store's back

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/store/storetest"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t,
		func(t *testing.T) store.Store { return open(t, filepath.Join(t.TempDir(), "airlock.db")) },
		storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
			path := s.(*sqlite.Store).Path()
			if err := s.Close(); err != nil {
				t.Fatalf("Close before reopen: %v", err)
			}
			return open(t, path)
		}),
	)
}

// TestFile checks the file Open leaves behind: mode 0600 (and its WAL too), WAL journal mode, the
// schema recorded once however often the file is opened.
func TestFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "nested") // Open creates missing directories
	path := filepath.Join(dir, "airlock.db")
	s := open(t, path)
	if _, err := s.CreateTenant(t.Context(), store.Tenant{Name: "a"}); err != nil { // make the WAL exist
		t.Fatalf("CreateTenant: %v", err)
	}
	for _, p := range []string{path, path + "-wal"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat: %v", err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("mode of %s = %v; want 0600", filepath.Base(p), got)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory: %v, %v; want mode 0700", fi.Mode().Perm(), err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	open(t, path).Close() // reopening applies no migration twice

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatalf("PRAGMA journal_mode: %v", err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q; want wal", mode)
	}
	var n, maxVersion int
	if err := db.QueryRow("SELECT COUNT(*), MAX(version) FROM schema_migrations").Scan(&n, &maxVersion); err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	if n != maxVersion || n < 1 {
		t.Errorf("schema_migrations has %d rows up to version %d; want one row per version", n, maxVersion)
	}
}

// TestTightensLooseFile checks that an existing world-readable file is made 0600.
func TestTightensLooseFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // whatever the umask did
		t.Fatal(err)
	}
	open(t, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode = %v; want 0600", got)
	}
}

// TestNewerSchema checks that a file migrated by a newer build is refused, not modified.
func TestNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.db")
	open(t, path).Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := sqlite.Open(t.Context(), path)
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Open(newer schema) = %v; want ErrFailedPrecondition", err)
	}
}

func TestOpenBadPath(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db?mode=memory"} {
		if s, err := sqlite.Open(t.Context(), p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Open(%q) = %v; want ErrInvalidArgument", p, err)
		}
	}
}

// TestOddPath checks that characters with a meaning in URIs are taken literally.
func TestOddPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "we?ird #dir%20", "a&b=c.db")
	s := open(t, path)
	if _, err := s.CreateTenant(t.Context(), store.Tenant{Name: "a"}); err != nil {
		t.Fatalf("CreateTenant: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database not at %q: %v", path, err)
	}
}
