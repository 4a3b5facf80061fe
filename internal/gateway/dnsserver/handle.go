package dnsserver

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlockrun/airlock/internal/errdefs"
)

const headerLen = 12

// query is what handle needs from a parsed query.
type query struct {
	hdr     dnsmessage.Header
	q       dnsmessage.Question
	edns    bool // the query carried an OPT record
	udpSize int  // the payload size it advertised
	version uint8
}

// handle answers the query msg from client. udp selects the size limit. It returns nil when nothing
// should be sent: the header is unreadable or the message is itself a response.
func (s *Server) handle(ctx context.Context, client netip.Addr, msg []byte, udp bool) []byte {
	var p dnsmessage.Parser
	hdr, err := p.Start(msg)
	if err != nil || hdr.Response {
		return nil
	}
	resp := dnsmessage.Header{
		ID:                 hdr.ID,
		Response:           true,
		OpCode:             hdr.OpCode,
		RecursionDesired:   hdr.RecursionDesired,
		RecursionAvailable: true,
	}
	limit := maxMsgSize
	if udp {
		limit = minUDPSize
	}
	if hdr.OpCode != 0 {
		return s.build(resp, dnsmessage.RCodeNotImplemented, nil, false, nil, 0, limit)
	}
	qr, ok := parseQuery(&p, hdr)
	if !ok {
		s.logger().Debug("dns query malformed", "client", client)
		return s.build(resp, dnsmessage.RCodeFormatError, nil, false, nil, 0, limit)
	}
	if qr.edns && udp {
		limit = min(max(qr.udpSize, minUDPSize), ednsUDPSize)
	}
	if qr.edns && qr.version != 0 {
		return s.build(resp, rcodeBADVERS, nil, true, nil, 0, limit)
	}
	q := &qr.q
	if q.Class != dnsmessage.ClassINET || q.Type == dnsmessage.TypeAXFR || q.Type == 251 /* IXFR */ {
		return s.build(resp, dnsmessage.RCodeRefused, q, qr.edns, nil, 0, limit)
	}
	name, ok := normalizeName(q.Name)
	if !ok {
		return s.build(resp, dnsmessage.RCodeNameError, q, qr.edns, nil, 0, limit)
	}
	if name == "" {
		return s.build(resp, dnsmessage.RCodeRefused, q, qr.edns, nil, 0, limit)
	}
	addrs, rcode := s.lookup(ctx, client, name, q.Type)
	if rcode != dnsmessage.RCodeSuccess {
		return s.build(resp, rcode, q, qr.edns, nil, 0, limit)
	}
	if len(addrs) > 0 && s.OnAnswer != nil {
		s.OnAnswer(client, name, append([]netip.Addr(nil), addrs...))
	}
	ttl := durationOr(s.TTL, DefaultTTL)
	return s.build(resp, dnsmessage.RCodeSuccess, q, qr.edns, addrs, uint32(ttl/time.Second), limit)
}

// parseQuery reads the question and the OPT record of a query whose header p has read. It reports
// false for a malformed message: not exactly one question, unparsable sections, or a bad OPT record.
func parseQuery(p *dnsmessage.Parser, hdr dnsmessage.Header) (query, bool) {
	qr := query{hdr: hdr}
	q, err := p.Question()
	if err != nil {
		return qr, false
	}
	qr.q = q
	if _, err := p.Question(); !errors.Is(err, dnsmessage.ErrSectionDone) {
		return qr, false // a second question, or garbage
	}
	if err := p.SkipAllAnswers(); err != nil {
		return qr, false
	}
	if err := p.SkipAllAuthorities(); err != nil {
		return qr, false
	}
	for {
		rh, err := p.AdditionalHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return qr, false
		}
		if rh.Type == dnsmessage.TypeOPT {
			if qr.edns || rh.Name.String() != "." {
				return qr, false // RFC 6891 §6.1.1: one OPT, owned by the root
			}
			qr.edns = true
			qr.udpSize = int(rh.Class)
			qr.version = uint8(rh.TTL >> 16)
		}
		if err := p.SkipAdditional(); err != nil {
			return qr, false
		}
	}
	return qr, true
}

// normalizeName returns n lowercased without its trailing dot ("" for the root), and whether it
// consists of labels of ASCII letters, digits, hyphens and underscores only.
func normalizeName(n dnsmessage.Name) (string, bool) {
	s := n.String()
	if s == "." {
		return "", true
	}
	s = strings.TrimSuffix(s, ".")
	b := make([]byte, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return "", false
		}
		b[i] = c
	}
	// dnsmessage rejects empty labels and dots inside labels, so s has no "..".
	return string(b), len(b) > 0
}

// lookup calls Lookup and maps its outcome to the addresses to answer and a response code.
func (s *Server) lookup(ctx context.Context, client netip.Addr, name string, qtype dnsmessage.Type) ([]netip.Addr, dnsmessage.RCode) {
	if s.Lookup == nil {
		return nil, dnsmessage.RCodeNameError
	}
	ctx, cancel := context.WithTimeout(ctx, durationOr(s.LookupTimeout, DefaultLookupTimeout))
	defer cancel()
	addrs, err := s.Lookup(ctx, client, name, qtype)
	switch {
	case err == nil:
	case errors.Is(err, ErrRefusedName) || errors.Is(err, errdefs.ErrNotFound):
		s.logger().Debug("dns name refused", "client", client, "name", name, "type", qtype, "err", err)
		return nil, dnsmessage.RCodeNameError
	default:
		s.logger().Debug("dns lookup failed", "client", client, "name", name, "type", qtype, "err", err)
		return nil, dnsmessage.RCodeServerFailure
	}
	var out []netip.Addr
	maxAns := intOr(s.MaxAnswers, DefaultMaxAnswers)
	for _, a := range addrs {
		if len(out) == maxAns {
			break
		}
		switch {
		case qtype == dnsmessage.TypeA && (a.Is4() || a.Is4In6()):
			out = append(out, a.Unmap())
		case qtype == dnsmessage.TypeAAAA && a.Is6() && !a.Is4In6():
			out = append(out, a.WithZone(""))
		}
	}
	return out, dnsmessage.RCodeSuccess
}

// build packs a response. rcode may be an extended code (above 15) only with edns. q, when set, is
// echoed as the question and owns the answers. A response over limit is packed again without answers
// and with the TC bit set.
func (s *Server) build(hdr dnsmessage.Header, rcode dnsmessage.RCode, q *dnsmessage.Question, edns bool, addrs []netip.Addr, ttl uint32, limit int) []byte {
	hdr.RCode = rcode & 0xF
	msg, err := pack(hdr, rcode, q, edns, addrs, ttl)
	if err == nil && len(msg) > limit {
		hdr.Truncated = true
		msg, err = pack(hdr, rcode, q, edns, nil, 0)
	}
	if err != nil {
		// Only a bug can get here: every name packed was parsed from the query.
		s.logger().Error("dns response not packed", "err", err)
		hdr.RCode, hdr.Truncated = dnsmessage.RCodeServerFailure, false
		msg, _ = pack(hdr, dnsmessage.RCodeServerFailure, nil, false, nil, 0)
	}
	return msg
}

func pack(hdr dnsmessage.Header, rcode dnsmessage.RCode, q *dnsmessage.Question, edns bool, addrs []netip.Addr, ttl uint32) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), hdr)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if q != nil {
		if err := b.Question(*q); err != nil {
			return nil, err
		}
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		for _, a := range addrs {
			rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: ttl}
			var err error
			if a.Is4() {
				rh.Type = dnsmessage.TypeA
				err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
			} else {
				rh.Type = dnsmessage.TypeAAAA
				err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
			if err != nil {
				return nil, err
			}
		}
	}
	if edns {
		if err := b.StartAdditionals(); err != nil {
			return nil, err
		}
		var rh dnsmessage.ResourceHeader
		if err := rh.SetEDNS0(ednsUDPSize, rcode, false); err != nil {
			return nil, err
		}
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// refusedFor returns a REFUSED response to query msg, or nil when its header is unreadable or it is
// a response.
func refusedFor(msg []byte) []byte {
	var p dnsmessage.Parser
	hdr, err := p.Start(msg)
	if err != nil || hdr.Response {
		return nil
	}
	resp := dnsmessage.Header{ID: hdr.ID, Response: true, OpCode: hdr.OpCode, RCode: dnsmessage.RCodeRefused,
		RecursionDesired: hdr.RecursionDesired, RecursionAvailable: true}
	out, err := pack(resp, dnsmessage.RCodeRefused, nil, false, nil, 0)
	if err != nil {
		return nil
	}
	return out
}
