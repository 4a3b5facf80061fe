package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const tenantCols = "id, name, created_at, " +
	"retention_keep_all_seconds, retention_keep_hourly_seconds, retention_keep_daily_seconds, operator, disabled_at, " +
	"quota_running_sandboxes, quota_sessions, quota_snapshot_bytes, key_provider, log_retention_seconds"

// tenants is the tenants table.
var tenants = table[store.Tenant]{name: "tenants", noun: "tenant", cols: tenantCols, scan: scanTenant}

// CreateTenant implements store.Store.
func (s *DB) CreateTenant(ctx context.Context, t store.Tenant) (store.Tenant, error) {
	if t.ID == "" {
		t.ID = store.NewID("tn")
	}
	if t.Name == "" {
		return store.Tenant{}, fmt.Errorf("create tenant %s: name is empty: %w", t.ID, errdefs.ErrInvalidArgument)
	}
	if err := t.Retention.Validate(); err != nil {
		return store.Tenant{}, fmt.Errorf("create tenant %s: %w", t.ID, err)
	}
	if err := t.Quotas.Validate(); err != nil {
		return store.Tenant{}, fmt.Errorf("create tenant %s: %w", t.ID, err)
	}
	if t.LogRetentionSeconds < 0 {
		return store.Tenant{}, fmt.Errorf("create tenant %s: log retention %ds is negative: %w", t.ID, t.LogRetentionSeconds, errdefs.ErrInvalidArgument)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now()
	}
	t.CreatedAt = store.NormalizeTime(t.CreatedAt)
	t.DisabledAt = store.NormalizeTimePtr(t.DisabledAt)
	if t.Operator && t.DisabledAt != nil {
		return store.Tenant{}, fmt.Errorf("create tenant %s: the operator tenant cannot be disabled: %w", t.ID, errdefs.ErrInvalidArgument)
	}
	err := s.write(ctx, func(tx *Tx) error {
		if err := absent(ctx, tx, "SELECT 1 FROM tenants WHERE id = ?", t.ID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO tenants ("+tenantCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			t.ID, t.Name, micros(t.CreatedAt),
			t.Retention.KeepAllSeconds, t.Retention.KeepHourlySeconds, t.Retention.KeepDailySeconds,
			t.Operator, nullMicros(t.DisabledAt), t.Quotas.RunningSandboxes, t.Quotas.Sessions, t.Quotas.SnapshotBytes, t.KeyProvider, t.LogRetentionSeconds)
		return mapErr(err)
	})
	if err != nil {
		return store.Tenant{}, fmt.Errorf("create tenant %s: %w", t.ID, err)
	}
	return t, nil
}

// GetTenant implements store.Store.
func (s *DB) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	return tenants.one(s.readRow(ctx, tenants.selectWhere("id = ?"), id), "get tenant "+id)
}

// ListTenants implements store.Store.
func (s *DB) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	out, err := queryAll(ctx, s, "SELECT "+tenantCols+" FROM tenants ORDER BY created_at, id", scanTenant)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// UpdateTenantRetention implements store.Store.
func (s *DB) UpdateTenantRetention(ctx context.Context, id string, r store.RetentionSpec) (store.Tenant, error) {
	if err := r.Validate(); err != nil {
		return store.Tenant{}, fmt.Errorf("update retention of tenant %s: %w", id, err)
	}
	return updateTenant(ctx, s, id, "update retention", `UPDATE tenants SET
	retention_keep_all_seconds = ?, retention_keep_hourly_seconds = ?, retention_keep_daily_seconds = ?
WHERE id = ?`, r.KeepAllSeconds, r.KeepHourlySeconds, r.KeepDailySeconds, id)
}

// UpdateTenantLogRetention implements store.Store.
func (s *DB) UpdateTenantLogRetention(ctx context.Context, id string, seconds int64) (store.Tenant, error) {
	if seconds < 0 {
		return store.Tenant{}, fmt.Errorf("update log retention of tenant %s: %ds is negative: %w", id, seconds, errdefs.ErrInvalidArgument)
	}
	return updateTenant(ctx, s, id, "update log retention", "UPDATE tenants SET log_retention_seconds = ? WHERE id = ?", seconds, id)
}

// SetTenantDisabled implements store.Store.
func (s *DB) SetTenantDisabled(ctx context.Context, id string, at *time.Time) (store.Tenant, error) {
	var t store.Tenant
	err := s.write(ctx, func(tx *Tx) error {
		cur, err := tenantIn(ctx, tx, id)
		if err != nil {
			return err
		}
		if at != nil && cur.Operator {
			return fmt.Errorf("the operator tenant cannot be disabled: %w", errdefs.ErrFailedPrecondition)
		}
		q, args := "UPDATE tenants SET disabled_at = NULL WHERE id = ?", []any{id}
		if at != nil { // the first disabling time stays
			q, args = "UPDATE tenants SET disabled_at = COALESCE(disabled_at, ?) WHERE id = ?", []any{micros(*at), id}
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return mapErr(err)
		}
		t, err = tenantIn(ctx, tx, id)
		return err
	})
	if err != nil {
		return store.Tenant{}, fmt.Errorf("set tenant %s disabled: %w", id, err)
	}
	return t, nil
}

// SetTenantKeyProvider implements store.Store.
func (s *DB) SetTenantKeyProvider(ctx context.Context, id, provider string) (store.Tenant, error) {
	if len(provider) > 64 {
		return store.Tenant{}, fmt.Errorf("set key provider of tenant %s: name is longer than 64 bytes: %w", id, errdefs.ErrInvalidArgument)
	}
	return updateTenant(ctx, s, id, "set key provider", "UPDATE tenants SET key_provider = ? WHERE id = ?", provider, id)
}

// SetTenantQuotas implements store.Store.
func (s *DB) SetTenantQuotas(ctx context.Context, id string, q store.TenantQuotas) (store.Tenant, error) {
	if err := q.Validate(); err != nil {
		return store.Tenant{}, fmt.Errorf("set quotas of tenant %s: %w", id, err)
	}
	return updateTenant(ctx, s, id, "set quotas", "UPDATE tenants SET quota_running_sandboxes = ?, quota_sessions = ?, quota_snapshot_bytes = ? WHERE id = ?",
		q.RunningSandboxes, q.Sessions, q.SnapshotBytes, id)
}

// updateTenant runs query, an UPDATE of tenant id (ErrNotFound if there is none), with args in a write
// transaction and returns the tenant as it then is; what names the change in errors.
func updateTenant(ctx context.Context, s *DB, id, what, query string, args ...any) (store.Tenant, error) {
	var t store.Tenant
	err := s.write(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err := oneRow(res, err); err != nil {
			return err
		}
		t, err = tenantIn(ctx, tx, id)
		return err
	})
	if err != nil {
		return store.Tenant{}, fmt.Errorf("%s of tenant %s: %w", what, id, err)
	}
	return t, nil
}

// tenantIn reads tenant id in tx; none is ErrNotFound.
func tenantIn(ctx context.Context, tx *Tx, id string) (store.Tenant, error) {
	t, err := scanTenant(tx.QueryRowContext(ctx, tenants.selectWhere("id = ?"), id))
	return t, noRowsIsNotFound(err)
}

// What counts against each quota.
const (
	countRunningSandboxes = "SELECT COUNT(*) FROM sandboxes WHERE tenant_id = ? AND state IN ('creating', 'running', 'stopping')"
	countSessions         = "SELECT COUNT(*) FROM sessions WHERE tenant_id = ? AND state NOT IN ('deleting', 'deleted')"
	sumSnapshotBytes      = "SELECT COALESCE(SUM(stored_bytes), 0) FROM snapshots WHERE tenant_id = ?"
)

// TenantUsage implements store.Store.
func (s *DB) TenantUsage(ctx context.Context, id string) (store.TenantUsage, error) {
	var u store.TenantUsage
	for _, q := range []struct {
		query string
		dst   *int64
	}{{countRunningSandboxes, &u.RunningSandboxes}, {countSessions, &u.Sessions}, {sumSnapshotBytes, &u.SnapshotBytes}} {
		if err := s.queryRowR(ctx, q.query, id).Scan(q.dst); err != nil {
			return store.TenantUsage{}, fmt.Errorf("usage of tenant %s: %w", id, mapErr(err))
		}
	}
	return u, nil
}

// checkQuota returns ErrResourceExhausted if the tenant's quota in column (0: none) is already
// reached by what count (a query taking the tenant ID) counts.
func checkQuota(ctx context.Context, tx *Tx, tenantID, column, what, count string) error {
	var limit int64
	if err := tx.QueryRowContext(ctx, "SELECT "+column+" FROM tenants WHERE id = ?", tenantID).Scan(&limit); err != nil {
		return mapErr(err)
	}
	if limit == 0 {
		return nil
	}
	var n int64
	if err := tx.QueryRowContext(ctx, count, tenantID).Scan(&n); err != nil {
		return mapErr(err)
	}
	if n >= limit {
		return fmt.Errorf("tenant %s already has %d %s, its quota: %w", tenantID, n, what, errdefs.ErrResourceExhausted)
	}
	return nil
}

// scanner is what *sql.Row and *sql.Rows have in common.
type scanner interface{ Scan(dest ...any) error }

// scanTenant scans a row of tenantCols.
func scanTenant(row scanner) (store.Tenant, error) {
	var (
		t        store.Tenant
		created  int64
		disabled sql.NullInt64
	)
	err := row.Scan(&t.ID, &t.Name, &created,
		&t.Retention.KeepAllSeconds, &t.Retention.KeepHourlySeconds, &t.Retention.KeepDailySeconds, &t.Operator, &disabled,
		&t.Quotas.RunningSandboxes, &t.Quotas.Sessions, &t.Quotas.SnapshotBytes, &t.KeyProvider, &t.LogRetentionSeconds)
	if err != nil {
		return store.Tenant{}, err
	}
	t.CreatedAt = fromMicros(created)
	t.DisabledAt = fromNullMicros(disabled)
	return t, nil
}
