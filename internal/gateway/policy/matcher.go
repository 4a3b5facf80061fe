package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// RuleDefault is Decision.Rule when no rule matched and Policy.Default decided.
const RuleDefault = "default"

// Conn describes a connection a sandbox opens.
type Conn struct {
	// Host is the name the sandbox asked for: the TLS SNI, the HTTP Host (without port), or the name it
	// resolved through the gateway's DNS to IP. It may be empty. It is normalized with NormalizeHost; a
	// value that is not a valid host name (an IP literal, "host:port", …) counts as empty.
	//
	// The Matcher trusts Host. The caller must make sure IP is an address Host resolves to (for example
	// by dialing an address it resolved itself, or one its DNS server handed this sandbox for Host),
	// or a sandbox could name an allowed host while connecting elsewhere.
	Host string
	// IP is the address the gateway will dial. IPv4-mapped IPv6 addresses are treated as the IPv4
	// address they map and zones are ignored. An invalid IP is refused (GuardInvalid).
	IP netip.Addr
	// Port is the TCP port the gateway will dial.
	Port uint16
}

// Decision is the outcome of a Matcher query.
type Decision struct {
	// Allow reports whether the connection or request may proceed.
	Allow bool `json:"allow"`
	// Rule names what decided: a rule's name, RuleDefault, or a guard ("guard:private", …). When
	// NeedsHTTP is set, the first rule whose outcome depends on the HTTP request.
	Rule string `json:"rule"`
	// Reason says why, for logs and error messages shown to the sandbox's owner.
	Reason string `json:"reason"`
	// NeedsHTTP is set by Connect (never by Request) when the outcome depends on a rule with Methods or
	// PathPrefix that matches this connection. Allow is then false: the proxy may accept the connection
	// only if it reads each HTTP request on it and passes it to Request, and must refuse it otherwise
	// (for example for TLS it does not terminate).
	NeedsHTTP bool `json:"needs_http,omitempty"`
}

// CompileOptions tunes Compile.
type CompileOptions struct {
	// GuardExtra are further ranges guarded like the built-in ones, under the name GuardExtra. The node
	// passes its own addresses so that a sandbox cannot reach services listening on the host. Each
	// must be a valid prefix; they are masked.
	GuardExtra []netip.Prefix
	// Guards are the operator's: the node's own addresses, guarded like GuardExtra, and the guarded
	// ranges tenants may open. Nil: none, and no guarded address is ever allowed.
	Guards *Guards
}

// Matcher is a compiled Policy. It is immutable and safe for concurrent use.
//
// Evaluation, for Connect and Request alike:
//  1. An invalid IP is refused (GuardInvalid).
//  2. The IP is checked against the guard ranges (see the Guard… constants and
//     CompileOptions.GuardExtra, IPv4-mapped forms and IPv4 embedded in NAT64, SIIT, 6to4 and
//     IPv4-compatible IPv6 addresses included). A guarded IP can be allowed only if the operator
//     opened it (CompileOptions.Guards: one of its Open ranges lifts the guard) and then only by an
//     allow rule with a CIDR that holds the IP and lies wholly inside the most specific guard range
//     holding it: "10.1.0.0/16" lifts guard:private for 10.1.2.3, while "0.0.0.0/0" lifts nothing and
//     "169.254.0.0/16" does not lift guard:metadata for 169.254.169.254. Host-only allow rules are
//     skipped; deny rules apply as usual.
//  3. Rules are tried in order; the first that matches decides. A rule matches when every field it
//     sets matches: Host against Conn.Host, Ports against Conn.Port, CIDRs against Conn.IP, and
//     (Request only) Methods and PathPrefix against the request.
//  4. If no rule matched, a guarded IP is refused by its guard; otherwise Policy.Default decides.
type Matcher struct {
	rules        []compiledRule
	credentials  []compiledCredential
	defaultAllow bool
	guardExtra   []netip.Prefix
	guards       *Guards
	limits       Limits
}

// Limits reports the policy's connection limits, defaults filled in.
func (m *Matcher) Limits() Limits { return m.limits }

type compiledRule struct {
	name       string
	allow      bool
	host       *hostPattern // nil when the rule sets no Host
	ports      []PortRange
	cidrs      []netip.Prefix
	methods    []string
	pathPrefix string
}

// httpConditional reports whether the rule's match depends on the HTTP request.
func (r *compiledRule) httpConditional() bool { return len(r.methods) > 0 || r.pathPrefix != "" }

// Compile validates p (see Policy.Validate) and compiles it with no extra guard ranges.
func Compile(p Policy) (*Matcher, error) {
	return CompileWithOptions(p, CompileOptions{})
}

// CompileWithOptions validates p and compiles it with opts. Errors wrap errdefs.ErrInvalidArgument.
func CompileWithOptions(p Policy, opts CompileOptions) (*Matcher, error) {
	rules, err := compileRules(p)
	if err != nil {
		return nil, err
	}
	creds, err := compileCredentials(p.Credentials)
	if err != nil {
		return nil, err
	}
	if err := p.Limits.validate(); err != nil {
		return nil, err
	}
	m := &Matcher{rules: rules, credentials: creds, defaultAllow: p.Default == ActionAllow, guards: opts.Guards, limits: p.Limits.WithDefaults()}
	for _, g := range opts.GuardExtra {
		if !g.IsValid() || g.Addr().Zone() != "" {
			return nil, fmt.Errorf("policy: guard extra %v: invalid prefix: %w", g, errdefs.ErrInvalidArgument)
		}
		m.guardExtra = append(m.guardExtra, normalizePrefix(g))
	}
	return m, nil
}

// conn is a Conn prepared for matching.
type conn struct {
	host  string
	ip    netip.Addr
	port  uint16
	guard guardHit
	// opened reports that the operator lets tenants' rules lift the guard.
	opened bool
}

func (m *Matcher) prepare(c Conn) (conn, bool) {
	if !c.IP.IsValid() {
		return conn{}, false
	}
	host, ok := NormalizeHost(c.Host)
	if !ok {
		host = ""
	}
	ip := c.IP.Unmap().WithZone("")
	extra := m.guardExtra
	if host := m.guards.Host(); len(host) > 0 {
		extra = append(slices.Clip(extra), host...)
	}
	g := guardFor(ip, extra)
	return conn{host: host, ip: ip, port: c.Port, guard: g, opened: g.ok && m.guards.opens(ip, g)}, true
}

var invalidDecision = Decision{Rule: GuardInvalid, Reason: "no valid destination address"}

// matchConn reports whether r matches c on its connection-level fields (Host, Ports, CIDRs), with the
// guard applied: a guarded address matches an allow rule only through a CIDR that lifts the guard.
func (r *compiledRule) matchConn(c conn) bool {
	if r.host != nil && !r.host.match(c.host) {
		return false
	}
	if len(r.ports) > 0 {
		in := false
		for _, p := range r.ports {
			if p.Contains(c.port) {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	if c.guard.ok && r.allow {
		if !c.opened {
			return false
		}
		for _, p := range r.cidrs {
			if lifts(p, c.ip, c.guard) {
				return true
			}
		}
		return false
	}
	if len(r.cidrs) > 0 {
		for _, p := range r.cidrs {
			if p.Contains(c.ip) {
				return true
			}
		}
		return false
	}
	return true
}

func (r *compiledRule) decision(c conn, why string) Decision {
	verb := "denies"
	if r.allow {
		verb = "allows"
	}
	d := Decision{Allow: r.allow, Rule: r.name, Reason: fmt.Sprintf("rule %q %s %s", r.name, verb, describe(c))}
	if why != "" {
		d.Reason += " (" + why + ")"
	}
	return d
}

// fallback is the decision when no rule matched.
func (m *Matcher) fallback(c conn) Decision {
	if c.guard.ok && !c.opened {
		return Decision{Rule: c.guard.name, Reason: fmt.Sprintf("%s is in guarded range %s, which the operator has not opened to sandboxes", c.ip, c.guard.prefix)}
	}
	if c.guard.ok {
		return Decision{Rule: c.guard.name, Reason: fmt.Sprintf("%s is in guarded range %s and no allow rule names it in its cidrs", c.ip, c.guard.prefix)}
	}
	if m.defaultAllow {
		return Decision{Allow: true, Rule: RuleDefault, Reason: "no rule matched " + describe(c) + "; default allow"}
	}
	return Decision{Rule: RuleDefault, Reason: "no rule matched " + describe(c) + "; default deny"}
}

func describe(c conn) string {
	dst := netip.AddrPortFrom(c.ip, c.port).String()
	if c.host == "" {
		return dst
	}
	return c.host + " (" + dst + ")"
}

// Connect decides whether the sandbox may open connection c. It reports NeedsHTTP (with Allow false)
// when a rule with Methods or PathPrefix matches c and the outcome of some request would differ from
// that of the rule or default that decides otherwise; then Request decides per request. When Connect
// reports NeedsHTTP false, Request reports the same Allow for every request on c.
func (m *Matcher) Connect(c Conn) Decision {
	cc, ok := m.prepare(c)
	if !ok {
		return invalidDecision
	}
	var first *compiledRule // first HTTP-conditional rule matching cc
	var seenAllow, seenDeny bool
	final, decided := Decision{}, false
	for i := range m.rules {
		r := &m.rules[i]
		if !r.matchConn(cc) {
			continue
		}
		if r.httpConditional() {
			if first == nil {
				first = r
			}
			if r.allow {
				seenAllow = true
			} else {
				seenDeny = true
			}
			continue
		}
		final, decided = r.decision(cc, ""), true
		break
	}
	if !decided {
		final = m.fallback(cc)
	}
	if (seenAllow && !final.Allow) || (seenDeny && final.Allow) {
		return Decision{
			Rule:      first.name,
			Reason:    fmt.Sprintf("rule %q matches %s only for some HTTP methods or paths", first.name, describe(cc)),
			NeedsHTTP: true,
		}
	}
	return final
}

// Request decides whether the sandbox may send one HTTP request with method and path on connection c.
// method is compared case-insensitively with Rule.Methods. path is canonicalized with CanonicalPath
// and matched against Rule.PathPrefix by whole segments: "/v1/files" covers "/v1/files" and
// "/v1/files/x" but not "/v1/filesystem"; a prefix ending in "/" covers what lies below it.
//
// A method that is not an HTTP token, and an unsafe path, match no allow rule that sets Methods
// (respectively PathPrefix) and every deny rule that does (its other fields permitting). So such a
// request is denied unless a rule that does not look at the method (path) allows it.
// Request never sets NeedsHTTP.
func (m *Matcher) Request(c Conn, method, path string) Decision {
	cc, ok := m.prepare(c)
	if !ok {
		return invalidDecision
	}
	methodOK := isToken(method)
	cpath, pathOK := canonicalPath(path)
	for i := range m.rules {
		r := &m.rules[i]
		if !r.matchConn(cc) {
			continue
		}
		why := ""
		if len(r.methods) > 0 {
			if !methodOK {
				if r.allow {
					continue
				}
				why = fmt.Sprintf("invalid method %q", method)
			} else if !containsFold(r.methods, method) {
				continue
			} else {
				why = "method " + method
			}
		}
		if r.pathPrefix != "" {
			if !pathOK {
				if r.allow {
					continue
				}
				why = joinWhy(why, fmt.Sprintf("unsafe path %q", path))
			} else if !pathHasPrefix(cpath, r.pathPrefix) {
				continue
			} else {
				why = joinWhy(why, fmt.Sprintf("path %q under %q", cpath, r.pathPrefix))
			}
		}
		return r.decision(cc, why)
	}
	return m.fallback(cc)
}

func joinWhy(a, b string) string {
	if a == "" {
		return b
	}
	return a + ", " + b
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// AllowsName reports whether the DNS server should resolve name for this sandbox: whether some
// connection with Conn.Host set to name could be allowed by a rule that sets Host, or by the default.
// name is normalized with NormalizeHost; an invalid name is not allowed.
//
// It tries the rules that set Host in order: the first that matches name decides if it allows
// (whatever its other fields) or if it is a deny rule that sets nothing but Host; a deny rule with
// further conditions is passed over. If none decides, Policy.Default does.
//
// Rules that set only CIDRs are ignored: a name only such a rule could allow resolves only under
// Default "allow". To let a sandbox reach an address range by name, add a rule setting both Host and
// CIDRs. AllowsName knows no addresses, so it ignores the guard: Connect still refuses guarded ones.
// It may report true for a name every connection to which Connect refuses (for its ports, say); it
// never reports false for a name that Connect would allow through a Host rule or the default.
func (m *Matcher) AllowsName(name string) bool {
	n, ok := NormalizeHost(name)
	if !ok {
		return false
	}
	for i := range m.rules {
		r := &m.rules[i]
		if r.host == nil || !r.host.match(n) {
			continue
		}
		if r.allow {
			return true
		}
		if len(r.ports) == 0 && len(r.cidrs) == 0 && !r.httpConditional() {
			return false
		}
	}
	return m.defaultAllow
}

// Reach is a destination a policy could allow a TCP connection to: an address in Prefix (the zero
// Prefix: any address) on one of Ports (none: any port).
type Reach struct {
	Prefix netip.Prefix
	Ports  []PortRange
}

// Reachable over-approximates what the policy could allow at the connection level, for refusing the
// rest before any handshake: everything (all) under Default "allow"; else, for each allow rule, its
// ports at any address if it sets a Host (the name resolves to addresses unknown here) and at its CIDRs
// otherwise. Deny rules, methods, paths and the guard only narrow what passes, so they are left to
// Connect and Request: whatever Reachable leaves out, Connect refuses. A rule with both Host and CIDRs
// reaches its CIDRs.
func (m *Matcher) Reachable() (all bool, reach []Reach) {
	if m.defaultAllow {
		return true, nil
	}
	for _, r := range m.rules {
		if !r.allow {
			continue
		}
		if len(r.cidrs) == 0 { // a Host alone
			if len(r.ports) == 0 {
				return true, nil
			}
			reach = append(reach, Reach{Ports: r.ports})
			continue
		}
		for _, p := range r.cidrs {
			reach = append(reach, Reach{Prefix: p, Ports: r.ports})
		}
	}
	return false, reach
}
