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
	var out CreatedTenant
	if err := c.doJSON(ctx, http.MethodPost, "/v1/tenants", nil, req, &out, nil); err != nil {
		return nil, fmt.Errorf("create tenant %s: %w", req.Name, err)
	}
	return &out, nil
}

// TenantKey reports the caller's tenant's key provider and whether its key can be used now.
func (c *Client) TenantKey(ctx context.Context) (*TenantKey, error) {
	var out TenantKey
	if err := c.doJSON(ctx, http.MethodGet, "/v1/key", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("tenant key: %w", err)
	}
	return &out, nil
}

// RotateTenantKey makes a new key-encryption key the tenant's current one (needs an admin key).
func (c *Client) RotateTenantKey(ctx context.Context) (*RotatedKey, error) {
	var out RotatedKey
	if err := c.doJSON(ctx, http.MethodPost, "/v1/key/rotate", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("rotate tenant key: %w", err)
	}
	return &out, nil
}

// RevokeTenantKey destroys the tenant's keys for good (needs an admin key; tenantID confirms it):
// nothing of the tenant can be decrypted afterwards, and its sandboxes are stopped.
func (c *Client) RevokeTenantKey(ctx context.Context, tenantID string) error {
	if err := c.doJSON(ctx, http.MethodPost, "/v1/key/revoke", nil, RevokeKeyRequest{Confirm: tenantID}, nil, nil); err != nil {
		return fmt.Errorf("revoke tenant key: %w", err)
	}
	return nil
}

// ListTenants lists every tenant (needs an admin key of the operator tenant).
func (c *Client) ListTenants(ctx context.Context) (*TenantList, error) {
	var out TenantList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/tenants", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return &out, nil
}

// GetTenant describes a tenant (needs an admin key of the operator tenant).
func (c *Client) GetTenant(ctx context.Context, id string) (*Tenant, error) {
	var out Tenant
	if err := c.doJSON(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(id), nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("get tenant %s: %w", id, err)
	}
	return &out, nil
}

// UpdateTenant changes a tenant (needs an admin key of the operator tenant).
func (c *Client) UpdateTenant(ctx context.Context, id string, req UpdateTenantRequest) (*Tenant, error) {
	var out Tenant
	if err := c.doJSON(ctx, http.MethodPatch, "/v1/tenants/"+url.PathEscape(id), nil, req, &out, nil); err != nil {
		return nil, fmt.Errorf("update tenant %s: %w", id, err)
	}
	return &out, nil
}

// CreateAPIKey makes an API key for the caller's tenant (needs an admin key).
func (c *Client) CreateAPIKey(ctx context.Context, name, scope string) (*NewAPIKey, error) {
	var out NewAPIKey
	if err := c.doJSON(ctx, http.MethodPost, "/v1/api-keys", nil, CreateAPIKeyRequest{Name: name, Scope: scope}, &out, nil); err != nil {
		return nil, fmt.Errorf("create API key %s: %w", name, err)
	}
	return &out, nil
}

// ListAPIKeys lists the caller's tenant's API keys, revoked ones included (needs an admin key).
func (c *Client) ListAPIKeys(ctx context.Context) (*APIKeyList, error) {
	var out APIKeyList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/api-keys", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	return &out, nil
}

// RevokeAPIKey revokes an API key at once (needs an admin key).
func (c *Client) RevokeAPIKey(ctx context.Context, id string) error {
	if err := c.doJSON(ctx, http.MethodDelete, "/v1/api-keys/"+url.PathEscape(id), nil, nil, nil, nil); err != nil {
		return fmt.Errorf("revoke API key %s: %w", id, err)
	}
	return nil
}

// CreateAccessToken makes an access token for one sandbox or session, to hand to an agent.
func (c *Client) CreateAccessToken(ctx context.Context, req CreateAccessTokenRequest) (*NewAccessToken, error) {
	var out NewAccessToken
	if err := c.doJSON(ctx, http.MethodPost, "/v1/tokens", nil, req, &out, nil); err != nil {
		return nil, fmt.Errorf("create access token: %w", err)
	}
	return &out, nil
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
	var out AccessTokenList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/tokens", q, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("list access tokens: %w", err)
	}
	return &out, nil
}

// RevokeAccessToken revokes an access token at once.
func (c *Client) RevokeAccessToken(ctx context.Context, id string) error {
	if err := c.doJSON(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, nil, nil, nil); err != nil {
		return fmt.Errorf("revoke access token %s: %w", id, err)
	}
	return nil
}

// Usage reports the caller's tenant's quotas and what counts against them.
func (c *Client) Usage(ctx context.Context) (*Usage, error) {
	var out Usage
	if err := c.doJSON(ctx, http.MethodGet, "/v1/usage", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	return &out, nil
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
	var out LogRetention
	if err := c.doJSON(ctx, http.MethodGet, "/v1/log-retention", nil, nil, &out, nil); err != nil {
		return nil, fmt.Errorf("get log retention: %w", err)
	}
	return &out, nil
}

// SetLogRetention sets how long the tenant's logs are kept, in seconds (0: the server's default; an admin
// key). Entries older than that are deleted by the server's next pass; the audit log's chain still
// verifies, from the record of the cut.
func (c *Client) SetLogRetention(ctx context.Context, seconds int64) (*LogRetention, error) {
	var out LogRetention
	if err := c.doJSON(ctx, http.MethodPut, "/v1/log-retention", nil, LogRetention{Seconds: seconds}, &out, nil); err != nil {
		return nil, fmt.Errorf("set log retention: %w", err)
	}
	return &out, nil
}
