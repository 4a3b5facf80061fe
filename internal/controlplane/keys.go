package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys"
	"github.com/airlockrun/airlock/internal/store"
)

// TenantKeys is what the control plane needs of the key providers (keys.Router implements it).
type TenantKeys interface {
	// Check reports whether the tenant's key can be used now (an error wrapping
	// errdefs.ErrKeyUnavailable if not).
	Check(ctx context.Context, tenantID string) error
	// RevokeKey revokes the tenant's keys for good.
	RevokeKey(ctx context.Context, tenantID string) error
	// RotateKey makes a new current key for the tenant.
	RotateKey(ctx context.Context, tenantID string) (string, error)
	// Has reports whether a key provider of that name is configured.
	Has(name string) bool
}

// Bounds of the key check loop.
const (
	DefaultKeyCheckInterval = 15 * time.Second
	MaxKeyCheckInterval     = time.Minute
)

// checkKey returns nil if the tenant's key can be used now, else an error wrapping
// errdefs.ErrKeyUnavailable (the API's tenant_key_unavailable) that says what failed. Without key
// providers (some tests) everything passes.
func (s *keyring) checkKey(ctx context.Context, tenantID string) error {
	if s.keys == nil {
		return nil
	}
	err := s.keys.Check(ctx, tenantID)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errdefs.ErrKeyUnavailable):
		return fmt.Errorf("the key of tenant %s is unavailable, so nothing of it can be encrypted or decrypted: %w", tenantID, err)
	}
	return err
}

// CheckTenantKey reports whether the tenant's key can be used now: nil, or an error wrapping
// errdefs.ErrKeyUnavailable.
func (s *keyring) CheckTenantKey(ctx context.Context, tenantID string) error {
	return s.checkKey(ctx, tenantID)
}

// RevokeTenantKey revokes the tenant's keys for good (the local keyring destroys them; a PKCS#11 token
// destroys them in the token) and stops the tenant's sandboxes at once.
func (s *keyring) RevokeTenantKey(ctx context.Context, tenantID string) error {
	if s.keys == nil {
		return fmt.Errorf("no key providers: %w", errdefs.ErrFailedPrecondition)
	}
	if _, err := s.store.GetTenant(ctx, tenantID); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	revokeErr := s.keys.RevokeKey(ctx, tenantID)
	if revokeErr != nil {
		// Only if the key is revoked all the same (recorded, though the token could not destroy it) is
		// what Airlock holds of the tenant destroyed; a revoke that did not happen destroys nothing.
		if err := s.keys.Check(ctx, tenantID); !errors.Is(err, errdefs.ErrKeyUnavailable) || !errors.Is(err, errdefs.ErrPermissionDenied) {
			return fmt.Errorf("revoke key of tenant %s: %w", tenantID, revokeErr)
		}
	}
	s.stopTenant(ctx, tenantID, fmt.Errorf("its key was revoked: %w", errdefs.ErrPermissionDenied))
	if revokeErr != nil {
		return fmt.Errorf("revoke key of tenant %s: recorded, but: %w", tenantID, revokeErr)
	}
	s.log.Warn("tenant key revoked", "tenant", tenantID)
	return nil
}

// RotateTenantKey makes a new current key-encryption key for the tenant and reports its ID.
func (s *keyring) RotateTenantKey(ctx context.Context, tenantID string) (string, error) {
	if s.keys == nil {
		return "", fmt.Errorf("no key providers: %w", errdefs.ErrFailedPrecondition)
	}
	// One rotation of a tenant at a time: a re-wrap of one must not land after the next one's, under
	// a key the next one retires.
	unlock := s.locks.Lock("rotate-key:" + tenantID)
	defer unlock()
	if err := s.checkKey(ctx, tenantID); err != nil {
		return "", err
	}
	id, err := s.keys.RotateKey(ctx, tenantID)
	if err != nil {
		return "", err
	}
	// Every data key of the tenant is wrapped again under the new key; no data is rewritten. A failure
	// here leaves that data key under the old key-encryption key, which still unwraps it: rotating again
	// finishes the job.
	var errs []error
	for what, rewrap := range map[string]func(context.Context, string) (bool, error){
		"snapshots": s.rewrapSnapshots, "secrets": s.rewrapSecrets, "connections": s.rewrapConnections,
		"session CAs": s.rewrapSessionCAs,
	} {
		if _, err := rewrap(ctx, tenantID); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	// Each node keeps the CAs of its sandboxes; one that is down now re-wraps nothing (a rotation
	// after it is back finishes the job).
	nodes, nerr := s.placer.reachableNodes(ctx)
	if nerr != nil {
		errs = append(errs, fmt.Errorf("interception CAs: %w", nerr))
	}
	cas := 0
	for _, nd := range nodes {
		n, err := nd.RewrapCAs(ctx, tenantID)
		if err != nil {
			errs = append(errs, fmt.Errorf("interception CAs on node %s: %w", nd.ID(), err))
		}
		cas += n
	}
	s.log.Info("tenant key rotated", "tenant", tenantID, "key_id", id, "cas_rewrapped", cas)
	if err := errors.Join(errs...); err != nil {
		return id, fmt.Errorf("rotated to key %s, but re-wrapping failed (rotate again to finish): %w", id, err)
	}
	// Nothing needs the older keys now: their owner may destroy them.
	if rt, ok := s.keys.(keys.Retirer); ok {
		if err := rt.RetireOldKeys(ctx, tenantID); err != nil {
			return id, fmt.Errorf("rotated to key %s and re-wrapped every data key, but: %w", id, err)
		}
	}
	return id, nil
}

func (s *keyring) rewrapSnapshots(ctx context.Context, tenantID string) (bool, error) {
	if s.snapshots == nil {
		return false, nil
	}
	return s.snapshots.RewrapDataKey(ctx, tenantID)
}

func (s *keyring) rewrapSecrets(ctx context.Context, tenantID string) (bool, error) {
	if s.secrets == nil {
		return false, nil
	}
	return s.secrets.RewrapDataKey(ctx, tenantID)
}

func (s *keyring) rewrapConnections(ctx context.Context, tenantID string) (bool, error) {
	if s.connections == nil {
		return false, nil
	}
	return s.connections.RewrapDataKey(ctx, tenantID)
}

// checkTenantKeys is the key check loop: it checks every tenant's key and, for each tenant whose key is
// revoked or cannot be reached, stops its sandboxes and removes the plaintext images this node keeps of
// it (see stopTenant). Each tenant's key is checked even with nothing running: cached images of its
// paused sessions go too.
func (s *keyring) checkTenantKeys() {
	if s.keys == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		s.log.Warn("key check: list tenants", "err", err)
		return
	}
	for _, t := range ts {
		err := s.keys.Check(ctx, t.ID)
		gone := err != nil && errors.Is(err, errdefs.ErrKeyUnavailable)
		s.keysMu.Lock()
		was := s.keysGone[t.ID]
		if gone {
			s.keysGone[t.ID] = true
		} else {
			delete(s.keysGone, t.ID)
		}
		s.keysMu.Unlock()
		switch {
		case gone && !was:
			s.log.Warn("tenant key unavailable: stopping its sandboxes", "tenant", t.ID, "err", err)
		case !gone && was:
			s.log.Info("tenant key available again", "tenant", t.ID)
		}
		if gone {
			s.stopTenant(ctx, t.ID, err)
		}
	}
}

// stopTenant stops every sandbox of the tenant (a session's sandbox fails, and the session with it: it
// resumes from its latest snapshot once the key is back) and removes the checkpoint images this node
// keeps of the tenant in the clear: all of its cached images, and, if the key is revoked for good, the
// images still waiting to be uploaded (they can never be encrypted now; their snapshots fail).
func (s *keyring) stopTenant(ctx context.Context, tenantID string, why error) {
	revoked := errors.Is(why, errdefs.ErrPermissionDenied)
	// The images go first (no read serves from them meanwhile), and again after the sandboxes stopped.
	s.dropTenantImages(ctx, tenantID, revoked)
	s.stopTenantSandboxes(ctx, tenantID, truncateReason("tenant key unavailable: "+why.Error()))
	s.dropTenantImages(ctx, tenantID, revoked)
}

// stopTenantSandboxes stops every sandbox of the tenant that is up, for reason; a session's sandbox
// fails, and the session with it (it resumes from its latest snapshot).
func (s *keyring) stopTenantSandboxes(ctx context.Context, tenantID, reason string) {
	var up []store.Sandbox
	cursor := ""
	for {
		sbs, next, err := s.store.ListSandboxes(ctx, tenantID, store.SandboxFilter{States: []store.SandboxState{store.StateCreating, store.StateRunning},
			Cursor: cursor, Limit: store.MaxListLimit})
		if err != nil {
			s.log.Error("stop tenant: list sandboxes", "tenant", tenantID, "err", err)
			return
		}
		up = append(up, sbs...)
		if next == "" {
			break
		}
		cursor = next
	}
	for _, sb := range up {
		if s.nodes.serves(sb.NodeID) {
			s.sandboxes.sandboxExited(sb.NodeID, sb.ID, reason)
		}
	}
}

// dropTenantImages removes the tenant's checkpoint images this node keeps in the clear. With the key
// merely unreachable, only the cached images of complete snapshots go (the stores hold them; the
// others wait for the key to be uploaded). With the key revoked, every image goes, and the snapshots
// still waiting for their upload fail: they can never be encrypted now.
func (s *keyring) dropTenantImages(ctx context.Context, tenantID string, revoked bool) {
	var drop []string
	cursor := ""
	for {
		sns, next, err := s.store.ListSnapshots(ctx, tenantID, store.SnapshotFilter{Cursor: cursor, Limit: store.MaxListLimit})
		if err != nil {
			s.log.Error("drop tenant images: list snapshots", "tenant", tenantID, "err", err)
			return
		}
		for _, sn := range sns {
			switch {
			case sn.State == store.SnapshotComplete:
			case !revoked:
				continue
			case sn.State == store.SnapshotUploading:
				if _, err := s.book.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
					if sn.State != store.SnapshotUploading {
						return nil // uploaded meanwhile
					}
					sn.State, sn.Reason = store.SnapshotFailed, "the tenant's key was revoked before the snapshot was uploaded"
					return nil
				}); err != nil {
					s.log.Error("drop tenant images: fail snapshot", "snapshot", sn.ID, "err", err)
				}
			}
			drop = append(drop, sn.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	s.book.dropImages(drop...)
}
