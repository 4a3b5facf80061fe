package controlplane

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/blob/local"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	keyslocal "github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// sessionEnv is a control plane with a fake node and a real snapshot store, SQLite store and keyring.
type sessionEnv struct {
	s      *Service
	st     store.Store
	n      *fakeNode
	clk    *clock
	tenant string
	blobs  string
	newSvc func() *Service
}

func setupSessions(t *testing.T) *sessionEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := local.New(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := keyslocal.New(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.New(snapshot.Config{Blobs: blobs, Keys: keyring})
	if err != nil {
		t.Fatal(err)
	}
	e := &sessionEnv{st: st, n: newFakeNode(t), clk: &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}, blobs: filepath.Join(dir, "blobs")}
	// The node's own store over the same blobs, without the keyring: it writes and reads with grants.
	if e.n.snaps, err = snapshot.New(snapshot.Config{Blobs: blobs}); err != nil {
		t.Fatal(err)
	}
	e.newSvc = func() *Service {
		cfg := Config{Store: st, Node: e.n, Now: e.clk.Now, ReapInterval: time.Hour, IdleInterval: time.Hour, Snapshots: snaps}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.n.bind(s)
		return s
	}
	e.s = e.newSvc()
	// Stop the service (its uploads) before the store closes.
	t.Cleanup(func() { e.s.Shutdown(context.Background()); e.n.stopStores() })
	key, err := e.s.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.s.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	e.tenant = p.TenantID
	return e
}

// settle waits until the work the service and its (fake) node left running behind its calls is done:
// sandboxes torn down, snapshots stored.
func settle(t *testing.T, s *Service) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		s.loops.bg.Wait()
		n := s.sandboxes.nodes.local
		if c, ok := n.(*countingNode); ok {
			n = c.inner
		}
		if n, ok := n.(*fakeNode); ok {
			n.stores.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("background work (uploads, teardowns) still running after 30s")
	}
}

func (e *sessionEnv) create(t *testing.T, req SessionRequest) store.Session {
	t.Helper()
	se, err := e.s.CreateSession(context.Background(), e.tenant, req)
	if err != nil {
		t.Fatal(err)
	}
	if se.State != store.SessionRunning || se.SandboxID == "" {
		t.Fatalf("created %+v; want running with a sandbox", se)
	}
	return se
}

func TestSessionPauseResume(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{CreateRequest: CreateRequest{Env: map[string]string{"A": "1"}, Metadata: map[string]string{"team": "x"}}})
	first := se.SandboxID
	se, err := e.s.PauseSession(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	if se.State != store.SessionPaused || se.SandboxID != "" || se.HeadSnapshotID == "" || se.PausedAt == nil {
		t.Fatalf("paused %+v", se)
	}
	// Paused at a snapshot saved on the node, which the store takes in behind.
	if snap, err := e.st.GetSnapshot(ctx, e.tenant, se.HeadSnapshotID); err != nil || !snap.State.Usable() {
		t.Fatalf("head snapshot right after the pause: %+v %v; want uploading or complete", snap, err)
	}
	settle(t, e.s)
	if e.n.isRunning(first) {
		t.Errorf("the paused session's sandbox still runs")
	}
	snap, err := e.st.GetSnapshot(ctx, e.tenant, se.HeadSnapshotID)
	if err != nil || snap.State != store.SnapshotComplete || snap.Trigger != store.TriggerPause || snap.LogicalBytes == 0 {
		t.Fatalf("snapshot %+v %v", snap, err)
	}
	// Pausing again is a no-op.
	if again, err := e.s.PauseSession(ctx, e.tenant, se.ID); err != nil || again.HeadSnapshotID != se.HeadSnapshotID {
		t.Errorf("second pause: %+v %v", again, err)
	}
	se, err = e.s.ResumeSession(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	if se.State != store.SessionRunning || se.SandboxID == "" || se.SandboxID == first {
		t.Fatalf("resumed %+v", se)
	}
	if got := e.n.restored[se.SandboxID]; got != "image of "+first {
		t.Errorf("restored from %q; want the pause's image of %s", got, first)
	}
	// The image at rest is encrypted: its content is nowhere in the blob store.
	assertNotUnder(t, e.blobs, "image of "+first)
	// Pause → resume → pause again: the second snapshot's parent is the first.
	se, err = e.s.PauseSession(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	snap2, _ := e.st.GetSnapshot(ctx, e.tenant, se.HeadSnapshotID)
	if snap2.ParentID != snap.ID {
		t.Errorf("second snapshot's parent %q; want %q", snap2.ParentID, snap.ID)
	}
	// A session another tenant names does not exist.
	if _, err := e.s.ResumeSession(ctx, "tn_other", se.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("other tenant: %v; want not found", err)
	}
}

func TestSessionPauseFailureKeepsItRunning(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{})
	e.n.mu.Lock()
	e.n.failCheckpoint = errors.New("checkpoint broke")
	e.n.mu.Unlock()
	got, err := e.s.PauseSession(ctx, e.tenant, se.ID)
	if err == nil || !strings.Contains(err.Error(), "checkpoint broke") {
		t.Fatalf("pause: %v; want the checkpoint's error", err)
	}
	if got.State != store.SessionRunning || got.SandboxID != se.SandboxID || !e.n.isRunning(se.SandboxID) {
		t.Errorf("after a failed pause: %+v; want it running in the same sandbox", got)
	}
	sns, _, _ := e.st.ListSnapshots(ctx, e.tenant, store.SnapshotFilter{SessionID: se.ID})
	if len(sns) != 1 || sns[0].State != store.SnapshotFailed {
		t.Errorf("snapshots %+v; want one failed", sns)
	}
}

// TestSessionPauseSnapshotFailedMeanwhile: a pause whose snapshot another replica (the leader, taking
// this one for gone) failed while it was written fails too, and the session runs on in its sandbox; the
// snapshot stays failed.
func TestSessionPauseSnapshotFailedMeanwhile(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{})
	e.n.mu.Lock()
	e.n.afterCheckpoint = func() {
		sns, _, err := e.st.ListSnapshots(ctx, e.tenant, store.SnapshotFilter{SessionID: se.ID})
		if err != nil || len(sns) != 1 || sns[0].State != store.SnapshotWriting {
			t.Errorf("snapshots while the checkpoint ran: %+v, %v; want one writing", sns, err)
			return
		}
		sns[0].State, sns[0].Reason = store.SnapshotFailed, "interrupted: replica went away"
		if _, err := e.st.UpdateSnapshot(ctx, sns[0]); err != nil {
			t.Error(err)
		}
	}
	e.n.mu.Unlock()
	got, err := e.s.PauseSession(ctx, e.tenant, se.ID)
	e.n.mu.Lock()
	e.n.afterCheckpoint = nil
	e.n.mu.Unlock()
	if err == nil {
		t.Fatalf("pause whose snapshot was failed meanwhile: %+v; want an error", got)
	}
	got, err = e.s.GetSession(ctx, e.tenant, se.ID)
	if err != nil || got.State != store.SessionRunning || got.SandboxID != se.SandboxID || !e.n.isRunning(se.SandboxID) {
		t.Errorf("after the pause failed: %+v, %v; want it running in the same sandbox", got, err)
	}
	sns, _, _ := e.st.ListSnapshots(ctx, e.tenant, store.SnapshotFilter{SessionID: se.ID})
	if len(sns) != 1 || sns[0].State != store.SnapshotFailed || got.HeadSnapshotID == sns[0].ID {
		t.Errorf("snapshots %+v, head %q; want one failed, not the head", sns, got.HeadSnapshotID)
	}
}

func TestSessionAutoResumeAndIdlePause(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{IdleTimeoutSeconds: 60, AutoResume: true})
	e.clk.Add(30 * time.Second)
	if _, err := e.s.SessionSandbox(ctx, e.tenant, se.ID); err != nil { // activity
		t.Fatal(err)
	}
	e.clk.Add(45 * time.Second)
	e.s.pauseIdleSessions()
	if got, _ := e.s.GetSession(ctx, e.tenant, se.ID); got.State != store.SessionRunning {
		t.Fatalf("paused %s after 45 s of idleness with a 60 s timeout", got.State)
	}
	e.clk.Add(20 * time.Second)
	e.s.pauseIdleSessions()
	got, _ := e.s.GetSession(ctx, e.tenant, se.ID)
	if got.State != store.SessionPaused || got.Reason != "idle" {
		t.Fatalf("after 65 s idle: %s %q; want paused (idle)", got.State, got.Reason)
	}
	// Work for it resumes it.
	sb, err := e.s.SessionSandbox(ctx, e.tenant, se.ID)
	if err != nil || sb == "" || sb == se.SandboxID || !e.n.isRunning(sb) {
		t.Fatalf("work on the paused session: %q %v; want a new running sandbox", sb, err)
	}
	// Without auto-resume it says so.
	other := e.create(t, SessionRequest{})
	if _, err := e.s.PauseSession(ctx, e.tenant, other.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.SessionSandbox(ctx, e.tenant, other.ID); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("work on a paused session without auto-resume: %v", err)
	}
}

func TestSessionTimeout(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	for _, bad := range []SessionRequest{
		{CreateRequest: CreateRequest{TimeoutSeconds: -1}},
		{CreateRequest: CreateRequest{TimeoutSeconds: int(MaxTimeout/time.Second) + 1}},
		{OnTimeout: "explode"},
	} {
		if _, err := e.s.CreateSession(ctx, e.tenant, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CreateSession(%+v) = %v; want invalid argument", bad, err)
		}
	}

	// No timeout: no end, whatever the time.
	forever := e.create(t, SessionRequest{})
	if forever.EndsAt != nil || forever.TimeoutSeconds != 0 || forever.OnTimeout != store.SessionTimeoutDelete {
		t.Fatalf("a session made without a timeout: ends %v, timeout %d, on timeout %q", forever.EndsAt, forever.TimeoutSeconds, forever.OnTimeout)
	}

	paused := e.create(t, SessionRequest{CreateRequest: CreateRequest{TimeoutSeconds: 60}, OnTimeout: store.SessionTimeoutPause})
	deleted := e.create(t, SessionRequest{CreateRequest: CreateRequest{TimeoutSeconds: 60}})
	if want := e.clk.Now().Add(time.Minute); paused.EndsAt == nil || !paused.EndsAt.Equal(want) {
		t.Fatalf("ends at %v; want %v", paused.EndsAt, want)
	}
	// Extending only moves an end later; setting moves it either way.
	if _, err := e.s.SetSessionTimeout(ctx, e.tenant, deleted.ID, 10, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.s.GetSession(ctx, e.tenant, deleted.ID); !got.EndsAt.Equal(*deleted.EndsAt) || got.TimeoutSeconds != 10 {
		t.Errorf("after extending to 10 s: ends %v, timeout %d; want the end kept at %v", got.EndsAt, got.TimeoutSeconds, deleted.EndsAt)
	}
	e.clk.Add(59 * time.Second)
	e.s.endSessions()
	for _, id := range []string{paused.ID, deleted.ID, forever.ID} {
		if got, _ := e.s.GetSession(ctx, e.tenant, id); got.State != store.SessionRunning {
			t.Fatalf("%s is %s before its end", id, got.State)
		}
	}
	if _, err := e.s.SetSessionTimeout(ctx, e.tenant, deleted.ID, 120, false); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(2 * time.Second)
	e.s.endSessions()
	got, _ := e.s.GetSession(ctx, e.tenant, paused.ID)
	if got.State != store.SessionPaused || got.Reason != "timeout" || got.EndsAt != nil {
		t.Fatalf("at its end: %s %q ends %v; want paused (timeout), no end", got.State, got.Reason, got.EndsAt)
	}
	if got, _ := e.s.GetSession(ctx, e.tenant, deleted.ID); got.State != store.SessionRunning {
		t.Fatalf("a session given 120 s more is %s", got.State)
	}
	// Its next run has its own end; a paused session's new timeout applies to it.
	if _, err := e.s.SetSessionTimeout(ctx, e.tenant, paused.ID, 30, false); err != nil {
		t.Fatal(err)
	}
	resumed, err := e.s.ResumeSession(ctx, e.tenant, paused.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := e.clk.Now().Add(30 * time.Second); resumed.EndsAt == nil || !resumed.EndsAt.Equal(want) {
		t.Fatalf("resumed: ends %v; want %v", resumed.EndsAt, want)
	}
	e.clk.Add(2 * time.Minute)
	e.s.endSessions()
	settle(t, e.s)
	// Deleted: its record goes too, as for any delete.
	if got, err := e.s.GetSession(ctx, e.tenant, deleted.ID); (err == nil && got.State != store.SessionDeleted) ||
		(err != nil && !errors.Is(err, errdefs.ErrNotFound)) || e.n.isRunning(deleted.SandboxID) {
		t.Fatalf("past its end with on_timeout delete: %s %v, sandbox running %v", got.State, err, e.n.isRunning(deleted.SandboxID))
	}
	if got, _ := e.s.GetSession(ctx, e.tenant, forever.ID); got.State != store.SessionRunning {
		t.Fatalf("a session without a timeout is %s", got.State)
	}
	if _, err := e.s.SetSessionTimeout(ctx, e.tenant, deleted.ID, 60, false); !errors.Is(err, errdefs.ErrConflict) && !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetSessionTimeout(deleted) = %v; want conflict or not found", err)
	}
	if _, err := e.s.SetSessionTimeout(ctx, e.tenant, forever.ID, -5, false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("SetSessionTimeout(-5) = %v; want invalid argument", err)
	}
	// Another tenant's session is not found.
	other, _, _, err := e.s.CreateTenant(ctx, "other", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.SetSessionTimeout(ctx, other.ID, forever.ID, 60, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetSessionTimeout(other tenant) = %v; want not found", err)
	}
}

func TestSessionFork(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	parent := e.create(t, SessionRequest{CreateRequest: CreateRequest{Metadata: map[string]string{"k": "v"}}})
	forks, err := e.s.ForkSession(ctx, e.tenant, parent.ID, 5, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 5 {
		t.Fatalf("%d forks; want 5", len(forks))
	}
	seen := map[string]bool{}
	for _, f := range forks {
		if f.State != store.SessionRunning || f.ParentSessionID != parent.ID || f.ForkedFromSnapshotID == "" || f.Metadata["k"] != "v" {
			t.Errorf("fork %+v", f)
		}
		if seen[f.SandboxID] || f.SandboxID == parent.SandboxID {
			t.Errorf("fork sandbox %s is not its own", f.SandboxID)
		}
		seen[f.SandboxID] = true
		if got := e.n.restored[f.SandboxID]; got != "image of "+parent.SandboxID {
			t.Errorf("fork restored from %q", got)
		}
		if !e.n.newIdentity[f.SandboxID] {
			t.Errorf("fork %s restored without an identity of its own", f.ID)
		}
	}
	// The parent runs on; the fork's snapshot is its head now.
	p, _ := e.s.GetSession(ctx, e.tenant, parent.ID)
	if p.State != store.SessionRunning || p.SandboxID != parent.SandboxID || p.HeadSnapshotID != forks[0].ForkedFromSnapshotID {
		t.Errorf("parent after fork: %+v", p)
	}
	if len(e.n.cas) != 5 || !strings.HasPrefix(e.n.cas[0], parent.ID+"->") {
		t.Errorf("CA copies %v; want one from the parent per fork", e.n.cas)
	}
	// Bad counts.
	for _, n := range []int{0, -1, MaxFork + 1} {
		if _, err := e.s.ForkSession(ctx, e.tenant, parent.ID, n, ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("fork %d: %v; want invalid argument", n, err)
		}
	}
	// Deleting the parent leaves the forks able to resume from the shared snapshot.
	if err := e.s.DeleteSession(ctx, e.tenant, parent.ID); err != nil {
		t.Fatal(err)
	}
	f := forks[0]
	if _, err := e.s.PauseSession(ctx, e.tenant, f.ID); err != nil {
		t.Fatal(err)
	}
	resumed, err := e.s.ResumeSession(ctx, e.tenant, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if e.n.newIdentity[resumed.SandboxID] {
		t.Errorf("a fork's resume of its own snapshot gave it a new identity: it keeps its own")
	}
	f2 := forks[1]
	if _, err := e.s.PauseSession(ctx, e.tenant, f2.ID); err != nil {
		t.Fatal(err)
	}
}

func TestSessionCorruptSnapshotGivesClearError(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{})
	se, err := e.s.PauseSession(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	os.RemoveAll(e.n.images) // the node keeps no image: the resume reads the store
	corruptChunks(t, e.blobs)
	_, err = e.s.ResumeSession(ctx, e.tenant, se.ID)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), se.HeadSnapshotID) || !strings.Contains(err.Error(), "chunk") {
		t.Fatalf("resume from a corrupted snapshot: %v; want a clear error naming the snapshot and chunk", err)
	}
	got, _ := e.s.GetSession(ctx, e.tenant, se.ID)
	if got.State != store.SessionPaused || !strings.Contains(got.Reason, "resume from snapshot") {
		t.Errorf("after the failed resume: %s %q; want paused with the reason", got.State, got.Reason)
	}
}

// TestSessionReconcile: what a restart finds mid-way is settled: a pause that had not finished runs on (or,
// its sandbox gone, is paused at its latest snapshot), a resume that had not finished is paused again, a
// snapshot being written is failed.
func TestSessionReconcile(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	pausing := e.create(t, SessionRequest{})
	resuming := e.create(t, SessionRequest{})
	resuming, err := e.s.PauseSession(ctx, e.tenant, resuming.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Simulate a crash: pausing recorded, a snapshot writing; resuming recorded.
	p, err := e.st.UpdateSession(ctx, withState(pausing, store.SessionPausing))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.CreateSnapshot(ctx, store.Snapshot{TenantID: e.tenant, SessionID: p.ID, Trigger: store.TriggerPause}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.UpdateSession(ctx, withState(resuming, store.SessionResuming)); err != nil {
		t.Fatal(err)
	}
	// A pause whose sandbox was lost meanwhile (its checkpoint killed it): paused at its head snapshot,
	// or failed if it has none.
	var gone []store.Session
	for i := range 2 {
		se := e.create(t, SessionRequest{})
		if i == 0 {
			if se, err = e.s.PauseSession(ctx, e.tenant, se.ID); err != nil {
				t.Fatal(err)
			}
			if se, err = e.s.ResumeSession(ctx, e.tenant, se.ID); err != nil {
				t.Fatal(err)
			}
		}
		sb, err := e.st.GetSandbox(ctx, e.tenant, se.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		sb.State = store.StateFailed
		if _, err := e.st.UpdateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if se, err = e.st.UpdateSession(ctx, withState(se, store.SessionPausing)); err != nil {
			t.Fatal(err)
		}
		gone = append(gone, se)
	}
	s2 := e.newSvc()
	if err := s2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown(ctx)
	got, _ := s2.GetSession(ctx, e.tenant, pausing.ID)
	if got.State != store.SessionRunning || got.SandboxID != pausing.SandboxID {
		t.Errorf("interrupted pause: %+v; want running on", got)
	}
	got, _ = s2.GetSession(ctx, e.tenant, resuming.ID)
	if got.State != store.SessionPaused || got.HeadSnapshotID != resuming.HeadSnapshotID {
		t.Errorf("interrupted resume: %+v; want paused at its head", got)
	}
	got, _ = s2.GetSession(ctx, e.tenant, gone[0].ID)
	if got.State != store.SessionPaused || got.HeadSnapshotID != gone[0].HeadSnapshotID || got.SandboxID != "" || !strings.Contains(got.Reason, "paused at snapshot "+gone[0].HeadSnapshotID) {
		t.Errorf("interrupted pause, its sandbox gone: %+v; want paused at its head %s", got, gone[0].HeadSnapshotID)
	}
	got, _ = s2.GetSession(ctx, e.tenant, gone[1].ID)
	if got.State != store.SessionFailed || !strings.Contains(got.Reason, "sandbox was gone") {
		t.Errorf("interrupted pause, its sandbox gone, no snapshot: %+v; want failed", got)
	}
	sns, err := e.st.ListSnapshotsByState(ctx, []store.SnapshotState{store.SnapshotWriting}, 10)
	if err != nil || len(sns) != 0 {
		t.Errorf("snapshots still writing: %v %v", sns, err)
	}
	if got, err := s2.ResumeSession(ctx, e.tenant, resuming.ID); err != nil || got.State != store.SessionRunning {
		t.Errorf("resume after reconcile: %+v %v", got, err)
	}
}

func withState(se store.Session, st store.SessionState) store.Session {
	se.State = st
	return se
}

func assertNotUnder(t *testing.T, dir, needle string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), needle) {
			t.Errorf("%s holds %q in plain text", p, needle)
		}
		return nil
	})
}

// TestSessionResumeFetches: a resume on the node that paused uses the image the node keeps (here even
// though every chunk in the store was damaged meanwhile); a node that no longer has it fetches it from
// the store with the grant, and then the store's damage shows.
func TestSessionResumeFetches(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{})
	first := se.SandboxID
	se, err := e.s.PauseSession(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	if se, err = e.s.ResumeSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatalf("resume from the kept image: %v", err)
	}
	if e.n.fetched != 0 || e.n.restored[se.SandboxID] != "image of "+first {
		t.Errorf("resume fetched %d images, restored %q", e.n.fetched, e.n.restored[se.SandboxID])
	}
	second := se.SandboxID
	if se, err = e.s.PauseSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	// The node lost its images (a new disk): the resume fetches from the store.
	os.RemoveAll(e.n.images)
	if se, err = e.s.ResumeSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatalf("resume fetching the image: %v", err)
	}
	if e.n.fetched != 1 || e.n.restored[se.SandboxID] != "image of "+first+" via "+second {
		t.Errorf("resume fetched %d images, restored %q", e.n.fetched, e.n.restored[se.SandboxID])
	}
	if se, err = e.s.PauseSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	corruptChunks(t, e.blobs)
	if _, err := e.s.ResumeSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatalf("resume from the kept image over a damaged store: %v", err)
	}
	if se, err = e.s.PauseSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	corruptChunks(t, e.blobs)
	os.RemoveAll(e.n.images)
	if _, err := e.s.ResumeSession(ctx, e.tenant, se.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("resume fetching from a damaged store: %v; want the store's error", err)
	}
}

func corruptChunks(t *testing.T, blobs string) {
	t.Helper()
	_ = filepath.WalkDir(blobs, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(p, "/chunks/") {
			b, _ := os.ReadFile(p)
			b[len(b)-1] ^= 1
			_ = os.WriteFile(p, b, 0o600)
		}
		return nil
	})
}

// TestSnapshotGC: once a session and its fork are deleted, collection drops their records and every
// chunk of their snapshots.
func TestSnapshotGC(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{})
	forks, err := e.s.ForkSession(ctx, e.tenant, se.ID, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.PauseSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	chunks := func() int {
		n := 0
		_ = filepath.WalkDir(e.blobs, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && strings.Contains(p, "/chunks/") {
				n++
			}
			return nil
		})
		return n
	}
	if chunks() == 0 {
		t.Fatal("no chunks stored")
	}
	// The parent goes first: its fork still resumes from the fork snapshot, so its record stays.
	if err := e.s.DeleteSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatal(err)
	}
	e.s.collectSnapshots(0)
	if got, err := e.st.GetSession(ctx, e.tenant, se.ID); err != nil || got.State != store.SessionDeleted {
		t.Fatalf("parent after collection: %+v %v; want its record kept for the fork", got, err)
	}
	if _, err := e.s.PauseSession(ctx, e.tenant, forks[0].ID); err != nil {
		t.Fatalf("the fork must still pause: %v", err)
	}
	if err := e.s.DeleteSession(ctx, e.tenant, forks[0].ID); err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	e.s.collectSnapshots(0)
	if _, err := e.st.GetSession(ctx, e.tenant, se.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("parent record after the fork went: %v; want it collected", err)
	}
	if n := chunks(); n != 0 {
		t.Errorf("%d chunks left after both sessions were deleted and collected", n)
	}
}

// TestSessionConcurrentCalls: pauses, resumes, snapshots and work on one session from many goroutines
// are serialized: every call either succeeds or is refused for the state it found, and the session ends
// in a state the calls explain, with exactly one running sandbox or none.
func TestSessionConcurrentCalls(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{AutoResume: true})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			switch i % 4 {
			case 0:
				_, err = e.s.PauseSession(ctx, e.tenant, se.ID)
			case 1:
				_, err = e.s.ResumeSession(ctx, e.tenant, se.ID)
			case 2:
				_, err = e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
			case 3:
				_, err = e.s.SessionSandbox(ctx, e.tenant, se.ID)
			}
			if err != nil && !errors.Is(err, errdefs.ErrConflict) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	settle(t, e.s)
	close(errs)
	for err := range errs {
		t.Errorf("concurrent call: %v", err)
	}
	got, err := e.s.GetSession(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	e.n.mu.Lock()
	for id, ok := range e.n.running {
		if ok && !e.n.frozen[id] && id != "" {
			sb, err := e.st.GetSandbox(ctx, e.tenant, id)
			if err == nil && sb.Metadata[SessionMetadataKey] == se.ID && sb.State == store.StateRunning {
				running++
			}
		}
	}
	e.n.mu.Unlock()
	switch got.State {
	case store.SessionRunning:
		if running != 1 || got.SandboxID == "" {
			t.Errorf("running session with %d running sandboxes (its own %q)", running, got.SandboxID)
		}
	case store.SessionPaused:
		if running != 0 || got.HeadSnapshotID == "" {
			t.Errorf("paused session with %d running sandboxes, head %q", running, got.HeadSnapshotID)
		}
	default:
		t.Errorf("session ended %s (%s)", got.State, got.Reason)
	}
}

// TestSessionSandboxCalls: a session's sandbox takes no timeout (the session pauses when idle), and a
// policy set on it is the session's from then on, for the sandboxes it resumes into.
func TestSessionSandboxCalls(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	se := e.create(t, SessionRequest{})
	if _, err := e.s.SetTimeout(ctx, e.tenant, se.SandboxID, 60); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("timeout on a session's sandbox: %v; want a conflict", err)
	}
	p := policy.Policy{Default: policy.ActionAllow}
	if _, err := e.s.SetNetwork(ctx, e.tenant, se.SandboxID, p); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.GetSession(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sp, err := SessionNetworkPolicy(got); err != nil || sp.Default != policy.ActionAllow {
		t.Errorf("session policy after setting its sandbox's: %+v %v", sp, err)
	}
}

// flakyBlobs is a blob store whose writes fail while broken is set.
type flakyBlobs struct {
	blob.Store
	broken atomic.Bool
}

func (f *flakyBlobs) Put(ctx context.Context, key string, data []byte) error {
	if f.broken.Load() {
		return errors.New("blob store unreachable")
	}
	return f.Store.Put(ctx, key, data)
}

// setupFlaky is setupSessions over a blob store that can be broken.
func setupFlaky(t *testing.T) (*sessionEnv, *flakyBlobs) {
	t.Helper()
	e := setupSessions(t)
	inner, err := local.New(e.blobs)
	if err != nil {
		t.Fatal(err)
	}
	fb := &flakyBlobs{Store: inner}
	keyring, err := keyslocal.New(filepath.Join(filepath.Dir(e.blobs), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.New(snapshot.Config{Blobs: fb, Keys: keyring})
	if err != nil {
		t.Fatal(err)
	}
	e.s.Shutdown(context.Background())
	// The node writes into the flaky store.
	if e.n.snaps, err = snapshot.New(snapshot.Config{Blobs: fb}); err != nil {
		t.Fatal(err)
	}
	e.newSvc = func() *Service {
		s, err := New(Config{Store: e.st, Node: e.n, Now: e.clk.Now, ReapInterval: time.Hour, IdleInterval: time.Hour, Snapshots: snaps})
		if err != nil {
			t.Fatal(err)
		}
		e.n.bind(s)
		return s
	}
	e.s = e.newSvc()
	t.Cleanup(func() { e.s.Shutdown(context.Background()); e.n.stopStores() })
	return e, fb
}

// TestSnapshotWriteBehind: a pause is done once the image is saved on the node; the session resumes
// and forks from that image while the snapshot store is unreachable, and the upload, retried, completes
// the snapshot once the store is back.
func TestSnapshotWriteBehind(t *testing.T) {
	e, fb := setupFlaky(t)
	ctx := context.Background()
	fb.broken.Store(true)
	se := e.create(t, SessionRequest{})
	first := se.SandboxID
	se, err := e.s.PauseSession(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatalf("pause with the store down: %v", err)
	}
	head := se.HeadSnapshotID
	if sn, _ := e.st.GetSnapshot(ctx, e.tenant, head); sn.State != store.SnapshotUploading {
		t.Fatalf("head %+v; want uploading", sn)
	}
	if se, err = e.s.ResumeSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatalf("resume from the saved image: %v", err)
	}
	if got := e.n.restored[se.SandboxID]; got != "image of "+first {
		t.Errorf("restored from %q", got)
	}
	forks, err := e.s.ForkSession(ctx, e.tenant, se.ID, 2, head)
	if err != nil || len(forks) != 2 || forks[0].State != store.SessionRunning {
		t.Fatalf("fork from an uploading snapshot: %+v %v", forks, err)
	}
	fb.broken.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for {
		sn, err := e.st.GetSnapshot(ctx, e.tenant, head)
		if err == nil && sn.State == store.SnapshotComplete {
			if sn.StoredBytes == 0 || sn.CompletedAt == nil || sn.Meta["upload_ms"] == "" {
				t.Errorf("complete snapshot %+v", sn)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot still %s after the store came back", sn.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	settle(t, e.s)
	if ids, _ := e.n.pendingImages(); len(ids) != 0 {
		t.Errorf("pending images left after the uploads: %v", ids)
	}
}

// TestSnapshotUploadsAfterRestart: a crash leaves snapshots uploading; once the node and the control
// plane are back, the node's stores complete those whose image is saved (one stored before the crash
// with the figures of its manifest) and fail one whose image is gone. (A node removes the images no job
// waits for when it starts: internal/node's tests.)
func TestSnapshotUploadsAfterRestart(t *testing.T) {
	e, fb := setupFlaky(t)
	ctx := context.Background()
	fb.broken.Store(true)
	a := e.create(t, SessionRequest{})
	b := e.create(t, SessionRequest{})
	a, err := e.s.PauseSession(ctx, e.tenant, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err = e.s.PauseSession(ctx, e.tenant, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The crash (of the node's process and of the control plane's): stores stop where they are, nothing
	// more is recorded.
	e.n.stopStores()
	settle(t, e.s)
	os.RemoveAll(e.n.pendingDir(b.HeadSnapshotID)) // the disk lost one image
	fb.broken.Store(false)
	// A third one was stored, but the crash came before it was recorded complete.
	c := e.create(t, SessionRequest{})
	fb.broken.Store(true)
	c, err = e.s.PauseSession(ctx, e.tenant, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.n.stopStores()
	fb.broken.Store(false)
	snaps, _ := e.s.snapshotStore()
	g, err := snaps.Grant(ctx, e.tenant, true)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := e.n.storeImage(ctx, e.tenant, c.HeadSnapshotID, g, nil)
	g.Clear()
	if err != nil {
		t.Fatal(err)
	}
	e.s.Shutdown(ctx)
	s2 := e.newSvc()
	if err := s2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown(ctx)
	e.n.resumeStores() // the node starts again
	settle(t, s2)
	if sn, _ := e.st.GetSnapshot(ctx, e.tenant, c.HeadSnapshotID); sn.State != store.SnapshotComplete || sn.StoredBytes != stored.NewStoredBytes {
		t.Errorf("snapshot stored before the crash: %s (%s) stored %d; want complete with the %d bytes its manifest counts",
			sn.State, sn.Reason, sn.StoredBytes, stored.NewStoredBytes)
	}
	if sn, _ := e.st.GetSnapshot(ctx, e.tenant, a.HeadSnapshotID); sn.State != store.SnapshotComplete {
		t.Errorf("snapshot with its image saved: %s (%s); want complete after the restart", sn.State, sn.Reason)
	}
	if sn, _ := e.st.GetSnapshot(ctx, e.tenant, b.HeadSnapshotID); sn.State != store.SnapshotFailed || !strings.Contains(sn.Reason, "lost") {
		t.Errorf("snapshot whose image was lost: %s (%s); want failed", sn.State, sn.Reason)
	}
	if got, err := s2.ResumeSession(ctx, e.tenant, a.ID); err != nil || got.State != store.SessionRunning {
		t.Errorf("resume after the restart: %+v %v", got, err)
	}
}

// TestSnapshotDeleteWhileUploading: deleting a session stops its uploads and leaves nothing behind.
func TestSnapshotDeleteWhileUploading(t *testing.T) {
	e, fb := setupFlaky(t)
	ctx := context.Background()
	fb.broken.Store(true)
	se := e.create(t, SessionRequest{})
	se, err := e.s.PauseSession(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.s.DeleteSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatal(err)
	}
	fb.broken.Store(false)
	settle(t, e.s)
	if ids, _ := e.n.pendingImages(); len(ids) != 0 {
		t.Errorf("pending images left: %v", ids)
	}
	if _, err := e.st.GetSnapshot(ctx, e.tenant, se.HeadSnapshotID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("snapshot record after the delete: %v", err)
	}
}

// TestSnapshotImageLostWhileUploading: an upload whose saved image disappears (the disk lost it) before
// the store took it fails the snapshot instead of retrying forever.
func TestSnapshotImageLostWhileUploading(t *testing.T) {
	e, fb := setupFlaky(t)
	ctx := context.Background()
	fb.broken.Store(true)
	se := e.create(t, SessionRequest{})
	sn, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(e.n.pendingDir(sn.ID)); err != nil {
		t.Fatal(err)
	}
	fb.broken.Store(false)
	settle(t, e.s)
	got, err := e.st.GetSnapshot(ctx, e.tenant, sn.ID)
	if err != nil || got.State != store.SnapshotFailed || !strings.Contains(got.Reason, "lost") {
		t.Errorf("snapshot whose image was lost: %+v %v; want failed", got, err)
	}
}

// TestCrashBudget: a session whose sandbox crashed resumes on its own crashResumes times within
// crashWindow, then no more until the oldest of them is past it; sessions count apart.
func TestCrashBudget(t *testing.T) {
	var b crashBudget
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for i := range crashResumes {
		if !b.allow("se_a", t0.Add(time.Duration(i)*time.Minute)) {
			t.Fatalf("resume %d of se_a refused", i+1)
		}
	}
	if b.allow("se_a", t0.Add(5*time.Minute)) {
		t.Fatalf("resume %d of se_a within %s allowed", crashResumes+1, crashWindow)
	}
	if !b.allow("se_b", t0.Add(5*time.Minute)) {
		t.Fatal("another session's first resume refused")
	}
	if !b.allow("se_a", t0.Add(crashWindow+time.Second)) {
		t.Fatal("a resume once the first left the window refused")
	}
}

// TestDeleteForkKeepsItsSource: deleting a fork that never took a snapshot of its own leaves the
// snapshot it was forked from (its head, but its parent's) in the snapshot store: the parent and other
// forks still restore from it.
func TestDeleteForkKeepsItsSource(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	parent := e.create(t, SessionRequest{})
	forks, err := e.s.ForkSession(ctx, e.tenant, parent.ID, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	src := forks[0].ForkedFromSnapshotID
	if forks[0].HeadSnapshotID != src {
		t.Fatalf("fork's head %s; want its source %s", forks[0].HeadSnapshotID, src)
	}
	settle(t, e.s) // stored
	if _, err := e.s.snapshotBook.snapshots.Manifest(ctx, e.tenant, src); err != nil {
		t.Fatalf("snapshot %s not stored: %v", src, err)
	}
	if err := e.s.DeleteSession(ctx, e.tenant, forks[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.snapshotBook.snapshots.Manifest(ctx, e.tenant, src); err != nil {
		t.Fatalf("the parent's snapshot %s after its fork was deleted: %v", src, err)
	}
	if _, err := e.s.ForkSession(ctx, e.tenant, parent.ID, 1, src); err != nil {
		t.Fatalf("fork again from %s: %v", src, err)
	}
}

// TestRecordOutlivesSandbox: a session whose sandbox's record says it runs, though its node no longer
// has it (the Store forgot the teardown), does not stay "running" in it. The leader's sweep fails the
// sandbox as lost with its node and the session goes on from its latest snapshot in a new sandbox; a
// session whose sandbox the node has is left alone. A pause left mid-way whose sandbox is gone is
// settled paused at the latest snapshot, not thawed back to running in nothing.
func TestRecordOutlivesSandbox(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	snapshotted := func() store.Session {
		t.Helper()
		se := e.create(t, SessionRequest{})
		if _, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, ""); err != nil {
			t.Fatal(err)
		}
		settle(t, e.s)
		se, err := e.st.GetSession(ctx, e.tenant, se.ID)
		if err != nil || se.HeadSnapshotID == "" {
			t.Fatalf("session after a snapshot: %+v, %v", se, err)
		}
		return se
	}
	forget := func(sbID string) { // the node tears it down; the Store never hears of it
		e.n.mu.Lock()
		delete(e.n.running, sbID)
		e.n.mu.Unlock()
	}
	lost, kept := snapshotted(), snapshotted()
	forget(lost.SandboxID)

	e.s.sandboxes.sweepLost()
	settle(t, e.s)
	sb, err := e.st.GetSandbox(ctx, e.tenant, lost.SandboxID)
	if err != nil || sb.State != store.StateFailed || !strings.Contains(sb.Reason, "no longer has it") {
		t.Errorf("the sandbox its node lost: %s (%s), %v; want failed as lost", sb.State, sb.Reason, err)
	}
	got, err := e.st.GetSession(ctx, e.tenant, lost.ID)
	if err != nil || got.State != store.SessionRunning || got.SandboxID == "" || got.SandboxID == lost.SandboxID {
		t.Errorf("the session whose sandbox was lost: %s in %q (%s), %v; want running in a new sandbox", got.State, got.SandboxID, got.Reason, err)
	}
	if ids, _ := e.n.Sandboxes(ctx); !slices.Contains(ids, got.SandboxID) {
		t.Errorf("the resumed session's sandbox %s is not on the node (%v)", got.SandboxID, ids)
	}
	// The positive control: the sweep left alone the sandbox its node has.
	if got, err := e.st.GetSession(ctx, e.tenant, kept.ID); err != nil || got.State != store.SessionRunning || got.SandboxID != kept.SandboxID {
		t.Errorf("a session whose sandbox its node has: %s in %q, %v; want running in %s", got.State, got.SandboxID, err, kept.SandboxID)
	}

	// A pause that tore the sandbox down, its record and the session's step forgotten: still pausing.
	pausing := func(se store.Session) store.Session {
		t.Helper()
		se, err := e.s.sessions.updateSession(ctx, se, func(se *store.Session) error {
			return setSessionState(se, store.SessionPausing, "")
		})
		if err != nil {
			t.Fatal(err)
		}
		return se
	}
	gone, stays := pausing(kept), pausing(snapshotted())
	forget(gone.SandboxID)
	for _, se := range []store.Session{gone, stays} {
		unlock := e.s.sessions.lockSession(se.ID)
		e.s.sessions.adoptOp(ctx, se)
		unlock()
	}
	settle(t, e.s)
	if got, err := e.st.GetSession(ctx, e.tenant, gone.ID); err != nil || got.State != store.SessionPaused || got.SandboxID != "" || got.HeadSnapshotID != gone.HeadSnapshotID {
		t.Errorf("a session left pausing whose sandbox is gone: %s in %q at %s (%s), %v; want paused at %s", got.State, got.SandboxID, got.HeadSnapshotID, got.Reason, err, gone.HeadSnapshotID)
	}
	if got, err := e.st.GetSession(ctx, e.tenant, stays.ID); err != nil || got.State != store.SessionRunning || got.SandboxID != stays.SandboxID {
		t.Errorf("a session left pausing whose sandbox runs: %s in %q, %v; want running in %s", got.State, got.SandboxID, err, stays.SandboxID)
	}
}

// forgetfulStore, while armed, acknowledges snapshots' steps to uploading and sessions' updates without
// keeping them: as a PostgreSQL that failed over to a standby those commits had not reached.
type forgetfulStore struct {
	store.Store
	armed atomic.Bool
}

func (f *forgetfulStore) UpdateSnapshot(ctx context.Context, sn store.Snapshot) (store.Snapshot, error) {
	if sn.State == store.SnapshotUploading && f.armed.Load() {
		sn.Version++
		return sn, nil
	}
	return f.Store.UpdateSnapshot(ctx, sn)
}

func (f *forgetfulStore) UpdateSession(ctx context.Context, se store.Session) (store.Session, error) {
	if f.armed.Load() {
		se.Version++
		return se, nil
	}
	return f.Store.UpdateSession(ctx, se)
}

// TestSnapshotUploadEndsWhenItsRecordWentBack: a store whose snapshot's record is still at "writing"
// (the Store forgot the step to uploading) ends rather than retry forever: the node's report says what
// the image holds, which completes the record, and the snapshot restores.
func TestSnapshotUploadEndsWhenItsRecordWentBack(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	e.s.Shutdown(ctx)
	fs := &forgetfulStore{Store: e.st}
	s, err := New(Config{Store: fs, Node: e.n, Now: e.clk.Now, ReapInterval: time.Hour, IdleInterval: time.Hour, Snapshots: e.s.snapshotBook.snapshots})
	if err != nil {
		t.Fatal(err)
	}
	e.n.bind(s)
	e.s = s
	t.Cleanup(func() { s.Shutdown(context.Background()); e.n.stopStores() })
	se := e.create(t, SessionRequest{})
	fs.armed.Store(true)
	sn, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	fs.armed.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	got, err := e.st.GetSnapshot(ctx, e.tenant, sn.ID)
	if err != nil || got.State != store.SnapshotComplete || got.Meta[snapshotFilesMeta] != "fs.tar" || got.Meta[SnapshotKindMeta] != SnapshotKindMemory {
		t.Errorf("snapshot whose record stayed writing: %s (%s) %v, %v; want complete from the node's report", got.State, got.Reason, got.Meta, err)
	}
	if forks, err := e.s.ForkSession(ctx, e.tenant, se.ID, 1, sn.ID); err != nil || len(forks) != 1 || forks[0].State != store.SessionRunning {
		t.Errorf("fork from it: %+v %v", forks, err)
	}
	// The positive control: the next snapshot's upload completes it.
	sn, err = e.s.SnapshotSession(ctx, e.tenant, se.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	if got, err := e.st.GetSnapshot(ctx, e.tenant, sn.ID); err != nil || got.State != store.SnapshotComplete {
		t.Errorf("a snapshot uploaded: %s (%s), %v; want complete", got.State, got.Reason, err)
	}
}

// TestCrashBudgetPerSession: the budget of automatic resumes after crashes is the session's, kept in
// the Store: resumes counted by two replicas add up, a third replica refuses the one past the budget,
// sessions count apart, and a deleted session's count goes with it.
func TestCrashBudgetPerSession(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	other := e.newSvc()
	t.Cleanup(func() { other.Shutdown(context.Background()) })
	third := e.newSvc()
	t.Cleanup(func() { third.Shutdown(context.Background()) })
	e.n.bind(e.s)
	replicas := []*Service{e.s, other, e.s}
	for i, r := range replicas {
		if !r.sessions.crashes.allowStored(ctx, "se_a") {
			t.Fatalf("resume %d of se_a (replica %d) refused", i+1, i)
		}
	}
	if third.sessions.crashes.allowStored(ctx, "se_a") {
		t.Fatalf("resume %d of se_a allowed by a third replica; the budget is %d", crashResumes+1, crashResumes)
	}
	if !other.sessions.crashes.allowStored(ctx, "se_b") {
		t.Fatal("another session's first resume refused")
	}
	e.clk.Add(crashWindow + time.Second)
	if !third.sessions.crashes.allowStored(ctx, "se_a") {
		t.Fatal("a resume once the others left the window refused")
	}
	se := e.create(t, SessionRequest{})
	if !e.s.sessions.crashes.allowStored(ctx, se.ID) {
		t.Fatal("first resume refused")
	}
	if err := e.s.DeleteSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.GetDoc(ctx, crashDocPrefix+se.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a deleted session's crash count: %v; want it gone", err)
	}
}
