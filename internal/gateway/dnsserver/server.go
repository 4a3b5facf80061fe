// Package dnsserver is the DNS server the gateway runs for all sandboxes. nftables on the host
// redirects each sandbox's DNS traffic (UDP and TCP port 53) to it.
//
// It is not a recursive resolver: it never forwards a query anywhere. It answers one question per
// message from its Lookup hook, which decides per client sandbox which names resolve and to what, and
// it tells the proxy through OnAnswer which addresses a sandbox was handed for which name. Per-client
// token buckets and concurrency limits keep a flood from one sandbox from starving the others.
package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// ErrRefusedName is what Lookup returns (wrapped or not) for a name the client's policy does not
// allow: the client gets NXDOMAIN, as if the name did not exist. It wraps errdefs.ErrPermissionDenied.
var ErrRefusedName = fmt.Errorf("dnsserver: name refused by policy: %w", errdefs.ErrPermissionDenied)

// ErrServerClosed is returned by the Serve methods after Shutdown, or when called after it.
var ErrServerClosed = errors.New("dnsserver: server closed")

// Defaults for the zero values of Server's fields.
const (
	DefaultTTL                  = 30 * time.Second
	DefaultQueriesPerSecond     = 100
	DefaultBurst                = 200
	DefaultMaxInFlightPerClient = 32
	DefaultMaxInFlight          = 1024
	DefaultMaxTCPConnsPerClient = 8
	DefaultMaxTCPConns          = 512
	DefaultTCPIdleTimeout       = 10 * time.Second
	DefaultLookupTimeout        = 5 * time.Second
	DefaultMaxAnswers           = 32
)

const (
	ednsUDPSize   = 1232 // the payload size we advertise and honour at most (DNS flag day 2020)
	minUDPSize    = 512
	maxMsgSize    = 65535 // TCP messages have a 2-byte length
	rcodeBADVERS  = dnsmessage.RCode(16)
	maxClients    = 1 << 16 // tracked client states; beyond it new clients are dropped
	sweepAtLeast  = 1024    // sweep idle client states once this many are tracked
	udpReadBuffer = 65535
)

// Server answers DNS queries from sandboxes over UDP and TCP. Configure it by setting fields before
// the first Serve call and do not change them after; the zero value serves, refusing every name. A
// Server must not be copied after first use. Its methods are safe for concurrent use; one Server may
// serve several sockets at once and keeps one set of per-client limits across them.
//
// Answers: one question per message, class IN only. A and AAAA questions are answered with the
// addresses of that family Lookup returns (at most MaxAnswers, TTL TTL). IPv6 egress is disabled in
// sandboxes, so the gateway's Lookup normally returns no IPv6 address and AAAA gets NOERROR with no
// answer, which makes clients use IPv4 at once. Other types (MX, TXT, ANY, …) get NOERROR with no
// answer when Lookup allows the name, and its addresses are ignored. Zone transfers and non-IN classes
// are REFUSED, opcodes other than QUERY get NOTIMP, malformed questions FORMERR, messages whose header
// cannot be read or that are responses get nothing. EDNS(0) is understood: a response to a query with
// an OPT record carries one, and a UDP response fits min(requested size, 1232) bytes (512 without
// EDNS); a larger one is sent empty with the TC bit so the client retries over TCP.
type Server struct {
	// Lookup resolves name of type qtype for the sandbox at client. name is lowercase, without the
	// trailing dot, and made of ASCII letters, digits, "-", "_" and "." only (other names get NXDOMAIN
	// without a call; the root gets REFUSED). It returns ErrRefusedName for a name the sandbox's policy does not allow and an error
	// wrapping errdefs.ErrNotFound for a name that does not exist, both answered NXDOMAIN; any other
	// error is answered SERVFAIL. Its ctx ends after LookupTimeout or when the server stops. It is
	// called concurrently. Nil refuses every name.
	Lookup func(ctx context.Context, client netip.Addr, name string, qtype dnsmessage.Type) ([]netip.Addr, error)
	// OnAnswer, if set, is called with the addresses of every non-empty A or AAAA answer before the
	// answer is sent, so the proxy knows which name a sandbox resolved to which address by the time
	// the sandbox connects. name is as passed to Lookup. It must not block for long; it is called
	// concurrently and must not keep addrs.
	OnAnswer func(client netip.Addr, name string, addrs []netip.Addr)
	// Logger receives debug logs about refused, dropped and failed queries. Nil discards them.
	Logger *slog.Logger

	// TTL of the answers, in whole seconds. Zero means DefaultTTL.
	TTL time.Duration
	// QueriesPerSecond is the steady rate of queries each client may send, over UDP and TCP together.
	// Zero means DefaultQueriesPerSecond; negative means no limit. UDP queries over the rate are
	// dropped; TCP ones are answered REFUSED.
	QueriesPerSecond float64
	// Burst is how many queries a client may send at once above the rate. Zero means DefaultBurst.
	Burst int
	// MaxInFlightPerClient caps the UDP queries of one client being looked up at once; further ones
	// are dropped. Zero means DefaultMaxInFlightPerClient.
	MaxInFlightPerClient int
	// MaxInFlight caps the UDP queries of all clients being looked up at once. Zero means
	// DefaultMaxInFlight.
	MaxInFlight int
	// MaxTCPConnsPerClient caps the open TCP connections of one client; further ones are closed at
	// once. Zero means DefaultMaxTCPConnsPerClient.
	MaxTCPConnsPerClient int
	// MaxTCPConns caps the open TCP connections of all clients. Zero means DefaultMaxTCPConns.
	MaxTCPConns int
	// TCPIdleTimeout closes a TCP connection on which no complete query arrives, or no answer can be
	// written, within it. Zero means DefaultTCPIdleTimeout.
	TCPIdleTimeout time.Duration
	// LookupTimeout bounds each Lookup call. Zero means DefaultLookupTimeout.
	LookupTimeout time.Duration
	// MaxAnswers caps the addresses in one answer. Zero means DefaultMaxAnswers.
	MaxAnswers int

	now func() time.Time // for tests; nil means time.Now

	mu       sync.Mutex
	clients  map[netip.Addr]*clientState // guarded by mu
	inFlight int                         // UDP queries being handled; guarded by mu
	tcpConns int                         // open TCP connections; guarded by mu
	serving  map[*serveState]struct{}    // running Serve calls; guarded by mu
	closed   bool                        // Shutdown was called; guarded by mu
}

// clientState holds one client's limits.
type clientState struct {
	tokens   float64
	last     time.Time
	inFlight int
	tcpConns int
}

// serveState lets Shutdown stop one Serve call and wait for it.
type serveState struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// ServeUDP answers the queries arriving on pc until ctx ends or Shutdown is called, then closes pc,
// waits for every query it accepted to be answered or abandoned, and returns nil (ErrServerClosed
// after Shutdown). It owns pc: it closes it when it returns for any reason. Another error is the read
// error that stopped it.
func (s *Server) ServeUDP(ctx context.Context, pc net.PacketConn) error {
	ctx, st, err := s.startServe(ctx)
	if err != nil {
		pc.Close()
		return err
	}
	defer s.endServe(st)
	stop := context.AfterFunc(ctx, func() { pc.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer st.cancel() // stop the lookups still running before waiting for them
	defer pc.Close()

	buf := make([]byte, udpReadBuffer)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return s.stopErr()
			}
			if isTemporary(err) {
				continue
			}
			return fmt.Errorf("dnsserver: read udp: %w", err)
		}
		client, ok := addrOf(addr)
		if !ok {
			continue
		}
		if !s.admitUDP(client) {
			s.logger().Debug("dns query dropped: client over its limits", "client", client)
			continue
		}
		msg := append([]byte(nil), buf[:n]...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.releaseUDP(client)
			if resp := s.handle(ctx, client, msg, true); resp != nil {
				if _, err := pc.WriteTo(resp, addr); err != nil && ctx.Err() == nil {
					s.logger().Debug("dns answer not sent", "client", client, "err", err)
				}
			}
		}()
	}
}

// ServeTCP answers the queries arriving on connections accepted from l until ctx ends or Shutdown is
// called, then closes l and every connection, waits for their handlers, and returns nil
// (ErrServerClosed after Shutdown). It owns l: it closes it when it returns for any reason. Another
// error is the accept error that stopped it.
//
// Each connection carries queries with a 2-byte length prefix (RFC 1035 §4.2.2, RFC 7766), answered
// in order; it is closed after TCPIdleTimeout without a complete query, on a malformed frame, or when
// the client has too many connections open.
func (s *Server) ServeTCP(ctx context.Context, l net.Listener) error {
	ctx, st, err := s.startServe(ctx)
	if err != nil {
		l.Close()
		return err
	}
	defer s.endServe(st)
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer st.cancel() // stop the lookups still running before waiting for them
	defer l.Close()

	backoff := 5 * time.Millisecond
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return s.stopErr()
			}
			if isTemporary(err) {
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			return fmt.Errorf("dnsserver: accept tcp: %w", err)
		}
		backoff = 5 * time.Millisecond
		client, ok := addrOf(conn.RemoteAddr())
		if !ok || !s.admitTCPConn(client) {
			s.logger().Debug("dns tcp connection refused: client over its limits", "client", client)
			conn.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.releaseTCPConn(client)
			s.serveConn(ctx, client, conn)
		}()
	}
}

// Shutdown stops every running Serve call and waits for them to return, or for ctx to end (then it
// returns ctx's error). Serve calls made after it return ErrServerClosed at once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	states := make([]*serveState, 0, len(s.serving))
	for st := range s.serving {
		states = append(states, st)
	}
	s.mu.Unlock()
	for _, st := range states {
		st.cancel()
	}
	for _, st := range states {
		select {
		case <-st.done:
		case <-ctx.Done():
			return fmt.Errorf("dnsserver: shutdown: %w", ctx.Err())
		}
	}
	return nil
}

func (s *Server) startServe(ctx context.Context) (context.Context, *serveState, error) {
	ctx, cancel := context.WithCancel(ctx)
	st := &serveState{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cancel()
		return nil, nil, ErrServerClosed
	}
	if s.serving == nil {
		s.serving = make(map[*serveState]struct{})
	}
	s.serving[st] = struct{}{}
	return ctx, st, nil
}

// endServe runs last in a Serve call, after its goroutines are done.
func (s *Server) endServe(st *serveState) {
	s.mu.Lock()
	delete(s.serving, st)
	s.mu.Unlock()
	st.cancel()
	close(st.done)
}

// stopErr is what a Serve call stopped by its context returns.
func (s *Server) stopErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrServerClosed
	}
	return nil
}

// serveConn answers the queries on one TCP connection in order, and closes it.
func (s *Server) serveConn(ctx context.Context, client netip.Addr, conn net.Conn) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	idle := durationOr(s.TCPIdleTimeout, DefaultTCPIdleTimeout)
	var lenBuf [2]byte
	for {
		conn.SetReadDeadline(time.Now().Add(idle))
		if _, err := readFull(conn, lenBuf[:]); err != nil {
			return
		}
		n := int(lenBuf[0])<<8 | int(lenBuf[1])
		if n < headerLen {
			s.logger().Debug("dns tcp message too short", "client", client, "len", n)
			return
		}
		msg := make([]byte, n) // at most 64 KiB, the most a length prefix can say
		if _, err := readFull(conn, msg); err != nil {
			return
		}
		var resp []byte
		if s.takeToken(client) {
			resp = s.handle(ctx, client, msg, false)
		} else {
			s.logger().Debug("dns tcp query refused: client over its rate", "client", client)
			resp = refusedFor(msg)
		}
		if resp == nil {
			continue // a response, or an unreadable header: nothing to say
		}
		out := make([]byte, 2+len(resp))
		out[0], out[1] = byte(len(resp)>>8), byte(len(resp))
		copy(out[2:], resp)
		conn.SetWriteDeadline(time.Now().Add(idle))
		if _, err := conn.Write(out); err != nil {
			return
		}
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return discard
}

var discard = slog.New(slog.DiscardHandler)

func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func intOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// addrOf returns the unmapped IP of a socket address.
func addrOf(a net.Addr) (netip.Addr, bool) {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.UDPAddr:
		ap = a.AddrPort()
	case *net.TCPAddr:
		ap = a.AddrPort()
	default:
		if a == nil {
			return netip.Addr{}, false
		}
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.Addr{}, false
		}
	}
	ip := ap.Addr().Unmap().WithZone("")
	return ip, ip.IsValid()
}

// isTemporary reports whether a read or accept error is worth retrying: a timeout, or running out of
// file descriptors or buffers.
func isTemporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED)
}
