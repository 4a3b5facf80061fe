package controlplane

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

func (n *fakeNode) addCPU(id string, d time.Duration) {
	n.mu.Lock()
	n.cpu[id] += d
	n.mu.Unlock()
}

func rolling(t *testing.T, e *sessionEnv, se store.Session) []store.Snapshot {
	t.Helper()
	sns, _, err := e.st.ListSnapshots(context.Background(), e.tenant, store.SnapshotFilter{SessionID: se.ID,
		States: nil, Limit: store.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Snapshot
	for _, sn := range sns {
		if sn.Trigger == store.TriggerRolling {
			out = append(out, sn)
		}
	}
	return out
}

// TestRollingSnapshots: a running session is snapshotted once its interval passed, only if it changed
// (API work or CPU use beyond an idle sandbox's); each rolling snapshot becomes its head.
func TestRollingSnapshots(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{RollingIntervalSeconds: 15})
	off := e.create(t, SessionRequest{})
	e.s.rollSnapshots() // first sight: counts from now
	e.clk.Add(10 * time.Second)
	e.n.addCPU(se.SandboxID, time.Second)
	e.s.rollSnapshots()
	if n := len(rolling(t, e, se)); n != 0 {
		t.Fatalf("%d rolling snapshots before the interval passed", n)
	}
	e.clk.Add(6 * time.Second)
	e.s.rollSnapshots()
	got := rolling(t, e, se)
	if len(got) != 1 {
		t.Fatalf("%d rolling snapshots after the interval with CPU used; want 1", len(got))
	}
	if fresh, _ := e.s.GetSession(ctx, e.tenant, se.ID); fresh.HeadSnapshotID != got[0].ID {
		t.Errorf("head %q; want the rolling snapshot %q", fresh.HeadSnapshotID, got[0].ID)
	}
	// Idle: a sliver of CPU, no work: nothing.
	e.clk.Add(16 * time.Second)
	e.n.addCPU(se.SandboxID, 5*time.Millisecond)
	e.s.rollSnapshots()
	if n := len(rolling(t, e, se)); n != 1 {
		t.Fatalf("%d rolling snapshots after an idle interval; want still 1", n)
	}
	// Work through the API counts as a change.
	e.clk.Add(16 * time.Second)
	if _, err := e.s.SessionSandbox(ctx, e.tenant, se.ID); err != nil {
		t.Fatal(err)
	}
	e.s.rollSnapshots()
	if n := len(rolling(t, e, se)); n != 2 {
		t.Fatalf("%d rolling snapshots after API work; want 2", n)
	}
	if n := len(rolling(t, e, off)); n != 0 {
		t.Errorf("session without rolling snapshots got %d", n)
	}
	// A manual snapshot counts as the last one: the next rolling one waits a full interval.
	e.clk.Add(10 * time.Second)
	if _, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "mine"); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(10 * time.Second)
	e.n.addCPU(se.SandboxID, time.Second)
	e.s.rollSnapshots()
	if n := len(rolling(t, e, se)); n != 2 {
		t.Errorf("%d rolling snapshots 10s after a manual one; want still 2", n)
	}
	settle(t, e.s)
}

// TestSessionRollingValidation: intervals below the minimum are refused, 0 is off.
func TestSessionRollingValidation(t *testing.T) {
	e := setupSessions(t)
	for _, secs := range []int{-1, 1, 14, 86401} {
		if _, err := e.s.CreateSession(context.Background(), e.tenant, SessionRequest{RollingIntervalSeconds: secs}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("rolling interval %d: %v; want invalid argument", secs, err)
		}
	}
	if _, err := e.s.CreateSession(context.Background(), e.tenant, SessionRequest{Retention: store.RetentionSpec{KeepAllSeconds: -1}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("negative retention: %v; want invalid argument", err)
	}
}

// TestRestoreSession: a session goes back to an earlier snapshot, or to a time; where it was stays in
// its timeline as a branch, and the snapshots after the restore descend from the target.
func TestRestoreSession(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{})
	first, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Add(time.Minute)
	second, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Add(time.Minute)
	fresh, _ := e.s.GetSession(ctx, e.tenant, se.ID)
	sbBefore := fresh.SandboxID
	got, err := e.s.RestoreSession(ctx, e.tenant, se.ID, RestoreRequest{SnapshotID: first.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.SessionRunning || got.HeadSnapshotID != first.ID || got.SandboxID == sbBefore {
		t.Fatalf("restored %+v; want running in a new sandbox at %s", got, first.ID)
	}
	if img := e.n.restored[got.SandboxID]; !strings.HasPrefix(img, "image of "+se.SandboxID) {
		t.Errorf("restored from %q", img)
	}
	_, sns, err := e.s.Timeline(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	var branch *store.Snapshot
	for i := range sns {
		if sns[i].Trigger == store.TriggerPause && sns[i].ParentID == second.ID {
			branch = &sns[i]
		}
	}
	if branch == nil {
		t.Fatalf("no snapshot kept where the session was before the restore: %+v", sns)
	}
	next, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if next.ParentID != first.ID {
		t.Errorf("snapshot after the restore has parent %q; want %q (a branch)", next.ParentID, first.ID)
	}
	// To a time: the last snapshot at or before it.
	got, err = e.s.RestoreSession(ctx, e.tenant, se.ID, RestoreRequest{At: second.CreatedAt.Add(30 * time.Second)})
	if err != nil || got.HeadSnapshotID != second.ID {
		t.Fatalf("restore to a time: %+v %v; want head %s", got, err, second.ID)
	}
	// Refusals: before the first snapshot, another session's snapshot, both or neither given.
	if _, err := e.s.RestoreSession(ctx, e.tenant, se.ID, RestoreRequest{At: first.CreatedAt.Add(-time.Hour)}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("restore before the first snapshot: %v; want not found", err)
	}
	other := e.create(t, SessionRequest{})
	osn, err := e.s.SnapshotSession(ctx, e.tenant, other.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.RestoreSession(ctx, e.tenant, se.ID, RestoreRequest{SnapshotID: osn.ID}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("restore to another session's snapshot: %v; want not found", err)
	}
	for _, req := range []RestoreRequest{{}, {SnapshotID: first.ID, At: time.Now()}} {
		if _, err := e.s.RestoreSession(ctx, e.tenant, se.ID, req); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("restore %+v: %v; want invalid argument", req, err)
		}
	}
	settle(t, e.s)
}

// TestPruneKeepsProtected: retention never deletes a pinned snapshot, a head, or a fork's source, and
// unpinning lets it go.
func TestPruneKeepsProtected(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{Retention: store.RetentionSpec{KeepAllSeconds: 60, KeepHourlySeconds: 60, KeepDailySeconds: 60}})
	pinned, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "pinned")
	if err != nil {
		t.Fatal(err)
	}
	src, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.ForkSession(ctx, e.tenant, se.ID, 1, src.ID); err != nil {
		t.Fatal(err)
	}
	plain, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	head, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	e.clk.Add(time.Hour)
	e.s.pruneSnapshots()
	for _, c := range []struct {
		sn   store.Snapshot
		kept bool
	}{{pinned, true}, {src, true}, {plain, false}, {head, true}} {
		_, err := e.st.GetSnapshot(ctx, e.tenant, c.sn.ID)
		if (err == nil) != c.kept {
			t.Errorf("snapshot %s: %v; kept should be %v", c.sn.ID, err, c.kept)
		}
	}
	f := false
	if _, err := e.s.UpdateSnapshot(ctx, e.tenant, se.ID, pinned.ID, &f, nil); err != nil {
		t.Fatal(err)
	}
	e.s.pruneSnapshots()
	if _, err := e.st.GetSnapshot(ctx, e.tenant, pinned.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unpinned snapshot after pruning: %v; want deleted", err)
	}
}

// TestSnapshotFilesAndDiff: a snapshot's files are read and diffed without restoring it, from the
// node's copy of the image or from the store; paths and snapshots outside the timeline are refused.
func TestSnapshotFilesAndDiff(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{})
	a, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	read := func(snap string) string {
		t.Helper()
		v, err := e.s.SnapshotView(ctx, e.tenant, se.ID, snap)
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		data, err := v.ReadFile("/home/user/note.txt", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if got := read(a.ID); !strings.HasPrefix(got, "checkpoint 1\n") {
		t.Errorf("note in the first snapshot (waiting for its upload): %q", got)
	}
	settle(t, e.s)
	if got := read(b.ID); !strings.HasPrefix(got, "checkpoint 2\n") {
		t.Errorf("note in the second snapshot (from the store): %q", got)
	}
	changes, truncated, err := e.s.DiffSnapshots(ctx, e.tenant, se.ID, a.ID, b.ID)
	if err != nil || truncated || len(changes) != 1 || changes[0].Path != "/home/user/note.txt" || changes[0].Kind != "changed" {
		t.Fatalf("diff: %+v %v %v", changes, truncated, err)
	}
	diff, ok, err := e.s.DiffSnapshotFile(ctx, e.tenant, se.ID, a.ID, b.ID, "/home/user/note.txt")
	if err != nil || !ok || !strings.Contains(diff, "-checkpoint 1") || !strings.Contains(diff, "+checkpoint 2") {
		t.Errorf("unified diff: %q %v %v", diff, ok, err)
	}
	if _, _, err := e.s.DiffSnapshotFile(ctx, e.tenant, se.ID, a.ID, b.ID, "/nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("diff of a path in neither: %v; want not found", err)
	}
	v, err := e.s.SnapshotView(ctx, e.tenant, se.ID, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, p := range []string{"/home/user/../../etc/shadow", "relative", "/home/\x00x"} {
		if _, err := v.ReadFile(p, 1<<20); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("read %q: %v; want invalid argument", p, err)
		}
	}
	other := e.create(t, SessionRequest{})
	osn, err := e.s.SnapshotSession(ctx, e.tenant, other.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.SnapshotView(ctx, e.tenant, se.ID, osn.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another session's snapshot: %v; want not found", err)
	}
	if _, err := e.s.SnapshotView(ctx, "tn_other", se.ID, a.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant: %v; want not found", err)
	}
	// A snapshot of a driver that keeps no file layer says so.
	e.n.mu.Lock()
	e.n.noFiles = true
	e.n.mu.Unlock()
	c, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.SnapshotView(ctx, e.tenant, se.ID, c.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("view of a snapshot without a file layer: %v; want failed precondition", err)
	}
	settle(t, e.s)
}

// TestTenantRetention: a tenant's retention applies to its sessions without their own, a session's
// override wins field by field, and bad values are refused.
func TestTenantRetention(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	own, eff, err := e.s.SetTenantRetention(ctx, e.tenant, store.RetentionSpec{KeepAllSeconds: 60})
	if err != nil || own.KeepAllSeconds != 60 || eff.KeepAll != time.Minute || eff.KeepHourly != 24*time.Hour {
		t.Fatalf("set tenant retention: %+v %+v %v", own, eff, err)
	}
	if _, _, err := e.s.SetTenantRetention(ctx, e.tenant, store.RetentionSpec{KeepDailySeconds: -1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("negative: %v; want invalid argument", err)
	}
	if _, _, err := e.s.SetTenantRetention(ctx, e.tenant, store.RetentionSpec{KeepDailySeconds: 401 * 24 * 3600}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("over 400 days: %v; want invalid argument", err)
	}
	// Two sessions, each with two snapshots in the same hour, two hours old by pruning time: the
	// tenant's keep-all of a minute keeps only the newest of that hour; the session that keeps all for
	// three hours keeps both.
	plain := e.create(t, SessionRequest{})
	keeper := e.create(t, SessionRequest{Retention: store.RetentionSpec{KeepAllSeconds: 3 * 3600}})
	first := map[string]string{}
	for _, se := range []store.Session{plain, keeper} {
		sn, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		first[se.ID] = sn.ID
	}
	e.clk.Add(time.Second)
	for _, se := range []store.Session{plain, keeper} {
		if _, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, ""); err != nil {
			t.Fatal(err)
		}
		// A third, later: the head, so the other two are prunable.
		e.clk.Add(time.Second)
	}
	settle(t, e.s)
	e.clk.Add(2 * time.Hour)
	for _, se := range []store.Session{plain, keeper} {
		if _, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, e.s)
	e.s.pruneSnapshots()
	if _, err := e.st.GetSnapshot(ctx, e.tenant, first[plain.ID]); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the tenant's retention kept an older snapshot of its hour: %v", err)
	}
	if _, err := e.st.GetSnapshot(ctx, e.tenant, first[keeper.ID]); err != nil {
		t.Errorf("the session's own retention did not keep it: %v", err)
	}
	settle(t, e.s)
}

// TestWorkInProgressDefersSnapshotsAndPauses: while a call or stream runs on a session's sandbox, no
// rolling snapshot nor idle pause cuts it off; once it ends, they go ahead, and its end counts as
// activity.
func TestWorkInProgressDefersSnapshotsAndPauses(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{RollingIntervalSeconds: 15, IdleTimeoutSeconds: 60})
	e.s.rollSnapshots()
	end := e.s.BeginWork(context.Background(), e.tenant, se.ID, se.SandboxID)
	e.clk.Add(2 * time.Minute)
	e.n.addCPU(se.SandboxID, time.Second)
	e.s.rollSnapshots()
	e.s.pauseIdleSessions()
	if n := len(rolling(t, e, se)); n != 0 {
		t.Fatalf("%d rolling snapshots while a stream ran", n)
	}
	if got, _ := e.s.GetSession(ctx, e.tenant, se.ID); got.State != store.SessionRunning {
		t.Fatalf("session %s while a stream ran; want running", got.State)
	}
	end()
	end() // twice is harmless
	e.s.rollSnapshots()
	if n := len(rolling(t, e, se)); n != 1 {
		t.Fatalf("%d rolling snapshots once the stream ended; want 1", n)
	}
	// The end was activity: not idle yet.
	e.s.pauseIdleSessions()
	if got, _ := e.s.GetSession(ctx, e.tenant, se.ID); got.State != store.SessionRunning {
		t.Errorf("session %s right after its stream ended; want running", got.State)
	}
	e.clk.Add(2 * time.Minute)
	e.s.pauseIdleSessions()
	settle(t, e.s)
	if got, _ := e.s.GetSession(ctx, e.tenant, se.ID); got.State != store.SessionPaused {
		t.Errorf("session %s after its idle timeout with nothing running; want paused", got.State)
	}
}

// TestOverdueSnapshotHoldsNewWork: calls that follow one another closely cannot put a rolling snapshot
// off for good: once it is overdue by half an interval, new calls wait, the ones in progress end, and
// the snapshot is taken with none in progress; a long stream still defers it.
func TestOverdueSnapshotHoldsNewWork(t *testing.T) {
	e := setupSessions(t)
	se := e.create(t, SessionRequest{RollingIntervalSeconds: 15})
	e.s.rollSnapshots()
	var mu sync.Mutex
	busyAtCheckpoint := 0
	e.n.mu.Lock()
	e.n.afterCheckpoint = func() {
		if e.s.busy(se.SandboxID) {
			mu.Lock()
			busyAtCheckpoint++
			mu.Unlock()
		}
	}
	e.n.mu.Unlock()
	stop := make(chan struct{})
	done := make(chan int)
	go func() { // owner: the test; calls back to back until stop
		calls := 0
		for {
			select {
			case <-stop:
				done <- calls
				return
			default:
			}
			end := e.s.BeginWork(context.Background(), e.tenant, se.ID, se.SandboxID)
			time.Sleep(3 * time.Millisecond)
			end()
			calls++
		}
	}()
	e.clk.Add(26 * time.Second) // due for 11 s: overdue
	e.n.addCPU(se.SandboxID, time.Second)
	e.s.rollSnapshots()
	close(stop)
	calls := <-done
	if n := len(rolling(t, e, se)); n != 1 {
		t.Fatalf("%d rolling snapshots with calls back to back, overdue; want 1 (%d calls)", n, calls)
	}
	mu.Lock()
	if busyAtCheckpoint != 0 {
		t.Errorf("a call was in progress at the checkpoint")
	}
	mu.Unlock()

	// A stream that has run for longer than the drain: the snapshot waits for it, as before.
	end := e.s.BeginWork(context.Background(), e.tenant, se.ID, se.SandboxID)
	time.Sleep(rollingDrain + 100*time.Millisecond)
	e.clk.Add(time.Minute)
	e.n.addCPU(se.SandboxID, time.Second)
	start := time.Now()
	e.s.rollSnapshots()
	if n := len(rolling(t, e, se)); n != 1 {
		t.Errorf("%d rolling snapshots while a long stream ran; want still 1", n)
	}
	if d := time.Since(start); d > rollingDrain {
		t.Errorf("the round held work for %s behind a long stream", d)
	}
	end()
	settle(t, e.s)
}
