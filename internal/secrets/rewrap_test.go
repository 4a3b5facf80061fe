package secrets_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/secrets"
)

// TestRewrapDataKey rotates a tenant's key and re-wraps its data key: the secrets, not rewritten,
// still reveal, and the data key now names the new key-encryption key.
func TestRewrapDataKey(t *testing.T) {
	storages(t, func(t *testing.T, e env) {
		ctx, s, st, kr := t.Context(), e.store, e.storage, e.keyring
		getKey := func(tenant string) secrets.DataKey {
			t.Helper()
			k, err := st.GetDataKey(ctx, tenant)
			wantErr(t, "GetDataKey("+tenant+")", err, nil)
			return k
		}
		unwrap := func(k secrets.DataKey) []byte {
			t.Helper()
			dek, err := kr.UnwrapKey(ctx, k.TenantID, k.KeyID, k.Wrapped)
			if err != nil {
				t.Fatalf("UnwrapKey(%s, %s): %v", k.TenantID, k.KeyID, err)
			}
			return dek
		}

		// A tenant without a data key has nothing to re-wrap, and gets none.
		ok, err := s.RewrapDataKey(ctx, "none")
		if ok || err != nil {
			t.Fatalf("RewrapDataKey(tenant without a data key) = %v, %v; want false, nil", ok, err)
		}
		_, err = st.GetDataKey(ctx, "none")
		wantErr(t, "GetDataKey after RewrapDataKey(tenant without a data key)", err, errdefs.ErrNotFound)

		_, err = s.Create(ctx, "a", "tok", []byte("value-a"))
		wantErr(t, "Create(a)", err, nil)
		_, err = s.Create(ctx, "a", "other", []byte("other-a"))
		wantErr(t, "Create(a, other)", err, nil)
		_, err = s.Create(ctx, "b", "tok", []byte("value-b"))
		wantErr(t, "Create(b)", err, nil)
		oldA, oldB := getKey("a"), getKey("b")
		recA, err := st.ListSecrets(ctx, "a")
		wantErr(t, "ListSecrets(a)", err, nil)

		newID, err := kr.RotateKey(ctx, "a")
		if err != nil {
			t.Fatalf("RotateKey(a): %v", err)
		}
		if newID == oldA.KeyID || !strings.HasPrefix(newID, "lk_") {
			t.Fatalf("RotateKey(a) = %q; want a new lk_ key ID (was %q)", newID, oldA.KeyID)
		}
		// Until re-wrapped, the data key stays under the old key, which still unwraps.
		if got := getKey("a"); got.KeyID != oldA.KeyID {
			t.Fatalf("data key of a names %q before RewrapDataKey; want still %q", got.KeyID, oldA.KeyID)
		}
		if got := reveal(t, s, "a", "tok"); got != "value-a" {
			t.Errorf("Reveal(a) after rotation, before re-wrap = %q; want %q", got, "value-a")
		}

		ok, err = s.RewrapDataKey(ctx, "a")
		if !ok || err != nil {
			t.Fatalf("RewrapDataKey(a) = %v, %v; want true, nil", ok, err)
		}
		newA := getKey("a")
		if newA.KeyID != newID || newA.TenantID != "a" || !newA.CreatedAt.Equal(oldA.CreatedAt) {
			t.Errorf("data key of a after RewrapDataKey = %v; want key ID %q, tenant a, created %v", newA, newID, oldA.CreatedAt)
		}
		if bytes.Equal(newA.Wrapped, oldA.Wrapped) {
			t.Errorf("data key of a still has the old wrapped bytes")
		}
		// The same data key, wrapped anew.
		if !bytes.Equal(unwrap(oldA), unwrap(newA)) {
			t.Errorf("RewrapDataKey changed the data key itself")
		}
		// The secrets were not rewritten, and still reveal.
		recA2, err := st.ListSecrets(ctx, "a")
		wantErr(t, "ListSecrets(a)", err, nil)
		if d := cmp.Diff(recA, recA2); d != "" {
			t.Errorf("records of a changed by RewrapDataKey (-before +after):\n%s", d)
		}
		if got := reveal(t, s, "a", "tok"); got != "value-a" {
			t.Errorf("Reveal(a, tok) after RewrapDataKey = %q; want %q", got, "value-a")
		}
		if got := reveal(t, s, "a", "other"); got != "other-a" {
			t.Errorf("Reveal(a, other) after RewrapDataKey = %q; want %q", got, "other-a")
		}
		// Writes keep working under the re-wrapped key.
		_, err = s.Update(ctx, "a", "tok", []byte("value-a2"))
		wantErr(t, "Update(a) after RewrapDataKey", err, nil)
		if got := reveal(t, s, "a", "tok"); got != "value-a2" {
			t.Errorf("Reveal(a) after Update = %q; want %q", got, "value-a2")
		}
		_, err = s.Create(ctx, "a", "third", []byte("third-a"))
		wantErr(t, "Create(a) after RewrapDataKey", err, nil)
		if got := reveal(t, s, "a", "third"); got != "third-a" {
			t.Errorf("Reveal(a, third) = %q; want %q", got, "third-a")
		}

		// Other tenants are untouched.
		if d := cmp.Diff(oldB, getKey("b")); d != "" {
			t.Errorf("data key of b changed by RewrapDataKey(a) (-want +got):\n%s", d)
		}
		if got := reveal(t, s, "b", "tok"); got != "value-b" {
			t.Errorf("Reveal(b) = %q; want %q", got, "value-b")
		}

		// Again without a rotation: wrapped anew under the same current key.
		ok, err = s.RewrapDataKey(ctx, "a")
		if !ok || err != nil {
			t.Fatalf("RewrapDataKey(a) again = %v, %v; want true, nil", ok, err)
		}
		if got := getKey("a"); got.KeyID != newID || !bytes.Equal(unwrap(got), unwrap(oldA)) {
			t.Errorf("data key of a after a second RewrapDataKey names %q; want %q and the same data key", got.KeyID, newID)
		}
		if got := reveal(t, s, "a", "other"); got != "other-a" {
			t.Errorf("Reveal(a, other) after a second RewrapDataKey = %q; want %q", got, "other-a")
		}

		// A store opened afterwards (as after a restart) reads the re-wrapped key.
		s2, err := secrets.New(secrets.Config{Keys: kr, Storage: st})
		wantErr(t, "New", err, nil)
		if got := reveal(t, s2, "a", "tok"); got != "value-a2" {
			t.Errorf("Reveal(a) through a new Store = %q; want %q", got, "value-a2")
		}
	})
}

func TestRewrapDataKeyRevoked(t *testing.T) {
	storages(t, func(t *testing.T, e env) {
		ctx, s, st, kr := t.Context(), e.store, e.storage, e.keyring
		_, err := s.Create(ctx, "a", "tok", []byte("value"))
		wantErr(t, "Create", err, nil)
		before, err := st.GetDataKey(ctx, "a")
		wantErr(t, "GetDataKey", err, nil)
		if _, err := kr.RotateKey(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := kr.RevokeKey(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		ok, err := s.RewrapDataKey(ctx, "a")
		wantErr(t, "RewrapDataKey(revoked)", err, errdefs.ErrPermissionDenied)
		if ok {
			t.Errorf("RewrapDataKey(revoked) reported true")
		}
		after, err := st.GetDataKey(ctx, "a")
		wantErr(t, "GetDataKey", err, nil)
		if d := cmp.Diff(before, after); d != "" {
			t.Errorf("data key changed by a failed RewrapDataKey (-want +got):\n%s", d)
		}
	})
}

// TestRewrapDataKeyConflict replaces the data key between RewrapDataKey's read and its write, by a
// storage that does so on the first ReplaceDataKey: the re-wrap fails with ErrConflict and leaves
// the other writer's key in place.
func TestRewrapDataKeyConflict(t *testing.T) {
	kr := mustKeyring(t)
	st := &racingStorage{MemStorage: secrets.NewMemStorage()}
	s, err := secrets.New(secrets.Config{Keys: kr, Storage: st})
	wantErr(t, "New", err, nil)
	ctx := t.Context()
	_, err = s.Create(ctx, "a", "tok", []byte("value"))
	wantErr(t, "Create", err, nil)
	if _, err := kr.RotateKey(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// The racing writer re-wraps the same data key first.
	st.race = func(old secrets.DataKey) {
		dek, err := kr.UnwrapKey(ctx, "a", old.KeyID, old.Wrapped)
		if err != nil {
			t.Fatal(err)
		}
		w, id, err := kr.WrapKey(ctx, "a", dek)
		if err != nil {
			t.Fatal(err)
		}
		k := old
		k.KeyID, k.Wrapped = id, w
		st.won = k
		wantErr(t, "ReplaceDataKey(racing writer)", st.MemStorage.ReplaceDataKey(ctx, old, k), nil)
	}
	ok, err := s.RewrapDataKey(ctx, "a")
	wantErr(t, "RewrapDataKey(lost the race)", err, errdefs.ErrConflict)
	if ok {
		t.Errorf("RewrapDataKey(lost the race) reported true")
	}
	got, err := st.GetDataKey(ctx, "a")
	wantErr(t, "GetDataKey", err, nil)
	if d := cmp.Diff(st.won, got); d != "" {
		t.Errorf("data key is not the racing writer's (-want +got):\n%s", d)
	}
	if got := reveal(t, s, "a", "tok"); got != "value" {
		t.Errorf("Reveal = %q; want %q", got, "value")
	}
}

// racingStorage runs race before its first ReplaceDataKey.
type racingStorage struct {
	*secrets.MemStorage
	race func(old secrets.DataKey)
	won  secrets.DataKey
}

func (r *racingStorage) ReplaceDataKey(ctx context.Context, old, k secrets.DataKey) error {
	if f := r.race; f != nil {
		r.race = nil
		f(old)
	}
	return r.MemStorage.ReplaceDataKey(ctx, old, k)
}
