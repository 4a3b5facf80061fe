// Package storetest is the conformance suite for store.Store: every engine (sqlite, postgres, …) runs
// Run against a real instance, so all of them keep the same contract.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { … a new, empty store, closed by t.Cleanup … },
//			storetest.WithReopen(…))
//	}
//
// The suite has concurrent subtests; run it with -race.
package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlockrun/airlock/internal/store"
)

// Option changes what Run checks.
type Option func(*config)

type config struct {
	reopen func(t *testing.T, s store.Store) store.Store
}

// WithReopen enables the persistence tests. reopen must close s and return a new Store over the same
// data (as a restarted process would see it); the suite closes what it returns, and may reopen that.
func WithReopen(reopen func(t *testing.T, s store.Store) store.Store) Option {
	return func(c *config) { c.reopen = reopen }
}

// Run runs the conformance suite. newStore must return a new, empty Store for each call and arrange for
// it to be closed when t ends (t.Cleanup); Close must therefore tolerate being called twice.
func Run(t *testing.T, newStore func(t *testing.T) store.Store, opts ...Option) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Tenants", testTenants},
		{"TenantRetention", testTenantRetention},
		{"APIKeys", testAPIKeys},
		{"APIKeyTouchAndRevoke", testAPIKeyTouchAndRevoke},
		{"TenantDisable", testTenantDisable},
		{"TenantKeyProvider", testTenantKeyProvider},
		{"TenantQuotas", testTenantQuotas},
		{"AccessTokens", testAccessTokens},
		{"AccessTokensDieWithTheirKey", testAccessTokensDieWithTheirKey},
		{"AccessTokenLimits", testAccessTokenLimits},
		{"Leases", testLeases},
		{"LeaseRace", testLeaseRace},
		{"SandboxCreateGet", testSandboxCreateGet},
		{"SandboxTimes", testSandboxTimes},
		{"SandboxUpdate", testSandboxUpdate},
		{"SandboxTransitions", testSandboxTransitions},
		{"SandboxOptimisticConcurrency", testSandboxOptimisticConcurrency},
		{"SandboxConcurrentUpdates", testSandboxConcurrentUpdates},
		{"SandboxConcurrentCreates", testSandboxConcurrentCreates},
		{"SandboxDelete", testSandboxDelete},
		{"ListPagination", testListPagination},
		{"ListStableUnderInserts", testListStableUnderInserts},
		{"ListFilters", testListFilters},
		{"ListLimitsAndBadInput", testListLimitsAndBadInput},
		{"ListByState", testListByState},
		{"ListExpired", testListExpired},
		{"ListOnNode", testListOnNode},
		{"SessionCreateGet", testSessionCreateGet},
		{"SessionTimes", testSessionTimes},
		{"SessionUpdate", testSessionUpdate},
		{"SessionTransitions", testSessionTransitions},
		{"SessionConcurrentUpdates", testSessionConcurrentUpdates},
		{"SessionTouch", testSessionTouch},
		{"SessionList", testSessionList},
		{"SessionListByState", testSessionListByState},
		{"SessionListIdle", testSessionListIdle},
		{"SessionListEnded", testSessionListEnded},
		{"SessionDelete", testSessionDelete},
		{"SnapshotCreateGet", testSnapshotCreateGet},
		{"SnapshotNames", testSnapshotNames},
		{"SnapshotUpdate", testSnapshotUpdate},
		{"SnapshotTransitions", testSnapshotTransitions},
		{"SnapshotConcurrentUpdates", testSnapshotConcurrentUpdates},
		{"SnapshotList", testSnapshotList},
		{"SnapshotListByState", testSnapshotListByState},
		{"SnapshotUploading", testSnapshotUploading},
		{"SnapshotDelete", testSnapshotDelete},
		{"Idempotency", testIdempotency},
		{"Audit", testAudit},
		{"AuditConcurrent", testAuditConcurrent},
		{"AuditPrune", testAuditPrune},
		{"Docs", testDocs},
		{"DocsConcurrent", testDocsConcurrent},
		{"Close", testClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newStore(t)) })
	}
	t.Run("Reopen", func(t *testing.T) {
		if c.reopen == nil {
			t.Skip("engine gave no reopen func (storetest.WithReopen)")
		}
		testReopen(t, newStore(t), c.reopen)
	})
}

// Helpers shared by the tests.

// base is a fixed time in the past that tests build CreatedAt values on.
var base = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

// cmpOpts compare stored values: nil and empty slices and maps are the same.
var cmpOpts = []cmp.Option{cmpopts.EquateEmpty()}

// wantErr fails t unless err matches want (errors.Is); want nil means no error.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("%s: got error %v; want none", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v; want %v", what, err, want)
	}
}

func mustTenant(t *testing.T, s store.Store, name string) store.Tenant {
	t.Helper()
	tn, err := s.CreateTenant(t.Context(), store.Tenant{Name: name})
	if err != nil {
		t.Fatalf("CreateTenant(%q): %v", name, err)
	}
	return tn
}

func mustSandbox(t *testing.T, s store.Store, sb store.Sandbox) store.Sandbox {
	t.Helper()
	if sb.Template == "" {
		sb.Template = "base"
	}
	got, err := s.CreateSandbox(t.Context(), sb)
	if err != nil {
		t.Fatalf("CreateSandbox(%+v): %v", sb, err)
	}
	return got
}

// pathTo is a legal way from creating to each state.
var pathTo = map[store.SandboxState][]store.SandboxState{
	store.StateCreating: nil,
	store.StateRunning:  {store.StateRunning},
	store.StateStopping: {store.StateStopping},
	store.StateFailed:   {store.StateFailed},
	store.StateStopped:  {store.StateStopping, store.StateStopped},
}

// drive moves a creating sandbox to the given state along pathTo and returns it as stored.
func drive(t *testing.T, s store.Store, sb store.Sandbox, to store.SandboxState) store.Sandbox {
	t.Helper()
	for _, st := range pathTo[to] {
		sb.State = st
		var err error
		if sb, err = s.UpdateSandbox(t.Context(), sb); err != nil {
			t.Fatalf("UpdateSandbox(%s → %s): %v", sb.ID, st, err)
		}
	}
	return sb
}

// ids returns the IDs of sbs, in order.
func ids(sbs []store.Sandbox) []string {
	out := make([]string, len(sbs))
	for i, sb := range sbs {
		out[i] = sb.ID
	}
	return out
}

// sortByCreated sorts sandboxes the way ListSandboxes orders them.
func sortByCreated(sbs []store.Sandbox) {
	slices.SortFunc(sbs, func(a, b store.Sandbox) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// listAll pages through ListSandboxes with f and returns every item, failing t on a repeated cursor.
func listAll(t *testing.T, s store.Store, tenantID string, f store.SandboxFilter) []store.Sandbox {
	t.Helper()
	var all []store.Sandbox
	seen := map[string]bool{}
	for page := 0; ; page++ {
		if page > 10000 {
			t.Fatalf("ListSandboxes: no end after %d pages", page)
		}
		items, next, err := s.ListSandboxes(t.Context(), tenantID, f)
		if err != nil {
			t.Fatalf("ListSandboxes(%s, %+v): %v", tenantID, f, err)
		}
		all = append(all, items...)
		if next == "" {
			return all
		}
		if seen[next] {
			t.Fatalf("ListSandboxes returned cursor %q twice", next)
		}
		seen[next] = true
		if len(items) == 0 {
			t.Fatalf("ListSandboxes returned an empty page with next cursor %q", next)
		}
		f.Cursor = next
	}
}

// checkUTC fails t if any time of sb is not in UTC.
func checkUTC(t *testing.T, sb store.Sandbox) {
	t.Helper()
	times := map[string]*time.Time{"CreatedAt": &sb.CreatedAt, "UpdatedAt": &sb.UpdatedAt,
		"StartedAt": sb.StartedAt, "EndsAt": sb.EndsAt, "StoppedAt": sb.StoppedAt}
	for name, tm := range times {
		if tm != nil && tm.Location() != time.UTC {
			t.Errorf("sandbox %s: %s location = %v; want UTC", sb.ID, name, tm.Location())
		}
	}
}

func ptr[T any](v T) *T { return &v }
