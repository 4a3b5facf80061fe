package controlplane

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// TestMetrics: a sandbox's metrics come from its node, with the window as asked; a session's are its
// current sandbox's, none while it is paused; another tenant finds neither; the latest of many sessions
// leave out those without a sandbox and those not the tenant's, and are bounded.
func TestMetrics(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	other, _, _, err := e.s.CreateTenant(ctx, "other", "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := e.s.CreateSandbox(ctx, e.tenant, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := e.clk.Now()
	ss, err := e.s.SandboxMetrics(ctx, e.tenant, sb.ID, t0, t0.Add(time.Minute))
	if err != nil || len(ss) != 2 {
		t.Fatalf("SandboxMetrics = %+v, %v; want the node's two readings", ss, err)
	}
	if got := e.n.metricsAsked[len(e.n.metricsAsked)-1]; got != (metricsCall{sb.ID, t0, t0.Add(time.Minute)}) {
		t.Errorf("the node was asked %+v; want the sandbox and the window", got)
	}
	if _, err := e.s.SandboxMetrics(ctx, other.ID, sb.ID, time.Time{}, time.Time{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's SandboxMetrics: %v; want not found", err)
	}
	if _, err := e.s.SandboxMetrics(ctx, e.tenant, sb.ID, t0.Add(time.Second), t0); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("start after end: %v; want invalid argument", err)
	}
	if err := e.s.DeleteSandbox(ctx, e.tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if ss, err := e.s.SandboxMetrics(ctx, e.tenant, sb.ID, time.Time{}, time.Time{}); err != nil || ss == nil || len(ss) != 0 {
		t.Errorf("a stopped sandbox's metrics: %#v, %v; want an empty list", ss, err)
	}

	se := e.create(t, SessionRequest{})
	sbID, ss, err := e.s.SessionMetrics(ctx, e.tenant, se.ID, time.Time{}, time.Time{})
	if err != nil || sbID != se.SandboxID || len(ss) != 2 {
		t.Errorf("SessionMetrics = %s, %+v, %v; want its sandbox %s's readings", sbID, ss, err, se.SandboxID)
	}
	if _, _, err := e.s.SessionMetrics(ctx, other.ID, se.ID, time.Time{}, time.Time{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's SessionMetrics: %v; want not found", err)
	}
	paused := e.create(t, SessionRequest{})
	if _, err := e.s.PauseSession(ctx, e.tenant, paused.ID); err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	asked := len(e.n.metricsAsked)
	if sbID, ss, err := e.s.SessionMetrics(ctx, e.tenant, paused.ID, time.Time{}, time.Time{}); err != nil || sbID != "" || ss == nil || len(ss) != 0 {
		t.Errorf("a paused session's metrics: %q, %#v, %v; want none and no sandbox", sbID, ss, err)
	}
	if len(e.n.metricsAsked) != asked {
		t.Error("a paused session's metrics asked a node")
	}
	if got, err := e.s.GetSession(ctx, e.tenant, paused.ID); err != nil || got.State != "paused" {
		t.Errorf("after its metrics the paused session is %+v, %v; want it left paused", got, err)
	}

	// The latest of many: the running one (its last reading), not the paused, another tenant's, an
	// unknown or a repeated one.
	theirs, err := e.s.CreateSession(ctx, other.ID, SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	asked = len(e.n.metricsAsked)
	latest, err := e.s.LatestSessionMetrics(ctx, e.tenant, []string{se.ID, paused.ID, theirs.ID, "se_unknown", se.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(latest) != 1 || latest[se.ID].Time != t0.Add(5*time.Second) || latest[se.ID].DiskUsed != int64(len(se.SandboxID)) {
		t.Errorf("LatestSessionMetrics = %+v; want the last reading of %s only", latest, se.ID)
	}
	calls := e.n.metricsAsked[asked:]
	if len(calls) != 1 || calls[0].id != se.SandboxID || !calls[0].end.IsZero() || calls[0].start.After(e.clk.Now()) {
		t.Errorf("the node was asked %+v; want one call for %s reaching now", calls, se.SandboxID)
	}
	if _, err := e.s.LatestSessionMetrics(ctx, e.tenant, slices.Repeat([]string{se.ID}, MaxMetricsIDs+1)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("%d IDs: %v; want invalid argument", MaxMetricsIDs+1, err)
	}
	if latest, err := e.s.LatestSessionMetrics(ctx, e.tenant, nil); err != nil || latest == nil || len(latest) != 0 {
		t.Errorf("no IDs: %#v, %v; want an empty map", latest, err)
	}
}
