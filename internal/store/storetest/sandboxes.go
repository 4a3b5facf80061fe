package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

func testSandboxCreateGet(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")

	in := store.Sandbox{
		TenantID: a.ID,
		NodeID:   "node-1",
		Template: "python-3.12",
		Spec:     store.SandboxSpec{CPUMillicores: 1500, MemoryMB: 512, DiskMB: 2048, TimeoutSeconds: 300},
		Metadata: map[string]string{"team": "ml", "run": "42", "empty": "", "ünï": "cödé"},
		EndsAt:   ptr(base.Add(5 * time.Minute)),
		// Opaque to the store: kept byte for byte.
		NetworkPolicy: []byte(`{"default":"deny","rules":[{"action":"allow","host":"*.example.com"}]}`),
	}
	sb, err := s.CreateSandbox(ctx, in)
	wantErr(t, "CreateSandbox", err, nil)
	if !strings.HasPrefix(sb.ID, "sb_") {
		t.Errorf("assigned sandbox ID = %q; want prefix sb_", sb.ID)
	}
	want := in
	want.ID = sb.ID
	want.State = store.StateCreating
	want.CreatedAt, want.UpdatedAt = sb.CreatedAt, sb.CreatedAt
	want.Version = 1
	if diff := cmp.Diff(want, sb, cmpOpts...); diff != "" {
		t.Errorf("CreateSandbox returned (-want +got):\n%s", diff)
	}
	if sb.CreatedAt.IsZero() {
		t.Errorf("CreatedAt was not assigned")
	}
	checkUTC(t, sb)

	// The returned sandbox must not share the caller's map.
	in.Metadata["team"] = "changed"
	if sb.Metadata["team"] != "ml" {
		t.Errorf("CreateSandbox returned metadata aliasing the caller's map")
	}

	got := checkStored(t, s, sandboxKind, sb, "GetSandbox")
	got, err = s.GetSandboxAnyTenant(ctx, sb.ID)
	wantErr(t, "GetSandboxAnyTenant", err, nil)
	if diff := cmp.Diff(sb, got, cmpOpts...); diff != "" {
		t.Errorf("GetSandboxAnyTenant (-want +got):\n%s", diff)
	}

	// Tenant isolation: another tenant's sandbox does not exist for b.
	_, err = s.GetSandbox(ctx, b.ID, sb.ID)
	wantErr(t, "GetSandbox(other tenant)", err, errdefs.ErrNotFound)
	_, err = s.GetSandbox(ctx, a.ID, "sb_missing")
	wantErr(t, "GetSandbox(missing)", err, errdefs.ErrNotFound)
	_, err = s.GetSandboxAnyTenant(ctx, "sb_missing")
	wantErr(t, "GetSandboxAnyTenant(missing)", err, errdefs.ErrNotFound)

	// Empty metadata comes back as an empty, non-nil map.
	plain := mustSandbox(t, s, store.Sandbox{ID: "sb_plain", TenantID: a.ID})
	if plain.Metadata == nil {
		t.Errorf("CreateSandbox returned nil Metadata; want an empty map")
	}
	if got, _ := s.GetSandbox(ctx, a.ID, plain.ID); got.Metadata == nil {
		t.Errorf("GetSandbox returned nil Metadata; want an empty map")
	}

	bad := []struct {
		name string
		sb   store.Sandbox
		want error
	}{
		{"duplicate ID", store.Sandbox{ID: "sb_plain", TenantID: a.ID}, errdefs.ErrAlreadyExists},
		{"duplicate ID in another tenant", store.Sandbox{ID: "sb_plain", TenantID: b.ID}, errdefs.ErrAlreadyExists},
		{"unknown tenant", store.Sandbox{TenantID: "tn_missing"}, errdefs.ErrNotFound},
		{"no tenant", store.Sandbox{}, errdefs.ErrInvalidArgument},
		{"initial state running", store.Sandbox{TenantID: a.ID, State: store.StateRunning}, errdefs.ErrInvalidArgument},
		{"unknown state", store.Sandbox{TenantID: a.ID, State: "paused"}, errdefs.ErrInvalidArgument},
		{"negative memory", store.Sandbox{TenantID: a.ID, Spec: store.SandboxSpec{MemoryMB: -1}}, errdefs.ErrInvalidArgument},
		{"empty metadata key", store.Sandbox{TenantID: a.ID, Metadata: map[string]string{"": "x"}}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range bad {
		_, err := s.CreateSandbox(ctx, tt.sb)
		wantErr(t, "CreateSandbox("+tt.name+")", err, tt.want)
	}
	// The failed duplicate left the original alone.
	if got, err := s.GetSandbox(ctx, a.ID, "sb_plain"); err != nil || got.TenantID != a.ID {
		t.Errorf("GetSandbox(sb_plain) after duplicate creates = %+v, %v; want tenant %s", got, err, a.ID)
	}
}

// testSandboxTimes checks that every time survives a round trip in UTC with microsecond precision,
// whatever zone it was given in.
func testSandboxTimes(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	created := time.Date(2024, 2, 29, 23, 59, 59, 123456789, zone)
	ends := created.Add(90*time.Second + 987654321)
	sb := mustSandbox(t, s, store.Sandbox{TenantID: a.ID, CreatedAt: created, EndsAt: &ends})
	checkUTC(t, sb)
	if want := store.NormalizeTime(created); !sb.CreatedAt.Equal(want) || sb.CreatedAt.Nanosecond() != 123456000 {
		t.Errorf("CreatedAt = %v; want %v", sb.CreatedAt, want)
	}
	if want := store.NormalizeTime(ends); !sb.EndsAt.Equal(want) {
		t.Errorf("EndsAt = %v; want %v", sb.EndsAt, want)
	}
	if !sb.UpdatedAt.Equal(sb.CreatedAt) {
		t.Errorf("UpdatedAt = %v; want CreatedAt %v on create", sb.UpdatedAt, sb.CreatedAt)
	}

	started := time.Date(2024, 3, 1, 0, 0, 0, 1000, time.Local)
	stopped := started.Add(time.Nanosecond * 999)
	sb.State = store.StateRunning
	sb.StartedAt = &started
	sb, err := s.UpdateSandbox(ctx, sb)
	wantErr(t, "UpdateSandbox(running)", err, nil)
	sb.State = store.StateFailed
	sb.StoppedAt = &stopped
	sb, err = s.UpdateSandbox(ctx, sb)
	wantErr(t, "UpdateSandbox(failed)", err, nil)
	checkUTC(t, sb)

	got, err := s.GetSandbox(ctx, a.ID, sb.ID)
	wantErr(t, "GetSandbox", err, nil)
	checkUTC(t, got)
	if diff := cmp.Diff(sb, got, cmpOpts...); diff != "" {
		t.Errorf("GetSandbox after updates (-want +got):\n%s", diff)
	}
	if !got.StartedAt.Equal(store.NormalizeTime(started)) || !got.StoppedAt.Equal(store.NormalizeTime(stopped)) {
		t.Errorf("StartedAt, StoppedAt = %v, %v; want %v, %v", got.StartedAt, got.StoppedAt,
			store.NormalizeTime(started), store.NormalizeTime(stopped))
	}
}

func testSandboxUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	orig := mustSandbox(t, s, store.Sandbox{TenantID: a.ID, CreatedAt: base, Metadata: map[string]string{"k": "v", "drop": "me"}})

	next := orig
	next.State = store.StateRunning
	next.NodeID = "node-7"
	next.Reason = "booted"
	next.Spec = store.SandboxSpec{CPUMillicores: 250, MemoryMB: 128, DiskMB: 64, TimeoutSeconds: 60}
	next.Metadata = map[string]string{"k": "v2", "new": "x"}
	next.StartedAt = ptr(base.Add(time.Second))
	next.EndsAt = ptr(base.Add(time.Minute))
	next.CreatedAt = base.Add(time.Hour)  // immutable: ignored
	next.UpdatedAt = base.Add(-time.Hour) // set by the store: ignored
	got, err := s.UpdateSandbox(ctx, next)
	wantErr(t, "UpdateSandbox", err, nil)
	want := next
	want.CreatedAt = orig.CreatedAt
	want.UpdatedAt = got.UpdatedAt
	want.Version = orig.Version + 1
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("UpdateSandbox returned (-want +got):\n%s", diff)
	}
	if got.UpdatedAt.Before(orig.UpdatedAt) {
		t.Errorf("UpdatedAt went backwards: %v after %v", got.UpdatedAt, orig.UpdatedAt)
	}
	stored := checkStored(t, s, sandboxKind, got, "GetSandbox after update")

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
		items := listAll(t, s, a.ID, store.SandboxFilter{Metadata: tt.meta})
		if len(items) != tt.want {
			t.Errorf("ListSandboxes(metadata %v) after update = %v; want %d", tt.meta, sandboxKind.ids(items), tt.want)
		}
	}

	// Same state, other fields: allowed (SandboxTransitions covers every state).
	same := stored
	same.Reason = "still running"
	same, err = s.UpdateSandbox(ctx, same)
	wantErr(t, "UpdateSandbox(same state)", err, nil)
	if same.Version != stored.Version+1 {
		t.Errorf("Version after same-state update = %d; want %d", same.Version, stored.Version+1)
	}

	// Another tenant's sandbox, and a missing one, are not found.
	other := same
	other.TenantID = b.ID
	_, err = s.UpdateSandbox(ctx, other)
	wantErr(t, "UpdateSandbox(other tenant)", err, errdefs.ErrNotFound)
	missing := same
	missing.ID = "sb_missing"
	_, err = s.UpdateSandbox(ctx, missing)
	wantErr(t, "UpdateSandbox(missing)", err, errdefs.ErrNotFound)

	invalid := same
	invalid.State = "paused"
	_, err = s.UpdateSandbox(ctx, invalid)
	wantErr(t, "UpdateSandbox(unknown state)", err, errdefs.ErrInvalidArgument)

	// Nothing of the failed updates was stored.
	checkStored(t, s, sandboxKind, same, "GetSandbox after failed updates")
}

// testSandboxTransitions tries every pair of states: allowed transitions are stored, the others fail
// with ErrConflict naming both states and leave the sandbox as it was.
func testSandboxTransitions(t *testing.T, s store.Store) {
	a := mustTenant(t, s, "a")
	checkTransitions(t, s, sandboxKind, store.SandboxStates(), func(t *testing.T, from store.SandboxState) store.Sandbox {
		return drive(t, s, mustSandbox(t, s, store.Sandbox{TenantID: a.ID}), from)
	})
}

// testSandboxOptimisticConcurrency makes two updates from the same Version: the first wins, the second
// gets ErrConflict and changes nothing.
func testSandboxOptimisticConcurrency(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	sb := mustSandbox(t, s, store.Sandbox{TenantID: a.ID})

	first, second := sb, sb
	first.State, first.Reason = store.StateRunning, "first"
	second.State, second.Reason = store.StateFailed, "second"
	won, err := s.UpdateSandbox(ctx, first)
	wantErr(t, "UpdateSandbox(first)", err, nil)
	_, err = s.UpdateSandbox(ctx, second)
	wantErr(t, "UpdateSandbox(second, stale version)", err, errdefs.ErrConflict)

	stored := checkStored(t, s, sandboxKind, won, "stored sandbox")

	// A version from the future is just as stale.
	future := stored
	future.Version += 5
	_, err = s.UpdateSandbox(ctx, future)
	wantErr(t, "UpdateSandbox(future version)", err, errdefs.ErrConflict)
}

// testSandboxConcurrentUpdates races many updates from one Version: exactly one wins.
func testSandboxConcurrentUpdates(t *testing.T, s store.Store) {
	a := mustTenant(t, s, "a")
	sb := mustSandbox(t, s, store.Sandbox{TenantID: a.ID})
	winner, stored := raceUpdates(t, s, sandboxKind, sb, 16, func(i int, u *store.Sandbox) {
		u.State = store.StateRunning
		u.Reason = fmt.Sprintf("writer %d", i)
		u.Metadata = map[string]string{"writer": fmt.Sprint(i)}
	})
	if stored.Version != sb.Version+1 || stored.Reason != fmt.Sprintf("writer %d", winner) ||
		stored.Metadata["writer"] != fmt.Sprint(winner) {
		t.Errorf("stored = version %d, reason %q, metadata %v; want version %d from writer %d",
			stored.Version, stored.Reason, stored.Metadata, sb.Version+1, winner)
	}
}

// testSandboxConcurrentCreates creates from many goroutines at once: all distinct creates succeed, and
// of many creates of one ID exactly one does.
func testSandboxConcurrentCreates(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	const goroutines, each = 8, 20

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created []string // guarded by mu
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				sb, err := s.CreateSandbox(ctx, store.Sandbox{TenantID: a.ID, Template: "base",
					Metadata: map[string]string{"g": fmt.Sprint(g), "i": fmt.Sprint(i)}})
				if err != nil {
					t.Errorf("goroutine %d: CreateSandbox: %v", g, err)
					return
				}
				mu.Lock()
				created = append(created, sb.ID)
				mu.Unlock()
			}
		})
	}
	// Readers run alongside the writers.
	for range 2 {
		wg.Go(func() {
			for range 10 {
				if _, _, err := s.ListSandboxes(ctx, a.ID, store.SandboxFilter{Limit: 10}); err != nil {
					t.Errorf("ListSandboxes during creates: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	all := listAll(t, s, a.ID, store.SandboxFilter{Limit: 1000})
	got := map[string]bool{}
	for _, id := range sandboxKind.ids(all) {
		got[id] = true
	}
	if len(all) != goroutines*each || len(got) != goroutines*each {
		t.Errorf("listed %d sandboxes (%d distinct); want %d", len(all), len(got), goroutines*each)
	}
	for _, id := range created {
		if !got[id] {
			t.Errorf("created sandbox %s is not listed", id)
		}
	}
	if items := listAll(t, s, a.ID, store.SandboxFilter{Metadata: map[string]string{"g": "3"}}); len(items) != each {
		t.Errorf("ListSandboxes(g=3) = %d sandboxes; want %d", len(items), each)
	}

	// Many creates of one ID: one wins, the others are ErrAlreadyExists.
	checkWins(t, "CreateSandbox(sb_contested)", race(goroutines, func(int) error {
		_, err := s.CreateSandbox(ctx, store.Sandbox{ID: "sb_contested", TenantID: a.ID, Template: "base"})
		return err
	}), 1, errdefs.ErrAlreadyExists)
}

func testSandboxDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	meta := map[string]string{"gc": "yes"}

	for _, st := range store.SandboxStates() {
		if st == store.StateStopped {
			continue
		}
		sb := drive(t, s, mustSandbox(t, s, store.Sandbox{TenantID: a.ID, Metadata: meta}), st)
		wantErr(t, "DeleteSandbox("+string(st)+")", s.DeleteSandbox(ctx, a.ID, sb.ID), errdefs.ErrConflict)
		if _, err := s.GetSandbox(ctx, a.ID, sb.ID); err != nil {
			t.Errorf("GetSandbox after refused delete of a %s sandbox: %v", st, err)
		}
	}

	sb := drive(t, s, mustSandbox(t, s, store.Sandbox{ID: "sb_gc", TenantID: a.ID, Metadata: meta}), store.StateStopped)
	wantErr(t, "DeleteSandbox(other tenant)", s.DeleteSandbox(ctx, b.ID, sb.ID), errdefs.ErrNotFound)
	wantErr(t, "DeleteSandbox(stopped)", s.DeleteSandbox(ctx, a.ID, sb.ID), nil)
	_, err := s.GetSandbox(ctx, a.ID, sb.ID)
	wantErr(t, "GetSandbox(deleted)", err, errdefs.ErrNotFound)
	wantErr(t, "DeleteSandbox(again)", s.DeleteSandbox(ctx, a.ID, sb.ID), errdefs.ErrNotFound)
	for _, got := range listAll(t, s, a.ID, store.SandboxFilter{Metadata: meta}) {
		if got.ID == sb.ID {
			t.Errorf("deleted sandbox still listed by metadata")
		}
	}

	// The ID is free again, and nothing of the old metadata is attached to the new sandbox.
	again := mustSandbox(t, s, store.Sandbox{ID: "sb_gc", TenantID: a.ID, Metadata: map[string]string{"new": "1"}})
	if items := listAll(t, s, a.ID, store.SandboxFilter{Metadata: map[string]string{"gc": "yes", "new": "1"}}); len(items) != 0 {
		t.Errorf("recreated %s matches the deleted sandbox's metadata: %v", again.ID, sandboxKind.ids(items))
	}
}
