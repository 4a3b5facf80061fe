package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const tokenCols = "id, tenant_id, name, sandbox_id, session_id, scopes, prefix, hash, created_by, created_at, expires_at, revoked_at, port"

// tokens is the access_tokens table.
var tokens = table[store.AccessToken]{name: "access_tokens", noun: "access token", cols: tokenCols, scan: scanToken}

// CreateAccessToken implements store.Store.
func (s *DB) CreateAccessToken(ctx context.Context, tok store.AccessToken, lim store.TokenLimits) (store.AccessToken, error) {
	if tok.ID == "" {
		tok.ID = store.NewID("tok")
	}
	if tok.CreatedAt.IsZero() {
		tok.CreatedAt = now()
	}
	tok.CreatedAt = store.NormalizeTime(tok.CreatedAt)
	tok.ExpiresAt = store.NormalizeTime(tok.ExpiresAt)
	tok.RevokedAt = store.NormalizeTimePtr(tok.RevokedAt)
	tok.Hash = append([]byte(nil), tok.Hash...)
	tok.Scopes = slices.Clone(tok.Scopes)
	if err := tok.Validate(); err != nil {
		return store.AccessToken{}, fmt.Errorf("create access token: %w", err)
	}
	err := s.write(ctx, func(tx *Tx) error {
		if err := checkTenant(ctx, tx, tok.TenantID); err != nil {
			return err
		}
		q, id := "SELECT 1 FROM sandboxes WHERE id = ? AND tenant_id = ?", tok.SandboxID
		if tok.SessionID != "" {
			q, id = "SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?", tok.SessionID
		}
		if err := present(ctx, tx, id, q, id, tok.TenantID); err != nil {
			return err
		}
		taken, err := exists(ctx, tx, "SELECT 1 FROM access_tokens WHERE id = ? OR hash = ?", tok.ID, tok.Hash)
		if err != nil {
			return err
		}
		if taken {
			return fmt.Errorf("ID or hash in use: %w", errdefs.ErrAlreadyExists)
		}
		if tok.CreatedBy != "" {
			revoked, err := exists(ctx, tx, "SELECT 1 FROM api_keys WHERE id = ? AND tenant_id = ? AND revoked_at IS NOT NULL", tok.CreatedBy, tok.TenantID)
			if err != nil {
				return err
			}
			if revoked {
				return fmt.Errorf("API key %s was revoked: %w", tok.CreatedBy, errdefs.ErrPermissionDenied)
			}
		}
		if err := checkTokenLimits(ctx, tx, tok, lim); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO access_tokens ("+tokenCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			tok.ID, tok.TenantID, tok.Name, tok.SandboxID, tok.SessionID, joinScopes(tok.Scopes), tok.Prefix, tok.Hash,
			tok.CreatedBy, micros(tok.CreatedAt), micros(tok.ExpiresAt), nullMicros(tok.RevokedAt), tok.Port)
		return mapErr(err)
	})
	if err != nil {
		return store.AccessToken{}, fmt.Errorf("create access token %s: %w", tok.ID, err)
	}
	return tok, nil
}

// checkTokenLimits fails with ErrResourceExhausted if another live token of tok's object, or of its
// tenant, would pass a bound of lim.
func checkTokenLimits(ctx context.Context, tx *Tx, tok store.AccessToken, lim store.TokenLimits) error {
	live := " AND revoked_at IS NULL AND expires_at > ?"
	at := micros(tok.CreatedAt)
	if lim.PerObject > 0 {
		col, id := "sandbox_id", tok.SandboxID
		if tok.SessionID != "" {
			col, id = "session_id", tok.SessionID
		}
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM access_tokens WHERE tenant_id = ? AND "+col+" = ?"+live,
			tok.TenantID, id, at).Scan(&n); err != nil {
			return mapErr(err)
		}
		if n >= lim.PerObject {
			return fmt.Errorf("%s has %d live access tokens, the most it may have (revoke some, or let them expire): %w", id, n, errdefs.ErrResourceExhausted)
		}
	}
	if lim.PerTenant > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM access_tokens WHERE tenant_id = ?"+live, tok.TenantID, at).Scan(&n); err != nil {
			return mapErr(err)
		}
		if n >= lim.PerTenant {
			return fmt.Errorf("the tenant has %d live access tokens, the most it may have (revoke some, or let them expire): %w", n, errdefs.ErrResourceExhausted)
		}
	}
	return nil
}

// GetAccessTokenByHash implements store.Store.
func (s *DB) GetAccessTokenByHash(ctx context.Context, hash []byte) (store.AccessToken, error) {
	if len(hash) == 0 {
		return store.AccessToken{}, fmt.Errorf("get access token by hash: hash is empty: %w", errdefs.ErrInvalidArgument)
	}
	return tokens.one(s.readRow(ctx, tokens.selectWhere("hash = ?"), hash), "get access token by hash")
}

// ListAccessTokens implements store.Store.
func (s *DB) ListAccessTokens(ctx context.Context, tenantID string, at time.Time, f store.AccessTokenFilter) ([]store.AccessToken, error) {
	q := tokens.selectWhere("tenant_id = ? AND expires_at > ?")
	args := []any{tenantID, micros(at)}
	if f.SandboxID != "" {
		q += " AND sandbox_id = ?"
		args = append(args, f.SandboxID)
	}
	if f.SessionID != "" {
		q += " AND session_id = ?"
		args = append(args, f.SessionID)
	}
	out, err := queryAll(ctx, s, q+" ORDER BY created_at, id", scanToken, args...)
	if err != nil {
		return nil, fmt.Errorf("list access tokens of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// RevokeAccessToken implements store.Store.
func (s *DB) RevokeAccessToken(ctx context.Context, tenantID, id string, at time.Time) error {
	return execOne(ctx, s, "revoke access token "+id, "UPDATE access_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND tenant_id = ?",
		micros(at), id, tenantID)
}

// DeleteAccessTokensExpiredBefore implements store.Store.
func (s *DB) DeleteAccessTokensExpiredBefore(ctx context.Context, before time.Time) (int64, error) {
	return execCount(ctx, s, "delete expired access tokens", "DELETE FROM access_tokens WHERE expires_at < ?", micros(before))
}

func joinScopes(ss []store.TokenScope) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ",")
}

func scanToken(row scanner) (store.AccessToken, error) {
	var (
		tok              store.AccessToken
		scopes           string
		created, expires int64
		revoked          sql.NullInt64
	)
	if err := row.Scan(&tok.ID, &tok.TenantID, &tok.Name, &tok.SandboxID, &tok.SessionID, &scopes, &tok.Prefix, &tok.Hash,
		&tok.CreatedBy, &created, &expires, &revoked, &tok.Port); err != nil {
		return store.AccessToken{}, err
	}
	for _, p := range strings.Split(scopes, ",") {
		if p != "" {
			tok.Scopes = append(tok.Scopes, store.TokenScope(p))
		}
	}
	tok.CreatedAt = fromMicros(created)
	tok.ExpiresAt = fromMicros(expires)
	tok.RevokedAt = fromNullMicros(revoked)
	return tok, nil
}
