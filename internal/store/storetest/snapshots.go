package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

func testSnapshotCreateGet(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	se := mustSession(t, s, store.Session{TenantID: a.ID})
	other := mustSession(t, s, store.Session{TenantID: a.ID})
	bSession := mustSession(t, s, store.Session{TenantID: b.ID})

	before := store.NormalizeTime(time.Now())
	sn, err := s.CreateSnapshot(ctx, store.Snapshot{TenantID: a.ID, SessionID: se.ID, Trigger: store.TriggerManual})
	wantErr(t, "CreateSnapshot(defaults)", err, nil)
	if !strings.HasPrefix(sn.ID, "sn_") {
		t.Errorf("assigned snapshot ID = %q; want prefix sn_", sn.ID)
	}
	if sn.CreatedAt.Before(before) || sn.CreatedAt.After(time.Now()) || sn.CreatedAt.Location() != time.UTC {
		t.Errorf("assigned CreatedAt = %v; want UTC, about now (after %v)", sn.CreatedAt, before)
	}
	want := store.Snapshot{ID: sn.ID, TenantID: a.ID, SessionID: se.ID, Trigger: store.TriggerManual,
		State: store.SnapshotWriting, Meta: map[string]string{}, CreatedAt: sn.CreatedAt, Version: 1}
	if diff := cmp.Diff(want, sn, cmpOpts...); diff != "" {
		t.Errorf("CreateSnapshot(defaults) returned (-want +got):\n%s", diff)
	}
	if sn.Meta == nil {
		t.Errorf("CreateSnapshot returned nil Meta; want an empty map")
	}
	if got, _ := s.GetSnapshot(ctx, a.ID, sn.ID); got.Meta == nil {
		t.Errorf("GetSnapshot returned nil Meta; want an empty map")
	}

	zone := time.FixedZone("UTC-3", -3*3600)
	in := store.Snapshot{
		ID: "sn_full", TenantID: a.ID, SessionID: se.ID, ParentID: sn.ID, Name: "before upgrade",
		Trigger: store.TriggerPause, State: store.SnapshotComplete, Reason: "done", Pinned: true,
		LogicalBytes: 1 << 40, StoredBytes: 12345, Meta: map[string]string{"manifest": "m1", "ünï": ""},
		CreatedAt:   time.Date(2024, 2, 29, 23, 59, 59, 123456789, zone),
		CompletedAt: ptr(time.Date(2024, 3, 1, 0, 0, 1, 999, zone)),
	}
	full, err := s.CreateSnapshot(ctx, in)
	wantErr(t, "CreateSnapshot(full)", err, nil)
	want = in
	want.CreatedAt = store.NormalizeTime(in.CreatedAt)
	want.CompletedAt = store.NormalizeTimePtr(in.CompletedAt)
	want.Version = 1
	if diff := cmp.Diff(want, full, cmpOpts...); diff != "" {
		t.Errorf("CreateSnapshot(full) returned (-want +got):\n%s", diff)
	}
	checkSnapshotUTC(t, full)
	in.Meta["manifest"] = "changed"
	if full.Meta["manifest"] != "m1" {
		t.Errorf("CreateSnapshot returned meta aliasing the caller's map")
	}
	got, err := s.GetSnapshot(ctx, a.ID, full.ID)
	wantErr(t, "GetSnapshot", err, nil)
	checkSnapshotUTC(t, got)
	if diff := cmp.Diff(full, got, cmpOpts...); diff != "" {
		t.Errorf("GetSnapshot (-want +got):\n%s", diff)
	}

	// Every trigger is kept; a parent may be a snapshot of another session of the tenant (a fork's source).
	for _, tr := range store.SnapshotTriggers() {
		sn := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: other.ID, ParentID: full.ID, Trigger: tr})
		if got, err := s.GetSnapshot(ctx, a.ID, sn.ID); err != nil || got.Trigger != tr || got.ParentID != full.ID {
			t.Errorf("GetSnapshot = %+v, %v; want trigger %s, parent %s", got, err, tr, full.ID)
		}
	}

	// Tenant isolation.
	_, err = s.GetSnapshot(ctx, b.ID, full.ID)
	wantErr(t, "GetSnapshot(other tenant)", err, errdefs.ErrNotFound)
	_, err = s.GetSnapshot(ctx, a.ID, "sn_missing")
	wantErr(t, "GetSnapshot(missing)", err, errdefs.ErrNotFound)

	ok := store.Snapshot{TenantID: a.ID, SessionID: se.ID, Trigger: store.TriggerManual}
	bad := []struct {
		name   string
		change func(*store.Snapshot)
		want   error
	}{
		{"duplicate ID", func(sn *store.Snapshot) { sn.ID = "sn_full" }, errdefs.ErrAlreadyExists},
		{"duplicate ID in another tenant", func(sn *store.Snapshot) {
			sn.ID, sn.TenantID, sn.SessionID = "sn_full", b.ID, bSession.ID
		}, errdefs.ErrAlreadyExists},
		{"duplicate name", func(sn *store.Snapshot) { sn.Name = "before upgrade" }, errdefs.ErrAlreadyExists},
		{"unknown tenant", func(sn *store.Snapshot) { sn.TenantID = "tn_missing" }, errdefs.ErrNotFound},
		{"missing session", func(sn *store.Snapshot) { sn.SessionID = "se_missing" }, errdefs.ErrNotFound},
		{"other tenant's session", func(sn *store.Snapshot) { sn.SessionID = bSession.ID }, errdefs.ErrNotFound},
		{"session of another tenant", func(sn *store.Snapshot) { sn.TenantID = b.ID }, errdefs.ErrNotFound},
		{"missing parent", func(sn *store.Snapshot) { sn.ParentID = "sn_missing" }, errdefs.ErrNotFound},
		{"no tenant", func(sn *store.Snapshot) { sn.TenantID = "" }, errdefs.ErrInvalidArgument},
		{"no session", func(sn *store.Snapshot) { sn.SessionID = "" }, errdefs.ErrInvalidArgument},
		{"no trigger", func(sn *store.Snapshot) { sn.Trigger = "" }, errdefs.ErrInvalidArgument},
		{"unknown trigger", func(sn *store.Snapshot) { sn.Trigger = "cron" }, errdefs.ErrInvalidArgument},
		{"initial state uploading", func(sn *store.Snapshot) { sn.State = store.SnapshotUploading }, errdefs.ErrInvalidArgument},
		{"initial state failed", func(sn *store.Snapshot) { sn.State = store.SnapshotFailed }, errdefs.ErrInvalidArgument},
		{"unknown state", func(sn *store.Snapshot) { sn.State = "deleted" }, errdefs.ErrInvalidArgument},
		{"negative logical bytes", func(sn *store.Snapshot) { sn.LogicalBytes = -1 }, errdefs.ErrInvalidArgument},
		{"negative stored bytes", func(sn *store.Snapshot) { sn.StoredBytes = -1 }, errdefs.ErrInvalidArgument},
		{"empty meta key", func(sn *store.Snapshot) { sn.Meta = map[string]string{"": "x"} }, errdefs.ErrInvalidArgument},
	}
	bSnap := mustSnapshot(t, s, store.Snapshot{TenantID: b.ID, SessionID: bSession.ID})
	bad = append(bad, struct {
		name   string
		change func(*store.Snapshot)
		want   error
	}{"other tenant's parent", func(sn *store.Snapshot) { sn.ParentID = bSnap.ID }, errdefs.ErrNotFound})
	for _, tt := range bad {
		sn := ok
		tt.change(&sn)
		_, err := s.CreateSnapshot(ctx, sn)
		wantErr(t, "CreateSnapshot("+tt.name+")", err, tt.want)
	}
	// The failed creates stored nothing and left the original alone.
	if got, err := s.GetSnapshot(ctx, a.ID, full.ID); err != nil || !cmp.Equal(got, full, cmpOpts...) {
		t.Errorf("GetSnapshot(sn_full) after failed creates = %+v, %v; want %+v", got, err, full)
	}
	if items := listAllSnapshots(t, s, a.ID, store.SnapshotFilter{SessionID: se.ID}); len(items) != 2 {
		t.Errorf("session has %d snapshots after failed creates; want 2: %v", len(items), snapshotKind.ids(items))
	}
}

// testSnapshotNames checks that a non-empty name is unique within its session, on create and on update.
func testSnapshotNames(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	se, other := mustSession(t, s, store.Session{TenantID: a.ID}), mustSession(t, s, store.Session{TenantID: a.ID})

	x := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, Name: "x"})
	y := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, Name: "y", State: store.SnapshotComplete})
	for range 3 { // unnamed snapshots are many
		mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID})
	}
	mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: other.ID, Name: "x"}) // per session
	_, err := s.CreateSnapshot(ctx, store.Snapshot{TenantID: a.ID, SessionID: se.ID, Name: "x", Trigger: store.TriggerManual})
	wantErr(t, "CreateSnapshot(taken name)", err, errdefs.ErrAlreadyExists)
	_, err = s.CreateSnapshot(ctx, store.Snapshot{TenantID: a.ID, SessionID: se.ID, Name: "X", Trigger: store.TriggerManual})
	wantErr(t, "CreateSnapshot(name differing in case)", err, nil)

	// Renaming onto a taken name fails; keeping one's own name, or taking a freed one, works.
	u := y
	u.Name = "x"
	_, err = s.UpdateSnapshot(ctx, u)
	wantErr(t, "UpdateSnapshot(rename onto a taken name)", err, errdefs.ErrAlreadyExists)
	x.Reason = "same name"
	x, err = s.UpdateSnapshot(ctx, x)
	wantErr(t, "UpdateSnapshot(own name)", err, nil)
	x.Name = "x2"
	x, err = s.UpdateSnapshot(ctx, x)
	wantErr(t, "UpdateSnapshot(rename)", err, nil)
	u = y
	u.Name = "x" // freed by the rename; y is complete, and may still be renamed
	y, err = s.UpdateSnapshot(ctx, u)
	wantErr(t, "UpdateSnapshot(take a freed name)", err, nil)
	if got, _ := s.GetSnapshot(ctx, a.ID, y.ID); got.Name != "x" {
		t.Errorf("Name after rename = %q; want x", got.Name)
	}
	// Clearing a name frees it too; a deleted snapshot frees its name.
	y.Name = ""
	y, err = s.UpdateSnapshot(ctx, y)
	wantErr(t, "UpdateSnapshot(clear name)", err, nil)
	mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, Name: "x"})
	wantErr(t, "DeleteSnapshot(x2)", s.DeleteSnapshot(ctx, a.ID, x.ID), nil)
	mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, Name: "x2"})

	// Of many concurrent creates of one name, exactly one succeeds.
	checkWins(t, "CreateSnapshot(contested)", race(8, func(int) error {
		_, err := s.CreateSnapshot(ctx, store.Snapshot{TenantID: a.ID, SessionID: se.ID, Name: "contested", Trigger: store.TriggerRolling})
		return err
	}), 1, errdefs.ErrAlreadyExists)
}

func testSnapshotUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	se := mustSession(t, s, store.Session{TenantID: a.ID})
	parent := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, State: store.SnapshotComplete})
	orig := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, ParentID: parent.ID, Trigger: store.TriggerPause,
		CreatedAt: base, Meta: map[string]string{"k": "v"}})

	// While writing, anything but the immutable fields may change.
	next := orig
	next.Name = "n"
	next.Reason = "progress"
	next.Pinned = true
	next.LogicalBytes, next.StoredBytes = 100, 40
	next.Meta = map[string]string{"manifest": "m"}
	next.SessionID = "se_other"        // immutable: ignored
	next.ParentID = ""                 // immutable: ignored
	next.Trigger = store.TriggerManual // immutable: ignored
	next.CreatedAt = base.Add(time.Hour)
	got, err := s.UpdateSnapshot(ctx, next)
	wantErr(t, "UpdateSnapshot(writing)", err, nil)
	want := next
	want.SessionID, want.ParentID, want.Trigger, want.CreatedAt = orig.SessionID, orig.ParentID, orig.Trigger, orig.CreatedAt
	want.Version = orig.Version + 1
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("UpdateSnapshot returned (-want +got):\n%s", diff)
	}
	stored := checkStored(t, s, snapshotKind, got, "GetSnapshot after update")

	// writing → complete.
	done := stored
	done.State = store.SnapshotComplete
	done.Reason = ""
	done.LogicalBytes, done.StoredBytes = 200, 80
	done.CompletedAt = ptr(base.Add(time.Minute + 999))
	stored, err = s.UpdateSnapshot(ctx, done)
	wantErr(t, "UpdateSnapshot(complete)", err, nil)
	checkSnapshotUTC(t, stored)
	if stored.State != store.SnapshotComplete || !stored.CompletedAt.Equal(store.NormalizeTime(*done.CompletedAt)) {
		t.Errorf("after completing: state %s, CompletedAt %v; want complete, %v", stored.State, stored.CompletedAt, done.CompletedAt)
	}

	// A complete snapshot: its name and pin may change, nothing else.
	relabel := stored
	relabel.Name, relabel.Pinned = "kept", false
	stored, err = s.UpdateSnapshot(ctx, relabel)
	wantErr(t, "UpdateSnapshot(complete: rename, unpin)", err, nil)
	if stored.Name != "kept" || stored.Pinned {
		t.Errorf("after relabel: name %q, pinned %v; want kept, false", stored.Name, stored.Pinned)
	}

	bad := []struct {
		name   string
		change func(*store.Snapshot)
		want   error
	}{
		{"other tenant", func(sn *store.Snapshot) { sn.TenantID = b.ID }, errdefs.ErrNotFound},
		{"missing", func(sn *store.Snapshot) { sn.ID = "sn_missing" }, errdefs.ErrNotFound},
		{"no ID", func(sn *store.Snapshot) { sn.ID = "" }, errdefs.ErrInvalidArgument},
		{"stale version", func(sn *store.Snapshot) { sn.Version-- }, errdefs.ErrConflict},
		{"future version", func(sn *store.Snapshot) { sn.Version += 5 }, errdefs.ErrConflict},
		{"unknown state", func(sn *store.Snapshot) { sn.State = "deleted" }, errdefs.ErrInvalidArgument},
		{"negative bytes", func(sn *store.Snapshot) { sn.StoredBytes = -1 }, errdefs.ErrInvalidArgument},
		{"empty meta key", func(sn *store.Snapshot) { sn.Meta = map[string]string{"": "x"} }, errdefs.ErrInvalidArgument},
		{"complete → writing", func(sn *store.Snapshot) { sn.State = store.SnapshotWriting }, errdefs.ErrConflict},
		{"complete → uploading", func(sn *store.Snapshot) { sn.State = store.SnapshotUploading }, errdefs.ErrConflict},
		{"complete → failed", func(sn *store.Snapshot) { sn.State = store.SnapshotFailed }, errdefs.ErrConflict},
		{"complete: bytes", func(sn *store.Snapshot) { sn.StoredBytes++ }, errdefs.ErrConflict},
		{"complete: meta", func(sn *store.Snapshot) { sn.Meta = map[string]string{"manifest": "m2"} }, errdefs.ErrConflict},
		{"complete: reason", func(sn *store.Snapshot) { sn.Reason = "rewritten" }, errdefs.ErrConflict},
		{"complete: completed at", func(sn *store.Snapshot) { sn.CompletedAt = nil }, errdefs.ErrConflict},
	}
	for _, tt := range bad {
		u := stored
		tt.change(&u)
		_, err := s.UpdateSnapshot(ctx, u)
		wantErr(t, "UpdateSnapshot("+tt.name+")", err, tt.want)
	}
	checkStored(t, s, snapshotKind, stored, "GetSnapshot after failed updates")

	// A failed snapshot changes no more.
	f := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID})
	f.State, f.Reason = store.SnapshotFailed, "disk full"
	f, err = s.UpdateSnapshot(ctx, f)
	wantErr(t, "UpdateSnapshot(writing → failed)", err, nil)
	for name, change := range map[string]func(*store.Snapshot){
		"name":     func(sn *store.Snapshot) { sn.Name = "late" },
		"pinned":   func(sn *store.Snapshot) { sn.Pinned = true },
		"reason":   func(sn *store.Snapshot) { sn.Reason = "other" },
		"complete": func(sn *store.Snapshot) { sn.State = store.SnapshotComplete },
	} {
		u := f
		change(&u)
		_, err := s.UpdateSnapshot(ctx, u)
		wantErr(t, "UpdateSnapshot(failed: "+name+")", err, errdefs.ErrConflict)
	}
	if got, _ := s.GetSnapshot(ctx, a.ID, f.ID); !cmp.Equal(f, got, cmpOpts...) {
		t.Errorf("failed snapshot changed: %+v; want %+v", got, f)
	}
}

// testSnapshotTransitions tries every pair of states: allowed transitions are stored, the others fail
// with ErrConflict naming both states and leave the snapshot as it was.
func testSnapshotTransitions(t *testing.T, s store.Store) {
	a := mustTenant(t, s, "a")
	se := mustSession(t, s, store.Session{TenantID: a.ID})
	checkTransitions(t, s, snapshotKind, store.SnapshotStates(), func(t *testing.T, from store.SnapshotState) store.Snapshot {
		sn := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID})
		if from != store.SnapshotWriting {
			sn.State = from
			var err error
			sn, err = s.UpdateSnapshot(t.Context(), sn)
			wantErr(t, "UpdateSnapshot(to "+string(from)+")", err, nil)
		}
		return sn
	})
}

// testSnapshotConcurrentUpdates races many updates from one Version: exactly one wins.
func testSnapshotConcurrentUpdates(t *testing.T, s store.Store) {
	a := mustTenant(t, s, "a")
	se := mustSession(t, s, store.Session{TenantID: a.ID})
	sn := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID})
	winner, stored := raceUpdates(t, s, snapshotKind, sn, 16, func(i int, u *store.Snapshot) {
		if i%2 == 0 {
			u.State = store.SnapshotComplete
		} else {
			u.State = store.SnapshotFailed
		}
		u.Reason = fmt.Sprintf("writer %d", i)
	})
	if stored.Version != sn.Version+1 || stored.Reason != fmt.Sprintf("writer %d", winner) {
		t.Errorf("stored = version %d, reason %q; want version %d from writer %d", stored.Version, stored.Reason, sn.Version+1, winner)
	}
}

// testSnapshotList checks ListSnapshots: order, paging, the session and state filters, tenant isolation
// and bad input.
func testSnapshotList(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	sessions := []store.Session{mustSession(t, s, store.Session{TenantID: a.ID}), mustSession(t, s, store.Session{TenantID: a.ID})}
	empty := mustSession(t, s, store.Session{TenantID: a.ID})
	bSession := mustSession(t, s, store.Session{TenantID: b.ID})
	states := store.SnapshotStates()

	var all []store.Snapshot
	for i := range 45 {
		at := base.Add(time.Duration(i/3) * time.Millisecond) // groups share a CreatedAt: the ID breaks ties
		se := sessions[i%2]
		sn := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, CreatedAt: at})
		if st := states[i%len(states)]; st != store.SnapshotWriting {
			sn.State = st
			var err error
			sn, err = s.UpdateSnapshot(ctx, sn)
			wantErr(t, "UpdateSnapshot", err, nil)
		}
		all = append(all, sn)
		if i%5 == 0 { // another tenant's, which must never show up
			mustSnapshot(t, s, store.Snapshot{TenantID: b.ID, SessionID: bSession.ID, CreatedAt: at})
		}
	}
	slices.SortFunc(all, func(x, y store.Snapshot) int {
		if c := x.CreatedAt.Compare(y.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})

	for _, limit := range []int{1, 4, 44, 45, 46, 0} {
		got, pages := pageThrough(t, "ListSnapshots", limit, func(cursor string) ([]store.Snapshot, string, error) {
			return s.ListSnapshots(ctx, a.ID, store.SnapshotFilter{Limit: limit, Cursor: cursor})
		})
		n, _ := store.NormalizeLimit(limit)
		if wantPages := max(1, (45+n-1)/n); pages != wantPages {
			t.Errorf("limit %d: got %d pages; want %d", limit, pages, wantPages)
		}
		if diff := cmp.Diff(all, got, cmpOpts...); diff != "" {
			t.Errorf("limit %d: pages joined (-want +got):\n%s", limit, diff)
		}
	}

	filters := []store.SnapshotFilter{
		{SessionID: sessions[0].ID},
		{SessionID: sessions[1].ID, States: []store.SnapshotState{store.SnapshotComplete}},
		{States: []store.SnapshotState{store.SnapshotWriting, store.SnapshotFailed}},
		{States: states},
		{SessionID: empty.ID},
	}
	for _, f := range filters {
		var want []store.Snapshot
		for _, sn := range all {
			if (f.SessionID == "" || sn.SessionID == f.SessionID) && (len(f.States) == 0 || slices.Contains(f.States, sn.State)) {
				want = append(want, sn)
			}
		}
		for _, limit := range []int{2, 100} {
			f.Limit = limit
			if diff := cmp.Diff(want, listAllSnapshots(t, s, a.ID, f), cmpOpts...); diff != "" {
				t.Errorf("ListSnapshots(session %q, states %v, limit %d) (-want +got):\n%s", f.SessionID, f.States, limit, diff)
			}
		}
	}

	items, next, err := s.ListSnapshots(ctx, "tn_missing", store.SnapshotFilter{})
	wantErr(t, "ListSnapshots(unknown tenant)", err, nil)
	if len(items) != 0 || next != "" {
		t.Errorf("ListSnapshots(unknown tenant) = %d items, cursor %q; want none", len(items), next)
	}
	_, _, err = s.ListSnapshots(ctx, a.ID, store.SnapshotFilter{SessionID: bSession.ID})
	wantErr(t, "ListSnapshots(other tenant's session)", err, errdefs.ErrNotFound)
	_, _, err = s.ListSnapshots(ctx, b.ID, store.SnapshotFilter{SessionID: sessions[0].ID})
	wantErr(t, "ListSnapshots(other tenant's session)", err, errdefs.ErrNotFound)
	_, _, err = s.ListSnapshots(ctx, a.ID, store.SnapshotFilter{SessionID: "se_missing"})
	wantErr(t, "ListSnapshots(missing session)", err, errdefs.ErrNotFound)
	bad := map[string]store.SnapshotFilter{
		"negative limit": {Limit: -1},
		"garbage cursor": {Cursor: "not-a-cursor"},
		"unknown state":  {States: []store.SnapshotState{"deleted"}},
	}
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		_, _, err := s.ListSnapshots(ctx, a.ID, bad[name])
		wantErr(t, "ListSnapshots("+name+")", err, errdefs.ErrInvalidArgument)
	}
}

// testSnapshotListByState checks the cross-tenant query of crash recovery.
func testSnapshotListByState(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	sa, sb := mustSession(t, s, store.Session{TenantID: a.ID}), mustSession(t, s, store.Session{TenantID: b.ID})
	plan := []struct {
		session store.Session
		state   store.SnapshotState
		age     time.Duration
	}{
		{sa, store.SnapshotWriting, 5}, {sb, store.SnapshotWriting, 9}, {sa, store.SnapshotComplete, 8},
		{sb, store.SnapshotFailed, 1}, {sa, store.SnapshotWriting, 7}, {sb, store.SnapshotComplete, 3},
		{sb, store.SnapshotUploading, 6}, {sa, store.SnapshotUploading, 2},
	}
	var all []store.Snapshot
	for _, p := range plan {
		sn := mustSnapshot(t, s, store.Snapshot{TenantID: p.session.TenantID, SessionID: p.session.ID, CreatedAt: base.Add(-p.age * time.Minute)})
		if p.state != store.SnapshotWriting {
			sn.State = p.state
			var err error
			sn, err = s.UpdateSnapshot(ctx, sn)
			wantErr(t, "UpdateSnapshot", err, nil)
		}
		all = append(all, sn)
	}
	checkByState(t, s, snapshotKind, all, [][]store.SnapshotState{
		nil,
		{store.SnapshotWriting},
		{store.SnapshotUploading},
		{store.SnapshotWriting, store.SnapshotUploading}, // what crash recovery looks for
		{store.SnapshotComplete, store.SnapshotFailed},
	}, func(sn store.Snapshot) (time.Time, string) { return sn.CreatedAt, sn.ID }, true, "deleted")
}

// testSnapshotUploading checks the uploading state: reached from writing, left for complete or failed,
// still mutable, and usable as a session's head or a fork's source, where writing and failed snapshots are
// not.
func testSnapshotUploading(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	se := mustSession(t, s, store.Session{TenantID: a.ID})

	// writing → uploading → complete; while uploading, everything but the immutable fields may change.
	sn := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, Trigger: store.TriggerPause})
	sn.State = store.SnapshotUploading
	sn.LogicalBytes = 300
	sn.Meta = map[string]string{"node": "n1"}
	sn, err := s.UpdateSnapshot(ctx, sn)
	wantErr(t, "UpdateSnapshot(writing → uploading)", err, nil)
	if sn.State != store.SnapshotUploading || sn.Version != 2 {
		t.Errorf("after writing → uploading: state %s, version %d; want uploading, 2", sn.State, sn.Version)
	}
	sn.Name, sn.Pinned, sn.Reason = "up", true, "uploading 3 of 7 chunks"
	sn.StoredBytes = 120
	sn.Meta = map[string]string{"node": "n1", "manifest": "m"}
	sn.CompletedAt = ptr(base)
	want := sn
	want.Version++
	sn, err = s.UpdateSnapshot(ctx, sn)
	wantErr(t, "UpdateSnapshot(uploading: meta, bytes, reason, name, pinned)", err, nil)
	if diff := cmp.Diff(want, sn, cmpOpts...); diff != "" {
		t.Errorf("UpdateSnapshot(uploading) returned (-want +got):\n%s", diff)
	}
	if got, err := s.GetSnapshot(ctx, a.ID, sn.ID); err != nil || !cmp.Equal(sn, got, cmpOpts...) {
		t.Errorf("GetSnapshot(uploading) = %+v, %v; want %+v", got, err, sn)
	}
	uploaded := sn // kept uploading, for the head and fork checks below
	done := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID})
	for _, st := range []store.SnapshotState{store.SnapshotUploading, store.SnapshotComplete} {
		done.State = st
		done, err = s.UpdateSnapshot(ctx, done)
		wantErr(t, "UpdateSnapshot(→ "+string(st)+")", err, nil)
	}
	// Back to uploading, or to writing, is refused and changes nothing.
	for _, st := range []store.SnapshotState{store.SnapshotUploading, store.SnapshotWriting} {
		u := done
		u.State = st
		_, err = s.UpdateSnapshot(ctx, u)
		wantErr(t, "UpdateSnapshot(complete → "+string(st)+")", err, errdefs.ErrConflict)
	}
	u := uploaded
	u.State = store.SnapshotWriting
	_, err = s.UpdateSnapshot(ctx, u)
	wantErr(t, "UpdateSnapshot(uploading → writing)", err, errdefs.ErrConflict)
	if got, _ := s.GetSnapshot(ctx, a.ID, done.ID); got.State != store.SnapshotComplete || got.Version != done.Version {
		t.Errorf("complete snapshot after refused updates: state %s, version %d; want complete, %d", got.State, got.Version, done.Version)
	}

	// uploading → failed.
	lost := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID})
	lost.State = store.SnapshotUploading
	lost, err = s.UpdateSnapshot(ctx, lost)
	wantErr(t, "UpdateSnapshot(writing → uploading)", err, nil)
	lost.State, lost.Reason = store.SnapshotFailed, "node lost"
	lost, err = s.UpdateSnapshot(ctx, lost)
	wantErr(t, "UpdateSnapshot(uploading → failed)", err, nil)
	if lost.State != store.SnapshotFailed || lost.Reason != "node lost" {
		t.Errorf("after uploading → failed: state %s, reason %q; want failed, node lost", lost.State, lost.Reason)
	}
	writing := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID})

	// A session's head may be an uploading snapshot, on create and on update; not a writing or failed one.
	se.HeadSnapshotID = uploaded.ID
	se = driveSession(t, s, se, store.SessionPaused)
	if got, _ := s.GetSession(ctx, a.ID, se.ID); got.HeadSnapshotID != uploaded.ID {
		t.Errorf("HeadSnapshotID = %q; want the uploading snapshot %s", got.HeadSnapshotID, uploaded.ID)
	}
	for _, h := range []string{done.ID, uploaded.ID} {
		u := se
		u.HeadSnapshotID = h
		se, err = s.UpdateSession(ctx, u)
		wantErr(t, "UpdateSession(head "+h+")", err, nil)
	}
	for name, h := range map[string]string{"writing": writing.ID, "failed": lost.ID} {
		u := se
		u.HeadSnapshotID = h
		_, err := s.UpdateSession(ctx, u)
		wantErr(t, "UpdateSession("+name+" head)", err, errdefs.ErrFailedPrecondition)
		if err != nil && !strings.Contains(err.Error(), name) {
			t.Errorf("UpdateSession(%s head) error %q does not name the state", name, err)
		}
	}
	// An uploading snapshot held as a head is as undeletable as a complete one.
	wantErr(t, "DeleteSnapshot(uploading head)", s.DeleteSnapshot(ctx, a.ID, uploaded.ID), errdefs.ErrConflict)

	// A fork may name an uploading snapshot as its source (and start from it); not a writing or failed one.
	for _, st := range []store.SessionState{store.SessionPaused, store.SessionResuming} {
		fork, err := s.CreateSession(ctx, store.Session{TenantID: a.ID, State: st, HeadSnapshotID: uploaded.ID,
			ParentSessionID: se.ID, ForkedFromSnapshotID: uploaded.ID})
		wantErr(t, "CreateSession(fork of uploading, "+string(st)+")", err, nil)
		if fork.ForkedFromSnapshotID != uploaded.ID || fork.HeadSnapshotID != uploaded.ID {
			t.Errorf("CreateSession(fork of uploading) = %+v; want head and fork source %s", fork, uploaded.ID)
		}
	}
	for name, id := range map[string]string{"writing": writing.ID, "failed": lost.ID} {
		_, err := s.CreateSession(ctx, store.Session{TenantID: a.ID, ParentSessionID: se.ID, ForkedFromSnapshotID: id})
		wantErr(t, "CreateSession(fork of "+name+")", err, errdefs.ErrFailedPrecondition)
		_, err = s.CreateSession(ctx, store.Session{TenantID: a.ID, State: store.SessionPaused, HeadSnapshotID: id})
		wantErr(t, "CreateSession(head "+name+")", err, errdefs.ErrFailedPrecondition)
	}

	// It lists by state, alone or with others, in the tenant and across tenants.
	items := listAllSnapshots(t, s, a.ID, store.SnapshotFilter{States: []store.SnapshotState{store.SnapshotUploading}})
	if diff := cmp.Diff([]string{uploaded.ID}, snapshotKind.ids(items)); diff != "" {
		t.Errorf("ListSnapshots(uploading) IDs (-want +got):\n%s", diff)
	}
	byState, err := s.ListSnapshotsByState(ctx, []store.SnapshotState{store.SnapshotUploading}, 0)
	wantErr(t, "ListSnapshotsByState(uploading)", err, nil)
	if diff := cmp.Diff([]string{uploaded.ID}, snapshotKind.ids(byState)); diff != "" {
		t.Errorf("ListSnapshotsByState(uploading) IDs (-want +got):\n%s", diff)
	}
}

func testSnapshotDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	se := mustSession(t, s, store.Session{TenantID: a.ID})
	head := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, State: store.SnapshotComplete})
	child := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, ParentID: head.ID})
	se.HeadSnapshotID = head.ID
	se = driveSession(t, s, se, store.SessionPaused)

	wantErr(t, "DeleteSnapshot(other tenant)", s.DeleteSnapshot(ctx, b.ID, head.ID), errdefs.ErrNotFound)
	wantErr(t, "DeleteSnapshot(missing)", s.DeleteSnapshot(ctx, a.ID, "sn_missing"), errdefs.ErrNotFound)
	wantErr(t, "DeleteSnapshot(a session's head)", s.DeleteSnapshot(ctx, a.ID, head.ID), errdefs.ErrConflict)
	// A fork resuming from it holds it as well.
	fork := mustSession(t, s, store.Session{TenantID: a.ID, State: store.SessionPaused, HeadSnapshotID: head.ID})
	se.HeadSnapshotID = ""
	se, err := s.UpdateSession(ctx, se)
	wantErr(t, "UpdateSession(clear head)", err, nil)
	wantErr(t, "DeleteSnapshot(a fork's head)", s.DeleteSnapshot(ctx, a.ID, head.ID), errdefs.ErrConflict)
	if _, err := s.GetSnapshot(ctx, a.ID, head.ID); err != nil {
		t.Errorf("GetSnapshot after refused deletes: %v", err)
	}
	// Once the only session holding it is deleted, it can go; its child keeps the ParentID.
	driveSession(t, s, fork, store.SessionDeleted)
	wantErr(t, "DeleteSnapshot(head of a deleted session)", s.DeleteSnapshot(ctx, a.ID, head.ID), nil)
	_, err = s.GetSnapshot(ctx, a.ID, head.ID)
	wantErr(t, "GetSnapshot(deleted)", err, errdefs.ErrNotFound)
	wantErr(t, "DeleteSnapshot(again)", s.DeleteSnapshot(ctx, a.ID, head.ID), errdefs.ErrNotFound)
	if got, err := s.GetSnapshot(ctx, a.ID, child.ID); err != nil || got.ParentID != head.ID {
		t.Errorf("GetSnapshot(child) = %+v, %v; want it kept with ParentID %s", got, err, head.ID)
	}
	// A writing snapshot may be deleted (crash recovery), and the session goes on.
	wantErr(t, "DeleteSnapshot(writing)", s.DeleteSnapshot(ctx, a.ID, child.ID), nil)
	if items := listAllSnapshots(t, s, a.ID, store.SnapshotFilter{SessionID: se.ID}); len(items) != 0 {
		t.Errorf("session still lists snapshots %v", snapshotKind.ids(items))
	}
	// The ID is free again.
	mustSnapshot(t, s, store.Snapshot{ID: head.ID, TenantID: a.ID, SessionID: se.ID})
}

// Helpers for snapshots.

// mustSnapshot creates sn (with TriggerManual when it names none) and returns it as stored.
func mustSnapshot(t *testing.T, s store.Store, sn store.Snapshot) store.Snapshot {
	t.Helper()
	if sn.Trigger == "" {
		sn.Trigger = store.TriggerManual
	}
	got, err := s.CreateSnapshot(t.Context(), sn)
	if err != nil {
		t.Fatalf("CreateSnapshot(%+v): %v", sn, err)
	}
	return got
}

// listAllSnapshots pages through ListSnapshots with f and returns every item.
func listAllSnapshots(t *testing.T, s store.Store, tenantID string, f store.SnapshotFilter) []store.Snapshot {
	t.Helper()
	all, _ := pageThrough(t, "ListSnapshots", f.Limit, func(cursor string) ([]store.Snapshot, string, error) {
		f.Cursor = cursor
		return s.ListSnapshots(t.Context(), tenantID, f)
	})
	return all
}

// checkSnapshotUTC fails t if any time of sn is not in UTC.
func checkSnapshotUTC(t *testing.T, sn store.Snapshot) {
	t.Helper()
	checkTimesUTC(t, "snapshot "+sn.ID, map[string]*time.Time{"CreatedAt": &sn.CreatedAt, "CompletedAt": sn.CompletedAt})
}
