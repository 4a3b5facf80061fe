// Package connections signs in to OAuth 2.0 providers on a tenant's behalf, outside every sandbox,
// and keeps the resulting tokens for the network gateway to inject.
//
// A Connection names a provider (its endpoints, found by OpenID discovery from an issuer or given
// one by one), a client and the scopes to ask for. Signing in runs the authorization code flow with
// PKCE (Airlock prints a URL; the user opens it; the provider redirects to Airlock's callback) or the
// device flow (Airlock prints a code; Airlock polls the provider until the user has entered it).
// Tokens are kept encrypted at rest, like secrets (envelope encryption under the tenant's key), and
// refreshed before they expire, so a sandbox whose requests carry the access token never sees one
// expire. Revoking a connection tells the provider (RFC 7009) and stops injection at once.
//
// Neither tokens nor the client secret are ever returned by this package except by Token, which only
// the gateway calls.
package connections

import (
	"fmt"
	"log/slog"
	"time"
)

// Flow is how a connection signs in.
type Flow string

const (
	// FlowAuthorizationCode is the authorization code flow with PKCE (S256): the user opens a URL.
	FlowAuthorizationCode Flow = "authorization_code"
	// FlowDevice is the device authorization grant (RFC 8628): the user enters a code on the
	// provider's page.
	FlowDevice Flow = "device"
)

// Status is where a connection stands.
type Status string

const (
	// StatusPending: signing in has started and not finished.
	StatusPending Status = "pending"
	// StatusActive: the connection holds tokens; bindings that name it inject its access token.
	StatusActive Status = "active"
	// StatusFailed: signing in or refreshing failed for good (Error says why); authorize again.
	StatusFailed Status = "failed"
	// StatusRevoked: the connection was revoked; its tokens are gone.
	StatusRevoked Status = "revoked"
)

// Provider says where and as whom to sign in. Either Issuer (for OpenID Connect discovery) or the
// endpoints the flow needs must be set; endpoints given explicitly win over discovered ones. URLs
// must be https, or http to a loopback address.
type Provider struct {
	Issuer                 string   `json:"issuer,omitempty"`
	AuthorizationURL       string   `json:"authorization_url,omitempty"`
	TokenURL               string   `json:"token_url,omitempty"`
	DeviceAuthorizationURL string   `json:"device_authorization_url,omitempty"`
	RevocationURL          string   `json:"revocation_url,omitempty"`
	ClientID               string   `json:"client_id"`
	Scopes                 []string `json:"scopes,omitempty"`
	// ClientSecret is write-only: it is stored encrypted and never reported.
	ClientSecret string `json:"client_secret,omitempty"`
}

// LogValue prints the provider without its client secret.
func (p Provider) LogValue() slog.Value {
	return slog.GroupValue(slog.String("issuer", p.Issuer), slog.String("token_url", p.TokenURL), slog.String("client_id", p.ClientID))
}

// Format prints the provider without its client secret, for every verb.
func (p Provider) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "connections.Provider{issuer=%q token_url=%q client_id=%q}", p.Issuer, p.TokenURL, p.ClientID)
}

// Connection describes a connection. It carries no token and no client secret.
type Connection struct {
	Name     string   `json:"name"`
	Flow     Flow     `json:"flow"`
	Status   Status   `json:"status"`
	Provider Provider `json:"provider"` // ClientSecret always empty
	// HasClientSecret reports whether a client secret is stored.
	HasClientSecret bool `json:"has_client_secret"`
	// Error says why the connection failed, or what went wrong revoking it at the provider.
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// ConnectedAt is when signing in last completed.
	ConnectedAt *time.Time `json:"connected_at,omitempty"`
	// TokenExpiresAt is when the current access token expires; nil when the provider gave no expiry.
	TokenExpiresAt *time.Time `json:"token_expires_at,omitempty"`
	// RefreshedAt is when the access token was last refreshed, and Refreshes how often.
	RefreshedAt *time.Time `json:"refreshed_at,omitempty"`
	Refreshes   int        `json:"refreshes"`
	// CanRefresh reports whether the connection holds a refresh token.
	CanRefresh bool `json:"can_refresh"`
}

// Authorization is what the user needs to finish signing in: URL for the authorization code flow;
// UserCode and VerificationURI (and VerificationURIComplete, if the provider gives one) for the device
// flow.
type Authorization struct {
	URL                     string    `json:"url,omitempty"`
	UserCode                string    `json:"user_code,omitempty"`
	VerificationURI         string    `json:"verification_uri,omitempty"`
	VerificationURIComplete string    `json:"verification_uri_complete,omitempty"`
	ExpiresAt               time.Time `json:"expires_at"`
}

// token is what a connection holds once signed in.
type token struct {
	AccessToken  string    `json:"access_token"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	TokenType    string    `json:"token_type,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
}

// record is a connection as stored, encrypted: the description plus the secrets.
type record struct {
	Connection
	ClientSecret string `json:"client_secret,omitempty"`
	Token        *token `json:"token,omitempty"`
	// Attempt identifies the sign-in in progress, so that a device poll that outlived a newer
	// Authorize or a Revoke does not write over it.
	Attempt string `json:"attempt,omitempty"`
}

// LogValue prints nothing secret.
func (r *record) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", r.Name), slog.String("status", string(r.Status)))
}

// Format prints nothing secret, for every verb.
func (r *record) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "connections.record{name=%q status=%s}", r.Name, r.Status)
}

// describe returns the record's public description.
func (r *record) describe() Connection {
	c := r.Connection
	c.Provider.ClientSecret = ""
	c.Provider.Scopes = append([]string(nil), r.Provider.Scopes...)
	c.HasClientSecret = r.ClientSecret != ""
	c.CanRefresh = r.Token != nil && r.Token.RefreshToken != ""
	c.TokenExpiresAt = nil
	if r.Token != nil && !r.Token.Expiry.IsZero() {
		e := r.Token.Expiry
		c.TokenExpiresAt = &e
	}
	return c
}
