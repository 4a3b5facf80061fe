package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// GetIdempotency implements store.Store.
func (s *DB) GetIdempotency(ctx context.Context, tenantID, key string) (store.IdempotencyRecord, error) {
	return idempotency.one(s.queryRowR(ctx, idempotency.selectWhere("tenant_id = ? AND key = ?"), tenantID, key),
		fmt.Sprintf("get idempotency key %q of tenant %s", key, tenantID))
}

// idempotency is the idempotency table.
var idempotency = table[store.IdempotencyRecord]{name: "idempotency", noun: "idempotency key",
	cols: "tenant_id, key, op, request_hash, response_status, response_body, created_at", scan: scanIdempotency}

func scanIdempotency(row scanner) (store.IdempotencyRecord, error) {
	var (
		rec     store.IdempotencyRecord
		created int64
	)
	if err := row.Scan(&rec.TenantID, &rec.Key, &rec.Op, &rec.RequestHash, &rec.ResponseStatus, &rec.ResponseBody, &created); err != nil {
		return store.IdempotencyRecord{}, err
	}
	rec.CreatedAt = fromMicros(created)
	return rec, nil
}

// PutIdempotency implements store.Store.
func (s *DB) PutIdempotency(ctx context.Context, rec store.IdempotencyRecord) error {
	switch {
	case rec.TenantID == "":
		return fmt.Errorf("put idempotency key %q: tenant ID is empty: %w", rec.Key, errdefs.ErrInvalidArgument)
	case rec.Key == "":
		return fmt.Errorf("put idempotency key of tenant %s: key is empty: %w", rec.TenantID, errdefs.ErrInvalidArgument)
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now()
	}
	err := s.write(ctx, func(tx *Tx) error {
		if err := checkTenant(ctx, tx, rec.TenantID); err != nil {
			return err
		}
		if err := absent(ctx, tx, "SELECT 1 FROM idempotency WHERE tenant_id = ? AND key = ?", rec.TenantID, rec.Key); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO idempotency ("+idempotency.cols+") VALUES (?, ?, ?, ?, ?, ?, ?)",
			rec.TenantID, rec.Key, rec.Op, nonNil(rec.RequestHash), rec.ResponseStatus, nonNil(rec.ResponseBody), micros(rec.CreatedAt))
		return mapErr(err)
	})
	if err != nil {
		return fmt.Errorf("put idempotency key %q of tenant %s: %w", rec.Key, rec.TenantID, err)
	}
	return nil
}

// DeleteIdempotencyBefore implements store.Store.
func (s *DB) DeleteIdempotencyBefore(ctx context.Context, before time.Time) (int64, error) {
	return execCount(ctx, s, fmt.Sprintf("delete idempotency records before %s", before), "DELETE FROM idempotency WHERE created_at < ?", micros(before))
}

// nonNil returns b, or an empty slice for nil, for NOT NULL BLOB columns.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
