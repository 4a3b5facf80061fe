// Package audit writes the tenants' audit logs: API calls, messages on the sandboxes' daemon channels
// and egress decisions, each entry chained to the one before it by its hash (store.AuditHash), so that
// `airlock audit verify` finds the first entry that was changed, removed or reordered.
//
// Entries are recorded without blocking the work they describe and written to the Store in batches (at
// most every 100 ms), in the order they were recorded. With a sealer (SetSealer), each entry's payload
// (who, what, on what, the result, the detail) is sealed under its tenant's key before it is written:
// the Store keeps only the sealed payload, the chain covers it, and a revoked key leaves the payload
// unreadable (store.AuditEntry.Sealed).
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
	// tenantQueue bounds the entries of one tenant in the queue, so that a noisy tenant (one sandbox
	// flooding its daemon channel or the gateway) fills at most a sixteenth of it: past it that
	// tenant's Record waits (back-pressure on the noisy source), up to tenantWait, and only then drops
	// its own entry. Other tenants' entries still find room.
	tenantQueue = queueSize / 16
	tenantWait  = 5 * time.Second
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

	// sealer, if set, seals the entries' payloads (SetSealer).
	sealer atomic.Pointer[SealerFunc]
	// sealFailed counts the entries whose payload was discarded because it could not be sealed.
	sealFailed atomic.Int64

	mu sync.Mutex
	// queued counts each tenant's entries in ch; guarded by mu.
	queued map[string]*tenantQueued
}

// Sealer seals one tenant's entries: secrets.Sealer.
type Sealer interface {
	Seal(plaintext, aad []byte) ([]byte, error)
}

// SealerFunc returns the sealer of a tenant's entries, or an error if its key cannot seal now (revoked,
// unavailable).
type SealerFunc func(ctx context.Context, tenantID string) (Sealer, error)

// SetSealer makes the recorder seal the payload of every entry it writes from now on with f's sealer of
// the entry's tenant. An entry whose tenant's key cannot seal is written with its payload discarded
// (store.AuditDiscarded): never in the clear.
func (r *Recorder) SetSealer(f SealerFunc) { r.sealer.Store(&f) }

// tenantQueued is one tenant's share of the queue.
type tenantQueued struct {
	n int
	// room, if not nil, is closed when an entry of the tenant leaves the queue (a Record waits on it).
	room chan struct{}
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
	r := &Recorder{store: st, log: log, ch: make(chan item, queueSize), done: make(chan struct{}), stop: make(chan struct{}), queued: map[string]*tenantQueued{}}
	go r.loop()
	return r
}

// Record queues e (its Time set to now if zero). A tenant with tenantQueue entries queued waits for
// room (up to 5 s, then its entry is dropped): one noisy tenant slows itself, not the others. Otherwise
// it never blocks for long: with the whole queue full for 100 ms the entry is dropped. Drops are
// counted and logged.
func (r *Recorder) Record(e store.AuditEntry) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	// What a caller sent (a path's IDs, arguments) may hold bytes a database's text refuses (PostgreSQL:
	// NUL, invalid UTF-8), which would fail the entry's batch and drop it: recorded escaped instead.
	for _, f := range []*string{&e.Actor, &e.Action, &e.Target, &e.Result, &e.Detail} {
		*f = cleanText(*f)
	}
	if !r.reserve(e.TenantID) {
		r.drop("audit: a tenant's share of the queue stayed full, its entries dropped", e.TenantID)
		return
	}
	select {
	case r.ch <- item{e: e}:
		return
	case <-r.stop:
		r.release(e.TenantID)
		return
	default:
	}
	t := time.NewTimer(blockFor)
	defer t.Stop()
	select {
	case r.ch <- item{e: e}:
	case <-r.stop:
		r.release(e.TenantID)
	case <-t.C:
		r.release(e.TenantID)
		r.drop("audit: queue full, entries dropped", e.TenantID)
	}
}

func (r *Recorder) drop(msg, tenant string) {
	if n := r.dropped.Add(1); n == 1 || n%1000 == 0 {
		r.log.Error(msg, "dropped", n, "tenant", tenant)
	}
}

// reserve takes a place in tenant's share of the queue, waiting (up to tenantWait) while it is full.
// It reports false if none came free, or the recorder stopped.
func (r *Recorder) reserve(tenant string) bool {
	var deadline <-chan time.Time
	for {
		r.mu.Lock()
		q := r.queued[tenant]
		if q == nil {
			q = &tenantQueued{}
			r.queued[tenant] = q
		}
		if q.n < tenantQueue {
			q.n++
			r.mu.Unlock()
			return true
		}
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		r.mu.Unlock()
		if deadline == nil {
			t := time.NewTimer(tenantWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-room:
		case <-r.stop:
			return false
		case <-deadline:
			return false
		}
	}
}

// release gives back a place in tenant's share, once its entry left the queue (or never entered it).
func (r *Recorder) release(tenant string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queued[tenant]
	if q == nil {
		return
	}
	q.n--
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	if q.n <= 0 {
		delete(r.queued, tenant)
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
			r.release(it.e.TenantID)
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
						r.release(it.e.TenantID)
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
	r.seal(ctx, batch)
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

// seal seals the payload of each entry of batch, in place, with its tenant's sealer (one per tenant
// per batch).
func (r *Recorder) seal(ctx context.Context, batch []store.AuditEntry) {
	f := r.sealer.Load()
	if f == nil {
		return
	}
	type got struct {
		s   Sealer
		err error
	}
	sealers := map[string]got{}
	for i, e := range batch {
		g, ok := sealers[e.TenantID]
		if !ok {
			g.s, g.err = (*f)(ctx, e.TenantID)
			sealers[e.TenantID] = g
			if g.err != nil {
				r.log.Warn("audit: the tenant's key cannot seal; its entries are written without their payload", "tenant", e.TenantID, "err", g.err)
			}
		}
		var plain, sealed []byte
		var commitment string
		err := g.err
		if err == nil {
			plain, commitment, err = store.AuditPlaintext(e)
		}
		if err == nil {
			sealed, err = g.s.Seal(plain, store.AuditAAD(e))
		}
		e.Actor, e.Action, e.Target, e.Result, e.Detail = "", "", "", "", ""
		if err != nil {
			r.sealFailed.Add(1)
			e.Sealed = store.AuditDiscarded
		} else {
			e.Sealed = store.SealedAudit(commitment, sealed)
		}
		batch[i] = e
	}
}

// Unsealed reports how many entries were written without their payload because it could not be sealed.
func (r *Recorder) Unsealed() int64 { return r.sealFailed.Load() }

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
