package sqlstore

import (
	"context"
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

// listByState lists up to limit rows of every tenant from table whose state is one of states (any when
// empty), ordered by order then id: the lifecycle loops' listings.
func listByState[S interface {
	~string
	Valid() bool
}, T any](ctx context.Context, s *DB, table, cols, order string, states []S, limit int, scan func(scanner) (T, error)) ([]T, error) {
	limit, err := store.NormalizeLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list %s by state: %w", table, err)
	}
	if err := validStates(states); err != nil {
		return nil, fmt.Errorf("list %s by state: %w", table, err)
	}
	query := "SELECT " + cols + " FROM " + table
	var args []any
	if len(states) > 0 {
		w, a := in("state", states)
		query += " WHERE " + w
		args = a
	}
	query += " ORDER BY " + order + ", id LIMIT ?"
	out, err := queryAll(ctx, s, query, scan, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list %s by state: %w", table, err)
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
