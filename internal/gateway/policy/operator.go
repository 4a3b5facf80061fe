package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Guards is the operator's part of the guard, shared by every policy of a node or control plane:
//
//   - Host, the node's own addresses, guarded under GuardExtra. They change while the node runs (DHCP,
//     interfaces that come and go): SetHost replaces them, and every Matcher compiled with these
//     Guards uses the new ones at its next decision.
//   - Open, the guarded ranges the operator lets tenants' rules open (airlock up --egress-allow-private).
//     A guarded address is allowed only by an allow rule whose CIDR lifts its guard (see Matcher) and
//     only if an Open range lifts that guard too; every other guarded address stays refused whatever a
//     tenant's rules say. The node's own addresses, loopback and the metadata addresses are guarded by
//     ranges as small as a single address, so an Open range opens them only by naming them exactly.
//
// The zero value and nil guard the built-in ranges and open none. Safe for concurrent use.
type Guards struct {
	open []netip.Prefix
	host atomic.Pointer[[]netip.Prefix]
}

// NewGuards returns Guards that let tenants open the guarded ranges open, and guard host as the
// node's own addresses. Each prefix must be valid; they are masked.
func NewGuards(open, host []netip.Prefix) (*Guards, error) {
	g := &Guards{}
	for _, p := range open {
		if !p.IsValid() || p.Addr().Zone() != "" {
			return nil, fmt.Errorf("policy: open guarded range %v: invalid prefix: %w", p, errdefs.ErrInvalidArgument)
		}
		g.open = append(g.open, normalizePrefix(p))
	}
	if err := g.SetHost(host); err != nil {
		return nil, err
	}
	return g, nil
}

// SetHost replaces the node's own addresses.
func (g *Guards) SetHost(host []netip.Prefix) error {
	out := make([]netip.Prefix, 0, len(host))
	for _, p := range host {
		if !p.IsValid() || p.Addr().Zone() != "" {
			return fmt.Errorf("policy: host address %v: invalid prefix: %w", p, errdefs.ErrInvalidArgument)
		}
		out = append(out, normalizePrefix(p))
	}
	g.host.Store(&out)
	return nil
}

// Host reports the node's own addresses (nil for nil Guards).
func (g *Guards) Host() []netip.Prefix {
	if g == nil {
		return nil
	}
	if p := g.host.Load(); p != nil {
		return *p
	}
	return nil
}

// Open reports the guarded ranges tenants may open (nil for nil Guards).
func (g *Guards) Open() []netip.Prefix {
	if g == nil {
		return nil
	}
	return slices.Clone(g.open)
}

// opens reports whether the operator opened ip, guarded by h, to tenants.
func (g *Guards) opens(ip netip.Addr, h guardHit) bool {
	if g == nil {
		return false
	}
	for _, o := range g.open {
		if lifts(o, ip, h) {
			return true
		}
	}
	return false
}

// Check refuses a tenant's policy whose allow rules name in their CIDRs a guarded range the operator
// has not opened: a CIDR that lies wholly inside a guarded range (so that it would lift that guard)
// must lie wholly inside an Open range that lifts it too. A CIDR that only overlaps guarded ranges
// ("0.0.0.0/0") lifts nothing and passes. The error wraps errdefs.ErrInvalidArgument and names the
// rule, the CIDR and the guarded range. p must be valid (Policy.Validate).
func (g *Guards) Check(p Policy) error {
	for i, r := range p.Rules {
		if r.Action != ActionAllow {
			continue
		}
		for _, s := range r.CIDRs {
			c, err := netip.ParsePrefix(s)
			if err != nil {
				continue // Validate reports it
			}
			c = normalizePrefix(c)
			ip := c.Addr()
			h := guardFor(ip, g.Host())
			if !h.ok || c.Bits() < h.prefix.Bits() {
				continue
			}
			if g.opensPrefix(c, h) {
				continue
			}
			return fmt.Errorf("policy: rule %q: cidr %s is in the guarded range %s (%s), which only the operator can open to sandboxes (--egress-allow-private): %w",
				ruleName(r, i), s, h.prefix, h.name, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// opensPrefix reports whether an Open range holds all of c and lifts guard h.
func (g *Guards) opensPrefix(c netip.Prefix, h guardHit) bool {
	if g == nil {
		return false
	}
	for _, o := range g.open {
		if o.Bits() <= c.Bits() && o.Contains(c.Addr()) && lifts(o, c.Addr(), h) {
			return true
		}
	}
	return false
}

// Refuse reports why ip may not be reached on a tenant's behalf by the platform itself (an OAuth
// provider's endpoint that the control plane calls): an error wrapping errdefs.ErrInvalidArgument that
// names the guarded range, or nil for an address no guard holds or one the operator opened.
func (g *Guards) Refuse(ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("policy: no valid address: %w", errdefs.ErrInvalidArgument)
	}
	ip = ip.Unmap().WithZone("")
	h := guardFor(ip, g.Host())
	if !h.ok || g.opens(ip, h) {
		return nil
	}
	return fmt.Errorf("%s is in the guarded range %s (%s), which the operator has not opened (--egress-allow-private): %w",
		ip, h.prefix, h.name, errdefs.ErrInvalidArgument)
}
