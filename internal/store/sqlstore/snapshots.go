package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const snapshotCols = "id, tenant_id, session_id, parent_id, name, trigger_kind, state, reason, pinned, " +
	"logical_bytes, stored_bytes, meta, created_at, completed_at, version"

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
		ok, err := exists(ctx, tx, "SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?", sn.SessionID, sn.TenantID)
		if err != nil {
			return fmt.Errorf("look up session %s: %w", sn.SessionID, err)
		}
		if !ok {
			return fmt.Errorf("session %s: %w", sn.SessionID, errdefs.ErrNotFound)
		}
		taken, err := exists(ctx, tx, "SELECT 1 FROM snapshots WHERE id = ?", sn.ID)
		if err != nil {
			return err
		}
		if taken {
			return errdefs.ErrAlreadyExists
		}
		if sn.ParentID != "" {
			ok, err := exists(ctx, tx, "SELECT 1 FROM snapshots WHERE id = ? AND tenant_id = ?", sn.ParentID, sn.TenantID)
			if err != nil {
				return fmt.Errorf("look up parent snapshot %s: %w", sn.ParentID, err)
			}
			if !ok {
				return fmt.Errorf("parent snapshot %s: %w", sn.ParentID, errdefs.ErrNotFound)
			}
		}
		if err := checkSnapshotName(ctx, tx, sn); err != nil {
			return err
		}
		meta, err := json.Marshal(sn.Meta)
		if err != nil {
			return fmt.Errorf("encode meta: %w", err)
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO snapshots ("+snapshotCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			sn.ID, sn.TenantID, sn.SessionID, sn.ParentID, sn.Name, string(sn.Trigger), string(sn.State), sn.Reason, sn.Pinned,
			sn.LogicalBytes, sn.StoredBytes, string(meta), micros(sn.CreatedAt), nullMicros(sn.CompletedAt), sn.Version)
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
	sn, err := scanSnapshot(s.queryRowR(ctx, "SELECT "+snapshotCols+" FROM snapshots WHERE id = ? AND tenant_id = ?", id, tenantID))
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("get snapshot %s: %w", id, noRowsIsNotFound(err))
	}
	return sn, nil
}

// ListSnapshots implements store.Store.
func (s *DB) ListSnapshots(ctx context.Context, tenantID string, f store.SnapshotFilter) ([]store.Snapshot, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", fmt.Errorf("list snapshots of tenant %s: %w", tenantID, err)
	}
	limit, _ := store.NormalizeLimit(f.Limit) // Validate checked it

	var where []string
	var args []any
	if f.SessionID != "" {
		var one int
		err := s.queryRowR(ctx, "SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?", f.SessionID, tenantID).Scan(&one)
		if err != nil {
			return nil, "", fmt.Errorf("list snapshots of session %s: %w", f.SessionID, noRowsIsNotFound(err))
		}
		where, args = append(where, "session_id = ?"), append(args, f.SessionID)
	}
	if len(f.States) > 0 {
		w, a := in("state", f.States)
		where, args = append(where, w), append(args, a...)
	}
	query, args := page(snapshotCols, "snapshots", tenantID, where, args, "", "", nil, f.Cursor, limit, false)
	out, err := s.querySnapshots(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list snapshots of tenant %s: %w", tenantID, err)
	}
	out, next := nextPage(out, limit, func(sn store.Snapshot) (time.Time, string) { return sn.CreatedAt, sn.ID })
	return out, next, nil
}

// UpdateSnapshot implements store.Store.
func (s *DB) UpdateSnapshot(ctx context.Context, sn store.Snapshot) (store.Snapshot, error) {
	if sn.ID == "" || sn.TenantID == "" {
		return store.Snapshot{}, fmt.Errorf("update snapshot %q of tenant %q: ID or tenant ID is empty: %w",
			sn.ID, sn.TenantID, errdefs.ErrInvalidArgument)
	}
	sn = normalizeSnapshot(sn)
	in := sn // a retried transaction starts again from what was asked
	err := s.write(ctx, func(tx *Tx) error {
		sn = in
		cur, err := scanSnapshot(tx.QueryRowContext(ctx, "SELECT "+snapshotCols+" FROM snapshots WHERE id = ? AND tenant_id = ?", sn.ID, sn.TenantID))
		if err != nil {
			return noRowsIsNotFound(err)
		}
		// The immutable fields are the stored ones; Validate then judges the rest.
		sn.SessionID, sn.ParentID, sn.Trigger, sn.CreatedAt = cur.SessionID, cur.ParentID, cur.Trigger, cur.CreatedAt
		if err := sn.Validate(); err != nil {
			return err
		}
		if cur.Version != sn.Version {
			return fmt.Errorf("version %d is stale, stored version is %d: %w", sn.Version, cur.Version, errdefs.ErrConflict)
		}
		if err := store.CheckSnapshotUpdate(cur, sn); err != nil {
			return err
		}
		if sn.Name != cur.Name {
			if err := checkSnapshotName(ctx, tx, sn); err != nil {
				return err
			}
		}
		sn.Version = cur.Version + 1
		meta, err := json.Marshal(sn.Meta)
		if err != nil {
			return fmt.Errorf("encode meta: %w", err)
		}
		res, err := tx.ExecContext(ctx, `UPDATE snapshots SET
	name = ?, state = ?, reason = ?, pinned = ?, logical_bytes = ?, stored_bytes = ?, meta = ?,
	completed_at = ?, version = ?
WHERE id = ? AND tenant_id = ? AND version = ?`,
			sn.Name, string(sn.State), sn.Reason, sn.Pinned, sn.LogicalBytes, sn.StoredBytes, string(meta),
			nullMicros(sn.CompletedAt), sn.Version, sn.ID, sn.TenantID, cur.Version)
		return oneRow(res, err)
	})
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("update snapshot %s: %w", sn.ID, err)
	}
	return sn, nil
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
		var heldBy string
		err = tx.QueryRowContext(ctx, "SELECT id FROM sessions WHERE head_snapshot_id = ? AND state <> ? ORDER BY id LIMIT 1",
			id, string(store.SessionDeleted)).Scan(&heldBy)
		switch {
		case err == nil:
			return fmt.Errorf("session %s resumes from it: %w", heldBy, errdefs.ErrConflict)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("look up sessions resuming from it: %w", mapErr(err))
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM snapshots WHERE id = ? AND tenant_id = ?", id, tenantID)
		return oneRow(res, err)
	})
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}

// ListSnapshotsByState implements store.Store.
func (s *DB) ListSnapshotsByState(ctx context.Context, states []store.SnapshotState, limit int) ([]store.Snapshot, error) {
	return listByState(ctx, s, "snapshots", snapshotCols, "created_at", states, limit, scanSnapshot)
}

// querySnapshots runs a SELECT of snapshotCols on the readers and scans every row.
func (s *DB) querySnapshots(ctx context.Context, query string, args ...any) ([]store.Snapshot, error) {
	return queryAll(ctx, s, query, scanSnapshot, args...)
}

// normalizeSnapshot returns sn with its times normalized and its own, non-nil copy of Meta.
func normalizeSnapshot(sn store.Snapshot) store.Snapshot {
	sn.CreatedAt = store.NormalizeTime(sn.CreatedAt)
	sn.CompletedAt = store.NormalizeTimePtr(sn.CompletedAt)
	meta := make(map[string]string, len(sn.Meta))
	maps.Copy(meta, sn.Meta)
	sn.Meta = meta
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
	sn.Meta = map[string]string{}
	if err := json.Unmarshal([]byte(meta), &sn.Meta); err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot %s: decode meta: %w", sn.ID, err)
	}
	if sn.Meta == nil { // the column held JSON null
		sn.Meta = map[string]string{}
	}
	sn.CreatedAt = fromMicros(created)
	sn.CompletedAt = fromNullMicros(completed)
	return sn, nil
}
