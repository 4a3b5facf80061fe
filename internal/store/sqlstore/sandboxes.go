package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const sandboxCols = "id, tenant_id, node_id, template, state, reason, " +
	"cpu_millicores, memory_mb, disk_mb, timeout_seconds, metadata, " +
	"created_at, updated_at, started_at, ends_at, stopped_at, version, network_policy"

// sandboxes is the sandboxes table, with its metadata side table.
var sandboxes = table[store.Sandbox]{name: "sandboxes", noun: "sandbox", cols: sandboxCols, scan: scanSandbox,
	key:  func(sb store.Sandbox) (time.Time, string) { return sb.CreatedAt, sb.ID },
	meta: "sandbox_metadata", metaFK: "sandbox_id"}

// CreateSandbox implements store.Store.
func (s *DB) CreateSandbox(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	if sb.ID == "" {
		sb.ID = store.NewID("sb")
	}
	if sb.State == "" {
		sb.State = store.StateCreating
	}
	if sb.State != store.StateCreating {
		return store.Sandbox{}, fmt.Errorf("create sandbox %s: initial state %q is not %q: %w",
			sb.ID, sb.State, store.StateCreating, errdefs.ErrInvalidArgument)
	}
	if sb.CreatedAt.IsZero() {
		sb.CreatedAt = now()
	}
	sb = normalizeSandbox(sb)
	sb.UpdatedAt = sb.CreatedAt
	sb.Version = 1
	if err := sb.Validate(); err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox: %w", err)
	}
	err := s.write(ctx, func(tx *Tx) error {
		if err := checkTenant(ctx, tx, sb.TenantID); err != nil {
			return err
		}
		if err := checkQuota(ctx, tx, sb.TenantID, "quota_running_sandboxes", "running sandboxes", countRunningSandboxes); err != nil {
			return err
		}
		if err := absent(ctx, tx, "SELECT 1 FROM sandboxes WHERE id = ?", sb.ID); err != nil {
			return err
		}
		meta, err := encodeMap(sb.Metadata, "metadata")
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO sandboxes ("+sandboxCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			sb.ID, sb.TenantID, sb.NodeID, sb.Template, string(sb.State), sb.Reason,
			sb.Spec.CPUMillicores, sb.Spec.MemoryMB, sb.Spec.DiskMB, sb.Spec.TimeoutSeconds, meta,
			micros(sb.CreatedAt), micros(sb.UpdatedAt), nullMicros(sb.StartedAt), nullMicros(sb.EndsAt), nullMicros(sb.StoppedAt),
			sb.Version, string(sb.NetworkPolicy))
		if err != nil {
			return mapErr(err)
		}
		return sandboxes.insertMetadata(ctx, tx, sb.ID, sb.Metadata)
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	return sb, nil
}

// GetSandbox implements store.Store.
func (s *DB) GetSandbox(ctx context.Context, tenantID, id string) (store.Sandbox, error) {
	return sandboxes.one(s.readRow(ctx, sandboxes.selectWhere("id = ? AND tenant_id = ?"), id, tenantID), "get sandbox "+id)
}

// GetSandboxAnyTenant implements store.Store.
func (s *DB) GetSandboxAnyTenant(ctx context.Context, id string) (store.Sandbox, error) {
	return sandboxes.one(s.readRow(ctx, sandboxes.selectWhere("id = ?"), id), "get sandbox "+id)
}

// ListSandboxes implements store.Store.
func (s *DB) ListSandboxes(ctx context.Context, tenantID string, f store.SandboxFilter) ([]store.Sandbox, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", fmt.Errorf("list sandboxes of tenant %s: %w", tenantID, err)
	}
	return sandboxes.page(ctx, s, tenantID, withStates(listing{metadata: f.Metadata, cursor: f.Cursor, limit: f.Limit}, f.States))
}

// UpdateSandbox implements store.Store.
func (s *DB) UpdateSandbox(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	sb = normalizeSandbox(sb)
	if err := sb.Validate(); err != nil {
		return store.Sandbox{}, fmt.Errorf("update sandbox: %w", err)
	}
	return sandboxes.update(ctx, s, sb, sb.ID, sb.TenantID, func(tx *Tx, cur store.Sandbox, sb *store.Sandbox) error {
		if err := checkVersion(sb.Version, cur.Version); err != nil {
			return err
		}
		if err := store.CheckTransition(cur.State, sb.State); err != nil {
			return err
		}
		sb.CreatedAt = cur.CreatedAt
		sb.UpdatedAt = later(now(), cur.UpdatedAt)
		sb.Version = cur.Version + 1
		meta, err := encodeMap(sb.Metadata, "metadata")
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE sandboxes SET
	node_id = ?, template = ?, state = ?, reason = ?,
	cpu_millicores = ?, memory_mb = ?, disk_mb = ?, timeout_seconds = ?, metadata = ?,
	updated_at = ?, started_at = ?, ends_at = ?, stopped_at = ?, version = ?, network_policy = ?
WHERE id = ? AND tenant_id = ? AND version = ?`,
			sb.NodeID, sb.Template, string(sb.State), sb.Reason,
			sb.Spec.CPUMillicores, sb.Spec.MemoryMB, sb.Spec.DiskMB, sb.Spec.TimeoutSeconds, meta,
			micros(sb.UpdatedAt), nullMicros(sb.StartedAt), nullMicros(sb.EndsAt), nullMicros(sb.StoppedAt), sb.Version,
			string(sb.NetworkPolicy), sb.ID, sb.TenantID, cur.Version)
		if err := oneRow(res, err); err != nil {
			return err
		}
		return sandboxes.replaceMetadata(ctx, tx, sb.ID, cur.Metadata, sb.Metadata)
	})
}

// ListSandboxesByState implements store.Store.
func (s *DB) ListSandboxesByState(ctx context.Context, states []store.SandboxState, limit int) ([]store.Sandbox, error) {
	return listByState(ctx, s, sandboxes, "updated_at", states, limit)
}

// ListSandboxesOnNode implements store.Store.
func (s *DB) ListSandboxesOnNode(ctx context.Context, nodeID string, states []store.SandboxState, afterID string, limit int) ([]store.Sandbox, error) {
	limit, err := store.NormalizeLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes on node %s: %w", nodeID, err)
	}
	if err := validStates(states); err != nil {
		return nil, fmt.Errorf("list sandboxes on node %s: %w", nodeID, err)
	}
	query := sandboxes.selectWhere("node_id = ? AND id > ?")
	args := []any{nodeID, afterID}
	if len(states) > 0 {
		w, a := in("state", states)
		query += " AND " + w
		args = append(args, a...)
	}
	out, err := queryAll(ctx, s, query+" ORDER BY id LIMIT ?", scanSandbox, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes on node %s: %w", nodeID, err)
	}
	return out, nil
}

// NodeUsage implements store.Store.
func (s *DB) NodeUsage(ctx context.Context, states []store.SandboxState) (map[string]store.NodeUse, error) {
	if len(states) == 0 {
		return nil, fmt.Errorf("node usage: no state given: %w", errdefs.ErrInvalidArgument)
	}
	if err := validStates(states); err != nil {
		return nil, fmt.Errorf("node usage: %w", err)
	}
	w, args := in("state", states)
	type row struct {
		node string
		use  store.NodeUse
	}
	rows, err := queryAll(ctx, s, "SELECT node_id, COUNT(*), COALESCE(SUM(memory_mb), 0) FROM sandboxes WHERE "+w+" GROUP BY node_id",
		func(sc scanner) (row, error) {
			var r row
			err := sc.Scan(&r.node, &r.use.Sandboxes, &r.use.MemoryMB)
			return r, err
		}, args...)
	if err != nil {
		return nil, fmt.Errorf("node usage: %w", err)
	}
	out := make(map[string]store.NodeUse, len(rows))
	for _, r := range rows {
		out[r.node] = r.use
	}
	return out, nil
}

// ListExpiredSandboxes implements store.Store.
func (s *DB) ListExpiredSandboxes(ctx context.Context, now time.Time, limit int) ([]store.Sandbox, error) {
	limit, err := store.NormalizeLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list expired sandboxes: %w", err)
	}
	w, args := in("state", []store.SandboxState{store.StateCreating, store.StateRunning})
	query := sandboxes.selectWhere("ends_at IS NOT NULL AND ends_at <= ? AND " + w + " ORDER BY ends_at, id LIMIT ?")
	out, err := queryAll(ctx, s, query, scanSandbox, append(append([]any{micros(now)}, args...), limit)...)
	if err != nil {
		return nil, fmt.Errorf("list expired sandboxes: %w", err)
	}
	return out, nil
}

// DeleteSandbox implements store.Store.
func (s *DB) DeleteSandbox(ctx context.Context, tenantID, id string) error {
	err := s.write(ctx, func(tx *Tx) error {
		state, err := stateOf[store.SandboxState](ctx, tx, "sandboxes", id, tenantID)
		if err != nil {
			return err
		}
		if state != store.StateStopped {
			return fmt.Errorf("state is %s, not %s: %w", state, store.StateStopped, errdefs.ErrConflict)
		}
		return deleteRow(ctx, tx, "sandboxes", id, tenantID)
	})
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return nil
}

// normalizeSandbox returns sb with its times normalized and its own, non-nil copy of Metadata.
func normalizeSandbox(sb store.Sandbox) store.Sandbox {
	sb.CreatedAt = store.NormalizeTime(sb.CreatedAt)
	sb.UpdatedAt = store.NormalizeTime(sb.UpdatedAt)
	sb.StartedAt = store.NormalizeTimePtr(sb.StartedAt)
	sb.EndsAt = store.NormalizeTimePtr(sb.EndsAt)
	sb.StoppedAt = store.NormalizeTimePtr(sb.StoppedAt)
	sb.Metadata = copyMap(sb.Metadata)
	return sb
}

func scanSandbox(row scanner) (store.Sandbox, error) {
	var (
		sb                        store.Sandbox
		state, meta, netPolicy    string
		created, updated          int64
		started, ends, stoppedAtV sql.NullInt64
	)
	err := row.Scan(&sb.ID, &sb.TenantID, &sb.NodeID, &sb.Template, &state, &sb.Reason,
		&sb.Spec.CPUMillicores, &sb.Spec.MemoryMB, &sb.Spec.DiskMB, &sb.Spec.TimeoutSeconds, &meta,
		&created, &updated, &started, &ends, &stoppedAtV, &sb.Version, &netPolicy)
	if err != nil {
		return store.Sandbox{}, err
	}
	sb.State = store.SandboxState(state)
	if netPolicy != "" {
		sb.NetworkPolicy = []byte(netPolicy)
	}
	if sb.Metadata, err = decodeMap(meta, "sandbox "+sb.ID+": decode metadata"); err != nil {
		return store.Sandbox{}, err
	}
	sb.CreatedAt = fromMicros(created)
	sb.UpdatedAt = fromMicros(updated)
	sb.StartedAt = fromNullMicros(started)
	sb.EndsAt = fromNullMicros(ends)
	sb.StoppedAt = fromNullMicros(stoppedAtV)
	return sb, nil
}

// noRowsIsNotFound turns sql.ErrNoRows into ErrNotFound and maps any other error.
func noRowsIsNotFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return errdefs.ErrNotFound
	}
	return mapErr(err)
}
