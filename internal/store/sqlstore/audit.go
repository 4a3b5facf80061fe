package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

const auditCols = "tenant_id, seq, time, kind, actor, action, target, result, detail, prev, hash, sealed"

// AppendAudit implements store.Store.
func (s *DB) AppendAudit(ctx context.Context, entries []store.AuditEntry) error {
	for _, e := range entries {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("append audit: %w", err)
		}
	}
	if len(entries) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx *Tx) error {
		type head struct {
			seq  int64
			hash string
		}
		heads := map[string]head{}
		// One statement for the batch: parsing it for every entry cost more than the insert.
		ins, err := tx.PrepareContext(ctx, "INSERT INTO audit_log ("+auditCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
		if err != nil {
			return mapErr(err)
		}
		defer ins.Close()
		for _, e := range entries {
			h, ok := heads[e.TenantID]
			if !ok {
				if err := checkTenant(ctx, tx, e.TenantID); err != nil {
					return err
				}
				if h.seq, h.hash, err = auditHead(ctx, tx, e.TenantID); err != nil {
					return err
				}
			}
			e = chained(e, h.seq, h.hash)
			if _, err := ins.ExecContext(ctx, auditArgs(e)...); err != nil {
				return mapErr(err)
			}
			heads[e.TenantID] = head{e.Seq, e.Hash}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("append audit: %w", err)
	}
	return nil
}

// auditHead returns the Seq and Hash of the newest entry of the tenant's log (0 and "" for none).
func auditHead(ctx context.Context, tx *Tx, tenantID string) (int64, string, error) {
	var seq int64
	var hash string
	err := tx.QueryRowContext(ctx, "SELECT seq, hash FROM audit_log WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1", tenantID).Scan(&seq, &hash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, "", mapErr(err)
	}
	return seq, hash, nil
}

// chained returns e made the entry after (seq, hash): its Seq, Prev, normalized Time and Hash set.
func chained(e store.AuditEntry, seq int64, hash string) store.AuditEntry {
	e.Seq, e.Prev, e.Time = seq+1, hash, store.NormalizeTime(e.Time)
	e.Hash = store.AuditHash(e)
	return e
}

// auditArgs returns e's values in the order of auditCols.
func auditArgs(e store.AuditEntry) []any {
	return []any{e.TenantID, e.Seq, micros(e.Time), e.Kind, e.Actor, e.Action, e.Target, e.Result, e.Detail, e.Prev, e.Hash, e.Sealed}
}

// PruneAudit implements store.Store.
func (s *DB) PruneAudit(ctx context.Context, tenantID string, before time.Time, limit int) (int, error) {
	limit, err := store.NormalizeLimit(limit)
	if err != nil {
		return 0, fmt.Errorf("prune audit: %w", err)
	}
	cutoff := micros(store.NormalizeTime(before))
	var n int
	err = s.write(ctx, func(tx *Tx) error {
		n = 0
		headSeq, headHash, err := auditHead(ctx, tx, tenantID)
		if err != nil || headSeq == 0 {
			return err
		}
		// The cut: the oldest entries, up to the first as new as the cutoff, never the newest.
		rows, err := tx.QueryContext(ctx, "SELECT seq, hash, time, kind, action FROM audit_log WHERE tenant_id = ? AND seq < ? ORDER BY seq LIMIT ?", tenantID, headSeq, limit)
		if err != nil {
			return mapErr(err)
		}
		var last store.AuditEntry
		onlyCuts := true
		for rows.Next() {
			var e store.AuditEntry
			var t int64
			if err := rows.Scan(&e.Seq, &e.Hash, &t, &e.Kind, &e.Action); err != nil {
				rows.Close()
				return mapErr(err)
			}
			if t >= cutoff {
				break
			}
			last, n = e, n+1
			onlyCuts = onlyCuts && e.Kind == store.AuditLog && e.Action == store.AuditPrune
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return mapErr(err)
		}
		if n == 0 || onlyCuts {
			n = 0 // nothing to cut, or only the records of earlier cuts: left, so that a quiet log stays still
			return nil
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM audit_log WHERE tenant_id = ? AND seq <= ?", tenantID, last.Seq); err != nil {
			return mapErr(err)
		}
		e := chained(store.PruneEntry(tenantID, last, before, now()), headSeq, headHash)
		_, err = tx.ExecContext(ctx, "INSERT INTO audit_log ("+auditCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", auditArgs(e)...)
		return mapErr(err)
	})
	if err != nil {
		return 0, fmt.Errorf("prune audit of tenant %s: %w", tenantID, err)
	}
	return n, nil
}

// ListAudit implements store.Store.
func (s *DB) ListAudit(ctx context.Context, tenantID string, afterSeq int64, limit int) ([]store.AuditEntry, error) {
	limit, err := store.NormalizeLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	out, err := queryAll(ctx, s, "SELECT "+auditCols+" FROM audit_log WHERE tenant_id = ? AND seq > ? ORDER BY seq LIMIT ?", scanAudit, tenantID, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// scanAudit scans a row of auditCols.
func scanAudit(row scanner) (store.AuditEntry, error) {
	var e store.AuditEntry
	var t int64
	if err := row.Scan(&e.TenantID, &e.Seq, &t, &e.Kind, &e.Actor, &e.Action, &e.Target, &e.Result, &e.Detail, &e.Prev, &e.Hash, &e.Sealed); err != nil {
		return store.AuditEntry{}, err
	}
	e.Time = fromMicros(t)
	return e, nil
}
