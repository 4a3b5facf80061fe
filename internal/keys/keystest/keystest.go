// Package keystest is the conformance suite every keys.KeyProvider runs: Run(t, newProvider).
package keystest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys"
)

// Run runs the suite. newProvider returns a fresh, empty provider for each subtest.
// Revocation is tested when the provider implements keys.Revoker.
func Run(t *testing.T, newProvider func(t *testing.T) keys.KeyProvider) {
	tests := []struct {
		name string
		fn   func(*testing.T, keys.KeyProvider)
	}{
		{"RoundTrip", testRoundTrip},
		{"WrapIsRandomized", testWrapIsRandomized},
		{"WrongTenant", testWrongTenant},
		{"WrongKeyID", testWrongKeyID},
		{"Tampered", testTampered},
		{"InvalidArguments", testInvalidArguments},
		{"CanceledContext", testCanceledContext},
		{"Revoke", testRevoke},
		{"Concurrent", testConcurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newProvider(t)) })
	}
}

func mustWrap(t *testing.T, p keys.KeyProvider, tenant string, dek []byte) ([]byte, string) {
	t.Helper()
	w, id, err := p.WrapKey(t.Context(), tenant, dek)
	if err != nil {
		t.Fatalf("WrapKey(%q): %v", tenant, err)
	}
	if id == "" {
		t.Fatalf("WrapKey(%q) returned an empty key ID", tenant)
	}
	return w, id
}

func mustDEK(t *testing.T) []byte {
	t.Helper()
	dek, err := keys.NewDataKey()
	if err != nil {
		t.Fatal(err)
	}
	return dek
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v; want %v", what, err, want)
	}
}

func testRoundTrip(t *testing.T, p keys.KeyProvider) {
	for _, size := range []int{1, 16, keys.DataKeySize, keys.MaxDataKeySize} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			dek := bytes.Repeat([]byte{0xa5}, size)
			w, id := mustWrap(t, p, "tenant-a", dek)
			if bytes.Contains(w, dek) && size >= 16 {
				t.Errorf("wrapped key contains the data key in the clear")
			}
			got, err := p.UnwrapKey(t.Context(), "tenant-a", id, w)
			if err != nil {
				t.Fatalf("UnwrapKey: %v", err)
			}
			if !bytes.Equal(got, dek) {
				t.Errorf("UnwrapKey = %x; want %x", got, dek)
			}
			// The result is the caller's: clearing it does not break a second unwrap.
			clear(got)
			again, err := p.UnwrapKey(t.Context(), "tenant-a", id, w)
			if err != nil || !bytes.Equal(again, dek) {
				t.Errorf("second UnwrapKey = %x, %v; want %x", again, err, dek)
			}
		})
	}
}

func testWrapIsRandomized(t *testing.T, p keys.KeyProvider) {
	dek := mustDEK(t)
	w1, _ := mustWrap(t, p, "tenant-a", dek)
	w2, _ := mustWrap(t, p, "tenant-a", dek)
	if bytes.Equal(w1, w2) {
		t.Errorf("wrapping the same key twice gave the same bytes")
	}
}

func testWrongTenant(t *testing.T, p keys.KeyProvider) {
	dek := mustDEK(t)
	w, id := mustWrap(t, p, "tenant-a", dek)
	mustWrap(t, p, "tenant-b", mustDEK(t)) // so tenant-b has a key too
	got, err := p.UnwrapKey(t.Context(), "tenant-b", id, w)
	if err == nil {
		t.Fatalf("UnwrapKey as another tenant succeeded: %x", got)
	}
	if errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("UnwrapKey as another tenant: err = %v; must not say revoked", err)
	}
}

func testWrongKeyID(t *testing.T, p keys.KeyProvider) {
	w, _ := mustWrap(t, p, "tenant-a", mustDEK(t))
	_, err := p.UnwrapKey(t.Context(), "tenant-a", "no-such-key", w)
	wantErr(t, "UnwrapKey(unknown key ID)", err, errdefs.ErrNotFound)
}

func testTampered(t *testing.T, p keys.KeyProvider) {
	w, id := mustWrap(t, p, "tenant-a", mustDEK(t))
	for i := range w {
		bad := bytes.Clone(w)
		bad[i] ^= 0x01
		if got, err := p.UnwrapKey(t.Context(), "tenant-a", id, bad); err == nil {
			t.Fatalf("UnwrapKey with byte %d flipped succeeded: %x", i, got)
		}
	}
	for _, bad := range [][]byte{nil, {}, w[:len(w)-1], append(bytes.Clone(w), 0)} {
		if got, err := p.UnwrapKey(t.Context(), "tenant-a", id, bad); err == nil {
			t.Errorf("UnwrapKey(%x) succeeded: %x", bad, got)
		}
	}
}

func testInvalidArguments(t *testing.T, p keys.KeyProvider) {
	ctx := t.Context()
	_, _, err := p.WrapKey(ctx, "", mustDEK(t))
	wantErr(t, "WrapKey(empty tenant)", err, errdefs.ErrInvalidArgument)
	_, _, err = p.WrapKey(ctx, "tenant-a", nil)
	wantErr(t, "WrapKey(empty key)", err, errdefs.ErrInvalidArgument)
	_, _, err = p.WrapKey(ctx, "tenant-a", make([]byte, keys.MaxDataKeySize+1))
	wantErr(t, "WrapKey(huge key)", err, errdefs.ErrInvalidArgument)
	_, _, err = p.WrapKey(ctx, strings.Repeat("x", 129), mustDEK(t))
	wantErr(t, "WrapKey(long tenant)", err, errdefs.ErrInvalidArgument)
	_, err = p.UnwrapKey(ctx, "", "k", []byte("x"))
	wantErr(t, "UnwrapKey(empty tenant)", err, errdefs.ErrInvalidArgument)
}

func testCanceledContext(t *testing.T, p keys.KeyProvider) {
	w, id := mustWrap(t, p, "tenant-a", mustDEK(t))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := p.WrapKey(ctx, "tenant-a", mustDEK(t))
	wantErr(t, "WrapKey(canceled)", err, context.Canceled)
	_, err = p.UnwrapKey(ctx, "tenant-a", id, w)
	wantErr(t, "UnwrapKey(canceled)", err, context.Canceled)
}

func testRevoke(t *testing.T, p keys.KeyProvider) {
	r, ok := p.(keys.Revoker)
	if !ok {
		t.Skip("provider does not implement keys.Revoker")
	}
	ctx := t.Context()
	dekA, dekB := mustDEK(t), mustDEK(t)
	wa, ida := mustWrap(t, p, "tenant-a", dekA)
	wb, idb := mustWrap(t, p, "tenant-b", dekB)
	if err := r.RevokeKey(ctx, "tenant-a"); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	_, err := p.UnwrapKey(ctx, "tenant-a", ida, wa)
	wantErr(t, "UnwrapKey after revoke", err, errdefs.ErrPermissionDenied)
	if err != nil && !strings.Contains(err.Error(), "revoked") {
		t.Errorf("UnwrapKey after revoke: err = %q; want it to say the key is revoked", err)
	}
	_, _, err = p.WrapKey(ctx, "tenant-a", dekA)
	wantErr(t, "WrapKey after revoke", err, errdefs.ErrPermissionDenied)
	if err := r.RevokeKey(ctx, "tenant-a"); err != nil {
		t.Errorf("RevokeKey again: %v", err)
	}
	// Other tenants are untouched.
	got, err := p.UnwrapKey(ctx, "tenant-b", idb, wb)
	if err != nil || !bytes.Equal(got, dekB) {
		t.Errorf("UnwrapKey(tenant-b) after revoking tenant-a = %x, %v; want %x", got, err, dekB)
	}
	// Revoking a tenant that never had a key blocks it too.
	if err := r.RevokeKey(ctx, "tenant-c"); err != nil {
		t.Fatalf("RevokeKey(new tenant): %v", err)
	}
	_, _, err = p.WrapKey(ctx, "tenant-c", dekA)
	wantErr(t, "WrapKey(revoked new tenant)", err, errdefs.ErrPermissionDenied)
}

func testConcurrent(t *testing.T, p keys.KeyProvider) {
	const workers, rounds = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Go(func() {
			tenant := fmt.Sprintf("tenant-%d", i%3) // several goroutines share a tenant's first key
			for range rounds {
				dek, err := keys.NewDataKey()
				if err != nil {
					errs <- err
					return
				}
				w, id, err := p.WrapKey(t.Context(), tenant, dek)
				if err != nil {
					errs <- fmt.Errorf("WrapKey: %w", err)
					return
				}
				got, err := p.UnwrapKey(t.Context(), tenant, id, w)
				if err != nil || !bytes.Equal(got, dek) {
					errs <- fmt.Errorf("UnwrapKey = %x, %v; want %x", got, err, dek)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
