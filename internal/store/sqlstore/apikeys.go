package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const apiKeyCols = "id, tenant_id, name, prefix, hash, created_at, last_used_at, revoked_at, scope"

// apiKeys is the api_keys table.
var apiKeys = table[store.APIKey]{name: "api_keys", noun: "API key", cols: apiKeyCols, scan: scanAPIKey}

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
	// The hash identifies a secret: keep it out of the message.
	return apiKeys.one(s.readRow(ctx, apiKeys.selectWhere("hash = ?"), hash), "get API key by hash")
}

// TouchAPIKey implements store.Store.
func (s *DB) TouchAPIKey(ctx context.Context, tenantID, id string, at time.Time) error {
	us := micros(at)
	return execOne(ctx, s, "touch API key "+id, `UPDATE api_keys
SET last_used_at = CASE WHEN last_used_at IS NULL OR last_used_at < ? THEN ? ELSE last_used_at END
WHERE id = ? AND tenant_id = ?`, us, us, id, tenantID)
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
	out, err := queryAll(ctx, s, apiKeys.selectWhere("tenant_id = ? ORDER BY created_at, id"), scanAPIKey, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list API keys of tenant %s: %w", tenantID, err)
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
