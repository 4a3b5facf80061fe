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
	"github.com/airlockrun/airlock/internal/keys/master"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/store/sqlite/sqlitetest"
)

func newSQLite(t *testing.T) *sqlite.Store { return sqlitetest.Open(t) }

func masterKey(b byte) *master.Key {
	k, err := master.New(bytes.Repeat([]byte{b}, master.KeySize))
	if err != nil {
		panic(err)
	}
	return k
}

func newInStore(t *testing.T, docs store.Docs, master *master.Key) *local.Keyring {
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
	w3, id3, err := file.WrapKey(ctx, "t3", dek)
	if err != nil {
		t.Fatal(err)
	}

	st := newSQLite(t)
	k := newInStore(t, st, masterKey(9))
	// Another replica made keys for t3 in the Store first: the file's are added to them.
	ws3, ids3, err := k.WrapKey(ctx, "t3", dek)
	if err != nil {
		t.Fatal(err)
	}
	moved, merged, err := local.ImportFile(ctx, k, dir)
	if err != nil {
		t.Fatal(err)
	}
	if moved != 2 || merged != 1 {
		t.Errorf("ImportFile moved %d, merged %d; want 2 and 1", moved, merged)
	}
	for _, c := range []struct {
		id string
		w  []byte
	}{{id3, w3}, {ids3, ws3}} {
		if got, err := k.UnwrapKey(ctx, "t3", c.id, c.w); err != nil || !bytes.Equal(got, dek) {
			t.Errorf("t3 key %s after the merge: %q, %v", c.id, got, err)
		}
	}
	if _, cur, err := k.WrapKey(ctx, "t3", dek); err != nil || cur != ids3 {
		t.Errorf("t3's current key after the merge is %s (%v); want the Store's, %s", cur, err, ids3)
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
	if moved, merged, err := local.ImportFile(ctx, k, dir); err != nil || moved != 0 || merged != 0 {
		t.Errorf("a second ImportFile: %d, %v; want nothing to do", moved, err)
	}
}

func storeDoc(key string, value []byte) store.Doc { return store.Doc{Key: key, Value: value} }

func newFileKeyring(dir string) (*local.Keyring, error) { return local.New(dir) }

func newStoreKeyring(b *testing.B) (*local.Keyring, error) {
	return local.NewInStore(b.Context(), sqlitetest.Open(b), masterKey(1))
}
