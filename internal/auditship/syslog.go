package auditship

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// SyslogConfig says where a syslog sink sends.
type SyslogConfig struct {
	// Network is "udp" (RFC 5426), "tcp" (RFC 6587, octet counting) or "tls" (RFC 5425).
	Network string
	// Addr is the server's host:port.
	Addr string
	// RootCAs verify a TLS server's certificate (for the host of Addr); nil: the system's pool.
	RootCAs *x509.CertPool
	// Hostname is the messages' HOSTNAME; empty: this machine's name.
	Hostname string
	// MaxUDP bounds a UDP message; zero: DefaultMaxUDP.
	MaxUDP int
	// Timeout bounds a connect and a batch's writes; zero: 30 s.
	Timeout time.Duration
}

// DefaultMaxUDP is the longest UDP message a syslog sink sends by default: 8 KiB, rsyslog's default
// maximum message size (RFC 5426 asks receivers for 2048 at least; IPv4 carries 65507 at most).
const DefaultMaxUDP = 8192

// SDID is the ID of the structured data element of the messages. 32473 is the example private
// enterprise number (RFC 5612): Airlock has none of its own.
const SDID = "airlock@32473"

// syslogPRI is facility 13 ("log audit") and severity 6 ("informational").
const syslogPRI = 13*8 + 6

// bom starts a MSG in UTF-8 (RFC 5424, section 6.4).
const bom = "\xEF\xBB\xBF"

// Syslog is a Sink that sends each entry as an RFC 5424 message: APP-NAME "airlock", MSGID the
// entry's kind, TIMESTAMP its time, structured data [airlock@32473 tenant seq hash], and MSG its JSON
// line. Over TCP and TLS the messages are framed by octet counting (RFC 6587) and a batch's are
// written at once; syslog has no acknowledgement, so a batch counts as delivered once it was written
// to the connection (a connection the server closed is noticed before the next batch and dialed
// again). Over UDP a message is at most MaxUDP bytes: an entry's MSG that does not fit is cut, and the
// structured data says truncated="<length of the whole line>".
type Syslog struct {
	cfg          SyslogConfig
	serverName   string
	host, procid string
	// conn is the connection, dialed on the first Ship and again after an error.
	conn net.Conn
}

var _ Sink = (*Syslog)(nil)

// NewSyslog returns a syslog sink for cfg. It does not connect yet.
func NewSyslog(cfg SyslogConfig) (*Syslog, error) {
	switch cfg.Network {
	case "udp", "tcp", "tls":
	default:
		return nil, fmt.Errorf("syslog network %q: want udp, tcp or tls: %w", cfg.Network, errdefs.ErrInvalidArgument)
	}
	host, port, err := net.SplitHostPort(cfg.Addr)
	if p, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("syslog address %q: want host:port: %w", cfg.Addr, errdefs.ErrInvalidArgument)
	}
	if cfg.MaxUDP == 0 {
		cfg.MaxUDP = DefaultMaxUDP
	}
	if cfg.MaxUDP < 480 || cfg.MaxUDP > 65507 {
		return nil, fmt.Errorf("syslog UDP message size %d: want 480..65507: %w", cfg.MaxUDP, errdefs.ErrInvalidArgument)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	h := cfg.Hostname
	if h == "" {
		h, _ = os.Hostname()
	}
	return &Syslog{cfg: cfg, serverName: host, host: h, procid: strconv.Itoa(os.Getpid())}, nil
}

// Ship implements Sink.
func (s *Syslog) Ship(ctx context.Context, entries []Entry) error {
	if s.conn != nil && s.cfg.Network != "udp" && peerClosed(s.conn) {
		s.drop()
	}
	if s.conn == nil {
		if err := s.dial(ctx); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(s.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn := s.conn
	_ = conn.SetWriteDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	err := s.write(entries)
	if err != nil {
		s.drop()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("syslog %s %s: %w", s.cfg.Network, s.cfg.Addr, err)
	}
	return nil
}

func (s *Syslog) write(entries []Entry) error {
	if s.cfg.Network == "udp" {
		for _, e := range entries {
			if _, err := s.conn.Write(FormatSyslog(e, s.host, s.procid, s.cfg.MaxUDP)); err != nil {
				return err
			}
		}
		return nil
	}
	bw := bufio.NewWriterSize(s.conn, 64<<10)
	for _, e := range entries {
		m := FormatSyslog(e, s.host, s.procid, 0)
		bw.WriteString(strconv.Itoa(len(m)))
		bw.WriteByte(' ')
		bw.Write(m)
	}
	return bw.Flush()
}

func (s *Syslog) dial(ctx context.Context) error {
	d := &net.Dialer{Timeout: s.cfg.Timeout}
	var (
		c   net.Conn
		err error
	)
	switch s.cfg.Network {
	case "tls":
		td := &tls.Dialer{NetDialer: d, Config: &tls.Config{RootCAs: s.cfg.RootCAs, ServerName: s.serverName, MinVersion: tls.VersionTLS12}}
		c, err = td.DialContext(ctx, "tcp", s.cfg.Addr)
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			err = Permanent(err)
		}
	default:
		c, err = d.DialContext(ctx, s.cfg.Network, s.cfg.Addr)
	}
	if err != nil {
		return fmt.Errorf("syslog %s %s: %w", s.cfg.Network, s.cfg.Addr, err)
	}
	s.conn = c
	return nil
}

func (s *Syslog) drop() {
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// peerClosed reports whether the server closed (or reset) a stream connection: a read that waits a
// millisecond finds its end rather than nothing to read. A syslog server sends nothing. (A deadline
// already past would fail the read before it looked.)
func peerClosed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
	var b [1]byte
	_, err := c.Read(b[:])
	_ = c.SetReadDeadline(time.Time{})
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// Close implements Sink: it closes the connection.
func (s *Syslog) Close() error {
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn = nil
	return err
}

// FormatSyslog returns e as an RFC 5424 message (no framing): PRI <110> (facility log audit,
// severity informational), TIMESTAMP the entry's time in UTC with microseconds, HOSTNAME hostname,
// APP-NAME airlock, PROCID procid, MSGID the entry's kind, structured data
// [airlock@32473 tenant="…" seq="…" hash="…"], MSG a UTF-8 BOM and the entry's JSON line. Header fields
// that are not printable US-ASCII, or too long, are "-". If limit > 0 and the message would be longer,
// the MSG is cut, at a character's boundary, to fit, and the structured data gains
// truncated="<length of the line>".
func FormatSyslog(e Entry, hostname, procid string, limit int) []byte {
	ts := "-"
	if !e.Time.IsZero() {
		ts = e.Time.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	}
	head := fmt.Sprintf("<%d>1 %s %s airlock %s %s ", syslogPRI, ts, headerField(hostname, 255), headerField(procid, 128), headerField(e.Kind, 32))
	sd := func(extra string) string {
		var b strings.Builder
		b.WriteString("[" + SDID)
		if e.Tenant != "" {
			b.WriteString(` tenant="` + sdEscape(e.Tenant) + `"`)
		}
		b.WriteString(` seq="` + strconv.FormatInt(e.Seq, 10) + `" hash="` + sdEscape(e.Hash) + `"` + extra + "]")
		return b.String()
	}
	line := e.Line
	data := sd("")
	if n := len(head) + len(data) + 1 + len(bom) + len(line); limit > 0 && n > limit {
		data = sd(` truncated="` + strconv.Itoa(len(line)) + `"`)
		keep := limit - len(head) - len(data) - 1 - len(bom)
		keep = min(max(keep, 0), len(line))
		for keep > 0 && keep < len(line) && !utf8.RuneStart(line[keep]) {
			keep--
		}
		line = line[:keep]
	}
	out := make([]byte, 0, len(head)+len(data)+1+len(bom)+len(line))
	out = append(out, head...)
	out = append(out, data...)
	out = append(out, ' ')
	out = append(out, bom...)
	return append(out, line...)
}

// headerField returns v if it is a valid RFC 5424 header field (1 to maxLen printable US-ASCII
// characters), else "-" (the nil value).
func headerField(v string, maxLen int) string {
	if v == "" || len(v) > maxLen {
		return "-"
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 33 || v[i] > 126 {
			return "-"
		}
	}
	return v
}

// sdEscape escapes a PARAM-VALUE: '"', '\' and ']' get a backslash (RFC 5424, section 6.3.3).
func sdEscape(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, `]`, `\]`).Replace(v)
}
