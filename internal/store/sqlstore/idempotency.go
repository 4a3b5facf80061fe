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
	var (
		rec     store.IdempotencyRecord
		created int64
	)
	err := s.queryRowR(ctx, `SELECT tenant_id, key, op, request_hash, response_status, response_body, created_at
FROM idempotency WHERE tenant_id = ? AND key = ?`, tenantID, key).Scan(
		&rec.TenantID, &rec.Key, &rec.Op, &rec.RequestHash, &rec.ResponseStatus, &rec.ResponseBody, &created)
	if err != nil {
		return store.IdempotencyRecord{}, fmt.Errorf("get idempotency key %q of tenant %s: %w", key, tenantID, noRowsIsNotFound(err))
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
		taken, err := exists(ctx, tx, "SELECT 1 FROM idempotency WHERE tenant_id = ? AND key = ?", rec.TenantID, rec.Key)
		if err != nil {
			return err
		}
		if taken {
			return errdefs.ErrAlreadyExists
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO idempotency
	(tenant_id, key, op, request_hash, response_status, response_body, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)`,
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
	res, err := s.execW(ctx, "DELETE FROM idempotency WHERE created_at < ?", micros(before))
	if err != nil {
		return 0, fmt.Errorf("delete idempotency records before %s: %w", before, mapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("delete idempotency records before %s: %w", before, mapErr(err))
	}
	return n, nil
}

// nonNil returns b, or an empty slice for nil, for NOT NULL BLOB columns.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
