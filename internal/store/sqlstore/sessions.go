package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const sessionCols = "id, tenant_id, state, reason, spec, network_policy, metadata, " +
	"idle_timeout_seconds, auto_resume, sandbox_id, head_snapshot_id, parent_session_id, forked_from_snapshot_id, " +
	"created_at, updated_at, last_activity_at, paused_at, version, " +
	"rolling_interval_seconds, retention_keep_all_seconds, retention_keep_hourly_seconds, retention_keep_daily_seconds, " +
	"timeout_seconds, on_timeout, ends_at"

// sessions is the sessions table, with its metadata side table.
var sessions = table[store.Session]{name: "sessions", noun: "session", cols: sessionCols, scan: scanSession,
	key:  func(se store.Session) (time.Time, string) { return se.CreatedAt, se.ID },
	meta: "session_metadata", metaFK: "session_id"}

// sessionSpec is how a store.SessionSpec is kept in the spec column (the network policy has a column of
// its own, as it does for sandboxes).
type sessionSpec struct {
	Template      string `json:"template"`
	CPUMillicores int    `json:"cpu_millicores"`
	MemoryMB      int    `json:"memory_mb"`
	DiskMB        int    `json:"disk_mb"`
	Runtime       string `json:"runtime,omitempty"`
}

// CreateSession implements store.Store.
func (s *DB) CreateSession(ctx context.Context, se store.Session) (store.Session, error) {
	if se.ID == "" {
		se.ID = store.NewID("se")
	}
	if se.State == "" {
		se.State = store.SessionCreating
	}
	if se.State.Valid() && !store.InitialSessionState(se.State) {
		return store.Session{}, fmt.Errorf("create session %s: initial state %q is not %s, %s or %s: %w",
			se.ID, se.State, store.SessionCreating, store.SessionPaused, store.SessionResuming, errdefs.ErrInvalidArgument)
	}
	if se.CreatedAt.IsZero() {
		se.CreatedAt = now()
	}
	if se.LastActivityAt.IsZero() {
		se.LastActivityAt = se.CreatedAt
	}
	se = normalizeSession(se)
	se.UpdatedAt = se.CreatedAt
	se.Version = 1
	if err := se.Validate(); err != nil {
		return store.Session{}, fmt.Errorf("create session: %w", err)
	}
	err := s.write(ctx, func(tx *Tx) error {
		if err := checkTenant(ctx, tx, se.TenantID); err != nil {
			return err
		}
		if err := checkQuota(ctx, tx, se.TenantID, "quota_sessions", "sessions", countSessions); err != nil {
			return err
		}
		if err := absent(ctx, tx, "SELECT 1 FROM sessions WHERE id = ?", se.ID); err != nil {
			return err
		}
		if err := checkSessionRefs(ctx, tx, se); err != nil {
			return err
		}
		if se.HeadSnapshotID != "" {
			if err := checkHead(ctx, tx, se.TenantID, se.HeadSnapshotID); err != nil {
				return err
			}
		}
		spec, meta, err := encodeSession(se)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO sessions ("+sessionCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			se.ID, se.TenantID, string(se.State), se.Reason, spec, string(se.Spec.NetworkPolicy), meta,
			se.IdleTimeoutSeconds, se.AutoResume, se.SandboxID, se.HeadSnapshotID, se.ParentSessionID, se.ForkedFromSnapshotID,
			micros(se.CreatedAt), micros(se.UpdatedAt), micros(se.LastActivityAt), nullMicros(se.PausedAt), se.Version,
			se.RollingIntervalSeconds, se.Retention.KeepAllSeconds, se.Retention.KeepHourlySeconds, se.Retention.KeepDailySeconds,
			se.TimeoutSeconds, string(se.OnTimeout), nullMicros(se.EndsAt))
		if err != nil {
			return mapErr(err)
		}
		return sessions.insertMetadata(ctx, tx, se.ID, se.Metadata)
	})
	if err != nil {
		return store.Session{}, fmt.Errorf("create session %s: %w", se.ID, err)
	}
	return se, nil
}

// checkSessionRefs checks the fork origin of a new session: ParentSessionID and ForkedFromSnapshotID, when
// set, must name the tenant's session and usable (uploading or complete) snapshot, and the snapshot must be
// the parent's.
func checkSessionRefs(ctx context.Context, tx *Tx, se store.Session) error {
	if se.ParentSessionID != "" {
		if err := present(ctx, tx, "parent session "+se.ParentSessionID, "SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?", se.ParentSessionID, se.TenantID); err != nil {
			return err
		}
	}
	if se.ForkedFromSnapshotID == "" {
		return nil
	}
	var sessionID, state string
	err := tx.QueryRowContext(ctx, "SELECT session_id, state FROM snapshots WHERE id = ? AND tenant_id = ?",
		se.ForkedFromSnapshotID, se.TenantID).Scan(&sessionID, &state)
	if err != nil {
		return fmt.Errorf("fork source snapshot %s: %w", se.ForkedFromSnapshotID, noRowsIsNotFound(err))
	}
	if !store.SnapshotState(state).Usable() {
		return fmt.Errorf("fork source snapshot %s is %s, not %s or %s: %w",
			se.ForkedFromSnapshotID, state, store.SnapshotUploading, store.SnapshotComplete, errdefs.ErrFailedPrecondition)
	}
	if se.ParentSessionID != "" && sessionID != se.ParentSessionID {
		return fmt.Errorf("fork source snapshot %s belongs to session %s, not parent session %s: %w",
			se.ForkedFromSnapshotID, sessionID, se.ParentSessionID, errdefs.ErrInvalidArgument)
	}
	return nil
}

// checkHead returns nil if id names a usable (uploading or complete) snapshot of the tenant, ErrNotFound if
// it names none and ErrFailedPrecondition if the snapshot is not usable.
func checkHead(ctx context.Context, tx *Tx, tenantID, id string) error {
	var state string
	err := tx.QueryRowContext(ctx, "SELECT state FROM snapshots WHERE id = ? AND tenant_id = ?", id, tenantID).Scan(&state)
	if err != nil {
		return fmt.Errorf("head snapshot %s: %w", id, noRowsIsNotFound(err))
	}
	if !store.SnapshotState(state).Usable() {
		return fmt.Errorf("head snapshot %s is %s, not %s or %s: %w",
			id, state, store.SnapshotUploading, store.SnapshotComplete, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// GetSession implements store.Store.
func (s *DB) GetSession(ctx context.Context, tenantID, id string) (store.Session, error) {
	return sessions.one(s.readRow(ctx, sessions.selectWhere("id = ? AND tenant_id = ?"), id, tenantID), "get session "+id)
}

// GetSessionAnyTenant implements store.Store.
func (s *DB) GetSessionAnyTenant(ctx context.Context, id string) (store.Session, error) {
	return sessions.one(s.readRow(ctx, sessions.selectWhere("id = ?"), id), "get session "+id)
}

// ListSessions implements store.Store.
func (s *DB) ListSessions(ctx context.Context, tenantID string, f store.SessionFilter) ([]store.Session, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", fmt.Errorf("list sessions of tenant %s: %w", tenantID, err)
	}
	return sessions.page(ctx, s, tenantID, withStates(listing{metadata: f.Metadata, cursor: f.Cursor, limit: f.Limit, desc: f.Descending}, f.States))
}

// UpdateSession implements store.Store.
func (s *DB) UpdateSession(ctx context.Context, se store.Session) (store.Session, error) {
	se = normalizeSession(se)
	if err := se.Validate(); err != nil {
		return store.Session{}, fmt.Errorf("update session: %w", err)
	}
	return sessions.update(ctx, s, se, se.ID, se.TenantID, func(tx *Tx, cur store.Session, se *store.Session) error {
		if err := checkVersion(se.Version, cur.Version); err != nil {
			return err
		}
		if err := store.CheckSessionTransition(cur.State, se.State); err != nil {
			return err
		}
		if se.HeadSnapshotID != "" && se.HeadSnapshotID != cur.HeadSnapshotID {
			if err := checkHead(ctx, tx, se.TenantID, se.HeadSnapshotID); err != nil {
				return err
			}
		}
		se.ParentSessionID = cur.ParentSessionID
		se.ForkedFromSnapshotID = cur.ForkedFromSnapshotID
		se.CreatedAt = cur.CreatedAt
		se.UpdatedAt = later(now(), cur.UpdatedAt)
		se.LastActivityAt = later(se.LastActivityAt, cur.LastActivityAt)
		se.Version = cur.Version + 1
		spec, meta, err := encodeSession(*se)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET
	state = ?, reason = ?, spec = ?, network_policy = ?, metadata = ?,
	idle_timeout_seconds = ?, auto_resume = ?, sandbox_id = ?, head_snapshot_id = ?,
	updated_at = ?, last_activity_at = ?, paused_at = ?, version = ?,
	rolling_interval_seconds = ?, retention_keep_all_seconds = ?, retention_keep_hourly_seconds = ?, retention_keep_daily_seconds = ?,
	timeout_seconds = ?, on_timeout = ?, ends_at = ?
WHERE id = ? AND tenant_id = ? AND version = ?`,
			string(se.State), se.Reason, spec, string(se.Spec.NetworkPolicy), meta,
			se.IdleTimeoutSeconds, se.AutoResume, se.SandboxID, se.HeadSnapshotID,
			micros(se.UpdatedAt), micros(se.LastActivityAt), nullMicros(se.PausedAt), se.Version,
			se.RollingIntervalSeconds, se.Retention.KeepAllSeconds, se.Retention.KeepHourlySeconds, se.Retention.KeepDailySeconds,
			se.TimeoutSeconds, string(se.OnTimeout), nullMicros(se.EndsAt),
			se.ID, se.TenantID, cur.Version)
		if err := oneRow(res, err); err != nil {
			return err
		}
		return sessions.replaceMetadata(ctx, tx, se.ID, cur.Metadata, se.Metadata)
	})
}

// TouchSession implements store.Store.
func (s *DB) TouchSession(ctx context.Context, tenantID, id string, at time.Time) error {
	us := micros(at)
	return execOne(ctx, s, "touch session "+id, `UPDATE sessions
SET last_activity_at = CASE WHEN last_activity_at < ? THEN ? ELSE last_activity_at END
WHERE id = ? AND tenant_id = ?`, us, us, id, tenantID)
}

// ListSessionsByState implements store.Store.
func (s *DB) ListSessionsByState(ctx context.Context, states []store.SessionState, limit int) ([]store.Session, error) {
	return listByState(ctx, s, sessions, "updated_at", states, limit)
}

// ListIdleSessions implements store.Store.
func (s *DB) ListIdleSessions(ctx context.Context, now time.Time, limit int) ([]store.Session, error) {
	limit, err := store.NormalizeLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list idle sessions: %w", err)
	}
	// "idle_timeout_seconds > 0" repeats the condition of the sessions_by_activity index, so it is used.
	query := sessions.selectWhere("state = ? AND idle_timeout_seconds > 0 AND last_activity_at + idle_timeout_seconds * 1000000 <= ?" +
		" ORDER BY last_activity_at, id LIMIT ?")
	out, err := queryAll(ctx, s, query, scanSession, string(store.SessionRunning), micros(now), limit)
	if err != nil {
		return nil, fmt.Errorf("list idle sessions: %w", err)
	}
	return out, nil
}

// ListEndedSessions implements store.Store.
func (s *DB) ListEndedSessions(ctx context.Context, now time.Time, limit int) ([]store.Session, error) {
	limit, err := store.NormalizeLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list ended sessions: %w", err)
	}
	// "ends_at IS NOT NULL" repeats the condition of the sessions_by_end index, so it is used.
	query := sessions.selectWhere("ends_at IS NOT NULL AND ends_at <= ? AND state = ? ORDER BY ends_at, id LIMIT ?")
	out, err := queryAll(ctx, s, query, scanSession, micros(now), string(store.SessionRunning), limit)
	if err != nil {
		return nil, fmt.Errorf("list ended sessions: %w", err)
	}
	return out, nil
}

// DeleteSession implements store.Store.
func (s *DB) DeleteSession(ctx context.Context, tenantID, id string) error {
	err := s.write(ctx, func(tx *Tx) error {
		state, err := stateOf[store.SessionState](ctx, tx, "sessions", id, tenantID)
		if err != nil {
			return err
		}
		if state != store.SessionDeleted {
			return fmt.Errorf("state is %s, not %s: %w", state, store.SessionDeleted, errdefs.ErrConflict)
		}
		if err := unheld(ctx, tx, "one of its snapshots", `SELECT se.id FROM snapshots sn JOIN sessions se ON se.head_snapshot_id = sn.id
WHERE sn.session_id = ? AND se.id <> ? AND se.state <> ?
ORDER BY se.id LIMIT 1`, id, id, string(store.SessionDeleted)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM snapshots WHERE session_id = ?", id); err != nil {
			return fmt.Errorf("delete snapshots: %w", mapErr(err))
		}
		return deleteRow(ctx, tx, "sessions", id, tenantID)
	})
	if err != nil {
		return fmt.Errorf("delete session %s: %w", id, err)
	}
	return nil
}

// in returns "col IN (?, …)" and its arguments, for a non-empty list of values.
func in[T ~string](col string, vals []T) (string, []any) {
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = string(v)
	}
	return col + " IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(vals)), ", ") + ")", args
}

// normalizeSession returns se with its times normalized and its own, non-nil copy of Metadata and of the
// network policy.
func normalizeSession(se store.Session) store.Session {
	se.CreatedAt = store.NormalizeTime(se.CreatedAt)
	se.UpdatedAt = store.NormalizeTime(se.UpdatedAt)
	se.LastActivityAt = store.NormalizeTime(se.LastActivityAt)
	se.PausedAt = store.NormalizeTimePtr(se.PausedAt)
	se.EndsAt = store.NormalizeTimePtr(se.EndsAt)
	if se.OnTimeout == "" {
		se.OnTimeout = store.SessionTimeoutDelete
	}
	se.Metadata = copyMap(se.Metadata)
	if len(se.Spec.NetworkPolicy) == 0 {
		se.Spec.NetworkPolicy = nil // stored as '': none given
	} else {
		se.Spec.NetworkPolicy = slices.Clone(se.Spec.NetworkPolicy)
	}
	return se
}

// encodeSession returns the spec and metadata columns of se.
func encodeSession(se store.Session) (spec, meta string, err error) {
	b, err := json.Marshal(sessionSpec{Template: se.Spec.Template, CPUMillicores: se.Spec.CPUMillicores,
		MemoryMB: se.Spec.MemoryMB, DiskMB: se.Spec.DiskMB, Runtime: se.Spec.Runtime})
	if err != nil {
		return "", "", fmt.Errorf("encode spec: %w", err)
	}
	m, err := encodeMap(se.Metadata, "metadata")
	if err != nil {
		return "", "", err
	}
	return string(b), m, nil
}

func scanSession(row scanner) (store.Session, error) {
	var (
		se                         store.Session
		state, spec, netPolicy     string
		meta                       string
		created, updated, activity int64
		paused, ends               sql.NullInt64
		onTimeout                  string
	)
	err := row.Scan(&se.ID, &se.TenantID, &state, &se.Reason, &spec, &netPolicy, &meta,
		&se.IdleTimeoutSeconds, &se.AutoResume, &se.SandboxID, &se.HeadSnapshotID, &se.ParentSessionID, &se.ForkedFromSnapshotID,
		&created, &updated, &activity, &paused, &se.Version,
		&se.RollingIntervalSeconds, &se.Retention.KeepAllSeconds, &se.Retention.KeepHourlySeconds, &se.Retention.KeepDailySeconds,
		&se.TimeoutSeconds, &onTimeout, &ends)
	if err != nil {
		return store.Session{}, err
	}
	se.State = store.SessionState(state)
	var sp sessionSpec
	if err := json.Unmarshal([]byte(spec), &sp); err != nil {
		return store.Session{}, fmt.Errorf("session %s: decode spec: %w", se.ID, err)
	}
	se.Spec = store.SessionSpec{Template: sp.Template, CPUMillicores: sp.CPUMillicores, MemoryMB: sp.MemoryMB, DiskMB: sp.DiskMB, Runtime: sp.Runtime}
	if netPolicy != "" {
		se.Spec.NetworkPolicy = []byte(netPolicy)
	}
	if se.Metadata, err = decodeMap(meta, "session "+se.ID+": decode metadata"); err != nil {
		return store.Session{}, err
	}
	se.CreatedAt = fromMicros(created)
	se.UpdatedAt = fromMicros(updated)
	se.LastActivityAt = fromMicros(activity)
	se.PausedAt = fromNullMicros(paused)
	se.OnTimeout = store.SessionTimeoutAction(onTimeout)
	se.EndsAt = fromNullMicros(ends)
	return se, nil
}
