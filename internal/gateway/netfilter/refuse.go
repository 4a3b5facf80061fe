package netfilter

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// A sandbox's TCP connections that no rule of its policy could allow are refused by the kernel, with a
// reset to the SYN, before any handshake: inside a default-deny sandbox a port scan shows nothing open
// and connect() fails with ECONNREFUSED at once. The input chain sends a new connection redirected to
// the proxy through the set sandboxSet (source address → verdict): a sandbox listed there jumps to a
// chain of its own, which returns (on to the proxy, which decides) for what could be allowed and
// rejects the rest; a sandbox not listed goes to the proxy for everything.

// sandboxSet names the verdict map of per-sandbox chains.
const sandboxSet = "sandboxes"

// Reach is a destination a sandbox's policy could allow: TCP to Prefix (the zero Prefix: any address)
// on one of Ports (none: any port).
type Reach struct {
	Prefix netip.Prefix
	Ports  [][2]uint16 // inclusive ranges
}

// sandboxChain names the chain of the sandbox at addr.
func sandboxChain(addr netip.Addr) string {
	a := addr.As4()
	return fmt.Sprintf("sb_%02x%02x%02x%02x", a[0], a[1], a[2], a[3])
}

// SetReach makes the kernel refuse the new TCP connections of the sandbox at addr (IPv4) that go to
// none of reach, replacing what was set for it before, in one batch. The table must have been
// installed by Install.
func SetReach(table string, addr netip.Addr, reach []Reach) error {
	if !addr.Is4() {
		return fmt.Errorf("netfilter: sandbox address %s is not IPv4", addr)
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netfilter: %w", err)
	}
	defer c.CloseLasting()
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: table}
	set := reachSet(t)
	name := sandboxChain(addr)
	// The old element and chain (if any) go in the same batch.
	if _, err := dropReach(c, t, addr); err != nil {
		return err
	}
	ch := c.AddChain(&nftables.Chain{Name: name, Table: t})
	for _, r := range reach {
		var dst []expr.Any
		if r.Prefix.IsValid() {
			p := r.Prefix.Masked()
			if !p.Addr().Is4() {
				continue // IPv6 never leaves a sandbox
			}
			mask := make([]byte, 4)
			binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
			if p.Bits() == 0 {
				mask = make([]byte, 4)
			}
			dst = []expr.Any{
				// ct original daddr: 16 bytes of which an IPv4 address is the first 4.
				&expr.Ct{Register: 1, Key: expr.CtKeyDST, Direction: 0},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Addr().AsSlice()},
			}
		}
		ports := r.Ports
		if len(ports) == 0 {
			ports = [][2]uint16{{0, 65535}}
		}
		for _, pr := range ports {
			from, to := make([]byte, 2), make([]byte, 2)
			binary.BigEndian.PutUint16(from, pr[0])
			binary.BigEndian.PutUint16(to, pr[1])
			exprs := append([]expr.Any{}, dst...)
			exprs = append(exprs,
				&expr.Ct{Register: 1, Key: expr.CtKeyPROTODST, Direction: 0},
				&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: from, ToData: to},
				&expr.Verdict{Kind: expr.VerdictReturn})
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
		}
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}})
	if err := c.SetAddElements(set, []nftables.SetElement{{Key: addr.AsSlice(), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: name}}}); err != nil {
		return fmt.Errorf("netfilter: %w", err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netfilter: set what sandbox %s may reach: %w", addr, err)
	}
	return nil
}

// ClearReach forgets the sandbox at addr: its new connections all go to the proxy again. Nothing set is
// fine.
func ClearReach(table string, addr netip.Addr) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netfilter: %w", err)
	}
	defer c.CloseLasting()
	dropped, err := dropReach(c, &nftables.Table{Family: nftables.TableFamilyINet, Name: table}, addr)
	if err != nil || !dropped {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netfilter: forget sandbox %s: %w", addr, err)
	}
	return nil
}

// reachSet is the verdict map of table t that sends a sandbox's new connections to its chain.
func reachSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: sandboxSet, IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict}
}

// dropReach queues, in c's batch, the removal of the sandbox at addr from the map and of its chain (an
// element first: a chain cannot go while the map jumps to it). It reports whether there was one.
func dropReach(c *nftables.Conn, t *nftables.Table, addr netip.Addr) (bool, error) {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("netfilter: %w", err)
	}
	name := sandboxChain(addr)
	for _, ch := range chains {
		if ch.Table.Name == t.Name && ch.Name == name {
			_ = c.SetDeleteElements(reachSet(t), []nftables.SetElement{{Key: addr.AsSlice()}})
			c.FlushChain(ch)
			c.DelChain(ch)
			return true, nil
		}
	}
	return false, nil
}

// checkReach sends a new connection redirected to the proxy through the sandbox's chain, if it has one.
func checkReach(set *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}, // ip saddr
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, DestRegister: 0, IsDestRegSet: true},
	}
}
