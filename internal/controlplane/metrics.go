package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
)

// Resource metrics of sandboxes and sessions: the node of each running sandbox keeps its readings
// (nodecontract.Sample, every nodecontract.SampleInterval for the last hour) and takes one on demand; the control plane
// checks the owner and asks the sandbox's node. A sandbox's readings go with it, so a session's are
// those of the sandbox that runs it now: a resumed session's begin at its resume.

// MaxMetricsIDs bounds the sessions one LatestSessionMetrics call reads.
const MaxMetricsIDs = 100

// metricsWorkers bounds the nodes LatestSessionMetrics asks at once.
const metricsWorkers = 8

// SandboxMetrics reports the resource use of the tenant's sandbox: the readings its node keeps taken in
// [start, end] (a zero bound is none), oldest first, and one taken now if end is zero or not before now.
// A sandbox that is not running has none (an empty list). Another tenant's sandbox is not found.
func (s *sandboxes) SandboxMetrics(ctx context.Context, tenantID, id string, start, end time.Time) ([]nodecontract.Sample, error) {
	if !start.IsZero() && !end.IsZero() && start.After(end) {
		return nil, fmt.Errorf("start must not be after end: %w", errdefs.ErrInvalidArgument)
	}
	sb, err := s.GetSandbox(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	if sb.State != store.StateRunning {
		return []nodecontract.Sample{}, nil
	}
	n, err := s.placer.sandboxNode(ctx, sb)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: metrics: %w", id, err)
	}
	ss, err := n.SandboxMetrics(ctx, sb.ID, start, end)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: metrics: %w", id, err)
	}
	return ss, nil
}

// SessionMetrics reports the resource use of the sandbox that runs the tenant's session now, as
// SandboxMetrics does, and names that sandbox. A session that no sandbox runs (paused, or between two)
// has none: an empty list and no sandbox. It neither touches nor resumes the session. Another tenant's
// session is not found.
func (s *sessions) SessionMetrics(ctx context.Context, tenantID, id string, start, end time.Time) (string, []nodecontract.Sample, error) {
	if !start.IsZero() && !end.IsZero() && start.After(end) {
		return "", nil, fmt.Errorf("start must not be after end: %w", errdefs.ErrInvalidArgument)
	}
	se, err := s.GetSession(ctx, tenantID, id)
	if err != nil {
		return "", nil, err
	}
	if se.State != store.SessionRunning || se.SandboxID == "" {
		return "", []nodecontract.Sample{}, nil
	}
	ss, err := s.sandboxes.SandboxMetrics(ctx, tenantID, se.SandboxID, start, end)
	if errors.Is(err, errdefs.ErrNotFound) {
		// The session moved on meanwhile (a pause or a resume).
		return "", []nodecontract.Sample{}, nil
	}
	if err != nil {
		return "", nil, err
	}
	if len(ss) == 0 {
		return "", ss, nil
	}
	return se.SandboxID, ss, nil
}

// LatestSessionMetrics reports a reading taken now of each of the tenant's sessions in ids that a
// sandbox runs, by session ID; the others (paused, deleted, another tenant's, unknown, or whose node
// did not answer) are left out. At most MaxMetricsIDs IDs; each is read once.
func (s *sessions) LatestSessionMetrics(ctx context.Context, tenantID string, ids []string) (map[string]nodecontract.Sample, error) {
	if len(ids) > MaxMetricsIDs {
		return nil, fmt.Errorf("%d sandbox IDs: at most %d at once: %w", len(ids), MaxMetricsIDs, errdefs.ErrInvalidArgument)
	}
	seen := map[string]bool{}
	work := make(chan string)
	out := map[string]nodecontract.Sample{}
	var mu sync.Mutex // guards out
	var wg sync.WaitGroup
	for range min(metricsWorkers, len(ids)) {
		wg.Add(1)
		go func() { // owner: this call; ends when work is closed
			defer wg.Done()
			for id := range work {
				// The last minute's readings and one now (the node's clock may differ from ours by a
				// little; a minute keeps the answer small all the same).
				_, ss, err := s.SessionMetrics(ctx, tenantID, id, s.now().Add(-time.Minute), time.Time{})
				if err != nil {
					if !errors.Is(err, errdefs.ErrNotFound) {
						s.log.Debug("latest session metrics", "session", id, "err", err)
					}
					continue
				}
				if len(ss) == 0 {
					continue
				}
				mu.Lock()
				out[id] = ss[len(ss)-1]
				mu.Unlock()
			}
		}()
	}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		select {
		case work <- id:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
