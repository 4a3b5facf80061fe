package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

func testTenantQuotas(t *testing.T, s store.Store) {
	t.Run("Tenant", func(t *testing.T) { testQuotasOnTenant(t, s) })
	t.Run("Usage", func(t *testing.T) { testQuotasUsage(t, s) })
	t.Run("RunningSandboxes", func(t *testing.T) { testQuotasRunningSandboxes(t, s) })
	t.Run("Sessions", func(t *testing.T) { testQuotasSessions(t, s) })
	t.Run("Lowered", func(t *testing.T) { testQuotasLowered(t, s) })
	t.Run("Concurrent", func(t *testing.T) { testQuotasConcurrent(t, s) })
}

// testQuotasOnTenant checks that quotas are stored with the tenant, validated and replaced by
// SetTenantQuotas alone.
func testQuotasOnTenant(t *testing.T, s store.Store) {
	ctx := t.Context()

	plain := mustTenant(t, s, "quota-plain")
	if plain.Quotas != (store.TenantQuotas{}) {
		t.Errorf("CreateTenant without quotas: Quotas = %+v; want zero (unlimited)", plain.Quotas)
	}
	q := store.TenantQuotas{RunningSandboxes: 5, Sessions: 7, SnapshotBytes: 1<<40 + 3}
	keep := store.RetentionSpec{KeepAllSeconds: 60, KeepDailySeconds: 86400}
	want := store.Tenant{ID: "tn_quota", Name: "quota", CreatedAt: base.Add(time.Hour), Retention: keep, Quotas: q}
	tn, err := s.CreateTenant(ctx, want)
	wantErr(t, "CreateTenant(with quotas)", err, nil)
	if diff := cmp.Diff(want, tn); diff != "" {
		t.Errorf("CreateTenant(with quotas) returned (-want +got):\n%s", diff)
	}
	got, err := s.GetTenant(ctx, tn.ID)
	wantErr(t, "GetTenant", err, nil)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetTenant (-want +got):\n%s", diff)
	}
	list, err := s.ListTenants(ctx)
	wantErr(t, "ListTenants", err, nil)
	if diff := cmp.Diff([]store.Tenant{want, plain}, list); diff != "" { // ordered by CreatedAt
		t.Errorf("ListTenants (-want +got):\n%s", diff)
	}

	for name, bad := range map[string]store.TenantQuotas{
		"negative running sandboxes": {RunningSandboxes: -1},
		"negative sessions":          {Sessions: -1, RunningSandboxes: 1},
		"negative snapshot bytes":    {SnapshotBytes: -1 << 63},
	} {
		_, err := s.CreateTenant(ctx, store.Tenant{ID: "tn_bad", Name: "bad", Quotas: bad})
		wantErr(t, "CreateTenant("+name+")", err, errdefs.ErrInvalidArgument)
		_, err = s.SetTenantQuotas(ctx, tn.ID, bad)
		wantErr(t, "SetTenantQuotas("+name+")", err, errdefs.ErrInvalidArgument)
	}
	_, err = s.GetTenant(ctx, "tn_bad")
	wantErr(t, "GetTenant(refused tenant)", err, errdefs.ErrNotFound)
	_, err = s.SetTenantQuotas(ctx, "tn_missing", q)
	wantErr(t, "SetTenantQuotas(unknown tenant)", err, errdefs.ErrNotFound)
	_, err = s.SetTenantQuotas(ctx, "", q)
	wantErr(t, "SetTenantQuotas(empty ID)", err, errdefs.ErrNotFound)
	// Nothing of the failed calls was stored.
	list, err = s.ListTenants(ctx)
	wantErr(t, "ListTenants", err, nil)
	if diff := cmp.Diff([]store.Tenant{want, plain}, list); diff != "" {
		t.Errorf("ListTenants after refused quotas (-want +got):\n%s", diff)
	}

	// SetTenantQuotas replaces the quotas, and nothing else; the other tenant is untouched.
	disabledAt := base.Add(2 * time.Hour)
	tn, err = s.SetTenantDisabled(ctx, tn.ID, &disabledAt)
	wantErr(t, "SetTenantDisabled", err, nil)
	for _, nq := range []store.TenantQuotas{
		{RunningSandboxes: 1},
		{Sessions: 2, SnapshotBytes: 3},
		{RunningSandboxes: 1<<63 - 1, Sessions: 1<<63 - 1, SnapshotBytes: 1<<63 - 1},
		{}, // back to unlimited
		q,
	} {
		got, err := s.SetTenantQuotas(ctx, tn.ID, nq)
		wantErr(t, fmt.Sprintf("SetTenantQuotas(%+v)", nq), err, nil)
		want := tn
		want.Quotas = nq
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("SetTenantQuotas(%+v) returned (-want +got):\n%s", nq, diff)
		}
		stored, err := s.GetTenant(ctx, tn.ID)
		wantErr(t, "GetTenant", err, nil)
		if diff := cmp.Diff(want, stored); diff != "" {
			t.Errorf("GetTenant after SetTenantQuotas(%+v) (-want +got):\n%s", nq, diff)
		}
		list, err := s.ListTenants(ctx)
		wantErr(t, "ListTenants", err, nil)
		if diff := cmp.Diff([]store.Tenant{want, plain}, list); diff != "" {
			t.Errorf("ListTenants after SetTenantQuotas(%+v) (-want +got):\n%s", nq, diff)
		}
	}

	// The other setters keep the quotas.
	keep2 := store.RetentionSpec{KeepHourlySeconds: 7200}
	got, err = s.UpdateTenantRetention(ctx, tn.ID, keep2)
	wantErr(t, "UpdateTenantRetention", err, nil)
	if got.Quotas != q || got.Retention != keep2 {
		t.Errorf("UpdateTenantRetention returned Quotas %+v, Retention %+v; want %+v, %+v", got.Quotas, got.Retention, q, keep2)
	}
	got, err = s.SetTenantDisabled(ctx, tn.ID, nil)
	wantErr(t, "SetTenantDisabled(enable)", err, nil)
	if got.Quotas != q || got.DisabledAt != nil {
		t.Errorf("SetTenantDisabled(nil) returned Quotas %+v, DisabledAt %v; want %+v, nil", got.Quotas, got.DisabledAt, q)
	}
}

// testQuotasUsage checks what TenantUsage counts.
func testQuotasUsage(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "usage-a"), mustTenant(t, s, "usage-b")

	usage := func(id string) store.TenantUsage {
		t.Helper()
		u, err := s.TenantUsage(ctx, id)
		wantErr(t, "TenantUsage("+id+")", err, nil)
		return u
	}
	check := func(what string, want store.TenantUsage) {
		t.Helper()
		if got := usage(a.ID); got != want {
			t.Errorf("%s: TenantUsage(a) = %+v; want %+v", what, got, want)
		}
	}
	check("new tenant", store.TenantUsage{})
	for _, id := range []string{"tn_missing", ""} {
		if got := usage(id); got != (store.TenantUsage{}) {
			t.Errorf("TenantUsage(unknown tenant %q) = %+v; want zero", id, got)
		}
	}

	// Sandboxes count while creating, running or stopping; not once stopped or failed.
	for _, st := range []store.SandboxState{store.StateCreating, store.StateRunning, store.StateStopping,
		store.StateStopped, store.StateFailed, store.StateRunning} {
		drive(t, s, mustSandbox(t, s, store.Sandbox{TenantID: a.ID}), st)
	}
	check("sandboxes", store.TenantUsage{RunningSandboxes: 4})

	// Sessions count until deleting.
	var ses []store.Session
	for _, st := range []store.SessionState{store.SessionCreating, store.SessionRunning, store.SessionPausing,
		store.SessionPaused, store.SessionResuming, store.SessionFailed, store.SessionDeleting, store.SessionDeleted} {
		ses = append(ses, driveSession(t, s, mustSession(t, s, store.Session{TenantID: a.ID}), st))
	}
	check("sessions", store.TenantUsage{RunningSandboxes: 4, Sessions: 6})

	// Snapshots add their StoredBytes, whatever their state or their session's.
	mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: ses[0].ID, LogicalBytes: 1 << 30, StoredBytes: 100})
	mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: ses[1].ID, State: store.SnapshotComplete,
		LogicalBytes: 1 << 30, StoredBytes: 20})
	writing := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: ses[3].ID, LogicalBytes: 5}) // no stored bytes yet
	gone := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: ses[5].ID, StoredBytes: 3})
	check("snapshots", store.TenantUsage{RunningSandboxes: 4, Sessions: 6, SnapshotBytes: 123})
	wantErr(t, "DeleteSnapshot", s.DeleteSnapshot(ctx, a.ID, gone.ID), nil)
	check("after DeleteSnapshot", store.TenantUsage{RunningSandboxes: 4, Sessions: 6, SnapshotBytes: 120})
	writing.State, writing.StoredBytes = store.SnapshotComplete, 7
	_, err := s.UpdateSnapshot(ctx, writing)
	wantErr(t, "UpdateSnapshot(writing → complete)", err, nil)
	check("after UpdateSnapshot", store.TenantUsage{RunningSandboxes: 4, Sessions: 6, SnapshotBytes: 127})

	// Another tenant's objects count for it alone.
	drive(t, s, mustSandbox(t, s, store.Sandbox{TenantID: b.ID}), store.StateRunning)
	seB := mustSession(t, s, store.Session{TenantID: b.ID})
	mustSnapshot(t, s, store.Snapshot{TenantID: b.ID, SessionID: seB.ID, StoredBytes: 1000})
	check("after tenant b's objects", store.TenantUsage{RunningSandboxes: 4, Sessions: 6, SnapshotBytes: 127})
	if got, want := usage(b.ID), (store.TenantUsage{RunningSandboxes: 1, Sessions: 1, SnapshotBytes: 1000}); got != want {
		t.Errorf("TenantUsage(b) = %+v; want %+v", got, want)
	}

	// Usage follows updates.
	sbs := listAll(t, s, a.ID, store.SandboxFilter{States: []store.SandboxState{store.StateStopping}})
	if len(sbs) != 1 {
		t.Fatalf("tenant a has %d stopping sandboxes; want 1", len(sbs))
	}
	sb := sbs[0]
	sb.State = store.StateStopped
	_, err = s.UpdateSandbox(ctx, sb)
	wantErr(t, "UpdateSandbox(stopping → stopped)", err, nil)
	driveSession(t, s, ses[0], store.SessionDeleting)
	check("after updates", store.TenantUsage{RunningSandboxes: 3, Sessions: 5, SnapshotBytes: 127})
}

// testQuotasRunningSandboxes checks that CreateSandbox enforces the RunningSandboxes quota.
func testQuotasRunningSandboxes(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "sandboxes-a"), mustTenant(t, s, "sandboxes-b")
	_, err := s.SetTenantQuotas(ctx, a.ID, store.TenantQuotas{RunningSandboxes: 2, Sessions: 1})
	wantErr(t, "SetTenantQuotas", err, nil)
	_, err = s.SetTenantQuotas(ctx, b.ID, store.TenantQuotas{RunningSandboxes: 3})
	wantErr(t, "SetTenantQuotas(b)", err, nil)

	refused := func(what, id string) {
		t.Helper()
		_, err := s.CreateSandbox(ctx, store.Sandbox{ID: id, TenantID: a.ID, Template: "base"})
		wantErr(t, "CreateSandbox("+what+")", err, errdefs.ErrResourceExhausted)
		_, err = s.GetSandbox(ctx, a.ID, id)
		wantErr(t, "GetSandbox(refused "+id+")", err, errdefs.ErrNotFound)
		_, err = s.GetSandboxAnyTenant(ctx, id)
		wantErr(t, "GetSandboxAnyTenant(refused "+id+")", err, errdefs.ErrNotFound)
	}
	countA := func(want int) {
		t.Helper()
		if items := listAll(t, s, a.ID, store.SandboxFilter{}); len(items) != want {
			t.Errorf("tenant a has %d sandboxes; want %d", len(items), want)
		}
	}

	sb1 := mustSandbox(t, s, store.Sandbox{TenantID: a.ID})
	sb2 := mustSandbox(t, s, store.Sandbox{TenantID: a.ID})
	refused("third", "sb_third")
	countA(2)
	if u, err := s.TenantUsage(ctx, a.ID); err != nil || u.RunningSandboxes != 2 {
		t.Errorf("TenantUsage(a) = %+v, %v; want 2 running sandboxes", u, err)
	}
	// The sessions quota is another matter: a session is not refused because of the sandboxes.
	mustSession(t, s, store.Session{TenantID: a.ID})

	// Another tenant is not affected.
	for range 3 {
		mustSandbox(t, s, store.Sandbox{TenantID: b.ID})
	}
	_, err = s.CreateSandbox(ctx, store.Sandbox{TenantID: b.ID, Template: "base"})
	wantErr(t, "CreateSandbox(b, fourth)", err, errdefs.ErrResourceExhausted)
	refused("third, after b's", "sb_third")

	// Sandboxes at the quota still change; running and stopping still count.
	sb1 = drive(t, s, sb1, store.StateRunning)
	sb1.Reason = "still mine"
	sb1, err = s.UpdateSandbox(ctx, sb1)
	wantErr(t, "UpdateSandbox(at quota)", err, nil)
	sb1.State = store.StateStopping
	sb1, err = s.UpdateSandbox(ctx, sb1)
	wantErr(t, "UpdateSandbox(running → stopping)", err, nil)
	refused("third, one stopping", "sb_third")

	// A stopped sandbox frees its slot.
	sb1.State = store.StateStopped
	_, err = s.UpdateSandbox(ctx, sb1)
	wantErr(t, "UpdateSandbox(stopping → stopped)", err, nil)
	mustSandbox(t, s, store.Sandbox{ID: "sb_third", TenantID: a.ID})
	refused("fourth", "sb_fourth")
	countA(3)

	// So does a failed one.
	drive(t, s, sb2, store.StateFailed)
	mustSandbox(t, s, store.Sandbox{ID: "sb_fourth", TenantID: a.ID})
	refused("fifth", "sb_fifth")

	// Quota 0 is no limit.
	_, err = s.SetTenantQuotas(ctx, a.ID, store.TenantQuotas{})
	wantErr(t, "SetTenantQuotas(unlimited)", err, nil)
	for range 5 {
		mustSandbox(t, s, store.Sandbox{TenantID: a.ID})
	}
	if u, err := s.TenantUsage(ctx, a.ID); err != nil || u.RunningSandboxes != 7 {
		t.Errorf("TenantUsage(a) = %+v, %v; want 7 running sandboxes", u, err)
	}
	// Raising the quota above the usage allows creates up to it.
	_, err = s.SetTenantQuotas(ctx, a.ID, store.TenantQuotas{RunningSandboxes: 8})
	wantErr(t, "SetTenantQuotas(8)", err, nil)
	mustSandbox(t, s, store.Sandbox{TenantID: a.ID})
	refused("ninth", "sb_ninth")

	// The unknown tenant is still not found, quota or not.
	_, err = s.CreateSandbox(ctx, store.Sandbox{TenantID: "tn_missing", Template: "base"})
	wantErr(t, "CreateSandbox(unknown tenant)", err, errdefs.ErrNotFound)
}

// testQuotasSessions checks that CreateSession enforces the Sessions quota.
func testQuotasSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "sessions-a"), mustTenant(t, s, "sessions-b")
	_, err := s.SetTenantQuotas(ctx, a.ID, store.TenantQuotas{Sessions: 2, RunningSandboxes: 1})
	wantErr(t, "SetTenantQuotas", err, nil)
	_, err = s.SetTenantQuotas(ctx, b.ID, store.TenantQuotas{Sessions: 1})
	wantErr(t, "SetTenantQuotas(b)", err, nil)

	refused := func(what, id string) {
		t.Helper()
		_, err := s.CreateSession(ctx, store.Session{ID: id, TenantID: a.ID})
		wantErr(t, "CreateSession("+what+")", err, errdefs.ErrResourceExhausted)
		_, err = s.GetSession(ctx, a.ID, id)
		wantErr(t, "GetSession(refused "+id+")", err, errdefs.ErrNotFound)
		_, err = s.GetSessionAnyTenant(ctx, id)
		wantErr(t, "GetSessionAnyTenant(refused "+id+")", err, errdefs.ErrNotFound)
	}
	countA := func(want int) {
		t.Helper()
		if items := listAllSessions(t, s, a.ID, store.SessionFilter{}); len(items) != want {
			t.Errorf("tenant a has %d sessions; want %d", len(items), want)
		}
	}

	se1 := mustSession(t, s, store.Session{TenantID: a.ID})
	se2 := mustSession(t, s, store.Session{TenantID: a.ID})
	refused("third", "se_third")
	countA(2)
	if u, err := s.TenantUsage(ctx, a.ID); err != nil || u.Sessions != 2 {
		t.Errorf("TenantUsage(a) = %+v, %v; want 2 sessions", u, err)
	}
	// A fork counts like any session, paused or not.
	sn := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se1.ID, State: store.SnapshotComplete})
	_, err = s.CreateSession(ctx, store.Session{ID: "se_fork", TenantID: a.ID, State: store.SessionPaused,
		ParentSessionID: se1.ID, ForkedFromSnapshotID: sn.ID, HeadSnapshotID: sn.ID})
	wantErr(t, "CreateSession(fork at quota)", err, errdefs.ErrResourceExhausted)
	refused("third, after the fork", "se_third")
	// The sandbox quota is another matter.
	mustSandbox(t, s, store.Sandbox{TenantID: a.ID})

	// Another tenant is not affected.
	mustSession(t, s, store.Session{TenantID: b.ID})
	_, err = s.CreateSession(ctx, store.Session{TenantID: b.ID})
	wantErr(t, "CreateSession(b, second)", err, errdefs.ErrResourceExhausted)
	refused("third, after b's", "se_third")

	// Sessions at the quota still change; paused and failed ones still count.
	se1 = driveSession(t, s, se1, store.SessionPaused)
	se2 = driveSession(t, s, se2, store.SessionFailed)
	se2.Reason = "still mine"
	se2, err = s.UpdateSession(ctx, se2)
	wantErr(t, "UpdateSession(at quota)", err, nil)
	refused("third, one paused and one failed", "se_third")

	// A deleting session frees its slot, and a deleted one keeps it free.
	se2.State = store.SessionDeleting
	se2, err = s.UpdateSession(ctx, se2)
	wantErr(t, "UpdateSession(failed → deleting)", err, nil)
	mustSession(t, s, store.Session{ID: "se_third", TenantID: a.ID})
	refused("fourth", "se_fourth")
	se2.State = store.SessionDeleted
	_, err = s.UpdateSession(ctx, se2)
	wantErr(t, "UpdateSession(deleting → deleted)", err, nil)
	refused("fourth, one deleted", "se_fourth")
	countA(3)
	driveSession(t, s, se1, store.SessionDeleting)
	_, err = s.CreateSession(ctx, store.Session{ID: "se_fork", TenantID: a.ID, State: store.SessionPaused,
		ParentSessionID: se1.ID, ForkedFromSnapshotID: sn.ID, HeadSnapshotID: sn.ID})
	wantErr(t, "CreateSession(fork after a delete)", err, nil)
	refused("fifth", "se_fifth")
	// Removing a deleted session's record changes nothing.
	wantErr(t, "DeleteSession", s.DeleteSession(ctx, a.ID, se2.ID), nil)
	refused("fifth, after DeleteSession", "se_fifth")

	// Quota 0 is no limit.
	_, err = s.SetTenantQuotas(ctx, a.ID, store.TenantQuotas{RunningSandboxes: 1})
	wantErr(t, "SetTenantQuotas(unlimited sessions)", err, nil)
	for range 5 {
		mustSession(t, s, store.Session{TenantID: a.ID})
	}
	if u, err := s.TenantUsage(ctx, a.ID); err != nil || u.Sessions != 7 {
		t.Errorf("TenantUsage(a) = %+v, %v; want 7 sessions", u, err)
	}

	_, err = s.CreateSession(ctx, store.Session{TenantID: "tn_missing"})
	wantErr(t, "CreateSession(unknown tenant)", err, errdefs.ErrNotFound)
}

// testQuotasLowered checks that a quota lowered below the usage removes nothing and only refuses more.
func testQuotasLowered(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "lowered")
	var sbs []store.Sandbox
	for range 4 {
		sbs = append(sbs, drive(t, s, mustSandbox(t, s, store.Sandbox{TenantID: a.ID}), store.StateRunning))
	}
	var ses []store.Session
	for range 3 {
		ses = append(ses, driveSession(t, s, mustSession(t, s, store.Session{TenantID: a.ID}), store.SessionRunning))
	}
	mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: ses[0].ID, StoredBytes: 500})
	q := store.TenantQuotas{RunningSandboxes: 2, Sessions: 1, SnapshotBytes: 100}
	tn, err := s.SetTenantQuotas(ctx, a.ID, q)
	wantErr(t, "SetTenantQuotas(below usage)", err, nil)
	if tn.Quotas != q {
		t.Errorf("SetTenantQuotas returned Quotas %+v; want %+v", tn.Quotas, q)
	}

	want := store.TenantUsage{RunningSandboxes: 4, Sessions: 3, SnapshotBytes: 500}
	if u, err := s.TenantUsage(ctx, a.ID); err != nil || u != want {
		t.Errorf("TenantUsage after lowering = %+v, %v; want %+v", u, err, want)
	}
	for _, sb := range sbs {
		got, err := s.GetSandbox(ctx, a.ID, sb.ID)
		wantErr(t, "GetSandbox("+sb.ID+")", err, nil)
		if got.State != store.StateRunning {
			t.Errorf("sandbox %s is %s after lowering the quota; want running", sb.ID, got.State)
		}
	}
	for _, se := range ses {
		got, err := s.GetSession(ctx, a.ID, se.ID)
		wantErr(t, "GetSession("+se.ID+")", err, nil)
		if got.State != store.SessionRunning {
			t.Errorf("session %s is %s after lowering the quota; want running", se.ID, got.State)
		}
	}
	_, err = s.CreateSandbox(ctx, store.Sandbox{TenantID: a.ID, Template: "base"})
	wantErr(t, "CreateSandbox(over quota)", err, errdefs.ErrResourceExhausted)
	_, err = s.CreateSession(ctx, store.Session{TenantID: a.ID})
	wantErr(t, "CreateSession(over quota)", err, errdefs.ErrResourceExhausted)
	// The store does not enforce SnapshotBytes (the control plane does): a snapshot is still stored.
	mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: ses[1].ID, StoredBytes: 1})

	// Existing objects still change, and stopping some is not enough until the usage is below the quota.
	sbs[0].Reason = "over quota, still updated"
	sbs[0], err = s.UpdateSandbox(ctx, sbs[0])
	wantErr(t, "UpdateSandbox(over quota)", err, nil)
	for i := range 2 {
		drive(t, s, sbs[i], store.StateStopped)
	}
	_, err = s.CreateSandbox(ctx, store.Sandbox{TenantID: a.ID, Template: "base"})
	wantErr(t, "CreateSandbox(at quota)", err, errdefs.ErrResourceExhausted)
	drive(t, s, sbs[2], store.StateFailed)
	mustSandbox(t, s, store.Sandbox{TenantID: a.ID})
}

// testQuotasConcurrent checks that concurrent creates cannot overshoot a quota.
func testQuotasConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const quota, goroutines = 3, 10
	run := func(t *testing.T, what string, create func(tenantID string) error, usage func(store.TenantUsage) int64) {
		a := mustTenant(t, s, "concurrent-"+what)
		_, err := s.SetTenantQuotas(ctx, a.ID, store.TenantQuotas{RunningSandboxes: quota, Sessions: quota})
		wantErr(t, "SetTenantQuotas", err, nil)
		checkWins(t, "create "+what, race(goroutines, func(int) error { return create(a.ID) }), quota, errdefs.ErrResourceExhausted)
		u, err := s.TenantUsage(ctx, a.ID)
		wantErr(t, "TenantUsage", err, nil)
		if got := usage(u); got != quota {
			t.Errorf("TenantUsage after concurrent creates of %s = %+v; want %d", what, u, quota)
		}
	}
	t.Run("Sandboxes", func(t *testing.T) {
		run(t, "sandboxes", func(tenantID string) error {
			_, err := s.CreateSandbox(ctx, store.Sandbox{TenantID: tenantID, Template: "base"})
			return err
		}, func(u store.TenantUsage) int64 { return u.RunningSandboxes })
	})
	t.Run("Sessions", func(t *testing.T) {
		run(t, "sessions", func(tenantID string) error {
			_, err := s.CreateSession(ctx, store.Session{TenantID: tenantID})
			return err
		}, func(u store.TenantUsage) int64 { return u.Sessions })
	})
}
