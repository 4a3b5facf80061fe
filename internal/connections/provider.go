package connections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"golang.org/x/oauth2"

	"github.com/airlockrun/airlock/internal/errdefs"
)

const (
	maxURLLen      = 2048
	maxScopes      = 64
	maxScopeLen    = 256
	maxClientIDLen = 512
	maxSecretLen   = 4096
	// maxDiscoverySize bounds a discovery document.
	maxDiscoverySize = 1 << 20
)

// resolve checks p and fills in, by OpenID Connect discovery from p.Issuer, the endpoints p leaves
// empty. It reports ErrInvalidArgument for a bad provider and ErrUnavailable when the discovery
// document cannot be fetched.
func (m *Manager) resolve(ctx context.Context, p Provider, flow Flow) (Provider, error) {
	bad := func(format string, args ...any) (Provider, error) {
		return Provider{}, fmt.Errorf("provider: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	if p.ClientID == "" || len(p.ClientID) > maxClientIDLen || strings.ContainsAny(p.ClientID, "\x00\r\n") {
		return bad("client_id is required (at most %d bytes, one line)", maxClientIDLen)
	}
	if len(p.ClientSecret) > maxSecretLen || strings.ContainsAny(p.ClientSecret, "\x00\r\n") {
		return bad("client_secret may have at most %d bytes, on one line", maxSecretLen)
	}
	if len(p.Scopes) > maxScopes {
		return bad("at most %d scopes", maxScopes)
	}
	for _, s := range p.Scopes {
		if s == "" || len(s) > maxScopeLen || strings.ContainsAny(s, " \"\\\x00\r\n\t") {
			return bad("scope %q is not a scope token", truncate(s, 64))
		}
	}
	for _, f := range []struct{ name, v string }{{"issuer", p.Issuer}, {"authorization_url", p.AuthorizationURL},
		{"token_url", p.TokenURL}, {"device_authorization_url", p.DeviceAuthorizationURL}, {"revocation_url", p.RevocationURL}} {
		if f.v == "" {
			continue
		}
		// The browser, not Airlock, visits the authorization URL: only its form is checked.
		check := func(s string) error { return checkURL(s, m.cfg.Guards) }
		if f.name == "authorization_url" {
			check = checkURLForm
		}
		if err := check(f.v); err != nil {
			return bad("%s: %v", f.name, err)
		}
	}
	need := func() bool {
		if p.TokenURL == "" || p.RevocationURL == "" {
			return true
		}
		if flow == FlowDevice {
			return p.DeviceAuthorizationURL == ""
		}
		return p.AuthorizationURL == ""
	}
	if p.Issuer != "" && need() {
		d, err := m.discover(ctx, p.Issuer)
		if err != nil {
			return Provider{}, err
		}
		for _, f := range []struct {
			dst *string
			v   string
		}{{&p.AuthorizationURL, d.AuthorizationEndpoint}, {&p.TokenURL, d.TokenEndpoint},
			{&p.DeviceAuthorizationURL, d.DeviceAuthorizationEndpoint}, {&p.RevocationURL, d.RevocationEndpoint}} {
			if *f.dst != "" || f.v == "" {
				continue
			}
			check := func(s string) error { return checkURL(s, m.cfg.Guards) }
			if f.dst == &p.AuthorizationURL {
				check = checkURLForm
			}
			if err := check(f.v); err != nil {
				return bad("discovery document of %s: endpoint %q: %v", p.Issuer, truncate(f.v, 128), err)
			}
			*f.dst = f.v
		}
	}
	if p.TokenURL == "" {
		return bad("token_url is required (or an issuer whose discovery document names it)")
	}
	if flow == FlowDevice && p.DeviceAuthorizationURL == "" {
		return bad("the device flow needs device_authorization_url (or an issuer whose discovery document names it)")
	}
	if flow == FlowAuthorizationCode && p.AuthorizationURL == "" {
		return bad("the authorization code flow needs authorization_url (or an issuer whose discovery document names it)")
	}
	return p, nil
}

// discovery holds the fields of an OpenID Connect discovery document Airlock uses.
type discovery struct {
	Issuer                      string `json:"issuer"`
	AuthorizationEndpoint       string `json:"authorization_endpoint"`
	TokenEndpoint               string `json:"token_endpoint"`
	DeviceAuthorizationEndpoint string `json:"device_authorization_endpoint"`
	RevocationEndpoint          string `json:"revocation_endpoint"`
}

func (m *Manager) discover(ctx context.Context, issuer string) (discovery, error) {
	u := strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return discovery{}, fmt.Errorf("provider: issuer: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := m.http.Do(req)
	if err != nil {
		return discovery{}, fmt.Errorf("provider discovery at %s: %v: %w", u, err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscoverySize+1))
	if err != nil {
		return discovery{}, fmt.Errorf("provider discovery at %s: %v: %w", u, err, errdefs.ErrUnavailable)
	}
	if resp.StatusCode != http.StatusOK {
		return discovery{}, fmt.Errorf("provider discovery at %s: HTTP %d: %w", u, resp.StatusCode, errdefs.ErrFailedPrecondition)
	}
	if len(body) > maxDiscoverySize {
		return discovery{}, fmt.Errorf("provider discovery at %s: document over %d bytes: %w", u, maxDiscoverySize, errdefs.ErrFailedPrecondition)
	}
	var d discovery
	if err := json.Unmarshal(body, &d); err != nil {
		return discovery{}, fmt.Errorf("provider discovery at %s: %v: %w", u, err, errdefs.ErrFailedPrecondition)
	}
	if strings.TrimSuffix(d.Issuer, "/") != strings.TrimSuffix(issuer, "/") {
		// OpenID Connect Discovery 1.0, section 4.3: the document must name the issuer asked for.
		return discovery{}, fmt.Errorf("provider discovery at %s names issuer %q, not %q: %w", u, truncate(d.Issuer, 128), issuer, errdefs.ErrFailedPrecondition)
	}
	return d, nil
}

// checkURL accepts absolute https URLs, and http URLs to a loopback address (a provider on the same
// machine, for on-prem set-ups and tests), whose host, if an address, g does not refuse.
func checkURL(s string, g *policy.Guards) error {
	if err := checkURLForm(s); err != nil {
		return err
	}
	u, _ := url.Parse(s)
	h := u.Hostname()
	if h == "localhost" {
		h = "127.0.0.1"
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if err := g.Refuse(a); err != nil {
			return err
		}
	}
	return nil
}

// checkURLForm is checkURL without the guard.
func checkURLForm(s string) error {
	if len(s) > maxURLLen {
		return fmt.Errorf("URL over %d bytes", maxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Host == "" || u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return errors.New("want an absolute URL with a host, no user info and no fragment")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		h := u.Hostname()
		if h == "localhost" {
			return nil
		}
		if a, err := netip.ParseAddr(h); err == nil && a.IsLoopback() {
			return nil
		}
		return errors.New("http is only allowed to a loopback address; use https")
	}
	return fmt.Errorf("scheme %q: want https", u.Scheme)
}

// revokeAtProvider revokes rec's tokens at the provider's revocation endpoint (RFC 7009): the refresh
// token (which also ends its access tokens at most providers), then the access token.
func (m *Manager) revokeAtProvider(ctx context.Context, rec *record) error {
	if rec.Token == nil || rec.Provider.RevocationURL == "" {
		return nil
	}
	var errs []error
	for _, t := range []struct{ value, hint string }{{rec.Token.RefreshToken, "refresh_token"}, {rec.Token.AccessToken, "access_token"}} {
		if t.value == "" {
			continue
		}
		if err := m.revokeOne(ctx, rec, t.value, t.hint); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) revokeOne(ctx context.Context, rec *record, value, hint string) error {
	form := url.Values{"token": {value}, "token_type_hint": {hint}}
	if rec.ClientSecret == "" {
		form.Set("client_id", rec.Provider.ClientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rec.Provider.RevocationURL, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if rec.ClientSecret != "" {
		// RFC 6749 section 2.3.1: form-encode, then basic auth.
		req.SetBasicAuth(url.QueryEscape(rec.Provider.ClientID), url.QueryEscape(rec.ClientSecret))
	}
	resp, err := m.http.Do(req)
	if err != nil {
		return fmt.Errorf("revoke %s: %w", hint, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revoke %s: HTTP %d", hint, resp.StatusCode)
	}
	return nil
}

// providerErr wraps an error from a call to a provider: a refusal (an OAuth error response) is
// ErrFailedPrecondition, anything else (unreachable, timeouts) ErrUnavailable.
func providerErr(what string, err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return fmt.Errorf("%s: the provider refused: %s: %w", what, describeProviderErr(err), errdefs.ErrFailedPrecondition)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: provider unreachable: %v: %w", what, err, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrUnavailable)
}

// describeProviderErr says what a provider answered, without echoing its whole body.
func describeProviderErr(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		s := re.ErrorCode
		if s == "" && re.Response != nil {
			s = fmt.Sprintf("HTTP %d", re.Response.StatusCode)
		}
		if re.ErrorDescription != "" {
			s += ": " + re.ErrorDescription
		}
		return truncate(s, 300)
	}
	return truncate(err.Error(), 300)
}
