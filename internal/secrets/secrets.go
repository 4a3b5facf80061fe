// Package secrets is the store of the credentials the network gateway injects into a sandbox's
// requests. Values are encrypted at rest with AES-256-GCM under a per-tenant data key; the data key is
// stored only wrapped by the tenant's key-encryption key from a keys.KeyProvider (envelope encryption).
// Each ciphertext is bound (as GCM additional data) to its tenant ID, secret name and version, so a
// ciphertext moved to another secret, version or tenant does not decrypt.
//
// Only Reveal returns a value, and only the gateway calls it. Every other method reports Metadata.
// No type of this package prints a value, a data key or a ciphertext with fmt or log/slog.
package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"regexp"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys"
)

// DefaultMaxValueSize is the largest value a Store accepts when Config.MaxValueSize is zero.
const DefaultMaxValueSize = 64 << 10

const (
	sealVersion = 0x01
	nonceSize   = 12
	aadPrefix   = "airlock/secrets v1\x00"
	// updateAttempts bounds the retries of an Update that loses a race to another Update (which, with
	// replicas on one database, may come from another process); each waits a little longer, at random.
	updateAttempts = 32
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// ValidateName reports ErrInvalidArgument unless name matches [A-Za-z0-9_.-]{1,128}.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("secret name %q must match [A-Za-z0-9_.-]{1,128}: %w", name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Config configures a Store.
type Config struct {
	// Keys wraps and unwraps the tenants' data keys. Required.
	Keys keys.KeyProvider
	// Storage keeps the wrapped data keys and the ciphertexts. Required.
	Storage Storage
	// Now is the clock for created/updated times; nil means time.Now.
	Now func() time.Time
	// MaxValueSize bounds a value's size in bytes (ErrTooLarge); 0 means DefaultMaxValueSize.
	MaxValueSize int
}

// Store encrypts, stores and reveals secrets. Safe for concurrent use; it keeps no data key in memory
// between calls, so a revoked key takes effect on the next call.
type Store struct {
	keys    keys.KeyProvider
	storage Storage
	now     func() time.Time
	maxSize int
}

// New returns a Store for cfg.
func New(cfg Config) (*Store, error) {
	if cfg.Keys == nil || cfg.Storage == nil {
		return nil, fmt.Errorf("secrets: Config.Keys and Config.Storage are required: %w", errdefs.ErrInvalidArgument)
	}
	s := &Store{keys: cfg.Keys, storage: cfg.Storage, now: cfg.Now, maxSize: cfg.MaxValueSize}
	if s.now == nil {
		s.now = time.Now
	}
	if s.maxSize <= 0 {
		s.maxSize = DefaultMaxValueSize
	}
	return s, nil
}

// LogValue prints nothing of the store's contents.
func (s *Store) LogValue() slog.Value { return slog.StringValue("secrets.Store{REDACTED}") }

// Format prints nothing of the store's contents, for every verb.
func (s *Store) Format(f fmt.State, _ rune) { fmt.Fprint(f, "secrets.Store{REDACTED}") }

// Create stores a new secret at version 1 and reports its metadata. It fails with ErrAlreadyExists if
// the tenant has a secret of that name, ErrInvalidArgument for a bad name or an empty value, ErrTooLarge
// for a value over the limit, and ErrPermissionDenied if the tenant's key is revoked. The caller keeps
// ownership of value (and should clear it when done).
func (s *Store) Create(ctx context.Context, tenantID, name string, value []byte) (Metadata, error) {
	if err := s.checkArgs(tenantID, name, value); err != nil {
		return Metadata{}, fmt.Errorf("create secret: %w", err)
	}
	dek, err := s.dataKey(ctx, tenantID, true)
	if err != nil {
		return Metadata{}, fmt.Errorf("create secret %s: %w", name, err)
	}
	defer clear(dek)
	now := s.now().UTC()
	r := Record{TenantID: tenantID, Name: name, Version: 1, CreatedAt: now, UpdatedAt: now}
	if r.Ciphertext, err = seal(dek, r, value); err != nil {
		return Metadata{}, fmt.Errorf("create secret %s: %w", name, err)
	}
	if err := s.storage.CreateSecret(ctx, r); err != nil {
		return Metadata{}, fmt.Errorf("create secret %s: %w", name, err)
	}
	return r.Metadata(), nil
}

// Update replaces a secret's value, making a new version, and reports the new metadata. It fails with
// ErrNotFound if there is no such secret, and otherwise like Create.
func (s *Store) Update(ctx context.Context, tenantID, name string, value []byte) (Metadata, error) {
	if err := s.checkArgs(tenantID, name, value); err != nil {
		return Metadata{}, fmt.Errorf("update secret: %w", err)
	}
	dek, err := s.dataKey(ctx, tenantID, false)
	if errors.Is(err, errdefs.ErrNotFound) {
		return Metadata{}, fmt.Errorf("update secret %s of tenant %s: %w", name, tenantID, errdefs.ErrNotFound)
	}
	if err != nil {
		return Metadata{}, fmt.Errorf("update secret %s: %w", name, err)
	}
	defer clear(dek)
	for attempt := range updateAttempts {
		old, err := s.storage.GetSecret(ctx, tenantID, name)
		if err != nil {
			return Metadata{}, fmt.Errorf("update secret %s: %w", name, err)
		}
		r := Record{TenantID: tenantID, Name: name, Version: old.Version + 1, CreatedAt: old.CreatedAt, UpdatedAt: s.now().UTC()}
		if r.Ciphertext, err = seal(dek, r, value); err != nil {
			return Metadata{}, fmt.Errorf("update secret %s: %w", name, err)
		}
		err = s.storage.UpdateSecret(ctx, r)
		if errors.Is(err, errdefs.ErrConflict) {
			// Another Update won; build on its version, after a pause that keeps the losers apart.
			select {
			case <-time.After(time.Duration(mrand.Int64N(int64(time.Millisecond) << min(attempt, 5)))):
			case <-ctx.Done():
				return Metadata{}, fmt.Errorf("update secret %s: %w", name, ctx.Err())
			}
			continue
		}
		if err != nil {
			return Metadata{}, fmt.Errorf("update secret %s: %w", name, err)
		}
		return r.Metadata(), nil
	}
	return Metadata{}, fmt.Errorf("update secret %s: too many concurrent updates: %w", name, errdefs.ErrConflict)
}

// Delete removes a secret, or fails with ErrNotFound.
func (s *Store) Delete(ctx context.Context, tenantID, name string) error {
	if err := s.checkIDs(tenantID, name); err != nil {
		return fmt.Errorf("delete secret: %w", err)
	}
	if err := s.storage.DeleteSecret(ctx, tenantID, name); err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	return nil
}

// Get reports a secret's metadata (never its value), or ErrNotFound.
func (s *Store) Get(ctx context.Context, tenantID, name string) (Metadata, error) {
	if err := s.checkIDs(tenantID, name); err != nil {
		return Metadata{}, fmt.Errorf("get secret: %w", err)
	}
	r, err := s.storage.GetSecret(ctx, tenantID, name)
	if err != nil {
		return Metadata{}, fmt.Errorf("get secret %s: %w", name, err)
	}
	return r.Metadata(), nil
}

// List reports the metadata of the tenant's secrets, sorted by name.
func (s *Store) List(ctx context.Context, tenantID string) ([]Metadata, error) {
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	rs, err := s.storage.ListSecrets(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list secrets of tenant %s: %w", tenantID, err)
	}
	out := make([]Metadata, len(rs))
	for i, r := range rs {
		out[i] = r.Metadata()
	}
	return out, nil
}

// Reveal decrypts and returns a secret's current value, a fresh slice the caller owns and should clear
// once injected.
//
// Reveal is for the network gateway only, which puts the value into an upstream request outside the
// sandbox. It must never be reachable through the public API, the CLI, logs or anything a sandbox can
// read: a secret, once stored, is write-only for users.
//
// It fails with ErrNotFound if there is no such secret, ErrPermissionDenied if the tenant's key is
// revoked, and ErrInternal if the stored ciphertext or data key does not authenticate (tampered with, or
// moved from another secret or tenant).
func (s *Store) Reveal(ctx context.Context, tenantID, name string) ([]byte, error) {
	if err := s.checkIDs(tenantID, name); err != nil {
		return nil, fmt.Errorf("reveal secret: %w", err)
	}
	r, err := s.storage.GetSecret(ctx, tenantID, name)
	if err != nil {
		return nil, fmt.Errorf("reveal secret %s: %w", name, err)
	}
	if r.TenantID != tenantID || r.Name != name {
		return nil, fmt.Errorf("reveal secret %s: storage returned secret %s of tenant %s: %w", name, r.Name, r.TenantID, errdefs.ErrInternal)
	}
	dek, err := s.dataKey(ctx, tenantID, false)
	if err != nil {
		return nil, fmt.Errorf("reveal secret %s: %w", name, err)
	}
	defer clear(dek)
	v, err := open(dek, r)
	if err != nil {
		return nil, fmt.Errorf("reveal secret %s of tenant %s: %w", name, tenantID, err)
	}
	return v, nil
}

// MAC returns HMAC-SHA256 of msg under a key that HKDF-SHA256 derives from the tenant's data key for
// purpose: a value that any server holding the tenant's key computes again, and nobody without it can.
// It makes the tenant's data key if the tenant has none yet; with the tenant's key revoked or
// unavailable it fails as the secrets do.
func (s *Store) MAC(ctx context.Context, tenantID, purpose string, msg []byte) ([]byte, error) {
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return nil, fmt.Errorf("mac: %w", err)
	}
	dek, err := s.dataKey(ctx, tenantID, true)
	if err != nil {
		return nil, fmt.Errorf("mac for tenant %s: %w", tenantID, err)
	}
	defer clear(dek)
	sub, err := hkdf.Key(sha256.New, dek, nil, macInfo+purpose, 32)
	if err != nil {
		return nil, fmt.Errorf("mac for tenant %s: %w", tenantID, err)
	}
	defer clear(sub)
	m := hmac.New(sha256.New, sub)
	m.Write(msg)
	return m.Sum(nil), nil
}

// Sealer seals and opens one tenant's records of one purpose (log records, say) with AES-256-GCM under
// a key that HKDF-SHA256 derives from the tenant's data key: whoever holds the tenant's key reads them,
// and once it is revoked nobody does. Safe for concurrent use; it holds the derived key in memory, so
// keep it for a batch of work, not longer.
type Sealer struct {
	aead cipher.AEAD
}

// Sealer returns the tenant's sealer for purpose. It makes the tenant's data key if the tenant has none
// yet (create); with the tenant's key revoked or unavailable it fails as the secrets do
// (ErrPermissionDenied, ErrKeyUnavailable), and without a data key and !create it is ErrNotFound.
func (s *Store) Sealer(ctx context.Context, tenantID, purpose string, create bool) (*Sealer, error) {
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return nil, fmt.Errorf("sealer: %w", err)
	}
	dek, err := s.dataKey(ctx, tenantID, create)
	if err != nil {
		return nil, fmt.Errorf("sealer for tenant %s: %w", tenantID, err)
	}
	defer clear(dek)
	sub, err := hkdf.Key(sha256.New, dek, nil, sealInfo+purpose, 32)
	if err != nil {
		return nil, fmt.Errorf("sealer for tenant %s: %w", tenantID, err)
	}
	defer clear(sub)
	aead, err := newAEAD(sub)
	if err != nil {
		return nil, fmt.Errorf("sealer for tenant %s: %w", tenantID, err)
	}
	return &Sealer{aead: aead}, nil
}

// Seal returns plaintext sealed and bound to aad (which Open must be given again): a version byte, a
// random nonce, the ciphertext and its tag.
func (x *Sealer) Seal(plaintext, aad []byte) ([]byte, error) {
	out := make([]byte, 1+nonceSize, 1+nonceSize+len(plaintext)+x.aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return x.aead.Seal(out, out[1:1+nonceSize], plaintext, aad), nil
}

// Open returns what Seal sealed with aad; anything else (tampered, moved, another tenant's or
// purpose's) is an error.
func (x *Sealer) Open(sealed, aad []byte) ([]byte, error) {
	if len(sealed) < 1+nonceSize || sealed[0] != sealVersion {
		return nil, fmt.Errorf("malformed sealed record: %w", errdefs.ErrInvalidArgument)
	}
	v, err := x.aead.Open(nil, sealed[1:1+nonceSize], sealed[1+nonceSize:], aad)
	if err != nil {
		return nil, fmt.Errorf("sealed record does not authenticate (tampered with or moved): %w", errdefs.ErrInvalidArgument)
	}
	return v, nil
}

// LogValue keeps a Sealer's key out of logs.
func (x *Sealer) LogValue() slog.Value { return slog.StringValue("secrets.Sealer{REDACTED}") }

// sealInfo starts the HKDF info of Sealer's keys.
const sealInfo = "airlock/secrets sealer v1\x00"

// macInfo starts the HKDF info of MAC's keys, apart from anything else derived from a data key.
const macInfo = "airlock/secrets mac v1\x00"

func (s *Store) checkIDs(tenantID, name string) error {
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return err
	}
	return ValidateName(name)
}

func (s *Store) checkArgs(tenantID, name string, value []byte) error {
	if err := s.checkIDs(tenantID, name); err != nil {
		return err
	}
	if len(value) == 0 {
		return fmt.Errorf("empty value: %w", errdefs.ErrInvalidArgument)
	}
	if len(value) > s.maxSize {
		return fmt.Errorf("value is %d bytes, more than %d: %w", len(value), s.maxSize, errdefs.ErrTooLarge)
	}
	return nil
}

// dataKey returns tenantID's data key in the clear, making and storing one if create is set and the
// tenant has none (ErrNotFound otherwise). The caller clears it.
func (s *Store) dataKey(ctx context.Context, tenantID string, create bool) ([]byte, error) {
	k, err := s.storage.GetDataKey(ctx, tenantID)
	if errors.Is(err, errdefs.ErrNotFound) && create {
		k, err = s.newDataKey(ctx, tenantID)
	}
	if err != nil {
		return nil, err
	}
	if k.TenantID != tenantID {
		return nil, fmt.Errorf("storage returned the data key of tenant %s for tenant %s: %w", k.TenantID, tenantID, errdefs.ErrInternal)
	}
	dek, err := s.keys.UnwrapKey(ctx, tenantID, k.KeyID, k.Wrapped)
	switch {
	case errors.Is(err, errdefs.ErrPermissionDenied), errors.Is(err, errdefs.ErrKeyUnavailable),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, err
	case err != nil:
		// A stored key that does not unwrap is damage, not a bad request.
		return nil, fmt.Errorf("data key of tenant %s: %v: %w", tenantID, err, errdefs.ErrInternal)
	case len(dek) != keys.DataKeySize:
		clear(dek)
		return nil, fmt.Errorf("data key of tenant %s has %d bytes: %w", tenantID, len(dek), errdefs.ErrInternal)
	}
	return dek, nil
}

// newDataKey makes, wraps and stores a data key for tenantID, or returns the one a concurrent caller
// stored first.
func (s *Store) newDataKey(ctx context.Context, tenantID string) (DataKey, error) {
	dek, err := keys.NewDataKey()
	if err != nil {
		return DataKey{}, err
	}
	defer clear(dek)
	wrapped, keyID, err := s.keys.WrapKey(ctx, tenantID, dek)
	if err != nil {
		return DataKey{}, err
	}
	k := DataKey{TenantID: tenantID, KeyID: keyID, Wrapped: wrapped, CreatedAt: s.now().UTC()}
	err = s.storage.CreateDataKey(ctx, k)
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		return s.storage.GetDataKey(ctx, tenantID)
	}
	if err != nil {
		return DataKey{}, err
	}
	return k, nil
}

// aad binds a ciphertext to its tenant, name and version.
func aad(r Record) []byte {
	b := make([]byte, 0, len(aadPrefix)+len(r.TenantID)+len(r.Name)+10)
	b = append(b, aadPrefix...)
	b = append(b, r.TenantID...)
	b = append(b, 0)
	b = append(b, r.Name...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint64(b, uint64(r.Version))
}

func seal(dek []byte, r Record, value []byte) ([]byte, error) {
	aead, err := newAEAD(dek)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+nonceSize, 1+nonceSize+len(value)+aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return aead.Seal(out, out[1:1+nonceSize], value, aad(r)), nil
}

func open(dek []byte, r Record) ([]byte, error) {
	c := r.Ciphertext
	if len(c) < 1+nonceSize || c[0] != sealVersion {
		return nil, fmt.Errorf("malformed ciphertext: %w", errdefs.ErrInternal)
	}
	aead, err := newAEAD(dek)
	if err != nil {
		return nil, err
	}
	v, err := aead.Open(nil, c[1:1+nonceSize], c[1+nonceSize:], aad(r))
	if err != nil {
		return nil, fmt.Errorf("ciphertext does not authenticate (tampered with or moved): %w", errdefs.ErrInternal)
	}
	return v, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// RewrapDataKey wraps the tenant's data key again under its current key-encryption key (after a
// rotation) and reports whether there was one. The secrets themselves are not rewritten.
func (s *Store) RewrapDataKey(ctx context.Context, tenantID string) (bool, error) {
	old, err := s.storage.GetDataKey(ctx, tenantID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	wrapped, keyID, err := keys.Rewrap(ctx, s.keys, tenantID, old.KeyID, old.Wrapped)
	if err != nil {
		return false, fmt.Errorf("rewrap data key of tenant %s: %w", tenantID, err)
	}
	k := old
	k.KeyID, k.Wrapped = keyID, wrapped
	if err := s.storage.ReplaceDataKey(ctx, old, k); err != nil {
		return false, fmt.Errorf("rewrap data key of tenant %s: %w", tenantID, err)
	}
	return true, nil
}
