package app

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/keys/master"
	"github.com/airlockrun/airlock/internal/secrets"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// TestImportFiles: a data directory an older version left, with the keyring, secrets and connections in
// files, has them moved into the Store on start, and every secret still reveals.
func TestImportFiles(t *testing.T) {
	ctx := t.Context()
	dataDir := t.TempDir()
	oldKeys, err := local.New(filepath.Join(dataDir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"secrets", "connections"} {
		files, err := secrets.NewFileStorage(filepath.Join(dataDir, dir))
		if err != nil {
			t.Fatal(err)
		}
		s, err := secrets.New(secrets.Config{Keys: oldKeys, Storage: files})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(ctx, "tn_a", "token", []byte("old "+dir)); err != nil {
			t.Fatal(err)
		}
	}

	st, err := sqlite.Open(ctx, filepath.Join(dataDir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mb, err := master.LoadFile(filepath.Join(dataDir, "keys", "master.key"), true)
	if err != nil {
		t.Fatal(err)
	}
	mk, err := master.New(mb)
	if err != nil {
		t.Fatal(err)
	}
	kr, err := local.NewInStore(ctx, st, mk)
	if err != nil {
		t.Fatal(err)
	}
	if err := importFiles(ctx, slog.New(slog.DiscardHandler), kr, st, dataDir); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, prefix string }{{"secrets", SecretsDocPrefix}, {"connections", ConnectionsDocPrefix}} {
		docs, err := secrets.NewDocStorage(st, c.prefix)
		if err != nil {
			t.Fatal(err)
		}
		s, err := secrets.New(secrets.Config{Keys: kr, Storage: docs})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := s.Reveal(ctx, "tn_a", "token"); err != nil || string(v) != "old "+c.dir {
			t.Errorf("%s after the import: %q, %v", c.dir, v, err)
		}
		if _, err := os.Stat(filepath.Join(dataDir, c.dir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the directory is still there (%v)", c.dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, "keys", local.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the keyring file is still there (%v)", err)
	}
	// A second start finds nothing to move.
	if err := importFiles(ctx, slog.New(slog.DiscardHandler), kr, st, dataDir); err != nil {
		t.Fatal(err)
	}
}
