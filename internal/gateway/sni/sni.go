// Package sni reads the server name a TLS client asks for from the first bytes it sends, so the
// gateway's transparent proxy can apply a sandbox's egress policy before it dials anywhere.
//
// The input comes from an untrusted sandbox: every length is checked against the bytes present and
// against a hard cap of MaxClientHelloLen, nothing is allocated from an unchecked length, and no input
// makes the parser panic.
package sni

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/airlockrun/airlock/internal/errdefs"
)

const (
	recordHeaderLen  = 5
	maxRecordPayload = 1 << 14 // RFC 8446 §5.1: TLSPlaintext.length ≤ 2^14

	// MaxClientHelloLen caps the bytes ParseClientHello and Peek read: one full TLS record (a 5-byte
	// header and 16 KiB of payload). A ClientHello that, with its record headers, does not fit is
	// refused. Give Peek a bufio.Reader at least this large.
	MaxClientHelloLen = recordHeaderLen + maxRecordPayload

	recordTypeHandshake      = 0x16
	handshakeTypeClientHello = 1
	extServerName            = 0
	nameTypeHostName         = 0
)

// ErrNeedMore reports that the bytes given are a valid beginning of a ClientHello but end before it
// does: read more and call again. It is never returned for input of MaxClientHelloLen bytes or more.
var ErrNeedMore = errors.New("sni: incomplete ClientHello: need more data")

// ErrNotTLS reports that the first byte is not that of a TLS handshake record, so the stream is not
// TLS (it may be plain HTTP, say). It wraps errdefs.ErrInvalidArgument.
var ErrNotTLS = fmt.Errorf("sni: not a TLS handshake record: %w", errdefs.ErrInvalidArgument)

// ParseClientHello reads the TLS records at the start of b, which must carry a ClientHello, and
// returns the host name of its server_name extension (RFC 6066), lowercased. The ClientHello may be
// fragmented over several handshake records as long as everything fits in MaxClientHelloLen bytes.
//
// It reports:
//   - "" and nil for a well-formed ClientHello without a host name (clients send none for IP
//     addresses);
//   - ErrNeedMore when b ends before the ClientHello does;
//   - ErrNotTLS when b[0] is not a handshake record type;
//   - an error wrapping errdefs.ErrTooLarge when the ClientHello would not fit in MaxClientHelloLen;
//   - an error wrapping errdefs.ErrInvalidArgument for anything malformed: bad record or handshake
//     headers, lengths that disagree, duplicate extensions, several host names, trailing data, or a
//     name that is not a valid host name (ASCII letters, digits and hyphens in dot-separated labels of
//     1–63 bytes, at most 253 in all, no trailing dot, not an IPv4 literal).
//
// Bytes after the ClientHello's last record are ignored.
func ParseClientHello(b []byte) (serverName string, err error) {
	name, _, err := parse(b)
	return name, err
}

// Peek reads the ClientHello at the start of r, without consuming anything, and reports what
// ParseClientHello reports for it. It blocks until enough bytes have arrived: set a read deadline on
// the underlying connection. r's buffer must hold MaxClientHelloLen bytes
// (bufio.NewReaderSize(conn, sni.MaxClientHelloLen)) or a large ClientHello fails with an error
// wrapping errdefs.ErrInvalidArgument. A stream that ends early yields io.ErrUnexpectedEOF (io.EOF
// when it ended before any byte), wrapped.
func Peek(r *bufio.Reader) (string, error) {
	need := 1
	for {
		b, err := r.Peek(need)
		if err != nil {
			switch {
			case errors.Is(err, bufio.ErrBufferFull):
				return "", fmt.Errorf("sni: reader buffer of %d bytes cannot hold %d bytes of ClientHello: %w", r.Size(), need, errdefs.ErrInvalidArgument)
			case errors.Is(err, io.EOF) && len(b) > 0:
				err = io.ErrUnexpectedEOF
			}
			return "", fmt.Errorf("sni: peek ClientHello: %w", err)
		}
		name, n, err := parse(b)
		if !errors.Is(err, ErrNeedMore) {
			return name, err
		}
		if n <= need {
			// parse promises more than it was given; anything else is a bug, not a reason to spin.
			return "", fmt.Errorf("sni: parser asked for %d bytes after %d: %w", n, need, errdefs.ErrInternal)
		}
		// Take whatever has arrived already, so a ClientHello split into many records is not parsed
		// anew for each of them.
		need = max(n, min(r.Buffered(), MaxClientHelloLen))
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("sni: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// parse implements ParseClientHello. With ErrNeedMore it also reports how many bytes of input (in
// all, more than len(b)) it needs at least to make progress.
func parse(b []byte) (string, int, error) {
	var hs []byte // handshake bytes gathered from the records so far
	copied := false
	off := 0
	for {
		if len(b)-off < recordHeaderLen {
			if off == 0 && len(b) > 0 && b[0] != recordTypeHandshake {
				return "", 0, ErrNotTLS
			}
			if off+recordHeaderLen > MaxClientHelloLen {
				return "", 0, fmt.Errorf("sni: ClientHello records exceed %d bytes: %w", MaxClientHelloLen, errdefs.ErrTooLarge)
			}
			return "", off + recordHeaderLen, ErrNeedMore
		}
		if b[off] != recordTypeHandshake {
			if off == 0 {
				return "", 0, ErrNotTLS
			}
			return "", 0, invalid("record type %#x after the first ClientHello record", b[off])
		}
		if major, minor := b[off+1], b[off+2]; major != 3 || minor > 4 {
			return "", 0, invalid("record version %#x%02x", major, minor)
		}
		n := int(b[off+3])<<8 | int(b[off+4])
		if n == 0 || n > maxRecordPayload {
			return "", 0, invalid("record length %d out of range 1-%d", n, maxRecordPayload)
		}
		end := off + recordHeaderLen + n
		if end > MaxClientHelloLen {
			return "", 0, fmt.Errorf("sni: ClientHello records exceed %d bytes: %w", MaxClientHelloLen, errdefs.ErrTooLarge)
		}
		if end > len(b) {
			return "", end, ErrNeedMore
		}
		switch {
		case off == 0:
			hs = b[recordHeaderLen:end] // the common case: no copy
		case !copied:
			// A second record: gather into a new buffer so that appending never writes into b.
			hs = append(make([]byte, 0, MaxClientHelloLen), hs...)
			copied = true
			fallthrough
		default:
			hs = append(hs, b[off+recordHeaderLen:end]...)
		}
		off = end
		if hs[0] != handshakeTypeClientHello {
			return "", 0, invalid("handshake type %d, want ClientHello (1)", hs[0])
		}
		if len(hs) < 4 {
			continue
		}
		msgLen := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if recordHeaderLen+4+msgLen > MaxClientHelloLen {
			return "", 0, fmt.Errorf("sni: ClientHello of %d bytes exceeds %d: %w", msgLen, MaxClientHelloLen, errdefs.ErrTooLarge)
		}
		if len(hs) < 4+msgLen {
			continue
		}
		if len(hs) > 4+msgLen {
			return "", 0, invalid("%d bytes after the ClientHello in its records", len(hs)-4-msgLen)
		}
		name, err := parseClientHelloBody(hs[4:])
		return name, 0, err
	}
}

// reader reads big-endian integers and length-prefixed vectors; every read is bounds-checked.
type reader []byte

func (r *reader) u8() (int, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := int((*r)[0])
	*r = (*r)[1:]
	return v, true
}

func (r *reader) u16() (int, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := int((*r)[0])<<8 | int((*r)[1])
	*r = (*r)[2:]
	return v, true
}

func (r *reader) bytes(n int) ([]byte, bool) {
	if n < 0 || len(*r) < n {
		return nil, false
	}
	v := (*r)[:n]
	*r = (*r)[n:]
	return v, true
}

func (r *reader) vec8() (reader, bool) {
	n, ok := r.u8()
	if !ok {
		return nil, false
	}
	v, ok := r.bytes(n)
	return v, ok
}

func (r *reader) vec16() (reader, bool) {
	n, ok := r.u16()
	if !ok {
		return nil, false
	}
	v, ok := r.bytes(n)
	return v, ok
}

func parseClientHelloBody(body []byte) (string, error) {
	r := reader(body)
	version, ok := r.u16()
	if !ok {
		return "", invalid("ClientHello: truncated version")
	}
	if version>>8 != 3 {
		return "", invalid("ClientHello: legacy_version %#04x", version)
	}
	if _, ok := r.bytes(32); !ok {
		return "", invalid("ClientHello: truncated random")
	}
	sid, ok := r.vec8()
	if !ok || len(sid) > 32 {
		return "", invalid("ClientHello: bad legacy_session_id")
	}
	suites, ok := r.vec16()
	if !ok || len(suites) < 2 || len(suites)%2 != 0 {
		return "", invalid("ClientHello: bad cipher_suites")
	}
	comp, ok := r.vec8()
	if !ok || len(comp) < 1 {
		return "", invalid("ClientHello: bad legacy_compression_methods")
	}
	if len(r) == 0 {
		return "", nil // no extensions (SSL 3.0 style): no server name
	}
	exts, ok := r.vec16()
	if !ok || len(r) != 0 {
		return "", invalid("ClientHello: extensions length disagrees with message length")
	}
	seen := make(map[int]bool)
	name := ""
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec16()
		if !ok1 || !ok2 {
			return "", invalid("ClientHello: truncated extension")
		}
		if seen[typ] {
			return "", invalid("ClientHello: duplicate extension %d", typ)
		}
		seen[typ] = true
		if typ != extServerName {
			continue
		}
		n, err := parseServerName(data)
		if err != nil {
			return "", err
		}
		name = n
	}
	return name, nil
}

// parseServerName parses the server_name extension data (RFC 6066 §3).
func parseServerName(data reader) (string, error) {
	list, ok := data.vec16()
	if !ok || len(data) != 0 || len(list) == 0 {
		return "", invalid("server_name: bad server_name_list")
	}
	name := ""
	found := false
	for len(list) > 0 {
		typ, ok1 := list.u8()
		n, ok2 := list.vec16()
		if !ok1 || !ok2 {
			return "", invalid("server_name: truncated entry")
		}
		if typ != nameTypeHostName {
			continue
		}
		if found {
			return "", invalid("server_name: more than one host_name")
		}
		found = true
		h, ok := hostname(n)
		if !ok {
			return "", invalid("server_name: %q is not a valid host name", string(n))
		}
		name = h
	}
	return name, nil
}

// hostname returns b lowercased if it is a valid host name as RFC 6066 wants it: ASCII letters,
// digits and hyphens in dot-separated labels of 1–63 bytes that neither start nor end with a hyphen,
// at most 253 bytes, no trailing dot, and the last label not all digits (no IPv4 literal).
func hostname(b []byte) (string, bool) {
	if len(b) == 0 || len(b) > 253 {
		return "", false
	}
	out := make([]byte, len(b))
	start := 0
	digits := true
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == '.' {
			l := i - start
			if l == 0 || l > 63 || out[start] == '-' || out[i-1] == '-' {
				return "", false
			}
			if i == len(b) {
				if digits {
					return "", false
				}
				break
			}
			out[i] = '.'
			start, digits = i+1, true
			continue
		}
		c := b[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
			digits = false
		case c >= 'a' && c <= 'z', c == '-':
			digits = false
		case c >= '0' && c <= '9':
		default:
			return "", false
		}
		out[i] = c
	}
	return string(out), true
}
