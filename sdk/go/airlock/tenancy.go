package airlock

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// CreateTenant makes a tenant and its first admin key (needs an admin key of the operator tenant).
func (c *Client) CreateTenant(ctx context.Context, name string) (*CreatedTenant, error) {
	return c.CreateTenantWith(ctx, CreateTenantRequest{Name: name})
}

// CreateTenantWith makes a tenant as req says, and its first admin key.
func (c *Client) CreateTenantWith(ctx context.Context, req CreateTenantRequest) (*CreatedTenant, error) {
	return callJSON[CreatedTenant](ctx, c, http.MethodPost, "/v1/tenants", nil, req, "create tenant %s", req.Name)
}

// TenantKey reports the caller's tenant's key provider and whether its key can be used now.
func (c *Client) TenantKey(ctx context.Context) (*TenantKey, error) {
	return callJSON[TenantKey](ctx, c, http.MethodGet, "/v1/key", nil, nil, "tenant key")
}

// RotateTenantKey makes a new key-encryption key the tenant's current one (needs an admin key).
func (c *Client) RotateTenantKey(ctx context.Context) (*RotatedKey, error) {
	return callJSON[RotatedKey](ctx, c, http.MethodPost, "/v1/key/rotate", nil, nil, "rotate tenant key")
}

// RevokeTenantKey destroys the tenant's keys for good (needs an admin key; tenantID confirms it):
// nothing of the tenant can be decrypted afterwards, and its sandboxes are stopped.
func (c *Client) RevokeTenantKey(ctx context.Context, tenantID string) error {
	return c.callNoAnswer(ctx, http.MethodPost, "/v1/key/revoke", nil, RevokeKeyRequest{Confirm: tenantID}, "revoke tenant key")
}

// ListTenants lists every tenant (needs an admin key of the operator tenant).
func (c *Client) ListTenants(ctx context.Context) (*TenantList, error) {
	return callJSON[TenantList](ctx, c, http.MethodGet, "/v1/tenants", nil, nil, "list tenants")
}

// GetTenant describes a tenant (needs an admin key of the operator tenant).
func (c *Client) GetTenant(ctx context.Context, id string) (*Tenant, error) {
	return callJSON[Tenant](ctx, c, http.MethodGet, "/v1/tenants/"+url.PathEscape(id), nil, nil, "get tenant %s", id)
}

// UpdateTenant changes a tenant (needs an admin key of the operator tenant).
func (c *Client) UpdateTenant(ctx context.Context, id string, req UpdateTenantRequest) (*Tenant, error) {
	return callJSON[Tenant](ctx, c, http.MethodPatch, "/v1/tenants/"+url.PathEscape(id), nil, req, "update tenant %s", id)
}

// CreateAPIKey makes an API key for the caller's tenant (needs an admin key).
func (c *Client) CreateAPIKey(ctx context.Context, name, scope string) (*NewAPIKey, error) {
	return callJSON[NewAPIKey](ctx, c, http.MethodPost, "/v1/api-keys", nil, CreateAPIKeyRequest{Name: name, Scope: scope}, "create API key %s", name)
}

// ListAPIKeys lists the caller's tenant's API keys, revoked ones included (needs an admin key).
func (c *Client) ListAPIKeys(ctx context.Context) (*APIKeyList, error) {
	return callJSON[APIKeyList](ctx, c, http.MethodGet, "/v1/api-keys", nil, nil, "list API keys")
}

// RevokeAPIKey revokes an API key at once (needs an admin key).
func (c *Client) RevokeAPIKey(ctx context.Context, id string) error {
	return c.callNoAnswer(ctx, http.MethodDelete, "/v1/api-keys/"+url.PathEscape(id), nil, nil, "revoke API key %s", id)
}

// CreateAccessToken makes an access token for one sandbox or session, to hand to an agent.
func (c *Client) CreateAccessToken(ctx context.Context, req CreateAccessTokenRequest) (*NewAccessToken, error) {
	return callJSON[NewAccessToken](ctx, c, http.MethodPost, "/v1/tokens", nil, req, "create access token")
}

// ListAccessTokens lists the tenant's unexpired access tokens; sandboxID or sessionID, if not empty,
// selects those of one object.
func (c *Client) ListAccessTokens(ctx context.Context, sandboxID, sessionID string) (*AccessTokenList, error) {
	q := url.Values{}
	if sandboxID != "" {
		q.Set("sandbox_id", sandboxID)
	}
	if sessionID != "" {
		q.Set("session_id", sessionID)
	}
	return callJSON[AccessTokenList](ctx, c, http.MethodGet, "/v1/tokens", q, nil, "list access tokens")
}

// RevokeAccessToken revokes an access token at once.
func (c *Client) RevokeAccessToken(ctx context.Context, id string) error {
	return c.callNoAnswer(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, nil, "revoke access token %s", id)
}

// Usage reports the caller's tenant's quotas and what counts against them.
func (c *Client) Usage(ctx context.Context) (*Usage, error) {
	return callJSON[Usage](ctx, c, http.MethodGet, "/v1/usage", nil, nil, "usage")
}

// ExportAudit streams the caller's tenant's audit log from the entry after afterSeq, as JSON lines of
// AuditEntry (needs an admin key). The caller closes the reader.
func (c *Client) ExportAudit(ctx context.Context, afterSeq int64) (io.ReadCloser, error) {
	q := url.Values{}
	if afterSeq > 0 {
		q.Set("after_seq", strconv.FormatInt(afterSeq, 10))
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/audit", query: q})
	if err != nil {
		return nil, fmt.Errorf("export audit: %w", err)
	}
	return resp.Body, nil
}

// LogRetention returns how long the tenant's logs are kept (an admin key).
func (c *Client) LogRetention(ctx context.Context) (*LogRetention, error) {
	return callJSON[LogRetention](ctx, c, http.MethodGet, "/v1/log-retention", nil, nil, "get log retention")
}

// SetLogRetention sets how long the tenant's logs are kept, in seconds (0: the server's default; an admin
// key). Entries older than that are deleted by the server's next pass; the audit log's chain still
// verifies, from the record of the cut.
func (c *Client) SetLogRetention(ctx context.Context, seconds int64) (*LogRetention, error) {
	return callJSON[LogRetention](ctx, c, http.MethodPut, "/v1/log-retention", nil, LogRetention{Seconds: seconds}, "set log retention")
}
