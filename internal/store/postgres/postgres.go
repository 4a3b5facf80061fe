package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlstore"
)

// Store is a store.Store in a PostgreSQL database. Create it with Open; it is safe for concurrent use,
// also by many processes (control-plane replicas) over one database.
type Store struct {
	*sqlstore.DB
	dsn string
}

var _ store.Store = (*Store)(nil)

// Pool bounds of each Store's connections.
const (
	maxOpenConns = 32
	maxIdleConns = 8
)

// migrationLock is the key of the advisory lock that serializes the migrations of processes starting
// at once against one database ("airlock" in ASCII).
const migrationLock = 0x6169726c6f636b

// Open connects to the database dsn names (a libpq connection string or a postgres:// URL), migrates
// its schema to this build's version, and returns the Store. A database whose schema is newer than this
// build is ErrFailedPrecondition; one that cannot be reached is ErrUnavailable. The caller must Close it.
//
// Concurrency: every write runs in a SERIALIZABLE transaction, which PostgreSQL aborts (SQLSTATE 40001)
// when a concurrent one could make the pair not serializable; the engine runs it again from the start.
// So the checks done inside a write (quotas, the audit chain's next sequence number, compare-and-set
// versions) hold across processes as they do within one SQLite writer.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: parse connection string: %v: %w", redact(err), errdefs.ErrInvalidArgument)
	}
	cfg := &cc.Config
	db := sql.OpenDB(stdlib.GetConnector(*cc))
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxIdleConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pingCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		return nil, errors.Join(fmt.Errorf("open postgres store %s: %v: %w", where(cfg), redact(err), errdefs.ErrUnavailable), db.Close())
	}
	if err := migrate(ctx, db); err != nil {
		return nil, errors.Join(fmt.Errorf("open postgres store %s: %w", where(cfg), err), db.Close())
	}
	return &Store{DB: sqlstore.New(sqlstore.Dialect{
		Name:      "postgres",
		Numbered:  true,
		TxOptions: &sql.TxOptions{Isolation: sql.LevelSerializable},
		Retry:     retryable,
	}, db, db), dsn: dsn}, nil
}

// where names the server for errors, without credentials.
func where(cfg *pgconn.Config) string {
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}

// redact keeps a connection error from carrying the password (pgconn's errors do not, but a parse
// error may quote the string).
func redact(err error) string {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return "invalid connection string"
	}
	return err.Error()
}

func init() { sqlstore.RegisterErrorMapper(mapPGErr) }

// retryable reports a serialization failure or a deadlock, or a connection that failed before anything
// was sent (a pooled connection the server closed): the transaction may run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return pgconn.SafeToRetry(err) || errors.Is(err, driver.ErrBadConn)
}

// mapPGErr adds the errdefs sentinel that matches a PostgreSQL error: unique violations become
// ErrAlreadyExists, foreign keys naming a missing row ErrNotFound, other constraint and data errors
// ErrInvalidArgument, and serialization failures that outlived their retries, lock timeouts and a
// server going away ErrUnavailable. It returns nil for errors that are not PostgreSQL's.
func mapPGErr(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		var ce *pgconn.ConnectError
		var ne net.Error
		if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) || errors.Is(err, driver.ErrBadConn) ||
			errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err) // the server went away
		}
		return nil
	}
	switch {
	case pe.Code == "23505":
		return fmt.Errorf("%w: %w", errdefs.ErrAlreadyExists, err)
	case pe.Code == "23503":
		return fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
	case pe.Code[:2] == "23", pe.Code[:2] == "22":
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	case pe.Code == "40001", pe.Code == "40P01", pe.Code == "55P03", pe.Code[:2] == "08", pe.Code[:2] == "57", pe.Code[:2] == "53":
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	return err
}

// migrate brings the schema up to len(migrations) in one transaction, under an advisory lock so that
// processes starting at once apply each migration once, and records each applied version in
// airlock_schema_migrations (named so as not to meet another tool's schema_migrations in a shared
// database). A database whose version is newer than this build is ErrFailedPrecondition.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", mapErr(err))
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLock)); err != nil {
		return fmt.Errorf("migrate: lock: %w", mapErr(err))
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS airlock_schema_migrations (
	version    INTEGER PRIMARY KEY,
	applied_at BIGINT  NOT NULL
)`); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", mapErr(err))
	}
	var current int
	if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM airlock_schema_migrations").Scan(&current); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", mapErr(err))
	}
	if current > len(migrations) {
		return fmt.Errorf("migrate: database schema version %d is newer than this build's %d: %w",
			current, len(migrations), errdefs.ErrFailedPrecondition)
	}
	for v := current + 1; v <= len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			return fmt.Errorf("migrate: apply version %d: %w", v, mapErr(err))
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO airlock_schema_migrations (version, applied_at) VALUES ($1, $2)",
			v, time.Now().UTC().UnixMicro()); err != nil {
			return fmt.Errorf("migrate: record version %d: %w", v, mapErr(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", mapErr(err))
	}
	return nil
}

// mapErr is mapPGErr for this package's own queries.
func mapErr(err error) error {
	if m := mapPGErr(err); m != nil {
		return m
	}
	return err
}
