package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// A Grant carries one tenant's snapshot subkeys to where a snapshot is written or read without the
// tenant's key provider: a node. The control plane, which holds the provider, unwraps the tenant's data
// key (Store.Grant: a revoked key is refused there), derives the subkeys and hands them over for one
// operation; the node uses them with a Store of its own (no key provider) through NewWriterWith,
// RestoreWith and ManifestWith, and clears them when the operation ends. The data key itself never
// leaves the Store that unwrapped it.
//
// A Grant's subkeys can write and read every snapshot of its tenant, so it travels only to nodes of
// the cluster, over their authenticated channel, and is never logged or kept.
type Grant struct {
	tenant                 string
	chunk, manifest, idKey []byte
}

// grantSize is the length of a marshalled Grant: the three 32-byte subkeys.
const grantSize = 3 * 32

// Grant unwraps tenantID's data key and returns its subkeys for one operation elsewhere. With create
// set, a tenant without a data key gets one (a first snapshot); otherwise that is ErrNotFound. A
// revoked key is ErrPermissionDenied. The caller clears the Grant.
func (s *Store) Grant(ctx context.Context, tenantID string, create bool) (*Grant, error) {
	if err := ValidateTenantID(tenantID); err != nil {
		return nil, fmt.Errorf("snapshot grant: %w", err)
	}
	rec, err := s.dataKeyRecord(ctx, tenantID)
	if errors.Is(err, errdefs.ErrNotFound) && create {
		rec, err = s.newDataKey(ctx, tenantID)
	}
	if err != nil {
		return nil, err
	}
	dek, err := s.unwrap(ctx, rec)
	if err != nil {
		return nil, err
	}
	defer clear(dek)
	ck, mk, ik, err := subkeys(dek, tenantID)
	if err != nil {
		return nil, err
	}
	return &Grant{tenant: tenantID, chunk: ck, manifest: mk, idKey: ik}, nil
}

// Tenant names the tenant whose snapshots the Grant opens.
func (g *Grant) Tenant() string { return g.tenant }

// Clear wipes the Grant's subkeys; a cleared Grant opens nothing.
func (g *Grant) Clear() {
	if g == nil {
		return
	}
	clear(g.chunk)
	clear(g.manifest)
	clear(g.idKey)
	g.chunk, g.manifest, g.idKey = nil, nil, nil
}

// MarshalBinary returns the subkeys, for the node API only.
func (g *Grant) MarshalBinary() ([]byte, error) {
	if g == nil || len(g.chunk) != 32 {
		return nil, fmt.Errorf("snapshot grant is cleared: %w", errdefs.ErrFailedPrecondition)
	}
	b := make([]byte, 0, grantSize)
	b = append(b, g.chunk...)
	b = append(b, g.manifest...)
	return append(b, g.idKey...), nil
}

// UnmarshalGrant returns the Grant of tenantID that MarshalBinary made into b. A Grant given for one
// tenant does not open another's snapshots: the subkeys were derived for its tenant ID, which the
// ciphertexts' additional data binds.
func UnmarshalGrant(tenantID string, b []byte) (*Grant, error) {
	if err := ValidateTenantID(tenantID); err != nil {
		return nil, fmt.Errorf("snapshot grant: %w", err)
	}
	if len(b) != grantSize {
		return nil, fmt.Errorf("snapshot grant has %d bytes, not %d: %w", len(b), grantSize, errdefs.ErrInvalidArgument)
	}
	c := append([]byte(nil), b...)
	return &Grant{tenant: tenantID, chunk: c[:32:32], manifest: c[32:64:64], idKey: c[64:]}, nil
}

// LogValue prints the tenant only.
func (g *Grant) LogValue() slog.Value {
	return slog.GroupValue(slog.String("tenant", g.tenant), slog.String("keys", "REDACTED"))
}

// Format prints the tenant only, for every verb.
func (g *Grant) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "snapshot.Grant{tenant: %s, keys: REDACTED}", g.tenant)
}

// keys returns fresh tenantKeys of the Grant's subkeys, which the caller clears.
func (g *Grant) keys() (*tenantKeys, error) {
	if g == nil || len(g.chunk) != 32 {
		return nil, fmt.Errorf("snapshot grant is cleared: %w", errdefs.ErrFailedPrecondition)
	}
	return keysOf(g.tenant, g.chunk, g.manifest, g.idKey)
}

// NewWriterWith is NewWriter with the tenant's subkeys from g instead of the key provider (which this
// Store need not have). Commit does not check the tenant's key again: whoever made g did.
func (s *Store) NewWriterWith(ctx context.Context, g *Grant, snapshotID string) (*Writer, error) {
	k, err := g.keys()
	if err != nil {
		return nil, fmt.Errorf("new snapshot writer %s: %w", snapshotID, err)
	}
	return s.newWriter(ctx, k, snapshotID)
}

// ManifestWith is Manifest with the tenant's subkeys from g.
func (s *Store) ManifestWith(ctx context.Context, g *Grant, snapshotID string) (Manifest, error) {
	if err := checkIDs(g.Tenant(), snapshotID); err != nil {
		return Manifest{}, fmt.Errorf("get snapshot: %w", err)
	}
	k, m, err := s.openWith(ctx, g.Tenant(), snapshotID, func() (*tenantKeys, error) { return g.keys() })
	if err != nil {
		return Manifest{}, err
	}
	k.clear()
	return m, nil
}

// RestoreWith is Restore with the tenant's subkeys from g.
func (s *Store) RestoreWith(ctx context.Context, g *Grant, snapshotID, dir string) error {
	return s.restore(ctx, g.Tenant(), snapshotID, dir, func() (*tenantKeys, error) { return g.keys() })
}
