package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// page builds the tenant-scoped, cursor-paged listings: tenant_id = ?, the conditions in where and
// args, the metadata filter over metaTable (whose fkCol names the object) and the page after cursor,
// ordered by created_at and id (both descending if desc). The query asks for one row more than limit, to learn whether there is a
// next page (see nextPage).
func page(cols, table string, tenantID string, where []string, args []any, metaTable, fkCol string, metadata map[string]string, cursor string, limit int, desc bool) (string, []any) {
	where = append([]string{"tenant_id = ?"}, where...)
	args = append([]any{tenantID}, args...)
	for _, k := range slices.Sorted(maps.Keys(metadata)) {
		where = append(where, "id IN (SELECT "+fkCol+" FROM "+metaTable+" WHERE key = ? AND value = ?)")
		args = append(args, k, metadata[k])
	}
	if cursor != "" {
		c, _ := store.ParseCursor(cursor) // the filter's Validate checked it
		us := micros(c.CreatedAt)
		cmp := ">"
		if desc {
			cmp = "<"
		}
		where = append(where, "(created_at "+cmp+" ? OR (created_at = ? AND id "+cmp+" ?))")
		args = append(args, us, us, c.ID)
	}
	order := " ORDER BY created_at, id LIMIT ?"
	if desc {
		order = " ORDER BY created_at DESC, id DESC LIMIT ?"
	}
	return "SELECT " + cols + " FROM " + table + " WHERE " + strings.Join(where, " AND ") + order, append(args, limit+1)
}

// listByState lists up to limit rows of every tenant from table t whose state is one of states (any
// when empty), ordered by order then id: the lifecycle loops' listings.
func listByState[S interface {
	~string
	Valid() bool
}, T any](ctx context.Context, s *DB, t table[T], order string, states []S, limit int) ([]T, error) {
	limit, err := store.NormalizeLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list %s by state: %w", t.name, err)
	}
	if err := validStates(states); err != nil {
		return nil, fmt.Errorf("list %s by state: %w", t.name, err)
	}
	query := "SELECT " + t.cols + " FROM " + t.name
	var args []any
	if len(states) > 0 {
		w, a := in("state", states)
		query += " WHERE " + w
		args = a
	}
	query += " ORDER BY " + order + ", id LIMIT ?"
	out, err := queryAll(ctx, s, query, t.scan, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list %s by state: %w", t.name, err)
	}
	return out, nil
}

// validStates checks every state of states; a bad one is ErrInvalidArgument.
func validStates[S interface {
	~string
	Valid() bool
}](states []S) error {
	for _, st := range states {
		if !st.Valid() {
			return fmt.Errorf("state %q: %w", st, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// queryAll runs a SELECT on the readers and scans every row with scan.
func queryAll[T any](ctx context.Context, s *DB, query string, scan func(scanner) (T, error), args ...any) ([]T, error) {
	rows, err := s.queryR(ctx, query, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, mapErr(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

// nextPage cuts the one extra row page asked for and returns the page and the next page's cursor ("" on
// the last page).
func nextPage[T any](out []T, limit int, key func(T) (time.Time, string)) ([]T, string) {
	if len(out) <= limit {
		return out, ""
	}
	out = out[:limit]
	at, id := key(out[len(out)-1])
	return out, store.Cursor{CreatedAt: at, ID: id}.Encode()
}

// table is what the generic queries know of an entity's table.
type table[T any] struct {
	name string                      // the table: "sandboxes"
	noun string                      // one row, in errors: "sandbox"
	cols string                      // its columns, in the order scan reads them
	scan func(scanner) (T, error)    // scans a row of cols
	key  func(T) (time.Time, string) // the row's created_at and id: a listing's order
	// meta is the side table of metadata that a listing filters on ("" for none), and metaFK its
	// column naming the row.
	meta, metaFK string
}

// selectWhere is the SELECT of the table's columns under cond.
func (t table[T]) selectWhere(cond string) string {
	return "SELECT " + t.cols + " FROM " + t.name + " WHERE " + cond
}

// one reads the row that the single-row query row finds, with the table's scan; none is ErrNotFound,
// and every error is wrapped with what.
func (t table[T]) one(row scanner, what string) (T, error) {
	v, err := t.scan(row)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", what, noRowsIsNotFound(err))
	}
	return v, nil
}

// listing is one tenant-scoped, cursor-paged listing of a table (see table.page).
type listing struct {
	where    []string // conditions besides the tenant's
	args     []any    // their arguments
	metadata map[string]string
	cursor   string
	limit    int // as asked: a filter's Validate checked it
	desc     bool
}

// withStates returns l with the condition that the row's state is one of states, if any are given.
func withStates[S ~string](l listing, states []S) listing {
	if len(states) > 0 {
		w, a := in("state", states)
		l.where, l.args = append(l.where, w), append(l.args, a...)
	}
	return l
}

// page runs listing l of the tenant's rows (see page) and returns a page and the next page's cursor.
func (t table[T]) page(ctx context.Context, s *DB, tenantID string, l listing) ([]T, string, error) {
	limit, _ := store.NormalizeLimit(l.limit) // the filter's Validate checked it
	query, args := page(t.cols, t.name, tenantID, l.where, l.args, t.meta, t.metaFK, l.metadata, l.cursor, limit, l.desc)
	out, err := queryAll(ctx, s, query, t.scan, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list %s of tenant %s: %w", t.name, tenantID, err)
	}
	out, next := nextPage(out, limit, t.key)
	return out, next, nil
}

// update runs a versioned update of the tenant's row id in a write transaction: it reads the stored
// row (ErrNotFound if there is none), and apply checks next against it and writes it. A transaction
// that runs again starts again from in. It returns next as apply left it.
func (t table[T]) update(ctx context.Context, s *DB, in T, id, tenantID string, apply func(tx *Tx, cur T, next *T) error) (T, error) {
	var next T
	err := s.write(ctx, func(tx *Tx) error {
		next = in
		cur, err := t.scan(tx.QueryRowContext(ctx, t.selectWhere("id = ? AND tenant_id = ?"), id, tenantID))
		if err != nil {
			return noRowsIsNotFound(err)
		}
		return apply(tx, cur, &next)
	})
	if err != nil {
		var zero T
		return zero, fmt.Errorf("update %s %s: %w", t.noun, id, err)
	}
	return next, nil
}

// checkVersion returns ErrConflict unless an update asked of version is of the stored one.
func checkVersion(version, stored int64) error {
	if version != stored {
		return fmt.Errorf("version %d is stale, stored version is %d: %w", version, stored, errdefs.ErrConflict)
	}
	return nil
}

// later returns t, or not if it is before floor (an update time is never moved backwards, even if the
// clock is).
func later(t, floor time.Time) time.Time {
	if t.Before(floor) {
		return floor
	}
	return t
}

// insertMetadata writes the side-table rows of row id that a listing filters on.
func (t table[T]) insertMetadata(ctx context.Context, tx *Tx, id string, meta map[string]string) error {
	for k, v := range meta {
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+t.meta+" ("+t.metaFK+", key, value) VALUES (?, ?, ?)", id, k, v); err != nil {
			return fmt.Errorf("insert metadata %q: %w", k, mapErr(err))
		}
	}
	return nil
}

// replaceMetadata rewrites the side-table rows of row id if its metadata changed from old to meta.
func (t table[T]) replaceMetadata(ctx context.Context, tx *Tx, id string, old, meta map[string]string) error {
	if maps.Equal(old, meta) {
		return nil
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+t.meta+" WHERE "+t.metaFK+" = ?", id); err != nil {
		return fmt.Errorf("clear metadata: %w", mapErr(err))
	}
	return t.insertMetadata(ctx, tx, id, meta)
}

// stateOf reads the state of the tenant's row id of table in tx; no row is ErrNotFound.
func stateOf[S ~string](ctx context.Context, tx *Tx, table, id, tenantID string) (S, error) {
	var state S
	err := tx.QueryRowContext(ctx, "SELECT state FROM "+table+" WHERE id = ? AND tenant_id = ?", id, tenantID).Scan(&state)
	return state, noRowsIsNotFound(err)
}

// deleteRow deletes the tenant's row id of table in tx; no row is ErrNotFound.
func deleteRow(ctx context.Context, tx *Tx, table, id, tenantID string) error {
	res, err := tx.ExecContext(ctx, "DELETE FROM "+table+" WHERE id = ? AND tenant_id = ?", id, tenantID)
	return oneRow(res, err)
}

// unheld returns ErrConflict naming the session that query (a SELECT of one session's ID) finds: it
// resumes from what is to be deleted, what names it.
func unheld(ctx context.Context, tx *Tx, what, query string, args ...any) error {
	var heldBy string
	err := tx.QueryRowContext(ctx, query, args...).Scan(&heldBy)
	switch {
	case err == nil:
		return fmt.Errorf("session %s resumes from %s: %w", heldBy, what, errdefs.ErrConflict)
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("look up sessions resuming from %s: %w", what, mapErr(err))
	}
	return nil
}

// execOne runs a statement on the writer that must hit one row (see oneRow); errors are wrapped with
// what.
func execOne(ctx context.Context, s *DB, what, query string, args ...any) error {
	res, err := s.execW(ctx, query, args...)
	if err := oneRow(res, err); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// execCount runs a statement on the writer and reports how many rows it hit; errors are wrapped with
// what.
func execCount(ctx context.Context, s *DB, what, query string, args ...any) (int64, error) {
	res, err := s.execW(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, mapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, mapErr(err))
	}
	return n, nil
}

// copyMap returns a copy of m of its own, never nil.
func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	maps.Copy(out, m)
	return out
}

// encodeMap returns the JSON of m, for a metadata column; what names the column in errors.
func encodeMap(m map[string]string, what string) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", what, err)
	}
	return string(b), nil
}

// decodeMap decodes a metadata column, never to nil (a column that held JSON null is empty); what
// names the row and column in errors.
func decodeMap(col, what string) (map[string]string, error) {
	m := map[string]string{}
	if err := json.Unmarshal([]byte(col), &m); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if m == nil {
		m = map[string]string{}
	}
	return m, nil
}
