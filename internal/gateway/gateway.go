// Package gateway is a node's network gateway: the only way out of its sandboxes. nftables on the host
// (package netfilter) sends every TCP connection a sandbox opens to the gateway's transparent proxy and
// every DNS query to its DNS server; everything else is dropped. The gateway
//
//   - answers DNS itself: only names the sandbox's policy could allow resolve, from the node's resolver;
//   - learns the destination of each connection: the TLS SNI, the HTTP Host, or for other TCP the name
//     the sandbox resolved for the address it dialed (else the bare address);
//   - resolves that name itself and dials only an address it checked against the policy and the guard
//     (no loopback, private, link-local, metadata or host addresses unless a CIDR rule names them), so
//     DNS rebinding and forged destinations get nowhere;
//   - refuses with a TCP reset, or for plain HTTP with a 403 whose body names the rule;
//   - checks every plain-HTTP request on a connection (method, path, and that the Host stays the same);
//   - records every connection, and every plain-HTTP request, as a Flow (Config.Flows) when it ends:
//     who, where, what protocol, the decision and the rule, and the bytes relayed each way.
//
// Policies change at any time; new connections use the new one at once.
package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/time/rate"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/dnsserver"
	"github.com/airlockrun/airlock/internal/gateway/mitm"
	"github.com/airlockrun/airlock/internal/gateway/netfilter"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/gateway/sni"
)

// Resolver resolves names for the gateway. *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Gateway.
type Config struct {
	// Table is the nftables table the gateway owns. Required.
	Table string
	// IfacePrefix is the name prefix of the sandboxes' host-side veths. Required.
	IfacePrefix string
	// SharedPrefix is the prefix of every node's sandbox veths on this host (see netfilter.Config).
	SharedPrefix string
	// Resolver resolves names. Nil: net.DefaultResolver.
	Resolver Resolver
	// Hosts are static names the gateway resolves before asking Resolver (on-prem services, tests).
	Hosts map[string][]netip.Addr
	// HostsOnly resolves nothing but Hosts: for machines without DNS (fully offline) and tests.
	HostsOnly bool
	// KernelRefusals has nftables reset a sandbox's new TCP connections that no rule of its policy
	// could allow, before any handshake (netfilter.SetReach), instead of the proxy accepting and then
	// resetting them. The node sets it; tests of the proxy alone leave it off.
	KernelRefusals bool
	// GuardExtra are more addresses no sandbox may reach unless the operator opened them and a CIDR
	// rule names them (tests; the node passes its own addresses in Guards).
	GuardExtra []netip.Prefix
	// Guards are the operator's: the node's own addresses, kept current, and the guarded ranges
	// tenants' rules may open (policy.Guards). Nil: no guarded address is ever allowed.
	Guards *policy.Guards
	// CAs keeps each sandbox's interception CA across node restarts. Nil: CAs live in memory only.
	CAs CAStore
	// Secret returns the value of a tenant's secret for a credential binding of the sandbox's. Nil:
	// bindings fail (502). (A node in a process of its own asks its control plane, which checks that the
	// sandbox is on that node and its policy binds the secret.)
	Secret func(ctx context.Context, tenantID, sandboxID, name string) ([]byte, error)
	// Token returns the current access token of a tenant's OAuth connection for a binding of the
	// sandbox's that names one. Nil: such bindings fail (502).
	Token func(ctx context.Context, tenantID, sandboxID, connection string) ([]byte, error)
	// UpstreamRoots verify the upstream of an intercepted TLS connection. Nil: the host's roots.
	UpstreamRoots *x509.CertPool
	// DialTimeout bounds connecting upstream. Zero: 10s.
	DialTimeout time.Duration
	// SniffTimeout is how long the proxy waits for a client's first bytes before treating the connection
	// as plain TCP (protocols where the server speaks first). Zero: 300ms.
	SniffTimeout time.Duration
	// Flows receives a Flow for every connection a registered sandbox opens (for plain HTTP, every
	// request) once it ended, allowed or refused. Connections from addresses of no registered sandbox
	// are reset without a record. Nil: flows are not recorded.
	Flows FlowSink
	// Logger receives logs. Nil: slog.Default().
	Logger *slog.Logger
}

// CAStore keeps sandboxes' interception CAs (castore.Store implements it).
type CAStore interface {
	// Load returns the stored CA, or an error wrapping errdefs.ErrNotFound.
	Load(ctx context.Context, id, tenantID string) (*mitm.CA, error)
	// Save stores ca for the sandbox.
	Save(ctx context.Context, id, tenantID string, ca *mitm.CA) error
	// Delete forgets the sandbox's CA.
	Delete(id string) error
}

// Gateway runs the transparent proxy and the DNS server of one node.
type Gateway struct {
	cfg Config
	log *slog.Logger

	proxy  *net.TCPListener
	dnsUDP net.PacketConn
	dnsTCP net.Listener

	mu sync.RWMutex
	// bySrc and byID hold the registered sandboxes; guarded by mu.
	bySrc map[netip.Addr]*sandbox
	byID  map[string]*sandbox

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// sandbox is one registered sandbox.
type sandbox struct {
	id string
	// caID names the stored interception CA: the sandbox's ID, or its session's (a session keeps one CA
	// across the sandboxes it runs in, whose trust stores hold its certificate).
	caID    string
	tenant  string
	ip      netip.Addr
	matcher atomic.Pointer[policy.Matcher]
	// ca terminates the TLS connections the gateway must look into; only its certificate is in the
	// sandbox.
	ca *mitm.CA

	mu sync.Mutex
	// names maps addresses to the name the sandbox resolved them from; guarded by mu. Bounded.
	names map[netip.Addr]string
	// conns holds a cancel function for each connection in flight, which ends it; guarded by mu.
	conns map[uint64]context.CancelFunc
	// nextConn numbers the entries of conns; guarded by mu.
	nextConn uint64
	// gone is set once the sandbox is unregistered; guarded by mu.
	gone bool
	// active counts the connections in flight; Add only under mu while not gone.
	active sync.WaitGroup
	// admitted paces the sandbox's new connections (Limits.ConnectionsPerSecond); guarded by mu.
	admitted *rate.Limiter
	// refused counts the connections refused by the limits since the last flow that said so, and
	// refusedLogged is when that was; guarded by mu.
	refused       int
	refusedLogged time.Time
}

// admit takes a slot for one more of the sandbox's connections under lim (its connections in flight
// and its pace), registering cancel, which ends the connection, to be called when the sandbox is
// unregistered; it returns the function that gives the slot back. Deciding and taking the slot under one
// lock keeps concurrent connections from all taking the last one. When the sandbox may not open it, admit
// returns why (report is set once a second, with how many were refused meanwhile, for a flow record: a
// flood does not flood the flow log); when the sandbox is already gone, ok is false and cancel is called
// at once.
func (s *sandbox) admit(lim policy.Limits, now time.Time, cancel context.CancelFunc) (forget func(), why string, report, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		cancel()
		return func() {}, "", false, false
	}
	r := rate.Limit(lim.ConnectionsPerSecond)
	if s.admitted == nil {
		s.admitted = rate.NewLimiter(r, 2*lim.ConnectionsPerSecond)
	} else if s.admitted.Limit() != r {
		s.admitted.SetLimitAt(now, r)
		s.admitted.SetBurstAt(now, 2*lim.ConnectionsPerSecond)
	}
	switch {
	case len(s.conns) >= lim.MaxConnections:
		why = fmt.Sprintf("%d connections in flight: at most %d (limits.max_connections)", len(s.conns), lim.MaxConnections)
	case !s.admitted.AllowN(now, 1):
		why = fmt.Sprintf("more than %d new connections a second (limits.connections_per_second)", lim.ConnectionsPerSecond)
	default:
		n := s.nextConn
		s.nextConn++
		s.conns[n] = cancel
		s.active.Add(1)
		return func() {
			s.mu.Lock()
			delete(s.conns, n)
			s.mu.Unlock()
			s.active.Done()
		}, "", false, true
	}
	s.refused++
	if now.Sub(s.refusedLogged) < time.Second {
		return func() {}, why, false, false
	}
	why = fmt.Sprintf("%s; %d refused since the last such record", why, s.refused)
	s.refused, s.refusedLogged = 0, now
	return func() {}, why, true, false
}

// shutdownWait bounds how long Unregister waits for a sandbox's connections to end.
const shutdownWait = 5 * time.Second

// shutdown marks the sandbox gone, ends its connections in flight and waits (at most shutdownWait) until
// they have ended and recorded their flows.
func (s *sandbox) shutdown() {
	s.mu.Lock()
	s.gone = true
	conns := s.conns
	s.conns = map[uint64]context.CancelFunc{}
	s.mu.Unlock()
	for _, cancel := range conns {
		cancel()
	}
	done := make(chan struct{})
	// The waiter ends with the last connection, even when shutdown stopped waiting for it.
	go func() { s.active.Wait(); close(done) }()
	t := time.NewTimer(shutdownWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

const maxRemembered = 4096

func (s *sandbox) remember(name string, addrs []netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.names)+len(addrs) > maxRemembered {
		s.names = map[netip.Addr]string{}
	}
	for _, a := range addrs {
		s.names[a] = name
	}
}

func (s *sandbox) nameOf(a netip.Addr) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[a]
}

// New starts the gateway: its listeners on the host and the nftables rules that send sandbox traffic to
// them. Close undoes both.
func New(cfg Config) (*Gateway, error) {
	if cfg.Table == "" || cfg.IfacePrefix == "" {
		return nil, fmt.Errorf("gateway: Table and IfacePrefix are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.SniffTimeout <= 0 {
		cfg.SniffTimeout = 300 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Gateway{cfg: cfg, log: cfg.Logger.With("component", "gateway"), bySrc: map[netip.Addr]*sandbox{}, byID: map[string]*sandbox{}}
	var err error
	// The listeners take any address: nftables redirects to the address of the veth a packet came in
	// on, and drops what comes to these sockets (marked netfilter.GatewayMark) from anywhere but a
	// sandbox veth.
	lc := net.ListenConfig{Control: netfilter.MarkSocket(netfilter.GatewayMark)}
	ln, err := lc.Listen(context.Background(), "tcp4", "0.0.0.0:0")
	if err != nil {
		return nil, fmt.Errorf("gateway: proxy listener: %w", err)
	}
	g.proxy = ln.(*net.TCPListener)
	port := uint16(g.proxy.Addr().(*net.TCPAddr).Port)
	// DNS takes the same port number for UDP and TCP: find one free for both.
	var dnsPort uint16
	for attempt := 0; attempt < 20 && g.dnsTCP == nil; attempt++ {
		pc, err := lc.ListenPacket(context.Background(), "udp4", "0.0.0.0:0")
		if err != nil {
			g.proxy.Close()
			return nil, fmt.Errorf("gateway: dns listener: %w", err)
		}
		p := pc.LocalAddr().(*net.UDPAddr).Port
		tl, err := lc.Listen(context.Background(), "tcp4", fmt.Sprintf("0.0.0.0:%d", p))
		if err != nil {
			pc.Close()
			continue
		}
		g.dnsUDP, g.dnsTCP, dnsPort = pc, tl, uint16(p)
	}
	if g.dnsTCP == nil {
		g.proxy.Close()
		return nil, errors.New("gateway: no port free for DNS on both UDP and TCP")
	}
	if err := netfilter.Install(netfilter.Config{Table: cfg.Table, IfacePrefix: cfg.IfacePrefix, SharedPrefix: cfg.SharedPrefix, ProxyPort: port, DNSPort: dnsPort}); err != nil {
		g.closeListeners()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	dns := &dnsserver.Server{Lookup: g.lookupForSandbox, OnAnswer: g.onAnswer, Logger: g.log}
	g.wg.Add(3)
	go func() { defer g.wg.Done(); g.serveProxy(ctx) }()
	go func() { defer g.wg.Done(); _ = dns.ServeUDP(ctx, g.dnsUDP) }()
	go func() { defer g.wg.Done(); _ = dns.ServeTCP(ctx, g.dnsTCP) }()
	g.log.Info("gateway up", "proxy_port", port, "dns_port", dnsPort, "table", cfg.Table)
	return g, nil
}

func (g *Gateway) closeListeners() {
	g.proxy.Close()
	if g.dnsUDP != nil {
		g.dnsUDP.Close()
	}
	if g.dnsTCP != nil {
		g.dnsTCP.Close()
	}
}

// Close stops the gateway: listeners, connections in flight, and the nftables rules.
func (g *Gateway) Close() error {
	g.cancel()
	g.closeListeners()
	g.wg.Wait()
	return netfilter.Remove(g.cfg.Table)
}

func (g *Gateway) compile(p policy.Policy) (*policy.Matcher, error) {
	m, err := policy.CompileWithOptions(p, policy.CompileOptions{GuardExtra: g.cfg.GuardExtra, Guards: g.cfg.Guards})
	if err != nil {
		return nil, fmt.Errorf("network policy: %w", err)
	}
	return m, nil
}

// Register starts serving the sandbox id of tenant tenantID, whose traffic comes from ip, under policy p.
// The tenant is recorded in the sandbox's flows. Registering an ID again replaces the earlier
// registration and ends its connections.
func (g *Gateway) Register(id, tenantID string, ip netip.Addr, p policy.Policy) error {
	return g.RegisterWithCA(id, id, tenantID, ip, p)
}

// RegisterWithCA is Register with the interception CA stored under caID (made on first use) instead of
// the sandbox's own: a session's sandboxes share the session's CA, which their restored trust stores
// hold. Unregister leaves such a CA stored; ForgetCA removes it.
func (g *Gateway) RegisterWithCA(id, caID, tenantID string, ip netip.Addr, p policy.Policy) error {
	m, err := g.compile(p)
	if err != nil {
		return err
	}
	ca, err := g.sandboxCA(caID, tenantID)
	if err != nil {
		return fmt.Errorf("sandbox %s: interception CA: %w", id, err)
	}
	if err := g.setReach(ip, m); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	s := &sandbox{id: id, caID: caID, tenant: tenantID, ip: ip, ca: ca, names: map[netip.Addr]string{}, conns: map[uint64]context.CancelFunc{}}
	s.matcher.Store(m)
	g.mu.Lock()
	old := g.byID[id]
	if old != nil {
		delete(g.bySrc, old.ip)
	}
	g.byID[id] = s
	g.bySrc[ip] = s
	g.mu.Unlock()
	if old != nil {
		old.shutdown()
		if old.ip != ip && g.cfg.KernelRefusals && old.ip.Is4() {
			_ = netfilter.ClearReach(g.cfg.Table, old.ip)
		}
	}
	return nil
}

// sandboxCA returns the sandbox's stored CA, or makes (and stores) a new one.
func (g *Gateway) sandboxCA(id, tenantID string) (*mitm.CA, error) {
	if g.cfg.CAs == nil {
		return mitm.NewCA(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := g.cfg.CAs.Load(ctx, id, tenantID)
	if err == nil {
		return ca, nil
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err // e.g. the tenant's key is revoked: no interception, and so no sandbox
	}
	if ca, err = mitm.NewCA(id); err != nil {
		return nil, err
	}
	if err := g.cfg.CAs.Save(ctx, id, tenantID, ca); err != nil {
		return nil, err
	}
	return ca, nil
}

// CACertPEM returns the certificate of the sandbox's interception CA, for the sandbox's trust store. The
// CA's key never leaves the gateway.
func (g *Gateway) CACertPEM(id string) ([]byte, error) {
	g.mu.RLock()
	s := g.byID[id]
	g.mu.RUnlock()
	if s == nil {
		return nil, fmt.Errorf("sandbox %s has no network on this node: %w", id, errdefs.ErrNotFound)
	}
	return s.ca.CertPEM(), nil
}

// SetPolicy replaces the sandbox's policy; connections opened from now on follow it.
func (g *Gateway) SetPolicy(id string, p policy.Policy) error {
	m, err := g.compile(p)
	if err != nil {
		return err
	}
	g.mu.RLock()
	s := g.byID[id]
	g.mu.RUnlock()
	if s == nil {
		return fmt.Errorf("sandbox %s has no network on this node: %w", id, errdefs.ErrNotFound)
	}
	// The proxy follows m at once, the kernel's refusals a moment later (a connection in between is
	// decided as under one policy or the other).
	s.matcher.Store(m)
	if err := g.setReach(s.ip, m); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	return nil
}

// setReach has the kernel reset the sandbox's new connections that m could never allow (see
// netfilter.SetReach); under a policy that could allow anything, every connection goes to the proxy.
func (g *Gateway) setReach(ip netip.Addr, m *policy.Matcher) error {
	if !g.cfg.KernelRefusals || !ip.Is4() {
		return nil
	}
	all, reach := m.Reachable()
	if all {
		return netfilter.ClearReach(g.cfg.Table, ip)
	}
	out := make([]netfilter.Reach, 0, len(reach))
	for _, r := range reach {
		nr := netfilter.Reach{Prefix: r.Prefix}
		for _, p := range r.Ports {
			nr.Ports = append(nr.Ports, [2]uint16{uint16(p.First), uint16(p.Last)})
		}
		out = append(out, nr)
	}
	return netfilter.SetReach(g.cfg.Table, ip, out)
}

// Unregister stops serving the sandbox and forgets its CA: new connections are refused, and those in
// flight are ended. It returns once they have ended and recorded their flows (or after a few seconds if
// one is stuck).
func (g *Gateway) Unregister(id string) {
	g.mu.Lock()
	s := g.byID[id]
	if s != nil {
		delete(g.bySrc, s.ip)
		delete(g.byID, id)
	}
	g.mu.Unlock()
	if s != nil {
		s.shutdown()
		if g.cfg.KernelRefusals && s.ip.Is4() {
			if err := netfilter.ClearReach(g.cfg.Table, s.ip); err != nil {
				g.log.Warn("forget the sandbox's refusals", "sandbox", id, "err", err)
			}
		}
	}
	if s == nil || s.caID == id {
		g.ForgetCA(id)
	}
}

// ForgetCA removes a stored interception CA (a session's, once the session is gone).
func (g *Gateway) ForgetCA(caID string) {
	if g.cfg.CAs != nil {
		if err := g.cfg.CAs.Delete(caID); err != nil {
			g.log.Warn("forget interception CA", "ca", caID, "err", err)
		}
	}
}

// RewrapCAs wraps the keys of the tenant's stored CAs again under its current key-encryption key (after
// a rotation), if the CA store can, and reports how many it re-wrapped.
func (g *Gateway) RewrapCAs(ctx context.Context, tenantID string) (int, error) {
	rw, ok := g.cfg.CAs.(interface {
		Rewrap(ctx context.Context, tenantID string) (int, error)
	})
	if !ok {
		return 0, nil
	}
	return rw.Rewrap(ctx, tenantID)
}

// CopyCA stores the interception CA kept under fromID again under toID: a fork's sandboxes keep
// trusting the CA their parent's trust store holds. A missing CA is ErrNotFound.
func (g *Gateway) CopyCA(ctx context.Context, fromID, toID, tenantID string) error {
	if g.cfg.CAs == nil {
		return fmt.Errorf("this gateway keeps no CAs: %w", errdefs.ErrFailedPrecondition)
	}
	ca, err := g.cfg.CAs.Load(ctx, fromID, tenantID)
	if err != nil {
		return err
	}
	return g.cfg.CAs.Save(ctx, toID, tenantID, ca.ForSandbox(toID))
}

func (g *Gateway) bySource(ip netip.Addr) *sandbox {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.bySrc[ip.Unmap()]
}

// lookupForSandbox answers a sandbox's DNS question: names its policy cannot allow do not exist.
func (g *Gateway) lookupForSandbox(ctx context.Context, client netip.Addr, name string, qtype dnsmessage.Type) ([]netip.Addr, error) {
	s := g.bySource(client)
	if s == nil {
		return nil, dnsserver.ErrRefusedName
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if !s.matcher.Load().AllowsName(name) {
		return nil, dnsserver.ErrRefusedName
	}
	if qtype != dnsmessage.TypeA {
		return nil, nil // IPv6 egress is disabled: allowed names have no AAAA (or other) answers
	}
	return g.resolve(ctx, name)
}

func (g *Gateway) onAnswer(client netip.Addr, name string, addrs []netip.Addr) {
	if s := g.bySource(client); s != nil {
		s.remember(strings.TrimSuffix(strings.ToLower(name), "."), addrs)
	}
}

// resolve returns the IPv4 addresses of name, static hosts first.
func (g *Gateway) resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	if a, ok := g.cfg.Hosts[name]; ok {
		return a, nil
	}
	if g.cfg.HostsOnly {
		return nil, fmt.Errorf("%s is not a configured host: %w", name, errdefs.ErrNotFound)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := g.cfg.Resolver.LookupNetIP(ctx, "ip4", name)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return nil, fmt.Errorf("resolve %s: %w", name, errdefs.ErrNotFound)
		}
		return nil, err
	}
	out := addrs[:0]
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			out = append(out, a)
		}
	}
	return out, nil
}

func (g *Gateway) serveProxy(ctx context.Context) {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := g.proxy.AcceptTCP()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			g.log.Error("proxy accept", "err", err)
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			g.handle(ctx, c)
		}()
	}
}

// reset refuses a connection with a TCP RST.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// kind is what the proxy found a connection to carry.
type kind int

const (
	kindTCP kind = iota
	kindTLS
	kindHTTP
)

// protocol names k in a Flow.
func (k kind) protocol() string {
	switch k {
	case kindTLS:
		return ProtoTLS
	case kindHTTP:
		return ProtoHTTP
	}
	return ProtoTCP
}

// httpHead returns the first bytes of the client's data, reading more only while they could still be
// the start of an HTTP request line ("METHOD "): a short message of another protocol is not held up
// waiting for bytes that will not come.
func httpHead(br *bufio.Reader) []byte {
	for n := 1; n <= maxMethodLen; n++ {
		head, err := br.Peek(n)
		if err != nil {
			return head
		}
		if !couldBeMethod(head) {
			return head
		}
		if head[n-1] == ' ' {
			return head
		}
	}
	head, _ := br.Peek(maxMethodLen)
	return head
}

// maxMethodLen is the length of the longest entry of httpMethods.
const maxMethodLen = len("OPTIONS ")

// couldBeMethod reports whether b is a prefix of one of httpMethods.
func couldBeMethod(b []byte) bool {
	for _, m := range httpMethods {
		if len(b) <= len(m) && m[:len(b)] == string(b) {
			return true
		}
	}
	return false
}

var httpMethods = []string{"GET ", "POST ", "PUT ", "DELETE ", "HEAD ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "}

// record completes f (its end time, bounded text) and hands it to the flow sink.
func (g *Gateway) record(f Flow) {
	if f.End.IsZero() {
		f.End = time.Now()
	}
	f.Reason = clip(f.Reason, maxFlowReason)
	if g.cfg.Flows != nil {
		g.cfg.Flows.Record(f)
	}
}

// setDecision copies d into f.
func setDecision(f *Flow, d policy.Decision) {
	f.Decision = DecisionDeny
	if d.Allow {
		f.Decision = DecisionAllow
	}
	f.Rule, f.Reason = d.Rule, d.Reason
}

// requestLine returns what a Flow keeps of a request: its method and its path without the query.
func requestLine(req *http.Request) (method, path string) {
	return clip(req.Method, maxFlowMethod), clip(req.URL.EscapedPath(), maxFlowPath)
}

func (g *Gateway) handle(ctx context.Context, c *net.TCPConn) {
	start := time.Now()
	defer c.Close()
	src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	s := g.bySource(src.Addr())
	if s == nil {
		reset(c)
		return
	}
	// Past its limits the sandbox's new connection is refused before any work for it (no sniff, no
	// resolve, no goroutine beyond this one), so a flood stays its own. The connection ends when the
	// gateway closes or the sandbox is unregistered.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	forget, why, report, ok := s.admit(s.matcher.Load().Limits(), start, cancel)
	defer forget()
	if !ok {
		if report {
			g.log.Info("egress connection limit", "sandbox", s.id, "reason", why)
			g.record(Flow{Start: start, SandboxID: s.id, TenantID: s.tenant, SrcPort: src.Port(), Protocol: ProtoTCP,
				Decision: DecisionDeny, Rule: "limit", Reason: why})
		}
		reset(c)
		return
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	f := Flow{Start: start, SandboxID: s.id, TenantID: s.tenant, SrcPort: src.Port(), Protocol: ProtoTCP}
	dst, err := originalDst(c)
	if err != nil {
		g.log.Warn("original destination", "sandbox", s.id, "err", err)
		f.Decision, f.Rule, f.Reason = DecisionDeny, "gateway", "the connection's original destination is unknown"
		g.record(f)
		reset(c)
		return
	}
	f.DstIP, f.DstPort = dst.Addr(), dst.Port()

	br := bufio.NewReaderSize(c, 32<<10) // room for the largest ClientHello sni.Peek reads
	k, name, req := g.sniff(c, br)
	f.Protocol = k.protocol()
	m := s.matcher.Load()
	if name == "" {
		name = s.nameOf(dst.Addr())
	}
	f.Host = clip(name, maxFlowHost)
	log := g.log.With("sandbox", s.id, "dst", dst.String(), "name", name)
	if k == kindHTTP && req == nil {
		// It looked like HTTP but its request head did not parse (or did not arrive in time).
		log.Info("egress denied", "reason", "malformed HTTP request")
		f.Decision, f.Rule, f.Reason = DecisionDeny, "malformed-http", "the HTTP request head could not be read"
		g.record(f)
		writeStatus(c, http.StatusBadRequest, "airlock gateway: malformed HTTP request")
		return
	}
	if req != nil {
		f.Method, f.Path = requestLine(req)
	}
	ip, d := g.decide(ctx, m, k, name, dst)
	f.DstIP = ip
	log = log.With("rule", d.Rule)
	if k == kindTLS && name != "" && (d.NeedsHTTP || d.Allow && m.HasCredentials(name)) {
		// Method and path rules or credentials for an HTTPS host: terminate TLS with the sandbox's CA,
		// check (and fill in) each request, and re-encrypt to the real upstream, verified.
		g.intercept(ctx, s, c, br, f, name, ip, dst.Port())
		return
	}
	if d.NeedsHTTP {
		if k == kindHTTP {
			d.Allow = true // decided request by request in proxyHTTP
		} else {
			// The policy depends on method and path, which this connection (TLS or raw TCP) does not
			// show: refuse rather than guess.
			d.Reason += "; this connection does not show its HTTP requests"
		}
	}
	if !d.Allow {
		log.Info("egress denied", "reason", d.Reason)
		setDecision(&f, d)
		g.record(f)
		if k == kindHTTP {
			writeForbidden(c, d)
			c.Close()
			return
		}
		reset(c)
		return
	}
	if k == kindHTTP {
		port := dst.Port()
		// Plain HTTP never gets credentials: they would cross the wire in the clear.
		g.proxyHTTP(ctx, s, c, br, req, f, name, ip, port, func(ctx context.Context) (halfConn, error) {
			return g.dial(ctx, ip, port)
		}, false)
		return
	}
	setDecision(&f, d)
	up, err := g.dial(ctx, ip, dst.Port())
	if err != nil {
		log.Info("egress dial failed", "ip", ip, "err", err)
		f.Error = err.Error()
		g.record(f)
		reset(c)
		return
	}
	defer up.Close()
	stopUp := context.AfterFunc(ctx, func() { up.Close() })
	defer stopUp()
	log.Debug("egress allowed", "ip", ip)
	f.BytesSent, f.BytesReceived = splice(c, br, up, nil)
	g.record(f)
}

// dial connects to the upstream the gateway decided on.
func (g *Gateway) dial(ctx context.Context, ip netip.Addr, port uint16) (*net.TCPConn, error) {
	c, err := (&net.Dialer{Timeout: g.cfg.DialTimeout}).DialContext(ctx, "tcp4", netip.AddrPortFrom(ip, port).String())
	if err != nil {
		return nil, fmt.Errorf("dial upstream: %w", err)
	}
	return c.(*net.TCPConn), nil
}

// sniff looks at the first bytes of a connection without consuming them (except an HTTP request head,
// which it returns parsed).
func (g *Gateway) sniff(c *net.TCPConn, br *bufio.Reader) (kind, string, *http.Request) {
	_ = c.SetReadDeadline(time.Now().Add(g.cfg.SniffTimeout))
	defer c.SetReadDeadline(time.Time{})
	first, err := br.Peek(1)
	if err != nil || len(first) == 0 {
		return kindTCP, "", nil
	}
	if first[0] == 0x16 { // TLS handshake record
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		name, err := sni.Peek(br)
		if err != nil {
			return kindTLS, "", nil
		}
		return kindTLS, strings.ToLower(name), nil
	}
	if !isHTTP(httpHead(br)) {
		return kindTCP, "", nil
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	host, req := readHTTPRequest(br)
	return kindHTTP, host, req
}

// isHTTP reports whether head starts with an HTTP request line's method and space.
func isHTTP(head []byte) bool {
	for _, m := range httpMethods {
		if len(head) >= len(m) && string(head[:len(m)]) == m {
			return true
		}
	}
	return false
}

// readHTTPRequest reads one request head from a sandbox and returns it with its host (lowercase, no
// port, no trailing dot); a request that does not parse is nil.
func readHTTPRequest(br *bufio.Reader) (string, *http.Request) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return "", nil
	}
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(host), "."), req
}

// decide picks the address to dial and the decision. A name is resolved by the gateway itself; the
// sandbox's own destination address is used only when it is one of the name's addresses (or when there
// is no name).
func (g *Gateway) decide(ctx context.Context, m *policy.Matcher, k kind, name string, dst netip.AddrPort) (netip.Addr, policy.Decision) {
	if ip, err := netip.ParseAddr(name); err == nil {
		name = "" // an address literal in SNI or Host: decide on the address
		if ip.Unmap() != dst.Addr() {
			return dst.Addr(), policy.Decision{Rule: "mismatch", Reason: "the address in the request differs from the one dialed"}
		}
	}
	if name == "" {
		return dst.Addr(), m.Connect(policy.Conn{IP: dst.Addr(), Port: dst.Port()})
	}
	if k == kindTCP {
		// Raw TCP names nothing itself: the name is only the DNS answer the sandbox got for the address.
		// A host rule allows TLS to that name (whose handshake names it) or HTTP (whose Host does), never
		// whatever else the sandbox sends to its address: only address rules and the default decide.
		d := m.Connect(policy.Conn{IP: dst.Addr(), Port: dst.Port()})
		if !d.Allow && m.Connect(policy.Conn{Host: name, IP: dst.Addr(), Port: dst.Port()}).Allow {
			d = policy.Decision{Rule: "not-tls-or-http", Reason: fmt.Sprintf("only a host rule allows %s, and this connection's first bytes are neither TLS nor HTTP: raw TCP needs a rule on its address (cidrs)", name)}
		}
		return dst.Addr(), d
	}
	if !m.AllowsName(name) {
		return dst.Addr(), m.Connect(policy.Conn{Host: name, IP: dst.Addr(), Port: dst.Port()})
	}
	addrs, err := g.resolve(ctx, name)
	if err != nil || len(addrs) == 0 {
		return dst.Addr(), policy.Decision{Rule: "resolve", Reason: fmt.Sprintf("cannot resolve %s", name)}
	}
	ip := addrs[0]
	for _, a := range addrs {
		if a == dst.Addr() {
			ip = a
			break
		}
	}
	return ip, m.Connect(policy.Conn{Host: name, IP: ip, Port: dst.Port()})
}

// proxyHTTP relays plain HTTP request by request, checking each against the policy and holding the
// connection to the host it was decided for. It dials the upstream for the first request the policy
// allows, and records a Flow for every request, allowed or refused; base is the connection's flow so far.
func (g *Gateway) proxyHTTP(ctx context.Context, s *sandbox, c halfConn, br *bufio.Reader, req *http.Request, base Flow, name string, ip netip.Addr, port uint16, dialUp func(context.Context) (halfConn, error), inject bool) {
	var up halfConn
	var upr *bufio.Reader
	defer func() {
		if up != nil {
			up.Close()
		}
	}()
	toUp := &countingWriter{}
	toClient := &countingWriter{w: c}
	start := base.Start
	for {
		f := base
		f.Start = start
		f.Method, f.Path = requestLine(req)
		host := req.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		m := s.matcher.Load()
		d := m.Request(policy.Conn{Host: name, IP: ip, Port: port}, req.Method, req.URL.EscapedPath())
		switch {
		case host != name:
			d = policy.Decision{Rule: "host-changed", Reason: fmt.Sprintf("request for %s on a connection to %s", clip(host, maxFlowHost), name)}
		case req.ProtoMajor != 1:
			// An HTTP/2 preface ("PRI * HTTP/2.0") or another version: its frames would pass unchecked.
			d = policy.Decision{Rule: "malformed-http", Reason: fmt.Sprintf("HTTP/%d.%d: only HTTP/1.x is relayed", req.ProtoMajor, req.ProtoMinor)}
		case strings.EqualFold(req.Method, "TRACE") || strings.EqualFold(req.Method, "TRACK"):
			// The upstream would echo the request back, headers (and any credential put in them) included.
			d = policy.Decision{Rule: "method-refused", Reason: req.Method + " echoes the request back; the gateway refuses it"}
		}
		setDecision(&f, d)
		if !d.Allow {
			g.log.Info("egress request denied", "sandbox", s.id, "host", name, "method", f.Method, "path", f.Path, "rule", d.Rule)
			g.record(f)
			writeForbidden(c, d)
			return
		}
		if up == nil {
			conn, err := dialUp(ctx)
			if err != nil {
				g.log.Info("egress dial failed", "sandbox", s.id, "host", name, "ip", ip, "err", err)
				f.Error = err.Error()
				g.record(f)
				writeStatus(c, http.StatusBadGateway, "airlock gateway: cannot reach "+name+": "+err.Error())
				return
			}
			up, upr, toUp.w = conn, bufio.NewReader(conn), conn
			stopUp := context.AfterFunc(ctx, func() { conn.Close() })
			defer stopUp()
		}
		sent0, recv0 := toUp.n, toClient.n
		// finish records the request's flow with the bytes relayed for it.
		finish := func(errMsg string, extraSent, extraRecv int64) {
			f.BytesSent = toUp.n - sent0 + extraSent
			f.BytesReceived = toClient.n - recv0 + extraRecv
			f.Error = errMsg
			g.record(f)
		}
		if inject {
			names, err := g.inject(ctx, s, m, name, req)
			f.Binding = names
			if err != nil {
				g.log.Warn("credential injection failed", "sandbox", s.id, "host", name, "binding", names, "err", err)
				f.Error = err.Error()
				g.record(f)
				writeStatus(c, http.StatusBadGateway, "airlock gateway: credential "+names+" unavailable")
				return
			}
		}
		req.Header.Del("Proxy-Connection")
		if err := req.Write(toUp); err != nil {
			finish("write request upstream: "+err.Error(), 0, 0)
			return
		}
		resp, err := http.ReadResponse(upr, req)
		if err != nil {
			finish("read response: "+err.Error(), 0, 0)
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			if !asksUpgrade(req) {
				// The stream after it would pass unchecked (and uninjected) for a request that never
				// asked to leave HTTP: refuse it.
				resp.Body.Close()
				f.Decision, f.Rule, f.Reason = DecisionDeny, "unasked-upgrade", "the upstream switched protocols for a request that did not ask to upgrade"
				finish("upstream answered 101 to a request without Upgrade", 0, 0)
				writeStatus(c, http.StatusBadGateway, "airlock gateway: the upstream switched protocols unasked")
				return
			}
			if err := resp.Write(toClient); err != nil {
				finish("", 0, 0)
				return
			}
			sent, recv := splice(c, br, up, upr)
			finish("", sent, recv)
			return
		}
		err = resp.Write(toClient)
		resp.Body.Close()
		finish("", 0, 0)
		if err != nil || resp.Close || req.Close {
			return
		}
		req, err = http.ReadRequest(br)
		if err != nil {
			return
		}
		start = time.Now()
	}
}

// inject fills in the credentials bound to req and reports their names (comma-separated). Values come
// from the secret store at the moment of the request and are never logged or kept.
func (g *Gateway) inject(ctx context.Context, s *sandbox, m *policy.Matcher, host string, req *http.Request) (string, error) {
	creds := m.Credentials(host, req.Method, req.URL.EscapedPath())
	if len(creds) == 0 {
		return "", nil
	}
	names := make([]string, 0, len(creds))
	for _, c := range creds {
		names = append(names, c.Name)
	}
	joined := strings.Join(names, ",")
	for _, c := range creds {
		var value []byte
		var err error
		switch {
		case c.Connection != "" && g.cfg.Token == nil:
			err = errors.New("this gateway has no OAuth connections")
		case c.Connection != "":
			value, err = g.cfg.Token(ctx, s.tenant, s.id, c.Connection)
		case g.cfg.Secret == nil:
			err = errors.New("this gateway has no secret store")
		default:
			value, err = g.cfg.Secret(ctx, s.tenant, s.id, c.Secret)
		}
		if err != nil {
			what := "secret " + c.Secret
			if c.Connection != "" {
				what = "connection " + c.Connection
			}
			return joined, fmt.Errorf("binding %s: %s: %w", c.Name, what, err)
		}
		v := string(value)
		clear(value)
		switch {
		case c.Header != "" && c.Placeholder == "":
			format := c.Format
			if format == "" {
				format = "{secret}"
			}
			req.Header.Set(c.Header, strings.ReplaceAll(format, "{secret}", v))
		case c.BasicAuthUser != "":
			req.SetBasicAuth(c.BasicAuthUser, v)
		case c.Placeholder != "":
			// Only in the header the binding names (Authorization unless it names another): never in
			// Origin, Cookie, Referer, other headers, the URL or the body, which the upstream may echo.
			h := c.Header
			if h == "" {
				h = "Authorization"
			}
			vals := req.Header.Values(h)
			for i, hv := range vals {
				vals[i] = strings.ReplaceAll(hv, c.Placeholder, v)
			}
		}
	}
	return joined, nil
}

// asksUpgrade reports whether req asks to switch protocols (an Upgrade header, and "upgrade" among
// the Connection header's tokens).
func asksUpgrade(req *http.Request) bool {
	if req.Header.Get("Upgrade") == "" {
		return false
	}
	for _, v := range req.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// halfConn is a connection whose sending half can be closed alone: *net.TCPConn and *tls.Conn.
type halfConn interface {
	net.Conn
	CloseWrite() error
}

// bufferedConn is a TCP connection whose first bytes were already read into a bufio.Reader.
type bufferedConn struct {
	*net.TCPConn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// intercept terminates the sandbox's TLS connection with a leaf of the sandbox's CA for name, relays
// HTTP request by request under the policy, and re-encrypts each to the upstream at ip, which must
// present a certificate for name that UpstreamRoots verify. A sandbox never gets a connection to an
// upstream that failed verification: it gets a 502 saying why.
func (g *Gateway) intercept(ctx context.Context, s *sandbox, c *net.TCPConn, br *bufio.Reader, f Flow, name string, ip netip.Addr, port uint16) {
	tc := tls.Server(&bufferedConn{TCPConn: c, r: br}, s.ca.ServerConfig())
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.HandshakeContext(ctx); err != nil {
		f.Decision, f.Rule, f.Reason = DecisionDeny, "tls-handshake", "the sandbox's TLS handshake with the gateway failed"
		f.Error = err.Error()
		g.record(f)
		return
	}
	tbr := bufio.NewReader(tc)
	_ = tc.SetDeadline(time.Now().Add(30 * time.Second))
	req, err := http.ReadRequest(tbr)
	_ = tc.SetDeadline(time.Time{})
	if err != nil {
		f.Decision, f.Rule, f.Reason = DecisionDeny, "malformed-http", "no HTTP request on the intercepted connection"
		g.record(f)
		return
	}
	dialUp := func(ctx context.Context) (halfConn, error) {
		raw, err := g.dial(ctx, ip, port)
		if err != nil {
			return nil, err
		}
		uc := tls.Client(raw, &tls.Config{ServerName: name, RootCAs: g.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
		hctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
		defer cancel()
		if err := uc.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, fmt.Errorf("upstream TLS verification failed: %w", err)
		}
		return uc, nil
	}
	g.proxyHTTP(ctx, s, tc, tbr, req, f, name, ip, port, dialUp, true)
	_ = tc.Close()
}

// countingWriter counts the bytes written through it. It is not safe for concurrent use.
type countingWriter struct {
	w io.Writer
	n int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}

func writeForbidden(c net.Conn, d policy.Decision) {
	writeStatus(c, http.StatusForbidden, fmt.Sprintf("airlock gateway: denied by %s: %s", d.Rule, d.Reason))
}

func writeStatus(c net.Conn, status int, msg string) {
	body := msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Airlock-Gateway: denied\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// splice copies both ways until both directions are done, and reports the bytes it relayed each way.
// Bytes the proxy already buffered go first: the client's from br, the upstream's from upr (may be nil).
func splice(c halfConn, br *bufio.Reader, up halfConn, upr *bufio.Reader) (sent, received int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c.CloseWrite()
		if upr != nil {
			if n := upr.Buffered(); n > 0 {
				b, _ := upr.Peek(n)
				w, err := c.Write(b)
				received += int64(w)
				if err != nil {
					return
				}
				_, _ = upr.Discard(n)
			}
		}
		n, _ := io.Copy(c, up)
		received += n
	}()
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		w, err := up.Write(b)
		sent += int64(w)
		if err != nil {
			up.Close()
			wg.Wait()
			return sent, received
		}
		_, _ = br.Discard(n)
	}
	n, _ := io.Copy(up, c)
	sent += n
	_ = up.CloseWrite()
	wg.Wait()
	return sent, received
}
