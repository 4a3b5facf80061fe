package controlplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/secrets"
	"github.com/airlockrun/airlock/internal/store"
)

// Credential prefixes, so that secret scanners and people recognize Airlock's credentials.
const (
	// APIKeyPrefix starts every API key.
	APIKeyPrefix = "ak_"
	// AccessTokenPrefix starts every access token.
	AccessTokenPrefix = "at_"
)

// Bounds of access tokens' lifetimes.
const (
	DefaultTokenTTL = time.Hour
	MaxTokenTTL     = 7 * 24 * time.Hour
)

// Principal is who made a request: a tenant's API key, or an access token for one sandbox or session.
type Principal struct {
	TenantID string
	// Operator is set for the operator tenant, whose admin keys also manage the other tenants.
	Operator bool
	// KeyID and Scope are the API key's; both are empty for an access token.
	KeyID string
	Scope store.Scope
	// Token is the access token, or nil for an API key.
	Token *store.AccessToken
}

// Bootstrap makes sure an operator tenant with an API key exists. On first start it creates them and
// returns the new key (the only time it is ever shown); afterwards it returns "". Of servers starting
// at once on one empty database, one makes the operator tenant (the Store allows only one); the others
// find it.
func (s *accounts) Bootstrap(ctx context.Context) (apiKey string, err error) {
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	if len(ts) > 0 {
		return "", nil
	}
	t, err := s.store.CreateTenant(ctx, store.Tenant{Name: "default", Operator: true})
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		return "", nil // another server made it a moment ago
	}
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	key, _, err := s.CreateAPIKey(ctx, t.ID, "bootstrap", store.ScopeAdmin)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	return key, nil
}

// newCredential returns a fresh credential with the given prefix: 32 random bytes, base64url.
func newCredential(prefix string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// MaxNameLen bounds the names of keys, tokens and tenants.
const MaxNameLen = 128

func checkName(what, name string, required bool) error {
	switch {
	case name == "" && required:
		return fmt.Errorf("%s name is required: %w", what, errdefs.ErrInvalidArgument)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%s name is longer than %d bytes: %w", what, MaxNameLen, errdefs.ErrInvalidArgument)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%s name has a control character: %w", what, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CreateAPIKey makes a new key for the tenant and returns it; only its hash is stored.
func (s *accounts) CreateAPIKey(ctx context.Context, tenantID, name string, scope store.Scope) (string, store.APIKey, error) {
	if err := checkName("API key", name, true); err != nil {
		return "", store.APIKey{}, err
	}
	if !scope.Valid() {
		return "", store.APIKey{}, fmt.Errorf("scope %q is not admin, write or read: %w", truncate(string(scope), 32), errdefs.ErrInvalidArgument)
	}
	key, err := newCredential(APIKeyPrefix)
	if err != nil {
		return "", store.APIKey{}, err
	}
	k, err := s.store.CreateAPIKey(ctx, store.APIKey{TenantID: tenantID, Name: name, Scope: scope, Prefix: key[:10], Hash: hashKey(key)})
	if err != nil {
		return "", store.APIKey{}, err
	}
	return key, k, nil
}

// ListAPIKeys lists the tenant's API keys, revoked ones included.
func (s *accounts) ListAPIKeys(ctx context.Context, tenantID string) ([]store.APIKey, error) {
	return s.store.ListAPIKeys(ctx, tenantID)
}

// RevokeAPIKey revokes one of the tenant's API keys at once.
func (s *accounts) RevokeAPIKey(ctx context.Context, tenantID, id string) error {
	return s.store.RevokeAPIKey(ctx, tenantID, id, s.now())
}

func hashKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// maxCredentialLen bounds what Authenticate hashes and looks up.
const maxCredentialLen = 256

// Authenticate reports who a credential (an API key or an access token) belongs to. Unknown, revoked
// and expired credentials are errdefs.ErrUnauthenticated; a credential of a disabled tenant is
// errdefs.ErrPermissionDenied.
func (s *accounts) Authenticate(ctx context.Context, cred string) (Principal, error) {
	switch {
	case cred == "":
		return Principal{}, fmt.Errorf("missing API key or access token (send Authorization: Bearer <key>): %w", errdefs.ErrUnauthenticated)
	case len(cred) > maxCredentialLen:
		return Principal{}, fmt.Errorf("invalid API key: %w", errdefs.ErrUnauthenticated)
	case strings.HasPrefix(cred, AccessTokenPrefix):
		return s.authenticateToken(ctx, cred)
	}
	k, err := s.store.GetAPIKeyByHash(ctx, hashKey(cred))
	if errors.Is(err, errdefs.ErrNotFound) {
		return Principal{}, fmt.Errorf("invalid API key: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return Principal{}, err
	}
	if k.RevokedAt != nil {
		return Principal{}, fmt.Errorf("API key %s… was revoked: %w", k.Prefix, errdefs.ErrUnauthenticated)
	}
	t, err := s.enabledTenant(ctx, k.TenantID)
	if err != nil {
		return Principal{}, err
	}
	now := s.now()
	if k.LastUsedAt == nil || now.Sub(*k.LastUsedAt) > time.Minute {
		if err := s.store.TouchAPIKey(ctx, k.TenantID, k.ID, now); err != nil {
			s.log.Warn("touch api key", "key", k.ID, "err", err)
		}
	}
	return Principal{TenantID: k.TenantID, Operator: t.Operator, KeyID: k.ID, Scope: k.Scope}, nil
}

func (s *accounts) authenticateToken(ctx context.Context, cred string) (Principal, error) {
	tok, err := s.store.GetAccessTokenByHash(ctx, hashKey(cred))
	if errors.Is(err, errdefs.ErrNotFound) {
		return Principal{}, fmt.Errorf("invalid access token: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return Principal{}, err
	}
	switch {
	case tok.RevokedAt != nil:
		return Principal{}, fmt.Errorf("access token %s… was revoked: %w", tok.Prefix, errdefs.ErrUnauthenticated)
	case !s.now().Before(tok.ExpiresAt):
		return Principal{}, fmt.Errorf("access token %s… expired at %s: %w", tok.Prefix, tok.ExpiresAt.Format(time.RFC3339), errdefs.ErrUnauthenticated)
	}
	if _, err := s.enabledTenant(ctx, tok.TenantID); err != nil {
		return Principal{}, err
	}
	return Principal{TenantID: tok.TenantID, Token: &tok}, nil
}

// enabledTenant returns the tenant, or ErrPermissionDenied if it is disabled.
func (s *accounts) enabledTenant(ctx context.Context, id string) (store.Tenant, error) {
	t, err := s.store.GetTenant(ctx, id)
	if err != nil {
		return store.Tenant{}, err
	}
	if t.DisabledAt != nil {
		return store.Tenant{}, fmt.Errorf("tenant %s is disabled: %w", t.ID, errdefs.ErrPermissionDenied)
	}
	return t, nil
}

// TokenRequest asks for an access token for one sandbox or one session.
type TokenRequest struct {
	Name      string
	SandboxID string
	SessionID string
	Scopes    []store.TokenScope
	// TTL is how long the token lasts; zero: DefaultTokenTTL.
	TTL time.Duration
	// Port, if not 0, restricts the token to that one port (it must have scope ports): a port URL's token.
	Port int
}

// Bounds of the live (neither revoked nor expired) access tokens: past one, a new token is refused
// with ErrResourceExhausted (429).
const (
	MaxLiveTokensPerObject = 100
	MaxLiveTokensPerTenant = 10000
)

// CreateAccessToken makes an access token for one of the tenant's sandboxes or sessions and returns it;
// only its hash is stored. keyID names the API key that asked for it: the token dies with that key.
func (s *accounts) CreateAccessToken(ctx context.Context, tenantID, keyID string, req TokenRequest) (string, store.AccessToken, error) {
	tok, err := s.tokenOf(tenantID, keyID, req)
	if err != nil {
		return "", store.AccessToken{}, err
	}
	cred, err := newCredential(AccessTokenPrefix)
	if err != nil {
		return "", store.AccessToken{}, err
	}
	return s.storeToken(ctx, tok, cred)
}

// tokenOf checks req and returns the token it asks for, without ID, prefix and hash.
func (s *accounts) tokenOf(tenantID, keyID string, req TokenRequest) (store.AccessToken, error) {
	if err := checkName("token", req.Name, false); err != nil {
		return store.AccessToken{}, err
	}
	if (req.SandboxID == "") == (req.SessionID == "") {
		return store.AccessToken{}, fmt.Errorf("give exactly one of sandbox_id and session_id: %w", errdefs.ErrInvalidArgument)
	}
	if len(req.Scopes) == 0 {
		return store.AccessToken{}, fmt.Errorf("scopes are required: some of exec, files, ports: %w", errdefs.ErrInvalidArgument)
	}
	scopes := slices.Clone(req.Scopes)
	slices.Sort(scopes)
	scopes = slices.Compact(scopes)
	for _, sc := range scopes {
		if !sc.Valid() {
			return store.AccessToken{}, fmt.Errorf("unknown scope %q: want exec, files or ports: %w", truncate(string(sc), 32), errdefs.ErrInvalidArgument)
		}
	}
	if req.Port != 0 && (req.Port < 1 || req.Port > 65535 || !slices.Contains(scopes, store.TokenPorts)) {
		return store.AccessToken{}, fmt.Errorf("port %d: want a port in 1..65535 and the ports scope: %w", req.Port, errdefs.ErrInvalidArgument)
	}
	ttl := req.TTL
	switch {
	case ttl == 0:
		ttl = DefaultTokenTTL
	case ttl < time.Second || ttl > MaxTokenTTL:
		return store.AccessToken{}, fmt.Errorf("ttl must be between 1 s and %s: %w", MaxTokenTTL, errdefs.ErrInvalidArgument)
	}
	now := s.now()
	return store.AccessToken{
		TenantID: tenantID, Name: req.Name, SandboxID: req.SandboxID, SessionID: req.SessionID, Scopes: scopes, Port: req.Port,
		CreatedBy: keyID, CreatedAt: now, ExpiresAt: now.Add(ttl),
	}, nil
}

// storeToken stores tok as the token of credential cred, within the bounds of live tokens.
func (s *accounts) storeToken(ctx context.Context, tok store.AccessToken, cred string) (string, store.AccessToken, error) {
	tok.Prefix, tok.Hash = cred[:10], hashKey(cred)
	tok, err := s.store.CreateAccessToken(ctx, tok, store.TokenLimits{PerObject: MaxLiveTokensPerObject, PerTenant: MaxLiveTokensPerTenant})
	if err != nil {
		return "", store.AccessToken{}, err
	}
	return cred, tok, nil
}

// StableTokenMinLeft is the least time a token that StableAccessToken hands out again has left to live;
// one closer to its end is replaced by a new one.
const StableTokenMinLeft = 24 * time.Hour

// StableAccessToken returns an access token as CreateAccessToken makes it, but the same one on each call
// for the same tenant, key, name, object, scopes and port while that token lives at least
// StableTokenMinLeft longer and is not revoked: E2B's connect hands out the sandbox's token again
// instead of piling up new ones. Its credential is a MAC of its ID under the tenant's key, so any
// replica makes it again and nothing stores it. Without the secrets store (no tenant keys) it makes a
// new token each time and revokes the ones it replaces.
func (s *accounts) StableAccessToken(ctx context.Context, tenantID, keyID string, req TokenRequest) (string, error) {
	want, err := s.tokenOf(tenantID, keyID, req)
	if err != nil {
		return "", err
	}
	have, err := s.store.ListAccessTokens(ctx, tenantID, s.now(), store.AccessTokenFilter{SandboxID: req.SandboxID, SessionID: req.SessionID})
	if err != nil {
		return "", err
	}
	var same []store.AccessToken
	for _, t := range have {
		if t.RevokedAt == nil && t.Name == want.Name && t.CreatedBy == keyID && t.Port == want.Port && slices.Equal(t.Scopes, want.Scopes) {
			same = append(same, t)
		}
	}
	if s.secrets != nil {
		// The newest first: the one most likely to live long enough.
		for _, t := range slices.Backward(same) {
			if t.ExpiresAt.Sub(s.now()) < StableTokenMinLeft {
				break
			}
			cred, err := s.derivedCredential(ctx, tenantID, t.ID)
			if err != nil {
				return "", err
			}
			if bytes.Equal(hashKey(cred), t.Hash) {
				return cred, nil
			}
		}
		want.ID = store.NewID("tok")
		cred, err := s.derivedCredential(ctx, tenantID, want.ID)
		if err != nil {
			return "", err
		}
		cred, _, err = s.storeToken(ctx, want, cred)
		return cred, err
	}
	for _, t := range same {
		if err := s.store.RevokeAccessToken(ctx, tenantID, t.ID, s.now()); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return "", err
		}
	}
	cred, _, err := s.CreateAccessToken(ctx, tenantID, keyID, req)
	return cred, err
}

// derivedCredential is the credential of the stable token id: the MAC of its ID under the tenant's key.
func (s *accounts) derivedCredential(ctx context.Context, tenantID, id string) (string, error) {
	m, err := s.secrets.MAC(ctx, tenantID, "access-token", []byte(id))
	if err != nil {
		return "", fmt.Errorf("access token %s: %w", id, err)
	}
	return AccessTokenPrefix + base64.RawURLEncoding.EncodeToString(m), nil
}

// ListAccessTokens lists the tenant's unexpired access tokens, of one sandbox or session if f says so.
func (s *accounts) ListAccessTokens(ctx context.Context, tenantID string, f store.AccessTokenFilter) ([]store.AccessToken, error) {
	return s.store.ListAccessTokens(ctx, tenantID, s.now(), f)
}

// RevokeAccessToken revokes one of the tenant's access tokens at once.
func (s *accounts) RevokeAccessToken(ctx context.Context, tenantID, id string) error {
	return s.store.RevokeAccessToken(ctx, tenantID, id, s.now())
}

// CreateTenant makes a tenant with a first admin key and returns both; the key is shown only now.
// keyProvider names the provider of the tenant's keys ("" for the default, the local keyring).
func (s *accounts) CreateTenant(ctx context.Context, name, keyProvider string) (store.Tenant, string, store.APIKey, error) {
	if err := checkName("tenant", name, true); err != nil {
		return store.Tenant{}, "", store.APIKey{}, err
	}
	if keyProvider != "" && (s.keys == nil || !s.keys.Has(keyProvider)) {
		return store.Tenant{}, "", store.APIKey{}, fmt.Errorf("key provider %q is not configured on this server (local is; pkcs11 needs airlock up --pkcs11-module): %w",
			truncate(keyProvider, 32), errdefs.ErrInvalidArgument)
	}
	t, err := s.store.CreateTenant(ctx, store.Tenant{Name: name, KeyProvider: keyProvider})
	if err != nil {
		return store.Tenant{}, "", store.APIKey{}, err
	}
	key, k, err := s.CreateAPIKey(ctx, t.ID, "first admin key", store.ScopeAdmin)
	if err != nil {
		return store.Tenant{}, "", store.APIKey{}, err
	}
	return t, key, k, nil
}

// ListTenants lists every tenant.
func (s *accounts) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	return s.store.ListTenants(ctx)
}

// GetTenant describes one tenant.
func (s *accounts) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	return s.store.GetTenant(ctx, id)
}

// SetTenantDisabled disables or enables a tenant. A disabled tenant's keys and tokens are refused and
// its sandboxes are stopped (its sessions resume from their latest snapshots once it is enabled).
func (s *accounts) SetTenantDisabled(ctx context.Context, id string, disabled bool) (store.Tenant, error) {
	var at *time.Time
	if disabled {
		now := s.now()
		at = &now
	}
	t, err := s.store.SetTenantDisabled(ctx, id, at)
	if err == nil && disabled {
		s.keyring.stopTenantSandboxes(context.WithoutCancel(ctx), id, "tenant disabled")
	}
	return t, err
}

// truncate shortens s, for error messages that quote input.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// RecordsKeptFor is how long idempotency records, and access tokens after they expire, are kept.
const RecordsKeptFor = 24 * time.Hour

// expireRecords drops the idempotency records and the expired access tokens older than RecordsKeptFor.
func (s *accounts) expireRecords() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := s.now().Add(-RecordsKeptFor)
	if _, err := s.store.DeleteIdempotencyBefore(ctx, before); err != nil {
		s.log.Warn("expire idempotency records", "err", err)
	}
	if _, err := s.store.DeleteAccessTokensExpiredBefore(ctx, before); err != nil {
		s.log.Warn("expire access tokens", "err", err)
	}
}

// ListAudit returns up to limit entries of the tenant's audit log after afterSeq, in order.
// Sealed payloads are opened with the tenant's key; where it cannot open them (revoked, unavailable) the
// entries keep Sealed and no payload: the chain and the times only.
func (s *accounts) ListAudit(ctx context.Context, tenantID string, afterSeq int64, limit int) ([]store.AuditEntry, error) {
	entries, err := s.store.ListAudit(ctx, tenantID, afterSeq, limit)
	if err != nil || s.secrets == nil {
		return entries, err
	}
	var x *secrets.Sealer
	for i, e := range entries {
		if e.Sealed == "" || e.Sealed == store.AuditDiscarded || e.HasPayload() {
			continue // in the clear (from before sealing), discarded, or changed in the Store: as it is
		}
		if x == nil {
			if x, err = s.secrets.Sealer(ctx, tenantID, AuditSealPurpose, false); err != nil {
				s.log.Info("audit entries read sealed: the tenant's key cannot open them", "tenant", tenantID, "err", err)
				return entries, nil
			}
		}
		ct, err := store.AuditCiphertext(e)
		var p []byte
		if err == nil {
			p, err = x.Open(ct, store.AuditAAD(e))
		}
		if err == nil {
			entries[i], err = store.OpenedAudit(e, p)
		}
		if err != nil {
			// Left sealed: the chain's verification says whether it was tampered with.
			s.log.Warn("audit entry does not open", "tenant", tenantID, "seq", e.Seq, "err", err)
		}
	}
	return entries, nil
}

// flowKey is the tenant's flow key (flowlog.KeySize bytes), which seals its sandboxes' flow logs on the
// nodes: a MAC under the tenant's key, so that any replica makes it again, a node holds it only while it
// runs the tenant's sandboxes, and a revoked tenant key leaves the flow logs unreadable. Without the
// secrets store it is nil (flows in the clear).
func (s *accounts) flowKey(ctx context.Context, tenantID string) ([]byte, error) {
	if s.secrets == nil {
		return nil, nil
	}
	k, err := s.secrets.MAC(ctx, tenantID, "flow-log", []byte("flow key v1"))
	switch {
	case errors.Is(err, errdefs.ErrPermissionDenied) && !errors.Is(err, errdefs.ErrKeyUnavailable):
		// Revoked: as the key checks say it.
		return nil, fmt.Errorf("the key of tenant %s is unavailable, so nothing of it can be encrypted or decrypted: %v: %w", tenantID, err, errdefs.ErrKeyUnavailable)
	case err != nil:
		return nil, fmt.Errorf("the tenant's flow key: %w", err)
	}
	return k, nil
}

// AuditSealPurpose is the purpose of the key that seals the tenant's audit entries (secrets.Sealer).
const AuditSealPurpose = "audit-log"

// AuditSealer returns the sealer of the tenant's audit entries, for the audit recorder: the tenant's key
// must be usable; without the secrets store there is none (ErrFailedPrecondition).
func (s *accounts) AuditSealer(ctx context.Context, tenantID string) (*secrets.Sealer, error) {
	if s.secrets == nil {
		return nil, fmt.Errorf("no tenant keys: %w", errdefs.ErrFailedPrecondition)
	}
	return s.secrets.Sealer(ctx, tenantID, AuditSealPurpose, true)
}
