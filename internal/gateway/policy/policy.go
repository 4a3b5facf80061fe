// Package policy holds the egress policy of one sandbox and the compiled Matcher that the gateway's
// transparent proxy and DNS server consult for every connection, HTTP request and name lookup.
//
// A Policy is an ordered list of allow and deny Rules plus a default action. Rules are evaluated in
// order and the first rule whose every set field matches decides; when none matches, the default
// decides. Before any rule, a guard refuses connections to addresses a sandbox must never reach on its
// own (loopback, private, link-local, CGNAT, multicast, cloud metadata, the node's own addresses, …).
// Only an allow rule whose CIDRs name the address explicitly lifts the guard; a Host rule or a default
// of "allow" never does. See [Matcher] for the exact semantics.
//
// Policy and Rule are part of the public API: they marshal to snake_case JSON.
package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Actions of a Rule and defaults of a Policy.
const (
	ActionAllow = "allow"
	ActionDeny  = "deny"
)

// Limits that Validate enforces.
const (
	MaxRules         = 256 // rules in one Policy
	MaxRuleItems     = 64  // entries in each of a rule's Ports, CIDRs and Methods
	MaxRuleNameLen   = 128 // bytes in a rule name
	MaxPathPrefixLen = 1024
	maxMethodLen     = 32
)

// Policy is the egress policy of one sandbox.
//
// The zero Policy denies everything: Default "" means "deny".
type Policy struct {
	// Default is the action when no rule matches: "deny" (also when empty) or "allow".
	// "allow" never lifts the address guard (see Matcher).
	Default string `json:"default,omitempty"`
	// Rules are evaluated in order; the first that matches decides. At most MaxRules.
	Rules []Rule `json:"rules,omitempty"`
	// Credentials are injected into the HTTPS requests they bind (see Credential). They allow nothing:
	// a request still needs a rule (or the default) that allows it.
	Credentials []Credential `json:"credentials,omitempty"`
	// PublicPorts are the sandbox's ports anyone may reach through the ingress without a credential.
	// They concern traffic into the sandbox only, never its egress. At most MaxPublicPorts.
	PublicPorts []int `json:"public_ports,omitempty"`
	// Limits cap the sandbox's connections through the gateway. Nil or zero fields: the defaults.
	Limits *Limits `json:"limits,omitempty"`
}

// MaxPublicPorts bounds Policy.PublicPorts.
const MaxPublicPorts = 64

// Limits cap what one sandbox may ask of the gateway, so that a flood from one sandbox stays its own:
// past them its new connections are refused (reset) and the flow log says so.
type Limits struct {
	// MaxConnections bounds the sandbox's connections in flight through the gateway. Zero:
	// DefaultMaxConnections; at most MaxMaxConnections.
	MaxConnections int `json:"max_connections,omitempty"`
	// ConnectionsPerSecond bounds the new connections the sandbox opens each second (in bursts of up to
	// twice as many). Zero: DefaultConnectionsPerSecond; at most MaxConnectionsPerSecond.
	ConnectionsPerSecond int `json:"connections_per_second,omitempty"`
}

// Connection limits: defaults and the largest values a policy may set.
const (
	DefaultMaxConnections       = 256
	MaxMaxConnections           = 4096
	DefaultConnectionsPerSecond = 100
	MaxConnectionsPerSecond     = 2000
)

// WithDefaults returns the limits of l (nil: none set) with zero fields replaced by the defaults.
func (l *Limits) WithDefaults() Limits {
	var out Limits
	if l != nil {
		out = *l
	}
	if out.MaxConnections == 0 {
		out.MaxConnections = DefaultMaxConnections
	}
	if out.ConnectionsPerSecond == 0 {
		out.ConnectionsPerSecond = DefaultConnectionsPerSecond
	}
	return out
}

// validate checks l's ranges; errors name the field.
func (l *Limits) validate() error {
	if l == nil {
		return nil
	}
	if l.MaxConnections < 0 || l.MaxConnections > MaxMaxConnections {
		return fmt.Errorf("policy: limits.max_connections %d: want 0 (the default, %d) to %d: %w", l.MaxConnections, DefaultMaxConnections, MaxMaxConnections, errdefs.ErrInvalidArgument)
	}
	if l.ConnectionsPerSecond < 0 || l.ConnectionsPerSecond > MaxConnectionsPerSecond {
		return fmt.Errorf("policy: limits.connections_per_second %d: want 0 (the default, %d) to %d: %w", l.ConnectionsPerSecond, DefaultConnectionsPerSecond, MaxConnectionsPerSecond, errdefs.ErrInvalidArgument)
	}
	return nil
}

// IsPublic reports whether port is one of p's public ports.
func (p Policy) IsPublic(port int) bool { return slices.Contains(p.PublicPorts, port) }

// Rule allows or denies the connections and HTTP requests that match every field it sets.
//
// A rule sets Host, CIDRs or both, never neither (an "allow everything" policy is Default "allow").
// When it sets both, a connection must match both: its host name matches Host and the address the
// gateway dials lies in one of CIDRs.
type Rule struct {
	// Name identifies the rule in decisions and logs. Optional: an unnamed rule at index i of
	// Policy.Rules is called "rule[i]" (0-based). Names are unique within a policy, at most
	// MaxRuleNameLen printable bytes, and may neither be "default" nor start with "guard:".
	Name string `json:"name,omitempty"`
	// Action is "allow" or "deny".
	Action string `json:"action"`
	// Host is an exact host name ("api.example.com") or a wildcard ("*.example.com") that matches any
	// subdomain at any depth ("a.example.com", "a.b.example.com") but not the apex ("example.com").
	// Matching is case-insensitive and ignores one trailing dot. Labels use [a-z0-9-] only (IDNs in
	// their punycode form), at most 63 bytes each and 253 in all; the last label may not be all digits
	// (write addresses in CIDRs instead).
	Host string `json:"host,omitempty"`
	// Ports the rule covers; empty means any port. In JSON each entry is a number (443) or a string
	// holding a number or an inclusive range ("8000-8100").
	Ports []PortRange `json:"ports,omitempty"`
	// CIDRs the dialed address must lie in, such as "10.0.0.0/8", "fd00::/8" or "203.0.113.7/32".
	// Bare addresses are not accepted: write "/32" or "/128". IPv4-mapped IPv6 prefixes
	// ("::ffff:10.0.0.0/104") are treated as the IPv4 prefix they map.
	CIDRs []string `json:"cidrs,omitempty"`
	// Methods are the HTTP methods the rule covers, as uppercase tokens ("GET", "POST"); empty means
	// any. Only allowed on a rule that sets Host. Requests are compared case-insensitively.
	Methods []string `json:"methods,omitempty"`
	// PathPrefix restricts the rule to HTTP requests whose canonical path is PathPrefix or lies below
	// it (see Matcher.Request). It must start with "/" and itself be canonical. Only allowed on a rule
	// that sets Host.
	PathPrefix string `json:"path_prefix,omitempty"`
}

// PortRange is an inclusive range of TCP ports, First through Last, each 1–65535.
// In JSON it is a number when First == Last and a string "First-Last" otherwise; both forms, and a
// string holding a single number, are accepted on input.
type PortRange struct {
	First int
	Last  int
}

// Port returns the PortRange holding port p alone.
func Port(p int) PortRange { return PortRange{First: p, Last: p} }

// Contains reports whether port p lies in r.
func (r PortRange) Contains(p uint16) bool { return int(p) >= r.First && int(p) <= r.Last }

// String returns "443" or "8000-8100".
func (r PortRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(r.First)
	}
	return strconv.Itoa(r.First) + "-" + strconv.Itoa(r.Last)
}

// MarshalJSON encodes r as a number when it holds one port and as a "First-Last" string otherwise.
func (r PortRange) MarshalJSON() ([]byte, error) {
	if r.First == r.Last {
		return []byte(strconv.Itoa(r.First)), nil
	}
	return json.Marshal(r.String())
}

// UnmarshalJSON accepts an integer (443), or a string holding an integer ("443") or a range
// ("8000-8100"). It reports a malformed value as ErrInvalidArgument; whether the numbers are valid
// ports is for Validate to say.
func (r *PortRange) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	var s string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("port %s: %w", b, errdefs.ErrInvalidArgument)
		}
	} else {
		s = string(b)
	}
	pr, err := parsePortRange(s)
	if err != nil {
		return err
	}
	*r = pr
	return nil
}

func parsePortRange(s string) (PortRange, error) {
	first, last, isRange := strings.Cut(s, "-")
	if isRange && first == "" {
		// "-5" is a negative number, not a range; let Validate reject it.
		first, last, isRange = s, "", false
	}
	a, err := strconv.Atoi(first)
	if err != nil {
		return PortRange{}, fmt.Errorf("port %q: not an integer or a range: %w", s, errdefs.ErrInvalidArgument)
	}
	if !isRange {
		return PortRange{First: a, Last: a}, nil
	}
	b, err := strconv.Atoi(last)
	if err != nil {
		return PortRange{}, fmt.Errorf("port range %q: not two integers: %w", s, errdefs.ErrInvalidArgument)
	}
	return PortRange{First: a, Last: b}, nil
}

// Validate reports the first problem in p as an error wrapping errdefs.ErrInvalidArgument, naming the
// rule (by index and name) and the field. It reports nil for a policy Compile accepts.
func (p Policy) Validate() error {
	if err := p.Limits.validate(); err != nil {
		return err
	}
	if len(p.PublicPorts) > MaxPublicPorts {
		return fmt.Errorf("policy: %d public ports: at most %d allowed: %w", len(p.PublicPorts), MaxPublicPorts, errdefs.ErrInvalidArgument)
	}
	for i, port := range p.PublicPorts {
		if port < 1 || port > 65535 {
			return fmt.Errorf("policy: public port %d: want 1..65535: %w", port, errdefs.ErrInvalidArgument)
		}
		if slices.Contains(p.PublicPorts[:i], port) {
			return fmt.Errorf("policy: public port %d is listed twice: %w", port, errdefs.ErrInvalidArgument)
		}
	}
	if _, err := compileRules(p); err != nil {
		return err
	}
	_, err := compileCredentials(p.Credentials)
	return err
}

// ruleName returns the name decisions use for rule i.
func ruleName(r Rule, i int) string {
	if r.Name != "" {
		return r.Name
	}
	return fmt.Sprintf("rule[%d]", i)
}

func compileRules(p Policy) ([]compiledRule, error) {
	switch p.Default {
	case "", ActionDeny, ActionAllow:
	default:
		return nil, fmt.Errorf("policy: default %q: want %q or %q: %w", p.Default, ActionAllow, ActionDeny, errdefs.ErrInvalidArgument)
	}
	if len(p.Rules) > MaxRules {
		return nil, fmt.Errorf("policy: %d rules: at most %d allowed: %w", len(p.Rules), MaxRules, errdefs.ErrInvalidArgument)
	}
	names := make(map[string]int, len(p.Rules))
	out := make([]compiledRule, 0, len(p.Rules))
	for i, r := range p.Rules {
		name := ruleName(r, i)
		cr, err := compileRule(r, name)
		if err != nil {
			return nil, fmt.Errorf("policy: rules[%d] (%q): %w", i, name, err)
		}
		if j, dup := names[name]; dup {
			return nil, fmt.Errorf("policy: rules[%d] (%q): name already used by rules[%d]: %w", i, name, j, errdefs.ErrInvalidArgument)
		}
		names[name] = i
		out = append(out, cr)
	}
	return out, nil
}

func compileRule(r Rule, name string) (compiledRule, error) {
	cr := compiledRule{name: name}
	if err := validateName(r.Name); err != nil {
		return cr, err
	}
	switch r.Action {
	case ActionAllow:
		cr.allow = true
	case ActionDeny:
	default:
		return cr, fmt.Errorf("action %q: want %q or %q: %w", r.Action, ActionAllow, ActionDeny, errdefs.ErrInvalidArgument)
	}
	if r.Host == "" && len(r.CIDRs) == 0 {
		return cr, fmt.Errorf("neither host nor cidrs set (to allow everything use default %q): %w", ActionAllow, errdefs.ErrInvalidArgument)
	}
	if r.Host != "" {
		hp, err := parseHostPattern(r.Host)
		if err != nil {
			return cr, err
		}
		cr.host = hp
	}
	if len(r.Ports) > MaxRuleItems {
		return cr, fmt.Errorf("%d ports: at most %d allowed: %w", len(r.Ports), MaxRuleItems, errdefs.ErrInvalidArgument)
	}
	for _, pr := range r.Ports {
		if pr.First < 1 || pr.First > 65535 || pr.Last < 1 || pr.Last > 65535 {
			return cr, fmt.Errorf("port %s: out of range 1-65535: %w", pr, errdefs.ErrInvalidArgument)
		}
		if pr.First > pr.Last {
			return cr, fmt.Errorf("port range %s: first port above last: %w", pr, errdefs.ErrInvalidArgument)
		}
		cr.ports = append(cr.ports, pr)
	}
	if len(r.CIDRs) > MaxRuleItems {
		return cr, fmt.Errorf("%d cidrs: at most %d allowed: %w", len(r.CIDRs), MaxRuleItems, errdefs.ErrInvalidArgument)
	}
	for _, s := range r.CIDRs {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return cr, fmt.Errorf("cidr %q: %v: %w", s, err, errdefs.ErrInvalidArgument)
		}
		if pfx.Addr().Zone() != "" {
			return cr, fmt.Errorf("cidr %q: zones not allowed: %w", s, errdefs.ErrInvalidArgument)
		}
		cr.cidrs = append(cr.cidrs, normalizePrefix(pfx))
	}
	if (len(r.Methods) > 0 || r.PathPrefix != "") && r.Host == "" {
		return cr, fmt.Errorf("methods and path_prefix need a host: %w", errdefs.ErrInvalidArgument)
	}
	if len(r.Methods) > MaxRuleItems {
		return cr, fmt.Errorf("%d methods: at most %d allowed: %w", len(r.Methods), MaxRuleItems, errdefs.ErrInvalidArgument)
	}
	for _, m := range r.Methods {
		if !isToken(m) || len(m) > maxMethodLen || strings.ToUpper(m) != m {
			return cr, fmt.Errorf("method %q: want an uppercase HTTP token of at most %d bytes: %w", m, maxMethodLen, errdefs.ErrInvalidArgument)
		}
		cr.methods = append(cr.methods, m)
	}
	if r.PathPrefix != "" {
		if !strings.HasPrefix(r.PathPrefix, "/") {
			return cr, fmt.Errorf("path_prefix %q: must start with \"/\": %w", r.PathPrefix, errdefs.ErrInvalidArgument)
		}
		if len(r.PathPrefix) > MaxPathPrefixLen {
			return cr, fmt.Errorf("path_prefix: longer than %d bytes: %w", MaxPathPrefixLen, errdefs.ErrInvalidArgument)
		}
		if c, ok := canonicalPath(r.PathPrefix); !ok || c != r.PathPrefix {
			return cr, fmt.Errorf("path_prefix %q: not canonical (no \"%%\", \"?\", \"#\", \"\\\", control bytes, \".\" or \"..\" segments, or empty segments): %w", r.PathPrefix, errdefs.ErrInvalidArgument)
		}
		cr.pathPrefix = r.PathPrefix
	}
	return cr, nil
}

func validateName(n string) error {
	if len(n) > MaxRuleNameLen {
		return fmt.Errorf("name longer than %d bytes: %w", MaxRuleNameLen, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(n); i++ {
		if n[i] < 0x20 || n[i] == 0x7f {
			return fmt.Errorf("name %q: control byte: %w", n, errdefs.ErrInvalidArgument)
		}
	}
	if n == RuleDefault || strings.HasPrefix(n, "guard:") {
		return fmt.Errorf("name %q: reserved (\"default\" and \"guard:…\" name built-in decisions): %w", n, errdefs.ErrInvalidArgument)
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token (the syntax of an HTTP method).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// normalizePrefix masks p and turns an IPv4-mapped IPv6 prefix of at least 96 bits into the IPv4
// prefix it maps, so that it matches the unmapped addresses the Matcher compares against.
func normalizePrefix(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}
