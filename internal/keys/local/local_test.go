package local_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys"
	"github.com/airlockrun/airlock/internal/keys/keystest"
	"github.com/airlockrun/airlock/internal/keys/local"
)

func newKeyring(t *testing.T, dir string) *local.Keyring {
	t.Helper()
	k, err := local.New(dir)
	if err != nil {
		t.Fatalf("New(%s): %v", dir, err)
	}
	return k
}

func TestConformance(t *testing.T) {
	keystest.Run(t, func(t *testing.T) keys.KeyProvider { return newKeyring(t, filepath.Join(t.TempDir(), "keys")) })
}

func TestFileCreatedOnFirstUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "keys")
	k := newKeyring(t, dir)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("New created %s before first use (stat err %v)", dir, err)
	}
	if _, _, err := k.WrapKey(t.Context(), "t1", []byte("0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, local.FileName): 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %v; want %v", path, got, want)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("directory holds %v; want only %s (no temporary files)", ents, local.FileName)
	}
}

func TestPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	k1 := newKeyring(t, dir)
	dek := []byte("0123456789abcdef0123456789abcdef")
	w, id, err := k1.WrapKey(ctx, "t1", dek)
	if err != nil {
		t.Fatal(err)
	}
	wr, idr, err := k1.WrapKey(ctx, "t2", dek)
	if err != nil {
		t.Fatal(err)
	}
	if err := k1.RevokeKey(ctx, "t2"); err != nil {
		t.Fatal(err)
	}

	k2 := newKeyring(t, dir)
	got, err := k2.UnwrapKey(ctx, "t1", id, w)
	if err != nil || !bytes.Equal(got, dek) {
		t.Errorf("UnwrapKey after reopen = %q, %v; want %q", got, err, dek)
	}
	if _, err := k2.UnwrapKey(ctx, "t2", idr, wr); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("UnwrapKey(revoked) after reopen: err = %v; want ErrPermissionDenied", err)
	}
}

func TestRevokeDestroysKeyMaterial(t *testing.T) {
	dir := t.TempDir()
	k := newKeyring(t, dir)
	if _, _, err := k.WrapKey(t.Context(), "t1", []byte("dek")); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, local.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.RevokeKey(t.Context(), "t1"); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(dir, local.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(before, []byte(`"key":`)) || bytes.Contains(after, []byte(`"key":`)) {
		t.Errorf("keyring file before revoke:\n%s\nafter:\n%s\nwant the key material gone after", before, after)
	}
}

func TestRotateKey(t *testing.T) {
	ctx := t.Context()
	k := newKeyring(t, t.TempDir())
	dek := []byte("data key")
	w1, id1, err := k.WrapKey(ctx, "t1", dek)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := k.RotateKey(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	w2, got2, err := k.WrapKey(ctx, "t1", dek)
	if err != nil {
		t.Fatal(err)
	}
	if id2 == id1 || got2 != id2 {
		t.Errorf("after rotation WrapKey used key %q; want the new key %q (old %q)", got2, id2, id1)
	}
	for _, c := range []struct {
		id string
		w  []byte
	}{{id1, w1}, {id2, w2}} {
		if got, err := k.UnwrapKey(ctx, "t1", c.id, c.w); err != nil || !bytes.Equal(got, dek) {
			t.Errorf("UnwrapKey(%s) = %q, %v; want %q", c.id, got, err, dek)
		}
	}
	// A key wrapped under one key ID does not open under the other.
	if _, err := k.UnwrapKey(ctx, "t1", id2, w1); err == nil {
		t.Errorf("UnwrapKey with the wrong key ID succeeded")
	}
	if err := k.RevokeKey(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.RotateKey(ctx, "t1"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("RotateKey(revoked): err = %v; want ErrPermissionDenied", err)
	}
}

func TestRefusesLoosePermissions(t *testing.T) {
	dir := t.TempDir()
	k := newKeyring(t, dir)
	if _, _, err := k.WrapKey(t.Context(), "t1", []byte("dek")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, local.FileName), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := local.New(dir); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("New with a 0644 keyring: err = %v; want ErrFailedPrecondition", err)
	}
}

func TestRefusesCorruptFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, local.FileName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := local.New(dir); err == nil {
		t.Errorf("New with a corrupt keyring succeeded")
	}
}

func TestPrintingRedacts(t *testing.T) {
	dir := t.TempDir()
	k := newKeyring(t, dir)
	if _, _, err := k.WrapKey(t.Context(), "t1", []byte("dek")); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("keyring", "k", k)
	for _, out := range []string{fmt.Sprintf("%v", k), fmt.Sprintf("%+v", k), fmt.Sprintf("%#v", k), fmt.Sprintf("%s", k), logged.String()} {
		if !strings.Contains(out, "REDACTED") || strings.Contains(out, "lk_") {
			t.Errorf("printed keyring = %q; want it redacted", out)
		}
	}
}
