package controlplane

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// MaxLogRetention is the longest log retention a tenant may set.
const MaxLogRetention = 100 * 365 * 24 * time.Hour

// pruneBatch is how many audit entries one PruneAudit call deletes, in one transaction.
const pruneBatch = 1000

// LogRetention returns how long the tenant's logs are kept: its own setting (0: the server's default),
// what applies (0: forever), and the shortest it may set.
func (s *accounts) LogRetention(ctx context.Context, tenantID string) (own, effective, floor time.Duration, err error) {
	t, err := s.store.GetTenant(ctx, tenantID)
	if err != nil {
		return 0, 0, 0, err
	}
	own = time.Duration(t.LogRetentionSeconds) * time.Second
	return own, s.logRetentionOf(t), s.minLogRetention, nil
}

// SetLogRetention sets how long the tenant's logs are kept (0: the server's default). A retention
// shorter than the server's floor, or longer than MaxLogRetention, is refused.
func (s *accounts) SetLogRetention(ctx context.Context, tenantID string, d time.Duration) (own, effective, floor time.Duration, err error) {
	switch {
	case d < 0:
		return 0, 0, 0, fmt.Errorf("log retention %s is negative: %w", d, errdefs.ErrInvalidArgument)
	case d > 0 && d < s.minLogRetention:
		return 0, 0, 0, fmt.Errorf("log retention %s is shorter than this server's floor of %s: %w", d, s.minLogRetention, errdefs.ErrInvalidArgument)
	case d > MaxLogRetention:
		return 0, 0, 0, fmt.Errorf("log retention %s is longer than %s: %w", d, MaxLogRetention, errdefs.ErrInvalidArgument)
	case d%time.Second != 0:
		return 0, 0, 0, fmt.Errorf("log retention %s is not a whole number of seconds: %w", d, errdefs.ErrInvalidArgument)
	}
	t, err := s.store.UpdateTenantLogRetention(ctx, tenantID, int64(d/time.Second))
	if err != nil {
		return 0, 0, 0, err
	}
	return d, s.logRetentionOf(t), s.minLogRetention, nil
}

// logRetentionOf is how long tenant t's logs are kept (0: forever): its own setting, else the server's.
func (s *accounts) logRetentionOf(t store.Tenant) time.Duration {
	if t.LogRetentionSeconds > 0 {
		return time.Duration(t.LogRetentionSeconds) * time.Second
	}
	return s.logRetention
}

// pruneLogs deletes the audit entries older than their tenants' log retention. (The leader runs it.)
func (s *accounts) pruneLogs() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		s.log.Warn("prune audit logs: list tenants", "err", err)
		return
	}
	for _, t := range ts {
		keep := s.logRetentionOf(t)
		if keep <= 0 {
			continue
		}
		before, total := s.now().Add(-keep), 0
		for ctx.Err() == nil {
			n, err := s.store.PruneAudit(ctx, t.ID, before, pruneBatch)
			if err != nil {
				s.log.Warn("prune audit log", "tenant", t.ID, "err", err)
				break
			}
			if total += n; n < pruneBatch {
				break
			}
		}
		if total > 0 {
			s.log.Info("audit log pruned", "tenant", t.ID, "entries", total, "older_than", before.UTC().Format(time.RFC3339))
		}
	}
}

// flowLog returns what the node needs to keep a sandbox of the tenant's flow log: the tenant's flow key
// (flowKey) and how long its flows are kept (0: the node's default).
func (s *accounts) flowLog(ctx context.Context, tenantID string) ([]byte, time.Duration, error) {
	key, err := s.flowKey(ctx, tenantID)
	if err != nil {
		return nil, 0, err
	}
	t, err := s.store.GetTenant(ctx, tenantID)
	if err != nil {
		return nil, 0, fmt.Errorf("the tenant's log retention: %w", err)
	}
	return key, s.logRetentionOf(t), nil
}
