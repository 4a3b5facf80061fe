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

const apiKeyCols = "id, tenant_id, name, prefix, hash, created_at, last_used_at, revoked_at, scope"

// CreateAPIKey implements store.Store.
func (s *DB) CreateAPIKey(ctx context.Context, k store.APIKey) (store.APIKey, error) {
	if k.ID == "" {
		k.ID = store.NewID("key")
	}
	switch {
	case k.TenantID == "":
		return store.APIKey{}, fmt.Errorf("create API key %s: tenant ID is empty: %w", k.ID, errdefs.ErrInvalidArgument)
	case k.Name == "":
		return store.APIKey{}, fmt.Errorf("create API key %s: name is empty: %w", k.ID, errdefs.ErrInvalidArgument)
	case len(k.Hash) == 0:
		return store.APIKey{}, fmt.Errorf("create API key %s: hash is empty: %w", k.ID, errdefs.ErrInvalidArgument)
	case !k.Scope.Valid():
		return store.APIKey{}, fmt.Errorf("create API key %s: scope %q is not admin, write or read: %w", k.ID, k.Scope, errdefs.ErrInvalidArgument)
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now()
	}
	k.CreatedAt = store.NormalizeTime(k.CreatedAt)
	k.LastUsedAt = store.NormalizeTimePtr(k.LastUsedAt)
	k.RevokedAt = store.NormalizeTimePtr(k.RevokedAt)
	k.Hash = append([]byte(nil), k.Hash...)
	err := s.write(ctx, func(tx *Tx) error {
		if err := checkTenant(ctx, tx, k.TenantID); err != nil {
			return err
		}
		taken, err := exists(ctx, tx, "SELECT 1 FROM api_keys WHERE id = ? OR hash = ?", k.ID, k.Hash)
		if err != nil {
			return err
		}
		if taken {
			return fmt.Errorf("ID or hash in use: %w", errdefs.ErrAlreadyExists)
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO api_keys ("+apiKeyCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
			k.ID, k.TenantID, k.Name, k.Prefix, k.Hash, micros(k.CreatedAt), nullMicros(k.LastUsedAt), nullMicros(k.RevokedAt), string(k.Scope))
		return mapErr(err)
	})
	if err != nil {
		return store.APIKey{}, fmt.Errorf("create API key %s: %w", k.ID, err)
	}
	return k, nil
}

// GetAPIKeyByHash implements store.Store.
func (s *DB) GetAPIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	if len(hash) == 0 {
		return store.APIKey{}, fmt.Errorf("get API key by hash: hash is empty: %w", errdefs.ErrInvalidArgument)
	}
	k, err := scanAPIKey(s.readRow(ctx, "SELECT "+apiKeyCols+" FROM api_keys WHERE hash = ?", hash))
	if errors.Is(err, sql.ErrNoRows) {
		// The hash identifies a secret: keep it out of the message.
		return store.APIKey{}, fmt.Errorf("get API key by hash: %w", errdefs.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("get API key by hash: %w", mapErr(err))
	}
	return k, nil
}

// TouchAPIKey implements store.Store.
func (s *DB) TouchAPIKey(ctx context.Context, tenantID, id string, at time.Time) error {
	us := micros(at)
	res, err := s.execW(ctx, `UPDATE api_keys
SET last_used_at = CASE WHEN last_used_at IS NULL OR last_used_at < ? THEN ? ELSE last_used_at END
WHERE id = ? AND tenant_id = ?`, us, us, id, tenantID)
	if err := oneRow(res, err); err != nil {
		return fmt.Errorf("touch API key %s: %w", id, err)
	}
	return nil
}

// RevokeAPIKey implements store.Store.
func (s *DB) RevokeAPIKey(ctx context.Context, tenantID, id string, at time.Time) error {
	err := s.write(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND tenant_id = ?",
			micros(at), id, tenantID)
		if err := oneRow(res, err); err != nil {
			return err
		}
		// The key's tokens die with it.
		_, err = tx.ExecContext(ctx, "UPDATE access_tokens SET revoked_at = ? WHERE created_by = ? AND tenant_id = ? AND revoked_at IS NULL",
			micros(at), id, tenantID)
		return mapErr(err)
	})
	if err != nil {
		return fmt.Errorf("revoke API key %s: %w", id, err)
	}
	return nil
}

// ListAPIKeys implements store.Store.
func (s *DB) ListAPIKeys(ctx context.Context, tenantID string) ([]store.APIKey, error) {
	rows, err := s.queryR(ctx, "SELECT "+apiKeyCols+" FROM api_keys WHERE tenant_id = ? ORDER BY created_at, id", tenantID)
	if err != nil {
		return nil, fmt.Errorf("list API keys of tenant %s: %w", tenantID, mapErr(err))
	}
	defer rows.Close()
	var out []store.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list API keys of tenant %s: %w", tenantID, mapErr(err))
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list API keys of tenant %s: %w", tenantID, mapErr(err))
	}
	return out, nil
}

func scanAPIKey(row scanner) (store.APIKey, error) {
	var (
		k                 store.APIKey
		created           int64
		lastUsed, revoked sql.NullInt64
	)
	if err := row.Scan(&k.ID, &k.TenantID, &k.Name, &k.Prefix, &k.Hash, &created, &lastUsed, &revoked, &k.Scope); err != nil {
		return store.APIKey{}, err
	}
	k.CreatedAt = fromMicros(created)
	k.LastUsedAt = fromNullMicros(lastUsed)
	k.RevokedAt = fromNullMicros(revoked)
	return k, nil
}

// oneRow turns the result of an UPDATE or DELETE by primary key into nil when it hit a row and
// ErrNotFound when it hit none.
func oneRow(res sql.Result, err error) error {
	if err != nil {
		return mapErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return mapErr(err)
	}
	if n == 0 {
		return errdefs.ErrNotFound
	}
	return nil
}
