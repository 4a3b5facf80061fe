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
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlockrun/airlock/internal/errdefs"
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
	return driveAlong(t, s, sandboxKind, sb, pathTo[to])
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
	checkTimesUTC(t, "sandbox "+sb.ID, map[string]*time.Time{"CreatedAt": &sb.CreatedAt, "UpdatedAt": &sb.UpdatedAt,
		"StartedAt": sb.StartedAt, "EndsAt": sb.EndsAt, "StoppedAt": sb.StoppedAt})
}

func ptr[T any](v T) *T { return &v }

// kind is what the tests every kind of versioned object shares (sandboxes, sessions, snapshots) know of
// one: T is the object, S its state; its calls are the Store's methods.
type kind[T any, S ~string] struct {
	name    string                                                                        // as in the Store's methods: "Sandbox"
	fields  func(*T) (tenantID, id *string, state *S, version *int64, created *time.Time) // the object's
	update  func(store.Store, context.Context, T) (T, error)
	get     func(s store.Store, ctx context.Context, tenantID, id string) (T, error)
	byState func(store.Store, context.Context, []S, int) ([]T, error)
}

// The kinds of versioned objects.
var (
	sandboxKind = kind[store.Sandbox, store.SandboxState]{"Sandbox", func(v *store.Sandbox) (*string, *string, *store.SandboxState, *int64, *time.Time) {
		return &v.TenantID, &v.ID, &v.State, &v.Version, &v.CreatedAt
	}, store.Store.UpdateSandbox, store.Store.GetSandbox, store.Store.ListSandboxesByState}
	sessionKind = kind[store.Session, store.SessionState]{"Session", func(v *store.Session) (*string, *string, *store.SessionState, *int64, *time.Time) {
		return &v.TenantID, &v.ID, &v.State, &v.Version, &v.CreatedAt
	}, store.Store.UpdateSession, store.Store.GetSession, store.Store.ListSessionsByState}
	snapshotKind = kind[store.Snapshot, store.SnapshotState]{"Snapshot", func(v *store.Snapshot) (*string, *string, *store.SnapshotState, *int64, *time.Time) {
		return &v.TenantID, &v.ID, &v.State, &v.Version, &v.CreatedAt
	}, store.Store.UpdateSnapshot, store.Store.GetSnapshot, store.Store.ListSnapshotsByState}
)

func (k kind[T, S]) id(v T) string       { _, id, _, _, _ := k.fields(&v); return *id }
func (k kind[T, S]) state(v T) S         { _, _, st, _, _ := k.fields(&v); return *st }
func (k kind[T, S]) version(v T) int64   { _, _, _, ver, _ := k.fields(&v); return *ver }
func (k kind[T, S]) setState(v *T, st S) { _, _, p, _, _ := k.fields(v); *p = st }
func (k kind[T, S]) noun() string        { return strings.ToLower(k.name) }

// plural is the name of more than one, as in the Store's methods: "Sandboxes".
func (k kind[T, S]) plural() string {
	if strings.HasSuffix(k.name, "x") {
		return k.name + "es"
	}
	return k.name + "s"
}

// stored reads the object stored under v's tenant and ID.
func (k kind[T, S]) stored(ctx context.Context, s store.Store, v T) (T, error) {
	tenantID, id, _, _, _ := k.fields(&v)
	return k.get(s, ctx, *tenantID, *id)
}

// ids returns the IDs of vs, in order.
func (k kind[T, S]) ids(vs []T) []string { return idsOf(vs, k.id) }

// sortCreated sorts vs the way the tenant's listings order them: by CreatedAt, then by ID.
func (k kind[T, S]) sortCreated(vs []T) {
	sortBy(vs, func(v T) (time.Time, string) { _, id, _, _, created := k.fields(&v); return *created, *id })
}

// driveAlong updates v to each state of path in turn and returns it as stored.
func driveAlong[T any, S ~string](t *testing.T, s store.Store, k kind[T, S], v T, path []S) T {
	t.Helper()
	for _, st := range path {
		k.setState(&v, st)
		var err error
		if v, err = k.update(s, t.Context(), v); err != nil {
			t.Fatalf("Update%s(%s → %s): %v", k.name, k.id(v), st, err)
		}
	}
	return v
}

// idsOf returns the IDs of vs (as id reads them), in order.
func idsOf[T any](vs []T, id func(T) string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = id(v)
	}
	return out
}

// sortBy sorts vs by key: a time, then an ID.
func sortBy[T any](vs []T, key func(T) (time.Time, string)) {
	slices.SortFunc(vs, func(x, y T) int {
		xt, xid := key(x)
		yt, yid := key(y)
		if c := xt.Compare(yt); c != 0 {
			return c
		}
		return strings.Compare(xid, yid)
	})
}

// checkTimesUTC fails t if any of the times of what, by name, is not in UTC (nil: not set).
func checkTimesUTC(t *testing.T, what string, times map[string]*time.Time) {
	t.Helper()
	for name, tm := range times {
		if tm != nil && tm.Location() != time.UTC {
			t.Errorf("%s: %s location = %v; want UTC", what, name, tm.Location())
		}
	}
}

// checkTransitions tries every pair of states, each on a new object that in stores in state from:
// allowed transitions are stored, the others fail with ErrConflict naming both states and leave the
// object as it was.
func checkTransitions[T any, S interface {
	~string
	CanTransition(S) bool
}](t *testing.T, s store.Store, k kind[T, S], states []S, in func(t *testing.T, from S) T) {
	for _, from := range states {
		for _, to := range states {
			t.Run(fmt.Sprintf("%s_to_%s", from, to), func(t *testing.T) {
				v := in(t, from)
				next := v
				k.setState(&next, to)
				got, err := k.update(s, t.Context(), next)
				if from == to || from.CanTransition(to) {
					wantErr(t, "Update"+k.name, err, nil)
					if k.state(got) != to || k.version(got) != k.version(v)+1 {
						t.Errorf("Update%s = state %s version %d; want %s version %d", k.name, k.state(got), k.version(got), to, k.version(v)+1)
					}
					return
				}
				wantErr(t, "Update"+k.name, err, errdefs.ErrConflict)
				for _, st := range []S{from, to} {
					if !strings.Contains(err.Error(), string(st)) {
						t.Errorf("error %q does not name state %s", err, st)
					}
				}
				checkStored(t, s, k, v, k.noun()+" changed by a refused transition")
			})
		}
	}
}

// raceUpdates races n updates of v from its one Version, writer i's made by change(i, &u): exactly one
// wins, the others fail with ErrConflict. It returns the winner and the object as then stored.
func raceUpdates[T any, S ~string](t *testing.T, s store.Store, k kind[T, S], v T, n int, change func(i int, u *T)) (int, T) {
	t.Helper()
	errs := race(n, func(i int) error {
		u := v
		change(i, &u)
		_, err := k.update(s, t.Context(), u)
		return err
	})
	var won []int
	for i, err := range errs {
		if err == nil {
			won = append(won, i)
		} else if !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("writer %d: got error %v; want nil or ErrConflict", i, err)
		}
	}
	if len(won) == 0 {
		t.Fatalf("no writer won")
	}
	if len(won) > 1 {
		t.Errorf("writers %v all won; want one", won)
	}
	winner := won[0]
	stored, err := k.stored(t.Context(), s, v)
	wantErr(t, "Get"+k.name, err, nil)
	return winner, stored
}

// checkByState checks the cross-tenant state query of the lifecycle loops over all, the objects
// stored: for each of the sets of states (nil: any) it lists those in order (by key, ascending), all
// of them and the first two, comparing whole objects (full) or their IDs; a state bad and a negative
// limit are ErrInvalidArgument.
func checkByState[T any, S ~string](t *testing.T, s store.Store, k kind[T, S], all []T, sets [][]S, key func(T) (time.Time, string), full bool, bad S) {
	t.Helper()
	ctx := t.Context()
	method := "List" + k.plural() + "ByState"
	for _, states := range sets {
		var want []T
		for _, v := range all {
			if len(states) == 0 || slices.Contains(states, k.state(v)) {
				want = append(want, v)
			}
		}
		sortBy(want, key)
		got, err := k.byState(s, ctx, states, 0)
		wantErr(t, fmt.Sprintf("%s(%v)", method, states), err, nil)
		if full {
			if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
				t.Errorf("%s(%v) (-want +got):\n%s", method, states, diff)
			}
		} else if diff := cmp.Diff(k.ids(want), k.ids(got)); diff != "" {
			t.Errorf("%s(%v) IDs (-want +got):\n%s", method, states, diff)
		}
		got, err = k.byState(s, ctx, states, 2)
		wantErr(t, fmt.Sprintf("%s(%v, 2)", method, states), err, nil)
		if diff := cmp.Diff(k.ids(want)[:min(2, len(want))], k.ids(got)); diff != "" {
			t.Errorf("%s(%v, 2) IDs (-want +got):\n%s", method, states, diff)
		}
	}
	_, err := k.byState(s, ctx, []S{bad}, 0)
	wantErr(t, method+"(unknown state)", err, errdefs.ErrInvalidArgument)
	_, err = k.byState(s, ctx, nil, -1)
	wantErr(t, method+"(negative limit)", err, errdefs.ErrInvalidArgument)
}

// checkStored fails t unless the object stored under want's tenant and ID is want; what names the
// check. It returns the stored object.
func checkStored[T any, S ~string](t *testing.T, s store.Store, k kind[T, S], want T, what string) T {
	t.Helper()
	got, err := k.stored(t.Context(), s, want)
	wantErr(t, "Get"+k.name, err, nil)
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
	return got
}

// race runs call(0) … call(n-1) at once (all released together) and returns their errors, in order.
func race(n int, call func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = call(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// checkWins fails t unless exactly wins of the concurrent calls what (their errors errs) succeeded,
// and the others failed with refused.
func checkWins(t *testing.T, what string, errs []error, wins int, refused error) {
	t.Helper()
	n := 0
	for i, err := range errs {
		switch {
		case err == nil:
			n++
		case !errors.Is(err, refused):
			t.Errorf("goroutine %d: %s: %v; want nil or %v", i, what, err, refused)
		}
	}
	if n != wins {
		t.Errorf("%d of the %d calls %s succeeded; want %d", n, len(errs), what, wins)
	}
}
