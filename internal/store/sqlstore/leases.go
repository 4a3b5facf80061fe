package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

const leaseCols = "resource, holder, token, acquired_at, expires_at"

func checkLeaseArgs(resource, holder string, ttl time.Duration) error {
	switch {
	case resource == "" || holder == "":
		return fmt.Errorf("resource and holder are required: %w", errdefs.ErrInvalidArgument)
	case len(resource) > 256 || len(holder) > 256:
		return fmt.Errorf("resource and holder are at most 256 bytes: %w", errdefs.ErrInvalidArgument)
	case ttl <= 0:
		return fmt.Errorf("ttl %v: want a positive duration: %w", ttl, errdefs.ErrInvalidArgument)
	}
	return nil
}

// leases is the leases table.
var leases = table[store.Lease]{name: "leases", noun: "lease", cols: leaseCols, scan: scanLease}

// AcquireLease implements store.Store.
func (s *DB) AcquireLease(ctx context.Context, resource, holder string, ttl time.Duration) (store.Lease, error) {
	if err := checkLeaseArgs(resource, holder, ttl); err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %s: %w", resource, err)
	}
	var out store.Lease
	err := s.write(ctx, func(tx *Tx) error {
		at := now()
		l := store.Lease{Resource: resource, Holder: holder, Token: 1, AcquiredAt: at, ExpiresAt: store.NormalizeTime(at.Add(ttl))}
		cur, err := scanLease(tx.QueryRowContext(ctx, "SELECT "+leaseCols+" FROM leases WHERE resource = ?", resource))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.ExecContext(ctx, "INSERT INTO leases ("+leaseCols+") VALUES (?, ?, ?, ?, ?)",
				l.Resource, l.Holder, l.Token, micros(l.AcquiredAt), micros(l.ExpiresAt)); err != nil {
				return mapErr(err)
			}
			out = l
			return nil
		case err != nil:
			return mapErr(err)
		case cur.Holder == holder && !cur.Expired(at):
			l.Token, l.AcquiredAt = cur.Token, cur.AcquiredAt // a renewal
		case !cur.Expired(at):
			return fmt.Errorf("held by %s until %s: %w", cur.Holder, cur.ExpiresAt.Format(time.RFC3339Nano), errdefs.ErrConflict)
		default:
			l.Token = cur.Token + 1 // a new holder, or the same one after its lease ran out
		}
		if _, err := tx.ExecContext(ctx, "UPDATE leases SET holder = ?, token = ?, acquired_at = ?, expires_at = ? WHERE resource = ?",
			l.Holder, l.Token, micros(l.AcquiredAt), micros(l.ExpiresAt), resource); err != nil {
			return mapErr(err)
		}
		out = l
		return nil
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %s for %s: %w", resource, holder, err)
	}
	return out, nil
}

// current returns the resource's lease within tx if holder holds it with token and it has not expired
// at at, and ErrConflict (or ErrNotFound) saying why not otherwise.
func currentLease(ctx context.Context, tx *Tx, resource, holder string, token int64, at time.Time) (store.Lease, error) {
	cur, err := scanLease(tx.QueryRowContext(ctx, "SELECT "+leaseCols+" FROM leases WHERE resource = ?", resource))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return cur, errdefs.ErrNotFound
	case err != nil:
		return cur, mapErr(err)
	case cur.Holder != holder || cur.Token != token:
		return cur, fmt.Errorf("the lease is %s's now (token %d, not %d): %w", cur.Holder, cur.Token, token, errdefs.ErrConflict)
	case cur.Expired(at):
		return cur, fmt.Errorf("the lease expired at %s: %w", cur.ExpiresAt.Format(time.RFC3339Nano), errdefs.ErrConflict)
	}
	return cur, nil
}

// RenewLease implements store.Store.
func (s *DB) RenewLease(ctx context.Context, resource, holder string, token int64, ttl time.Duration) (store.Lease, error) {
	if err := checkLeaseArgs(resource, holder, ttl); err != nil {
		return store.Lease{}, fmt.Errorf("renew lease %s: %w", resource, err)
	}
	var out store.Lease
	err := s.write(ctx, func(tx *Tx) error {
		at := now()
		cur, err := currentLease(ctx, tx, resource, holder, token, at)
		if err != nil {
			return err
		}
		cur.ExpiresAt = store.NormalizeTime(at.Add(ttl))
		if _, err := tx.ExecContext(ctx, "UPDATE leases SET expires_at = ? WHERE resource = ?", micros(cur.ExpiresAt), resource); err != nil {
			return mapErr(err)
		}
		out = cur
		return nil
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("renew lease %s for %s: %w", resource, holder, err)
	}
	return out, nil
}

// ReleaseLease implements store.Store.
func (s *DB) ReleaseLease(ctx context.Context, resource, holder string, token int64) error {
	err := s.write(ctx, func(tx *Tx) error {
		at := now()
		cur, err := currentLease(ctx, tx, resource, holder, token, at)
		if err != nil {
			if cur.Holder == holder && cur.Token == token && cur.Expired(at) {
				return nil // ran out already
			}
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE leases SET expires_at = ? WHERE resource = ?", micros(at), resource)
		return mapErr(err)
	})
	if err != nil {
		return fmt.Errorf("release lease %s for %s: %w", resource, holder, err)
	}
	return nil
}

// GetLease implements store.Store.
func (s *DB) GetLease(ctx context.Context, resource string) (store.Lease, error) {
	return leases.one(s.queryRowR(ctx, leases.selectWhere("resource = ?"), resource), "get lease "+resource)
}

func scanLease(row scanner) (store.Lease, error) {
	var (
		l                 store.Lease
		acquired, expires int64
	)
	if err := row.Scan(&l.Resource, &l.Holder, &l.Token, &acquired, &expires); err != nil {
		return store.Lease{}, err
	}
	l.AcquiredAt, l.ExpiresAt = fromMicros(acquired), fromMicros(expires)
	return l, nil
}
