package local_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys"
	"github.com/airlockrun/airlock/internal/keys/keystest"
	"github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

func newSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func masterKey(b byte) []byte { return bytes.Repeat([]byte{b}, local.MasterKeySize) }

func newInStore(t *testing.T, docs local.Docs, master []byte) *local.Keyring {
	t.Helper()
	k, err := local.NewInStore(t.Context(), docs, master)
	if err != nil {
		t.Fatalf("NewInStore: %v", err)
	}
	return k
}

func TestConformanceInStore(t *testing.T) {
	keystest.Run(t, func(t *testing.T) keys.KeyProvider { return newInStore(t, newSQLite(t), masterKey(1)) })
}

// TestInStoreSharedByReplicas: two keyrings on one Store (two control-plane replicas) see each other's
// keys, rotations and revocations at once.
func TestInStoreSharedByReplicas(t *testing.T) {
	ctx := t.Context()
	st := newSQLite(t)
	a, b := newInStore(t, st, masterKey(7)), newInStore(t, st, masterKey(7))
	dek := []byte("0123456789abcdef0123456789abcdef")

	// Both make the tenant's first key at once: whichever wins, each unwraps what the other wrapped.
	var wg sync.WaitGroup
	wrapped := make([][]byte, 2)
	ids := make([]string, 2)
	errs := make([]error, 2)
	for i, k := range []*local.Keyring{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrapped[i], ids[i], errs[i] = k.WrapKey(ctx, "t1", dek)
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("WrapKey on replica %d: %v", i, errs[i])
		}
	}
	if ids[0] != ids[1] {
		t.Errorf("racing first wraps used keys %s and %s; want one key for the tenant", ids[0], ids[1])
	}
	for i, k := range []*local.Keyring{b, a} {
		got, err := k.UnwrapKey(ctx, "t1", ids[i], wrapped[i])
		if err != nil || !bytes.Equal(got, dek) {
			t.Fatalf("replica %d unwrapping the other's key: %q, %v", 1-i, got, err)
		}
	}

	// A rotation on a is b's current key at once.
	newID, err := a.RotateKey(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if _, id, err := b.WrapKey(ctx, "t1", dek); err != nil || id != newID {
		t.Errorf("b wraps under %s (%v) after a rotated to %s", id, err, newID)
	}

	// A revocation on b is at once effective on a.
	if err := b.RevokeKey(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.UnwrapKey(ctx, "t1", ids[0], wrapped[0]); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a unwraps after b revoked: %v; want ErrPermissionDenied", err)
	}
	if err := a.Check(ctx, "t1"); !errors.Is(err, errdefs.ErrKeyUnavailable) {
		t.Errorf("a.Check after b revoked: %v; want ErrKeyUnavailable", err)
	}
}

// TestInStoreEncrypted: the Store holds no key in the clear, and a keyring with another master key is
// refused before it touches anything.
func TestInStoreEncrypted(t *testing.T) {
	ctx := t.Context()
	st := newSQLite(t)
	k := newInStore(t, st, masterKey(3))
	_, id, err := k.WrapKey(ctx, "tenant one", []byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := st.ListDocs(ctx, "keys/")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 {
		t.Fatalf("the Store holds %d keyring documents; want 2 (the master key check and the tenant)", len(docs))
	}
	for _, d := range docs {
		if bytes.Contains(d.Value, []byte(id)) || bytes.Contains(d.Value, []byte("created_at")) {
			t.Errorf("document %s holds the keyring's state in the clear", d.Key)
		}
	}
	_, err = local.NewInStore(ctx, st, masterKey(4))
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "same master key") {
		t.Fatalf("NewInStore with another master key: %v; want ErrFailedPrecondition naming the master key", err)
	}
	if _, err := local.NewInStore(ctx, st, masterKey(3)[:16]); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("NewInStore with a short master key: %v; want ErrInvalidArgument", err)
	}

	// A document swapped for another tenant's does not pass for it (each is bound to its key).
	one, err := st.GetDoc(ctx, local.DocPrefix+"~dGVuYW50IG9uZQ")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutDoc(ctx, storeDoc(local.DocPrefix+"t2", one.Value)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.WrapKey(ctx, "t2", []byte("0123456789abcdef")); err == nil || !strings.Contains(err.Error(), "does not authenticate") {
		t.Errorf("WrapKey with another tenant's document: %v; want it refused", err)
	}
}

func TestImportFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	file := newKeyring(t, dir)
	dek := []byte("0123456789abcdef0123456789abcdef")
	w1, id1, err := file.WrapKey(ctx, "t1", dek)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := file.WrapKey(ctx, "t2", dek); err != nil {
		t.Fatal(err)
	}
	if err := file.RevokeKey(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := file.WrapKey(ctx, "t3", dek); err != nil {
		t.Fatal(err)
	}

	st := newSQLite(t)
	k := newInStore(t, st, masterKey(9))
	if _, _, err := k.WrapKey(ctx, "t3", dek); err != nil { // the Store's t3 wins over the file's
		t.Fatal(err)
	}
	moved, skipped, err := local.ImportFile(ctx, k, dir)
	if err != nil {
		t.Fatal(err)
	}
	if moved != 2 || len(skipped) != 1 || skipped[0] != "t3" {
		t.Errorf("ImportFile moved %d, skipped %v; want 2 and [t3]", moved, skipped)
	}
	if _, err := os.Stat(filepath.Join(dir, local.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the keyring file is still there after the import (%v)", err)
	}
	if got, err := k.UnwrapKey(ctx, "t1", id1, w1); err != nil || !bytes.Equal(got, dek) {
		t.Errorf("unwrap an imported key: %q, %v", got, err)
	}
	if err := k.Check(ctx, "t2"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("imported revoked tenant: Check = %v; want revoked", err)
	}
	if moved, _, err := local.ImportFile(ctx, k, dir); err != nil || moved != 0 {
		t.Errorf("a second ImportFile: %d, %v; want nothing to do", moved, err)
	}
}

func TestLoadMasterKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "master.key")
	if _, err := local.LoadMasterKey(path, false); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadMasterKey of a missing file without create: %v", err)
	}
	k1, err := local.LoadMasterKey(path, true)
	if err != nil || len(k1) != local.MasterKeySize {
		t.Fatalf("LoadMasterKey(create) = %d bytes, %v", len(k1), err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("master key file: %v, %v; want mode 0600", st, err)
	}
	k2, err := local.LoadMasterKey(path, true)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("LoadMasterKey again = %x, %v; want the same key", k2, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := local.LoadMasterKey(path, false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("LoadMasterKey of a 0644 file: %v; want ErrFailedPrecondition", err)
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("not hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := local.LoadMasterKey(bad, false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("LoadMasterKey of a bad file: %v; want ErrInvalidArgument", err)
	}
}

func storeDoc(key string, value []byte) store.Doc { return store.Doc{Key: key, Value: value} }
