package storetest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// testListPagination pages through 120 sandboxes (in groups sharing a CreatedAt, so ID breaks ties) with
// several page sizes and checks every page against the expected order.
func testListPagination(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	var want []store.Sandbox
	for i := range 120 {
		at := base.Add(time.Duration(i/3) * time.Millisecond)
		want = append(want, mustSandbox(t, s, store.Sandbox{TenantID: a.ID, CreatedAt: at}))
		if i%12 == 0 { // interleave another tenant's sandboxes, which must never show up
			mustSandbox(t, s, store.Sandbox{TenantID: b.ID, CreatedAt: at})
		}
	}
	sandboxKind.sortCreated(want)

	for _, limit := range []int{1, 7, 10, 50, 119, 120, 121, 1000} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
			var got []store.Sandbox
			f := store.SandboxFilter{Limit: limit}
			pages := 0
			for {
				items, next, err := s.ListSandboxes(ctx, a.ID, f)
				wantErr(t, "ListSandboxes", err, nil)
				pages++
				got = append(got, items...)
				if next == "" {
					break
				}
				if len(items) != limit {
					t.Fatalf("page %d has %d items and a next cursor; want a full page of %d", pages, len(items), limit)
				}
				if pages > 200 {
					t.Fatalf("no last page after %d pages", pages)
				}
				f.Cursor = next
			}
			if wantPages := max(1, (120+limit-1)/limit); pages != wantPages {
				t.Errorf("got %d pages; want %d (a last page must not be followed by an empty one)", pages, wantPages)
			}
			if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
				t.Errorf("pages joined (-want +got):\n%s", diff)
			}
		})
	}
}

// testListStableUnderInserts creates sandboxes between pages: the ones that existed from the start are
// each returned exactly once, new ones after the cursor are returned, new ones before it are not.
func testListStableUnderInserts(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	orig := map[string]bool{}
	for i := range 60 {
		orig[mustSandbox(t, s, store.Sandbox{TenantID: a.ID, CreatedAt: base.Add(time.Duration(i) * time.Second)}).ID] = true
	}

	var (
		got    []store.Sandbox
		later  = map[string]bool{} // created after everything: must be listed
		sooner = map[string]bool{} // created before everything: behind the cursor, must not be listed
		f      = store.SandboxFilter{Limit: 7}
	)
	for page := 0; ; page++ {
		items, next, err := s.ListSandboxes(ctx, a.ID, f)
		wantErr(t, "ListSandboxes", err, nil)
		got = append(got, items...)
		if next == "" {
			break
		}
		if page > 100 {
			t.Fatalf("no last page after %d pages", page)
		}
		f.Cursor = next
		if page < 8 {
			sooner[mustSandbox(t, s, store.Sandbox{TenantID: a.ID, CreatedAt: base.Add(-time.Duration(page+1) * time.Second)}).ID] = true
			later[mustSandbox(t, s, store.Sandbox{TenantID: a.ID, CreatedAt: base.Add(time.Hour + time.Duration(page)*time.Second)}).ID] = true
		}
	}

	seen := map[string]int{}
	for i, sb := range got {
		seen[sb.ID]++
		if i > 0 {
			prev := got[i-1]
			if c := prev.CreatedAt.Compare(sb.CreatedAt); c > 0 || (c == 0 && prev.ID >= sb.ID) {
				t.Errorf("items %d and %d out of order: %s@%v then %s@%v", i-1, i, prev.ID, prev.CreatedAt, sb.ID, sb.CreatedAt)
			}
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("sandbox %s listed %d times", id, n)
		}
		if sooner[id] {
			t.Errorf("sandbox %s created behind the cursor was listed", id)
		}
	}
	for id := range orig {
		if seen[id] == 0 {
			t.Errorf("sandbox %s, there from the start, was missed", id)
		}
	}
	for id := range later {
		if seen[id] == 0 {
			t.Errorf("sandbox %s, created after the cursor, was missed", id)
		}
	}
}

// testListFilters checks state and metadata filters, alone and together, across pages, against the
// same selection made in Go.
func testListFilters(t *testing.T, s store.Store) {
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	states := store.SandboxStates()
	teams, envs := []string{"red", "blue"}, []string{"prod", "dev", "test"}

	var all []store.Sandbox
	for i := range 40 {
		meta := map[string]string{"team": teams[i%2], "env": envs[i%3]}
		if i%4 == 0 {
			meta["x"] = "1"
		}
		sb := mustSandbox(t, s, store.Sandbox{TenantID: a.ID, CreatedAt: base.Add(time.Duration(i) * time.Second), Metadata: meta})
		all = append(all, drive(t, s, sb, states[i%len(states)]))
	}
	for i := range 10 { // the same labels in another tenant
		sb := mustSandbox(t, s, store.Sandbox{TenantID: b.ID, CreatedAt: base.Add(time.Duration(i) * time.Second),
			Metadata: map[string]string{"team": teams[i%2], "env": envs[i%3], "x": "1"}})
		drive(t, s, sb, states[i%len(states)])
	}

	tests := []store.SandboxFilter{
		{},
		{States: []store.SandboxState{store.StateRunning}},
		{States: []store.SandboxState{store.StateRunning, store.StateFailed}},
		{States: states},
		{Metadata: map[string]string{"team": "red"}},
		{Metadata: map[string]string{"team": "red", "env": "prod"}},
		{Metadata: map[string]string{"team": "red", "env": "prod", "x": "1"}},
		{Metadata: map[string]string{"x": "1"}},
		{Metadata: map[string]string{"x": "2"}},
		{Metadata: map[string]string{"team": "green"}},
		{Metadata: map[string]string{"nokey": ""}},
		{Metadata: map[string]string{"team": "blue"}, States: []store.SandboxState{store.StateStopped, store.StateCreating}},
		{Metadata: map[string]string{"env": "dev", "x": "1"}, States: []store.SandboxState{store.StateStopping}},
	}
	for _, f := range tests {
		name := fmt.Sprintf("states=%v/metadata=%v", f.States, f.Metadata)
		t.Run(name, func(t *testing.T) {
			var want []store.Sandbox
			for _, sb := range all {
				if matches(sb, f) {
					want = append(want, sb)
				}
			}
			for _, limit := range []int{3, 100} {
				f.Limit = limit
				got := listAll(t, s, a.ID, f)
				if diff := cmp.Diff(sandboxKind.ids(want), sandboxKind.ids(got)); diff != "" {
					t.Errorf("limit %d: IDs (-want +got):\n%s", limit, diff)
				}
			}
			// Full objects, not only IDs.
			f.Limit = 100
			if diff := cmp.Diff(want, listAll(t, s, a.ID, f), cmpOpts...); diff != "" {
				t.Errorf("sandboxes (-want +got):\n%s", diff)
			}
		})
	}
}

// matches is the filter semantics written in Go.
func matches(sb store.Sandbox, f store.SandboxFilter) bool {
	if len(f.States) > 0 && !slices.Contains(f.States, sb.State) {
		return false
	}
	for k, v := range f.Metadata {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func testListLimitsAndBadInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "a")

	items, next, err := s.ListSandboxes(ctx, a.ID, store.SandboxFilter{})
	wantErr(t, "ListSandboxes(empty tenant)", err, nil)
	if len(items) != 0 || next != "" {
		t.Errorf("ListSandboxes(empty tenant) = %d items, cursor %q; want none", len(items), next)
	}
	items, next, err = s.ListSandboxes(ctx, "tn_missing", store.SandboxFilter{})
	wantErr(t, "ListSandboxes(unknown tenant)", err, nil)
	if len(items) != 0 || next != "" {
		t.Errorf("ListSandboxes(unknown tenant) = %d items, cursor %q; want none", len(items), next)
	}

	n := store.DefaultListLimit + 10
	if !testing.Short() {
		n = store.MaxListLimit + 1
	}
	for i := range n {
		mustSandbox(t, s, store.Sandbox{TenantID: a.ID, CreatedAt: base.Add(time.Duration(i) * time.Millisecond)})
	}
	items, next, err = s.ListSandboxes(ctx, a.ID, store.SandboxFilter{})
	wantErr(t, "ListSandboxes(limit 0)", err, nil)
	if len(items) != store.DefaultListLimit || next == "" {
		t.Errorf("ListSandboxes(limit 0) = %d items, cursor %q; want %d and a cursor", len(items), next, store.DefaultListLimit)
	}
	items, next, err = s.ListSandboxes(ctx, a.ID, store.SandboxFilter{Limit: 1 << 30})
	wantErr(t, "ListSandboxes(huge limit)", err, nil)
	if want := min(n, store.MaxListLimit); len(items) != want || (next == "") != (n <= store.MaxListLimit) {
		t.Errorf("ListSandboxes(huge limit) = %d items, cursor %q; want %d (the limit is capped at %d)",
			len(items), next, want, store.MaxListLimit)
	}

	bad := map[string]store.SandboxFilter{
		"negative limit":     {Limit: -1},
		"garbage cursor":     {Cursor: "not-a-cursor"},
		"unknown state":      {States: []store.SandboxState{"paused"}},
		"empty metadata key": {Metadata: map[string]string{"": "x"}},
	}
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		_, _, err := s.ListSandboxes(ctx, a.ID, bad[name])
		wantErr(t, "ListSandboxes("+name+")", err, errdefs.ErrInvalidArgument)
	}
}

// testListByState checks the cross-tenant state query of the lifecycle loops.
func testListByState(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	plan := []struct {
		tenant string
		state  store.SandboxState
	}{
		{a.ID, store.StateRunning}, {a.ID, store.StateRunning}, {a.ID, store.StateFailed},
		{a.ID, store.StateCreating}, {a.ID, store.StateStopped}, {b.ID, store.StateRunning},
		{b.ID, store.StateStopping}, {b.ID, store.StateFailed}, {b.ID, store.StateRunning},
	}
	var all []store.Sandbox
	for i, p := range plan {
		sb := mustSandbox(t, s, store.Sandbox{TenantID: p.tenant, CreatedAt: base.Add(time.Duration(i) * time.Second)})
		all = append(all, drive(t, s, sb, p.state))
	}
	// Touch the first running sandbox again: it becomes the most recently updated.
	all[0].Reason = "touched"
	touched, err := s.UpdateSandbox(ctx, all[0])
	wantErr(t, "UpdateSandbox", err, nil)
	all[0] = touched

	checkByState(t, s, sandboxKind, all, [][]store.SandboxState{
		nil,
		{store.StateRunning},
		{store.StateRunning, store.StateFailed},
		{store.StateStopping, store.StateStopped},
	}, func(sb store.Sandbox) (time.Time, string) { return sb.UpdatedAt, sb.ID }, false, "paused")
}

// testListOnNode checks the per-node queries of placement, failover and reconcile: the sandboxes of
// one node page by page, and what each node holds.
func testListOnNode(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	plan := []struct {
		tenant, node string
		state        store.SandboxState
		memMB        int
	}{
		{a.ID, "n1", store.StateRunning, 256}, {b.ID, "n1", store.StateRunning, 512}, {a.ID, "n1", store.StateCreating, 128},
		{a.ID, "n1", store.StateStopped, 1024}, {b.ID, "n1", store.StateStopping, 64}, {a.ID, "n1", store.StateFailed, 2048},
		{a.ID, "n2", store.StateRunning, 300}, {b.ID, "n2", store.StateStopped, 700}, {a.ID, "n3", store.StateFailed, 900},
	}
	var all []store.Sandbox
	for _, p := range plan {
		sb := mustSandbox(t, s, store.Sandbox{TenantID: p.tenant, NodeID: p.node, Spec: store.SandboxSpec{MemoryMB: p.memMB}})
		all = append(all, drive(t, s, sb, p.state))
	}
	active := []store.SandboxState{store.StateCreating, store.StateRunning, store.StateStopping}
	for _, tc := range []struct {
		node   string
		states []store.SandboxState
	}{{"n1", nil}, {"n1", active}, {"n1", []store.SandboxState{store.StateStopped}}, {"n2", active}, {"n3", active}, {"none", nil}} {
		var want []string
		for _, sb := range all {
			if sb.NodeID == tc.node && (len(tc.states) == 0 || slices.Contains(tc.states, sb.State)) {
				want = append(want, sb.ID)
			}
		}
		slices.Sort(want)
		// Pages of two, each after the last ID of the one before.
		var got []string
		after := ""
		for range 10 {
			page, err := s.ListSandboxesOnNode(ctx, tc.node, tc.states, after, 2)
			wantErr(t, fmt.Sprintf("ListSandboxesOnNode(%s, %v, %q)", tc.node, tc.states, after), err, nil)
			got = append(got, sandboxKind.ids(page)...)
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1].ID
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("ListSandboxesOnNode(%s, %v) IDs (-want +got):\n%s", tc.node, tc.states, diff)
		}
	}
	_, err := s.ListSandboxesOnNode(ctx, "n1", []store.SandboxState{"paused"}, "", 0)
	wantErr(t, "ListSandboxesOnNode(unknown state)", err, errdefs.ErrInvalidArgument)
	_, err = s.ListSandboxesOnNode(ctx, "n1", nil, "", -1)
	wantErr(t, "ListSandboxesOnNode(negative limit)", err, errdefs.ErrInvalidArgument)

	use, err := s.NodeUsage(ctx, active)
	wantErr(t, "NodeUsage", err, nil)
	want := map[string]store.NodeUse{"n1": {Sandboxes: 4, MemoryMB: 256 + 512 + 128 + 64}, "n2": {Sandboxes: 1, MemoryMB: 300}}
	if diff := cmp.Diff(want, use); diff != "" {
		t.Errorf("NodeUsage(active) (-want +got):\n%s", diff)
	}
	use, err = s.NodeUsage(ctx, []store.SandboxState{store.StateFailed})
	wantErr(t, "NodeUsage(failed)", err, nil)
	want = map[string]store.NodeUse{"n1": {Sandboxes: 1, MemoryMB: 2048}, "n3": {Sandboxes: 1, MemoryMB: 900}}
	if diff := cmp.Diff(want, use); diff != "" {
		t.Errorf("NodeUsage(failed) (-want +got):\n%s", diff)
	}
	_, err = s.NodeUsage(ctx, nil)
	wantErr(t, "NodeUsage(no state)", err, errdefs.ErrInvalidArgument)
	_, err = s.NodeUsage(ctx, []store.SandboxState{"paused"})
	wantErr(t, "NodeUsage(unknown state)", err, errdefs.ErrInvalidArgument)
}

// testListExpired checks the timeout query: creating or running, EndsAt set and not after now.
func testListExpired(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	ref := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	mk := func(id, tenant string, state store.SandboxState, ends *time.Time) {
		t.Helper()
		drive(t, s, mustSandbox(t, s, store.Sandbox{ID: id, TenantID: tenant, EndsAt: ends}), state)
	}
	mk("sb_e1", a.ID, store.StateRunning, ptr(ref.Add(-10*time.Second)))
	mk("sb_e2", a.ID, store.StateCreating, ptr(ref)) // exactly at the deadline: expired
	mk("sb_e3", a.ID, store.StateRunning, ptr(ref.Add(time.Microsecond)))
	mk("sb_e4", a.ID, store.StateRunning, nil)
	mk("sb_e5", a.ID, store.StateStopping, ptr(ref.Add(-time.Hour)))
	mk("sb_e6", a.ID, store.StateFailed, ptr(ref.Add(-time.Hour)))
	mk("sb_e7", a.ID, store.StateStopped, ptr(ref.Add(-time.Hour)))
	mk("sb_e8", b.ID, store.StateRunning, ptr(ref.Add(-20*time.Second)))

	tests := []struct {
		now   time.Time
		limit int
		want  []string
	}{
		{ref, 0, []string{"sb_e8", "sb_e1", "sb_e2"}},
		{ref.In(time.FixedZone("x", -7*3600)), 0, []string{"sb_e8", "sb_e1", "sb_e2"}},
		{ref, 2, []string{"sb_e8", "sb_e1"}},
		{ref.Add(-15 * time.Second), 0, []string{"sb_e8"}},
		{ref.Add(-time.Minute), 0, nil},
		{ref.Add(time.Second), 0, []string{"sb_e8", "sb_e1", "sb_e2", "sb_e3"}},
	}
	for _, tt := range tests {
		got, err := s.ListExpiredSandboxes(ctx, tt.now, tt.limit)
		wantErr(t, "ListExpiredSandboxes", err, nil)
		if diff := cmp.Diff(tt.want, sandboxKind.ids(got), cmpOpts...); diff != "" {
			t.Errorf("ListExpiredSandboxes(%v, %d) IDs (-want +got):\n%s", tt.now, tt.limit, diff)
		}
	}
	_, err := s.ListExpiredSandboxes(ctx, ref, -1)
	wantErr(t, "ListExpiredSandboxes(negative limit)", err, errdefs.ErrInvalidArgument)
}
