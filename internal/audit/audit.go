// Package audit writes the tenants' audit logs: API calls, messages on the sandboxes' daemon channels
// and egress decisions, each entry chained to the one before it by its hash (store.AuditHash), so that
// `airlock audit verify` finds the first entry that was changed, removed or reordered.
//
// Entries are recorded without blocking the work they describe and written to the Store in batches (at
// most every 100 ms), in the order they were recorded.
package audit

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const (
	queueSize  = 1 << 16
	batchSize  = 512
	batchDelay = 100 * time.Millisecond
	// blockFor is how long Record waits for room in a full queue before it drops the entry.
	blockFor = 100 * time.Millisecond
)

// Recorder queues entries and writes them to the Store. Safe for concurrent use.
type Recorder struct {
	store   store.Store
	log     *slog.Logger
	ch      chan item
	dropped atomic.Int64
	done    chan struct{}
	once    sync.Once
	stop    chan struct{}
}

// item is an entry, or (with flushed set) a request to report once everything before it is written.
type item struct {
	e       store.AuditEntry
	flushed chan struct{}
}

// New starts a recorder writing to st. Close stops it.
func New(st store.Store, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.Default()
	}
	r := &Recorder{store: st, log: log, ch: make(chan item, queueSize), done: make(chan struct{}), stop: make(chan struct{})}
	go r.loop()
	return r
}

// Record queues e (its Time set to now if zero). It never blocks for long: with the queue full for
// 100 ms the entry is dropped, counted, and the drop itself is logged.
func (r *Recorder) Record(e store.AuditEntry) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	// What a caller sent (a path's IDs, arguments) may hold bytes a database's text refuses (PostgreSQL:
	// NUL, invalid UTF-8), which would fail the entry's batch and drop it: recorded escaped instead.
	for _, f := range []*string{&e.Actor, &e.Action, &e.Target, &e.Result, &e.Detail} {
		*f = cleanText(*f)
	}
	select {
	case r.ch <- item{e: e}:
		return
	case <-r.stop:
		return
	default:
	}
	t := time.NewTimer(blockFor)
	defer t.Stop()
	select {
	case r.ch <- item{e: e}:
	case <-r.stop:
	case <-t.C:
		if n := r.dropped.Add(1); n == 1 || n%1000 == 0 {
			r.log.Error("audit: queue full, entries dropped", "dropped", n)
		}
	}
}

// Flush waits until every entry recorded before it is written (or ctx ends).
func (r *Recorder) Flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case r.ch <- item{flushed: done}:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stop:
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close writes what is queued and stops the recorder.
func (r *Recorder) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// Dropped reports how many entries were dropped because the queue was full.
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

func (r *Recorder) loop() {
	defer close(r.done)
	var batch []store.AuditEntry
	var waiters []chan struct{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		if len(batch) > 0 {
			r.write(batch)
			batch = batch[:0]
		}
		for _, w := range waiters {
			close(w)
		}
		waiters = waiters[:0]
	}
	for {
		select {
		case it := <-r.ch:
			if it.flushed != nil {
				waiters = append(waiters, it.flushed)
				flush()
				continue
			}
			if len(batch) == 0 {
				timer.Reset(batchDelay)
			}
			batch = append(batch, it.e)
			if len(batch) >= batchSize {
				flush()
			}
		case <-timer.C:
			flush()
		case <-r.stop:
		drain:
			for {
				select {
				case it := <-r.ch:
					if it.flushed != nil {
						waiters = append(waiters, it.flushed)
					} else {
						batch = append(batch, it.e)
					}
				default:
					break drain
				}
			}
			flush()
			return
		}
	}
}

// write appends a batch; if the Store refuses it (a tenant deleted meanwhile, a bad entry), the
// entries are written one by one so that only the bad ones are lost.
func (r *Recorder) write(batch []store.AuditEntry) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := r.store.AppendAudit(ctx, batch)
	if err == nil {
		return
	}
	if !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrInvalidArgument) {
		// The store failed: try once more, then give up on the batch, loudly.
		if err = r.store.AppendAudit(ctx, batch); err == nil {
			return
		}
		r.log.Error("audit: write entries", "entries", len(batch), "err", err)
		return
	}
	for _, e := range batch {
		if err := r.store.AppendAudit(ctx, []store.AuditEntry{e}); err != nil {
			r.log.Warn("audit: entry refused", "tenant", e.TenantID, "kind", e.Kind, "action", e.Action, "err", err)
		}
	}
}

// Func is how other packages hand entries to the audit log.
type Func func(store.AuditEntry)

// cleanText returns s as valid UTF-8 without NUL bytes: invalid bytes become U+FFFD, and NUL the four
// characters \x00.
func cleanText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
}
