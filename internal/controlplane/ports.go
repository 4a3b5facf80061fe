package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// PortTarget is where a request for a port of a sandbox or session goes.
type PortTarget struct {
	TenantID  string
	SandboxID string
	SessionID string // "" for a sandbox
	// Resumed is set when resolving the target resumed a paused session.
	Resumed bool
	// Sandbox is the sandbox's record as ResolvePort read it.
	Sandbox store.Sandbox
}

// PublicPort reports the tenant of the sandbox or session id (by its prefix) when port is one of its
// public ports and the tenant is enabled. Anything else, a missing object included, is
// ErrUnauthenticated: a caller without a credential learns nothing about what exists.
func (s *sandboxes) PublicPort(ctx context.Context, id string, port int) (string, error) {
	refused := fmt.Errorf("port %d of %s is private: send an API key or an access token with scope ports: %w", port, id, errdefs.ErrUnauthenticated)
	var tenantID string
	switch {
	case strings.HasPrefix(id, "sb_"):
		sb, err := s.store.GetSandboxAnyTenant(ctx, id)
		if err != nil {
			return "", refused
		}
		p, err := NetworkPolicy(sb)
		if err != nil || !p.IsPublic(port) {
			return "", refused
		}
		tenantID = sb.TenantID
	case strings.HasPrefix(id, "se_"):
		se, err := s.store.GetSessionAnyTenant(ctx, id)
		if err != nil {
			return "", refused
		}
		p, err := SessionNetworkPolicy(se)
		if err != nil || !p.IsPublic(port) {
			return "", refused
		}
		tenantID = se.TenantID
	default:
		return "", refused
	}
	if _, err := s.accounts.enabledTenant(ctx, tenantID); err != nil {
		return "", refused
	}
	return tenantID, nil
}

// ResolvePort finds the running sandbox behind the tenant's sandbox or session id (by its prefix). A
// paused session that resumes automatically is resumed first, so the request is served, not dropped.
func (s *sandboxes) ResolvePort(ctx context.Context, tenantID, id string) (PortTarget, error) {
	t := PortTarget{TenantID: tenantID, SandboxID: id}
	if strings.HasPrefix(id, "se_") {
		sbID, resumed, err := s.sessions.sessionSandbox(ctx, tenantID, id, false)
		if err != nil {
			return t, err
		}
		t.SandboxID, t.SessionID, t.Resumed = sbID, id, resumed
	}
	sb, err := s.GetSandbox(ctx, tenantID, t.SandboxID)
	if err != nil {
		return t, err
	}
	if sb.State != store.StateRunning {
		return t, fmt.Errorf("sandbox %s is %s, not running: %w", sb.ID, sb.State, errdefs.ErrFailedPrecondition)
	}
	t.Sandbox = sb
	return t, nil
}

// resumeSettle is how long DialPort retries a refused connection into a session that was just
// resumed: the restored sandbox's network may take a moment to carry traffic.
const resumeSettle = 2 * time.Second

// DialPort opens a TCP connection to port of t's sandbox (see ResolvePort), from its node.
func (s *sandboxes) DialPort(ctx context.Context, t PortTarget, port int) (net.Conn, error) {
	n, err := s.placer.sandboxNode(ctx, t.Sandbox)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(resumeSettle)
	for {
		c, err := n.DialPort(ctx, t.SandboxID, port)
		if err == nil || !t.Resumed || !errors.Is(err, errdefs.ErrPortClosed) || time.Now().After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ListeningPort is a TCP port a process in a sandbox listens on.
type ListeningPort struct {
	Port    int
	Address netip.Addr // the address it is bound to: 0.0.0.0 or :: for all
	// Reachable is false for a port bound to loopback only: the ingress reaches the sandbox through its
	// network interface, so such a server must listen on 0.0.0.0 (or ::) to be reached.
	Reachable bool
}

// ListeningPorts reports the TCP ports processes in t's sandbox listen on, read from the sandbox's
// /proc/net/tcp and /proc/net/tcp6.
func (s *sandboxes) ListeningPorts(ctx context.Context, t PortTarget) ([]ListeningPort, error) {
	n, err := s.placer.sandboxNode(ctx, t.Sandbox)
	if err != nil {
		return nil, err
	}
	var out []ListeningPort
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		// The file comes from the sandbox: read at most maxProcNet of it.
		buf := &cappedBuffer{max: maxProcNet}
		err := retryNotStarted(ctx, func(ctx context.Context) (*link.Client, error) { return n.Link(ctx, t.SandboxID) },
			func(cl *link.Client) error { return cl.ReadFile(ctx, f, buf) })
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				continue
			}
			return nil, fmt.Errorf("sandbox %s: read %s: %w", t.SandboxID, f, err)
		}
		out = append(out, parseProcNetTCP(buf.b.Bytes())...)
	}
	slices.SortFunc(out, func(a, b ListeningPort) int {
		if a.Port != b.Port {
			return a.Port - b.Port
		}
		return a.Address.Compare(b.Address)
	})
	return slices.Compact(out), nil
}

// InterpreterKey reports the interpreter key of t's sandbox (proto.IdentityFile), which its code
// interpreter demands of every request; "" for a sandbox without one (its daemon predates identities).
// The file is the sandbox's: it is read bounded, and what it says binds that sandbox only.
func (s *sandboxes) InterpreterKey(ctx context.Context, t PortTarget) (string, error) {
	n, err := s.placer.sandboxNode(ctx, t.Sandbox)
	if err != nil {
		return "", err
	}
	buf := &cappedBuffer{max: proto.MaxIdentityFile}
	err = retryNotStarted(ctx, func(ctx context.Context) (*link.Client, error) { return n.Link(ctx, t.SandboxID) },
		func(cl *link.Client) error { return cl.ReadFile(ctx, proto.IdentityFile, buf) })
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("sandbox %s: read its interpreter key: %w", t.SandboxID, err)
	}
	var id proto.IdentityFileContents
	if err := json.Unmarshal(buf.b.Bytes(), &id); err != nil {
		return "", fmt.Errorf("sandbox %s: its identity file does not decode: %w", t.SandboxID, errdefs.ErrFailedPrecondition)
	}
	return id.InterpreterKey, nil
}

// maxProcNet bounds what ListeningPorts reads of a sandbox's /proc/net/tcp*: about 6000 sockets.
const maxProcNet = 1 << 20

// cappedBuffer keeps the first max bytes written to it and fails the write past them.
type cappedBuffer struct {
	b   bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.b.Len()+len(p) > c.max {
		return 0, fmt.Errorf("more than %d bytes: %w", c.max, errdefs.ErrTooLarge)
	}
	return c.b.Write(p)
}

// parseProcNetTCP reads the listening sockets (state 0A) of a /proc/net/tcp or tcp6 file. Lines it
// cannot read are skipped: the file comes from the sandbox.
func parseProcNetTCP(b []byte) []ListeningPort {
	var out []ListeningPort
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		host, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil || port == 0 {
			continue
		}
		raw, err := hex.DecodeString(host)
		if err != nil || (len(raw) != 4 && len(raw) != 16) {
			continue
		}
		// The kernel prints each 32-bit word of the address in host byte order (little-endian here).
		for i := 0; i+4 <= len(raw); i += 4 {
			raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
		}
		addr, _ := netip.AddrFromSlice(raw)
		addr = addr.Unmap()
		out = append(out, ListeningPort{Port: int(port), Address: addr, Reachable: !addr.IsLoopback()})
	}
	return out
}
