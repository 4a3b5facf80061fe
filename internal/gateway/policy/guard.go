package policy

import "net/netip"

// Guard names, as they appear in Decision.Rule.
const (
	GuardInvalid     = "guard:invalid"     // the Conn has no valid IP
	GuardUnspecified = "guard:unspecified" // 0.0.0.0/8, ::/128
	GuardLoopback    = "guard:loopback"    // 127.0.0.0/8, ::1/128
	GuardPrivate     = "guard:private"     // RFC 1918, RFC 4193 ULA fc00::/7
	GuardLinkLocal   = "guard:link-local"  // 169.254.0.0/16, fe80::/10
	GuardMetadata    = "guard:metadata"    // 169.254.169.254/32, fd00:ec2::254/128
	GuardCGNAT       = "guard:cgnat"       // 100.64.0.0/10
	GuardMulticast   = "guard:multicast"   // 224.0.0.0/4, ff00::/8
	GuardBroadcast   = "guard:broadcast"   // 255.255.255.255/32
	GuardReserved    = "guard:reserved"    // see builtinGuards
	GuardExtra       = "guard:extra"       // CompileOptions.GuardExtra
)

type guardRange struct {
	prefix netip.Prefix
	name   string
}

// builtinGuards are the ranges refused before any rule. Ranges nest; an address is guarded under the
// most specific range that holds it (169.254.169.254 is "metadata", not "link-local").
var builtinGuards = []guardRange{
	{netip.MustParsePrefix("0.0.0.0/8"), GuardUnspecified}, // "this network"; 0.0.0.0 reaches the host
	{netip.MustParsePrefix("::/128"), GuardUnspecified},
	{netip.MustParsePrefix("127.0.0.0/8"), GuardLoopback},
	{netip.MustParsePrefix("::1/128"), GuardLoopback},
	{netip.MustParsePrefix("10.0.0.0/8"), GuardPrivate},
	{netip.MustParsePrefix("172.16.0.0/12"), GuardPrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), GuardPrivate},
	{netip.MustParsePrefix("fc00::/7"), GuardPrivate},
	{netip.MustParsePrefix("169.254.0.0/16"), GuardLinkLocal},
	{netip.MustParsePrefix("fe80::/10"), GuardLinkLocal},
	{netip.MustParsePrefix("169.254.169.254/32"), GuardMetadata}, // AWS, GCP, Azure, …
	{netip.MustParsePrefix("fd00:ec2::254/128"), GuardMetadata},  // AWS over IPv6
	{netip.MustParsePrefix("100.64.0.0/10"), GuardCGNAT},
	{netip.MustParsePrefix("224.0.0.0/4"), GuardMulticast},
	{netip.MustParsePrefix("ff00::/8"), GuardMulticast},
	{netip.MustParsePrefix("255.255.255.255/32"), GuardBroadcast},
	{netip.MustParsePrefix("240.0.0.0/4"), GuardReserved},    // future use
	{netip.MustParsePrefix("192.0.0.0/24"), GuardReserved},   // IETF protocol assignments
	{netip.MustParsePrefix("198.18.0.0/15"), GuardReserved},  // benchmarking; often internal
	{netip.MustParsePrefix("fec0::/10"), GuardReserved},      // deprecated site-local
	{netip.MustParsePrefix("100::/64"), GuardReserved},       // discard-only
	{netip.MustParsePrefix("2001::/32"), GuardReserved},      // Teredo: embeds obfuscated IPv4
	{netip.MustParsePrefix("64:ff9b:1::/48"), GuardReserved}, // local-use NAT64
}

// v4Embeddings are IPv6 ranges that carry an IPv4 address at a bit offset and may reach it through a
// translator. An address in one is guarded as the embedded IPv4 address would be, under the range
// that embedding maps the IPv4 guard range to (64:ff9b::a00:0/104 for 10.0.0.0/8 under NAT64).
var v4Embeddings = []struct {
	prefix netip.Prefix
	offset int // bit offset of the IPv4 address
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 96},    // NAT64 well-known prefix (RFC 6052)
	{netip.MustParsePrefix("::/96"), 96},           // IPv4-compatible (deprecated)
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 96}, // IPv4-translated (SIIT)
	{netip.MustParsePrefix("2002::/16"), 16},       // 6to4
}

// guardHit is the guard range that refuses an address; ok is false for an unguarded address.
type guardHit struct {
	prefix netip.Prefix
	name   string
	ok     bool
}

// guardFor reports the most specific guard range holding ip (already unmapped and without zone).
func guardFor(ip netip.Addr, extra []netip.Prefix) guardHit {
	var best guardHit
	consider := func(p netip.Prefix, name string) {
		if p.Contains(ip) && (!best.ok || p.Bits() > best.prefix.Bits()) {
			best = guardHit{prefix: p, name: name, ok: true}
		}
	}
	for _, g := range builtinGuards {
		consider(g.prefix, g.name)
	}
	for _, p := range extra {
		consider(p, GuardExtra)
	}
	if ip.Is6() {
		for _, e := range v4Embeddings {
			if !e.prefix.Contains(ip) {
				continue
			}
			b := ip.As16()
			v4 := netip.AddrFrom4([4]byte(b[e.offset/8 : e.offset/8+4]))
			h := guardFor(v4, extra)
			if h.ok {
				consider(embedPrefix(e.prefix, e.offset, h.prefix), h.name)
			}
		}
	}
	return best
}

// embedPrefix returns the IPv6 prefix that holds every address of the IPv4 prefix p4 embedded in
// base at bit offset off.
func embedPrefix(base netip.Prefix, off int, p4 netip.Prefix) netip.Prefix {
	b := base.Addr().As16()
	v := p4.Addr().As4()
	copy(b[off/8:off/8+4], v[:])
	return netip.PrefixFrom(netip.AddrFrom16(b), off+p4.Bits()).Masked()
}

// lifts reports whether cidr names ip explicitly enough to lift guard g: cidr holds ip and lies
// wholly inside g's range. So "10.1.0.0/16" lifts guard:private for 10.1.2.3, but "0.0.0.0/0" or
// "169.254.0.0/16" lift nothing for 169.254.169.254 (guard:metadata, a /32).
func lifts(cidr netip.Prefix, ip netip.Addr, g guardHit) bool {
	return cidr.Contains(ip) && cidr.Bits() >= g.prefix.Bits() && g.prefix.Contains(cidr.Addr())
}
