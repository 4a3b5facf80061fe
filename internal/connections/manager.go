package connections

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/oauth2"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys"
	"github.com/airlockrun/airlock/internal/secrets"
)

const (
	// maxRecordSize bounds one stored connection (tokens can be long JWTs).
	maxRecordSize = 256 << 10
	// codeFlowLifetime is how long an authorization URL stays good.
	codeFlowLifetime = 10 * time.Minute
	// maxPending bounds the sign-ins in progress across tenants, so that a flood of creates cannot
	// grow the state table without end.
	maxPending = 10000
	// expiryLeeway: a token this close to expiry is refreshed before it is handed out.
	expiryLeeway = time.Second
	// minRefreshMargin and maxRefreshMargin bound how long before expiry a token is refreshed (a
	// quarter of its lifetime in between).
	minRefreshMargin = time.Second
	maxRefreshMargin = 5 * time.Minute
	// providerTimeout bounds one call to a provider.
	providerTimeout = 15 * time.Second
)

// Config configures a Manager.
type Config struct {
	// Keys wraps the tenants' data keys, which encrypt the stored connections. Required.
	Keys keys.KeyProvider
	// Storage keeps the encrypted connections. Required.
	Storage secrets.Storage
	// RedirectURL is the absolute URL of Airlock's OAuth callback (GET, query state and code), which
	// the authorization code flow registers with the provider. Required for that flow.
	RedirectURL string
	// HTTPClient calls the providers. Nil: a client with a 15 s timeout that connects only to
	// addresses Guards let through (checked on the address dialed, after name resolution).
	HTTPClient *http.Client
	// Guards are the operator's egress guards: a provider's endpoints in a guarded range the operator
	// has not opened (loopback, private, link-local, metadata, this host's addresses, …) are refused,
	// at create when the URL names the address and at every call. Nil: every guarded range is refused.
	Guards *policy.Guards
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Logger receives warnings about refreshes; nil discards them.
	Logger *slog.Logger
}

// Manager runs the sign-in flows, keeps the connections and refreshes their tokens. Safe for
// concurrent use; calls on one connection are serialized. Close stops its goroutines.
type Manager struct {
	cfg   Config
	store *secrets.Store
	http  *http.Client
	log   *slog.Logger
	now   func() time.Time
	// ctx is cancelled by Close; every goroutine of the Manager watches it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// closed is set by Close; no goroutine starts after it. Guarded by mu.
	closed bool
	// entries holds the per-connection lock and timers, by tenant and name. Guarded by mu.
	entries map[string]*entry
	// pending holds the authorization code flows in progress, by state. Guarded by mu.
	pending map[string]pendingCode
}

// entry serializes the calls on one connection and owns its background work.
type entry struct {
	mu sync.Mutex
	// refresh fires the next background refresh. Guarded by mu.
	refresh *time.Timer
	// cancelPoll stops a device flow's polling. Guarded by mu.
	cancelPoll context.CancelFunc
}

// pendingCode is an authorization code flow waiting for its callback.
type pendingCode struct {
	tenantID, name, attempt, verifier string
	expires                           time.Time
}

// New returns a Manager for cfg.
func New(cfg Config) (*Manager, error) {
	store, err := secrets.New(secrets.Config{Keys: cfg.Keys, Storage: cfg.Storage, Now: cfg.Now, MaxValueSize: maxRecordSize})
	if err != nil {
		return nil, fmt.Errorf("connections: %w", err)
	}
	m := &Manager{cfg: cfg, store: store, http: cfg.HTTPClient, log: cfg.Logger, now: cfg.Now,
		entries: map[string]*entry{}, pending: map[string]pendingCode{}}
	if m.http == nil {
		m.http = guardedClient(cfg.Guards)
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// Start picks up the tenants' connections after a restart: active ones get their refreshes
// scheduled (a token already due is refreshed now); sign-ins that were in progress cannot be
// finished (their state died with the process) and are marked failed, to be authorized again.
func (m *Manager) Start(ctx context.Context, tenantIDs []string) error {
	for _, t := range tenantIDs {
		names, err := m.store.List(ctx, t)
		if err != nil {
			return fmt.Errorf("connections of tenant %s: %w", t, err)
		}
		for _, md := range names {
			if err := m.startOne(ctx, t, md.Name); err != nil {
				m.log.Warn("connection not picked up", "tenant", t, "connection", md.Name, "err", err)
			}
		}
	}
	return nil
}

func (m *Manager) startOne(ctx context.Context, tenantID, name string) error {
	e := m.entry(tenantID, name)
	e.mu.Lock()
	defer e.mu.Unlock()
	rec, err := m.load(ctx, tenantID, name)
	if err != nil {
		return err
	}
	switch rec.Status {
	case StatusActive:
		m.scheduleLocked(tenantID, name, e, rec)
	case StatusPending:
		rec.Status, rec.Error, rec.Attempt = StatusFailed, "sign-in interrupted by a restart of Airlock; authorize again", ""
		return m.save(ctx, tenantID, rec)
	}
	return nil
}

// Close stops the refreshes and device polls and waits for them. Stored connections stay.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	for _, e := range m.entries {
		e.mu.Lock()
		if e.refresh != nil {
			e.refresh.Stop()
		}
		e.mu.Unlock()
	}
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	return nil
}

// goroutine runs f as a goroutine the Manager owns, unless the Manager is closed.
func (m *Manager) goroutine(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

func (m *Manager) entry(tenantID, name string) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := tenantID + "\x00" + name
	e := m.entries[k]
	if e == nil {
		e = &entry{}
		m.entries[k] = e
	}
	return e
}

// Create stores a new connection and starts signing in. It reports the connection (pending) and what
// the user must do. A provider that cannot be reached fails the call (ErrUnavailable) and stores
// nothing.
func (m *Manager) Create(ctx context.Context, tenantID, name string, flow Flow, p Provider) (Connection, Authorization, error) {
	if err := checkIDs(tenantID, name); err != nil {
		return Connection{}, Authorization{}, err
	}
	if flow != FlowAuthorizationCode && flow != FlowDevice {
		return Connection{}, Authorization{}, fmt.Errorf("flow %q: want %q or %q: %w", flow, FlowAuthorizationCode, FlowDevice, errdefs.ErrInvalidArgument)
	}
	if flow == FlowAuthorizationCode && m.cfg.RedirectURL == "" {
		return Connection{}, Authorization{}, fmt.Errorf("this Airlock has no callback URL for the authorization code flow: %w", errdefs.ErrFailedPrecondition)
	}
	p, err := m.resolve(ctx, p, flow)
	if err != nil {
		return Connection{}, Authorization{}, err
	}
	now := m.now().UTC()
	rec := &record{Connection: Connection{Name: name, Flow: flow, Status: StatusPending, Provider: p, CreatedAt: now, UpdatedAt: now},
		ClientSecret: p.ClientSecret}
	rec.Provider.ClientSecret = ""
	e := m.entry(tenantID, name)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := m.create(ctx, tenantID, rec); err != nil {
		return Connection{}, Authorization{}, err
	}
	auth, err := m.authorizeLocked(ctx, tenantID, e, rec)
	if err != nil {
		if derr := m.store.Delete(context.WithoutCancel(ctx), tenantID, name); derr != nil {
			m.log.Warn("connection left behind after a failed sign-in", "connection", name, "err", derr)
		}
		return Connection{}, Authorization{}, err
	}
	return rec.describe(), auth, nil
}

// Authorize starts signing in again (after a failure, a revocation, or to change the account).
// The previous sign-in in progress, if any, is abandoned; tokens held stay in use until the new
// sign-in completes.
func (m *Manager) Authorize(ctx context.Context, tenantID, name string) (Connection, Authorization, error) {
	if err := checkIDs(tenantID, name); err != nil {
		return Connection{}, Authorization{}, err
	}
	e := m.entry(tenantID, name)
	e.mu.Lock()
	defer e.mu.Unlock()
	rec, err := m.load(ctx, tenantID, name)
	if err != nil {
		return Connection{}, Authorization{}, err
	}
	auth, err := m.authorizeLocked(ctx, tenantID, e, rec)
	if err != nil {
		return Connection{}, Authorization{}, err
	}
	return rec.describe(), auth, nil
}

// authorizeLocked starts rec's flow and saves rec. e.mu is held.
func (m *Manager) authorizeLocked(ctx context.Context, tenantID string, e *entry, rec *record) (Authorization, error) {
	if e.cancelPoll != nil {
		e.cancelPoll()
		e.cancelPoll = nil
	}
	m.dropPending(tenantID, rec.Name)
	attempt := randomString()
	conf := m.oauthConfig(rec)
	var auth Authorization
	switch rec.Flow {
	case FlowAuthorizationCode:
		state, verifier := randomString(), oauth2.GenerateVerifier()
		auth = Authorization{URL: conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), ExpiresAt: m.now().Add(codeFlowLifetime).UTC()}
		if err := m.addPending(state, pendingCode{tenantID: tenantID, name: rec.Name, attempt: attempt, verifier: verifier, expires: auth.ExpiresAt}); err != nil {
			return Authorization{}, err
		}
	case FlowDevice:
		da, err := conf.DeviceAuth(m.clientCtx(ctx))
		if err != nil {
			return Authorization{}, providerErr("device authorization", err)
		}
		auth = Authorization{UserCode: da.UserCode, VerificationURI: da.VerificationURI, VerificationURIComplete: da.VerificationURIComplete, ExpiresAt: da.Expiry.UTC()}
		if da.Expiry.IsZero() {
			auth.ExpiresAt = m.now().Add(codeFlowLifetime).UTC()
			da.Expiry = auth.ExpiresAt
		}
		pollCtx, cancel := context.WithDeadline(m.ctx, da.Expiry)
		e.cancelPoll = cancel
		name := rec.Name
		m.goroutine(func() {
			defer cancel()
			m.pollDevice(pollCtx, tenantID, name, attempt, conf, da)
		})
	default:
		return Authorization{}, fmt.Errorf("connection %s has unknown flow %q: %w", rec.Name, rec.Flow, errdefs.ErrInternal)
	}
	rec.Status, rec.Error, rec.Attempt, rec.UpdatedAt = StatusPending, "", attempt, m.now().UTC()
	if rec.Token != nil {
		// Still signed in from before: keep injecting the old tokens until the new sign-in lands.
		rec.Status = StatusActive
	}
	if err := m.save(ctx, tenantID, rec); err != nil {
		m.dropPending(tenantID, rec.Name)
		return Authorization{}, err
	}
	return auth, nil
}

// pollDevice waits for the user to finish a device flow and stores the tokens.
func (m *Manager) pollDevice(ctx context.Context, tenantID, name, attempt string, conf *oauth2.Config, da *oauth2.DeviceAuthResponse) {
	tok, err := conf.DeviceAccessToken(m.clientCtx(ctx), da)
	if err != nil && m.ctx.Err() != nil {
		return // Airlock is stopping; Start marks the sign-in failed on the next run
	}
	e := m.entry(tenantID, name)
	e.mu.Lock()
	defer e.mu.Unlock()
	sctx, cancel := context.WithTimeout(m.ctx, providerTimeout)
	defer cancel()
	rec, lerr := m.load(sctx, tenantID, name)
	if lerr != nil || rec.Attempt != attempt {
		return // deleted, revoked or authorized again meanwhile
	}
	if err != nil {
		rec.Status, rec.Error, rec.Attempt = StatusFailed, "device sign-in: "+describeProviderErr(err), ""
		if rec.Token != nil {
			rec.Status = StatusActive // the earlier tokens still hold
		}
		rec.UpdatedAt = m.now().UTC()
		if serr := m.save(sctx, tenantID, rec); serr != nil {
			m.log.Warn("connection not saved", "connection", name, "err", serr)
		}
		return
	}
	if err := m.connectedLocked(sctx, tenantID, e, rec, tok); err != nil {
		m.log.Warn("connection not saved", "connection", name, "err", err)
	}
}

// Callback finishes an authorization code flow: the provider redirected the user's browser to
// Airlock with state and either code or an error. It reports the connection as it now stands.
func (m *Manager) Callback(ctx context.Context, state, code, providerError, providerErrorDescription string) (Connection, error) {
	m.mu.Lock()
	p, ok := m.pending[state]
	if ok {
		delete(m.pending, state)
	}
	m.mu.Unlock()
	if !ok || m.now().After(p.expires) {
		return Connection{}, fmt.Errorf("unknown or expired sign-in (state); start it again: %w", errdefs.ErrInvalidArgument)
	}
	e := m.entry(p.tenantID, p.name)
	e.mu.Lock()
	defer e.mu.Unlock()
	rec, err := m.load(ctx, p.tenantID, p.name)
	if err != nil {
		return Connection{}, err
	}
	if rec.Attempt != p.attempt {
		return Connection{}, fmt.Errorf("connection %s: this sign-in was replaced by a newer one or revoked: %w", p.name, errdefs.ErrFailedPrecondition)
	}
	var tok *oauth2.Token
	if providerError == "" && code == "" {
		providerError = "no code in the callback"
	}
	if providerError == "" {
		tok, err = m.oauthConfig(rec).Exchange(m.clientCtx(ctx), code, oauth2.VerifierOption(p.verifier))
		if err != nil {
			providerError = describeProviderErr(err)
		}
	} else if providerErrorDescription != "" {
		providerError += ": " + providerErrorDescription
	}
	if providerError != "" {
		rec.Status, rec.Error, rec.Attempt, rec.UpdatedAt = StatusFailed, "sign-in: "+truncate(providerError, 300), "", m.now().UTC()
		if rec.Token != nil {
			rec.Status = StatusActive
		}
		if err := m.save(ctx, p.tenantID, rec); err != nil {
			return Connection{}, err
		}
		return rec.describe(), fmt.Errorf("connection %s: %s: %w", p.name, rec.Error, errdefs.ErrFailedPrecondition)
	}
	if err := m.connectedLocked(ctx, p.tenantID, e, rec, tok); err != nil {
		return Connection{}, err
	}
	return rec.describe(), nil
}

// connectedLocked stores the tokens of a completed sign-in and schedules their refresh. e.mu is held.
func (m *Manager) connectedLocked(ctx context.Context, tenantID string, e *entry, rec *record, tok *oauth2.Token) error {
	if tok.AccessToken == "" {
		rec.Status, rec.Error, rec.Attempt = StatusFailed, "sign-in: the provider returned no access token", ""
		return m.save(ctx, tenantID, rec)
	}
	now := m.now().UTC()
	rec.Token = fromOAuth(tok, nil)
	rec.Status, rec.Error, rec.Attempt, rec.UpdatedAt, rec.ConnectedAt = StatusActive, "", "", now, &now
	if err := m.save(ctx, tenantID, rec); err != nil {
		return err
	}
	m.scheduleLocked(tenantID, rec.Name, e, rec)
	return nil
}

// Get describes a connection.
func (m *Manager) Get(ctx context.Context, tenantID, name string) (Connection, error) {
	if err := checkIDs(tenantID, name); err != nil {
		return Connection{}, err
	}
	rec, err := m.load(ctx, tenantID, name)
	if err != nil {
		return Connection{}, err
	}
	return rec.describe(), nil
}

// List describes the tenant's connections, by name.
func (m *Manager) List(ctx context.Context, tenantID string) ([]Connection, error) {
	mds, err := m.store.List(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list connections: %w", err)
	}
	out := make([]Connection, 0, len(mds))
	for _, md := range mds {
		rec, err := m.load(ctx, tenantID, md.Name)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec.describe())
	}
	return out, nil
}

// Revoke revokes the connection's tokens at the provider (if it has a revocation endpoint) and drops
// them: from now on no request gets them injected. A provider that does not confirm is noted in the
// connection's Error; the tokens are dropped all the same.
func (m *Manager) Revoke(ctx context.Context, tenantID, name string) (Connection, error) {
	if err := checkIDs(tenantID, name); err != nil {
		return Connection{}, err
	}
	e := m.entry(tenantID, name)
	e.mu.Lock()
	defer e.mu.Unlock()
	rec, err := m.load(ctx, tenantID, name)
	if err != nil {
		return Connection{}, err
	}
	m.stopLocked(tenantID, e, name)
	rec.Error = ""
	if err := m.revokeAtProvider(ctx, rec); err != nil {
		rec.Error = "the provider did not confirm the revocation: " + truncate(err.Error(), 300)
		m.log.Warn("revocation not confirmed by the provider", "connection", name, "err", err)
	}
	rec.Token, rec.Status, rec.Attempt, rec.UpdatedAt = nil, StatusRevoked, "", m.now().UTC()
	if err := m.save(ctx, tenantID, rec); err != nil {
		return Connection{}, err
	}
	return rec.describe(), nil
}

// Delete revokes the connection as Revoke does and removes it.
func (m *Manager) Delete(ctx context.Context, tenantID, name string) error {
	if err := checkIDs(tenantID, name); err != nil {
		return err
	}
	e := m.entry(tenantID, name)
	e.mu.Lock()
	defer e.mu.Unlock()
	rec, err := m.load(ctx, tenantID, name)
	if err != nil {
		return err
	}
	m.stopLocked(tenantID, e, name)
	if err := m.revokeAtProvider(ctx, rec); err != nil {
		m.log.Warn("revocation not confirmed by the provider", "connection", name, "err", err)
	}
	if err := m.store.Delete(ctx, tenantID, name); err != nil {
		return fmt.Errorf("delete connection %s: %w", name, err)
	}
	return nil
}

// stopLocked cancels the connection's background work. e.mu is held.
func (m *Manager) stopLocked(tenantID string, e *entry, name string) {
	if e.refresh != nil {
		e.refresh.Stop()
		e.refresh = nil
	}
	if e.cancelPoll != nil {
		e.cancelPoll()
		e.cancelPoll = nil
	}
	m.dropPending(tenantID, name)
}

// Token returns the connection's current access token, for the gateway to inject: a fresh slice the
// caller clears. A token at the edge of expiry is refreshed first. A connection that is not active
// (pending, failed, revoked) fails with ErrFailedPrecondition.
func (m *Manager) Token(ctx context.Context, tenantID, name string) ([]byte, error) {
	if err := checkIDs(tenantID, name); err != nil {
		return nil, err
	}
	e := m.entry(tenantID, name)
	e.mu.Lock()
	defer e.mu.Unlock()
	rec, err := m.load(ctx, tenantID, name)
	if err != nil {
		return nil, err
	}
	if rec.Status != StatusActive || rec.Token == nil {
		return nil, fmt.Errorf("connection %s is %s: %w", name, rec.Status, errdefs.ErrFailedPrecondition)
	}
	if exp := rec.Token.Expiry; !exp.IsZero() && m.now().Add(expiryLeeway).After(exp) {
		if rec.Token.RefreshToken == "" {
			return nil, fmt.Errorf("connection %s: the access token expired and there is no refresh token; authorize again: %w", name, errdefs.ErrFailedPrecondition)
		}
		if err := m.refreshLocked(ctx, tenantID, e, rec); err != nil {
			return nil, err
		}
	}
	return []byte(rec.Token.AccessToken), nil
}

// scheduleLocked arms the background refresh of an active connection. e.mu is held.
func (m *Manager) scheduleLocked(tenantID, name string, e *entry, rec *record) {
	if e.refresh != nil {
		e.refresh.Stop()
		e.refresh = nil
	}
	if rec.Status != StatusActive || rec.Token == nil || rec.Token.RefreshToken == "" || rec.Token.Expiry.IsZero() {
		return
	}
	m.armLocked(tenantID, name, e, refreshDelay(rec.Token, rec.UpdatedAt, m.now()))
}

func (m *Manager) armLocked(tenantID, name string, e *entry, d time.Duration) {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return
	}
	e.refresh = time.AfterFunc(d, func() {
		m.goroutine(func() { m.refreshInBackground(tenantID, name) })
	})
}

// refreshDelay says how long from now to wait before refreshing t, obtained at got: a quarter of its
// lifetime before expiry, at least minRefreshMargin and at most maxRefreshMargin before.
func refreshDelay(t *token, got, now time.Time) time.Duration {
	margin := t.Expiry.Sub(got) / 4
	margin = max(minRefreshMargin, min(margin, maxRefreshMargin))
	return max(0, t.Expiry.Add(-margin).Sub(now))
}

func (m *Manager) refreshInBackground(tenantID, name string) {
	e := m.entry(tenantID, name)
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.ctx, 2*providerTimeout)
	defer cancel()
	rec, err := m.load(ctx, tenantID, name)
	if err != nil || rec.Status != StatusActive || rec.Token == nil {
		return
	}
	err = m.refreshLocked(ctx, tenantID, e, rec)
	if err == nil || m.ctx.Err() != nil || rec.Status != StatusActive {
		return
	}
	// A passing failure (the provider unreachable): try again, well before expiry if possible.
	retry := max(time.Second, min(30*time.Second, rec.Token.Expiry.Sub(m.now())/2))
	m.log.Warn("token refresh failed; retrying", "connection", name, "retry_in", retry, "err", err)
	m.armLocked(tenantID, name, e, retry)
}

// refreshLocked exchanges rec's refresh token for new tokens and saves them. A refusal by the
// provider (invalid_grant and the like) marks the connection failed. e.mu is held.
func (m *Manager) refreshLocked(ctx context.Context, tenantID string, e *entry, rec *record) error {
	src := m.oauthConfig(rec).TokenSource(m.clientCtx(ctx), &oauth2.Token{RefreshToken: rec.Token.RefreshToken})
	tok, err := src.Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode != "" && re.ErrorCode != "temporarily_unavailable" {
			if e.refresh != nil {
				e.refresh.Stop()
				e.refresh = nil
			}
			rec.Token, rec.Status, rec.Error, rec.UpdatedAt = nil, StatusFailed, "refresh refused by the provider: "+describeProviderErr(err), m.now().UTC()
			if serr := m.save(ctx, tenantID, rec); serr != nil {
				return serr
			}
			return fmt.Errorf("connection %s: %s: %w", rec.Name, rec.Error, errdefs.ErrFailedPrecondition)
		}
		return providerErr("refresh connection "+rec.Name, err)
	}
	now := m.now().UTC()
	rec.Token = fromOAuth(tok, rec.Token)
	rec.RefreshedAt, rec.UpdatedAt = &now, now
	rec.Refreshes++
	if err := m.save(ctx, tenantID, rec); err != nil {
		return err
	}
	m.scheduleLocked(tenantID, rec.Name, e, rec)
	return nil
}

// fromOAuth converts tok, keeping old's refresh token if the provider did not rotate it.
func fromOAuth(tok *oauth2.Token, old *token) *token {
	t := &token{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, TokenType: tok.TokenType, Expiry: tok.Expiry.UTC()}
	if tok.Expiry.IsZero() {
		t.Expiry = time.Time{}
	}
	if t.RefreshToken == "" && old != nil {
		t.RefreshToken = old.RefreshToken
	}
	return t
}

func (m *Manager) oauthConfig(rec *record) *oauth2.Config {
	return &oauth2.Config{
		ClientID:     rec.Provider.ClientID,
		ClientSecret: rec.ClientSecret,
		Endpoint: oauth2.Endpoint{
			AuthURL:       rec.Provider.AuthorizationURL,
			TokenURL:      rec.Provider.TokenURL,
			DeviceAuthURL: rec.Provider.DeviceAuthorizationURL,
		},
		RedirectURL: m.cfg.RedirectURL,
		Scopes:      rec.Provider.Scopes,
	}
}

// clientCtx makes the oauth2 package use the Manager's HTTP client.
func (m *Manager) clientCtx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, m.http)
}

func (m *Manager) addPending(state string, p pendingCode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for s, q := range m.pending {
		if now.After(q.expires) {
			delete(m.pending, s)
		}
	}
	if len(m.pending) >= maxPending {
		return fmt.Errorf("too many sign-ins in progress; try again later: %w", errdefs.ErrResourceExhausted)
	}
	m.pending[state] = p
	return nil
}

func (m *Manager) dropPending(tenantID, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s, q := range m.pending {
		if q.tenantID == tenantID && q.name == name {
			delete(m.pending, s)
		}
	}
}

func (m *Manager) load(ctx context.Context, tenantID, name string) (*record, error) {
	v, err := m.store.Reveal(ctx, tenantID, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("connection %s: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("connection %s: %w", name, err)
	}
	defer clear(v)
	var rec record
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("connection %s: stored record: %v: %w", name, err, errdefs.ErrInternal)
	}
	return &rec, nil
}

// create stores a new record; save replaces the stored one. Both seal it (see secrets.Store).
func (m *Manager) create(ctx context.Context, tenantID string, rec *record) error {
	return m.put(ctx, tenantID, rec, "create", m.store.Create)
}

func (m *Manager) save(ctx context.Context, tenantID string, rec *record) error {
	return m.put(ctx, tenantID, rec, "save", m.store.Update)
}

func (m *Manager) put(ctx context.Context, tenantID string, rec *record, what string,
	put func(ctx context.Context, tenantID, name string, value []byte) (secrets.Metadata, error)) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("%s connection %s: %w", what, rec.Name, err)
	}
	defer clear(b)
	if _, err := put(ctx, tenantID, rec.Name, b); err != nil {
		return fmt.Errorf("%s connection %s: %w", what, rec.Name, err)
	}
	return nil
}

func checkIDs(tenantID, name string) error {
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return err
	}
	if err := secrets.ValidateName(name); err != nil {
		return fmt.Errorf("connection name %q must match [A-Za-z0-9_.-]{1,128}: %w", truncate(name, 64), errdefs.ErrInvalidArgument)
	}
	return nil
}

// randomString returns 32 random bytes, base64url-encoded.
func randomString() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// RewrapDataKey wraps the tenant's data key again under its current key-encryption key (after a
// rotation) and reports whether there was one.
func (m *Manager) RewrapDataKey(ctx context.Context, tenantID string) (bool, error) {
	return m.store.RewrapDataKey(ctx, tenantID)
}

// guardedClient returns an HTTP client for providers that connects only to addresses g lets through:
// the check runs on each address dialed, after resolution, so a name that resolves (or is re-bound)
// to a guarded address is refused too.
func guardedClient(g *policy.Guards) *http.Client {
	d := &net.Dialer{Timeout: providerTimeout, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("provider address %q: %w", address, errdefs.ErrInvalidArgument)
		}
		if err := g.Refuse(ap.Addr()); err != nil {
			return fmt.Errorf("provider endpoint: %w", err)
		}
		return nil
	}}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // a proxy would be dialed instead of the provider, and its address checked instead
	t.DialContext = d.DialContext
	return &http.Client{Timeout: providerTimeout, Transport: t}
}
