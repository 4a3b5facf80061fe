package auditship

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Source fetches the log's entries after a sequence number (0: from the first) as JSON lines, one
// entry a line, each ending in a newline: airlock.Client.ExportAudit. The caller closes the reader.
type Source func(ctx context.Context, after int64) (io.ReadCloser, error)

// Sink is a destination. A Shipper calls it from one goroutine.
type Sink interface {
	// Ship delivers entries (in order, of one tenant, after those delivered before) and returns once
	// the destination took them all. On an error some of them may have been delivered; the Shipper
	// hands them all over again.
	Ship(ctx context.Context, entries []Entry) error
	// Close releases the Sink.
	Close() error
}

// Holder is a Sink that can tell what it already holds of a tenant's log, so that a restart (with no
// state file, or one a crash left behind) does not ship it again.
type Holder interface {
	// Holds reports the sequence number and hash of the last entry of tenant's log the destination
	// holds: 0 if none; hash "" if the destination does not say.
	Holds(ctx context.Context, tenant string) (seq int64, hash string, err error)
}

// permanentError is an error retrying does not mend.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that retrying does not mend (a refused credential, a missing bucket, a
// certificate not trusted): a following Shipper stops on it rather than retrying. Nil stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// Defaults of Shipper's zero fields.
const (
	DefaultPoll         = 2 * time.Second
	DefaultMaxBackoff   = time.Minute
	DefaultBatchEntries = 10000
	DefaultBatchBytes   = 64 << 20
	DefaultFlushTimeout = 30 * time.Second
	// MaxLine is the longest entry a Shipper reads (as airlock audit verify).
	MaxLine = 16 << 20
)

// Shipper moves a tenant's log from a Source to a Sink. Its zero value, with Source and Sink set,
// ships the whole log once.
type Shipper struct {
	// Source and Sink are required.
	Source Source
	Sink   Sink
	// After: ship the entries after this sequence number (0: all), unless the state file says where
	// to resume, or the Sink (a Holder) already holds more.
	After int64
	// StatePath, if set, is the state file (see State): read at the start, replaced after each batch
	// the Sink took.
	StatePath string
	// Follow keeps polling for new entries until ctx is done, then delivers what it holds and returns
	// nil. Fetch and delivery errors are retried (with a backoff) unless they are permanent. Without
	// Follow, Run ships what the log holds now and returns the first error.
	Follow bool
	// Poll is how often a following Shipper asks for new entries; zero: DefaultPoll.
	Poll time.Duration
	// MaxBackoff bounds the wait after a failed fetch or delivery, which doubles from Poll; zero:
	// DefaultMaxBackoff.
	MaxBackoff time.Duration
	// BatchEntries and BatchBytes bound a batch; zero: DefaultBatchEntries, DefaultBatchBytes.
	BatchEntries, BatchBytes int
	// BatchWait makes a following Shipper hold new entries until the first of them has waited this
	// long (or a batch is full), so that a destination that stores a batch as an object gets fewer,
	// bigger ones. Zero: it ships after every poll.
	BatchWait time.Duration
	// FlushTimeout bounds the delivery of what is held once ctx is done; zero: DefaultFlushTimeout.
	FlushTimeout time.Duration
	// Permanent, if set, reports the Source's errors that retrying does not mend (the API refused the
	// key). Errors marked with Permanent are permanent anyway.
	Permanent func(error) bool
	// Log gets what a following shipper retries and what it finds wrong with the log (a gap, an entry
	// that does not chain to the one before it); nil: discarded.
	Log *slog.Logger
}

// Stats reports what a run delivered.
type Stats struct {
	// Entries is how many entries the Sink took; First and Last are the first's and the last's
	// sequence numbers (0 if none).
	Entries     int
	First, Last int64
}

// run is one Run's progress.
type run struct {
	*Shipper
	log *slog.Logger

	// fetched is the last entry read (the next fetch starts after it); lastHash its hash ("" if not
	// known), for the chain check.
	fetched  int64
	lastHash string
	// tenant is the log's tenant, once known (from the state file or the first entry).
	tenant string
	// asked is set once a Holder said what it holds; skip is the last entry it holds.
	asked bool
	skip  int64

	pending      []Entry
	pendingBytes int
	pendingSince time.Time
	// shipFailed is set when the last delivery failed.
	shipFailed bool

	stats Stats
}

// Run ships the log (see Shipper). It reports what it delivered, also with an error.
func (s *Shipper) Run(ctx context.Context) (Stats, error) {
	r := &run{Shipper: s, log: s.Log, fetched: s.After}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if s.StatePath != "" {
		st, ok, err := ReadState(s.StatePath)
		if err != nil {
			return Stats{}, err
		}
		if ok {
			r.fetched, r.lastHash, r.tenant = st.Seq, st.Hash, st.Tenant
		}
	}
	wait := orDefault(s.Poll, DefaultPoll)
	for {
		err := r.step(ctx)
		if ctx.Err() != nil {
			break
		}
		switch {
		case err != nil && (!s.Follow || r.permanent(err)):
			if !r.shipFailed {
				// Deliver the entries read before the fetch broke off.
				if ferr := r.flush(ctx); ferr != nil {
					r.log.Warn("audit shipper: deliver the entries read before the error", "err", ferr)
				}
			}
			return r.stats, err
		case err != nil:
			r.log.Warn("audit shipper: retrying", "err", err, "in", wait)
		case !s.Follow:
			return r.stats, r.flush(ctx)
		default:
			wait = orDefault(s.Poll, DefaultPoll)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			wait = min(2*wait, orDefault(s.MaxBackoff, DefaultMaxBackoff))
		}
	}
	// Interrupted: deliver what is held, within FlushTimeout.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orDefault(s.FlushTimeout, DefaultFlushTimeout))
	defer cancel()
	if err := r.flush(fctx); err != nil {
		return r.stats, err
	}
	if !s.Follow {
		return r.stats, ctx.Err() // the log was not shipped whole
	}
	return r.stats, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (r *run) permanent(err error) bool {
	return IsPermanent(err) || r.Permanent != nil && r.Permanent(err)
}

// step delivers what is due, fetches the entries after the last one read, and delivers the batches
// that filled up, and what is due at the end.
func (r *run) step(ctx context.Context) error {
	if r.due() {
		if err := r.ship(ctx); err != nil {
			return err
		}
	}
	rc, err := r.Source(ctx, r.fetched)
	if err != nil {
		return fmt.Errorf("fetch the audit log after entry %d: %w", r.fetched, err)
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 64<<10)
	for {
		line, err := readLine(br, MaxLine)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read the audit log after entry %d: %w", r.fetched, err)
		}
		if len(line) == 0 {
			continue
		}
		e, err := ParseEntry(line)
		if err != nil {
			return fmt.Errorf("read the audit log after entry %d: %w", r.fetched, err)
		}
		if err := r.accept(ctx, e); err != nil {
			return err
		}
		if r.full() {
			if err := r.ship(ctx); err != nil {
				return err
			}
		}
	}
	if r.due() {
		return r.ship(ctx)
	}
	return nil
}

// readLine reads one line, without its newline, of at most maxLen bytes. A last line without a
// newline is an export that broke off: io.ErrUnexpectedEOF.
func readLine(br *bufio.Reader, maxLen int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > maxLen+1 {
			return nil, fmt.Errorf("an entry longer than %d bytes", maxLen)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, fmt.Errorf("the export ended inside an entry: %w", io.ErrUnexpectedEOF)
		default:
			return nil, err
		}
	}
}

// accept takes an entry read from the log: it checks it against the entries before it and holds it
// for delivery, unless the destination holds it already.
func (r *run) accept(ctx context.Context, e Entry) error {
	if e.Seq <= r.fetched {
		return nil // had it
	}
	if r.tenant != "" && e.Tenant != r.tenant {
		from := "the entries before it"
		if r.StatePath != "" {
			from = "the state file " + r.StatePath
		}
		return Permanent(fmt.Errorf("entry %d is tenant %q's, and %s tenant %q's: one shipper (and state file) per tenant", e.Seq, e.Tenant, from, r.tenant))
	}
	if h, ok := r.Sink.(Holder); ok && !r.asked {
		seq, hash, err := h.Holds(ctx, e.Tenant)
		if err != nil {
			return err
		}
		r.asked, r.skip = true, seq
		if seq >= e.Seq {
			r.log.Info("audit shipper: the destination holds the log up to here; resuming after it", "seq", seq)
		}
		if seq == e.Seq && hash != "" && hash != e.Hash {
			r.log.Warn("audit shipper: the destination's last entry is not the server's entry of that number; run airlock audit verify on both", "seq", seq)
		}
	}
	switch {
	case r.fetched > 0 && e.Seq > r.fetched+1:
		r.log.Warn("audit shipper: entries missing from the log (pruned before they were shipped?)", "from", r.fetched+1, "to", e.Seq-1)
	case e.Seq == r.fetched+1 && r.lastHash != "" && e.Prev != r.lastHash:
		r.log.Warn("audit shipper: an entry does not carry the hash of the one before it: the log changed since that was read; run airlock audit verify", "seq", e.Seq)
	}
	r.tenant, r.fetched, r.lastHash = e.Tenant, e.Seq, e.Hash
	if e.Seq <= r.skip {
		return nil
	}
	if len(r.pending) == 0 {
		r.pendingSince = time.Now()
	}
	r.pending = append(r.pending, e)
	r.pendingBytes += len(e.Line) + 1
	return nil
}

func (r *run) full() bool {
	return len(r.pending) >= orDefault(r.BatchEntries, DefaultBatchEntries) || r.pendingBytes >= orDefault(r.BatchBytes, DefaultBatchBytes)
}

// due reports whether the held entries are to be delivered now.
func (r *run) due() bool {
	if len(r.pending) == 0 {
		return false
	}
	return r.full() || !r.Follow || time.Since(r.pendingSince) >= r.BatchWait
}

// ship delivers the held entries and then records the last of them in the state file.
func (r *run) ship(ctx context.Context) error {
	b := r.pending
	first, last := b[0], b[len(b)-1]
	if err := r.Sink.Ship(ctx, b); err != nil {
		r.shipFailed = true
		return fmt.Errorf("deliver entries %d..%d: %w", first.Seq, last.Seq, err)
	}
	r.shipFailed = false
	r.pending, r.pendingBytes = nil, 0
	if r.stats.Entries == 0 {
		r.stats.First = first.Seq
	}
	r.stats.Entries += len(b)
	r.stats.Last = last.Seq
	if r.StatePath != "" {
		if err := WriteState(r.StatePath, State{Tenant: last.Tenant, Seq: last.Seq, Hash: last.Hash}); err != nil {
			return fmt.Errorf("entries %d..%d delivered, but: %w", first.Seq, last.Seq, err)
		}
	}
	return nil
}

// flush delivers what is held.
func (r *run) flush(ctx context.Context) error {
	if len(r.pending) == 0 {
		return nil
	}
	return r.ship(ctx)
}
