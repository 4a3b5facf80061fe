package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// MigrateTo creates (or opens) the database file at path and brings its schema up to version, and no
// further, as the build that knew only that many migrations would have left it. It lets tests check that
// a later migration keeps what an older schema held.
func MigrateTo(ctx context.Context, path string, version int) error {
	if err := prepareFile(path); err != nil {
		return fmt.Errorf("migrate %s to version %d: %w", path, version, err)
	}
	db, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return fmt.Errorf("migrate %s to version %d: %w", path, version, err)
	}
	return errors.Join(migrateTo(ctx, db, version), db.Close())
}
