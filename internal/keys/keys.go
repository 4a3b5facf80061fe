// Package keys defines KeyProvider, the envelope-encryption interface of Airlock.
//
// Data is encrypted under data keys (DEKs); a DEK is never stored in the clear but wrapped by the
// tenant's key-encryption key (KEK), which lives in a KeyProvider: the local keyring (keys/local) by
// default, later PKCS#11 for an HSM or a KMS the customer controls. A KEK never leaves its provider.
//
// Revoking a tenant's key is how a customer cuts Airlock off: after it, UnwrapKey fails with an error
// wrapping errdefs.ErrPermissionDenied that says the key is revoked, so nothing of that tenant decrypts.
package keys

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// DataKeySize is the size in bytes of the data keys NewDataKey makes (AES-256).
const DataKeySize = 32

// MaxDataKeySize bounds the data keys a KeyProvider accepts for wrapping.
const MaxDataKeySize = 1024

// KeyProvider wraps and unwraps data keys under a tenant's key-encryption key.
//
// Implementations are safe for concurrent use. The conformance suite is keys/keystest.
type KeyProvider interface {
	// WrapKey encrypts dek under tenantID's current key-encryption key, creating that key on first use.
	// It reports the wrapped key and the ID of the KEK used, both to be stored next to the ciphertext
	// and given back to UnwrapKey. The wrapping is bound to tenantID: it only unwraps for the same tenant.
	// dek must be 1..MaxDataKeySize bytes (ErrInvalidArgument). A revoked tenant key fails with
	// ErrPermissionDenied.
	WrapKey(ctx context.Context, tenantID string, dek []byte) (wrapped []byte, keyID string, err error)

	// UnwrapKey decrypts a key WrapKey wrapped for tenantID under keyID and returns the data key, a
	// fresh slice the caller owns (and should clear when done). It fails with ErrPermissionDenied if the
	// key is revoked, ErrNotFound if tenantID has no key keyID, and ErrInvalidArgument if wrapped is
	// malformed or does not authenticate (tampered, or wrapped for another tenant or key).
	UnwrapKey(ctx context.Context, tenantID, keyID string, wrapped []byte) ([]byte, error)
}

// Revoker is implemented by providers that can revoke a tenant's key themselves. (With a KMS the
// customer controls, revocation happens there, and the provider merely reports it.)
type Revoker interface {
	// RevokeKey revokes every key-encryption key of tenantID. Afterwards WrapKey and UnwrapKey for the
	// tenant fail with ErrPermissionDenied. Revoking a tenant with no key, or one already revoked,
	// succeeds and also blocks future WrapKey calls.
	RevokeKey(ctx context.Context, tenantID string) error
}

// NewDataKey returns a fresh random data key of DataKeySize bytes.
func NewDataKey() ([]byte, error) {
	k := make([]byte, DataKeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("new data key: %w", err)
	}
	return k, nil
}

// RevokedError returns the error providers report for a revoked (or destroyed) key: it names the
// tenant and key and wraps errdefs.ErrKeyUnavailable and errdefs.ErrPermissionDenied. keyID may be
// empty.
func RevokedError(tenantID, keyID string) error {
	if keyID == "" {
		return &KeyError{msg: fmt.Sprintf("key of tenant %s is revoked", tenantID), cause: errdefs.ErrPermissionDenied}
	}
	return &KeyError{msg: fmt.Sprintf("key %s of tenant %s is revoked", keyID, tenantID), cause: errdefs.ErrPermissionDenied}
}

// DestroyedError returns the error providers report for a key that is gone from where it was kept
// (destroyed in the customer's token): like RevokedError, it wraps errdefs.ErrKeyUnavailable and
// errdefs.ErrPermissionDenied.
func DestroyedError(tenantID, keyID string) error {
	return &KeyError{msg: fmt.Sprintf("key %s of tenant %s is revoked: it is no longer in the token", keyID, tenantID), cause: errdefs.ErrPermissionDenied}
}

// UnreachableError returns the error providers report when the tenant's key cannot be reached now (the
// HSM or KMS is down, the PIN is refused): it wraps errdefs.ErrKeyUnavailable, errdefs.ErrUnavailable
// and err.
func UnreachableError(tenantID string, err error) error {
	return &KeyError{msg: fmt.Sprintf("key of tenant %s cannot be reached: %v", tenantID, err), cause: errdefs.ErrUnavailable, err: err}
}

// KeyError is a tenant's key being unavailable: errors.Is matches errdefs.ErrKeyUnavailable and its
// cause (errdefs.ErrPermissionDenied or errdefs.ErrUnavailable).
type KeyError struct {
	msg   string
	cause error
	err   error
}

func (e *KeyError) Error() string { return e.msg }

// Unwrap reports ErrKeyUnavailable, the cause, and the underlying error if any.
func (e *KeyError) Unwrap() []error {
	out := []error{errdefs.ErrKeyUnavailable, e.cause}
	if e.err != nil {
		out = append(out, e.err)
	}
	return out
}

// Checker is implemented by providers that can tell whether a tenant's key can be used now.
type Checker interface {
	// Check returns nil if tenantID's current key can wrap and unwrap now (a tenant with no key yet
	// can), or the error a wrap would get: wrapping errdefs.ErrKeyUnavailable when revoked or
	// unreachable.
	Check(ctx context.Context, tenantID string) error
}

// Owner is implemented by providers whose key IDs can be told apart from other providers'.
type Owner interface {
	// Owns reports whether keyID is one of this provider's key IDs.
	Owns(keyID string) bool
}

// Rotator is implemented by providers that can make a new current key for a tenant.
type Rotator interface {
	// RotateKey makes a new key-encryption key the tenant's current one and reports its ID; keys
	// wrapped under older ones still unwrap.
	RotateKey(ctx context.Context, tenantID string) (string, error)
}

// CheckWrapArgs checks what every WrapKey checks first: ctx not done, a plausible tenant ID, and a data
// key of 1..MaxDataKeySize bytes (ErrInvalidArgument).
func CheckWrapArgs(ctx context.Context, tenantID string, dek []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateTenantID(tenantID); err != nil {
		return fmt.Errorf("wrap key: %w", err)
	}
	if len(dek) == 0 || len(dek) > MaxDataKeySize {
		return fmt.Errorf("wrap key: data key must be 1..%d bytes: %w", MaxDataKeySize, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ValidateTenantID reports ErrInvalidArgument unless id is a plausible tenant ID: 1..128 bytes with no
// control characters.
func ValidateTenantID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("tenant ID must be 1..128 bytes: %w", errdefs.ErrInvalidArgument)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("tenant ID has a control character: %w", errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// Retirer is implemented by providers that can stop requiring a tenant's older keys once every data
// key was re-wrapped under the current one.
type Retirer interface {
	// RetireOldKeys marks every key of the tenant but the current one retired: Check no longer needs
	// them (their owner may destroy them); unwrapping under them is still tried.
	RetireOldKeys(ctx context.Context, tenantID string) error
}

// Rewrap unwraps a data key wrapped under keyID and wraps it again under the tenant's current
// key-encryption key, for a rotation that re-wraps data keys without rewriting data. The data key never
// leaves this function.
func Rewrap(ctx context.Context, p KeyProvider, tenantID, keyID string, wrapped []byte) ([]byte, string, error) {
	dek, err := p.UnwrapKey(ctx, tenantID, keyID, wrapped)
	if err != nil {
		return nil, "", err
	}
	defer clear(dek)
	return p.WrapKey(ctx, tenantID, dek)
}
