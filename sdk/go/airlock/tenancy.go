package airlock

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// API key scopes: each includes the ones after it.
const (
	ScopeAdmin = "admin" // also manages the tenant's keys (and, for the operator tenant, the tenants)
	ScopeWrite = "write" // creates, changes, deletes, runs processes, writes files
	ScopeRead  = "read"  // gets, lists, reads files
)

// Access token scopes.
const (
	TokenScopeExec  = "exec"  // exec, process streams, the process list, attach, signals
	TokenScopeFiles = "files" // every file route; writes as root, so it can plant code: as strong as exec
	TokenScopePorts = "ports" // the sandbox's ports; running code on the code interpreter's (49999) needs exec too
)

// Tenant is a tenant as the API reports it.
type Tenant struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Operator marks the tenant whose admin keys also manage the other tenants.
	Operator   bool       `json:"operator"`
	Disabled   bool       `json:"disabled"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	Quotas     Quotas     `json:"quotas"`
	// KeyProvider holds the tenant's key-encryption keys: "local" (the server's keyring) or "pkcs11"
	// (an HSM or KMS through PKCS#11).
	KeyProvider string `json:"key_provider"`
	// Runtimes are the runtimes the tenant's sandboxes may run on; "*" is every one. By default the
	// operator's tenant may use every runtime and the others gvisor only.
	Runtimes []string `json:"runtimes,omitempty"`
}

// TenantKey is the response of GET /v1/key.
type TenantKey struct {
	Provider string `json:"provider"`
	// Status is "available" or "unavailable" (revoked, destroyed, or cannot be reached; Error says).
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// RotatedKey is the response of POST /v1/key/rotate.
type RotatedKey struct {
	KeyID string `json:"key_id"`
}

// RevokeKeyRequest is the body of POST /v1/key/revoke: Confirm must be the tenant's ID.
type RevokeKeyRequest struct {
	Confirm string `json:"confirm"`
}

// Quotas bound what a tenant may hold at once; 0 is no limit.
type Quotas struct {
	// RunningSandboxes counts sandboxes creating, running or stopping, sessions' included.
	RunningSandboxes int64 `json:"running_sandboxes"`
	// Sessions counts sessions not deleted.
	Sessions int64 `json:"sessions"`
	// SnapshotBytes counts the bytes the tenant's snapshots added to the snapshot store. Pauses are
	// never refused for it; other snapshots and forks are.
	SnapshotBytes int64 `json:"snapshot_bytes"`
}

// Usage is the response of GET /v1/usage: the caller's tenant's quotas and what counts against them.
type Usage struct {
	Quotas Quotas `json:"quotas"`
	Usage  Quotas `json:"usage"`
	// Tenant is the ID of the key's tenant; Operator, whether that is the operator tenant.
	Tenant   string `json:"tenant,omitempty"`
	Operator bool   `json:"operator,omitempty"`
}

// TenantList is the response of GET /v1/tenants.
type TenantList struct {
	Tenants []Tenant `json:"tenants"`
}

// CreateTenantRequest is the body of POST /v1/tenants.
type CreateTenantRequest struct {
	Name string `json:"name"`
	// KeyProvider is "local" (or empty) or "pkcs11" (the server must run with --pkcs11-module).
	KeyProvider string `json:"key_provider,omitempty"`
}

// CreatedTenant is the response of POST /v1/tenants: the tenant and its first admin key, shown only
// this once.
type CreatedTenant struct {
	Tenant Tenant    `json:"tenant"`
	APIKey NewAPIKey `json:"api_key"`
}

// UpdateTenantRequest is the body of PATCH /v1/tenants/{id}; nil fields stay as they are.
type UpdateTenantRequest struct {
	// Disabled refuses (true) or accepts again (false) the tenant's keys and tokens.
	Disabled *bool `json:"disabled,omitempty"`
	// Quotas replaces all of the tenant's quotas.
	Quotas *Quotas `json:"quotas,omitempty"`
	// Runtimes replaces the runtimes the tenant may use ("*": every one; empty: the default).
	Runtimes *[]string `json:"runtimes,omitempty"`
}

// APIKey describes an API key, never the key itself.
type APIKey struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scope      string     `json:"scope"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// NewAPIKey is a new API key with the key itself, which is shown only once.
type NewAPIKey struct {
	APIKey
	Key string `json:"key"`
}

// APIKeyList is the response of GET /v1/api-keys.
type APIKeyList struct {
	APIKeys []APIKey `json:"api_keys"`
}

// CreateAPIKeyRequest is the body of POST /v1/api-keys.
type CreateAPIKeyRequest struct {
	Name string `json:"name"`
	// Scope is admin, write or read.
	Scope string `json:"scope"`
}

// AccessToken describes an access token, never the token itself.
type AccessToken struct {
	ID        string   `json:"id"`
	Name      string   `json:"name,omitempty"`
	SandboxID string   `json:"sandbox_id,omitempty"`
	SessionID string   `json:"session_id,omitempty"`
	Scopes    []string `json:"scopes"`
	// Port, if not 0, is the one port the token reaches (scope ports).
	Port   int    `json:"port,omitempty"`
	Prefix string `json:"prefix"`
	// CreatedBy is the ID of the API key that made the token: the token dies with it.
	CreatedBy string     `json:"created_by,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// NewAccessToken is a new access token with the token itself, which is shown only once.
type NewAccessToken struct {
	AccessToken
	Token string `json:"token"`
	// URLs open the token's port with the token in the URL (airlock_token=…), for a browser: the first
	// request sets a cookie for the rest. Set for tokens made for one port.
	URLs *PortURLs `json:"urls,omitempty"`
}

// PortURLs are the two forms of a URL that reaches a sandbox's port through the API's ingress.
type PortURLs struct {
	// Path is under the API's own address: /v1/sandboxes/{id}/ports/{port}/.
	Path string `json:"path"`
	// Host is <port>-<id>.<ingress domain>, the form to give a browser: the sandbox's pages get an
	// origin of their own. Empty when the server has no ingress domain.
	Host string `json:"host,omitempty"`
}

// AccessTokenList is the response of GET /v1/tokens.
type AccessTokenList struct {
	Tokens []AccessToken `json:"tokens"`
}

// CreateAccessTokenRequest is the body of POST /v1/tokens. Set SandboxID or SessionID.
type CreateAccessTokenRequest struct {
	Name      string   `json:"name,omitempty"`
	SandboxID string   `json:"sandbox_id,omitempty"`
	SessionID string   `json:"session_id,omitempty"`
	Scopes    []string `json:"scopes"`
	// TTLSeconds is the token's lifetime; 0 is one hour, at most 7 days.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// Port restricts the token to one port of the sandbox (it needs scope ports); the answer then
	// carries URLs for it. 0: every port.
	Port int `json:"port,omitempty"`
}

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

// AuditEntry is one line of a tenant's audit log export (GET /v1/audit, JSON lines). Each entry
// carries the hash of the one before it; `airlock audit verify` checks the chain.
type AuditEntry struct {
	Tenant string    `json:"tenant"`
	Seq    int64     `json:"seq"`
	Time   time.Time `json:"time"`
	// Kind is "api", "daemon", "egress", or "audit" for entries about the log itself (action "prune":
	// a retention cut, whose detail names the last entry deleted).
	Kind   string `json:"kind"`
	Actor  string `json:"actor,omitempty"`
	Action string `json:"action"`
	Target string `json:"target,omitempty"`
	Result string `json:"result,omitempty"`
	// Detail is a JSON object, as a string (hashed as it is).
	Detail string `json:"detail,omitempty"`
	// Sealed is the payload above sealed under the tenant's key ("<commitment>.<ciphertext>"), which the
	// hash covers; "-" where it was discarded. Without the key (revoked) the payload fields are empty.
	Sealed string `json:"sealed,omitempty"`
	// Salt, with the payload shown, gives the commitment (SHA-256 of the salt, then the payload).
	Salt string `json:"salt,omitempty"`
	Prev string `json:"prev"`
	Hash string `json:"hash"`
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

// LogRetention is how long the tenant's logs (its audit log and its sandboxes' flow logs) are kept: the
// body of PUT /v1/log-retention (Seconds only) and the answer of GET and PUT.
type LogRetention struct {
	// Seconds is the tenant's own setting; 0 takes the server's default.
	Seconds int64 `json:"seconds"`
	// EffectiveSeconds is what applies; 0 is forever. Answers only.
	EffectiveSeconds int64 `json:"effective_seconds"`
	// MinSeconds is the shortest retention this server lets a tenant set. Answers only.
	MinSeconds int64 `json:"min_seconds"`
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
