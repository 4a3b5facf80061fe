package controlplane

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// TestLogRetention: a tenant's log retention (its own, else the server's default) deletes its older
// audit entries and leaves a chain that verifies; the server's floor and bad values are refused.
func TestLogRetention(t *testing.T) {
	ctx := context.Background()
	s, st, _, clk, tenant := setup(t)
	other, err := st.CreateTenant(ctx, store.Tenant{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	var entries []store.AuditEntry
	for i, age := range []time.Duration{3 * time.Hour, 2 * time.Hour, 2 * time.Hour, 90 * time.Minute, 10 * time.Minute, time.Minute} {
		for _, tn := range []string{tenant, other.ID} {
			entries = append(entries, store.AuditEntry{TenantID: tn, Time: clk.Now().Add(-age), Kind: store.AuditAPI,
				Action: "GET /v1/things", Target: string(rune('a' + i)), Result: "200"})
		}
	}
	if err := st.AppendAudit(ctx, entries); err != nil {
		t.Fatal(err)
	}
	seqs := func(tn string) []int64 {
		t.Helper()
		got, err := st.ListAudit(ctx, tn, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if i, why := store.VerifyAudit(got, false); i != -1 {
			t.Errorf("tenant %s's log does not verify at %d: %s", tn, i, why)
		}
		var out []int64
		for _, e := range got {
			out = append(out, e.Seq)
		}
		return out
	}

	// Nothing set: kept forever.
	if own, eff, floor, err := s.LogRetention(ctx, tenant); err != nil || own != 0 || eff != 0 || floor != 0 {
		t.Fatalf("LogRetention = %s, %s, %s, %v; want all zero", own, eff, floor, err)
	}
	s.pruneLogs()
	if got := seqs(tenant); len(got) != 6 {
		t.Fatalf("with no retention, the log is %v; want all 6 entries", got)
	}

	// The tenant's own: 100 minutes cuts the three older than that (and records the cut).
	if own, eff, _, err := s.SetLogRetention(ctx, tenant, 100*time.Minute); err != nil || own != 100*time.Minute || eff != 100*time.Minute {
		t.Fatalf("SetLogRetention(100m) = %s, %s, %v", own, eff, err)
	}
	s.pruneLogs()
	if got := seqs(tenant); len(got) != 4 || got[0] != 4 || got[3] != 7 {
		t.Errorf("after a cut at 100 minutes, the log is %v; want 4, 5, 6 and the cut's record 7", got)
	}
	if got := seqs(other.ID); len(got) != 6 {
		t.Errorf("the other tenant's log is %v; want all 6 entries (its retention is the server's: forever)", got)
	}

	// The server's default applies to a tenant without its own.
	s.accounts.logRetention = 30 * time.Minute
	if _, eff, _, err := s.LogRetention(ctx, other.ID); err != nil || eff != 30*time.Minute {
		t.Errorf("the other tenant's retention = %s, %v; want the server's 30m", eff, err)
	}
	s.pruneLogs()
	if got := seqs(other.ID); len(got) != 3 || got[0] != 5 {
		t.Errorf("after the server's cut at 30 minutes, the other tenant's log is %v; want 5, 6 and the cut's record", got)
	}

	// Bad values, and the server's floor.
	s.accounts.minLogRetention = time.Hour
	for _, d := range []time.Duration{-time.Second, 10 * time.Minute, MaxLogRetention + time.Second, time.Hour + time.Millisecond} {
		if _, _, _, err := s.SetLogRetention(ctx, tenant, d); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("SetLogRetention(%s) = %v; want invalid argument", d, err)
		}
	}
	for _, d := range []time.Duration{0, time.Hour, MaxLogRetention} {
		if own, _, floor, err := s.SetLogRetention(ctx, tenant, d); err != nil || own != d || floor != time.Hour {
			t.Errorf("SetLogRetention(%s) = %s, floor %s, %v", d, own, floor, err)
		}
	}
	if _, _, _, err := s.SetLogRetention(ctx, "tn_missing", time.Hour); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetLogRetention(unknown tenant) = %v; want not found", err)
	}
	if _, err := New(Config{Store: st, Node: newFakeNode(t), LogRetention: -time.Hour}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New with a negative log retention = %v; want invalid argument", err)
	}
}
