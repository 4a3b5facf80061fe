// Package storagetest is the conformance suite every secrets.Storage runs: Run(t, newStorage).
package storagetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/secrets"
)

// Run runs the suite. newStorage returns a fresh, empty storage for each subtest.
func Run(t *testing.T, newStorage func(t *testing.T) secrets.Storage) {
	tests := []struct {
		name string
		fn   func(*testing.T, secrets.Storage)
	}{
		{"DataKey", testDataKey},
		{"ReplaceDataKey", testReplaceDataKey},
		{"Secrets", testSecrets},
		{"TenantsApart", testTenantsApart},
		{"CopiesBytes", testCopiesBytes},
		{"ConcurrentUpdates", testConcurrentUpdates},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newStorage(t)) })
	}
}

var base = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("%s: err = %v; want %v", what, err, want)
	}
}

func testDataKey(t *testing.T, s secrets.Storage) {
	ctx := t.Context()
	_, err := s.GetDataKey(ctx, "a")
	wantErr(t, "GetDataKey(none)", err, errdefs.ErrNotFound)
	k := secrets.DataKey{TenantID: "a", KeyID: "k1", Wrapped: []byte{1, 2, 3}, CreatedAt: base}
	wantErr(t, "CreateDataKey", s.CreateDataKey(ctx, k), nil)
	other := k
	other.Wrapped = []byte{9}
	wantErr(t, "CreateDataKey(again)", s.CreateDataKey(ctx, other), errdefs.ErrAlreadyExists)
	got, err := s.GetDataKey(ctx, "a")
	wantErr(t, "GetDataKey", err, nil)
	if d := cmp.Diff(k, got); d != "" {
		t.Errorf("GetDataKey (-want +got):\n%s", d)
	}
}

// testReplaceDataKey checks the compare-and-swap of a re-wrapped data key.
func testReplaceDataKey(t *testing.T, s secrets.Storage) {
	ctx := t.Context()
	get := func(tenant string) secrets.DataKey {
		t.Helper()
		k, err := s.GetDataKey(ctx, tenant)
		wantErr(t, "GetDataKey("+tenant+")", err, nil)
		return k
	}
	k1 := secrets.DataKey{TenantID: "a", KeyID: "k1", Wrapped: []byte{1, 2, 3}, CreatedAt: base}
	k2 := secrets.DataKey{TenantID: "a", KeyID: "k2", Wrapped: []byte{4, 5, 6, 7}, CreatedAt: base}

	wantErr(t, "ReplaceDataKey(no key)", s.ReplaceDataKey(ctx, k1, k2), errdefs.ErrNotFound)
	_, err := s.GetDataKey(ctx, "a")
	wantErr(t, "GetDataKey after ReplaceDataKey(no key)", err, errdefs.ErrNotFound)

	kb := secrets.DataKey{TenantID: "b", KeyID: "kb", Wrapped: []byte("b-wrapped"), CreatedAt: base}
	wantErr(t, "CreateDataKey(b)", s.CreateDataKey(ctx, kb), nil)
	wantErr(t, "CreateDataKey(a)", s.CreateDataKey(ctx, k1), nil)

	// Stale: the stored key has another key ID, or other wrapped bytes, or both.
	for _, tc := range []struct {
		what    string
		keyID   string
		wrapped []byte
	}{
		{"other key ID", "k0", k1.Wrapped},
		{"other wrapped key", k1.KeyID, []byte{1, 2, 4}},
		{"longer wrapped key", k1.KeyID, []byte{1, 2, 3, 0}},
		{"empty wrapped key", k1.KeyID, nil},
		{"both other", "k0", []byte{9}},
	} {
		stale := k1
		stale.KeyID, stale.Wrapped = tc.keyID, tc.wrapped
		wantErr(t, "ReplaceDataKey(stale: "+tc.what+")", s.ReplaceDataKey(ctx, stale, k2), errdefs.ErrConflict)
		if d := cmp.Diff(k1, get("a")); d != "" {
			t.Fatalf("data key after ReplaceDataKey(stale: %s) (-want +got):\n%s", tc.what, d)
		}
	}

	// old and new are given as slices the caller keeps changing.
	old, next := k1, k2
	old.Wrapped, next.Wrapped = bytes.Clone(k1.Wrapped), bytes.Clone(k2.Wrapped)
	wantErr(t, "ReplaceDataKey", s.ReplaceDataKey(ctx, old, next), nil)
	next.Wrapped[0] ^= 0xff
	got := get("a")
	if d := cmp.Diff(k2, got); d != "" {
		t.Errorf("GetDataKey after ReplaceDataKey (-want +got):\n%s", d)
	}
	got.Wrapped[1] ^= 0xff
	if d := cmp.Diff(k2, get("a")); d != "" {
		t.Errorf("stored data key changed with the caller's slices (-want +got):\n%s", d)
	}

	// The old wrapping is stale now; the new one is current.
	wantErr(t, "ReplaceDataKey(replaced old)", s.ReplaceDataKey(ctx, k1, k2), errdefs.ErrConflict)
	k3 := secrets.DataKey{TenantID: "a", KeyID: "k3", Wrapped: []byte{8}, CreatedAt: base}
	wantErr(t, "ReplaceDataKey(again)", s.ReplaceDataKey(ctx, k2, k3), nil)
	if d := cmp.Diff(k3, get("a")); d != "" {
		t.Errorf("GetDataKey after the second ReplaceDataKey (-want +got):\n%s", d)
	}

	// Other tenants are untouched, and a's key does not replace theirs.
	if d := cmp.Diff(kb, get("b")); d != "" {
		t.Errorf("data key of b changed (-want +got):\n%s", d)
	}
	_, err = s.GetDataKey(ctx, "c")
	wantErr(t, "GetDataKey(c)", err, errdefs.ErrNotFound)
	kc := k3
	kc.TenantID = "c"
	wantErr(t, "ReplaceDataKey(c without a key)", s.ReplaceDataKey(ctx, kc, kc), errdefs.ErrNotFound)
	_, err = s.GetDataKey(ctx, "c")
	wantErr(t, "GetDataKey(c) after ReplaceDataKey", err, errdefs.ErrNotFound)

	// Racing replacements of the same old key: exactly one wins.
	const workers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []secrets.DataKey
	for i := range workers {
		wg.Go(func() {
			k := secrets.DataKey{TenantID: "a", KeyID: fmt.Sprintf("race%d", i), Wrapped: []byte{byte(i)}, CreatedAt: base}
			switch err := s.ReplaceDataKey(ctx, k3, k); {
			case err == nil:
				mu.Lock()
				won = append(won, k)
				mu.Unlock()
			case !errors.Is(err, errdefs.ErrConflict):
				t.Errorf("ReplaceDataKey(racing): err = %v; want nil or ErrConflict", err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d racing ReplaceDataKey calls from the same key won; want exactly 1", len(won))
	}
	if d := cmp.Diff(won[0], get("a")); d != "" {
		t.Errorf("data key after racing replacements is not the winner's (-want +got):\n%s", d)
	}
}

func testSecrets(t *testing.T, s secrets.Storage) {
	ctx := t.Context()
	r := secrets.Record{TenantID: "a", Name: "tok", Version: 1, Ciphertext: []byte("ct1"), CreatedAt: base, UpdatedAt: base}
	_, err := s.GetSecret(ctx, "a", "tok")
	wantErr(t, "GetSecret(none)", err, errdefs.ErrNotFound)
	wantErr(t, "UpdateSecret(none)", s.UpdateSecret(ctx, r), errdefs.ErrNotFound)
	wantErr(t, "DeleteSecret(none)", s.DeleteSecret(ctx, "a", "tok"), errdefs.ErrNotFound)
	list, err := s.ListSecrets(ctx, "a")
	wantErr(t, "ListSecrets(empty)", err, nil)
	if len(list) != 0 {
		t.Errorf("ListSecrets(empty) = %v; want none", list)
	}

	wantErr(t, "CreateSecret", s.CreateSecret(ctx, r), nil)
	wantErr(t, "CreateSecret(again)", s.CreateSecret(ctx, r), errdefs.ErrAlreadyExists)
	got, err := s.GetSecret(ctx, "a", "tok")
	wantErr(t, "GetSecret", err, nil)
	if d := cmp.Diff(r, got); d != "" {
		t.Errorf("GetSecret (-want +got):\n%s", d)
	}

	stale := r // version 1 again: not the stored version + 1
	wantErr(t, "UpdateSecret(stale)", s.UpdateSecret(ctx, stale), errdefs.ErrConflict)
	r2 := r
	r2.Version, r2.Ciphertext, r2.UpdatedAt = 2, []byte("ct2"), base.Add(time.Minute)
	wantErr(t, "UpdateSecret", s.UpdateSecret(ctx, r2), nil)
	got, err = s.GetSecret(ctx, "a", "tok")
	wantErr(t, "GetSecret", err, nil)
	if d := cmp.Diff(r2, got); d != "" {
		t.Errorf("GetSecret after update (-want +got):\n%s", d)
	}
	skip := r2
	skip.Version = 4
	wantErr(t, "UpdateSecret(skipping a version)", s.UpdateSecret(ctx, skip), errdefs.ErrConflict)

	b := secrets.Record{TenantID: "a", Name: "b-first", Version: 1, Ciphertext: []byte("x"), CreatedAt: base, UpdatedAt: base}
	wantErr(t, "CreateSecret(b)", s.CreateSecret(ctx, b), nil)
	list, err = s.ListSecrets(ctx, "a")
	wantErr(t, "ListSecrets", err, nil)
	if d := cmp.Diff([]secrets.Record{b, r2}, list); d != "" {
		t.Errorf("ListSecrets (-want +got):\n%s", d)
	}

	wantErr(t, "DeleteSecret", s.DeleteSecret(ctx, "a", "tok"), nil)
	_, err = s.GetSecret(ctx, "a", "tok")
	wantErr(t, "GetSecret(deleted)", err, errdefs.ErrNotFound)
	wantErr(t, "CreateSecret(after delete)", s.CreateSecret(ctx, r), nil)
}

func testTenantsApart(t *testing.T, s secrets.Storage) {
	ctx := t.Context()
	ra := secrets.Record{TenantID: "a", Name: "tok", Version: 1, Ciphertext: []byte("a"), CreatedAt: base, UpdatedAt: base}
	rb := ra
	rb.TenantID, rb.Ciphertext = "b", []byte("b")
	wantErr(t, "CreateSecret(a)", s.CreateSecret(ctx, ra), nil)
	wantErr(t, "CreateSecret(b)", s.CreateSecret(ctx, rb), nil)
	wantErr(t, "CreateDataKey(a)", s.CreateDataKey(ctx, secrets.DataKey{TenantID: "a", KeyID: "k", Wrapped: []byte("a")}), nil)
	_, err := s.GetDataKey(ctx, "b")
	wantErr(t, "GetDataKey(b)", err, errdefs.ErrNotFound)
	wantErr(t, "DeleteSecret(a)", s.DeleteSecret(ctx, "a", "tok"), nil)
	got, err := s.GetSecret(ctx, "b", "tok")
	wantErr(t, "GetSecret(b)", err, nil)
	if d := cmp.Diff(rb, got); d != "" {
		t.Errorf("GetSecret(b) (-want +got):\n%s", d)
	}
	list, err := s.ListSecrets(ctx, "c")
	wantErr(t, "ListSecrets(c)", err, nil)
	if len(list) != 0 {
		t.Errorf("ListSecrets(c) = %v; want none", list)
	}
}

func testCopiesBytes(t *testing.T, s secrets.Storage) {
	ctx := t.Context()
	ct := []byte("ciphertext")
	wantErr(t, "CreateSecret", s.CreateSecret(ctx, secrets.Record{TenantID: "a", Name: "n", Version: 1, Ciphertext: ct, CreatedAt: base, UpdatedAt: base}), nil)
	ct[0] = 'X'
	got, err := s.GetSecret(ctx, "a", "n")
	wantErr(t, "GetSecret", err, nil)
	got.Ciphertext[1] = 'Y'
	again, err := s.GetSecret(ctx, "a", "n")
	wantErr(t, "GetSecret", err, nil)
	if string(again.Ciphertext) != "ciphertext" {
		t.Errorf("stored ciphertext = %q after callers changed their slices; want %q", again.Ciphertext, "ciphertext")
	}
}

// testConcurrentUpdates races updates from the same version: exactly one wins each round.
func testConcurrentUpdates(t *testing.T, s secrets.Storage) {
	ctx := t.Context()
	wantErr(t, "CreateSecret", s.CreateSecret(ctx, secrets.Record{TenantID: "a", Name: "n", Version: 1, Ciphertext: []byte("0"), CreatedAt: base, UpdatedAt: base}), nil)
	const workers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range workers {
		wg.Go(func() {
			err := s.UpdateSecret(ctx, secrets.Record{TenantID: "a", Name: "n", Version: 2, Ciphertext: fmt.Appendf(nil, "%d", i), CreatedAt: base, UpdatedAt: base})
			switch {
			case err == nil:
				mu.Lock()
				wins++
				mu.Unlock()
			case !errors.Is(err, errdefs.ErrConflict):
				t.Errorf("UpdateSecret: err = %v; want nil or ErrConflict", err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d concurrent updates from version 1 won; want exactly 1", wins)
	}
}
