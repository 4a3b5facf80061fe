package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/store"
)

// A kept snapshot is a session's state (memory, processes and files) saved apart from the session's
// life: it stays until it is deleted, whatever becomes of the session, and new sessions start from it
// as many times as asked. E2B calls them snapshots (POST /sandboxes/{id}/snapshots); they are what an
// E2B user creates sandboxes from.
//
// One is a session of its own, recorded paused with the snapshot as its head and these metadata keys:
// it never runs (a resume or restore is refused), it only starts new sessions (CreateFromKept, or a
// fork). Being a session, it holds its snapshot by the rules that already keep a fork's source: the
// store refuses to forget a snapshot that a session not deleted resumes from, so neither its session's
// deletion nor retention takes it; deleting the kept snapshot lets them.
const (
	// KeptMetadataKey marks a kept snapshot (value KeptMetadataValue).
	KeptMetadataKey   = "airlock.kept"
	KeptMetadataValue = "snapshot"
	// KeptOfMetadataKey names the session it was taken from; KeptNameMetadataKey its name, if it has one.
	KeptOfMetadataKey   = "airlock.kept_of"
	KeptNameMetadataKey = "airlock.kept_name"
)

// IsKept reports whether se is a kept snapshot.
func IsKept(se store.Session) bool { return se.Metadata[KeptMetadataKey] == KeptMetadataValue }

// unkept is a copy of a kept snapshot's metadata without the keys that make it one.
func unkept(meta map[string]string) map[string]string {
	out := cloneMap(meta)
	delete(out, KeptMetadataKey)
	delete(out, KeptOfMetadataKey)
	delete(out, KeptNameMetadataKey)
	return out
}

// refuseKept is the error for running se, a kept snapshot.
func refuseKept(se store.Session) error {
	return fmt.Errorf("session %s is a kept snapshot (of session %s): it never runs; start a new session from it: %w",
		se.ID, se.Metadata[KeptOfMetadataKey], errdefs.ErrConflict)
}

// KeepSnapshot saves session id's current state as a kept snapshot, named name ("" for none; names
// need not be unique: the newest of a name is the one it finds), and returns it. A running session is
// snapshotted and runs on; a paused one's latest snapshot is kept. It counts as one of the tenant's
// sessions.
func (s *sessions) KeepSnapshot(ctx context.Context, tenantID, id, name string) (store.Session, error) {
	if name != "" && !metaKeyPattern.MatchString(name) {
		return store.Session{}, invalid("snapshot name %q must be 1-63 letters, digits or _.-/ and start with a letter or digit", name)
	}
	if _, err := s.book.snapshotStore(); err != nil {
		return store.Session{}, err
	}
	ctx = context.WithoutCancel(ctx)
	// The session's lock is held until the kept snapshot has its CA: a delete of the session meanwhile
	// would take the CA with it.
	unlock := s.lockSession(id)
	defer unlock()
	se, err := s.GetSession(ctx, tenantID, id)
	if err != nil {
		return store.Session{}, err
	}
	if IsKept(se) {
		return store.Session{}, fmt.Errorf("session %s is a kept snapshot already: %w", id, errdefs.ErrConflict)
	}
	// It never runs: only the sessions quota counts.
	if err := s.accounts.checkSessions(ctx, tenantID, 1, false); err != nil {
		return store.Session{}, fmt.Errorf("keep a snapshot of session %s: %w", id, err)
	}
	var snap store.Snapshot
	switch {
	case se.State == store.SessionRunning:
		if snap, err = s.snapshotRunningLocked(ctx, se, store.TriggerManual, ""); err != nil {
			return store.Session{}, err
		}
	case (se.State == store.SessionPaused || se.State == store.SessionFailed) && se.HeadSnapshotID != "":
		if err := s.keyring.checkKey(ctx, tenantID); err != nil {
			return store.Session{}, err
		}
		if snap, err = s.store.GetSnapshot(ctx, tenantID, se.HeadSnapshotID); err != nil {
			return store.Session{}, fmt.Errorf("keep a snapshot of session %s: %w", id, err)
		}
	default:
		return store.Session{}, fmt.Errorf("session %s is %s and has no snapshot to keep: %w", id, se.State, errdefs.ErrConflict)
	}
	meta := map[string]string{KeptMetadataKey: KeptMetadataValue, KeptOfMetadataKey: se.ID}
	if name != "" {
		meta[KeptNameMetadataKey] = name
	}
	// The runtime it ran on, which a restore needs.
	for _, k := range []string{RuntimeMetadataKey, RuntimeReasonMetadataKey, AbilitiesMetadataKey} {
		if v, ok := se.Metadata[k]; ok {
			meta[k] = v
		}
	}
	now := s.now()
	// Its lineage is the snapshot's session's: the session's own, or (a paused session that never
	// snapshotted) the one it was forked from.
	kept, err := s.store.CreateSession(ctx, store.Session{
		ID: store.NewID("se"), TenantID: tenantID, State: store.SessionPaused, Spec: se.Spec, Metadata: meta,
		TimeoutSeconds: se.TimeoutSeconds, OnTimeout: se.OnTimeout, Retention: se.Retention,
		HeadSnapshotID: snap.ID, ParentSessionID: snap.SessionID, ForkedFromSnapshotID: snap.ID, CreatedAt: now, PausedAt: &now,
		Reason: "kept snapshot of session " + se.ID,
	})
	if err != nil {
		return store.Session{}, fmt.Errorf("keep a snapshot of session %s: %w", id, err)
	}
	// The sandboxes restored from it trust the session's interception CA: the kept snapshot gets a copy,
	// kept by the control plane and by the nodes that have the session's, since the session may go first.
	if err := s.copyCA(ctx, tenantID, se.ID, kept.ID); err != nil {
		unlock := s.lockSession(kept.ID)
		_ = s.deleteLocked(ctx, kept)
		unlock()
		return store.Session{}, fmt.Errorf("keep a snapshot of session %s: interception CA: %w", id, err)
	}
	s.sessionChanged(kept)
	s.log.Info("snapshot kept", "session", se.ID, "snapshot", snap.ID, "kept", kept.ID)
	return kept, nil
}

// copyCA gives session to a copy of session from's interception CA, kept by the control plane and by
// every node that has from's.
func (s *sessions) copyCA(ctx context.Context, tenantID, from, to string) error {
	if err := s.keyring.copySessionCA(ctx, tenantID, from, to); err != nil {
		return err
	}
	nodes, err := s.placer.reachableNodes(ctx)
	if err != nil {
		s.log.Warn("copy an interception CA", "from", from, "to", to, "err", err)
	}
	for _, n := range nodes {
		if err := n.CopyCA(ctx, from, to, tenantID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Warn("copy an interception CA", "from", from, "to", to, "node", n.ID(), "err", err)
		}
	}
	return nil
}

// FromKeptRequest is how a session started from a kept snapshot differs from it. Its memory,
// processes, files and resources are the snapshot's.
type FromKeptRequest struct {
	Metadata               map[string]string
	TimeoutSeconds         int // 0: no end
	OnTimeout              store.SessionTimeoutAction
	AutoResume             bool
	IdleTimeoutSeconds     int
	RollingIntervalSeconds int
	// Network replaces the egress policy the snapshot's session had; nil keeps it.
	Network *policy.Policy
}

// CreateFromKept starts a new session from kept snapshot keptID, restored into a sandbox of its own.
// A session that recorded but could not start is returned failed with the error; the caller deletes it.
func (s *sessions) CreateFromKept(ctx context.Context, tenantID, keptID string, req FromKeptRequest) (store.Session, error) {
	if _, err := s.book.snapshotStore(); err != nil {
		return store.Session{}, err
	}
	sreq := SessionRequest{CreateRequest: CreateRequest{Metadata: req.Metadata, TimeoutSeconds: req.TimeoutSeconds, Network: req.Network},
		OnTimeout: req.OnTimeout, IdleTimeoutSeconds: req.IdleTimeoutSeconds, RollingIntervalSeconds: req.RollingIntervalSeconds}
	if err := sreq.normalize(); err != nil {
		return store.Session{}, err
	}
	if err := s.sandboxes.checkNetwork(req.Network); err != nil {
		return store.Session{}, err
	}
	ctx = context.WithoutCancel(ctx)
	// The kept snapshot's lock is held until the new session has its CA, so that a delete of the kept
	// snapshot meanwhile cannot take the CA first; the boot that follows needs nothing of it.
	unlock := s.lockSession(keptID)
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	kept, err := s.GetSession(ctx, tenantID, keptID)
	if err == nil && (!IsKept(kept) || kept.State == store.SessionDeleting || kept.State == store.SessionDeleted) {
		err = errdefs.ErrNotFound
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return store.Session{}, fmt.Errorf("snapshot %s not found: %w", keptID, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.Session{}, err
	}
	if err := s.accounts.checkSessions(ctx, tenantID, 1, true); err != nil {
		return store.Session{}, fmt.Errorf("create a session from snapshot %s: %w", keptID, err)
	}
	if err := s.placer.checkRuntimeAllowed(ctx, tenantID, kept.Spec.Template, kept.Spec.Runtime); err != nil {
		return store.Session{}, fmt.Errorf("create a session from snapshot %s: %w", keptID, err)
	}
	if err := s.keyring.checkKey(ctx, tenantID); err != nil {
		return store.Session{}, err
	}
	snap, err := s.store.GetSnapshot(ctx, tenantID, kept.HeadSnapshotID)
	if err != nil {
		return store.Session{}, fmt.Errorf("snapshot %s: %w", keptID, err)
	}
	if !snap.State.Usable() {
		return store.Session{}, fmt.Errorf("snapshot %s is %s: %w", keptID, snap.State, errdefs.ErrConflict)
	}
	spec := kept.Spec
	if req.Network != nil {
		raw, err := json.Marshal(*req.Network)
		if err != nil {
			return store.Session{}, fmt.Errorf("encode network policy: %w", err)
		}
		spec.NetworkPolicy = raw
	}
	meta := unkept(kept.Metadata)
	maps.Copy(meta, req.Metadata)
	src, _, err := s.book.imageSource(ctx, tenantID, snap.ID)
	if err != nil {
		return store.Session{}, fmt.Errorf("create a session from snapshot %s: %w", keptID, err)
	}
	defer src.Grant.Clear()
	se, err := s.store.CreateSession(ctx, store.Session{
		ID: store.NewID("se"), TenantID: tenantID, State: store.SessionResuming, Spec: spec, Metadata: meta,
		IdleTimeoutSeconds: sreq.IdleTimeoutSeconds, AutoResume: req.AutoResume, RollingIntervalSeconds: sreq.RollingIntervalSeconds,
		Retention: kept.Retention, TimeoutSeconds: sreq.TimeoutSeconds, OnTimeout: sreq.OnTimeout,
		HeadSnapshotID: snap.ID, ParentSessionID: snap.SessionID, ForkedFromSnapshotID: snap.ID, CreatedAt: s.now(),
	})
	if err != nil {
		return store.Session{}, fmt.Errorf("create a session from snapshot %s: %w", keptID, err)
	}
	s.sessionChanged(se)
	if err := s.copyCA(ctx, tenantID, kept.ID, se.ID); err != nil {
		se, _ = s.updateSession(ctx, se, func(se *store.Session) error {
			return setSessionState(se, store.SessionPaused, truncateReason("could not start: interception CA: "+err.Error()))
		})
		return se, fmt.Errorf("create a session from snapshot %s: interception CA: %w", keptID, err)
	}
	unlock()
	locked = false
	start := s.now()
	se, err = s.startFork(ctx, se, src, snap, "")
	if err != nil {
		return se, fmt.Errorf("create a session from snapshot %s: %w", keptID, err)
	}
	s.log.Info("session started from a kept snapshot", "session", se.ID, "kept", keptID, "snapshot", snap.ID, "took", s.now().Sub(start))
	return se, nil
}
