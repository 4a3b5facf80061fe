package secrets_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/secrets"
	"github.com/airlockrun/airlock/internal/secrets/storagetest"
)

func TestMemStorageConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) secrets.Storage { return secrets.NewMemStorage() })
}

func TestFileStorageConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) secrets.Storage { return newFileStorage(t, t.TempDir()) })
}

func newFileStorage(t *testing.T, dir string) *secrets.FileStorage {
	t.Helper()
	s, err := secrets.NewFileStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type env struct {
	store   *secrets.Store
	keyring *local.Keyring
	storage secrets.Storage
}

// storages runs fn once per Storage implementation, each with a fresh local keyring.
func storages(t *testing.T, fn func(t *testing.T, e env)) {
	for _, tc := range []struct {
		name string
		new  func(t *testing.T) secrets.Storage
	}{
		{"mem", func(t *testing.T) secrets.Storage { return secrets.NewMemStorage() }},
		{"file", func(t *testing.T) secrets.Storage { return newFileStorage(t, filepath.Join(t.TempDir(), "secrets")) }},
		{"doc", func(t *testing.T) secrets.Storage { return newDocStorage(t, newSQLite(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kr, err := local.New(filepath.Join(t.TempDir(), "keys"))
			if err != nil {
				t.Fatal(err)
			}
			st := tc.new(t)
			s, err := secrets.New(secrets.Config{Keys: kr, Storage: st})
			if err != nil {
				t.Fatal(err)
			}
			fn(t, env{store: s, keyring: kr, storage: st})
		})
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("%s: err = %v; want %v", what, err, want)
	}
}

func reveal(t *testing.T, s *secrets.Store, tenant, name string) string {
	t.Helper()
	v, err := s.Reveal(t.Context(), tenant, name)
	if err != nil {
		t.Fatalf("Reveal(%s, %s): %v", tenant, name, err)
	}
	return string(v)
}

func TestRoundTrip(t *testing.T) {
	storages(t, func(t *testing.T, e env) {
		ctx, s := t.Context(), e.store
		m, err := s.Create(ctx, "t1", "github.token", []byte("ghp_first"))
		wantErr(t, "Create", err, nil)
		if m.Name != "github.token" || m.TenantID != "t1" || m.Version != 1 || m.CreatedAt.IsZero() || !m.UpdatedAt.Equal(m.CreatedAt) {
			t.Errorf("Create = %+v; want version 1 of t1/github.token with created = updated", m)
		}
		if got := reveal(t, s, "t1", "github.token"); got != "ghp_first" {
			t.Errorf("Reveal = %q; want %q", got, "ghp_first")
		}
		_, err = s.Create(ctx, "t1", "github.token", []byte("again"))
		wantErr(t, "Create(duplicate)", err, errdefs.ErrAlreadyExists)

		time.Sleep(time.Millisecond)
		m2, err := s.Update(ctx, "t1", "github.token", []byte("ghp_second"))
		wantErr(t, "Update", err, nil)
		if m2.Version != 2 || !m2.CreatedAt.Equal(m.CreatedAt) || !m2.UpdatedAt.After(m.UpdatedAt) {
			t.Errorf("Update = %+v; want version 2, same created time, later updated time (was %+v)", m2, m)
		}
		if got := reveal(t, s, "t1", "github.token"); got != "ghp_second" {
			t.Errorf("Reveal after Update = %q; want %q", got, "ghp_second")
		}
		got, err := s.Get(ctx, "t1", "github.token")
		wantErr(t, "Get", err, nil)
		if d := cmp.Diff(m2, got); d != "" {
			t.Errorf("Get (-want +got):\n%s", d)
		}

		ma, err := s.Create(ctx, "t1", "a-key", []byte("x"))
		wantErr(t, "Create(a-key)", err, nil)
		list, err := s.List(ctx, "t1")
		wantErr(t, "List", err, nil)
		if d := cmp.Diff([]secrets.Metadata{ma, m2}, list); d != "" {
			t.Errorf("List (-want +got):\n%s", d)
		}

		wantErr(t, "Delete", s.Delete(ctx, "t1", "github.token"), nil)
		_, err = s.Reveal(ctx, "t1", "github.token")
		wantErr(t, "Reveal(deleted)", err, errdefs.ErrNotFound)
		_, err = s.Update(ctx, "t1", "github.token", []byte("v"))
		wantErr(t, "Update(deleted)", err, errdefs.ErrNotFound)
		_, err = s.Update(ctx, "t-new", "github.token", []byte("v"))
		wantErr(t, "Update(tenant without secrets)", err, errdefs.ErrNotFound)
		wantErr(t, "Delete(deleted)", s.Delete(ctx, "t1", "github.token"), errdefs.ErrNotFound)
		_, err = s.Get(ctx, "t1", "github.token")
		wantErr(t, "Get(deleted)", err, errdefs.ErrNotFound)
	})
}

func TestValidation(t *testing.T) {
	s, err := secrets.New(secrets.Config{Keys: mustKeyring(t), Storage: secrets.NewMemStorage(), MaxValueSize: 8})
	wantErr(t, "New", err, nil)
	tests := []struct {
		tenant, name, value string
		want                error
	}{
		{"t", "ok_name-1.2", "v", nil},
		{"t", strings.Repeat("n", 128), "v", nil},
		{"t", strings.Repeat("n", 129), "v", errdefs.ErrInvalidArgument},
		{"t", "", "v", errdefs.ErrInvalidArgument},
		{"t", "has space", "v", errdefs.ErrInvalidArgument},
		{"t", "slash/name", "v", errdefs.ErrInvalidArgument},
		{"t", "../up", "v", errdefs.ErrInvalidArgument},
		{"t", "ünïcode", "v", errdefs.ErrInvalidArgument},
		{"t", "nl\n", "v", errdefs.ErrInvalidArgument},
		{"", "name", "v", errdefs.ErrInvalidArgument},
		{"t", "empty", "", errdefs.ErrInvalidArgument},
		{"t", "big", "123456789", errdefs.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%q", tt.tenant, tt.name), func(t *testing.T) {
			_, err := s.Create(t.Context(), tt.tenant, tt.name, []byte(tt.value))
			wantErr(t, "Create", err, tt.want)
		})
	}
	if _, err := secrets.New(secrets.Config{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New(empty config): err = %v; want ErrInvalidArgument", err)
	}
}

func mustKeyring(t *testing.T) *local.Keyring {
	t.Helper()
	kr, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// TestWrongTenant moves ciphertexts and data keys between tenants and secrets in the storage, as
// someone with write access to it could: nothing decrypts anywhere but where it was written.
func TestWrongTenant(t *testing.T) {
	storages(t, func(t *testing.T, e env) {
		ctx, s, st := t.Context(), e.store, e.storage
		_, err := s.Create(ctx, "a", "tok", []byte("secret-of-a"))
		wantErr(t, "Create(a)", err, nil)
		_, err = s.Create(ctx, "b", "other", []byte("secret-of-b"))
		wantErr(t, "Create(b)", err, nil)

		_, err = s.Reveal(ctx, "b", "tok")
		wantErr(t, "Reveal(b, a's name)", err, errdefs.ErrNotFound)

		ra, err := st.GetSecret(ctx, "a", "tok")
		wantErr(t, "GetSecret", err, nil)

		// a's ciphertext placed in tenant b under the same name.
		moved := ra
		moved.TenantID = "b"
		wantErr(t, "CreateSecret(b)", st.CreateSecret(ctx, moved), nil)
		_, err = s.Reveal(ctx, "b", "tok")
		wantErr(t, "Reveal(a's ciphertext as b)", err, errdefs.ErrInternal)

		// a's ciphertext under another name of a.
		renamed := ra
		renamed.Name = "tok2"
		wantErr(t, "CreateSecret(tok2)", st.CreateSecret(ctx, renamed), nil)
		_, err = s.Reveal(ctx, "a", "tok2")
		wantErr(t, "Reveal(renamed ciphertext)", err, errdefs.ErrInternal)

		// a's version-1 ciphertext presented as version 2.
		bumped := ra
		bumped.Version = 2
		wantErr(t, "UpdateSecret", st.UpdateSecret(ctx, bumped), nil)
		_, err = s.Reveal(ctx, "a", "tok")
		wantErr(t, "Reveal(ciphertext of another version)", err, errdefs.ErrInternal)

		// a's wrapped data key given to a new tenant c.
		ka, err := st.GetDataKey(ctx, "a")
		wantErr(t, "GetDataKey", err, nil)
		kc := ka
		kc.TenantID = "c"
		wantErr(t, "CreateDataKey(c)", st.CreateDataKey(ctx, kc), nil)
		_, err = s.Create(ctx, "c", "tok", []byte("v"))
		wantErr(t, "Create(c with a's data key)", err, errdefs.ErrInternal)
	})
}

func TestTamperedCiphertext(t *testing.T) {
	storages(t, func(t *testing.T, e env) {
		ctx, s, st := t.Context(), e.store, e.storage
		_, err := s.Create(ctx, "a", "tok", []byte("value"))
		wantErr(t, "Create", err, nil)
		r, err := st.GetSecret(ctx, "a", "tok")
		wantErr(t, "GetSecret", err, nil)
		for i := range r.Ciphertext {
			bad := r
			bad.Version++
			bad.Ciphertext = bytes.Clone(r.Ciphertext)
			bad.Ciphertext[i] ^= 0x80
			wantErr(t, "UpdateSecret", st.UpdateSecret(ctx, bad), nil)
			r = bad
			r.Ciphertext[i] ^= 0x80 // so the next round flips only its own byte
			if v, err := s.Reveal(ctx, "a", "tok"); err == nil {
				t.Fatalf("Reveal with byte %d flipped = %q; want an error", i, v)
			}
		}
		bad := r
		bad.Version++
		bad.Ciphertext = r.Ciphertext[:5]
		wantErr(t, "UpdateSecret", st.UpdateSecret(ctx, bad), nil)
		_, err = s.Reveal(ctx, "a", "tok")
		wantErr(t, "Reveal(truncated)", err, errdefs.ErrInternal)
	})
}

func TestRevokedKey(t *testing.T) {
	storages(t, func(t *testing.T, e env) {
		ctx, s := t.Context(), e.store
		_, err := s.Create(ctx, "a", "tok", []byte("value"))
		wantErr(t, "Create", err, nil)
		_, err = s.Create(ctx, "b", "tok", []byte("value-b"))
		wantErr(t, "Create(b)", err, nil)
		if err := e.keyring.RevokeKey(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		_, err = s.Reveal(ctx, "a", "tok")
		wantErr(t, "Reveal(revoked)", err, errdefs.ErrPermissionDenied)
		if !strings.Contains(err.Error(), "revoked") {
			t.Errorf("Reveal(revoked): err = %q; want it to say revoked", err)
		}
		_, err = s.Update(ctx, "a", "tok", []byte("v2"))
		wantErr(t, "Update(revoked)", err, errdefs.ErrPermissionDenied)
		_, err = s.Create(ctx, "a", "tok2", []byte("v"))
		wantErr(t, "Create(revoked)", err, errdefs.ErrPermissionDenied)
		if err := e.keyring.RevokeKey(ctx, "new"); err != nil {
			t.Fatal(err)
		}
		_, err = s.Create(ctx, "new", "tok", []byte("v"))
		wantErr(t, "Create(revoked new tenant)", err, errdefs.ErrPermissionDenied)
		// Metadata stays readable; other tenants are unaffected.
		_, err = s.Get(ctx, "a", "tok")
		wantErr(t, "Get(revoked)", err, nil)
		if got := reveal(t, s, "b", "tok"); got != "value-b" {
			t.Errorf("Reveal(b) = %q; want %q", got, "value-b")
		}
	})
}

// TestNothingPrintsValues prints every type of the package, and the storages, every way, and looks
// for the value in the output.
func TestNothingPrintsValues(t *testing.T) {
	storages(t, func(t *testing.T, e env) {
		ctx := t.Context()
		const value = "sk-live-ABCDEFGHIJKLMNOP"
		m, err := e.store.Create(ctx, "a", "tok", []byte(value))
		wantErr(t, "Create", err, nil)
		r, err := e.storage.GetSecret(ctx, "a", "tok")
		wantErr(t, "GetSecret", err, nil)
		k, err := e.storage.GetDataKey(ctx, "a")
		wantErr(t, "GetDataKey", err, nil)
		list, err := e.store.List(ctx, "a")
		wantErr(t, "List", err, nil)

		forbidden := []string{value, hex.EncodeToString([]byte(value)), hex.EncodeToString(r.Ciphertext), hex.EncodeToString(k.Wrapped)}
		objects := []any{e.store, *e.store, m, &m, r, &r, k, &k, list, e.storage, e.keyring, secrets.Config{Keys: e.keyring, Storage: e.storage}}
		for i, obj := range objects {
			var logged bytes.Buffer
			slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "obj", obj)
			slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "obj", obj)
			outs := []string{logged.String()}
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
				outs = append(outs, fmt.Sprintf(verb, obj))
			}
			for _, out := range outs {
				for _, f := range forbidden {
					if strings.Contains(strings.ToLower(out), strings.ToLower(f)) {
						t.Errorf("object %d (%T) printed %q, which contains %q", i, obj, out, f)
					}
				}
			}
		}
		// The ciphertext is not the value either.
		if bytes.Contains(r.Ciphertext, []byte(value)) {
			t.Errorf("stored ciphertext contains the value")
		}
	})
}

func TestFileStorageOnDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	st := newFileStorage(t, dir)
	s, err := secrets.New(secrets.Config{Keys: mustKeyring(t), Storage: st})
	wantErr(t, "New", err, nil)
	const value = "plaintext-value-123"
	_, err = s.Create(t.Context(), "tenant/../x", "tok", []byte(value))
	wantErr(t, "Create", err, nil)
	st0, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st0.Mode().Perm() != 0o700 {
		t.Errorf("directory mode = %v; want 0700", st0.Mode().Perm())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Fatalf("directory holds %v; want one file", ents)
	}
	info, err := ents[0].Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 || strings.HasPrefix(ents[0].Name(), ".tmp") {
		t.Errorf("file %s mode %v; want a tenant file with mode 0600", ents[0].Name(), info.Mode().Perm())
	}
	data, err := os.ReadFile(filepath.Join(dir, ents[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(value)) {
		t.Errorf("the file holds the value in the clear")
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	open := func() *secrets.Store {
		kr, err := local.New(filepath.Join(dir, "keys"))
		wantErr(t, "local.New", err, nil)
		st := newFileStorage(t, filepath.Join(dir, "secrets"))
		s, err := secrets.New(secrets.Config{Keys: kr, Storage: st})
		wantErr(t, "New", err, nil)
		return s
	}
	_, err := open().Create(t.Context(), "a", "tok", []byte("persisted"))
	wantErr(t, "Create", err, nil)
	if got := reveal(t, open(), "a", "tok"); got != "persisted" {
		t.Errorf("Reveal after reopen = %q; want %q", got, "persisted")
	}
}

func TestConcurrent(t *testing.T) {
	storages(t, func(t *testing.T, e env) {
		ctx, s := t.Context(), e.store
		const workers, rounds = 8, 10
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() {
				tenant := fmt.Sprintf("t%d", i%2) // racing first use of a tenant's data key
				own := fmt.Sprintf("own-%d", i)
				if _, err := s.Create(ctx, tenant, own, []byte("v0")); err != nil {
					t.Errorf("Create: %v", err)
					return
				}
				if _, err := s.Create(ctx, tenant, "shared", []byte("shared")); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
					t.Errorf("Create(shared): %v", err)
				}
				for j := range rounds {
					want := fmt.Sprintf("v%d", j+1)
					if _, err := s.Update(ctx, tenant, own, []byte(want)); err != nil {
						t.Errorf("Update: %v", err)
						return
					}
					if _, err := s.Update(ctx, tenant, "shared", []byte("shared")); err != nil {
						t.Errorf("Update(shared): %v", err)
						return
					}
					if v, err := s.Reveal(ctx, tenant, own); err != nil || string(v) != want {
						t.Errorf("Reveal = %q, %v; want %q", v, err, want)
						return
					}
					if v, err := s.Reveal(ctx, tenant, "shared"); err != nil || string(v) != "shared" {
						t.Errorf("Reveal(shared) = %q, %v; want %q", v, err, "shared")
						return
					}
				}
			})
		}
		wg.Wait()
		for _, tenant := range []string{"t0", "t1"} {
			m, err := s.Get(ctx, tenant, "shared")
			wantErr(t, "Get", err, nil)
			if want := int64(1 + workers/2*rounds); m.Version != want {
				t.Errorf("shared secret of %s at version %d; want %d (every update counted once)", tenant, m.Version, want)
			}
		}
	})
}

// TestMAC: the same tenant, purpose and message give the same MAC (on another Store over the same
// storage and keys too); any of them changed gives another; a revoked key gives none.
func TestMAC(t *testing.T) {
	storages(t, func(t *testing.T, e env) {
		ctx, s := t.Context(), e.store
		mac := func(tenant, purpose, msg string) []byte {
			t.Helper()
			m, err := s.MAC(ctx, tenant, purpose, []byte(msg))
			if err != nil {
				t.Fatalf("MAC(%s, %s, %s): %v", tenant, purpose, msg, err)
			}
			if len(m) != 32 {
				t.Fatalf("MAC is %d bytes; want 32", len(m))
			}
			return m
		}
		first := mac("a", "p", "m")
		if again := mac("a", "p", "m"); !bytes.Equal(first, again) {
			t.Errorf("MAC(a, p, m) twice: %x, then %x; want the same", first, again)
		}
		other, err := secrets.New(secrets.Config{Keys: e.keyring, Storage: e.storage})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := other.MAC(ctx, "a", "p", []byte("m")); err != nil || !bytes.Equal(m, first) {
			t.Errorf("MAC on another Store over the same storage = %x, %v; want %x", m, err, first)
		}
		for _, c := range [][3]string{{"b", "p", "m"}, {"a", "q", "m"}, {"a", "p", "n"}} {
			if m := mac(c[0], c[1], c[2]); bytes.Equal(m, first) {
				t.Errorf("MAC(%s, %s, %s) equals MAC(a, p, m)", c[0], c[1], c[2])
			}
		}
		if err := e.keyring.RevokeKey(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		_, err = s.MAC(ctx, "a", "p", []byte("m"))
		wantErr(t, "MAC(revoked)", err, errdefs.ErrPermissionDenied)
	})
}

// TestSealer: a tenant's sealer opens what it (or another Store's for the same tenant and purpose)
// sealed with the same aad, nothing else; a revoked key gives no sealer.
func TestSealer(t *testing.T) {
	storages(t, func(t *testing.T, e env) {
		ctx, s := t.Context(), e.store
		x, err := s.Sealer(ctx, "a", "audit", true)
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := x.Seal([]byte("argv marker"), []byte("aad"))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(sealed, []byte("marker")) {
			t.Fatal("the sealed record holds the plaintext")
		}
		other, err := secrets.New(secrets.Config{Keys: e.keyring, Storage: e.storage})
		if err != nil {
			t.Fatal(err)
		}
		y, err := other.Sealer(ctx, "a", "audit", false)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := y.Open(sealed, []byte("aad")); err != nil || string(v) != "argv marker" {
			t.Errorf("Open on another Store = %q, %v; want the plaintext", v, err)
		}
		wrong := func(name string, z *secrets.Sealer, sealed, aad []byte) {
			t.Helper()
			if v, err := z.Open(sealed, aad); err == nil {
				t.Errorf("Open(%s) = %q; want an error", name, v)
			}
		}
		wrong("other aad", x, sealed, []byte("other"))
		flipped := bytes.Clone(sealed)
		flipped[len(flipped)-1] ^= 1
		wrong("tampered", x, flipped, []byte("aad"))
		wrong("truncated", x, sealed[:5], []byte("aad"))
		zb, err := s.Sealer(ctx, "b", "audit", true)
		if err != nil {
			t.Fatal(err)
		}
		wrong("other tenant", zb, sealed, []byte("aad"))
		zp, err := s.Sealer(ctx, "a", "flows", true)
		if err != nil {
			t.Fatal(err)
		}
		wrong("other purpose", zp, sealed, []byte("aad"))
		if _, err := s.Sealer(ctx, "nokey", "audit", false); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Sealer of a tenant without a data key, no create: %v; want not found", err)
		}
		if err := e.keyring.RevokeKey(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		_, err = s.Sealer(ctx, "a", "audit", false)
		wantErr(t, "Sealer(revoked)", err, errdefs.ErrPermissionDenied)
	})
}
