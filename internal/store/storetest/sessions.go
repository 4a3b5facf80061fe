package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

func testSessionCreateGet(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")

	in := store.Session{
		TenantID: a.ID,
		Reason:   "requested",
		Spec: store.SessionSpec{Template: "python-3.12", CPUMillicores: 1500, MemoryMB: 512, DiskMB: 2048,
			// Opaque to the store: kept byte for byte.
			NetworkPolicy: []byte(`{"default":"deny","rules":[{"action":"allow","host":"*.example.com"}]}`)},
		Metadata:               map[string]string{"team": "ml", "empty": "", "ünï": "cödé"},
		IdleTimeoutSeconds:     300,
		AutoResume:             true,
		RollingIntervalSeconds: 900,
		Retention:              store.RetentionSpec{KeepAllSeconds: 3600, KeepHourlySeconds: 2 * 86400, KeepDailySeconds: 1<<63 - 1},
		SandboxID:              "sb_1",
		PausedAt:               ptr(base.Add(-time.Hour)),
		TimeoutSeconds:         600,
		OnTimeout:              store.SessionTimeoutPause,
		EndsAt:                 ptr(base.Add(10 * time.Minute)),
	}
	before := store.NormalizeTime(time.Now())
	se, err := s.CreateSession(ctx, in)
	wantErr(t, "CreateSession", err, nil)
	if !strings.HasPrefix(se.ID, "se_") {
		t.Errorf("assigned session ID = %q; want prefix se_", se.ID)
	}
	if se.CreatedAt.Before(before) || se.CreatedAt.After(time.Now()) {
		t.Errorf("assigned CreatedAt = %v; want about now (after %v)", se.CreatedAt, before)
	}
	want := in
	want.ID = se.ID
	want.State = store.SessionCreating
	want.CreatedAt, want.UpdatedAt, want.LastActivityAt = se.CreatedAt, se.CreatedAt, se.CreatedAt
	want.Version = 1
	if diff := cmp.Diff(want, se, cmpOpts...); diff != "" {
		t.Errorf("CreateSession returned (-want +got):\n%s", diff)
	}
	checkSessionUTC(t, se)

	// The returned session must not share the caller's map or policy.
	in.Metadata["team"] = "changed"
	in.Spec.NetworkPolicy[0] = 'X'
	if se.Metadata["team"] != "ml" || se.Spec.NetworkPolicy[0] != '{' {
		t.Errorf("CreateSession returned a session aliasing the caller's metadata or network policy")
	}

	got := checkStored(t, s, sessionKind, se, "GetSession")
	got, err = s.GetSessionAnyTenant(ctx, se.ID)
	wantErr(t, "GetSessionAnyTenant", err, nil)
	if diff := cmp.Diff(se, got, cmpOpts...); diff != "" {
		t.Errorf("GetSessionAnyTenant (-want +got):\n%s", diff)
	}

	// Tenant isolation: another tenant's session does not exist for b.
	_, err = s.GetSession(ctx, b.ID, se.ID)
	wantErr(t, "GetSession(other tenant)", err, errdefs.ErrNotFound)
	_, err = s.GetSession(ctx, a.ID, "se_missing")
	wantErr(t, "GetSession(missing)", err, errdefs.ErrNotFound)
	_, err = s.GetSessionAnyTenant(ctx, "se_missing")
	wantErr(t, "GetSessionAnyTenant(missing)", err, errdefs.ErrNotFound)

	// Defaults: empty metadata is an empty, non-nil map; no policy stays nil; a given LastActivityAt is kept.
	plain := mustSession(t, s, store.Session{ID: "se_plain", TenantID: a.ID, CreatedAt: base, LastActivityAt: base.Add(time.Minute)})
	if plain.Metadata == nil {
		t.Errorf("CreateSession returned nil Metadata; want an empty map")
	}
	if got, _ := s.GetSession(ctx, a.ID, plain.ID); got.Metadata == nil || got.Spec.NetworkPolicy != nil {
		t.Errorf("GetSession = metadata %#v, policy %q; want an empty map and nil", got.Metadata, got.Spec.NetworkPolicy)
	}
	if got, _ := s.GetSession(ctx, a.ID, plain.ID); got.RollingIntervalSeconds != 0 || got.Retention != (store.RetentionSpec{}) {
		t.Errorf("GetSession = rolling interval %d, retention %+v; want zeros (none, inherit)", got.RollingIntervalSeconds, got.Retention)
	}
	if !plain.LastActivityAt.Equal(base.Add(time.Minute)) || !plain.CreatedAt.Equal(base) || !plain.UpdatedAt.Equal(base) {
		t.Errorf("CreatedAt, UpdatedAt, LastActivityAt = %v, %v, %v; want %v, %v, %v", plain.CreatedAt, plain.UpdatedAt,
			plain.LastActivityAt, base, base, base.Add(time.Minute))
	}

	// Forks start paused or resuming, from a complete snapshot of the tenant (or an uploading one; see
	// testSnapshotUploading).
	src := mustSession(t, s, store.Session{TenantID: a.ID})
	head := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: src.ID, State: store.SnapshotComplete})
	writing := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: src.ID})
	failed := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: src.ID})
	failed.State = store.SnapshotFailed
	if _, err := s.UpdateSnapshot(ctx, failed); err != nil {
		t.Fatalf("UpdateSnapshot(failed): %v", err)
	}
	other := mustSession(t, s, store.Session{TenantID: a.ID})
	bSrc := mustSession(t, s, store.Session{TenantID: b.ID})
	bHead := mustSnapshot(t, s, store.Snapshot{TenantID: b.ID, SessionID: bSrc.ID, State: store.SnapshotComplete})
	for _, st := range []store.SessionState{store.SessionPaused, store.SessionResuming} {
		fork := store.Session{TenantID: a.ID, State: st, HeadSnapshotID: head.ID, ParentSessionID: src.ID, ForkedFromSnapshotID: head.ID}
		got, err := s.CreateSession(ctx, fork)
		wantErr(t, "CreateSession(fork, "+string(st)+")", err, nil)
		if got.State != st || got.HeadSnapshotID != head.ID || got.ParentSessionID != src.ID || got.ForkedFromSnapshotID != head.ID {
			t.Errorf("CreateSession(fork) = %+v; want state %s, head, parent and fork source set", got, st)
		}
		if stored, _ := s.GetSession(ctx, a.ID, got.ID); !cmp.Equal(got, stored, cmpOpts...) {
			t.Errorf("GetSession(fork) = %+v; want %+v", stored, got)
		}
	}

	bad := []struct {
		name string
		se   store.Session
		want error
	}{
		{"duplicate ID", store.Session{ID: "se_plain", TenantID: a.ID}, errdefs.ErrAlreadyExists},
		{"duplicate ID in another tenant", store.Session{ID: "se_plain", TenantID: b.ID}, errdefs.ErrAlreadyExists},
		{"unknown tenant", store.Session{TenantID: "tn_missing"}, errdefs.ErrNotFound},
		{"no tenant", store.Session{}, errdefs.ErrInvalidArgument},
		{"unknown state", store.Session{TenantID: a.ID, State: "stopped"}, errdefs.ErrInvalidArgument},
		{"negative memory", store.Session{TenantID: a.ID, Spec: store.SessionSpec{MemoryMB: -1}}, errdefs.ErrInvalidArgument},
		{"negative idle timeout", store.Session{TenantID: a.ID, IdleTimeoutSeconds: -1}, errdefs.ErrInvalidArgument},
		{"negative rolling interval", store.Session{TenantID: a.ID, RollingIntervalSeconds: -1}, errdefs.ErrInvalidArgument},
		{"negative timeout", store.Session{TenantID: a.ID, TimeoutSeconds: -1}, errdefs.ErrInvalidArgument},
		{"unknown timeout action", store.Session{TenantID: a.ID, OnTimeout: "explode"}, errdefs.ErrInvalidArgument},
		{"negative retention keep all", store.Session{TenantID: a.ID, Retention: store.RetentionSpec{KeepAllSeconds: -1}}, errdefs.ErrInvalidArgument},
		{"negative retention keep hourly", store.Session{TenantID: a.ID, Retention: store.RetentionSpec{KeepHourlySeconds: -1}}, errdefs.ErrInvalidArgument},
		{"negative retention keep daily", store.Session{TenantID: a.ID, Retention: store.RetentionSpec{KeepDailySeconds: -86400}}, errdefs.ErrInvalidArgument},
		{"empty metadata key", store.Session{TenantID: a.ID, Metadata: map[string]string{"": "x"}}, errdefs.ErrInvalidArgument},
		{"missing head", store.Session{TenantID: a.ID, State: store.SessionPaused, HeadSnapshotID: "sn_missing"}, errdefs.ErrNotFound},
		{"other tenant's head", store.Session{TenantID: a.ID, State: store.SessionPaused, HeadSnapshotID: bHead.ID}, errdefs.ErrNotFound},
		{"head still writing", store.Session{TenantID: a.ID, State: store.SessionPaused, HeadSnapshotID: writing.ID}, errdefs.ErrFailedPrecondition},
		{"missing parent session", store.Session{TenantID: a.ID, ParentSessionID: "se_missing"}, errdefs.ErrNotFound},
		{"other tenant's parent session", store.Session{TenantID: a.ID, ParentSessionID: bSrc.ID}, errdefs.ErrNotFound},
		{"missing fork source", store.Session{TenantID: a.ID, ForkedFromSnapshotID: "sn_missing"}, errdefs.ErrNotFound},
		{"other tenant's fork source", store.Session{TenantID: a.ID, ForkedFromSnapshotID: bHead.ID}, errdefs.ErrNotFound},
		{"fork source still writing", store.Session{TenantID: a.ID, ForkedFromSnapshotID: writing.ID}, errdefs.ErrFailedPrecondition},
		{"failed head", store.Session{TenantID: a.ID, State: store.SessionPaused, HeadSnapshotID: failed.ID}, errdefs.ErrFailedPrecondition},
		{"failed fork source", store.Session{TenantID: a.ID, ForkedFromSnapshotID: failed.ID}, errdefs.ErrFailedPrecondition},
		{"fork source not of the parent", store.Session{TenantID: a.ID, ParentSessionID: other.ID, ForkedFromSnapshotID: head.ID}, errdefs.ErrInvalidArgument},
	}
	for _, st := range store.SessionStates() {
		if !store.InitialSessionState(st) {
			bad = append(bad, struct {
				name string
				se   store.Session
				want error
			}{"initial state " + string(st), store.Session{TenantID: a.ID, State: st}, errdefs.ErrInvalidArgument})
		}
	}
	for _, tt := range bad {
		_, err := s.CreateSession(ctx, tt.se)
		wantErr(t, "CreateSession("+tt.name+")", err, tt.want)
	}
	// The failed creates left the original alone and stored nothing.
	if got, err := s.GetSession(ctx, a.ID, "se_plain"); err != nil || !cmp.Equal(got, plain, cmpOpts...) {
		t.Errorf("GetSession(se_plain) after duplicate creates = %+v, %v; want %+v", got, err, plain)
	}
	if items := listAllSessions(t, s, a.ID, store.SessionFilter{}); len(items) != 6 {
		t.Errorf("tenant a has %d sessions after the failed creates; want 6: %v", len(items), sessionKind.ids(items))
	}
}

// testSessionTimes checks that every time survives a round trip in UTC with microsecond precision,
// whatever zone it was given in.
func testSessionTimes(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	created := time.Date(2024, 2, 29, 23, 59, 59, 123456789, zone)
	activity := created.Add(90*time.Second + 987654321)
	se := mustSession(t, s, store.Session{TenantID: a.ID, CreatedAt: created, LastActivityAt: activity})
	checkSessionUTC(t, se)
	if want := store.NormalizeTime(created); !se.CreatedAt.Equal(want) || se.CreatedAt.Nanosecond() != 123456000 {
		t.Errorf("CreatedAt = %v; want %v", se.CreatedAt, want)
	}
	if want := store.NormalizeTime(activity); !se.LastActivityAt.Equal(want) {
		t.Errorf("LastActivityAt = %v; want %v", se.LastActivityAt, want)
	}

	paused := time.Date(2024, 3, 1, 0, 0, 0, 1999, time.Local)
	se = driveSession(t, s, se, store.SessionPaused)
	se.PausedAt = &paused
	se, err := s.UpdateSession(ctx, se)
	wantErr(t, "UpdateSession(paused at)", err, nil)
	checkSessionUTC(t, se)
	touched := activity.Add(time.Hour + 999)
	wantErr(t, "TouchSession", s.TouchSession(ctx, a.ID, se.ID, touched.In(zone)), nil)
	se.LastActivityAt = store.NormalizeTime(touched)

	got, err := s.GetSession(ctx, a.ID, se.ID)
	wantErr(t, "GetSession", err, nil)
	checkSessionUTC(t, got)
	if diff := cmp.Diff(se, got, cmpOpts...); diff != "" {
		t.Errorf("GetSession after updates (-want +got):\n%s", diff)
	}
	if !got.PausedAt.Equal(store.NormalizeTime(paused)) || got.PausedAt.Nanosecond() != 1000 {
		t.Errorf("PausedAt = %v; want %v", got.PausedAt, store.NormalizeTime(paused))
	}
}

func testSessionUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	parent := mustSession(t, s, store.Session{TenantID: a.ID})
	source := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: parent.ID, State: store.SnapshotComplete})
	orig := mustSession(t, s, store.Session{TenantID: a.ID, CreatedAt: base, LastActivityAt: base.Add(time.Minute),
		ParentSessionID: parent.ID, ForkedFromSnapshotID: source.ID, Metadata: map[string]string{"k": "v", "drop": "me"}})
	head := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: orig.ID, State: store.SnapshotComplete})

	next := orig
	next.State = store.SessionRunning
	next.Reason = "booted"
	next.Spec = store.SessionSpec{Template: "t2", CPUMillicores: 250, MemoryMB: 128, DiskMB: 64, NetworkPolicy: []byte(`{}`)}
	next.Metadata = map[string]string{"k": "v2", "new": "x"}
	next.IdleTimeoutSeconds = 60
	next.AutoResume = true
	next.RollingIntervalSeconds = 300
	next.Retention = store.RetentionSpec{KeepAllSeconds: 7200, KeepDailySeconds: 7 * 86400}
	next.SandboxID = "sb_7"
	next.HeadSnapshotID = head.ID
	next.LastActivityAt = base.Add(time.Hour)
	next.PausedAt = ptr(base.Add(time.Second))
	next.TimeoutSeconds = 30
	next.OnTimeout = store.SessionTimeoutPause
	next.EndsAt = ptr(base.Add(time.Minute))
	next.ParentSessionID = "se_other"      // immutable: ignored
	next.ForkedFromSnapshotID = "sn_other" // immutable: ignored
	next.CreatedAt = base.Add(time.Hour)   // immutable: ignored
	next.UpdatedAt = base.Add(-time.Hour)  // set by the store: ignored
	got, err := s.UpdateSession(ctx, next)
	wantErr(t, "UpdateSession", err, nil)
	want := next
	want.ParentSessionID, want.ForkedFromSnapshotID = parent.ID, source.ID
	want.CreatedAt = orig.CreatedAt
	want.UpdatedAt = got.UpdatedAt
	want.Version = orig.Version + 1
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("UpdateSession returned (-want +got):\n%s", diff)
	}
	if got.UpdatedAt.Before(orig.UpdatedAt) {
		t.Errorf("UpdatedAt went backwards: %v after %v", got.UpdatedAt, orig.UpdatedAt)
	}
	stored := checkStored(t, s, sessionKind, got, "GetSession after update")

	// Metadata filters follow the update: old pairs are gone, new ones match.
	for _, tt := range []struct {
		meta map[string]string
		want int
	}{
		{map[string]string{"k": "v"}, 0},
		{map[string]string{"drop": "me"}, 0},
		{map[string]string{"k": "v2"}, 1},
		{map[string]string{"k": "v2", "new": "x"}, 1},
	} {
		items := listAllSessions(t, s, a.ID, store.SessionFilter{Metadata: tt.meta})
		if len(items) != tt.want {
			t.Errorf("ListSessions(metadata %v) after update = %v; want %d", tt.meta, sessionKind.ids(items), tt.want)
		}
	}

	// Same state, other fields: allowed. An older LastActivityAt does not move it back; nor does a zero one.
	for _, activity := range []time.Time{base, {}} {
		same := stored
		same.Reason = "still running"
		same.LastActivityAt = activity
		same, err = s.UpdateSession(ctx, same)
		wantErr(t, "UpdateSession(same state)", err, nil)
		if same.Version != stored.Version+1 || !same.LastActivityAt.Equal(stored.LastActivityAt) {
			t.Errorf("after a same-state update with activity %v: version %d, LastActivityAt %v; want %d, %v",
				activity, same.Version, same.LastActivityAt, stored.Version+1, stored.LastActivityAt)
		}
		stored = same
	}
	// A later one does.
	later := stored
	later.LastActivityAt = stored.LastActivityAt.Add(time.Second)
	stored, err = s.UpdateSession(ctx, later)
	wantErr(t, "UpdateSession(later activity)", err, nil)
	if !stored.LastActivityAt.Equal(later.LastActivityAt) {
		t.Errorf("LastActivityAt after a later one = %v; want %v", stored.LastActivityAt, later.LastActivityAt)
	}

	// The head may be cleared, and set to another complete snapshot of the tenant (a fork's source too).
	for _, h := range []string{"", source.ID, head.ID} {
		u := stored
		u.HeadSnapshotID = h
		stored, err = s.UpdateSession(ctx, u)
		wantErr(t, "UpdateSession(head "+h+")", err, nil)
		if stored.HeadSnapshotID != h {
			t.Errorf("HeadSnapshotID = %q; want %q", stored.HeadSnapshotID, h)
		}
	}

	// The rolling interval and retention may change again, back to zero (never; inherit) too.
	for _, tm := range []struct {
		rolling int
		keep    store.RetentionSpec
	}{
		{3600, store.RetentionSpec{KeepHourlySeconds: 86400}},
		{0, store.RetentionSpec{}},
		{1, store.RetentionSpec{KeepAllSeconds: 1, KeepHourlySeconds: 2, KeepDailySeconds: 3}},
	} {
		u := stored
		u.RollingIntervalSeconds, u.Retention = tm.rolling, tm.keep
		stored, err = s.UpdateSession(ctx, u)
		wantErr(t, fmt.Sprintf("UpdateSession(rolling %d, retention %+v)", tm.rolling, tm.keep), err, nil)
		got, err := s.GetSession(ctx, a.ID, u.ID)
		wantErr(t, "GetSession", err, nil)
		if got.RollingIntervalSeconds != tm.rolling || got.Retention != tm.keep || !cmp.Equal(got, stored, cmpOpts...) {
			t.Errorf("GetSession after update = rolling %d, retention %+v (%+v); want %d, %+v (%+v)",
				got.RollingIntervalSeconds, got.Retention, got, tm.rolling, tm.keep, stored)
		}
	}

	bSession := mustSession(t, s, store.Session{TenantID: b.ID})
	bSnap := mustSnapshot(t, s, store.Snapshot{TenantID: b.ID, SessionID: bSession.ID, State: store.SnapshotComplete})
	writing := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: orig.ID})
	failed := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: orig.ID})
	failed.State = store.SnapshotFailed
	_, err = s.UpdateSnapshot(ctx, failed)
	wantErr(t, "UpdateSnapshot(failed)", err, nil)

	bad := []struct {
		name   string
		change func(*store.Session)
		want   error
	}{
		{"other tenant", func(se *store.Session) { se.TenantID = b.ID }, errdefs.ErrNotFound},
		{"missing", func(se *store.Session) { se.ID = "se_missing" }, errdefs.ErrNotFound},
		{"unknown state", func(se *store.Session) { se.State = "stopped" }, errdefs.ErrInvalidArgument},
		{"negative disk", func(se *store.Session) { se.Spec.DiskMB = -1 }, errdefs.ErrInvalidArgument},
		{"negative idle timeout", func(se *store.Session) { se.IdleTimeoutSeconds = -5 }, errdefs.ErrInvalidArgument},
		{"negative rolling interval", func(se *store.Session) { se.RollingIntervalSeconds = -60 }, errdefs.ErrInvalidArgument},
		{"negative timeout", func(se *store.Session) { se.TimeoutSeconds = -1 }, errdefs.ErrInvalidArgument},
		{"unknown timeout action", func(se *store.Session) { se.OnTimeout = "later" }, errdefs.ErrInvalidArgument},
		{"negative retention keep all", func(se *store.Session) { se.Retention.KeepAllSeconds = -1 }, errdefs.ErrInvalidArgument},
		{"negative retention keep hourly", func(se *store.Session) { se.Retention.KeepHourlySeconds = -1 }, errdefs.ErrInvalidArgument},
		{"negative retention keep daily", func(se *store.Session) { se.Retention.KeepDailySeconds = -1 }, errdefs.ErrInvalidArgument},
		{"empty metadata key", func(se *store.Session) { se.Metadata = map[string]string{"": "x"} }, errdefs.ErrInvalidArgument},
		{"stale version", func(se *store.Session) { se.Version-- }, errdefs.ErrConflict},
		{"future version", func(se *store.Session) { se.Version += 5 }, errdefs.ErrConflict},
		{"forbidden transition", func(se *store.Session) { se.State = store.SessionCreating }, errdefs.ErrConflict},
		{"missing head", func(se *store.Session) { se.HeadSnapshotID = "sn_missing" }, errdefs.ErrNotFound},
		{"other tenant's head", func(se *store.Session) { se.HeadSnapshotID = bSnap.ID }, errdefs.ErrNotFound},
		{"writing head", func(se *store.Session) { se.HeadSnapshotID = writing.ID }, errdefs.ErrFailedPrecondition},
		{"failed head", func(se *store.Session) { se.HeadSnapshotID = failed.ID }, errdefs.ErrFailedPrecondition},
	}
	for _, tt := range bad {
		u := stored
		u.Reason = "refused: " + tt.name
		tt.change(&u)
		_, err := s.UpdateSession(ctx, u)
		wantErr(t, "UpdateSession("+tt.name+")", err, tt.want)
	}
	// Nothing of the failed updates was stored.
	checkStored(t, s, sessionKind, stored, "GetSession after failed updates")
}

// testSessionTransitions tries every pair of states: allowed transitions are stored, the others fail
// with ErrConflict naming both states and leave the session as it was.
func testSessionTransitions(t *testing.T, s store.Store) {
	a := mustTenant(t, s, "a")
	checkTransitions(t, s, sessionKind, store.SessionStates(), func(t *testing.T, from store.SessionState) store.Session {
		return driveSession(t, s, mustSession(t, s, store.Session{TenantID: a.ID}), from)
	})
}

// testSessionConcurrentUpdates races many updates from one Version (exactly one wins), then runs a chain
// of updates alongside a stream of touches (none of them conflicts, and no activity is lost).
func testSessionConcurrentUpdates(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	se := mustSession(t, s, store.Session{TenantID: a.ID, CreatedAt: base})

	winner, stored := raceUpdates(t, s, sessionKind, se, 16, func(i int, u *store.Session) {
		u.State = store.SessionRunning
		u.Reason = fmt.Sprintf("writer %d", i)
		u.Metadata = map[string]string{"writer": fmt.Sprint(i)}
	})
	if stored.Version != se.Version+1 || stored.Reason != fmt.Sprintf("writer %d", winner) ||
		stored.Metadata["writer"] != fmt.Sprint(winner) {
		t.Errorf("stored = version %d, reason %q, metadata %v; want version %d from writer %d",
			stored.Version, stored.Reason, stored.Metadata, se.Version+1, winner)
	}

	const updates, touches = 20, 50
	last := base.Add(touches * time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		cur := stored
		for i := range updates {
			cur.Reason = fmt.Sprintf("update %d", i)
			var err error
			if cur, err = s.UpdateSession(ctx, cur); err != nil {
				t.Errorf("update %d alongside touches: %v", i, err)
				return
			}
		}
	})
	wg.Go(func() {
		for i := range touches {
			if err := s.TouchSession(ctx, a.ID, se.ID, base.Add(time.Duration(i+1)*time.Second)); err != nil {
				t.Errorf("touch %d: %v", i, err)
				return
			}
		}
	})
	wg.Wait()
	final, err := s.GetSession(ctx, a.ID, se.ID)
	wantErr(t, "GetSession", err, nil)
	if final.Version != stored.Version+updates || !final.LastActivityAt.Equal(last) {
		t.Errorf("after updates and touches: version %d, LastActivityAt %v; want %d, %v",
			final.Version, final.LastActivityAt, stored.Version+updates, last)
	}
}

// testSessionTouch checks that TouchSession only moves LastActivityAt forward and changes nothing else.
func testSessionTouch(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	se := driveSession(t, s, mustSession(t, s, store.Session{TenantID: a.ID, CreatedAt: base, IdleTimeoutSeconds: 30}), store.SessionRunning)

	get := func() store.Session {
		t.Helper()
		got, err := s.GetSession(ctx, a.ID, se.ID)
		wantErr(t, "GetSession", err, nil)
		return got
	}
	t1 := base.Add(time.Hour + 123456789*time.Nanosecond)
	tests := []struct {
		at, want time.Time
	}{
		{t1, t1},
		{t1.Add(-time.Minute), t1},          // earlier: ignored
		{t1.Add(200 * time.Nanosecond), t1}, // the same microsecond
		{t1.Add(time.Minute), t1.Add(time.Minute)},
		{base, t1.Add(time.Minute)},
	}
	for _, tt := range tests {
		wantErr(t, "TouchSession", s.TouchSession(ctx, a.ID, se.ID, tt.at), nil)
		got := get()
		if !got.LastActivityAt.Equal(store.NormalizeTime(tt.want)) || got.LastActivityAt.Location() != time.UTC {
			t.Errorf("LastActivityAt after touching at %v = %v; want %v", tt.at, got.LastActivityAt, store.NormalizeTime(tt.want))
		}
		// Nothing else changes: not the version, not UpdatedAt.
		want := se
		want.LastActivityAt = got.LastActivityAt
		if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
			t.Errorf("TouchSession changed more than LastActivityAt (-want +got):\n%s", diff)
		}
	}

	// An update from a copy read before the touches succeeds and keeps the later activity.
	se.Reason = "stale copy"
	updated, err := s.UpdateSession(ctx, se)
	wantErr(t, "UpdateSession(copy from before the touches)", err, nil)
	if want := store.NormalizeTime(t1.Add(time.Minute)); !updated.LastActivityAt.Equal(want) {
		t.Errorf("LastActivityAt after the update = %v; want the touched %v", updated.LastActivityAt, want)
	}
	if got := get(); !cmp.Equal(updated, got, cmpOpts...) {
		t.Errorf("GetSession = %+v; want %+v", got, updated)
	}

	wantErr(t, "TouchSession(other tenant)", s.TouchSession(ctx, b.ID, se.ID, t1.Add(time.Hour)), errdefs.ErrNotFound)
	wantErr(t, "TouchSession(missing)", s.TouchSession(ctx, a.ID, "se_missing", t1), errdefs.ErrNotFound)
	if got := get(); !cmp.Equal(updated, got, cmpOpts...) {
		t.Errorf("GetSession after refused touches = %+v; want %+v", got, updated)
	}
}

// testSessionList checks ListSessions: order, paging at several sizes, stability under inserts, the
// filters against the same selection made in Go, tenant isolation and bad input.
func testSessionList(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	states := store.SessionStates()
	teams, envs := []string{"red", "blue"}, []string{"prod", "dev", "test"}

	var all []store.Session
	for i := range 60 {
		meta := map[string]string{"team": teams[i%2], "env": envs[i%3]}
		if i%4 == 0 {
			meta["x"] = "1"
		}
		at := base.Add(time.Duration(i/3) * time.Millisecond) // groups share a CreatedAt: the ID breaks ties
		se := mustSession(t, s, store.Session{TenantID: a.ID, CreatedAt: at, Metadata: meta})
		all = append(all, driveSession(t, s, se, states[i%len(states)]))
		if i%6 == 0 { // the same labels in another tenant, which must never show up
			driveSession(t, s, mustSession(t, s, store.Session{TenantID: b.ID, CreatedAt: at, Metadata: meta}), states[i%len(states)])
		}
	}
	sessionKind.sortCreated(all)

	for _, limit := range []int{1, 7, 59, 60, 61, 1000} {
		got, pages := pageThrough(t, "ListSessions", limit, func(cursor string) ([]store.Session, string, error) {
			return s.ListSessions(ctx, a.ID, store.SessionFilter{Limit: limit, Cursor: cursor})
		})
		if wantPages := max(1, (60+limit-1)/limit); pages != wantPages {
			t.Errorf("limit %d: got %d pages; want %d (a last page must not be followed by an empty one)", limit, pages, wantPages)
		}
		if diff := cmp.Diff(all, got, cmpOpts...); diff != "" {
			t.Errorf("limit %d: pages joined (-want +got):\n%s", limit, diff)
		}
		// Newest first: the same sessions, the other way round, in as many pages.
		got, pages = pageThrough(t, "ListSessions", limit, func(cursor string) ([]store.Session, string, error) {
			return s.ListSessions(ctx, a.ID, store.SessionFilter{Limit: limit, Cursor: cursor, Descending: true})
		})
		if wantPages := max(1, (60+limit-1)/limit); pages != wantPages {
			t.Errorf("descending, limit %d: got %d pages; want %d", limit, pages, wantPages)
		}
		if diff := cmp.Diff(reversed(all), got, cmpOpts...); diff != "" {
			t.Errorf("descending, limit %d: pages joined (-want +got):\n%s", limit, diff)
		}
	}

	filters := []store.SessionFilter{
		{States: []store.SessionState{store.SessionRunning}},
		{States: []store.SessionState{store.SessionPaused, store.SessionFailed}},
		{States: states},
		{Metadata: map[string]string{"team": "red"}},
		{Metadata: map[string]string{"team": "red", "env": "prod", "x": "1"}},
		{Metadata: map[string]string{"x": "2"}},
		{Metadata: map[string]string{"nokey": ""}},
		{Metadata: map[string]string{"team": "blue"}, States: []store.SessionState{store.SessionDeleted, store.SessionCreating}},
	}
	for _, f := range filters {
		var want []store.Session
		for _, se := range all {
			if sessionMatches(se, f) {
				want = append(want, se)
			}
		}
		for _, limit := range []int{3, 100} {
			f.Limit = limit
			if diff := cmp.Diff(want, listAllSessions(t, s, a.ID, f), cmpOpts...); diff != "" {
				t.Errorf("ListSessions(states %v, metadata %v, limit %d) (-want +got):\n%s", f.States, f.Metadata, limit, diff)
			}
			f.Descending = true
			if diff := cmp.Diff(reversed(want), listAllSessions(t, s, a.ID, f), cmpOpts...); diff != "" {
				t.Errorf("ListSessions(states %v, metadata %v, limit %d, descending) (-want +got):\n%s", f.States, f.Metadata, limit, diff)
			}
			f.Descending = false
		}
	}

	// Sessions created between pages: those after the cursor are listed, those behind it are not, and
	// every session that existed throughout is listed exactly once.
	var (
		got    []store.Session
		later  = map[string]bool{}
		sooner = map[string]bool{}
		f      = store.SessionFilter{Limit: 7}
	)
	for page := 0; ; page++ {
		items, next, err := s.ListSessions(ctx, a.ID, f)
		wantErr(t, "ListSessions", err, nil)
		got = append(got, items...)
		if next == "" {
			break
		}
		if page > 100 {
			t.Fatalf("no last page after %d pages", page)
		}
		f.Cursor = next
		sooner[mustSession(t, s, store.Session{TenantID: a.ID, CreatedAt: base.Add(-time.Duration(page+1) * time.Second)}).ID] = true
		later[mustSession(t, s, store.Session{TenantID: a.ID, CreatedAt: base.Add(time.Hour + time.Duration(page)*time.Second)}).ID] = true
	}
	seen := map[string]int{}
	for _, se := range got {
		seen[se.ID]++
	}
	for id, n := range seen {
		if n != 1 || sooner[id] {
			t.Errorf("session %s listed %d times (created behind the cursor: %v)", id, n, sooner[id])
		}
	}
	for _, se := range all {
		if seen[se.ID] == 0 {
			t.Errorf("session %s, there from the start, was missed", se.ID)
		}
	}
	for id := range later {
		if seen[id] == 0 {
			t.Errorf("session %s, created after the cursor, was missed", id)
		}
	}

	items, next, err := s.ListSessions(ctx, "tn_missing", store.SessionFilter{})
	wantErr(t, "ListSessions(unknown tenant)", err, nil)
	if len(items) != 0 || next != "" {
		t.Errorf("ListSessions(unknown tenant) = %d items, cursor %q; want none", len(items), next)
	}
	bad := map[string]store.SessionFilter{
		"negative limit":     {Limit: -1},
		"garbage cursor":     {Cursor: "not-a-cursor"},
		"unknown state":      {States: []store.SessionState{"stopped"}},
		"empty metadata key": {Metadata: map[string]string{"": "x"}},
	}
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		_, _, err := s.ListSessions(ctx, a.ID, bad[name])
		wantErr(t, "ListSessions("+name+")", err, errdefs.ErrInvalidArgument)
	}
}

// testSessionListByState checks the cross-tenant state query of the lifecycle loops.
func testSessionListByState(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	plan := []struct {
		tenant string
		state  store.SessionState
	}{
		{a.ID, store.SessionRunning}, {a.ID, store.SessionRunning}, {a.ID, store.SessionPaused},
		{a.ID, store.SessionCreating}, {a.ID, store.SessionDeleted}, {b.ID, store.SessionRunning},
		{b.ID, store.SessionPausing}, {b.ID, store.SessionResuming}, {b.ID, store.SessionFailed},
	}
	var all []store.Session
	for i, p := range plan {
		se := mustSession(t, s, store.Session{TenantID: p.tenant, CreatedAt: base.Add(time.Duration(i) * time.Second)})
		all = append(all, driveSession(t, s, se, p.state))
	}
	// Update the first running session again: it becomes the most recently updated. A touch of the
	// second does not change its place.
	all[0].Reason = "updated"
	updated, err := s.UpdateSession(ctx, all[0])
	wantErr(t, "UpdateSession", err, nil)
	all[0] = updated
	wantErr(t, "TouchSession", s.TouchSession(ctx, a.ID, all[1].ID, time.Now().Add(time.Hour)), nil)

	checkByState(t, s, sessionKind, all, [][]store.SessionState{
		nil,
		{store.SessionRunning},
		{store.SessionPausing, store.SessionResuming, store.SessionDeleting},
		{store.SessionDeleted, store.SessionPaused},
	}, func(se store.Session) (time.Time, string) { return se.UpdatedAt, se.ID }, false, "stopped")
}

// testSessionListIdle checks the auto-pause query against a controlled now: running, an idle timeout
// set, and no activity for at least that long.
func testSessionListIdle(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	ref := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	mk := func(id, tenant string, state store.SessionState, idle int, last time.Time) {
		t.Helper()
		se := mustSession(t, s, store.Session{ID: id, TenantID: tenant, IdleTimeoutSeconds: idle,
			CreatedAt: ref.Add(-2 * time.Hour), LastActivityAt: last})
		driveSession(t, s, se, state)
	}
	mk("se_i1", a.ID, store.SessionRunning, 60, ref.Add(-60*time.Second)) // exactly at the deadline: idle
	mk("se_i2", a.ID, store.SessionRunning, 60, ref.Add(-61*time.Second))
	mk("se_i3", a.ID, store.SessionRunning, 60, ref.Add(-59*time.Second))
	mk("se_i4", a.ID, store.SessionRunning, 0, ref.Add(-time.Hour)) // never auto-pauses
	mk("se_i5", a.ID, store.SessionPaused, 60, ref.Add(-time.Hour))
	mk("se_i6", a.ID, store.SessionPausing, 60, ref.Add(-time.Hour))
	mk("se_i7", b.ID, store.SessionRunning, 10, ref.Add(-10*time.Minute))
	mk("se_i8", a.ID, store.SessionRunning, 3600, ref.Add(-30*time.Minute))
	mk("se_i9", b.ID, store.SessionCreating, 1, ref.Add(-time.Hour))
	mk("se_ia", b.ID, store.SessionResuming, 1, ref.Add(-time.Hour))

	check := func(now time.Time, limit int, want []string) {
		t.Helper()
		got, err := s.ListIdleSessions(ctx, now, limit)
		wantErr(t, "ListIdleSessions", err, nil)
		if diff := cmp.Diff(want, sessionKind.ids(got), cmpOpts...); diff != "" {
			t.Errorf("ListIdleSessions(%v, %d) IDs (-want +got):\n%s", now, limit, diff)
		}
	}
	check(ref, 0, []string{"se_i7", "se_i2", "se_i1"})
	check(ref.In(time.FixedZone("x", -7*3600)), 0, []string{"se_i7", "se_i2", "se_i1"})
	check(ref, 2, []string{"se_i7", "se_i2"})
	check(ref.Add(-time.Microsecond), 0, []string{"se_i7", "se_i2"})
	check(ref.Add(-time.Hour), 0, nil)
	check(ref.Add(time.Second-time.Microsecond), 0, []string{"se_i7", "se_i2", "se_i1"})
	check(ref.Add(time.Second), 0, []string{"se_i7", "se_i2", "se_i1", "se_i3"})
	check(ref.Add(30*time.Minute), 0, []string{"se_i8", "se_i7", "se_i2", "se_i1", "se_i3"})

	// Activity moves a session out; an older touch does not move it back in.
	wantErr(t, "TouchSession(se_i1)", s.TouchSession(ctx, a.ID, "se_i1", ref.Add(-time.Second)), nil)
	wantErr(t, "TouchSession(se_i1, older)", s.TouchSession(ctx, a.ID, "se_i1", ref.Add(-time.Hour)), nil)
	check(ref, 0, []string{"se_i7", "se_i2"})
	// Pausing moves one out too.
	se, err := s.GetSession(ctx, b.ID, "se_i7")
	wantErr(t, "GetSession(se_i7)", err, nil)
	se.State = store.SessionPausing
	_, err = s.UpdateSession(ctx, se)
	wantErr(t, "UpdateSession(se_i7 pausing)", err, nil)
	check(ref, 0, []string{"se_i2"})

	_, err = s.ListIdleSessions(ctx, ref, -1)
	wantErr(t, "ListIdleSessions(negative limit)", err, errdefs.ErrInvalidArgument)
}

// testSessionListEnded checks the timeout query against a controlled now: running, with an end that
// passed; and that an update clearing the end (a pause) or moving it takes the session out.
func testSessionListEnded(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	ref := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	mk := func(id, tenant string, state store.SessionState, ends *time.Time) {
		t.Helper()
		se := mustSession(t, s, store.Session{ID: id, TenantID: tenant, TimeoutSeconds: 60, EndsAt: ends,
			OnTimeout: store.SessionTimeoutPause, CreatedAt: ref.Add(-2 * time.Hour)})
		driveSession(t, s, se, state)
	}
	mk("se_e1", a.ID, store.SessionRunning, ptr(ref)) // exactly at the end: ended
	mk("se_e2", b.ID, store.SessionRunning, ptr(ref.Add(-time.Minute)))
	mk("se_e3", a.ID, store.SessionRunning, ptr(ref.Add(time.Second)))
	mk("se_e4", a.ID, store.SessionRunning, nil) // no end
	mk("se_e5", a.ID, store.SessionPaused, ptr(ref.Add(-time.Hour)))
	mk("se_e6", a.ID, store.SessionPausing, ptr(ref.Add(-time.Hour)))
	mk("se_e7", b.ID, store.SessionCreating, ptr(ref.Add(-time.Hour)))

	check := func(now time.Time, limit int, want []string) {
		t.Helper()
		got, err := s.ListEndedSessions(ctx, now, limit)
		wantErr(t, "ListEndedSessions", err, nil)
		if diff := cmp.Diff(want, sessionKind.ids(got), cmpOpts...); diff != "" {
			t.Errorf("ListEndedSessions(%v, %d) IDs (-want +got):\n%s", now, limit, diff)
		}
		for _, se := range got {
			if se.OnTimeout != store.SessionTimeoutPause || se.EndsAt == nil || se.EndsAt.Location() != time.UTC {
				t.Errorf("ListEndedSessions: %s has OnTimeout %q, EndsAt %v; want pause and a UTC end", se.ID, se.OnTimeout, se.EndsAt)
			}
		}
	}
	check(ref, 0, []string{"se_e2", "se_e1"})
	check(ref.In(time.FixedZone("x", 5*3600)), 0, []string{"se_e2", "se_e1"})
	check(ref, 1, []string{"se_e2"})
	check(ref.Add(-time.Microsecond), 0, []string{"se_e2"})
	check(ref.Add(time.Second), 0, []string{"se_e2", "se_e1", "se_e3"})

	// A later end (set timeout) or none (a pause clears it) takes a session out.
	se, err := s.GetSession(ctx, b.ID, "se_e2")
	wantErr(t, "GetSession(se_e2)", err, nil)
	se.EndsAt = ptr(ref.Add(time.Hour))
	_, err = s.UpdateSession(ctx, se)
	wantErr(t, "UpdateSession(se_e2 later end)", err, nil)
	se, err = s.GetSession(ctx, a.ID, "se_e1")
	wantErr(t, "GetSession(se_e1)", err, nil)
	se.State, se.EndsAt = store.SessionPausing, nil
	_, err = s.UpdateSession(ctx, se)
	wantErr(t, "UpdateSession(se_e1 pausing)", err, nil)
	check(ref.Add(time.Second), 0, []string{"se_e3"})

	_, err = s.ListEndedSessions(ctx, ref, -1)
	wantErr(t, "ListEndedSessions(negative limit)", err, errdefs.ErrInvalidArgument)
}

func testSessionDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	meta := map[string]string{"gc": "yes"}

	for _, st := range store.SessionStates() {
		if st == store.SessionDeleted {
			continue
		}
		se := driveSession(t, s, mustSession(t, s, store.Session{TenantID: a.ID, Metadata: meta}), st)
		wantErr(t, "DeleteSession("+string(st)+")", s.DeleteSession(ctx, a.ID, se.ID), errdefs.ErrConflict)
		if _, err := s.GetSession(ctx, a.ID, se.ID); err != nil {
			t.Errorf("GetSession after refused delete of a %s session: %v", st, err)
		}
	}

	se := mustSession(t, s, store.Session{ID: "se_gc", TenantID: a.ID, Metadata: meta})
	s1 := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, Name: "first", State: store.SnapshotComplete})
	s2 := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: se.ID, ParentID: s1.ID, Name: "second"})
	keep := mustSession(t, s, store.Session{TenantID: a.ID})
	kept := mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: keep.ID, ParentID: s1.ID})
	// A fork resumes from s1: while it does, se cannot be forgotten.
	fork := mustSession(t, s, store.Session{TenantID: a.ID, State: store.SessionPaused, HeadSnapshotID: s1.ID,
		ParentSessionID: se.ID, ForkedFromSnapshotID: s1.ID})
	se.HeadSnapshotID = s1.ID
	se = driveSession(t, s, se, store.SessionDeleted)

	wantErr(t, "DeleteSession(other tenant)", s.DeleteSession(ctx, b.ID, se.ID), errdefs.ErrNotFound)
	wantErr(t, "DeleteSession(missing)", s.DeleteSession(ctx, a.ID, "se_missing"), errdefs.ErrNotFound)
	wantErr(t, "DeleteSession(a fork resumes from its snapshot)", s.DeleteSession(ctx, a.ID, se.ID), errdefs.ErrConflict)
	if _, err := s.GetSnapshot(ctx, a.ID, s1.ID); err != nil {
		t.Errorf("GetSnapshot after a refused DeleteSession: %v", err)
	}
	fork = driveSession(t, s, fork, store.SessionDeleted) // a deleted fork resumes from nothing

	wantErr(t, "DeleteSession(deleted)", s.DeleteSession(ctx, a.ID, se.ID), nil)
	_, err := s.GetSession(ctx, a.ID, se.ID)
	wantErr(t, "GetSession(deleted)", err, errdefs.ErrNotFound)
	wantErr(t, "DeleteSession(again)", s.DeleteSession(ctx, a.ID, se.ID), errdefs.ErrNotFound)
	for _, sn := range []store.Snapshot{s1, s2} {
		_, err := s.GetSnapshot(ctx, a.ID, sn.ID)
		wantErr(t, "GetSnapshot(of a deleted session)", err, errdefs.ErrNotFound)
	}
	all, err := s.ListSnapshotsByState(ctx, nil, 0)
	wantErr(t, "ListSnapshotsByState", err, nil)
	if diff := cmp.Diff([]string{kept.ID}, snapshotKind.ids(all)); diff != "" {
		t.Errorf("snapshots left after DeleteSession (-want +got):\n%s", diff)
	}
	if got, err := s.GetSnapshot(ctx, a.ID, kept.ID); err != nil || got.ParentID != s1.ID {
		t.Errorf("GetSnapshot(child in another session) = %+v, %v; want it kept with ParentID %s", got, err, s1.ID)
	}
	for _, got := range listAllSessions(t, s, a.ID, store.SessionFilter{Metadata: meta}) {
		if got.ID == se.ID {
			t.Errorf("deleted session still listed by metadata")
		}
	}
	// The fork that outlived its parent still reads.
	if got, err := s.GetSession(ctx, a.ID, fork.ID); err != nil || got.ParentSessionID != se.ID {
		t.Errorf("GetSession(fork) = %+v, %v; want it kept with ParentSessionID %s", got, err, se.ID)
	}

	// The ID is free again, with nothing of the old metadata or snapshot names attached.
	again := mustSession(t, s, store.Session{ID: "se_gc", TenantID: a.ID, Metadata: map[string]string{"new": "1"}})
	if items := listAllSessions(t, s, a.ID, store.SessionFilter{Metadata: map[string]string{"gc": "yes", "new": "1"}}); len(items) != 0 {
		t.Errorf("recreated %s matches the deleted session's metadata: %v", again.ID, sessionKind.ids(items))
	}
	mustSnapshot(t, s, store.Snapshot{TenantID: a.ID, SessionID: again.ID, Name: "first"})
	if items := listAllSnapshots(t, s, a.ID, store.SnapshotFilter{SessionID: again.ID}); len(items) != 1 {
		t.Errorf("recreated %s has %d snapshots; want 1", again.ID, len(items))
	}
}

// Helpers for sessions.

func mustSession(t *testing.T, s store.Store, se store.Session) store.Session {
	t.Helper()
	got, err := s.CreateSession(t.Context(), se)
	if err != nil {
		t.Fatalf("CreateSession(%+v): %v", se, err)
	}
	return got
}

// sessionPathTo is a legal way from creating to each session state.
var sessionPathTo = map[store.SessionState][]store.SessionState{
	store.SessionCreating: nil,
	store.SessionRunning:  {store.SessionRunning},
	store.SessionPausing:  {store.SessionRunning, store.SessionPausing},
	store.SessionPaused:   {store.SessionRunning, store.SessionPausing, store.SessionPaused},
	store.SessionResuming: {store.SessionRunning, store.SessionResuming},
	store.SessionFailed:   {store.SessionFailed},
	store.SessionDeleting: {store.SessionDeleting},
	store.SessionDeleted:  {store.SessionDeleting, store.SessionDeleted},
}

// driveSession moves a creating session to the given state along sessionPathTo and returns it as stored.
func driveSession(t *testing.T, s store.Store, se store.Session, to store.SessionState) store.Session {
	t.Helper()
	return driveAlong(t, s, sessionKind, se, sessionPathTo[to])
}

// sessionMatches is the SessionFilter semantics written in Go.
func sessionMatches(se store.Session, f store.SessionFilter) bool {
	if len(f.States) > 0 && !slices.Contains(f.States, se.State) {
		return false
	}
	for k, v := range f.Metadata {
		if got, ok := se.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// listAllSessions pages through ListSessions with f and returns every item.
func listAllSessions(t *testing.T, s store.Store, tenantID string, f store.SessionFilter) []store.Session {
	t.Helper()
	all, _ := pageThrough(t, "ListSessions", f.Limit, func(cursor string) ([]store.Session, string, error) {
		f.Cursor = cursor
		return s.ListSessions(t.Context(), tenantID, f)
	})
	return all
}

// pageThrough calls list from the first page to the last and returns every item and the number of pages.
// It fails t on an error, a repeated cursor, or a page that has a next cursor without being full.
func pageThrough[T any](t *testing.T, what string, limit int, list func(cursor string) ([]T, string, error)) ([]T, int) {
	t.Helper()
	limit, err := store.NormalizeLimit(limit)
	if err != nil {
		t.Fatalf("%s: limit: %v", what, err)
	}
	var (
		all    []T
		seen   = map[string]bool{}
		cursor string
	)
	for page := 1; ; page++ {
		if page > 10000 {
			t.Fatalf("%s: no end after %d pages", what, page)
		}
		items, next, err := list(cursor)
		if err != nil {
			t.Fatalf("%s: page %d: %v", what, page, err)
		}
		all = append(all, items...)
		if next == "" {
			return all, page
		}
		if seen[next] {
			t.Fatalf("%s returned cursor %q twice", what, next)
		}
		seen[next] = true
		if len(items) != limit {
			t.Fatalf("%s: page %d has %d items and a next cursor; want a full page of %d", what, page, len(items), limit)
		}
		cursor = next
	}
}

// checkSessionUTC fails t if any time of se is not in UTC.
func checkSessionUTC(t *testing.T, se store.Session) {
	t.Helper()
	checkTimesUTC(t, "session "+se.ID, map[string]*time.Time{"CreatedAt": &se.CreatedAt, "UpdatedAt": &se.UpdatedAt,
		"LastActivityAt": &se.LastActivityAt, "PausedAt": se.PausedAt})
}

// reversed is a copy of items in the other order.
func reversed[T any](items []T) []T {
	out := slices.Clone(items)
	slices.Reverse(out)
	return out
}
