// Package netfilter installs the host-side nftables rules that enforce a node's egress: every packet a
// sandbox sends arrives on its host veth (all named with one prefix), and there
//
//   - IPv6, ICMP, and UDP other than to port 53 are dropped (raw prerouting, before anything else);
//   - TCP to port 53 and UDP to port 53 are redirected to the gateway's DNS server;
//   - all other TCP is redirected to the gateway's transparent proxy, which reads the original
//     destination with SO_ORIGINAL_DST and decides;
//   - on input, sandboxes reach only those two ports; everything else on the host (its services, the API)
//     is dropped; nothing but a sandbox veth reaches the gateway's sockets on those ports (sockets marked
//     GatewayMark);
//   - nothing is forwarded to or from a sandbox veth: the host never routes sandbox traffic;
//   - the host opens connections into a sandbox only from sockets marked IngressMark (the node's
//     ingress, which authenticates every request first): other local processes cannot reach a
//     sandbox's ports, and the sandbox's replies to the ingress are let in.
//
// All rules live in one table of the inet family that this package owns; Install replaces it whole and
// Remove deletes it.
package netfilter

import (
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// IngressMark is the socket mark (SO_MARK, which needs CAP_NET_ADMIN) that lets a host connection into
// a sandbox. The rules test this one bit only.
const IngressMark uint32 = 1 << 28

// GatewayMark is the socket mark of the gateway's listening sockets (and so of the packets they send
// back to sandboxes; Airlock routes nothing by it). Input from anywhere but a sandbox veth to a socket
// with this bit on the gateway's ports is dropped. The rule names the sockets as well as the ports: a
// table left behind by a gateway that died (killed, never restarted) keeps refusing its dead ports to
// its sandboxes, but an unrelated service that later draws one of those ports is not blocked.
const GatewayMark uint32 = 1 << 27

// Config says what the rules enforce.
type Config struct {
	// Table is the name of the nftables table (family inet) the rules live in. Required.
	Table string
	// IfacePrefix is the name prefix of every sandbox's host-side veth. Required, 1-8 characters.
	IfacePrefix string
	// SharedPrefix is the name prefix the sandbox veths of every node on this host share (IfacePrefix
	// starts with it; default IfacePrefix). Input from such a veth is left to its own node's table, so
	// one node's table never drops what another node's sandboxes send their own gateway.
	SharedPrefix string
	// ProxyPort is the port of the gateway's transparent TCP proxy on the host.
	ProxyPort uint16
	// DNSPort is the port of the gateway's DNS server (UDP and TCP) on the host.
	DNSPort uint16
}

// MarkSocket returns a net.Dialer or net.ListenConfig Control function that gives the socket mark
// (SO_MARK, which needs CAP_NET_ADMIN) before it connects or binds.
func MarkSocket(mark uint32) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, int(mark))
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("set SO_MARK: %w", serr)
		}
		return nil
	}
}

// Install replaces the table with the rules for cfg, atomically (one netlink batch).
func Install(cfg Config) error {
	if cfg.Table == "" || cfg.IfacePrefix == "" || len(cfg.IfacePrefix) > 8 || cfg.ProxyPort == 0 || cfg.DNSPort == 0 {
		return fmt.Errorf("netfilter: incomplete config %+v", cfg)
	}
	if cfg.SharedPrefix == "" {
		cfg.SharedPrefix = cfg.IfacePrefix
	}
	if !strings.HasPrefix(cfg.IfacePrefix, cfg.SharedPrefix) {
		return fmt.Errorf("netfilter: interface prefix %q does not start with the shared prefix %q", cfg.IfacePrefix, cfg.SharedPrefix)
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netfilter: %w", err)
	}
	defer c.CloseLasting()
	// Delete the old table in the same batch if it exists, so the swap is atomic.
	if tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet); err == nil {
		for _, t := range tables {
			if t.Name == cfg.Table {
				c.DelTable(t)
			}
		}
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: cfg.Table})
	accept := nftables.ChainPolicyAccept

	guard := c.AddChain(&nftables.Chain{Name: "guard", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &accept})
	redirect := c.AddChain(&nftables.Chain{Name: "redirect", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	input := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	forward := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	output := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})

	// The per-sandbox chains of what a sandbox could reach (refuse.go): source address → jump.
	reach := reachSet(t)
	if err := c.AddSet(reach, nil); err != nil {
		return fmt.Errorf("netfilter: %w", err)
	}

	in := iifPrefix(cfg.IfacePrefix)
	add := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		var all []expr.Any
		for _, e := range exprs {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}
	// guard: only IPv4 TCP, and UDP to port 53, leave a sandbox, from its own address: a source that is
	// not routed back through the veth it came in on is forged (strict reverse-path check), and must not
	// pass for another sandbox (the gateway and the ingress's replies tell sandboxes apart by address).
	add(guard, in, nfproto(unix.NFPROTO_IPV6), verdict(expr.VerdictDrop))
	add(guard, in, nfproto(unix.NFPROTO_IPV4), rpfMissing(), verdict(expr.VerdictDrop))
	add(guard, in, l4proto(unix.IPPROTO_TCP), verdict(expr.VerdictAccept))
	add(guard, in, l4proto(unix.IPPROTO_UDP), dport(53), verdict(expr.VerdictAccept))
	add(guard, in, verdict(expr.VerdictDrop))
	// redirect: DNS to the resolver, all other TCP to the proxy.
	add(redirect, in, l4proto(unix.IPPROTO_TCP), dport(53), redir(cfg.DNSPort))
	add(redirect, in, l4proto(unix.IPPROTO_UDP), dport(53), redir(cfg.DNSPort))
	add(redirect, in, l4proto(unix.IPPROTO_TCP), redir(cfg.ProxyPort))
	// input: sandboxes reach the gateway's ports and nothing else of the host; nobody else reaches them.
	// A new connection that no rule of its sandbox's policy could allow is reset here (refuse.go).
	add(input, in, nfproto(unix.NFPROTO_IPV4), l4proto(unix.IPPROTO_TCP), dport(cfg.ProxyPort), ctNew(), checkReach(reach))
	add(input, in, l4proto(unix.IPPROTO_TCP), dport(cfg.ProxyPort), verdict(expr.VerdictAccept))
	add(input, in, l4proto(unix.IPPROTO_TCP), dport(cfg.DNSPort), verdict(expr.VerdictAccept))
	add(input, in, l4proto(unix.IPPROTO_UDP), dport(cfg.DNSPort), verdict(expr.VerdictAccept))
	// The sandbox's replies on connections the host opened (only the ingress can, see output).
	add(input, in, l4proto(unix.IPPROTO_TCP), ctReplyEstablished(), verdict(expr.VerdictAccept))
	add(input, in, verdict(expr.VerdictDrop))
	notSandbox := iifNotPrefix(cfg.SharedPrefix)
	add(input, notSandbox, l4proto(unix.IPPROTO_TCP), dport(cfg.ProxyPort), socketMarked(GatewayMark), verdict(expr.VerdictDrop))
	add(input, notSandbox, l4proto(unix.IPPROTO_TCP), dport(cfg.DNSPort), socketMarked(GatewayMark), verdict(expr.VerdictDrop))
	add(input, notSandbox, l4proto(unix.IPPROTO_UDP), dport(cfg.DNSPort), socketMarked(GatewayMark), verdict(expr.VerdictDrop))
	// Whatever the interface's name (another host interface may start with the shared prefix too), what
	// reaches the gateway's sockets without having been redirected there is not a sandbox's: dropped.
	add(input, l4proto(unix.IPPROTO_TCP), dport(cfg.ProxyPort), socketMarked(GatewayMark), ctNotDNAT(), verdict(expr.VerdictDrop))
	add(input, l4proto(unix.IPPROTO_TCP), dport(cfg.DNSPort), socketMarked(GatewayMark), ctNotDNAT(), verdict(expr.VerdictDrop))
	add(input, l4proto(unix.IPPROTO_UDP), dport(cfg.DNSPort), socketMarked(GatewayMark), ctNotDNAT(), verdict(expr.VerdictDrop))
	// forward: the host routes nothing for sandboxes.
	add(forward, in, verdict(expr.VerdictDrop))
	add(forward, oifPrefix(cfg.IfacePrefix), verdict(expr.VerdictDrop))
	// output: a new connection into a sandbox comes from the ingress (marked) or not at all.
	add(output, oifPrefix(cfg.IfacePrefix), ctNew(), markNot(IngressMark), verdict(expr.VerdictDrop))

	if err := c.Flush(); err != nil {
		return fmt.Errorf("netfilter: install table %s: %w", cfg.Table, err)
	}
	return nil
}

// Remove deletes the table. A missing table is fine.
func Remove(table string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netfilter: %w", err)
	}
	defer c.CloseLasting()
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("netfilter: list tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == table {
			c.DelTable(t)
			if err := c.Flush(); err != nil {
				return fmt.Errorf("netfilter: remove table %s: %w", table, err)
			}
		}
	}
	return nil
}

// iifPrefix matches packets that came in on an interface whose name starts with prefix.
func iifPrefix(prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(prefix)},
	}
}

// iifNotPrefix matches packets that came in on an interface whose name does not start with prefix.
func iifNotPrefix(prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(prefix)},
	}
}

// oifPrefix matches packets that go out on an interface whose name starts with prefix.
func oifPrefix(prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(prefix)},
	}
}

func nfproto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// dport matches the transport header's destination port (TCP and UDP keep it at offset 2).
func dport(port uint16) []expr.Any {
	b := make([]byte, 2)
	binary.BigEndian.PutUint16(b, port)
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

func redir(port uint16) []expr.Any {
	b := make([]byte, 2)
	binary.BigEndian.PutUint16(b, port)
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: b},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

// ctReplyEstablished matches packets in the reply direction of an established connection.
func ctReplyEstablished() []expr.Any {
	return append(ctStateAny(expr.CtStateBitESTABLISHED),
		&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{1}}) // IP_CT_DIR_REPLY
}

// rpfMissing matches packets whose source address is not routed back out of the interface they came
// in on (nft: fib saddr . iif oif missing).
func rpfMissing() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
	}
}

// ctNotDNAT matches packets of a connection whose destination was not rewritten (no redirect).
func ctNotDNAT() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
	}
}

// ipsDstNAT is the conntrack status bit of a connection whose destination was rewritten
// (IPS_DST_NAT).
const ipsDstNAT = 1 << 5

// ctNew matches packets that open a connection.
func ctNew() []expr.Any { return ctStateAny(expr.CtStateBitNEW) }

func ctStateAny(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// markNot matches packets whose mark lacks the bits of m.
func markNot(m uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(m), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(m)},
	}
}

// socketMarked matches packets for a local socket whose mark has the bits of m (nft: socket mark & m ==
// m). A packet for no socket does not match.
func socketMarked(m uint32) []expr.Any {
	return []expr.Any{
		&expr.Socket{Key: expr.SocketKeyMark, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(m), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(m)},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }
