package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/faultinject"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/retention"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/store"
)

// Sessions: long-lived work around sandboxes. A session runs in one sandbox at a time; pausing it
// checkpoints the sandbox (memory, processes, files) into a snapshot in the snapshot store and destroys
// the sandbox; resuming restores a new sandbox from the session's head snapshot; forking restores one
// snapshot into several new sessions. Every step is recorded in the Store before and after it runs, so a
// restart finds each session running or paused with a complete snapshot (see reconcileSessions).

// SessionMetadataKey marks a sandbox that runs a session: its value is the session's ID. Keys under
// "airlock." are reserved; users cannot set them.
const SessionMetadataKey = "airlock.session"

// Defaults and bounds of sessions.
const (
	// DefaultIdleTimeout is how long a session may go without exec, file or port activity before it is
	// paused, unless the request says otherwise.
	DefaultIdleTimeout = 10 * time.Minute
	MaxIdleTimeout     = 7 * 24 * time.Hour
	// MaxFork bounds the sessions one fork makes.
	MaxFork = 100
	// forkParallelism bounds the restores a fork runs at once (on 2 cores, 10 at once finished ten forks
	// sooner than 4 at once: 2.48 s against 2.70 s in BenchmarkSessionFork10).
	forkParallelism = 10
)

// SessionRequest asks for a new session. Zero fields take the defaults. TimeoutSeconds, unlike a
// sandbox's, is 0 (no bound: the session lives until deleted) unless given: then each run of the
// session (from its create or a resume) ends that long after it began, as OnTimeout says.
type SessionRequest struct {
	CreateRequest
	// OnTimeout is what a timeout does: delete the session ("" or SessionTimeoutDelete) or pause it.
	OnTimeout store.SessionTimeoutAction
	// IdleTimeoutSeconds pauses the session after that long without activity; 0 never does.
	IdleTimeoutSeconds int
	// AutoResume resumes the paused session when exec, file or port work arrives for it.
	AutoResume bool
	// RollingIntervalSeconds takes a rolling snapshot that often while the session runs and changes; 0
	// never; otherwise at least MinRollingInterval.
	RollingIntervalSeconds int
	// Retention overrides, field by field, the tenant's retention of the session's snapshots.
	Retention store.RetentionSpec
}

func (r *SessionRequest) normalize() error {
	timeout := r.TimeoutSeconds
	if err := checkTimeout(timeout, true); err != nil {
		return err
	}
	if !r.OnTimeout.Valid() {
		return invalid("on_timeout must be %q or %q, got %q", store.SessionTimeoutDelete, store.SessionTimeoutPause, r.OnTimeout)
	}
	if r.OnTimeout == "" {
		r.OnTimeout = store.SessionTimeoutDelete
	}
	if r.IdleTimeoutSeconds < 0 || time.Duration(r.IdleTimeoutSeconds)*time.Second > MaxIdleTimeout {
		return invalid("idle_timeout_seconds must be between 0 (never) and %d, got %d", int(MaxIdleTimeout/time.Second), r.IdleTimeoutSeconds)
	}
	if err := checkRolling(r.RollingIntervalSeconds); err != nil {
		return err
	}
	if err := checkRetention(r.Retention); err != nil {
		return err
	}
	if err := r.CreateRequest.normalize(); err != nil {
		return err
	}
	r.TimeoutSeconds = timeout // not the sandboxes' default: none
	return nil
}

// checkRolling checks a rolling interval in seconds.
func checkRolling(secs int) error {
	if secs != 0 && (secs < int(MinRollingInterval/time.Second) || secs > int(MaxRollingInterval/time.Second)) {
		return invalid("rolling_interval_seconds must be 0 (off) or between %d and %d, got %d",
			int(MinRollingInterval/time.Second), int(MaxRollingInterval/time.Second), secs)
	}
	return nil
}

// checkRetention checks a retention override on its own (zero fields inherit).
func checkRetention(r store.RetentionSpec) error {
	if err := r.Validate(); err != nil {
		return invalid("retention: %v", err)
	}
	for _, d := range []int64{r.KeepAllSeconds, r.KeepHourlySeconds, r.KeepDailySeconds} {
		if time.Duration(d)*time.Second > retention.MaxKeepDaily {
			return invalid("retention: at most %d seconds (%d days), got %d", int64(retention.MaxKeepDaily/time.Second),
				int(retention.MaxKeepDaily/(24*time.Hour)), d)
		}
	}
	return nil
}

// snapshotStore returns the snapshot store, or an error when this control plane has none.
func (s *snapshotBook) snapshotStore() (*snapshot.Store, error) {
	if s.snapshots == nil {
		return nil, fmt.Errorf("this control plane keeps no snapshots: %w", errdefs.ErrFailedPrecondition)
	}
	return s.snapshots, nil
}

// CreateSession records a new session and boots its first sandbox. It returns the session running, or
// failed with the reason when the boot failed (the error then says why too).
func (s *sessions) CreateSession(ctx context.Context, tenantID string, req SessionRequest) (store.Session, error) {
	if _, err := s.book.snapshotStore(); err != nil {
		return store.Session{}, err
	}
	if err := req.normalize(); err != nil {
		return store.Session{}, err
	}
	if err := s.sandboxes.checkNetwork(req.Network); err != nil {
		return store.Session{}, err
	}
	ref, err := s.placer.resolveTemplate(ctx, req.Template)
	if err != nil {
		return store.Session{}, err
	}
	req.Template = ref // what the session records, for every resume, fork and restore
	if err := s.checkTemplate(ctx, req.Template, req.MemoryMB); err != nil {
		return store.Session{}, err
	}
	if err := s.accounts.checkNewSessions(ctx, tenantID, 1); err != nil {
		return store.Session{}, fmt.Errorf("create session: %w", err)
	}
	if err := s.keyring.checkKey(ctx, tenantID); err != nil {
		return store.Session{}, err
	}
	var netJSON []byte
	if req.Network != nil {
		var err error
		if netJSON, err = json.Marshal(*req.Network); err != nil {
			return store.Session{}, fmt.Errorf("encode network policy: %w", err)
		}
	}
	rt, why, err := s.placer.chooseRuntime(ctx, tenantID, req.Template, req.Runtime, true)
	if err != nil {
		return store.Session{}, err
	}
	se, err := s.store.CreateSession(ctx, store.Session{
		ID:       store.NewID("se"),
		TenantID: tenantID,
		State:    store.SessionCreating,
		Spec: store.SessionSpec{Template: req.Template, CPUMillicores: req.CPUMillicores, MemoryMB: req.MemoryMB,
			DiskMB: req.DiskMB, NetworkPolicy: netJSON, Runtime: rt.Name},
		Metadata:               withRuntime(req.Metadata, rt, why),
		IdleTimeoutSeconds:     req.IdleTimeoutSeconds,
		AutoResume:             req.AutoResume,
		RollingIntervalSeconds: req.RollingIntervalSeconds,
		Retention:              req.Retention,
		TimeoutSeconds:         req.TimeoutSeconds,
		OnTimeout:              req.OnTimeout,
		CreatedAt:              s.now(),
	})
	if err != nil {
		return store.Session{}, fmt.Errorf("create session: %w", err)
	}
	s.sessionChanged(se)
	unlock := s.lockSession(se.ID)
	defer unlock()
	// The boot goes on if the caller goes away: the record exists and must end in a settled state.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	env := make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	sb, berr := s.startSessionSandbox(bctx, se, env, nil, "", "")
	if berr != nil {
		failed, err := s.updateSession(bctx, se, func(se *store.Session) error {
			return setSessionState(se, store.SessionFailed, "boot failed")
		})
		if err != nil {
			return store.Session{}, errors.Join(berr, err)
		}
		return failed, fmt.Errorf("create session %s: %w", se.ID, berr)
	}
	return s.updateSession(bctx, se, func(se *store.Session) error {
		se.SandboxID = sb.ID
		se.LastActivityAt = s.now()
		beginRun(se, s.now())
		return setSessionState(se, store.SessionRunning, "")
	})
}

// startSessionSandbox records a sandbox for se and boots it: anew with env (src nil), or restored from
// the snapshot src names, on node prefer if it has room (where the snapshot was taken: its image and
// interception CA are there). A snapshot not yet stored can be restored on its own node only. With caFrom, the sandbox gets the interception CA of session caFrom
// (a fork's parent), if its node has it. It returns the sandbox running; on failure the sandbox is
// recorded failed and nothing of it is left on the node.
func (s *sessions) startSessionSandbox(ctx context.Context, se store.Session, env []string, src *imageSource, prefer, caFrom string) (store.Sandbox, error) {
	p, err := SessionNetworkPolicy(se)
	if err != nil {
		return store.Sandbox{}, err
	}
	spec := store.SandboxSpec{CPUMillicores: se.Spec.CPUMillicores, MemoryMB: se.Spec.MemoryMB, DiskMB: se.Spec.DiskMB}
	rt := se.Spec.Runtime
	if rt == "" {
		rt = DefaultRuntime
	}
	pl, err := s.placer.place(ctx, spec, prefer, rt, imageOfRef(se.Spec.Template))
	if err != nil {
		return store.Sandbox{}, err
	}
	defer pl.done()
	nrt := s.placer.runtimeOf(ctx, pl.n.ID(), nodecontract.Runtime{Name: rt})
	n := pl.n
	if src != nil && !src.stored && n.ID() != prefer {
		return store.Sandbox{}, fmt.Errorf("snapshot %s is still being stored from node %s, which has no room now; retry once it is stored: %w",
			src.SnapshotID, prefer, errdefs.ErrUnavailable)
	}
	if caFrom != "" {
		// Kept by the control plane, where a node of its own gets it when the sandbox boots; the
		// in-process node keeps its own copy.
		if err := s.keyring.copySessionCA(ctx, se.TenantID, caFrom, se.ID); err != nil {
			return store.Sandbox{}, fmt.Errorf("session %s: interception CA: %w", se.ID, err)
		}
		if s.nodes.isLocal(n.ID()) {
			if err := n.CopyCA(ctx, caFrom, se.ID, se.TenantID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return store.Sandbox{}, fmt.Errorf("session %s: interception CA: %w", se.ID, err)
			}
		}
	}
	// The session's lease goes to the new sandbox (failover.go); its token fences off orders of an
	// earlier holder.
	req := nodecontract.CreateRequest{
		TenantID: se.TenantID,
		Template: se.Spec.Template,
		Runtime:  rt,
		Env:      env,
		Limits: nodecontract.Limits{CPUMillis: int64(se.Spec.CPUMillicores), MemoryBytes: int64(se.Spec.MemoryMB) << 20,
			DiskBytes: int64(se.Spec.DiskMB) << 20},
		Network: p,
		CAID:    se.ID,
	}
	if req.FlowKey, req.LogRetention, err = s.accounts.flowLog(ctx, se.TenantID); err != nil {
		return store.Sandbox{}, err
	}
	if src == nil {
		req.Start = s.placer.startFor(ctx, se.Spec.Template, rt, n.ID())
	} else {
		// Another session's snapshot (a fork's, a kept one's): its processes seeded themselves in that
		// session; this one gets an identity of its own. A session's own resume keeps the one it had.
		req.NewIdentity = src.session != se.ID
	}
	sbID := s.placer.newSandboxID(ctx, n, req)
	fence, err := s.takeSessionLease(ctx, se, sbID)
	if err != nil {
		return store.Sandbox{}, err
	}
	sb, err := s.store.CreateSandbox(ctx, store.Sandbox{
		ID:       sbID,
		TenantID: se.TenantID,
		NodeID:   n.ID(),
		Template: se.Spec.Template,
		State:    store.StateCreating,
		Spec:     spec,
		Metadata: withRuntime(map[string]string{SessionMetadataKey: se.ID, fenceMetadataKey: strconv.FormatInt(fence, 10)},
			nrt, "the session's runtime: "+orDefault(se.Metadata[RuntimeReasonMetadataKey], "the default runtime")),
		NetworkPolicy: se.Spec.NetworkPolicy,
		CreatedAt:     s.now(),
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("session %s: record sandbox: %w", se.ID, err)
	}
	s.placer.auditRuntime(se.TenantID, sb.ID, rt, sb.Metadata[RuntimeReasonMetadataKey])
	unlock := s.locks.Lock(sb.ID)
	defer unlock()
	req.ID, req.Fence = sb.ID, fence
	pl.done() // the record counts on the node now
	if src == nil {
		err = n.CreateSandbox(ctx, req)
	} else {
		err = n.RestoreSandbox(ctx, req, src.ImageSource)
	}
	if err == nil {
		// Taken over while it booted (its node was given up for gone): this sandbox must not run.
		if err = s.holdsSessionLease(ctx, se.ID, sb.ID, fence); err != nil {
			_ = n.DestroySandbox(ctx, sb.ID)
		}
	}
	if err != nil {
		s.log.Error("boot session sandbox", "session", se.ID, "sandbox", sb.ID, "err", err)
		if _, terr := s.sandboxes.transition(ctx, sb, store.StateFailed, "boot failed"); terr != nil {
			err = errors.Join(err, terr)
		}
		return store.Sandbox{}, err
	}
	started := s.now()
	return s.sandboxes.update(ctx, sb, func(sb *store.Sandbox) error {
		if err := store.CheckTransition(sb.State, store.StateRunning); err != nil {
			return err
		}
		sb.State, sb.StartedAt = store.StateRunning, &started
		return nil
	})
}

// setSessionState moves se to state to, with reason (kept when empty), checking the transition.
func setSessionState(se *store.Session, to store.SessionState, reason string) error {
	if se.State == to && transitional(to) {
		// Another operation (of another replica: updateSession applies f again to what it wrote)
		// began it first.
		return fmt.Errorf("session %s is %s already: %w", se.ID, to, errdefs.ErrConflict)
	}
	if err := store.CheckSessionTransition(se.State, to); err != nil {
		return err
	}
	se.State = to
	if reason != "" || to == store.SessionRunning {
		se.Reason = reason
	}
	switch to {
	case store.SessionPaused, store.SessionFailed, store.SessionDeleting, store.SessionDeleted:
		se.EndsAt = nil // a run's end; the next run (beginRun) has its own
	}
	return nil
}

// beginRun sets the end of se's run beginning at now: TimeoutSeconds ahead, or none.
func beginRun(se *store.Session, now time.Time) {
	se.EndsAt = nil
	if se.TimeoutSeconds > 0 {
		end := now.Add(time.Duration(se.TimeoutSeconds) * time.Second)
		se.EndsAt = &end
	}
}

// updateSession applies f to the stored session and saves it, re-reading and retrying when another
// writer changed it in between.
func (s *sessions) updateSession(ctx context.Context, se store.Session, f func(*store.Session) error) (store.Session, error) {
	for attempt := 0; ; attempt++ {
		next := se
		next.Metadata = cloneMap(se.Metadata)
		if err := f(&next); err != nil {
			return se, err
		}
		saved, err := s.store.UpdateSession(ctx, next)
		if err == nil {
			s.sessionChanged(saved)
			return saved, nil
		}
		if !errors.Is(err, errdefs.ErrConflict) || attempt >= 5 {
			return se, fmt.Errorf("update session %s: %w", se.ID, err)
		}
		fresh, gerr := s.store.GetSession(ctx, se.TenantID, se.ID)
		if gerr != nil {
			return se, fmt.Errorf("update session %s: %w", se.ID, gerr)
		}
		if fresh.Version == se.Version {
			return se, fmt.Errorf("update session %s: %w", se.ID, err) // an illegal transition, not a race
		}
		se = fresh
	}
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// GetSession returns the tenant's session.
func (s *sessions) GetSession(ctx context.Context, tenantID, id string) (store.Session, error) {
	se, err := s.store.GetSession(ctx, tenantID, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return se, fmt.Errorf("session %s not found: %w", id, errdefs.ErrNotFound)
	}
	return se, err
}

// ListSessions returns one page of the tenant's sessions.
func (s *sessions) ListSessions(ctx context.Context, tenantID string, f store.SessionFilter) ([]store.Session, string, error) {
	return s.store.ListSessions(ctx, tenantID, f)
}

// PauseSession snapshots the session's sandbox (memory, processes, files) and destroys it. Pausing a
// paused session returns it as it is.
func (s *sessions) PauseSession(ctx context.Context, tenantID, id string) (store.Session, error) {
	unlock := s.lockSession(id)
	defer unlock()
	se, err := s.GetSession(ctx, tenantID, id)
	if err != nil {
		return se, err
	}
	switch se.State {
	case store.SessionPaused:
		return se, nil
	case store.SessionRunning:
	default:
		return se, fmt.Errorf("session %s is %s; only a running session can be paused: %w", id, se.State, errdefs.ErrConflict)
	}
	return s.pauseLocked(context.WithoutCancel(ctx), se, "paused")
}

// pauseLocked pauses a running session. The caller holds its lock.
//
// Order, for crash safety: the session is recorded pausing and a snapshot writing; one node call
// saves the sandbox's image and destroys the sandbox; the snapshot is recorded uploading (the node stores
// it behind) and the session paused at it; then the sandbox's record is closed. A failure before the
// node took the sandbox lets it run on (the session is running again); once it took it, the session
// stays pausing until it is recorded paused at its snapshot — by this call, or by a restart or the
// replica that takes the operation over (reconcileSessionLocked), which finds the snapshot.
func (s *sessions) pauseLocked(ctx context.Context, se store.Session, reason string) (store.Session, error) {
	// Without the key the image could only be kept in the clear: refuse (the key check loop stops the
	// sandbox).
	if err := s.keyring.checkKey(ctx, se.TenantID); err != nil {
		return se, err
	}
	start := s.now()
	se, err := s.updateSession(ctx, se, func(se *store.Session) error { return setSessionState(se, store.SessionPausing, "") })
	if err != nil {
		return se, err
	}
	faultinject.Crash("pause-recorded")
	snap, taken, err := s.snapshotSandbox(ctx, se, store.TriggerPause, "", false)
	if err != nil && taken {
		// The sandbox is gone and its image with its node: the session stays pausing until a
		// reconciliation records it paused at the snapshot.
		s.log.Error("pause session: the sandbox was saved and destroyed, its record not written", "session", se.ID, "err", err)
		return se, fmt.Errorf("pause session %s: %w", se.ID, err)
	}
	if err != nil {
		s.log.Error("pause session", "session", se.ID, "err", err)
		back, uerr := s.updateSession(ctx, se, func(se *store.Session) error {
			return setSessionState(se, store.SessionRunning, "")
		})
		if uerr != nil {
			err = errors.Join(err, uerr)
		}
		return back, fmt.Errorf("pause session %s: %w", se.ID, err)
	}
	now := s.now()
	sbID := se.SandboxID
	se, err = s.updateSession(ctx, se, func(se *store.Session) error {
		se.HeadSnapshotID, se.SandboxID, se.PausedAt = snap.ID, "", &now
		return setSessionState(se, store.SessionPaused, reason)
	})
	if err != nil {
		return se, fmt.Errorf("pause session %s: %w", se.ID, err)
	}
	faultinject.Crash("pause-session-paused")
	// The node destroyed the sandbox: its record is closed without another call to the node.
	s.endSessionSandbox(ctx, se.TenantID, sbID, "session paused", false)
	s.log.Info("session paused", "session", se.ID, "snapshot", snap.ID, "took", s.now().Sub(start), "image_bytes", snap.LogicalBytes)
	return se, nil
}

// endSessionSandbox destroys a session's sandbox that the session no longer uses (onNode), or records
// stopped one its node destroyed already (a pause's Snapshot did).
func (s *sessions) endSessionSandbox(ctx context.Context, tenantID, sbID, reason string, onNode bool) {
	if sbID == "" {
		return
	}
	unlock := s.locks.Lock(sbID)
	defer unlock()
	sb, err := s.store.GetSandbox(ctx, tenantID, sbID)
	if err != nil {
		s.log.Warn("session sandbox record", "sandbox", sbID, "err", err)
		return
	}
	if _, err := s.sandboxes.endLocked(ctx, sb, reason, onNode); err != nil {
		s.log.Error("destroy session sandbox", "sandbox", sbID, "err", err)
	}
}

// snapshotSandbox saves the session's sandbox as a new snapshot of trigger and name, in one call to its
// node. The snapshot is recorded writing first, then uploading once its image is saved on the node
// (sessions can resume and fork from it from then on); the node stores it into the snapshot store in the
// background and reports it complete (uploads.go). With leaveRunning the sandbox runs on; without (a
// pause) the node destroys it once its image is saved — unless the snapshot fails, in which case it
// runs on. taken reports whether the node took the sandbox: then, even with an error (its record could
// not be written), the sandbox of a pause is gone and the snapshot is the node's to report.
func (s *sessions) snapshotSandbox(ctx context.Context, se store.Session, trigger store.SnapshotTrigger, name string, leaveRunning bool) (snap store.Snapshot, taken bool, err error) {
	if _, err := s.book.snapshotStore(); err != nil {
		return store.Snapshot{}, false, err
	}
	if se.SandboxID == "" {
		return store.Snapshot{}, false, fmt.Errorf("session %s has no sandbox: %w", se.ID, errdefs.ErrFailedPrecondition)
	}
	sb, err := s.store.GetSandbox(ctx, se.TenantID, se.SandboxID)
	if err != nil {
		return store.Snapshot{}, false, fmt.Errorf("session %s: %w", se.ID, err)
	}
	n, err := s.placer.sandboxNode(ctx, sb)
	if err != nil {
		return store.Snapshot{}, false, fmt.Errorf("session %s: %w", se.ID, err)
	}
	snap, err = s.store.CreateSnapshot(ctx, store.Snapshot{
		ID: store.NewID("sn"), TenantID: se.TenantID, SessionID: se.ID, ParentID: se.HeadSnapshotID,
		Name: name, Pinned: name != "", Trigger: trigger, State: store.SnapshotWriting, CreatedAt: s.now(),
		Meta: map[string]string{"template": se.Spec.Template, snapshotNodeMeta: n.ID(), snapshotReplicaMeta: s.replica},
	})
	if err != nil {
		return store.Snapshot{}, false, fmt.Errorf("record snapshot: %w", err)
	}
	fail := func(cause error) (store.Snapshot, bool, error) {
		if _, err := s.book.updateSnapshot(ctx, snap, func(sn *store.Snapshot) error {
			sn.State, sn.Reason = store.SnapshotFailed, truncateReason(cause.Error())
			return nil
		}); err != nil {
			cause = errors.Join(cause, err)
		}
		return store.Snapshot{}, false, cause
	}
	t0 := s.now()
	// A rolling snapshot waits for work in progress, through any replica (the node sees all of it).
	ifIdle := trigger == store.TriggerRolling
	then := nodecontract.ThenRun
	if !leaveRunning {
		then = nodecontract.ThenDestroy
	}
	img, err := n.Snapshot(ctx, se.SandboxID, nodecontract.SnapshotRequest{TenantID: se.TenantID, SnapshotID: snap.ID, Then: then, IfIdle: ifIdle,
		Meta: map[string]string{"session": se.ID, "template": se.Spec.Template}})
	if ifIdle && errors.Is(err, errdefs.ErrConflict) {
		// Nothing was taken: the record goes, and the loop tries again next round.
		if derr := s.store.DeleteSnapshot(ctx, se.TenantID, snap.ID); derr != nil {
			return fail(fmt.Errorf("checkpoint: %w", err))
		}
		return store.Snapshot{}, false, fmt.Errorf("%w: %v", errSandboxBusy, err)
	}
	if err != nil {
		// What the sandbox did that cannot be saved comes as failed precondition (the driver's to tell).
		return fail(fmt.Errorf("checkpoint: %w", err))
	}
	tCheckpoint := s.now().Sub(t0)
	faultinject.Crash("snapshot-checkpointed")
	snap, err = s.book.updateSnapshot(ctx, snap, func(sn *store.Snapshot) error {
		// The node has put it on record (SnapshotSaved), and its report may have completed it already
		// (a small image stores fast).
		switch sn.State {
		case store.SnapshotComplete:
			return nil
		case store.SnapshotWriting:
			sn.State = store.SnapshotUploading
			recordImage(sn, img)
		}
		sn.Meta["checkpoint_ms"] = fmt.Sprint(tCheckpoint.Milliseconds())
		return nil
	})
	if err != nil {
		// The node has the image and reports it: the record is completed then (or, deleted, its data goes).
		return store.Snapshot{}, true, fmt.Errorf("record snapshot %s: %w", snap.ID, err)
	}
	faultinject.Crash("snapshot-saved")
	s.log.Info("snapshot saved", "session", se.ID, "snapshot", snap.ID, "node", n.ID(), "trigger", trigger, "checkpoint", tCheckpoint,
		"image_bytes", snap.LogicalBytes)
	return snap, true, nil
}

// updateSnapshot applies f to the stored snapshot and saves it, retrying on a concurrent change.
func (s *snapshotBook) updateSnapshot(ctx context.Context, sn store.Snapshot, f func(*store.Snapshot) error) (store.Snapshot, error) {
	for attempt := 0; ; attempt++ {
		next := sn
		next.Meta = cloneMap(sn.Meta)
		if err := f(&next); err != nil {
			return sn, err
		}
		if reflect.DeepEqual(next, sn) {
			return sn, nil // nothing to change
		}
		saved, err := s.store.UpdateSnapshot(ctx, next)
		if err == nil {
			return saved, nil
		}
		if !errors.Is(err, errdefs.ErrConflict) || attempt >= 5 {
			return sn, fmt.Errorf("update snapshot %s: %w", sn.ID, err)
		}
		fresh, gerr := s.store.GetSnapshot(ctx, sn.TenantID, sn.ID)
		if gerr != nil {
			return sn, fmt.Errorf("update snapshot %s: %w", sn.ID, gerr)
		}
		if fresh.Version == sn.Version {
			return sn, fmt.Errorf("update snapshot %s: %w", sn.ID, err)
		}
		sn = fresh
	}
}

func truncateReason(s string) string {
	if len(s) > 500 {
		return s[:500] + "…"
	}
	return s
}

// ResumeSession restores a paused (or failed) session's head snapshot into a new sandbox. Resuming a
// running session returns it as it is.
func (s *sessions) ResumeSession(ctx context.Context, tenantID, id string) (store.Session, error) {
	unlock := s.lockSession(id)
	defer unlock()
	se, err := s.GetSession(ctx, tenantID, id)
	if err != nil {
		return se, err
	}
	if se.State == store.SessionRunning {
		return se, nil
	}
	if IsKept(se) {
		return se, refuseKept(se)
	}
	return s.resumeLocked(context.WithoutCancel(ctx), se)
}

// resumeLocked resumes se from its head snapshot. The caller holds its lock.
func (s *sessions) resumeLocked(ctx context.Context, se store.Session) (store.Session, error) {
	if _, err := s.book.snapshotStore(); err != nil {
		return se, err
	}
	if (se.State != store.SessionPaused && se.State != store.SessionFailed) || se.HeadSnapshotID == "" {
		return se, fmt.Errorf("session %s is %s with no snapshot to resume from: %w", se.ID, se.State, errdefs.ErrConflict)
	}
	if IsKept(se) {
		return se, refuseKept(se)
	}
	if err := s.keyring.checkKey(ctx, se.TenantID); err != nil {
		return se, err
	}
	start := s.now()
	before := se.State
	se, err := s.updateSession(ctx, se, func(se *store.Session) error { return setSessionState(se, store.SessionResuming, "") })
	if err != nil {
		return se, err
	}
	var sb store.Sandbox
	src, sn, err := s.book.imageSource(ctx, se.TenantID, se.HeadSnapshotID)
	granted := s.now()
	faultinject.Crash("resume-fetched")
	if err == nil {
		sb, err = s.startSessionSandbox(ctx, se, nil, src, sn.Meta[snapshotNodeMeta], "")
		src.Grant.Clear()
		faultinject.Crash("resume-booted")
	}
	if err != nil {
		back := store.SessionPaused
		if before == store.SessionFailed {
			back = store.SessionFailed
		}
		msg := fmt.Sprintf("resume from snapshot %s failed: %v", se.HeadSnapshotID, err)
		se, uerr := s.updateSession(ctx, se, func(se *store.Session) error { return setSessionState(se, back, truncateReason(msg)) })
		if uerr != nil {
			err = errors.Join(err, uerr)
		}
		if errors.Is(err, snapshot.ErrCorrupt) {
			// Damaged data is not the caller's fault, but it must see which snapshot and chunk.
			return se, fmt.Errorf("resume session %s: %v: %w", se.ID, err, errdefs.ErrFailedPrecondition)
		}
		return se, fmt.Errorf("resume session %s: %w", se.ID, err)
	}
	se, err = s.updateSession(ctx, se, func(se *store.Session) error {
		if se.State != store.SessionResuming {
			return fmt.Errorf("session %s is %s, no longer resuming: %w", se.ID, se.State, errdefs.ErrConflict)
		}
		se.SandboxID = sb.ID
		se.LastActivityAt = s.now()
		beginRun(se, s.now())
		return setSessionState(se, store.SessionRunning, "")
	})
	if err != nil {
		// Settled meanwhile by another (a replica that took the operation over): this sandbox must not run.
		s.endSessionSandbox(ctx, se.TenantID, sb.ID, "its session's resume was taken over", true)
	}
	if err == nil {
		s.log.Info("session resumed", "session", se.ID, "snapshot", se.HeadSnapshotID, "sandbox", sb.ID, "took", s.now().Sub(start),
			"grant", granted.Sub(start), "boot", s.now().Sub(granted))
	}
	return se, err
}

// imageSource is a snapshot to restore, with the grant that opens it (the caller clears it), whether
// the snapshot store holds it (if not, only its node has its image) and the session that took it.
type imageSource struct {
	nodecontract.ImageSource
	stored  bool
	session string
}

// imageSource returns what a node needs to restore tenantID's snapshot snapID, and the snapshot. Making
// the grant unwraps the tenant's key: a revoked key stops every restore of a stored snapshot here, even
// of an image a node keeps (callers check the key first for the others).
func (s *snapshotBook) imageSource(ctx context.Context, tenantID, snapID string) (*imageSource, store.Snapshot, error) {
	sn, err := s.store.GetSnapshot(ctx, tenantID, snapID)
	if err != nil {
		return nil, sn, err
	}
	if !sn.State.Usable() {
		return nil, sn, fmt.Errorf("snapshot %s is %s: %w", snapID, sn.State, errdefs.ErrConflict)
	}
	g, err := s.snapshots.Grant(ctx, tenantID, false)
	switch {
	case err == nil:
	case sn.State != store.SnapshotComplete && !errors.Is(err, errdefs.ErrPermissionDenied) && !errors.Is(err, errdefs.ErrKeyUnavailable):
		// Not stored yet (the tenant may have no data key yet, or the blob store is out of reach): its
		// node restores it from the image it keeps, which needs no grant. The caller checked the key.
		g = nil
	default:
		return nil, sn, fmt.Errorf("snapshot %s: %w", snapID, err)
	}
	return &imageSource{ImageSource: nodecontract.ImageSource{SnapshotID: snapID, Grant: g}, stored: sn.State == store.SnapshotComplete, session: sn.SessionID}, sn, nil
}

// SnapshotSession checkpoints the running session into a new snapshot, named (or not), while it keeps
// running; the snapshot becomes the session's head.
func (s *sessions) SnapshotSession(ctx context.Context, tenantID, id, name string) (store.Snapshot, error) {
	if name != "" && !metaKeyPattern.MatchString(name) {
		return store.Snapshot{}, invalid("snapshot name %q must be 1-63 letters, digits or _.-/ and start with a letter or digit", name)
	}
	unlock := s.lockSession(id)
	defer unlock()
	se, err := s.GetSession(ctx, tenantID, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	if se.State != store.SessionRunning {
		return store.Snapshot{}, fmt.Errorf("session %s is %s; only a running session can be snapshotted (a paused one's latest snapshot is %q): %w",
			id, se.State, se.HeadSnapshotID, errdefs.ErrConflict)
	}
	return s.snapshotRunningLocked(context.WithoutCancel(ctx), se, store.TriggerManual, name)
}

func (s *sessions) snapshotRunningLocked(ctx context.Context, se store.Session, trigger store.SnapshotTrigger, name string) (store.Snapshot, error) {
	if err := s.keyring.checkKey(ctx, se.TenantID); err != nil {
		return store.Snapshot{}, err
	}
	if err := s.accounts.checkSnapshotQuota(ctx, se.TenantID); err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot session %s: %w", se.ID, err)
	}
	snap, _, err := s.snapshotSandbox(ctx, se, trigger, name, true)
	if err != nil {
		return snap, fmt.Errorf("snapshot session %s: %w", se.ID, err)
	}
	s.noteSnapshot(se)
	if _, err := s.updateSession(ctx, se, func(se *store.Session) error {
		se.HeadSnapshotID = snap.ID
		return nil
	}); err != nil {
		return snap, err
	}
	return snap, nil
}

// ListSnapshots returns one page of a session's snapshots.
func (s *snapshotBook) ListSnapshots(ctx context.Context, tenantID, sessionID string, f store.SnapshotFilter) ([]store.Snapshot, string, error) {
	if _, err := s.sessions.GetSession(ctx, tenantID, sessionID); err != nil {
		return nil, "", err
	}
	f.SessionID = sessionID
	return s.store.ListSnapshots(ctx, tenantID, f)
}

// GetSnapshot returns one snapshot of the session.
func (s *snapshotBook) GetSnapshot(ctx context.Context, tenantID, sessionID, id string) (store.Snapshot, error) {
	if _, err := s.sessions.GetSession(ctx, tenantID, sessionID); err != nil {
		return store.Snapshot{}, err
	}
	sn, err := s.store.GetSnapshot(ctx, tenantID, id)
	if err == nil && sn.SessionID != sessionID {
		err = errdefs.ErrNotFound
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return store.Snapshot{}, fmt.Errorf("snapshot %s of session %s not found: %w", id, sessionID, errdefs.ErrNotFound)
	}
	return sn, err
}

// ForkSession makes count new sessions from one snapshot of the session: fromSnapshot, or, when empty,
// its current state (a new snapshot of a running session, or a paused one's head). Each fork runs in its
// own sandbox and diverges independently. Forks that could not be started are returned paused, with the
// reason.
func (s *sessions) ForkSession(ctx context.Context, tenantID, id string, count int, fromSnapshot string) ([]store.Session, error) {
	if _, err := s.book.snapshotStore(); err != nil {
		return nil, err
	}
	if count < 1 || count > MaxFork {
		return nil, invalid("count must be between 1 and %d, got %d", MaxFork, count)
	}
	ctx = context.WithoutCancel(ctx)
	unlock := s.lockSession(id)
	parent, err := s.GetSession(ctx, tenantID, id)
	if err != nil {
		unlock()
		return nil, err
	}
	if err := s.accounts.checkNewSessions(ctx, tenantID, count); err != nil {
		unlock()
		return nil, fmt.Errorf("fork session %s: %w", id, err)
	}
	if err := s.placer.checkRuntimeAllowed(ctx, tenantID, parent.Spec.Template, parent.Spec.Runtime); err != nil {
		unlock()
		return nil, fmt.Errorf("fork session %s: %w", id, err)
	}
	if err := s.keyring.checkKey(ctx, tenantID); err != nil {
		unlock()
		return nil, err
	}
	snapID := fromSnapshot
	if snapID == "" {
		switch {
		case parent.State == store.SessionRunning:
			snap, err := s.snapshotRunningLocked(ctx, parent, store.TriggerFork, "")
			if err != nil {
				unlock()
				return nil, err
			}
			snapID = snap.ID
		case parent.HeadSnapshotID != "":
			snapID = parent.HeadSnapshotID
		default:
			unlock()
			return nil, fmt.Errorf("session %s is %s and has no snapshot to fork: %w", id, parent.State, errdefs.ErrConflict)
		}
	}
	unlock()
	snap, err := s.store.GetSnapshot(ctx, tenantID, snapID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("snapshot %s not found: %w", snapID, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if !snap.State.Usable() {
		return nil, fmt.Errorf("snapshot %s is %s: %w", snapID, snap.State, errdefs.ErrConflict)
	}
	if snap.SessionID != parent.ID && snapID != parent.HeadSnapshotID && snapID != parent.ForkedFromSnapshotID {
		return nil, fmt.Errorf("snapshot %s is not one of session %s's: %w", snapID, parent.ID, errdefs.ErrInvalidArgument)
	}
	// The sandboxes restored from the snapshot trust the CA of the session that took it; a kept
	// snapshot has a copy of its own, which outlives that session.
	caFrom := snap.SessionID
	if IsKept(parent) {
		caFrom = parent.ID
	}
	start := s.now()
	src, _, err := s.book.imageSource(ctx, tenantID, snapID)
	if err != nil {
		return nil, fmt.Errorf("fork session %s: %w", id, err)
	}
	defer src.Grant.Clear()
	forks := make([]store.Session, 0, count)
	for range count {
		child, err := s.store.CreateSession(ctx, store.Session{
			ID: store.NewID("se"), TenantID: tenantID, State: store.SessionResuming, Spec: parent.Spec,
			Metadata: unkept(parent.Metadata), IdleTimeoutSeconds: parent.IdleTimeoutSeconds, AutoResume: parent.AutoResume,
			RollingIntervalSeconds: parent.RollingIntervalSeconds, Retention: parent.Retention,
			TimeoutSeconds: parent.TimeoutSeconds, OnTimeout: parent.OnTimeout,
			HeadSnapshotID: snapID, ParentSessionID: snap.SessionID, ForkedFromSnapshotID: snapID, CreatedAt: s.now(),
		})
		if err != nil {
			return forks, fmt.Errorf("fork session %s: %w", id, err)
		}
		s.sessionChanged(child)
		forks = append(forks, child)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, forkParallelism)
	for i := range forks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			forks[i], _ = s.startFork(ctx, forks[i], src, snap, caFrom)
		}()
	}
	wg.Wait()
	s.log.Info("session forked", "session", id, "snapshot", snapID, "count", count, "took", s.now().Sub(start))
	return forks, nil
}

// startFork boots child, a session recorded resuming, from snapshot snap (src opens it), with the
// interception CA of session caFrom, and returns it running, or paused with the reason and the error.
func (s *sessions) startFork(ctx context.Context, child store.Session, src *imageSource, snap store.Snapshot, caFrom string) (store.Session, error) {
	unlock := s.lockSession(child.ID)
	defer unlock()
	sb, err := s.startSessionSandbox(ctx, child, nil, src, snap.Meta[snapshotNodeMeta], caFrom)
	if err != nil {
		child, _ = s.updateSession(ctx, child, func(se *store.Session) error {
			return setSessionState(se, store.SessionPaused, truncateReason("fork could not start: "+err.Error()))
		})
		return child, err
	}
	child, uerr := s.updateSession(ctx, child, func(se *store.Session) error {
		se.SandboxID = sb.ID
		se.LastActivityAt = s.now()
		beginRun(se, s.now())
		return setSessionState(se, store.SessionRunning, "")
	})
	return child, uerr
}

// DeleteSession destroys the session's sandbox and the snapshots only it needs, and records it
// deleted. Deleting a deleted session succeeds.
func (s *sessions) DeleteSession(ctx context.Context, tenantID, id string) error {
	ctx = context.WithoutCancel(ctx)
	unlock := s.lockSession(id)
	defer unlock()
	se, err := s.GetSession(ctx, tenantID, id)
	if err != nil {
		return err
	}
	return s.deleteLocked(ctx, se)
}

func (s *sessions) deleteLocked(ctx context.Context, se store.Session) error {
	if se.State == store.SessionDeleted {
		return nil
	}
	se, err := s.updateSession(ctx, se, func(se *store.Session) error { return setSessionState(se, store.SessionDeleting, "") })
	if err != nil {
		return err
	}
	s.endSessionSandbox(ctx, se.TenantID, se.SandboxID, "session deleted", true)
	// Its snapshots go, except one a fork still resumes from (the store refuses to drop its record) and
	// its head, whose record goes with the session's (collectSnapshots finishes what is left).
	if s.snapshots != nil {
		ids, err := s.book.snapshotIDs(ctx, se)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if id == se.HeadSnapshotID {
				continue
			}
			if err := s.store.DeleteSnapshot(ctx, se.TenantID, id); err != nil {
				if errors.Is(err, errdefs.ErrConflict) {
					continue // a fork resumes from it
				}
				return err
			}
			s.book.dropImages(id)
			if err := s.snapshots.Delete(ctx, se.TenantID, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				s.log.Warn("delete snapshot data", "snapshot", id, "err", err)
			}
		}
	}
	// Its head's data goes with it only if the head is its own: a fork that never snapshotted has its
	// source as head, which is another session's.
	head := se.HeadSnapshotID
	if head != "" {
		if sn, err := s.store.GetSnapshot(ctx, se.TenantID, head); err != nil || sn.SessionID != se.ID {
			head = ""
		}
	}
	se, err = s.updateSession(ctx, se, func(se *store.Session) error {
		se.SandboxID = ""
		return setSessionState(se, store.SessionDeleted, "deleted")
	})
	if err != nil {
		return err
	}
	s.forgetCA(ctx, se.TenantID, se.ID)
	s.crashes.forget(ctx, se.ID)
	// Drop the record (and its remaining snapshots' records) unless a fork or a kept snapshot still
	// resumes from one; then the head goes on its own, unless it is that one.
	dropped := s.store.DeleteSession(ctx, se.TenantID, se.ID) == nil
	if !dropped && head != "" {
		dropped = s.store.DeleteSnapshot(ctx, se.TenantID, head) == nil
	}
	if dropped && head != "" && s.snapshots != nil {
		s.book.dropImages(head)
		if err := s.snapshots.Delete(ctx, se.TenantID, head); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Warn("delete snapshot data", "snapshot", head, "err", err)
		}
	}
	return nil
}

// SessionSandbox returns the sandbox that runs the session, for exec, file and port work: it records the
// activity and, if the session is paused and resumes automatically, resumes it first.
func (s *sessions) SessionSandbox(ctx context.Context, tenantID, id string) (string, error) {
	sbID, _, err := s.sessionSandbox(ctx, tenantID, id, true)
	return sbID, err
}

// sessionSandbox is SessionSandbox; it also reports whether it resumed the session, and touches the
// session only if touch is set.
func (s *sessions) sessionSandbox(ctx context.Context, tenantID, id string, touch bool) (sbID string, resumed bool, err error) {
	se, err := s.GetSession(ctx, tenantID, id)
	if err != nil {
		return "", false, err
	}
	if se.State != store.SessionRunning {
		unlock := s.lockSession(id)
		defer unlock()
		if se, err = s.GetSession(ctx, tenantID, id); err != nil {
			return "", false, err
		}
		switch {
		case se.State == store.SessionRunning:
		case (se.State == store.SessionPaused || se.State == store.SessionFailed) && se.AutoResume && se.HeadSnapshotID != "":
			if se, err = s.resumeLocked(context.WithoutCancel(ctx), se); err != nil {
				return "", false, err
			}
			resumed = true
		default:
			return "", false, fmt.Errorf("session %s is %s; resume it first: %w", id, se.State, errdefs.ErrConflict)
		}
	}
	if touch {
		if err := s.store.TouchSession(ctx, tenantID, id, s.now()); err != nil {
			s.log.Warn("touch session", "session", id, "err", err)
		}
	}
	return se.SandboxID, resumed, nil
}

// pauseIdleSessions pauses the running sessions whose idle timeout passed.
func (s *sessions) pauseIdleSessions() { s.sweep("idle", s.store.ListIdleSessions, s.pauseIfIdle) }

// endSessions ends the running sessions whose run's timeout passed: each is paused or deleted, as its
// OnTimeout says.
func (s *sessions) endSessions() { s.sweep("timed-out", s.store.ListEndedSessions, s.endIfTimedOut) }

// sweep hands each session list reports due now (50 at a time) to handle.
func (s *sessions) sweep(what string, list func(context.Context, time.Time, int) ([]store.Session, error), handle func(ctx context.Context, tenantID, id string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ses, err := list(ctx, s.now(), 50)
	if err != nil {
		s.log.Error("list "+what+" sessions", "err", err)
		return
	}
	for _, se := range ses {
		handle(ctx, se.TenantID, se.ID)
	}
}

func (s *sessions) pauseIfIdle(ctx context.Context, tenantID, id string) {
	unlock := s.lockSession(id)
	defer unlock()
	se, err := s.store.GetSession(ctx, tenantID, id)
	if err != nil || se.State != store.SessionRunning || se.IdleTimeoutSeconds <= 0 ||
		se.LastActivityAt.Add(time.Duration(se.IdleTimeoutSeconds)*time.Second).After(s.now()) || s.sandboxes.busy(se.SandboxID) ||
		s.sandboxes.portBusy(se.SandboxID) {
		return // resumed, touched or changed meanwhile, or a call or stream runs on it
	}
	if _, err := s.pauseLocked(ctx, se, "idle"); err != nil {
		s.log.Error("auto-pause idle session", "session", id, "err", err)
		// Try again after another idle period, not at every tick (a sandbox that cannot be saved would
		// be frozen, checkpointed and thawed over and over).
		if terr := s.store.TouchSession(ctx, tenantID, id, s.now()); terr != nil {
			s.log.Warn("touch session", "session", id, "err", terr)
		}
	}
}

// SetSessionTimeout bounds the session's runs to secs seconds from now on (0: no bound): a running
// session ends secs from now (with extendOnly, only if that is later than its end, if it has one); a
// paused one's next run has the bound.
func (s *sessions) SetSessionTimeout(ctx context.Context, tenantID, id string, secs int, extendOnly bool) (store.Session, error) {
	if err := checkTimeout(secs, true); err != nil {
		return store.Session{}, err
	}
	unlock := s.lockSession(id)
	defer unlock()
	se, err := s.GetSession(ctx, tenantID, id)
	if err != nil {
		return se, err
	}
	switch se.State {
	case store.SessionDeleting, store.SessionDeleted:
		return se, fmt.Errorf("session %s is %s: %w", id, se.State, errdefs.ErrConflict)
	}
	return s.updateSession(ctx, se, func(se *store.Session) error {
		old := se.EndsAt
		se.TimeoutSeconds = secs
		if se.State != store.SessionRunning {
			return nil
		}
		beginRun(se, s.now())
		if extendOnly && old != nil && (se.EndsAt == nil || old.After(*se.EndsAt)) {
			se.EndsAt = old
		}
		return nil
	})
}

func (s *sessions) endIfTimedOut(ctx context.Context, tenantID, id string) {
	unlock := s.lockSession(id)
	defer unlock()
	se, err := s.store.GetSession(ctx, tenantID, id)
	if err != nil || se.State != store.SessionRunning || se.EndsAt == nil || se.EndsAt.After(s.now()) {
		return // paused, deleted or given more time meanwhile
	}
	s.log.Info("session timed out", "session", id, "action", se.OnTimeout)
	if se.OnTimeout == store.SessionTimeoutPause {
		_, err = s.pauseLocked(ctx, se, "timeout")
	} else {
		err = s.deleteLocked(ctx, se)
	}
	if err == nil {
		return
	}
	s.log.Error("end timed-out session", "session", id, "action", se.OnTimeout, "err", err)
	// Try again in a minute, not at every tick (a sandbox that cannot be saved would be frozen,
	// checkpointed and thawed over and over).
	_, _ = s.updateSession(ctx, se, func(se *store.Session) error {
		if se.State == store.SessionRunning && se.EndsAt != nil {
			retry := s.now().Add(time.Minute)
			se.EndsAt = &retry
		}
		return nil
	})
}

// sessionSandboxExited records that a session's sandbox stopped by itself: the session fails, and can
// be resumed from its last snapshot if it has one.
func (s *sessions) sessionSandboxExited(tenantID, sessionID, sbID, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	unlock := s.lockSession(sessionID)
	defer unlock()
	se, err := s.store.GetSession(ctx, tenantID, sessionID)
	if err != nil || se.SandboxID != sbID || se.State != store.SessionRunning {
		return
	}
	if _, err := s.updateSession(ctx, se, func(se *store.Session) error {
		se.SandboxID = ""
		return setSessionState(se, store.SessionFailed, "sandbox failed: "+reason)
	}); err != nil {
		s.log.Error("mark session failed", "session", sessionID, "err", err)
		return
	}
	// Not the session's doing (its node went away, or its runtime or daemon died or was killed): it goes
	// on from its latest snapshot. One out of memory fails: it would run out again.
	auto := lostWithNode(reason) || !strings.HasPrefix(reason, "out of memory") && s.crashes.allowStored(ctx, sessionID)
	if auto && se.HeadSnapshotID != "" {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.resumeElsewhere(tenantID, sessionID)
		}()
	}
}

// reconcileSessions settles, after a restart, whatever a previous run left mid-way. It runs after the
// sandboxes were reconciled (running ones re-adopted and thawed, lost ones failed).
func (s *sessions) reconcileSessions(ctx context.Context) error {
	// A snapshot still "writing" never completed: its chunks are orphans for GC.
	for {
		sns, err := s.store.ListSnapshotsByState(ctx, []store.SnapshotState{store.SnapshotWriting}, store.MaxListLimit)
		if err != nil {
			return fmt.Errorf("reconcile snapshots: %w", err)
		}
		mine := 0
		for _, sn := range sns {
			if !s.book.mySnapshot(sn) {
				continue // another replica may be writing it now
			}
			mine++
			if _, err := s.book.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
				sn.State, sn.Reason = store.SnapshotFailed, "interrupted: airlock restarted while it was written"
				return nil
			}); err != nil {
				return err
			}
			if s.snapshots != nil {
				_ = s.snapshots.Delete(ctx, sn.TenantID, sn.ID) // a manifest, if Commit got that far
			}
		}
		if len(sns) < store.MaxListLimit || mine == 0 {
			break
		}
	}
	ses, err := s.store.ListSessionsByState(ctx, []store.SessionState{store.SessionCreating, store.SessionRunning,
		store.SessionPausing, store.SessionResuming, store.SessionDeleting}, store.MaxListLimit)
	if err != nil {
		return fmt.Errorf("reconcile sessions: %w", err)
	}
	for _, se := range ses {
		if s.nodes.local == nil && se.State != store.SessionRunning {
			// A control plane with no node of its own is one of many replicas: a session in the middle
			// of an operation may be another replica's doing.
			continue
		}
		if err := s.reconcileSession(ctx, se); err != nil {
			s.log.Error("reconcile session", "session", se.ID, "err", err)
		}
	}
	// A sandbox of a session that moved on (paused just before a restart could destroy it).
	// Only the in-process node's: on the other nodes, a sandbox may be one an operation of another
	// replica is booting (adoptOrphanOps settles those of a replica gone).
	var sbs []store.Sandbox
	if s.nodes.local != nil {
		if sbs, err = s.placer.sandboxesOnNode(ctx, s.nodes.local.ID(), []store.SandboxState{store.StateRunning}); err != nil {
			return fmt.Errorf("reconcile sessions: %w", err)
		}
	}
	for _, sb := range sbs {
		id := sb.Metadata[SessionMetadataKey]
		if id == "" {
			continue
		}
		if se, err := s.store.GetSession(ctx, sb.TenantID, id); err != nil || se.SandboxID != sb.ID {
			s.log.Info("destroying a sandbox its session left", "session", id, "sandbox", sb.ID)
			s.endSessionSandbox(ctx, sb.TenantID, sb.ID, "its session moved on", true)
		}
	}
	return nil
}

func (s *sessions) reconcileSession(ctx context.Context, se store.Session) error {
	unlock := s.lockSession(se.ID)
	defer unlock()
	return s.reconcileSessionLocked(ctx, se)
}

// reconcileSessionLocked is reconcileSession for a caller that holds se's lock.
func (s *sessions) reconcileSessionLocked(ctx context.Context, se store.Session) error {
	running := false
	if se.SandboxID != "" {
		if sb, err := s.store.GetSandbox(ctx, se.TenantID, se.SandboxID); err == nil && sb.State == store.StateRunning {
			running = true
		}
	}
	lost := func(what string) error {
		to, reason := store.SessionFailed, what
		if se.HeadSnapshotID != "" {
			reason += fmt.Sprintf("; resume returns to snapshot %s", se.HeadSnapshotID)
		}
		_, err := s.updateSession(ctx, se, func(se *store.Session) error {
			se.SandboxID = ""
			return setSessionState(se, to, reason)
		})
		return err
	}
	switch se.State {
	case store.SessionDeleting:
		return s.deleteLocked(ctx, se)
	case store.SessionCreating:
		return lost("interrupted: airlock restarted while the session was created")
	case store.SessionRunning:
		if !running {
			return lost("lost: its sandbox was gone after airlock restarted")
		}
	case store.SessionPausing:
		if running {
			// The pause did not finish: the snapshot failed, or was never taken, and the sandbox runs on.
			_, err := s.updateSession(ctx, se, func(se *store.Session) error {
				return setSessionState(se, store.SessionRunning, "pause interrupted by a restart; the session runs on")
			})
			return err
		}
		if snap, ok, err := s.book.pauseSnapshot(ctx, se); err != nil {
			return err
		} else if ok {
			// The node saved the sandbox and destroyed it: the pause is done but for its record.
			now := s.now()
			_, err := s.updateSession(ctx, se, func(se *store.Session) error {
				se.HeadSnapshotID, se.SandboxID, se.PausedAt = snap.ID, "", &now
				return setSessionState(se, store.SessionPaused, "paused (its record was completed after a restart)")
			})
			if err == nil && se.SandboxID != "" {
				s.endSessionSandbox(ctx, se.TenantID, se.SandboxID, "session paused", false)
			}
			return err
		}
		if se.HeadSnapshotID != "" {
			// What the pause was to save is gone with the sandbox; the caller wanted it paused, and it
			// can be, at its latest snapshot.
			head := se.HeadSnapshotID
			_, err := s.updateSession(ctx, se, func(se *store.Session) error {
				se.SandboxID = ""
				return setSessionState(se, store.SessionPaused, "pause interrupted and the sandbox was gone: paused at snapshot "+head+", its latest (later work is lost)")
			})
			return err
		}
		return lost("lost: airlock restarted during a pause and the sandbox was gone")
	case store.SessionResuming:
		back := store.SessionPaused
		if se.HeadSnapshotID == "" {
			back = store.SessionFailed
		}
		_, err := s.updateSession(ctx, se, func(se *store.Session) error {
			se.SandboxID = ""
			return setSessionState(se, back, "resume interrupted by a restart")
		})
		return err
	}
	return nil
}

// pauseAllForShutdown pauses every running session of this node, so that a restart resumes them where
// they were. Sessions that cannot be paused in time are left to the sandbox shutdown (and come back
// failed, resumable from their last snapshot).
func (s *sessions) pauseAllForShutdown(ctx context.Context) {
	if s.snapshots == nil {
		return
	}
	ses, err := s.store.ListSessionsByState(ctx, []store.SessionState{store.SessionRunning}, store.MaxListLimit)
	if err != nil {
		s.log.Error("list sessions to pause", "err", err)
		return
	}
	for _, se := range ses {
		if ctx.Err() != nil {
			return
		}
		// Only the sessions on the in-process node: the other nodes run on without this replica.
		if sb, err := s.store.GetSandbox(ctx, se.TenantID, se.SandboxID); err != nil || !s.nodes.isLocal(sb.NodeID) {
			continue
		}
		unlock := s.lockSession(se.ID)
		if fresh, err := s.store.GetSession(ctx, se.TenantID, se.ID); err == nil && fresh.State == store.SessionRunning {
			if _, err := s.pauseLocked(ctx, fresh, "airlock shut down"); err != nil {
				s.log.Error("pause session for shutdown", "session", se.ID, "err", err)
			}
		}
		unlock()
	}
}

// collectSnapshots drops the records of deleted sessions that no fork needs any more (with their last
// snapshot's data), then deletes every tenant's unreferenced chunks older than grace.
// maxCollectPages bounds the pages of deleted sessions one collection reads.
const maxCollectPages = 10

func (s *snapshotBook) collectSnapshots(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Least recently updated first; one that must stay is updated (to the back of the line), so that
	// many kept ones never hide the rest from later pages or runs.
	seen := map[string]bool{}
	for range maxCollectPages {
		ses, err := s.store.ListSessionsByState(ctx, []store.SessionState{store.SessionDeleted}, store.MaxListLimit)
		if err != nil {
			s.log.Error("list deleted sessions", "err", err)
			return
		}
		fresh := 0
		for _, se := range ses {
			if seen[se.ID] {
				continue // requeued by this run: every one since is too
			}
			seen[se.ID] = true
			fresh++
			// The snapshots its deletion kept (one a fork resumed from, and its last) go with its record.
			ids, err := s.snapshotIDs(ctx, se)
			if err != nil {
				s.log.Error("list snapshots of a deleted session", "session", se.ID, "err", err)
				continue
			}
			if err := s.store.DeleteSession(ctx, se.TenantID, se.ID); err != nil {
				// A fork or a kept snapshot still resumes from one of its snapshots.
				if _, err := s.store.UpdateSession(ctx, se); err != nil {
					s.log.Warn("requeue a deleted session", "session", se.ID, "err", err)
				}
				continue
			}
			s.dropImages(ids...)
			for _, id := range ids {
				if err := s.snapshots.Delete(ctx, se.TenantID, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
					s.log.Warn("delete snapshot data", "snapshot", id, "err", err)
				}
			}
		}
		if len(ses) < store.MaxListLimit || fresh == 0 {
			break
		}
	}
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		s.log.Error("list tenants for snapshot GC", "err", err)
		return
	}
	for _, t := range ts {
		if err := s.collectOrphanManifests(ctx, t.ID); err != nil {
			s.log.Error("collect snapshot data without records", "tenant", t.ID, "err", err)
			continue
		}
		st, err := s.snapshots.GC(ctx, t.ID, grace)
		if err != nil {
			s.log.Error("snapshot GC", "tenant", t.ID, "err", err)
			continue
		}
		if st.Deleted > 0 {
			s.log.Info("snapshot GC", "tenant", t.ID, "deleted_chunks", st.Deleted, "deleted_bytes", st.DeletedBytes,
				"snapshots", st.Snapshots)
		}
	}
}

// setSessionNetwork records a session's new egress policy (its running sandbox already has it).
func (s *sessions) setSessionNetwork(ctx context.Context, tenantID, id string, raw []byte) error {
	unlock := s.lockSession(id)
	defer unlock()
	se, err := s.store.GetSession(ctx, tenantID, id)
	if err != nil {
		return err
	}
	_, err = s.updateSession(ctx, se, func(se *store.Session) error {
		se.Spec.NetworkPolicy = raw
		return nil
	})
	return err
}

// snapshotIDs lists the IDs of a session's snapshots.
func (s *snapshotBook) snapshotIDs(ctx context.Context, se store.Session) ([]string, error) {
	var ids []string
	cursor := ""
	for {
		page, next, err := s.store.ListSnapshots(ctx, se.TenantID, store.SnapshotFilter{SessionID: se.ID, Cursor: cursor, Limit: store.MaxListLimit})
		if err != nil {
			return nil, err
		}
		for _, sn := range page {
			ids = append(ids, sn.ID)
		}
		if next == "" {
			return ids, nil
		}
		cursor = next
	}
}

// SessionNetworkPolicy decodes the session's stored egress policy (the zero Policy when none).
func SessionNetworkPolicy(se store.Session) (policy.Policy, error) {
	var p policy.Policy
	if len(se.Spec.NetworkPolicy) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(se.Spec.NetworkPolicy, &p); err != nil {
		return p, fmt.Errorf("session %s: stored network policy: %v: %w", se.ID, err, errdefs.ErrInternal)
	}
	return p, nil
}

// reservedMetadata reports a metadata key users may not set.
func reservedMetadata(k string) bool { return strings.HasPrefix(k, "airlock.") }

// snapshotNodeMeta is the key, in a snapshot's Meta, of the node it was taken on: its image may be
// cached there, and the session's interception CA is. snapshotReplicaMeta names the replica that took
// it (the leader fails one it left writing when it went away).
const (
	snapshotNodeMeta    = "node"
	snapshotReplicaMeta = "replica"
)

// snapshotFilesMeta is the key, in a snapshot's Meta, of the image's file that holds the sandbox's
// writable layer as a tar archive, as its node's driver named it (runtime.ImageFiles); noFilesPart says
// the driver keeps none. Snapshots recorded before nodes said so are gVisor's, whose archive is
// legacyFilesPart.
// snapshotRuntimeMeta names the runtime that took a snapshot; SnapshotKindMeta says what it holds:
// memory and processes (a resume continues them), or files only (a resume starts the processes anew).
const (
	snapshotRuntimeMeta = "runtime"
	SnapshotKindMeta    = "kind"
	SnapshotKindMemory  = "memory"
	SnapshotKindFiles   = "files"
)

const (
	snapshotFilesMeta = "files_part"
	noFilesPart       = "-"
	legacyFilesPart   = "fs.tar"
)

// mySnapshot reports whether this replica took sn (and keeps its image until it is stored). Outside a
// cluster every snapshot is this server's.
func (s *snapshotBook) mySnapshot(sn store.Snapshot) bool {
	r := sn.Meta[snapshotReplicaMeta]
	return !s.nodes.clustered() || r == "" || r == s.replica
}

// snapshotNode reports the node tenantID's snapshot snapID was taken on ("" if unknown).
func (s *snapshotBook) snapshotNode(ctx context.Context, tenantID, snapID string) string {
	sn, err := s.store.GetSnapshot(ctx, tenantID, snapID)
	if err != nil {
		return ""
	}
	return sn.Meta[snapshotNodeMeta]
}

// checkTemplate reports whether a node that has room for a sandbox of memMB can boot template name.
func (s *sessions) checkTemplate(ctx context.Context, name string, memMB int) error {
	pl, err := s.placer.place(ctx, store.SandboxSpec{MemoryMB: memMB}, "", "", imageOfRef(name))
	if err != nil {
		return err
	}
	defer pl.done()
	return pl.n.CheckTemplate(ctx, name)
}

// forgetCA removes a deleted session's interception CA from the nodes (those out of reach keep it,
// its key wrapped under the tenant's key) and from the Store.
func (s *sessions) forgetCA(ctx context.Context, tenantID, caID string) {
	s.keyring.dropSessionCA(ctx, tenantID, caID)
	nodes, err := s.placer.reachableNodes(ctx)
	if err != nil {
		s.log.Warn("forget a session's interception CA", "session", caID, "err", err)
	}
	for _, n := range nodes {
		n.ForgetCA(caID)
	}
}
