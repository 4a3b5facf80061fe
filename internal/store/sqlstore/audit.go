package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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
				err := tx.QueryRowContext(ctx, "SELECT seq, hash FROM audit_log WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1", e.TenantID).Scan(&h.seq, &h.hash)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return mapErr(err)
				}
			}
			e.Seq, e.Prev, e.Time = h.seq+1, h.hash, store.NormalizeTime(e.Time)
			e.Hash = store.AuditHash(e)
			if _, err := ins.ExecContext(ctx,
				e.TenantID, e.Seq, micros(e.Time), e.Kind, e.Actor, e.Action, e.Target, e.Result, e.Detail, e.Prev, e.Hash, e.Sealed); err != nil {
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

// ListAudit implements store.Store.
func (s *DB) ListAudit(ctx context.Context, tenantID string, afterSeq int64, limit int) ([]store.AuditEntry, error) {
	limit, err := store.NormalizeLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	rows, err := s.queryR(ctx, "SELECT "+auditCols+" FROM audit_log WHERE tenant_id = ? AND seq > ? ORDER BY seq LIMIT ?", tenantID, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit of tenant %s: %w", tenantID, mapErr(err))
	}
	defer rows.Close()
	var out []store.AuditEntry
	for rows.Next() {
		var e store.AuditEntry
		var t int64
		if err := rows.Scan(&e.TenantID, &e.Seq, &t, &e.Kind, &e.Actor, &e.Action, &e.Target, &e.Result, &e.Detail, &e.Prev, &e.Hash, &e.Sealed); err != nil {
			return nil, fmt.Errorf("list audit of tenant %s: %w", tenantID, mapErr(err))
		}
		e.Time = fromMicros(t)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit of tenant %s: %w", tenantID, mapErr(err))
	}
	return out, nil
}
