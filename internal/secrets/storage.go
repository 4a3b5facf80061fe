package secrets

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Storage is where a Store keeps its ciphertext records and each tenant's wrapped data key. It sees
// nothing in the clear. The control plane's Store implements it; NewMemStorage and NewFileStorage are
// the stand-alone ones. Implementations are safe for concurrent use and keep tenants apart: every
// method is scoped by tenant ID. The conformance suite is secrets/storagetest.
//
// Implementations copy byte slices they are given and return copies the caller may change.
type Storage interface {
	// GetDataKey reports tenantID's wrapped data key, or ErrNotFound.
	GetDataKey(ctx context.Context, tenantID string) (DataKey, error)
	// CreateDataKey stores k as its tenant's data key, or fails with ErrAlreadyExists if the tenant has
	// one (so two racing writers agree on one key).
	CreateDataKey(ctx context.Context, k DataKey) error
	// ReplaceDataKey replaces the tenant's wrapped data key with k (the same data key wrapped anew, after
	// a key rotation), if and only if the stored one still has KeyID oldKeyID and the same Wrapped as
	// old (ErrConflict otherwise). ErrNotFound if the tenant has none.
	ReplaceDataKey(ctx context.Context, old, k DataKey) error

	// GetSecret reports the record of a secret, or ErrNotFound.
	GetSecret(ctx context.Context, tenantID, name string) (Record, error)
	// CreateSecret stores a new record, or fails with ErrAlreadyExists if the name is taken.
	CreateSecret(ctx context.Context, r Record) error
	// UpdateSecret replaces a record; r.Version must be the stored version plus one (ErrConflict
	// otherwise: a concurrent update won). ErrNotFound if there is no such secret.
	UpdateSecret(ctx context.Context, r Record) error
	// DeleteSecret removes a secret, or fails with ErrNotFound.
	DeleteSecret(ctx context.Context, tenantID, name string) error
	// ListSecrets reports the tenant's records sorted by name (empty, not an error, for an unknown tenant).
	ListSecrets(ctx context.Context, tenantID string) ([]Record, error)
}

// DataKey is a tenant's data key as stored: wrapped by the tenant's key-encryption key.
type DataKey struct {
	TenantID  string    `json:"tenant_id"`
	KeyID     string    `json:"key_id"`  // the KeyProvider's ID of the key-encryption key
	Wrapped   []byte    `json:"wrapped"` // the wrapped data key
	CreatedAt time.Time `json:"created_at"`
}

// Record is a secret as stored: its metadata and the sealed value.
type Record struct {
	TenantID   string    `json:"tenant_id"`
	Name       string    `json:"name"`
	Version    int64     `json:"version"`    // 1 at create, +1 per update
	Ciphertext []byte    `json:"ciphertext"` // format byte, nonce, AES-256-GCM sealed value
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// Metadata is what anyone but the gateway may learn about a secret. It never holds the value.
type Metadata struct {
	TenantID  string    `json:"tenant_id"`
	Name      string    `json:"name"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Metadata reports r without its ciphertext.
func (r Record) Metadata() Metadata {
	return Metadata{TenantID: r.TenantID, Name: r.Name, Version: r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// LogValue prints the record's metadata; the ciphertext is REDACTED.
func (r Record) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("tenant_id", r.TenantID), slog.String("name", r.Name), slog.Int64("version", r.Version),
		slog.String("ciphertext", "REDACTED"))
}

// Format prints the record's metadata with the ciphertext REDACTED, for every verb.
func (r Record) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "secrets.Record{TenantID: %q, Name: %q, Version: %d, Ciphertext: REDACTED, CreatedAt: %s, UpdatedAt: %s}",
		r.TenantID, r.Name, r.Version, r.CreatedAt.Format(time.RFC3339Nano), r.UpdatedAt.Format(time.RFC3339Nano))
}

// LogValue prints the data key's tenant and key ID; the wrapped key is REDACTED.
func (k DataKey) LogValue() slog.Value {
	return slog.GroupValue(slog.String("tenant_id", k.TenantID), slog.String("key_id", k.KeyID), slog.String("wrapped", "REDACTED"))
}

// Format prints the data key's tenant and key ID with the wrapped key REDACTED, for every verb.
func (k DataKey) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "secrets.DataKey{TenantID: %q, KeyID: %q, Wrapped: REDACTED, CreatedAt: %s}",
		k.TenantID, k.KeyID, k.CreatedAt.Format(time.RFC3339Nano))
}

func (r Record) clone() Record {
	r.Ciphertext = append([]byte(nil), r.Ciphertext...)
	return r
}

func (k DataKey) clone() DataKey {
	k.Wrapped = append([]byte(nil), k.Wrapped...)
	return k
}
