package pkcs11_test

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
	"github.com/airlockrun/airlock/internal/keys/keystest"
	"github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/keys/pkcs11"
	"github.com/airlockrun/airlock/internal/keys/pkcs11/softhsm"
	"github.com/airlockrun/airlock/internal/testenv"
)

// helperPath is the helper built for the tests.
func helperPath(t *testing.T) string { return testenv.PKCS11Helper(t) }

func newProvider(t *testing.T, tok *softhsm.Token) *pkcs11.Provider {
	t.Helper()
	return newProviderIn(t, tok, t.TempDir())
}

func newProviderIn(t *testing.T, tok *softhsm.Token, dir string) *pkcs11.Provider {
	t.Helper()
	p, err := pkcs11.New(pkcs11.Config{Helper: helperPath(t), Module: tok.Module, TokenLabel: tok.Label, PIN: tok.PIN,
		Env: tok.Env, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestConformance(t *testing.T) {
	keystest.Run(t, func(t *testing.T) keys.KeyProvider { return newProvider(t, softhsm.NewToken(t)) })
}

// TestKeyDestroyedInToken destroys a tenant's key with another PKCS#11 tool, as a customer would: its
// data keys no longer unwrap, no new ones wrap, and no key is made anew; other tenants carry on.
func TestKeyDestroyedInToken(t *testing.T) {
	tok := softhsm.NewToken(t)
	dir := t.TempDir()
	p := newProviderIn(t, tok, dir)
	ctx := t.Context()
	dek := bytes.Repeat([]byte{7}, 32)
	w, id, err := p.WrapKey(ctx, "tn_a", dek)
	if err != nil {
		t.Fatal(err)
	}
	wb, idb, err := p.WrapKey(ctx, "tn_b", dek)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.UnwrapKey(ctx, "tn_a", id, w); err != nil || !bytes.Equal(got, dek) {
		t.Fatalf("unwrap = %x, %v", got, err)
	}
	if bytes.Contains(w, dek) {
		t.Fatal("the wrapped key holds the data key in the clear")
	}
	tok.DeleteKey(t, id)

	_, err = p.UnwrapKey(ctx, "tn_a", id, w)
	if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("unwrap after the key was destroyed: %v; want permission denied saying revoked", err)
	}
	_, _, err = p.WrapKey(ctx, "tn_a", dek)
	if !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("wrap after the key was destroyed: %v; want permission denied", err)
	}
	if err := p.Check(ctx, "tn_a"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("Check after the key was destroyed: %v", err)
	}
	// A new provider (a restarted Airlock) does not make the key anew either.
	p2 := newProviderIn(t, tok, dir)
	if _, _, err := p2.WrapKey(ctx, "tn_a", dek); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("wrap after a restart: %v; want permission denied", err)
	}
	if got, err := p.UnwrapKey(ctx, "tn_b", idb, wb); err != nil || !bytes.Equal(got, dek) {
		t.Errorf("other tenant after the destroy = %x, %v", got, err)
	}
}

// TestTokenUnreachable: a wrong PIN or a missing token is "unavailable", not "revoked", and access
// comes back with the token.
func TestTokenUnreachable(t *testing.T) {
	tok := softhsm.NewToken(t)
	ctx := t.Context()
	dir := t.TempDir()
	p, err := pkcs11.New(pkcs11.Config{Helper: helperPath(t), Module: tok.Module, TokenLabel: tok.Label, PIN: tok.PIN, Env: tok.Env, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	dek := bytes.Repeat([]byte{9}, 32)
	w, id, err := p.WrapKey(ctx, "tn_a", dek)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	bad, err := pkcs11.New(pkcs11.Config{Helper: helperPath(t), Module: tok.Module, TokenLabel: tok.Label, PIN: "0000", Env: tok.Env, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = bad.UnwrapKey(ctx, "tn_a", id, w)
	if !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, errdefs.ErrKeyUnavailable) || errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("unwrap with a wrong PIN: %v; want unavailable", err)
	}
	if strings.Contains(fmt.Sprint(bad), tok.PIN) || strings.Contains(fmt.Sprintf("%+v", bad), "0000") {
		t.Error("the provider prints its PIN")
	}
	good, err := pkcs11.New(pkcs11.Config{Helper: helperPath(t), Module: tok.Module, TokenLabel: tok.Label, PIN: tok.PIN, Env: tok.Env, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if got, err := good.UnwrapKey(ctx, "tn_a", id, w); err != nil || !bytes.Equal(got, dek) {
		t.Errorf("unwrap with the token back = %x, %v", got, err)
	}
}

// TestRotate: a rotation makes a new current key; keys wrapped under the old one still unwrap; and
// destroying the old key alone is seen by Check (data keys wrapped under it are lost with it).
func TestRotate(t *testing.T) {
	tok := softhsm.NewToken(t)
	p := newProvider(t, tok)
	ctx := t.Context()
	dek := bytes.Repeat([]byte{1}, 32)
	w1, id1, err := p.WrapKey(ctx, "tn_a", dek)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := p.RotateKey(ctx, "tn_a")
	if err != nil || id2 == id1 {
		t.Fatalf("rotate = %q, %v; want a new key", id2, err)
	}
	w2, got2, err := p.WrapKey(ctx, "tn_a", dek)
	if err != nil || got2 != id2 {
		t.Fatalf("wrap after rotate used %q, %v; want %q", got2, err, id2)
	}
	for _, c := range []struct {
		id string
		w  []byte
	}{{id1, w1}, {id2, w2}} {
		if got, err := p.UnwrapKey(ctx, "tn_a", c.id, c.w); err != nil || !bytes.Equal(got, dek) {
			t.Errorf("unwrap under %s = %x, %v", c.id, got, err)
		}
	}
	if err := p.Check(ctx, "tn_a"); err != nil {
		t.Fatalf("check: %v", err)
	}
	tok.DeleteKey(t, id1)
	if err := p.Check(ctx, "tn_a"); !errors.Is(err, errdefs.ErrKeyUnavailable) || !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("check after the old key was destroyed: %v; want key unavailable (revoked)", err)
	}
}

// TestRouter sends each tenant to its provider and each wrapped key to the provider that made it, so a
// tenant that moves to the token still unwraps what the keyring wrapped; a revoke reaches both.
func TestRouter(t *testing.T) {
	ctx := t.Context()
	loc, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p11 := newProvider(t, softhsm.NewToken(t))
	choice := map[string]string{"tn_a": "", "tn_b": "pkcs11"}
	var mu sync.Mutex
	r, err := keys.NewRouter(map[string]keys.KeyProvider{"local": loc, "pkcs11": p11}, "local", func(_ context.Context, tenant string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		return choice[tenant], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dek := bytes.Repeat([]byte{3}, 32)
	wa, ida, err := r.WrapKey(ctx, "tn_a", dek)
	if err != nil || !strings.HasPrefix(ida, "lk_") {
		t.Fatalf("wrap for the local tenant = %q, %v", ida, err)
	}
	_, idb, err := r.WrapKey(ctx, "tn_b", dek)
	if err != nil || !strings.HasPrefix(idb, "airlock/tn_b/") {
		t.Fatalf("wrap for the pkcs11 tenant = %q, %v", idb, err)
	}
	mu.Lock()
	choice["tn_a"] = "pkcs11" // tn_a moves to the token
	mu.Unlock()
	if got, err := r.UnwrapKey(ctx, "tn_a", ida, wa); err != nil || !bytes.Equal(got, dek) {
		t.Errorf("unwrap what the keyring wrapped, after the move = %x, %v", got, err)
	}
	if _, id, err := r.WrapKey(ctx, "tn_a", dek); err != nil || !strings.HasPrefix(id, "airlock/tn_a/") {
		t.Errorf("wrap after the move = %q, %v; want the token's key", id, err)
	}
	if _, err := r.UnwrapKey(ctx, "tn_a", "zz_unknown", wa); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unwrap under a key no provider has: %v; want not found", err)
	}
	if err := r.RevokeKey(ctx, "tn_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.UnwrapKey(ctx, "tn_a", ida, wa); !errors.Is(err, errdefs.ErrKeyUnavailable) {
		t.Errorf("unwrap the keyring's key after a revoke: %v; want key unavailable", err)
	}
	if err := r.Check(ctx, "tn_a"); !errors.Is(err, errdefs.ErrKeyUnavailable) {
		t.Errorf("check after a revoke: %v", err)
	}
	if err := r.Check(ctx, "tn_b"); err != nil {
		t.Errorf("check of another tenant: %v", err)
	}
	mu.Lock()
	choice["tn_c"] = "nowhere"
	mu.Unlock()
	if _, _, err := r.WrapKey(ctx, "tn_c", dek); !errors.Is(err, errdefs.ErrKeyUnavailable) {
		t.Errorf("wrap with a provider the server lacks: %v; want key unavailable", err)
	}
}
