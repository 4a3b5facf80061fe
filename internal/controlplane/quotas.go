package controlplane

import (
	"context"
	"fmt"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// Usage reports the tenant's quotas and what counts against them now.
func (s *accounts) Usage(ctx context.Context, tenantID string) (store.TenantQuotas, store.TenantUsage, error) {
	t, err := s.store.GetTenant(ctx, tenantID)
	if err != nil {
		return store.TenantQuotas{}, store.TenantUsage{}, err
	}
	u, err := s.store.TenantUsage(ctx, tenantID)
	if err != nil {
		return store.TenantQuotas{}, store.TenantUsage{}, err
	}
	return t.Quotas, u, nil
}

// SetTenantQuotas replaces a tenant's quotas.
func (s *accounts) SetTenantQuotas(ctx context.Context, id string, q store.TenantQuotas) (store.Tenant, error) {
	return s.store.SetTenantQuotas(ctx, id, q)
}

// checkSnapshotQuota refuses a new snapshot (ErrResourceExhausted) once the tenant's snapshots hold its
// quota of bytes. Pauses are not checked: a pause must never fail for it, or the session would be lost
// with its sandbox. The check is not atomic with the snapshot: concurrent snapshots may pass it together.
func (s *accounts) checkSnapshotQuota(ctx context.Context, tenantID string) error {
	q, u, err := s.Usage(ctx, tenantID)
	if err != nil {
		return err
	}
	if q.SnapshotBytes > 0 && u.SnapshotBytes >= q.SnapshotBytes {
		return fmt.Errorf("tenant %s's snapshots hold %d bytes, its quota is %d (delete sessions or unpin snapshots to free space): %w",
			tenantID, u.SnapshotBytes, q.SnapshotBytes, errdefs.ErrResourceExhausted)
	}
	return nil
}

// checkNewSessions refuses n new running sessions (a create, a fork of n) with ErrResourceExhausted if
// they would take the tenant over its sessions or running sandboxes quota, before anything is made. The
// Store checks each record again, atomically.
func (s *accounts) checkNewSessions(ctx context.Context, tenantID string, n int) error {
	return s.checkSessions(ctx, tenantID, n, true)
}

// checkSessions is checkNewSessions for n sessions that run (running) or never do (kept snapshots,
// which only the sessions quota counts).
func (s *accounts) checkSessions(ctx context.Context, tenantID string, n int, running bool) error {
	q, u, err := s.Usage(ctx, tenantID)
	if err != nil {
		return err
	}
	if q.Sessions > 0 && u.Sessions+int64(n) > q.Sessions {
		return fmt.Errorf("%d more would give tenant %s %d sessions; its quota is %d: %w",
			n, tenantID, u.Sessions+int64(n), q.Sessions, errdefs.ErrResourceExhausted)
	}
	if running && q.RunningSandboxes > 0 && u.RunningSandboxes+int64(n) > q.RunningSandboxes {
		return fmt.Errorf("%d more would give tenant %s %d running sandboxes; its quota is %d: %w",
			n, tenantID, u.RunningSandboxes+int64(n), q.RunningSandboxes, errdefs.ErrResourceExhausted)
	}
	return nil
}
