package controlplane

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// TestKeptSnapshot: a kept snapshot outlives the session it was taken from, never runs itself, and
// starts new sessions restored from it, with their own settings and its interception CA.
func TestKeptSnapshot(t *testing.T) {
	e := setupSessions(t)
	ctx := context.Background()
	src := e.create(t, SessionRequest{CreateRequest: CreateRequest{Metadata: map[string]string{"k": "v"}}})
	kept, err := e.s.KeepSnapshot(ctx, e.tenant, src.ID, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if !IsKept(kept) || kept.State != store.SessionPaused || kept.Metadata[KeptOfMetadataKey] != src.ID ||
		kept.Metadata[KeptNameMetadataKey] != "nightly" || kept.Metadata["k"] != "" {
		t.Fatalf("kept %+v", kept)
	}
	s, _ := e.s.GetSession(ctx, e.tenant, src.ID)
	if s.State != store.SessionRunning || s.SandboxID != src.SandboxID || kept.HeadSnapshotID != s.HeadSnapshotID {
		t.Fatalf("source after keep: %+v; want running on, its new snapshot kept (%s)", s, kept.HeadSnapshotID)
	}
	if !slices.Contains(e.n.cas, src.ID+"->"+kept.ID) {
		t.Errorf("CA copies %v; want one from the source to the kept snapshot", e.n.cas)
	}

	// It never runs, and is kept once.
	if _, err := e.s.ResumeSession(ctx, e.tenant, kept.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("resume a kept snapshot: %v; want conflict", err)
	}
	if _, err := e.s.RestoreSession(ctx, e.tenant, kept.ID, RestoreRequest{SnapshotID: kept.HeadSnapshotID}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("restore a kept snapshot: %v; want conflict", err)
	}
	if _, err := e.s.KeepSnapshot(ctx, e.tenant, kept.ID, ""); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("keep a kept snapshot: %v; want conflict", err)
	}
	for _, name := range []string{"-x", "a b", string(make([]byte, 64))} {
		if _, err := e.s.KeepSnapshot(ctx, e.tenant, src.ID, name); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("keep named %q: %v; want invalid argument", name, err)
		}
	}

	// A kept snapshot never runs: the running sandboxes quota does not stop one.
	if _, err := e.s.SetTenantQuotas(ctx, e.tenant, store.TenantQuotas{RunningSandboxes: 1}); err != nil {
		t.Fatal(err)
	}
	extra, err := e.s.KeepSnapshot(ctx, e.tenant, src.ID, "")
	if err != nil {
		t.Fatalf("keep at the running sandboxes quota: %v", err)
	}
	if _, err := e.s.SetTenantQuotas(ctx, e.tenant, store.TenantQuotas{}); err != nil {
		t.Fatal(err)
	}
	// The source snapshots on past what was kept; its own latest snapshot goes with it, the kept one stays.
	later, err := e.s.SnapshotSession(ctx, e.tenant, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)

	// The source goes; the snapshot stays.
	if err := e.s.DeleteSession(ctx, e.tenant, src.ID); err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	e.s.snapshotBook.collectSnapshots(0)
	if _, err := e.s.snapshotBook.snapshots.Manifest(ctx, e.tenant, kept.HeadSnapshotID); err != nil {
		t.Fatalf("the kept snapshot's data after its session was deleted: %v", err)
	}
	if _, err := e.s.snapshotBook.snapshots.Manifest(ctx, e.tenant, later.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the deleted source's own latest snapshot: %v; want its data gone", err)
	}
	if err := e.s.DeleteSession(ctx, e.tenant, extra.ID); err != nil {
		t.Fatal(err)
	}

	// New sessions start from it with their own settings.
	child, err := e.s.CreateFromKept(ctx, e.tenant, kept.ID, FromKeptRequest{Metadata: map[string]string{"a": "b"}, TimeoutSeconds: 60,
		OnTimeout: store.SessionTimeoutPause})
	if err != nil {
		t.Fatal(err)
	}
	if child.State != store.SessionRunning || IsKept(child) || child.Metadata["a"] != "b" || child.Metadata[KeptOfMetadataKey] != "" ||
		child.EndsAt == nil || child.OnTimeout != store.SessionTimeoutPause || child.ParentSessionID != src.ID {
		t.Fatalf("session from a kept snapshot: %+v", child)
	}
	if got := e.n.restored[child.SandboxID]; got != "image of "+src.SandboxID {
		t.Errorf("restored from %q; want the source's image", got)
	}
	if !e.n.newIdentity[child.SandboxID] {
		t.Error("a session from a kept snapshot was restored without an identity of its own")
	}
	if !slices.Contains(e.n.cas, kept.ID+"->"+child.ID) {
		t.Errorf("CA copies %v; want one from the kept snapshot to the new session", e.n.cas)
	}
	// A fork names a snapshot of its own session, never another's.
	other := e.create(t, SessionRequest{})
	otherSnap, err := e.s.SnapshotSession(ctx, e.tenant, other.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.ForkSession(ctx, e.tenant, child.ID, 1, otherSnap.ID); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("fork with another session's snapshot: %v; want invalid argument", err)
	}
	// A fork of it (/v1's way) is an ordinary session too.
	forks, err := e.s.ForkSession(ctx, e.tenant, kept.ID, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if IsKept(forks[0]) || forks[0].State != store.SessionRunning {
		t.Errorf("fork of a kept snapshot: %+v", forks[0])
	}
	// The new sessions pause and resume as any other.
	if _, err := e.s.PauseSession(ctx, e.tenant, child.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.ResumeSession(ctx, e.tenant, child.ID); err != nil {
		t.Fatal(err)
	}

	// Bad requests, and what is not a kept snapshot.
	if _, err := e.s.CreateFromKept(ctx, e.tenant, child.ID, FromKeptRequest{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("from a session that is not a kept snapshot: %v; want not found", err)
	}
	if _, err := e.s.CreateFromKept(ctx, "tn_other", kept.ID, FromKeptRequest{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("from another tenant's kept snapshot: %v; want not found", err)
	}
	if _, err := e.s.CreateFromKept(ctx, e.tenant, kept.ID, FromKeptRequest{Metadata: map[string]string{"airlock.kept": "snapshot"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("reserved metadata: %v; want invalid argument", err)
	}
	if _, err := e.s.CreateFromKept(ctx, e.tenant, kept.ID, FromKeptRequest{TimeoutSeconds: -1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("negative timeout: %v; want invalid argument", err)
	}

	// Deleted, it starts nothing; the sessions made from it go on.
	if err := e.s.DeleteSession(ctx, e.tenant, kept.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CreateFromKept(ctx, e.tenant, kept.ID, FromKeptRequest{}); err == nil {
		t.Error("a deleted kept snapshot started a session")
	}
	if _, err := e.s.PauseSession(ctx, e.tenant, forks[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.ResumeSession(ctx, e.tenant, forks[0].ID); err != nil {
		t.Fatalf("resume a fork of a deleted kept snapshot: %v", err)
	}
}
