package auditship_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/auditship"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// fakeLog is a hand-written stand-in for the API's audit export: a tenant's chain of entries, in the
// server's JSON (airlock.AuditEntry), served as GET /v1/audit serves them.
type fakeLog struct {
	tenant string

	mu sync.Mutex
	// entries are the chain; guarded by mu.
	entries []store.AuditEntry
	// fails makes the next fetches fail; cutNext makes the next one end inside an entry (after whole
	// ones); fetches counts them; guarded by mu.
	fails   int
	cutNext bool
	fetches int
}

func newFakeLog(tenant string, n int) *fakeLog {
	l := &fakeLog{tenant: tenant}
	l.add(n)
	return l
}

// add appends n entries.
func (l *fakeLog) add(n int) { l.addDetail(n, "") }

// addDetail appends n entries with detail (JSON) as their Detail.
func (l *fakeLog) addDetail(n int, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		e := store.AuditEntry{TenantID: l.tenant, Seq: int64(len(l.entries) + 1), Time: time.Now().UTC().Truncate(time.Microsecond),
			Kind: store.AuditAPI, Actor: "key_1", Action: "GET /v1/usage", Result: "200", Detail: detail}
		if len(l.entries) > 0 {
			e.Prev = l.entries[len(l.entries)-1].Hash
		}
		e.Hash = store.AuditHash(e)
		l.entries = append(l.entries, e)
	}
}

// gap removes entries from..to (as retention would have pruned them).
func (l *fakeLog) gap(from, to int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keep []store.AuditEntry
	for _, e := range l.entries {
		if e.Seq < from || e.Seq > to {
			keep = append(keep, e)
		}
	}
	l.entries = keep
}

// prune deletes the entries up to through and appends the record of the cut, as the server's
// retention does (store.PruneAudit).
func (l *fakeLog) prune(through int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keep []store.AuditEntry
	var last store.AuditEntry
	for _, e := range l.entries {
		if e.Seq <= through {
			last = e
		} else {
			keep = append(keep, e)
		}
	}
	head := l.entries[len(l.entries)-1]
	rec := store.PruneEntry(l.tenant, last, time.Now(), time.Now().UTC().Truncate(time.Microsecond))
	rec.Seq, rec.Prev = head.Seq+1, head.Hash
	rec.Hash = store.AuditHash(rec)
	l.entries = append(keep, rec)
}

func line(e store.AuditEntry) []byte {
	b, _ := json.Marshal(airlock.AuditEntry{Tenant: e.TenantID, Seq: e.Seq, Time: e.Time, Kind: e.Kind, Actor: e.Actor, Action: e.Action,
		Target: e.Target, Result: e.Result, Detail: e.Detail, Sealed: e.Sealed, Salt: e.Salt, Prev: e.Prev, Hash: e.Hash})
	return b
}

// export returns the entries after after, as the API does.
func (l *fakeLog) export(after int64) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	for _, e := range l.entries {
		if e.Seq > after {
			b.Write(line(e))
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// Source implements auditship.Source.
func (l *fakeLog) Source(ctx context.Context, after int64) (io.ReadCloser, error) {
	l.mu.Lock()
	l.fetches++
	fail, cut := l.fails > 0, l.cutNext
	if fail {
		l.fails--
	}
	l.cutNext = false
	l.mu.Unlock()
	if fail {
		return nil, errors.New("503: the server is restarting")
	}
	b := l.export(after)
	if cut && len(b) > 0 {
		// Whole entries, then half of the next: the stream broke off.
		lines := bytes.SplitAfter(b, []byte("\n"))
		half := len(lines) / 2
		b = append(bytes.Join(lines[:half], nil), lines[half][:len(lines[half])/2]...)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (l *fakeLog) len() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.entries))
}

// verify checks data as airlock audit verify does: the entries parse and chain from the first.
func verify(t *testing.T, data []byte) (n int, first, last int64) {
	t.Helper()
	var entries []store.AuditEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e airlock.AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("shipped line %q: %v", sc.Bytes(), err)
		}
		entries = append(entries, store.AuditEntry{TenantID: e.Tenant, Seq: e.Seq, Time: e.Time, Kind: e.Kind, Actor: e.Actor,
			Action: e.Action, Target: e.Target, Result: e.Result, Detail: e.Detail, Sealed: e.Sealed, Salt: e.Salt, Prev: e.Prev, Hash: e.Hash})
	}
	if len(entries) == 0 {
		t.Fatal("nothing shipped")
	}
	if i, why := store.VerifyAudit(entries, false); i >= 0 {
		t.Fatalf("shipped entry %d (seq %d) does not hold: %s", i, entries[i].Seq, why)
	}
	return len(entries), entries[0].Seq, entries[len(entries)-1].Seq
}

// recorder is a hand-written Sink that keeps the batches it was given; failAfter > 0 makes the
// batches after that many fail (once delivered: the failure comes after the delivery).
type recorder struct {
	mu        sync.Mutex
	batches   [][]auditship.Entry
	failAfter int
	fails     int
}

func (r *recorder) Ship(_ context.Context, entries []auditship.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, append([]auditship.Entry(nil), entries...))
	if r.failAfter > 0 && len(r.batches) > r.failAfter {
		r.fails++
		return errors.New("connection reset after the write")
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) seqs() [][2]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][2]int64
	for _, b := range r.batches {
		out = append(out, [2]int64{b[0].Seq, b[len(b)-1].Seq})
	}
	return out
}

func (r *recorder) data() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b []byte
	for _, batch := range r.batches {
		b = append(b, joined(batch)...)
	}
	return b
}

// joined returns the entries' lines, each with its newline.
func joined(entries []auditship.Entry) []byte {
	var b []byte
	for _, e := range entries {
		b = append(append(b, e.Line...), '\n')
	}
	return b
}

// syslogMsg is a parsed RFC 5424 message.
type syslogMsg struct {
	PRI                            int
	Time, Host, App, ProcID, MsgID string
	SDID                           string
	Params                         map[string]string
	Msg                            []byte
	HasBOM                         bool
}

// parseSyslog parses an RFC 5424 message strictly: PRI, VERSION 1, five header fields of printable
// US-ASCII, one SD-ELEMENT with escaped PARAM-VALUEs, then " " and the MSG.
func parseSyslog(b []byte) (syslogMsg, error) {
	m := syslogMsg{Params: map[string]string{}}
	s := b
	if len(s) < 3 || s[0] != '<' {
		return m, errors.New("no PRI")
	}
	end := bytes.IndexByte(s, '>')
	if end < 2 || end > 4 {
		return m, errors.New("bad PRI")
	}
	pri, err := strconv.Atoi(string(s[1:end]))
	if err != nil || pri > 191 {
		return m, fmt.Errorf("bad PRI %q", s[1:end])
	}
	m.PRI = pri
	s = s[end+1:]
	if !bytes.HasPrefix(s, []byte("1 ")) {
		return m, errors.New("VERSION is not 1")
	}
	s = s[2:]
	fields := make([]string, 5)
	for i := range fields {
		sp := bytes.IndexByte(s, ' ')
		if sp < 1 {
			return m, fmt.Errorf("header field %d missing", i)
		}
		for _, c := range s[:sp] {
			if c < 33 || c > 126 {
				return m, fmt.Errorf("header field %d is not printable US-ASCII", i)
			}
		}
		fields[i] = string(s[:sp])
		s = s[sp+1:]
	}
	m.Time, m.Host, m.App, m.ProcID, m.MsgID = fields[0], fields[1], fields[2], fields[3], fields[4]
	if m.Time != "-" {
		if _, err := time.Parse(time.RFC3339Nano, m.Time); err != nil {
			return m, fmt.Errorf("TIMESTAMP %q: %v", m.Time, err)
		}
	}
	if len(s) == 0 || s[0] != '[' {
		return m, errors.New("no SD-ELEMENT")
	}
	s = s[1:]
	i := bytes.IndexAny(s, " ]")
	if i < 1 {
		return m, errors.New("no SD-ID")
	}
	m.SDID = string(s[:i])
	s = s[i:]
	for len(s) > 0 && s[0] == ' ' {
		s = s[1:]
		eq := bytes.IndexByte(s, '=')
		if eq < 1 || len(s) < eq+2 || s[eq+1] != '"' {
			return m, errors.New("bad SD-PARAM")
		}
		name := string(s[:eq])
		s = s[eq+2:]
		var v []byte
		for {
			if len(s) == 0 {
				return m, errors.New("unterminated PARAM-VALUE")
			}
			c := s[0]
			s = s[1:]
			if c == '\\' && len(s) > 0 && (s[0] == '"' || s[0] == '\\' || s[0] == ']') {
				v = append(v, s[0])
				s = s[1:]
				continue
			}
			if c == '"' {
				break
			}
			if c == ']' {
				return m, errors.New("unescaped ] in PARAM-VALUE")
			}
			v = append(v, c)
		}
		m.Params[name] = string(v)
	}
	if len(s) == 0 || s[0] != ']' {
		return m, errors.New("SD-ELEMENT not closed")
	}
	s = s[1:]
	if len(s) > 0 {
		if s[0] != ' ' {
			return m, errors.New("no SP before MSG")
		}
		s = s[1:]
		if bytes.HasPrefix(s, []byte("\xEF\xBB\xBF")) {
			m.HasBOM = true
			s = s[3:]
		}
		m.Msg = s
	}
	return m, nil
}

// readOctetCounted reads one RFC 6587 octet-counted frame: MSG-LEN SP SYSLOG-MSG.
func readOctetCounted(br *bufio.Reader) ([]byte, error) {
	n, err := br.ReadString(' ')
	if err != nil {
		return nil, err
	}
	size, err := strconv.Atoi(strings.TrimSuffix(n, " "))
	if err != nil || size < 1 || strings.HasPrefix(n, "0") {
		return nil, fmt.Errorf("bad MSG-LEN %q", n)
	}
	b := make([]byte, size)
	_, err = io.ReadFull(br, b)
	return b, err
}
