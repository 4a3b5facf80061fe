// Package sqlite is the embedded store.Store engine: one SQLite file (pure Go, no cgo) under the data
// directory, in WAL mode, so a single binary needs nothing else installed. The queries are the shared
// engine's (internal/store/sqlstore); this package opens the file and owns its schema.
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
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlstore"
)

// busyTimeout is how long a statement waits for a lock held by another connection or process before
// failing with SQLITE_BUSY (reported as errdefs.ErrUnavailable).
const busyTimeout = 10 * time.Second

// Store is a store.Store kept in one SQLite file. Create it with Open; it is safe for concurrent use.
// Its queries are the shared engine's (internal/store/sqlstore).
type Store struct {
	*sqlstore.DB
	path string
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

	w, err := sql.Open("sqlite", dsn(abs, true))
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	if err := initDB(ctx, w); err != nil {
		return nil, errors.Join(fmt.Errorf("open sqlite store %s: %w", abs, err), w.Close())
	}

	r, err := sql.Open("sqlite", dsn(abs, false))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open sqlite store %s: %w", abs, err), w.Close())
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	if err := r.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("open sqlite store %s: readers: %w", abs, mapErr(err)), r.Close(), w.Close())
	}
	// Writes queue on the one writer connection (BEGIN IMMEDIATE, from the DSN), so they never conflict.
	return &Store{DB: sqlstore.New(sqlstore.Dialect{Name: "sqlite"}, w, r), path: abs}, nil
}

// initDB checks the writer connection's journal mode and migrates the schema.
func initDB(ctx context.Context, w *sql.DB) error {
	var mode string
	if err := w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode: %w", mapErr(err))
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, want wal (does the file system support it?): %w", mode, errdefs.ErrFailedPrecondition)
	}
	return migrate(ctx, w)
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

func init() { sqlstore.RegisterErrorMapper(mapSQLiteErr) }

// mapErr is mapSQLiteErr for this package's own queries (migrations).
func mapErr(err error) error {
	if m := mapSQLiteErr(err); m != nil {
		return m
	}
	return err
}

// mapSQLiteErr adds the errdefs sentinel that matches an SQLite error: constraint violations become
// ErrAlreadyExists (unique), ErrNotFound (a foreign key names a missing row) or ErrInvalidArgument
// (checks), and a lock that stayed busy becomes ErrUnavailable. It returns nil for other errors.
func mapSQLiteErr(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return nil
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
