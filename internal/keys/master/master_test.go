package master

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
)

func TestSealOpen(t *testing.T) {
	k, err := New(bytes.Repeat([]byte{1}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := k.Seal("ctx-a", []byte("plain text"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("plain text")) {
		t.Fatal("sealed value holds the plain text")
	}
	if got, err := k.Open("ctx-a", sealed); err != nil || string(got) != "plain text" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := k.Open("ctx-b", sealed); !errors.Is(err, ErrNotAuthentic) {
		t.Errorf("Open under another context: %v; want ErrNotAuthentic", err)
	}
	other, _ := New(bytes.Repeat([]byte{2}, KeySize))
	if _, err := other.Open("ctx-a", sealed); !errors.Is(err, ErrNotAuthentic) {
		t.Errorf("Open under another key: %v; want ErrNotAuthentic", err)
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := k.Open("ctx-a", sealed); !errors.Is(err, ErrNotAuthentic) {
		t.Errorf("Open of a tampered value: %v; want ErrNotAuthentic", err)
	}
	if _, err := New(make([]byte, 16)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New with a short key: %v; want ErrInvalidArgument", err)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "master.key")
	if _, err := LoadFile(path, false); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadMasterKey of a missing file without create: %v", err)
	}
	k1, err := LoadFile(path, true)
	if err != nil || len(k1) != KeySize {
		t.Fatalf("LoadMasterKey(create) = %d bytes, %v", len(k1), err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("master key file: %v, %v; want mode 0600", st, err)
	}
	k2, err := LoadFile(path, true)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("LoadMasterKey again = %x, %v; want the same key", k2, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path, false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("LoadMasterKey of a 0644 file: %v; want ErrFailedPrecondition", err)
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("not hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(bad, false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("LoadMasterKey of a bad file: %v; want ErrInvalidArgument", err)
	}
}
