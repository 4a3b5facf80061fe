package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const docCols = "name, value, version, updated_at"

// docs is the docs table.
var docs = table[store.Doc]{name: "docs", noun: "document", cols: docCols, scan: scanDoc}

// GetDoc implements store.Store.
func (s *DB) GetDoc(ctx context.Context, key string) (store.Doc, error) {
	if err := store.CheckDocKey(key); err != nil {
		return store.Doc{}, fmt.Errorf("get document: %w", err)
	}
	return docs.one(s.queryRowR(ctx, docs.selectWhere("name = ?"), key), "get document "+key)
}

// PutDoc implements store.Store.
func (s *DB) PutDoc(ctx context.Context, d store.Doc) (store.Doc, error) {
	if err := store.CheckDocKey(d.Key); err != nil {
		return store.Doc{}, fmt.Errorf("put document: %w", err)
	}
	switch {
	case len(d.Value) > store.MaxDocSize:
		return store.Doc{}, fmt.Errorf("put document %s: %d bytes, more than %d: %w", d.Key, len(d.Value), store.MaxDocSize, errdefs.ErrInvalidArgument)
	case d.Version < 0:
		return store.Doc{}, fmt.Errorf("put document %s: version %d: %w", d.Key, d.Version, errdefs.ErrInvalidArgument)
	}
	value := d.Value
	if value == nil {
		value = []byte{}
	}
	var out store.Doc
	err := s.write(ctx, func(tx *Tx) error {
		at := now()
		if d.Version == 0 {
			_, err := tx.ExecContext(ctx, "INSERT INTO docs ("+docCols+") VALUES (?, ?, 1, ?)", d.Key, value, micros(at))
			if err != nil {
				return mapErr(err)
			}
		} else {
			res, err := tx.ExecContext(ctx, "UPDATE docs SET value = ?, version = version + 1, updated_at = ? WHERE name = ? AND version = ?",
				value, micros(at), d.Key, d.Version)
			if err := docHit(ctx, tx, res, err, d.Key, d.Version); err != nil {
				return err
			}
		}
		out = store.Doc{Key: d.Key, Value: append([]byte(nil), value...), Version: d.Version + 1, UpdatedAt: at}
		return nil
	})
	if err != nil {
		return store.Doc{}, fmt.Errorf("put document %s: %w", d.Key, err)
	}
	return out, nil
}

// docHit returns nil if the statement of res (or err) on the docs row key at version hit it, and
// otherwise why not (see docMissOrStale).
func docHit(ctx context.Context, tx *Tx, res sql.Result, err error, key string, version int64) error {
	if err != nil {
		return mapErr(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return mapErr(err)
	} else if n == 0 {
		return docMissOrStale(ctx, tx, key, version)
	}
	return nil
}

// docMissOrStale tells why no row of docs had the name key at version: none has key (ErrNotFound), or another
// version is stored (ErrConflict).
func docMissOrStale(ctx context.Context, tx *Tx, key string, version int64) error {
	var cur int64
	err := tx.QueryRowContext(ctx, "SELECT version FROM docs WHERE name = ?", key).Scan(&cur)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return errdefs.ErrNotFound
	case err != nil:
		return mapErr(err)
	}
	return fmt.Errorf("stored version %d, not %d: %w", cur, version, errdefs.ErrConflict)
}

// DeleteDoc implements store.Store.
func (s *DB) DeleteDoc(ctx context.Context, key string, version int64) error {
	if err := store.CheckDocKey(key); err != nil {
		return fmt.Errorf("delete document: %w", err)
	}
	err := s.write(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM docs WHERE name = ? AND version = ?", key, version)
		return docHit(ctx, tx, res, err, key, version)
	})
	if err != nil {
		return fmt.Errorf("delete document %s: %w", key, err)
	}
	return nil
}

// ListDocs implements store.Store.
func (s *DB) ListDocs(ctx context.Context, prefix string) ([]store.Doc, error) {
	if prefix != "" {
		if err := store.CheckDocKey(prefix); err != nil {
			return nil, fmt.Errorf("list documents: %w", err)
		}
	}
	// Keys are printable ASCII, so every key with the prefix sorts from prefix up to (not including)
	// prefix followed by the byte above '~'.
	all, err := queryAll(ctx, s, docs.selectWhere("name >= ? AND name < ? ORDER BY name"), scanDoc, prefix, prefix+"\x7f")
	if err != nil {
		return nil, fmt.Errorf("list documents %q: %w", prefix, err)
	}
	var out []store.Doc
	for _, d := range all {
		if strings.HasPrefix(d.Key, prefix) {
			out = append(out, d)
		}
	}
	return out, nil
}

func scanDoc(row scanner) (store.Doc, error) {
	var (
		d  store.Doc
		at int64
	)
	if err := row.Scan(&d.Key, &d.Value, &d.Version, &at); err != nil {
		return store.Doc{}, err
	}
	if d.Value == nil {
		d.Value = []byte{}
	}
	d.UpdatedAt = fromMicros(at)
	return d, nil
}
