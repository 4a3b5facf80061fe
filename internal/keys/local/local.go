// Package local is the default KeyProvider: a keyring file on the node's disk holding one AES-256
// key-encryption key per tenant (more after RotateKey), wrapping data keys with AES-256-GCM.
//
// The keyring is only as safe as the file's permissions: the directory is created 0700 and the file
// 0600, and a keyring file readable by group or others is refused. Customers who need the KEK off the
// host use an HSM or KMS provider instead. Revoking a tenant destroys its key material (the file keeps
// only the key IDs and the fact of revocation), so revocation is permanent.
//
// One Keyring owns its directory: two processes must not share one.
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

// Keyring is a file-backed KeyProvider. It also implements keys.Revoker. Safe for concurrent use.
type Keyring struct {
	path string

	mu sync.Mutex
	// ring is the keyring's state, as last written to path.
	ring ringFile
}

var (
	_ keys.KeyProvider = (*Keyring)(nil)
	_ keys.Revoker     = (*Keyring)(nil)
	_ keys.Rotator     = (*Keyring)(nil)
	_ keys.Checker     = (*Keyring)(nil)
	_ keys.Owner       = (*Keyring)(nil)
)

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

// New opens the keyring in dir, reading its file if there is one. Nothing is created until the first
// key is: then dir is made (0700) and the file written (0600). New fails if the file exists but is
// corrupt or readable by group or others.
func New(dir string) (*Keyring, error) {
	if dir == "" {
		return nil, fmt.Errorf("local keyring: empty directory: %w", errdefs.ErrInvalidArgument)
	}
	k := &Keyring{path: filepath.Join(dir, FileName), ring: ringFile{Version: formatV1, Tenants: map[string]*tenantState{}}}
	f, err := os.Open(k.path)
	if errors.Is(err, fs.ErrNotExist) {
		return k, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local keyring: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("local keyring: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("local keyring: %s has mode %v; want 0600: %w", k.path, st.Mode().Perm(), errdefs.ErrFailedPrecondition)
	}
	var ring ringFile
	if err := json.NewDecoder(f).Decode(&ring); err != nil {
		return nil, fmt.Errorf("local keyring: read %s: %w", k.path, err)
	}
	if ring.Version != formatV1 {
		return nil, fmt.Errorf("local keyring: %s has format version %d; want %d", k.path, ring.Version, formatV1)
	}
	if ring.Tenants == nil {
		ring.Tenants = map[string]*tenantState{}
	}
	for tenant, ts := range ring.Tenants {
		for _, e := range ts.Keys {
			if ts.RevokedAt == nil && len(e.Key) != kekSize {
				return nil, fmt.Errorf("local keyring: key %s of tenant %s has %d bytes", e.ID, tenant, len(e.Key))
			}
		}
	}
	k.ring = ring
	return k, nil
}

// WrapKey implements keys.KeyProvider.
func (k *Keyring) WrapKey(ctx context.Context, tenantID string, dek []byte) ([]byte, string, error) {
	if err := keys.CheckWrapArgs(ctx, tenantID, dek); err != nil {
		return nil, "", err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	ts := k.ring.Tenants[tenantID]
	if ts != nil && ts.RevokedAt != nil {
		return nil, "", fmt.Errorf("wrap key: %w", keys.RevokedError(tenantID, ""))
	}
	if ts == nil || ts.Current == "" {
		if _, err := k.newKeyLocked(tenantID); err != nil {
			return nil, "", fmt.Errorf("wrap key for tenant %s: %w", tenantID, err)
		}
		ts = k.ring.Tenants[tenantID]
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
	k.mu.Lock()
	ts := k.ring.Tenants[tenantID]
	var kek []byte
	revoked := false
	if ts != nil {
		revoked = ts.RevokedAt != nil
		if e := ts.find(keyID); e != nil && e.Key != nil {
			kek = append([]byte(nil), e.Key...) // RevokeKey clears the original
		}
	}
	k.mu.Unlock()
	switch {
	case revoked:
		return nil, fmt.Errorf("unwrap key: %w", keys.RevokedError(tenantID, keyID))
	case kek == nil:
		return nil, fmt.Errorf("unwrap key: tenant %s has no key %q: %w", tenantID, keyID, errdefs.ErrNotFound)
	case len(wrapped) < 1+nonceSize || wrapped[0] != wrapVersion:
		return nil, fmt.Errorf("unwrap key: malformed wrapped key: %w", errdefs.ErrInvalidArgument)
	}
	defer clear(kek)
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

// RevokeKey implements keys.Revoker: it marks tenantID revoked and deletes its key material from
// the keyring file. It cannot be undone.
func (k *Keyring) RevokeKey(ctx context.Context, tenantID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	old := k.ring.Tenants[tenantID]
	if old != nil && old.RevokedAt != nil {
		return nil
	}
	now := time.Now().UTC()
	ts := &tenantState{RevokedAt: &now}
	if old != nil {
		for _, e := range old.Keys {
			ts.Keys = append(ts.Keys, keyEntry{ID: e.ID, CreatedAt: e.CreatedAt})
		}
	}
	k.ring.Tenants[tenantID] = ts
	if err := k.saveLocked(); err != nil {
		k.restoreLocked(tenantID, old)
		return fmt.Errorf("revoke key of tenant %s: %w", tenantID, err)
	}
	if old != nil {
		for _, e := range old.Keys {
			clear(e.Key)
		}
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
	k.mu.Lock()
	defer k.mu.Unlock()
	if ts := k.ring.Tenants[tenantID]; ts != nil && ts.RevokedAt != nil {
		return "", fmt.Errorf("rotate key: %w", keys.RevokedError(tenantID, ""))
	}
	id, err := k.newKeyLocked(tenantID)
	if err != nil {
		return "", fmt.Errorf("rotate key of tenant %s: %w", tenantID, err)
	}
	return id, nil
}

// LogValue prints the keyring's path only.
func (k *Keyring) LogValue() slog.Value {
	return slog.GroupValue(slog.String("path", k.path), slog.String("keys", "REDACTED"))
}

// Format prints the keyring's path only, for every verb, so no key is printed by accident.
func (k *Keyring) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "local.Keyring{path: %q, keys: REDACTED}", k.path)
}

// newKeyLocked adds a fresh key to tenantID, makes it current and saves the keyring.
func (k *Keyring) newKeyLocked(tenantID string) (string, error) {
	key := make([]byte, kekSize)
	idb := make([]byte, 8)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	if _, err := rand.Read(idb); err != nil {
		return "", err
	}
	old := k.ring.Tenants[tenantID]
	ts := &tenantState{}
	if old != nil {
		ts.Keys = append(ts.Keys, old.Keys...)
	}
	id := "lk_" + hex.EncodeToString(idb)
	ts.Keys = append(ts.Keys, keyEntry{ID: id, Key: key, CreatedAt: time.Now().UTC()})
	ts.Current = id
	k.ring.Tenants[tenantID] = ts
	if err := k.saveLocked(); err != nil {
		k.restoreLocked(tenantID, old)
		return "", err
	}
	return id, nil
}

func (k *Keyring) restoreLocked(tenantID string, old *tenantState) {
	if old == nil {
		delete(k.ring.Tenants, tenantID)
	} else {
		k.ring.Tenants[tenantID] = old
	}
}

// saveLocked writes the keyring atomically: a temporary file in the same directory, synced, renamed
// over the old one, and the directory synced.
func (k *Keyring) saveLocked() error {
	data, err := json.Marshal(&k.ring)
	if err != nil {
		return err
	}
	defer clear(data)
	return fsutil.WriteFileAtomic(k.path, data, 0o600)
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

// Check implements keys.Checker: only a revoked tenant fails.
func (k *Keyring) Check(ctx context.Context, tenantID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if ts := k.ring.Tenants[tenantID]; ts != nil && ts.RevokedAt != nil {
		return keys.RevokedError(tenantID, "")
	}
	return nil
}
