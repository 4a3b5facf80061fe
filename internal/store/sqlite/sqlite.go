// Package sqlite is the embedded store.Store engine: one SQLite file (pure Go, no cgo) under the data
// directory, in WAL mode, so a single binary needs nothing else installed.
//
// Concurrency: every write goes through one dedicated connection and starts its transaction with
// BEGIN IMMEDIATE, so writers of this process queue in database/sql (honouring their ctx) instead of
// failing with SQLITE_BUSY; reads use a separate pool of read-only connections that WAL lets run
// alongside the writer. A busy timeout covers other processes opening the same file.
//
// The schema is versioned: migrations are embedded as ordered SQL scripts and applied in one transaction
// at Open, which records them in schema_migrations; re-opening an up-to-date file applies nothing.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// busyTimeout is how long a statement waits for a lock held by another connection or process before
// failing with SQLITE_BUSY (reported as errdefs.ErrUnavailable).
const busyTimeout = 10 * time.Second

// Store is a store.Store kept in one SQLite file. Create it with Open; it is safe for concurrent use.
type Store struct {
	path string
	w    *sql.DB // exactly one connection: all writes, each in a BEGIN IMMEDIATE transaction
	r    *sql.DB // read-only connections (PRAGMA query_only)
	// stmts caches prepared statements of the hot single-row reads on r, by query (see readRow):
	// preparing (parsing) costs more than running them.
	stmts sync.Map // string → *sql.Stmt

	closeOnce sync.Once
	closeErr  error // set by the first Close
}

var _ store.Store = (*Store)(nil)

// Open opens the SQLite store at path, creating the file (mode 0600) and its directory (mode 0700) if
// missing, and migrates the schema to the current version. An existing file readable by group or others
// is tightened to 0600: it holds API key hashes and recorded responses. The database runs in WAL mode
// with synchronous=NORMAL and foreign keys on; Open fails if the file system cannot do WAL.
//
// path must name a file: ":memory:" and "file:" URIs are ErrInvalidArgument, since the reader and writer
// connections must share one database. A file whose schema is newer than this build is
// ErrFailedPrecondition. The caller owns the Store and must Close it.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("open sqlite store %q: need a file path: %w", path, errdefs.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	if err := prepareFile(abs); err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}

	s := &Store{path: abs}
	s.w, err = sql.Open("sqlite", dsn(abs, true))
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)

	if err := s.init(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("open sqlite store %s: %w", abs, err), s.w.Close())
	}

	s.r, err = sql.Open("sqlite", dsn(abs, false))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open sqlite store %s: %w", abs, err), s.w.Close())
	}
	n := max(4, runtime.GOMAXPROCS(0))
	s.r.SetMaxOpenConns(n)
	s.r.SetMaxIdleConns(n)
	if err := s.r.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("open sqlite store %s: readers: %w", abs, mapErr(err)), s.r.Close(), s.w.Close())
	}
	return s, nil
}

// init checks the writer connection's journal mode and migrates the schema.
func (s *Store) init(ctx context.Context) error {
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode: %w", mapErr(err))
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, want wal (does the file system support it?): %w", mode, errdefs.ErrFailedPrecondition)
	}
	return migrate(ctx, s.w)
}

// prepareFile makes sure the directory and the database file exist and that the file is 0600.
func prepareFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("create file: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Mode().Perm()&0o077 != 0 {
		err = f.Chmod(0o600)
	}
	return errors.Join(err, f.Close())
}

// dsn returns the driver's connection string for the file at path: a file: URI (so any character in the
// path is escaped) with the driver's connection parameters.
func dsn(path string, writer bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	if writer {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}
	return u.String()
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Close closes every connection. The first call's result is returned by every later call.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		s.stmts.Range(func(_, v any) bool {
			errs = append(errs, v.(*sql.Stmt).Close())
			return true
		})
		if s.r != nil {
			errs = append(errs, s.r.Close())
		}
		errs = append(errs, s.w.Close())
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("close sqlite store %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// readRow runs a single-row read on the read connections with a prepared statement, cached by query.
func (s *Store) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	if v, ok := s.stmts.Load(query); ok {
		return v.(*sql.Stmt).QueryRowContext(ctx, args...)
	}
	st, err := s.r.PrepareContext(ctx, query)
	if err != nil {
		return s.r.QueryRowContext(ctx, query, args...) // reports the error through Scan
	}
	if v, loaded := s.stmts.LoadOrStore(query, st); loaded {
		st.Close()
		st = v.(*sql.Stmt)
	}
	return st.QueryRowContext(ctx, args...)
}

// write runs fn in a transaction on the writer connection and commits it if fn returns nil.
// Errors from fn are returned as they are; errors from the database itself go through mapErr.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", mapErr(err))
	}
	if err := fn(tx); err != nil {
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

// mapErr adds the errdefs sentinel that matches a database error: constraint violations become
// ErrAlreadyExists (unique), ErrNotFound (a foreign key names a missing row) or ErrInvalidArgument
// (checks), and a lock that stayed busy becomes ErrUnavailable. Other errors are returned as they are.
func mapErr(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("%w: %w", errdefs.ErrAlreadyExists, err)
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CONSTRAINT:
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
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
func exists(ctx context.Context, tx *sql.Tx, query string, args ...any) (bool, error) {
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

// checkTenant returns ErrNotFound unless the tenant exists.
func checkTenant(ctx context.Context, tx *sql.Tx, tenantID string) error {
	ok, err := exists(ctx, tx, "SELECT 1 FROM tenants WHERE id = ?", tenantID)
	if err != nil {
		return fmt.Errorf("look up tenant %s: %w", tenantID, err)
	}
	if !ok {
		return fmt.Errorf("tenant %s: %w", tenantID, errdefs.ErrNotFound)
	}
	return nil
}
