package policy

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// MaxCredentials is how many credential bindings one Policy may hold.
const MaxCredentials = 64

// Credential binds a secret, or an OAuth connection's current access token, to requests: for HTTPS
// requests to Host (and, if set, with one of Methods and under PathPrefix), the gateway puts the value
// into the request on its way out. The sandbox never holds the value. Exactly one of Secret and
// Connection names the value; exactly one of Header, BasicAuthUser and Placeholder says how (a
// Connection with none of them sets "Authorization: Bearer <access token>"):
//
//   - Header: set that header to Format with "{secret}" replaced by the value (Format defaults to
//     "{secret}"; "Bearer {secret}" is the usual one);
//   - BasicAuthUser: set Authorization to HTTP basic auth of that user and the value;
//   - Placeholder: replace that string by the value in the header named by Header, Authorization if
//     Header is empty (so code in the sandbox can hold OPENAI_API_KEY=<placeholder> and send it as it
//     would the real key), and nowhere else: not in other headers (Origin, Cookie, Referer, …), the
//     URL or the body, where an upstream might echo the value back into the sandbox.
//
// Credentials are only injected into TLS connections the gateway intercepts: never into plain HTTP,
// where the value would cross the wire in the clear.
type Credential struct {
	// Name identifies the binding in flow records; unique within the policy.
	Name string `json:"name"`
	// Host is an exact name or a "*.suffix" wildcard, as in Rule.
	Host string `json:"host"`
	// Methods and PathPrefix restrict the binding, as in Rule.
	Methods    []string `json:"methods,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
	// Secret names the tenant's secret whose value is injected.
	Secret string `json:"secret,omitempty"`
	// Connection names the tenant's OAuth connection whose current access token is injected.
	Connection string `json:"connection,omitempty"`
	// Header, Format, BasicAuthUser and Placeholder: see the type's doc.
	Header        string `json:"header,omitempty"`
	Format        string `json:"format,omitempty"`
	BasicAuthUser string `json:"basic_auth_user,omitempty"`
	Placeholder   string `json:"placeholder,omitempty"`
}

var secretNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// compiledCredential is a validated Credential.
type compiledCredential struct {
	Credential
	host    *hostPattern
	methods []string
}

func compileCredentials(cs []Credential) ([]compiledCredential, error) {
	if len(cs) > MaxCredentials {
		return nil, fmt.Errorf("policy: %d credentials: at most %d allowed: %w", len(cs), MaxCredentials, errdefs.ErrInvalidArgument)
	}
	seen := map[string]bool{}
	out := make([]compiledCredential, 0, len(cs))
	for i, c := range cs {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("policy: credentials[%d] (%q): %s: %w", i, c.Name, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
		}
		if c.Name == "" || len(c.Name) > MaxRuleNameLen || seen[c.Name] {
			return nil, bad("name must be set, unique and at most %d bytes", MaxRuleNameLen)
		}
		seen[c.Name] = true
		hp, err := parseHostPattern(c.Host)
		if err != nil {
			return nil, bad("%v", err)
		}
		switch {
		case c.Secret != "" && c.Connection != "":
			return nil, bad("set one of secret and connection, not both")
		case c.Connection != "":
			if !secretNamePattern.MatchString(c.Connection) {
				return nil, bad("connection must name a connection (1-128 letters, digits or _.-)")
			}
			if c.Header == "" && c.BasicAuthUser == "" && c.Placeholder == "" {
				c.Header, c.Format = "Authorization", "Bearer {secret}"
			}
		case !secretNamePattern.MatchString(c.Secret):
			return nil, bad("secret must name a secret (1-128 letters, digits or _.-)")
		}
		modes := 0
		// With a placeholder, header names where it is swapped: it is not a mode of its own.
		for _, set := range []bool{c.Header != "" && c.Placeholder == "", c.BasicAuthUser != "", c.Placeholder != ""} {
			if set {
				modes++
			}
		}
		if modes != 1 {
			return nil, bad("set exactly one of header, basic_auth_user and placeholder (header may go with placeholder, to say where it is swapped)")
		}
		if c.Placeholder != "" && c.Format != "" {
			return nil, bad("format does not go with placeholder")
		}
		if c.Header != "" && !isToken(c.Header) {
			return nil, bad("header %q is not a header name", c.Header)
		}
		if c.Format != "" && (c.Header == "" || !strings.Contains(c.Format, "{secret}")) {
			return nil, bad("format needs header, and must contain {secret}")
		}
		if c.BasicAuthUser != "" && strings.ContainsAny(c.BasicAuthUser, ":\r\n") {
			return nil, bad("basic_auth_user may not contain ':' or line breaks")
		}
		if c.Placeholder != "" && (len(c.Placeholder) < 8 || strings.ContainsAny(c.Placeholder, "\r\n")) {
			return nil, bad("placeholder must be at least 8 bytes, on one line")
		}
		cc := compiledCredential{Credential: c, host: hp}
		for _, m := range c.Methods {
			if !isToken(m) {
				return nil, bad("method %q is not an HTTP method", m)
			}
			cc.methods = append(cc.methods, strings.ToUpper(m))
		}
		if c.PathPrefix != "" {
			if cp, ok := canonicalPath(c.PathPrefix); !ok || cp != c.PathPrefix {
				return nil, bad("path_prefix %q must be a canonical path starting with /", c.PathPrefix)
			}
		}
		out = append(out, cc)
	}
	return out, nil
}

// HasCredentials reports whether any credential binding names host, so that the gateway intercepts
// TLS to it.
func (m *Matcher) HasCredentials(host string) bool {
	h, ok := NormalizeHost(host)
	if !ok {
		return false
	}
	for _, c := range m.credentials {
		if c.host.match(h) {
			return true
		}
	}
	return false
}

// Credentials returns the bindings that apply to one HTTPS request, in policy order.
func (m *Matcher) Credentials(host, method, path string) []Credential {
	h, ok := NormalizeHost(host)
	if !ok {
		return nil
	}
	cpath, pathOK := canonicalPath(path)
	var out []Credential
	for _, c := range m.credentials {
		if !c.host.match(h) {
			continue
		}
		if len(c.methods) > 0 && !containsFold(c.methods, method) {
			continue
		}
		if c.PathPrefix != "" && (!pathOK || !pathHasPrefix(cpath, c.PathPrefix)) {
			continue
		}
		out = append(out, c.Credential)
	}
	return out
}
