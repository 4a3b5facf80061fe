package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/gateway/netfilter"
)

// portDialTimeout bounds a connection into a sandbox: the sandbox is on this host, so a connection that
// takes longer is one the sandbox does not answer.
const portDialTimeout = 5 * time.Second

// DialPort opens a TCP connection from the node to port on a running sandbox's own address. Traffic
// enters the sandbox's network namespace through its veth; the socket carries netfilter.IngressMark,
// without which the node's rules refuse every connection into a sandbox. Nothing listening on the port
// is an error wrapping errdefs.ErrPortClosed.
func (n *Local) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: %w", port, errdefs.ErrInvalidArgument)
	}
	s, err := n.lookup(id)
	if err != nil {
		return nil, err
	}
	if n.cfg.Gateway == nil {
		return nil, fmt.Errorf("sandbox %s has no network interface on node %s: %w", id, n.cfg.ID, errdefs.ErrFailedPrecondition)
	}
	addr := s.addr.Load()
	if addr == nil {
		a, err := hostnet.Lookup(n.ifName(id))
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", id, err)
		}
		addr = &a.Sandbox
		s.addr.Store(addr)
	}
	d := net.Dialer{Timeout: portDialTimeout, Control: markIngress}
	c, err := d.DialContext(ctx, "tcp4", netip.AddrPortFrom(*addr, uint16(port)).String())
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return nil, fmt.Errorf("sandbox %s: nothing listens on port %d: %w", id, port, errdefs.ErrPortClosed)
	case err != nil && ctx.Err() == nil:
		return nil, fmt.Errorf("sandbox %s: connect to port %d: %v: %w", id, port, err, errdefs.ErrUnavailable)
	case err != nil:
		return nil, fmt.Errorf("sandbox %s: connect to port %d: %w", id, port, err)
	}
	tc := &ingressConn{Conn: c, set: &s.ingress}
	if !s.ingress.add(tc) {
		c.Close()
		return nil, fmt.Errorf("sandbox %s is going away: %w", id, errdefs.ErrFailedPrecondition)
	}
	return tc, nil
}

// ingressConns are the connections DialPort made into one sandbox, closed all at once when the node
// lets the sandbox go: a connection to an address that no longer exists would otherwise hang.
type ingressConns struct {
	mu     sync.Mutex
	m      map[*ingressConn]struct{} // guarded by mu
	closed bool                      // guarded by mu
}

func (s *ingressConns) add(c *ingressConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = map[*ingressConn]struct{}{}
	}
	s.m[c] = struct{}{}
	return true
}

func (s *ingressConns) remove(c *ingressConn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// closeAll closes every connection and refuses new ones.
func (s *ingressConns) closeAll() {
	s.mu.Lock()
	s.closed = true
	m := s.m
	s.m = nil
	s.mu.Unlock()
	for c := range m {
		c.Conn.Close()
	}
}

// ingressConn is a connection DialPort made; closing it forgets it.
type ingressConn struct {
	net.Conn
	set *ingressConns
}

func (c *ingressConn) Close() error {
	c.set.remove(c)
	return c.Conn.Close()
}

// markIngress sets the ingress mark on a socket before it connects.
var markIngress = netfilter.MarkSocket(netfilter.IngressMark)
