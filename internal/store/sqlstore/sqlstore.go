// Package sqlstore is the store.Store engine over database/sql that the sqlite and postgres engines
// share: every query, scan and transaction of the Store's contract, written once in SQL both accept.
// An engine opens its databases, migrates its schema (its own DDL: the types differ) and hands them to
// New with its Dialect.
//
// Queries are written with ? placeholders; a Dialect that numbers them ($1, $2, …) rewrites them. Times
// are BIGINT/INTEGER microseconds since the Unix epoch (UTC) in both engines.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// Dialect is what differs between the engines at run time.
type Dialect struct {
	// Name names the engine in errors ("sqlite", "postgres").
	Name string
	// Numbered says placeholders are $1, $2, … rather than ?.
	Numbered bool
	// TxOptions are the options of every write transaction.
	TxOptions *sql.TxOptions
	// Retry reports whether a write transaction that failed with err may run again from the start (a
	// serialization failure or a deadlock); nil: never.
	Retry func(err error) bool
}

// DB is a store.Store over a writer and a reader database/sql pool (they may be the same). Create it
// with New; it is safe for concurrent use.
type DB struct {
	d Dialect
	w *sql.DB // writes, each in a transaction with Dialect.TxOptions
	r *sql.DB // reads
	// stmts caches prepared statements of the hot single-row reads on r, by query (see readRow):
	// preparing (parsing) costs more than running them.
	stmts sync.Map // string → *sql.Stmt
	// rebound caches rewritten queries for numbered placeholders.
	rebound sync.Map // string → string

	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*DB)(nil)

// New returns the Store over w (writes) and r (reads); it owns both from now on and closes them in
// Close (once if they are the same).
func New(d Dialect, w, r *sql.DB) *DB {
	return &DB{d: d, w: w, r: r}
}

// Close closes the prepared statements and the databases.
func (s *DB) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		s.stmts.Range(func(_, v any) bool {
			errs = append(errs, v.(*sql.Stmt).Close())
			return true
		})
		if s.r != nil && s.r != s.w {
			errs = append(errs, s.r.Close())
		}
		errs = append(errs, s.w.Close())
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("close %s store: %w", s.d.Name, err)
		}
	})
	return s.closeErr
}

// rebind rewrites q's ? placeholders for the dialect.
func (s *DB) rebind(q string) string {
	if !s.d.Numbered || !strings.Contains(q, "?") {
		return q
	}
	if v, ok := s.rebound.Load(q); ok {
		return v.(string)
	}
	out := Rebind(q)
	s.rebound.Store(q, out)
	return out
}

// Rebind returns q with each ? placeholder replaced by $1, $2, … in order. Queries hold no ? in string
// literals or comments.
func Rebind(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// queryR runs a query on the readers.
func (s *DB) queryR(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return s.r.QueryContext(ctx, s.rebind(q), args...)
}

// queryRowR runs a single-row query on the readers.
func (s *DB) queryRowR(ctx context.Context, q string, args ...any) *sql.Row {
	return s.r.QueryRowContext(ctx, s.rebind(q), args...)
}

// execW runs one statement on the writer, outside a transaction of its own making.
func (s *DB) execW(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return s.w.ExecContext(ctx, s.rebind(q), args...)
}

// readRow runs a single-row read on the readers with a prepared statement, cached by query.
func (s *DB) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	if v, ok := s.stmts.Load(query); ok {
		return v.(*sql.Stmt).QueryRowContext(ctx, args...)
	}
	st, err := s.r.PrepareContext(ctx, s.rebind(query))
	if err != nil {
		return s.queryRowR(ctx, query, args...) // reports the error through Scan
	}
	if v, loaded := s.stmts.LoadOrStore(query, st); loaded {
		st.Close()
		st = v.(*sql.Stmt)
	}
	return st.QueryRowContext(ctx, args...)
}

// Tx is a write transaction whose queries are written with ? placeholders.
type Tx struct {
	tx *sql.Tx
	s  *DB
}

// ExecContext runs a statement in the transaction.
func (t *Tx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, t.s.rebind(q), args...)
}

// QueryContext runs a query in the transaction.
func (t *Tx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, t.s.rebind(q), args...)
}

// QueryRowContext runs a single-row query in the transaction.
func (t *Tx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, t.s.rebind(q), args...)
}

// PrepareContext prepares a statement for the rest of the transaction.
func (t *Tx) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	return t.tx.PrepareContext(ctx, t.s.rebind(q))
}

// writeBudget bounds how long a write transaction that keeps failing with retryable errors is run
// again; maxBackoff caps one wait between runs.
const (
	writeBudget = 5 * time.Second
	maxBackoff  = 100 * time.Millisecond
)

// write runs fn in a write transaction and commits it if fn returns nil. A transaction the dialect may
// retry (a serialization failure) runs again from the start, after a wait that doubles, with jitter, so
// colliding writers spread out, for up to writeBudget; so fn must not keep state across runs except
// through what it returns. Errors from fn are returned as they are; errors from the database itself go
// through mapErr.
func (s *DB) write(ctx context.Context, fn func(tx *Tx) error) error {
	deadline := time.Now().Add(writeBudget)
	backoff := time.Millisecond
	for {
		err := s.writeOnce(ctx, fn)
		if err == nil || s.d.Retry == nil || !s.d.Retry(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, maxBackoff)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

func (s *DB) writeOnce(ctx context.Context, fn func(tx *Tx) error) error {
	tx, err := s.w.BeginTx(ctx, s.d.TxOptions)
	if err != nil {
		return fmt.Errorf("begin: %w", mapErr(err))
	}
	if err := fn(&Tx{tx: tx, s: s}); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", mapErr(err))
	}
	return nil
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

var (
	mappersMu sync.RWMutex
	mappers   []func(error) error
)

// RegisterErrorMapper adds an engine's error mapper, from the engine's init: m returns err with the
// errdefs sentinel that matches it added (see mapErr), or nil for an error that is not the engine's.
func RegisterErrorMapper(m func(err error) error) {
	mappersMu.Lock()
	defer mappersMu.Unlock()
	mappers = append(mappers, m)
}

// mapErr adds the errdefs sentinel that matches a database error: constraint violations become
// ErrAlreadyExists (unique), ErrNotFound (a foreign key names a missing row) or ErrInvalidArgument
// (checks), and a lock that stayed busy becomes ErrUnavailable; the engines' mappers say which of their
// errors are which. Other errors are returned as they are.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	mappersMu.RLock()
	defer mappersMu.RUnlock()
	for _, m := range mappers {
		if out := m(err); out != nil {
			return out
		}
	}
	return err
}

// now returns the current time as the store keeps it.
func now() time.Time { return store.NormalizeTime(time.Now()) }

// micros is how times are stored: microseconds since the Unix epoch, UTC.
func micros(t time.Time) int64 { return store.NormalizeTime(t).UnixMicro() }

// nullMicros stores an optional time: NULL for nil.
func nullMicros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return micros(*t)
}

// fromMicros is the inverse of micros.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// fromNullMicros is the inverse of nullMicros.
func fromNullMicros(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

// exists reports whether query (a SELECT 1 …) returns a row.
func exists(ctx context.Context, tx *Tx, query string, args ...any) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, query, args...).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, mapErr(err)
	}
	return true, nil
}

// absent returns ErrAlreadyExists if query (a SELECT 1 …) finds a row.
func absent(ctx context.Context, tx *Tx, query string, args ...any) error {
	taken, err := exists(ctx, tx, query, args...)
	if err != nil {
		return err
	}
	if taken {
		return errdefs.ErrAlreadyExists
	}
	return nil
}

// present returns ErrNotFound, naming what, unless query (a SELECT 1 …) finds a row.
func present(ctx context.Context, tx *Tx, what, query string, args ...any) error {
	ok, err := exists(ctx, tx, query, args...)
	if err != nil {
		return fmt.Errorf("look up %s: %w", what, err)
	}
	if !ok {
		return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	}
	return nil
}

// checkTenant returns ErrNotFound unless the tenant exists.
func checkTenant(ctx context.Context, tx *Tx, tenantID string) error {
	return present(ctx, tx, "tenant "+tenantID, "SELECT 1 FROM tenants WHERE id = ?", tenantID)
}
