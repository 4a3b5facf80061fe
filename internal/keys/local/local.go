// Package local is the default KeyProvider: a keyring holding one AES-256 key-encryption key per tenant
// (more after RotateKey), wrapping data keys with AES-256-GCM.
//
// The keyring keeps its keys either in the Store (NewInStore: one document per tenant, encrypted under a
// master key that every control-plane replica is given, so that all replicas share one keyring), or in a
// file of its own (New: one process only). Either is only as safe as the master key's or the file's
// permissions: files are 0600 in 0700 directories, and one readable by group or others is refused.
// Customers who need the KEK off the host use an HSM or KMS provider instead. Revoking a tenant destroys
// its key material (only the key IDs and the fact of revocation stay), so revocation is permanent.
package local

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
	"github.com/airlockrun/airlock/internal/keys"
)

// FileName is the keyring's file name inside its directory.
const FileName = "keyring.json"

const (
	kekSize     = 32
	formatV1    = 1
	nonceSize   = 12
	wrapVersion = 0x01
	aadPrefix   = "airlock/keys/local v1\x00"
)

// Keyring is a KeyProvider keeping its keys in a file or in the Store. It also implements keys.Revoker.
// Safe for concurrent use.
type Keyring struct {
	b backing
}

var (
	_ keys.KeyProvider = (*Keyring)(nil)
	_ keys.Revoker     = (*Keyring)(nil)
	_ keys.Rotator     = (*Keyring)(nil)
	_ keys.Checker     = (*Keyring)(nil)
	_ keys.Owner       = (*Keyring)(nil)
)

// backing keeps the tenants' key state.
type backing interface {
	// load returns a copy of the tenant's state (nil if it has none) and its version.
	load(ctx context.Context, tenantID string) (*tenantState, int64, error)
	// save replaces the tenant's state if its version is still version (0: it has none); ErrConflict
	// otherwise.
	save(ctx context.Context, tenantID string, ts *tenantState, version int64) error
	// describe names where the keys are, for logs.
	describe() string
}

type ringFile struct {
	Version int                     `json:"version"`
	Tenants map[string]*tenantState `json:"tenants"`
}

type tenantState struct {
	Current   string     `json:"current,omitempty"`
	Keys      []keyEntry `json:"keys"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

type keyEntry struct {
	ID        string    `json:"id"`
	Key       []byte    `json:"key,omitempty"` // nil once revoked
	CreatedAt time.Time `json:"created_at"`
}

// clone returns a deep copy of ts (nil for nil).
func (ts *tenantState) clone() *tenantState {
	if ts == nil {
		return nil
	}
	out := &tenantState{Current: ts.Current, RevokedAt: ts.RevokedAt}
	for _, e := range ts.Keys {
		e.Key = append([]byte(nil), e.Key...)
		if len(e.Key) == 0 {
			e.Key = nil
		}
		out.Keys = append(out.Keys, e)
	}
	return out
}

// wipe clears the key material of ts.
func (ts *tenantState) wipe() {
	if ts == nil {
		return
	}
	for _, e := range ts.Keys {
		clear(e.Key)
	}
}

// validate checks the state read for tenant.
func (ts *tenantState) validate(tenant string) error {
	if ts == nil {
		return fmt.Errorf("tenant %s: no state", tenant)
	}
	for _, e := range ts.Keys {
		if ts.RevokedAt == nil && len(e.Key) != kekSize {
			return fmt.Errorf("key %s of tenant %s has %d bytes", e.ID, tenant, len(e.Key))
		}
	}
	if ts.RevokedAt == nil && ts.Current != "" && ts.find(ts.Current) == nil {
		return fmt.Errorf("tenant %s: current key %s is missing", tenant, ts.Current)
	}
	return nil
}

// New opens the keyring file in dir, reading it if there is one. Nothing is created until the first key
// is: then dir is made (0700) and the file written (0600). New fails if the file exists but is corrupt or
// readable by group or others. One such Keyring owns its directory: two processes must not share one.
func New(dir string) (*Keyring, error) {
	if dir == "" {
		return nil, fmt.Errorf("local keyring: empty directory: %w", errdefs.ErrInvalidArgument)
	}
	path := filepath.Join(dir, FileName)
	ring, err := readRingFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		ring = ringFile{Version: formatV1, Tenants: map[string]*tenantState{}}
	} else if err != nil {
		return nil, err
	}
	return &Keyring{b: &fileBacking{path: path, ring: ring, versions: map[string]int64{}}}, nil
}

// readRingFile reads and checks a keyring file; fs.ErrNotExist if there is none.
func readRingFile(path string) (ringFile, error) {
	var ring ringFile
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ring, err
	}
	if err != nil {
		return ring, fmt.Errorf("local keyring: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ring, fmt.Errorf("local keyring: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return ring, fmt.Errorf("local keyring: %s has mode %v; want 0600: %w", path, st.Mode().Perm(), errdefs.ErrFailedPrecondition)
	}
	if err := json.NewDecoder(f).Decode(&ring); err != nil {
		return ring, fmt.Errorf("local keyring: read %s: %w", path, err)
	}
	if ring.Version != formatV1 {
		return ring, fmt.Errorf("local keyring: %s has format version %d; want %d", path, ring.Version, formatV1)
	}
	if ring.Tenants == nil {
		ring.Tenants = map[string]*tenantState{}
	}
	for tenant, ts := range ring.Tenants {
		if err := ts.validate(tenant); err != nil {
			return ring, fmt.Errorf("local keyring: %s: %w", path, err)
		}
	}
	return ring, nil
}

// fileBacking keeps every tenant's state in one file, and in memory.
type fileBacking struct {
	path string

	mu sync.Mutex
	// ring is the state as last written to path; versions counts each tenant's saves since New.
	ring     ringFile
	versions map[string]int64
}

func (f *fileBacking) load(ctx context.Context, tenantID string) (*tenantState, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ring.Tenants[tenantID].clone(), f.versions[tenantID], nil
}

func (f *fileBacking) save(ctx context.Context, tenantID string, ts *tenantState, version int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.versions[tenantID] != version {
		return errdefs.ErrConflict
	}
	old := f.ring.Tenants[tenantID]
	f.ring.Tenants[tenantID] = ts.clone()
	data, err := json.Marshal(&f.ring)
	if err == nil {
		err = fsutil.WriteFileAtomic(f.path, data, 0o600)
		clear(data)
	}
	if err != nil {
		f.ring.Tenants[tenantID].wipe()
		if old == nil {
			delete(f.ring.Tenants, tenantID)
		} else {
			f.ring.Tenants[tenantID] = old
		}
		return err
	}
	old.wipe()
	f.versions[tenantID]++
	return nil
}

func (f *fileBacking) describe() string { return f.path }

// maxUpdateTries bounds the read-modify-write attempts of one change that keep losing to others.
const maxUpdateTries = 50

// update applies fn to the tenant's state (nil if it has none) and saves what fn returns (nothing if
// it returns nil: no change), again from a fresh read each time another writer got in first.
func (k *Keyring) update(ctx context.Context, tenantID string, fn func(old *tenantState) (*tenantState, error)) error {
	for range maxUpdateTries {
		old, version, err := k.b.load(ctx, tenantID)
		if err != nil {
			return err
		}
		ts, err := fn(old)
		if err != nil || ts == nil {
			old.wipe()
			return err
		}
		err = k.b.save(ctx, tenantID, ts, version)
		old.wipe()
		ts.wipe()
		if !errors.Is(err, errdefs.ErrConflict) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return fmt.Errorf("tenant %s's keys changed %d times while this change was tried: %w", tenantID, maxUpdateTries, errdefs.ErrConflict)
}

// WrapKey implements keys.KeyProvider.
func (k *Keyring) WrapKey(ctx context.Context, tenantID string, dek []byte) ([]byte, string, error) {
	if err := keys.CheckWrapArgs(ctx, tenantID, dek); err != nil {
		return nil, "", err
	}
	ts, _, err := k.b.load(ctx, tenantID)
	if err != nil {
		return nil, "", fmt.Errorf("wrap key for tenant %s: %w", tenantID, err)
	}
	defer func() { ts.wipe() }()
	if ts != nil && ts.RevokedAt != nil {
		return nil, "", fmt.Errorf("wrap key: %w", keys.RevokedError(tenantID, ""))
	}
	if ts == nil || ts.Current == "" {
		// The tenant's first key; a racing writer's may win, and then it is the one used.
		err := k.update(ctx, tenantID, func(old *tenantState) (*tenantState, error) {
			if old != nil && (old.RevokedAt != nil || old.Current != "") {
				return nil, nil // another writer's first key won, or the tenant was revoked meanwhile
			}
			return withNewKey(old)
		})
		if err != nil {
			return nil, "", fmt.Errorf("wrap key for tenant %s: %w", tenantID, err)
		}
		ts.wipe()
		if ts, _, err = k.b.load(ctx, tenantID); err != nil {
			return nil, "", fmt.Errorf("wrap key for tenant %s: %w", tenantID, err)
		}
		if ts == nil || ts.RevokedAt != nil || ts.Current == "" {
			return nil, "", fmt.Errorf("wrap key: %w", keys.RevokedError(tenantID, ""))
		}
	}
	e := ts.find(ts.Current)
	aead, err := newAEAD(e.Key)
	if err != nil {
		return nil, "", fmt.Errorf("wrap key: %w", err)
	}
	out := make([]byte, 1+nonceSize, 1+nonceSize+len(dek)+aead.Overhead())
	out[0] = wrapVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, "", fmt.Errorf("wrap key: %w", err)
	}
	out = aead.Seal(out, out[1:1+nonceSize], dek, aad(tenantID, e.ID))
	return out, e.ID, nil
}

// UnwrapKey implements keys.KeyProvider.
func (k *Keyring) UnwrapKey(ctx context.Context, tenantID, keyID string, wrapped []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return nil, fmt.Errorf("unwrap key: %w", err)
	}
	ts, _, err := k.b.load(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("unwrap key of tenant %s: %w", tenantID, err)
	}
	defer ts.wipe()
	var kek []byte
	revoked := false
	if ts != nil {
		revoked = ts.RevokedAt != nil
		if e := ts.find(keyID); e != nil && e.Key != nil {
			kek = e.Key
		}
	}
	switch {
	case revoked:
		return nil, fmt.Errorf("unwrap key: %w", keys.RevokedError(tenantID, keyID))
	case kek == nil:
		return nil, fmt.Errorf("unwrap key: tenant %s has no key %q: %w", tenantID, keyID, errdefs.ErrNotFound)
	case len(wrapped) < 1+nonceSize || wrapped[0] != wrapVersion:
		return nil, fmt.Errorf("unwrap key: malformed wrapped key: %w", errdefs.ErrInvalidArgument)
	}
	aead, err := newAEAD(kek)
	if err != nil {
		return nil, fmt.Errorf("unwrap key: %w", err)
	}
	dek, err := aead.Open(nil, wrapped[1:1+nonceSize], wrapped[1+nonceSize:], aad(tenantID, keyID))
	if err != nil {
		return nil, fmt.Errorf("unwrap key: wrapped key does not authenticate for tenant %s key %s: %w", tenantID, keyID, errdefs.ErrInvalidArgument)
	}
	return dek, nil
}

// RevokeKey implements keys.Revoker: it marks tenantID revoked and deletes its key material. It cannot
// be undone.
func (k *Keyring) RevokeKey(ctx context.Context, tenantID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	err := k.update(ctx, tenantID, func(old *tenantState) (*tenantState, error) {
		if old != nil && old.RevokedAt != nil {
			return nil, nil
		}
		now := time.Now().UTC()
		ts := &tenantState{RevokedAt: &now}
		if old != nil {
			for _, e := range old.Keys {
				ts.Keys = append(ts.Keys, keyEntry{ID: e.ID, CreatedAt: e.CreatedAt})
			}
		}
		return ts, nil
	})
	if err != nil {
		return fmt.Errorf("revoke key of tenant %s: %w", tenantID, err)
	}
	return nil
}

// RotateKey makes a new key-encryption key the tenant's current one and reports its ID. Later WrapKey
// calls use it; keys wrapped under older ones still unwrap. A revoked tenant fails with
// ErrPermissionDenied.
func (k *Keyring) RotateKey(ctx context.Context, tenantID string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return "", fmt.Errorf("rotate key: %w", err)
	}
	var id string
	err := k.update(ctx, tenantID, func(old *tenantState) (*tenantState, error) {
		if old != nil && old.RevokedAt != nil {
			return nil, keys.RevokedError(tenantID, "")
		}
		ts, err := withNewKey(old)
		if err == nil {
			id = ts.Current
		}
		return ts, err
	})
	if err != nil {
		if errors.Is(err, errdefs.ErrPermissionDenied) {
			return "", fmt.Errorf("rotate key: %w", err)
		}
		return "", fmt.Errorf("rotate key of tenant %s: %w", tenantID, err)
	}
	return id, nil
}

// LogValue prints where the keys are only.
func (k *Keyring) LogValue() slog.Value {
	return slog.GroupValue(slog.String("path", k.b.describe()), slog.String("keys", "REDACTED"))
}

// Format prints where the keys are only, for every verb, so no key is printed by accident.
func (k *Keyring) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "local.Keyring{path: %q, keys: REDACTED}", k.b.describe())
}

// withNewKey returns a copy of old with a fresh key added and made current.
func withNewKey(old *tenantState) (*tenantState, error) {
	key := make([]byte, kekSize)
	idb := make([]byte, 8)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if _, err := rand.Read(idb); err != nil {
		return nil, err
	}
	ts := old.clone()
	if ts == nil {
		ts = &tenantState{}
	}
	id := "lk_" + hex.EncodeToString(idb)
	ts.Keys = append(ts.Keys, keyEntry{ID: id, Key: key, CreatedAt: time.Now().UTC()})
	ts.Current = id
	return ts, nil
}

func (ts *tenantState) find(id string) *keyEntry {
	for i := range ts.Keys {
		if ts.Keys[i].ID == id {
			return &ts.Keys[i]
		}
	}
	return nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// aad binds a wrapped key to its tenant and key ID.
func aad(tenantID, keyID string) []byte {
	return []byte(aadPrefix + tenantID + "\x00" + keyID)
}

// Owns implements keys.Owner: the keyring's key IDs start with "lk_".
func (k *Keyring) Owns(keyID string) bool { return strings.HasPrefix(keyID, "lk_") }

// Check implements keys.Checker: only a revoked tenant fails with ErrKeyUnavailable.
func (k *Keyring) Check(ctx context.Context, tenantID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ts, _, err := k.b.load(ctx, tenantID)
	if err != nil {
		// The Store failing now is not the key being gone: the key check loop must not stop the
		// tenant's sandboxes over a database hiccup.
		return fmt.Errorf("check key of tenant %s: %w", tenantID, err)
	}
	defer ts.wipe()
	if ts != nil && ts.RevokedAt != nil {
		return keys.RevokedError(tenantID, "")
	}
	return nil
}
