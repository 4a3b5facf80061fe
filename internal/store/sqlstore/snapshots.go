package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const snapshotCols = "id, tenant_id, session_id, parent_id, name, trigger_kind, state, reason, pinned, " +
	"logical_bytes, stored_bytes, meta, created_at, completed_at, version"

// snapshots is the snapshots table.
var snapshots = table[store.Snapshot]{name: "snapshots", noun: "snapshot", cols: snapshotCols, scan: scanSnapshot,
	key: func(sn store.Snapshot) (time.Time, string) { return sn.CreatedAt, sn.ID }}

// CreateSnapshot implements store.Store.
func (s *DB) CreateSnapshot(ctx context.Context, sn store.Snapshot) (store.Snapshot, error) {
	if sn.ID == "" {
		sn.ID = store.NewID("sn")
	}
	if sn.State == "" {
		sn.State = store.SnapshotWriting
	}
	if sn.State != store.SnapshotWriting && sn.State != store.SnapshotComplete {
		return store.Snapshot{}, fmt.Errorf("create snapshot %s: initial state %q is not %s or %s: %w",
			sn.ID, sn.State, store.SnapshotWriting, store.SnapshotComplete, errdefs.ErrInvalidArgument)
	}
	if sn.CreatedAt.IsZero() {
		sn.CreatedAt = now()
	}
	sn = normalizeSnapshot(sn)
	sn.Version = 1
	if err := sn.Validate(); err != nil {
		return store.Snapshot{}, fmt.Errorf("create snapshot: %w", err)
	}
	err := s.write(ctx, func(tx *Tx) error {
		if err := present(ctx, tx, "session "+sn.SessionID, "SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?", sn.SessionID, sn.TenantID); err != nil {
			return err
		}
		if err := absent(ctx, tx, "SELECT 1 FROM snapshots WHERE id = ?", sn.ID); err != nil {
			return err
		}
		if sn.ParentID != "" {
			if err := present(ctx, tx, "parent snapshot "+sn.ParentID, "SELECT 1 FROM snapshots WHERE id = ? AND tenant_id = ?", sn.ParentID, sn.TenantID); err != nil {
				return err
			}
		}
		if err := checkSnapshotName(ctx, tx, sn); err != nil {
			return err
		}
		meta, err := encodeMap(sn.Meta, "meta")
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO snapshots ("+snapshotCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			sn.ID, sn.TenantID, sn.SessionID, sn.ParentID, sn.Name, string(sn.Trigger), string(sn.State), sn.Reason, sn.Pinned,
			sn.LogicalBytes, sn.StoredBytes, meta, micros(sn.CreatedAt), nullMicros(sn.CompletedAt), sn.Version)
		return mapErr(err)
	})
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("create snapshot %s: %w", sn.ID, err)
	}
	return sn, nil
}

// checkSnapshotName returns ErrAlreadyExists if sn has a name that another snapshot of its session has.
// (The snapshots_by_name index enforces it too, and serves the query; this names the culprit.)
func checkSnapshotName(ctx context.Context, tx *Tx, sn store.Snapshot) error {
	if sn.Name == "" {
		return nil
	}
	taken, err := exists(ctx, tx, "SELECT 1 FROM snapshots WHERE session_id = ? AND name = ? AND name <> '' AND id <> ?", sn.SessionID, sn.Name, sn.ID)
	if err != nil {
		return fmt.Errorf("look up snapshot name %q: %w", sn.Name, err)
	}
	if taken {
		return fmt.Errorf("session %s has a snapshot named %q: %w", sn.SessionID, sn.Name, errdefs.ErrAlreadyExists)
	}
	return nil
}

// GetSnapshot implements store.Store.
func (s *DB) GetSnapshot(ctx context.Context, tenantID, id string) (store.Snapshot, error) {
	return snapshots.one(s.queryRowR(ctx, snapshots.selectWhere("id = ? AND tenant_id = ?"), id, tenantID), "get snapshot "+id)
}

// ListSnapshots implements store.Store.
func (s *DB) ListSnapshots(ctx context.Context, tenantID string, f store.SnapshotFilter) ([]store.Snapshot, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", fmt.Errorf("list snapshots of tenant %s: %w", tenantID, err)
	}
	var l listing
	if f.SessionID != "" {
		var one int
		err := s.queryRowR(ctx, "SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?", f.SessionID, tenantID).Scan(&one)
		if err != nil {
			return nil, "", fmt.Errorf("list snapshots of session %s: %w", f.SessionID, noRowsIsNotFound(err))
		}
		l.where, l.args = []string{"session_id = ?"}, []any{f.SessionID}
	}
	l.cursor, l.limit = f.Cursor, f.Limit
	return snapshots.page(ctx, s, tenantID, withStates(l, f.States))
}

// UpdateSnapshot implements store.Store.
func (s *DB) UpdateSnapshot(ctx context.Context, sn store.Snapshot) (store.Snapshot, error) {
	if sn.ID == "" || sn.TenantID == "" {
		return store.Snapshot{}, fmt.Errorf("update snapshot %q of tenant %q: ID or tenant ID is empty: %w",
			sn.ID, sn.TenantID, errdefs.ErrInvalidArgument)
	}
	sn = normalizeSnapshot(sn)
	return snapshots.update(ctx, s, sn, sn.ID, sn.TenantID, func(tx *Tx, cur store.Snapshot, sn *store.Snapshot) error {
		// The immutable fields are the stored ones; Validate then judges the rest.
		sn.SessionID, sn.ParentID, sn.Trigger, sn.CreatedAt = cur.SessionID, cur.ParentID, cur.Trigger, cur.CreatedAt
		if err := sn.Validate(); err != nil {
			return err
		}
		if err := checkVersion(sn.Version, cur.Version); err != nil {
			return err
		}
		if err := store.CheckSnapshotUpdate(cur, *sn); err != nil {
			return err
		}
		if sn.Name != cur.Name {
			if err := checkSnapshotName(ctx, tx, *sn); err != nil {
				return err
			}
		}
		sn.Version = cur.Version + 1
		meta, err := encodeMap(sn.Meta, "meta")
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE snapshots SET
	name = ?, state = ?, reason = ?, pinned = ?, logical_bytes = ?, stored_bytes = ?, meta = ?,
	completed_at = ?, version = ?
WHERE id = ? AND tenant_id = ? AND version = ?`,
			sn.Name, string(sn.State), sn.Reason, sn.Pinned, sn.LogicalBytes, sn.StoredBytes, meta,
			nullMicros(sn.CompletedAt), sn.Version, sn.ID, sn.TenantID, cur.Version)
		return oneRow(res, err)
	})
}

// DeleteSnapshot implements store.Store.
func (s *DB) DeleteSnapshot(ctx context.Context, tenantID, id string) error {
	err := s.write(ctx, func(tx *Tx) error {
		ok, err := exists(ctx, tx, "SELECT 1 FROM snapshots WHERE id = ? AND tenant_id = ?", id, tenantID)
		if err != nil {
			return err
		}
		if !ok {
			return errdefs.ErrNotFound
		}
		if err := unheld(ctx, tx, "it", "SELECT id FROM sessions WHERE head_snapshot_id = ? AND state <> ? ORDER BY id LIMIT 1",
			id, string(store.SessionDeleted)); err != nil {
			return err
		}
		return deleteRow(ctx, tx, "snapshots", id, tenantID)
	})
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}

// ListSnapshotsByState implements store.Store.
func (s *DB) ListSnapshotsByState(ctx context.Context, states []store.SnapshotState, limit int) ([]store.Snapshot, error) {
	return listByState(ctx, s, snapshots, "created_at", states, limit)
}

// normalizeSnapshot returns sn with its times normalized and its own, non-nil copy of Meta.
func normalizeSnapshot(sn store.Snapshot) store.Snapshot {
	sn.CreatedAt = store.NormalizeTime(sn.CreatedAt)
	sn.CompletedAt = store.NormalizeTimePtr(sn.CompletedAt)
	sn.Meta = copyMap(sn.Meta)
	return sn
}

func scanSnapshot(row scanner) (store.Snapshot, error) {
	var (
		sn                   store.Snapshot
		trigger, state, meta string
		created              int64
		completed            sql.NullInt64
	)
	err := row.Scan(&sn.ID, &sn.TenantID, &sn.SessionID, &sn.ParentID, &sn.Name, &trigger, &state, &sn.Reason, &sn.Pinned,
		&sn.LogicalBytes, &sn.StoredBytes, &meta, &created, &completed, &sn.Version)
	if err != nil {
		return store.Snapshot{}, err
	}
	sn.Trigger = store.SnapshotTrigger(trigger)
	sn.State = store.SnapshotState(state)
	if sn.Meta, err = decodeMap(meta, "snapshot "+sn.ID+": decode meta"); err != nil {
		return store.Snapshot{}, err
	}
	sn.CreatedAt = fromMicros(created)
	sn.CompletedAt = fromNullMicros(completed)
	return sn, nil
}
