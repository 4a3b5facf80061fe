package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/faultinject"
	"github.com/airlockrun/airlock/internal/retention"
	"github.com/airlockrun/airlock/internal/store"
)

// The time machine: rolling snapshots of running sessions, pruned by retention, and restores of a
// session to any of its snapshots.
//
// A running session with a rolling interval is snapshotted (a leave-running checkpoint: the sandbox is
// frozen only for the checkpoint itself) once the interval has passed since its last snapshot, but
// only if something changed since: work arrived through the API, or its sandbox used more CPU than an
// idle one does. Pruning applies the retention policy (the server's defaults, overridden by the
// tenant's, overridden by the session's) to each session's snapshots: never to a pinned one, a head,
// a fork's source, or one still being written.

// Defaults and bounds of rolling snapshots. The loop looks every second (Config.RollInterval), so a
// rolling snapshot comes at most a second after it is due.
const (
	DefaultRollingInterval = 60 * time.Second
	MinRollingInterval     = 15 * time.Second
	MaxRollingInterval     = 24 * time.Hour
	// idleCPUPerMinute is how much CPU time a sandbox may use per minute and still count as unchanged:
	// an idle gVisor sandbox's kernel uses a little (its timers).
	idleCPUPerMinute = 50 * time.Millisecond
)

// rollState is what the rolling loop remembers of a running session.
type rollState struct {
	sandboxID string
	since     time.Time     // its last snapshot, or when the loop first saw this sandbox
	cpu       time.Duration // its sandbox's CPU time then
}

// roller holds the rolling loop's memory, by session ID.
type roller struct {
	mu sync.Mutex
	m  map[string]rollState
}

// rollingGrace bounds how long a due rolling snapshot waits for a moment with no call in progress
// before it holds new ones (a quarter of the interval, if less).
const rollingGrace = 5 * time.Second

// rollingDrain is how long an overdue rolling snapshot waits for the calls in progress on its sandbox to
// end, new ones held meanwhile.
const rollingDrain = 2 * time.Second

// errSandboxBusy is what a rolling snapshot's checkpoint ends with while calls or streams are in
// progress on the sandbox (nodecontract.ErrBusy): nothing was taken.
var errSandboxBusy = errors.New("work in progress on the sandbox")

// rollSnapshots takes the rolling snapshots that are due. The loop calls it every few seconds.
func (s *sessions) rollSnapshots() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ses, err := s.store.ListSessionsByState(ctx, []store.SessionState{store.SessionRunning}, store.MaxListLimit)
	if err != nil {
		s.log.Error("list sessions to snapshot", "err", err)
		return
	}
	seen := map[string]bool{}
	for _, se := range ses {
		seen[se.ID] = true
		if se.RollingIntervalSeconds <= 0 || se.SandboxID == "" {
			continue
		}
		if err := s.rollSession(ctx, se); err != nil {
			s.log.Error("rolling snapshot", "session", se.ID, "err", err)
		}
	}
	s.rolls.mu.Lock()
	for id := range s.rolls.m {
		if !seen[id] {
			delete(s.rolls.m, id)
		}
	}
	s.rolls.mu.Unlock()
}

// rollSession snapshots se if its interval passed and it changed since its last snapshot.
func (s *sessions) rollSession(ctx context.Context, se store.Session) error {
	now := s.now()
	s.rolls.mu.Lock()
	st, ok := s.rolls.m[se.ID]
	s.rolls.mu.Unlock()
	if !ok || st.sandboxID != se.SandboxID {
		// A sandbox the loop has not seen: count from now.
		cpu, _ := s.sandboxes.sandboxCPU(ctx, se.TenantID, se.SandboxID)
		s.rolls.mu.Lock()
		s.rolls.m[se.ID] = rollState{sandboxID: se.SandboxID, since: now, cpu: cpu}
		s.rolls.mu.Unlock()
		return nil
	}
	interval := time.Duration(se.RollingIntervalSeconds) * time.Second
	if now.Sub(st.since) < interval {
		return nil // not due
	}
	// Work in progress would be cut: while the snapshot is not overdue, a later round (its node refuses
	// a checkpoint that would cut a call, too). But calls that follow one another closely would put it
	// off for good: once it is overdue (by a quarter interval, rollingGrace at most), and no call or
	// stream in progress is a long one (a terminal, a long exec: the snapshot waits for it, as
	// before), new work waits while the calls in progress end (never cutting one: a call still running
	// after rollingDrain puts it off again), and the snapshot goes ahead with none in progress.
	switch overdue := now.Sub(st.since) >= interval+min(interval/4, rollingGrace); {
	case overdue && !s.sandboxes.longWork(se.SandboxID, rollingDrain):
		release := s.sandboxes.holdWork(se.SandboxID)
		defer release()
		if !s.sandboxes.waitIdle(ctx, se.SandboxID, rollingDrain) {
			return nil
		}
	case s.sandboxes.busy(se.SandboxID):
		return nil
	}
	cpu, cerr := s.sandboxes.sandboxCPU(ctx, se.TenantID, se.SandboxID)
	idleCPU := time.Duration(float64(idleCPUPerMinute) * now.Sub(st.since).Minutes())
	changed := se.LastActivityAt.After(st.since) || cerr != nil || cpu-st.cpu > idleCPU
	if !changed {
		s.rolls.mu.Lock()
		s.rolls.m[se.ID] = rollState{sandboxID: se.SandboxID, since: now, cpu: cpu}
		s.rolls.mu.Unlock()
		return nil
	}
	unlock, ok := s.locks.TryLock(se.ID)
	if !ok {
		return nil // a pause, resume or snapshot runs: next round
	}
	defer unlock()
	fresh, err := s.store.GetSession(ctx, se.TenantID, se.ID)
	if err != nil || fresh.State != store.SessionRunning || fresh.SandboxID != se.SandboxID {
		return err
	}
	taken := s.now()
	if _, err := s.snapshotRunningLocked(ctx, fresh, store.TriggerRolling, ""); errors.Is(err, errSandboxBusy) {
		return nil // work in progress (seen by its node, through any replica): a later round
	} else if err != nil {
		// Over the snapshot quota, or without the key: try again an interval on.
		if errors.Is(err, errdefs.ErrResourceExhausted) || errors.Is(err, errdefs.ErrKeyUnavailable) {
			s.rolls.mu.Lock()
			s.rolls.m[se.ID] = rollState{sandboxID: se.SandboxID, since: taken, cpu: cpu}
			s.rolls.mu.Unlock()
		}
		return err
	}
	if cpu2, err := s.sandboxes.sandboxCPU(ctx, se.TenantID, se.SandboxID); err == nil {
		cpu = cpu2 // the checkpoint's own CPU is not the agent's
	}
	// The interval counts from the snapshot's start, so that they keep to it.
	s.rolls.mu.Lock()
	s.rolls.m[se.ID] = rollState{sandboxID: se.SandboxID, since: taken, cpu: cpu}
	s.rolls.mu.Unlock()
	return nil
}

// noteSnapshot tells the rolling loop that se's sandbox was just snapshotted (by any trigger), so that
// the next rolling snapshot counts from now.
func (s *sessions) noteSnapshot(se store.Session) {
	s.rolls.mu.Lock()
	defer s.rolls.mu.Unlock()
	if st, ok := s.rolls.m[se.ID]; ok && st.sandboxID == se.SandboxID {
		st.since = s.now()
		s.rolls.m[se.ID] = st
	}
}

// retentionPolicy is the policy that applies to se: the server's, overridden by its tenant's,
// overridden by its own. Each tier keeps at least as long as the one before (a session that keeps all
// for two days keeps hourly ones for two days too).
func (s *accounts) retentionPolicy(tenant store.Tenant, se store.Session) retention.Policy {
	p := retention.Merge(s.retention, policyOf(tenant.Retention))
	p = retention.Merge(p, policyOf(se.Retention)).WithDefaults()
	p.KeepHourly = max(p.KeepHourly, p.KeepAll)
	p.KeepDaily = max(p.KeepDaily, p.KeepHourly)
	return p
}

func policyOf(r store.RetentionSpec) retention.Policy {
	return retention.Policy{KeepAll: time.Duration(r.KeepAllSeconds) * time.Second,
		KeepHourly: time.Duration(r.KeepHourlySeconds) * time.Second, KeepDaily: time.Duration(r.KeepDailySeconds) * time.Second}
}

// pruneSnapshots applies retention to the snapshots of every session not deleted.
func (s *snapshotBook) pruneSnapshots() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		s.log.Error("list tenants to prune", "err", err)
		return
	}
	for _, t := range ts {
		cursor := ""
		for {
			ses, next, err := s.store.ListSessions(ctx, t.ID, store.SessionFilter{Cursor: cursor, Limit: store.MaxListLimit})
			if err != nil {
				s.log.Error("list sessions to prune", "tenant", t.ID, "err", err)
				break
			}
			for _, se := range ses {
				if se.State == store.SessionDeleted || se.State == store.SessionDeleting {
					continue
				}
				if n, err := s.pruneSession(ctx, t, se); err != nil {
					s.log.Error("prune snapshots", "session", se.ID, "err", err)
				} else if n > 0 {
					s.log.Info("pruned snapshots", "session", se.ID, "deleted", n)
				}
			}
			if next == "" {
				break
			}
			cursor = next
		}
	}
}

// pruneSession deletes the snapshots of se that its retention policy does not keep, and reports how
// many. Each goes record first, then data: a crash in between leaves data without a record, which
// collectSnapshots removes; never a record without its data.
func (s *snapshotBook) pruneSession(ctx context.Context, t store.Tenant, se store.Session) (int, error) {
	unlock := s.locks.Lock(se.ID)
	defer unlock()
	se, err := s.store.GetSession(ctx, se.TenantID, se.ID)
	if err != nil {
		return 0, err
	}
	sns, err := s.sessionSnapshots(ctx, se)
	if err != nil {
		return 0, err
	}
	in := make([]retention.Snapshot, 0, len(sns))
	for _, sn := range sns {
		in = append(in, retention.Snapshot{ID: sn.ID, CreatedAt: sn.CreatedAt,
			Protected: sn.Pinned || sn.ID == se.HeadSnapshotID || sn.State != store.SnapshotComplete && sn.State != store.SnapshotFailed})
	}
	n := 0
	var dropped []string
	// The nodes' copies of the pruned images go in one call per node.
	defer func() { s.dropImages(dropped...) }()
	for _, id := range retention.Select(in, s.now(), s.accounts.retentionPolicy(t, se)) {
		err := s.store.DeleteSnapshot(ctx, se.TenantID, id)
		if errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrNotFound) {
			continue // a fork resumes from it, or it is gone already
		}
		if err != nil {
			return n, err
		}
		faultinject.Crash("prune-record-deleted")
		dropped = append(dropped, id)
		if err := s.snapshots.Delete(ctx, se.TenantID, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Warn("delete pruned snapshot's data", "snapshot", id, "err", err)
		}
		n++
	}
	return n, nil
}

// sessionSnapshots lists all of a session's snapshots, oldest first.
func (s *snapshotBook) sessionSnapshots(ctx context.Context, se store.Session) ([]store.Snapshot, error) {
	var all []store.Snapshot
	cursor := ""
	for {
		page, next, err := s.store.ListSnapshots(ctx, se.TenantID, store.SnapshotFilter{SessionID: se.ID, Cursor: cursor, Limit: store.MaxListLimit})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		cursor = next
	}
}

// collectOrphanManifests deletes from the snapshot store the snapshots of a tenant that have no record
// (a prune or delete interrupted between the two).
func (s *snapshotBook) collectOrphanManifests(ctx context.Context, tenantID string) error {
	infos, err := s.snapshots.List(ctx, tenantID)
	if err != nil {
		return err
	}
	for _, in := range infos {
		if _, err := s.store.GetSnapshot(ctx, tenantID, in.ID); !errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		s.log.Info("deleting snapshot data without a record", "tenant", tenantID, "snapshot", in.ID)
		if err := s.snapshots.Delete(ctx, tenantID, in.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	return nil
}

// Timeline returns the session and all its snapshots, oldest first, with its fork source first if it
// has one: a tree by ParentID.
func (s *snapshotBook) Timeline(ctx context.Context, tenantID, id string) (store.Session, []store.Snapshot, error) {
	se, err := s.sessions.GetSession(ctx, tenantID, id)
	if err != nil {
		return se, nil, err
	}
	sns, err := s.sessionSnapshots(ctx, se)
	if err != nil {
		return se, nil, err
	}
	if se.ForkedFromSnapshotID != "" {
		if src, err := s.store.GetSnapshot(ctx, tenantID, se.ForkedFromSnapshotID); err == nil {
			sns = append([]store.Snapshot{src}, sns...)
		}
	}
	return se, sns, nil
}

// UpdateSnapshot pins or unpins (pinned non-nil) and renames (name non-nil) one of the session's
// snapshots.
func (s *snapshotBook) UpdateSnapshot(ctx context.Context, tenantID, sessionID, id string, pinned *bool, name *string) (store.Snapshot, error) {
	if name != nil && *name != "" && !metaKeyPattern.MatchString(*name) {
		return store.Snapshot{}, invalid("snapshot name %q must be 1-63 letters, digits or _.-/ and start with a letter or digit", *name)
	}
	sn, err := s.GetSnapshot(ctx, tenantID, sessionID, id)
	if err != nil {
		return sn, err
	}
	if sn.State == store.SnapshotFailed {
		return sn, fmt.Errorf("snapshot %s failed: %w", id, errdefs.ErrConflict)
	}
	return s.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
		if pinned != nil {
			sn.Pinned = *pinned
		}
		if name != nil {
			sn.Name = *name
		}
		return nil
	})
}

// RestoreRequest names the snapshot to restore a session to: by ID, or the last one taken at or before
// a time.
type RestoreRequest struct {
	SnapshotID string
	At         time.Time
}

// RestoreSession moves the session to one of its snapshots (or its fork's source): a running session is
// snapshotted first, so that where it was stays in its timeline as a branch; then a new sandbox is
// restored from the target, which becomes the head. The session is running afterwards.
func (s *sessions) RestoreSession(ctx context.Context, tenantID, id string, req RestoreRequest) (store.Session, error) {
	if (req.SnapshotID == "") == req.At.IsZero() {
		return store.Session{}, invalid("give either snapshot_id or at")
	}
	ctx = context.WithoutCancel(ctx)
	unlock := s.lockSession(id)
	defer unlock()
	se, err := s.GetSession(ctx, tenantID, id)
	if err != nil {
		return se, err
	}
	if IsKept(se) {
		return se, refuseKept(se)
	}
	target, err := s.restoreTarget(ctx, se, req)
	if err != nil {
		return se, err
	}
	switch se.State {
	case store.SessionRunning:
		// Keep where it is as a branch: the snapshot a pause would take.
		if se, err = s.pauseLocked(ctx, se, "restored to snapshot "+target.ID); err != nil {
			return se, err
		}
	case store.SessionPaused, store.SessionFailed:
	default:
		return se, fmt.Errorf("session %s is %s: %w", id, se.State, errdefs.ErrConflict)
	}
	prev, prevState := se.HeadSnapshotID, se.State
	se, err = s.updateSession(ctx, se, func(se *store.Session) error {
		se.HeadSnapshotID = target.ID
		return nil
	})
	if err != nil {
		return se, err
	}
	se, err = s.resumeLocked(ctx, se)
	if err != nil {
		// Back to where it was: paused at its previous head.
		back, uerr := s.updateSession(ctx, se, func(se *store.Session) error {
			se.HeadSnapshotID = prev
			if se.State != prevState {
				return setSessionState(se, prevState, "restore to snapshot "+target.ID+" failed")
			}
			return nil
		})
		if uerr != nil {
			return se, errors.Join(err, uerr)
		}
		return back, err
	}
	s.log.Info("session restored", "session", id, "snapshot", target.ID, "previous_head", prev)
	return se, nil
}

// restoreTarget finds the snapshot req names among se's (or its fork source).
func (s *sessions) restoreTarget(ctx context.Context, se store.Session, req RestoreRequest) (store.Snapshot, error) {
	if req.SnapshotID != "" {
		sn, err := s.store.GetSnapshot(ctx, se.TenantID, req.SnapshotID)
		if err == nil && sn.SessionID != se.ID && sn.ID != se.ForkedFromSnapshotID {
			err = errdefs.ErrNotFound
		}
		if errors.Is(err, errdefs.ErrNotFound) {
			return sn, fmt.Errorf("snapshot %s is not in session %s's timeline: %w", req.SnapshotID, se.ID, errdefs.ErrNotFound)
		}
		if err != nil {
			return sn, err
		}
		if !sn.State.Usable() {
			return sn, fmt.Errorf("snapshot %s is %s: %w", sn.ID, sn.State, errdefs.ErrConflict)
		}
		return sn, nil
	}
	sns, err := s.book.sessionSnapshots(ctx, se)
	if err != nil {
		return store.Snapshot{}, err
	}
	if se.ForkedFromSnapshotID != "" {
		if src, err := s.store.GetSnapshot(ctx, se.TenantID, se.ForkedFromSnapshotID); err == nil {
			sns = append(sns, src)
		}
	}
	sort.Slice(sns, func(i, j int) bool { return sns[i].CreatedAt.Before(sns[j].CreatedAt) })
	var best *store.Snapshot
	for i := range sns {
		if sns[i].CreatedAt.After(req.At) {
			break
		}
		if sns[i].State.Usable() {
			best = &sns[i]
		}
	}
	if best == nil {
		return store.Snapshot{}, fmt.Errorf("session %s has no usable snapshot taken at or before %s: %w",
			se.ID, req.At.UTC().Format(time.RFC3339), errdefs.ErrNotFound)
	}
	return *best, nil
}

// TenantRetention returns the tenant's own retention override and the policy it makes with the
// server's defaults.
func (s *accounts) TenantRetention(ctx context.Context, tenantID string) (store.RetentionSpec, retention.Policy, error) {
	t, err := s.store.GetTenant(ctx, tenantID)
	if err != nil {
		return store.RetentionSpec{}, retention.Policy{}, err
	}
	return t.Retention, s.retentionPolicy(t, store.Session{}), nil
}

// SetTenantRetention replaces the tenant's retention override (zero fields inherit the server's).
func (s *accounts) SetTenantRetention(ctx context.Context, tenantID string, r store.RetentionSpec) (store.RetentionSpec, retention.Policy, error) {
	if err := checkRetention(r); err != nil {
		return store.RetentionSpec{}, retention.Policy{}, err
	}
	t, err := s.store.UpdateTenantRetention(ctx, tenantID, r)
	if err != nil {
		return store.RetentionSpec{}, retention.Policy{}, err
	}
	return t.Retention, s.retentionPolicy(t, store.Session{}), nil
}

// workTracker counts the API calls and streams in progress on each sandbox (exec, attach, file work),
// so that neither a rolling snapshot nor an idle pause cuts one off: a checkpoint closes the daemon's
// channel, and with it every call and stream on it.
type workTracker struct {
	mu sync.Mutex
	n  map[string]int // by sandbox ID
	// ports counts the requests and tunnels in progress through the ingress, by sandbox ID. They hold
	// off an idle pause (which would cut them) but not a rolling snapshot: they do not go through the
	// daemon's channel, and a checkpoint that leaves the sandbox running keeps its connections.
	ports map[string]int
	// started holds when each call or stream in progress began, by sandbox ID and a number of its own
	// (seq counts them).
	started map[string]map[uint64]time.Time
	seq     uint64
	// gates holds the sandboxes whose new work waits for an overdue rolling snapshot (holdWork): each
	// channel is closed when the snapshot is done.
	gates map[string]chan struct{}
}

// BeginWork records a call or stream starting on sandbox sbID; the returned function records its end.
// For work addressed to a session (sessionID of tenantID, "" otherwise) the end counts as its activity.
// While an overdue rolling snapshot holds the sandbox's new work (holdWork), it waits for it first (a
// few seconds at most), unless ctx ends.
func (s *sandboxes) BeginWork(ctx context.Context, tenantID, sessionID, sbID string) (end func()) {
	var token uint64
	for {
		s.work.mu.Lock()
		g := s.work.gates[sbID]
		if g == nil || ctx.Err() != nil {
			s.work.n[sbID]++
			s.work.seq++
			token = s.work.seq
			if s.work.started == nil {
				s.work.started = map[string]map[uint64]time.Time{}
			}
			if s.work.started[sbID] == nil {
				s.work.started[sbID] = map[uint64]time.Time{}
			}
			s.work.started[sbID][token] = time.Now()
			s.work.mu.Unlock()
			break
		}
		s.work.mu.Unlock()
		select {
		case <-g:
		case <-ctx.Done():
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.work.mu.Lock()
			if s.work.n[sbID]--; s.work.n[sbID] <= 0 {
				delete(s.work.n, sbID)
			}
			if delete(s.work.started[sbID], token); len(s.work.started[sbID]) == 0 {
				delete(s.work.started, sbID)
			}
			s.work.mu.Unlock()
			// The call counts as activity until it ends, not only when it began.
			if sessionID != "" {
				if err := s.store.TouchSession(context.Background(), tenantID, sessionID, s.now()); err != nil {
					s.log.Debug("touch session", "session", sessionID, "err", err)
				}
			}
		})
	}
}

// BeginPortWork records a request or tunnel through the ingress starting on sandbox sbID; the returned
// function records its end, which counts as the session's activity (sessionID of tenantID, if not "").
func (s *sandboxes) BeginPortWork(tenantID, sessionID, sbID string) (end func()) {
	s.work.mu.Lock()
	s.work.ports[sbID]++
	s.work.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.work.mu.Lock()
			if s.work.ports[sbID]--; s.work.ports[sbID] <= 0 {
				delete(s.work.ports, sbID)
			}
			s.work.mu.Unlock()
			if sessionID != "" {
				if err := s.store.TouchSession(context.Background(), tenantID, sessionID, s.now()); err != nil {
					s.log.Debug("touch session", "session", sessionID, "err", err)
				}
			}
		})
	}
}

// portBusy reports whether requests or tunnels through the ingress are in progress on sandbox sbID.
func (s *sandboxes) portBusy(sbID string) bool {
	s.work.mu.Lock()
	defer s.work.mu.Unlock()
	return s.work.ports[sbID] > 0
}

// holdWork makes new work on sandbox sbID wait (BeginWork) until the returned release is called.
func (s *sandboxes) holdWork(sbID string) (release func()) {
	g := make(chan struct{})
	s.work.mu.Lock()
	if s.work.gates == nil {
		s.work.gates = map[string]chan struct{}{}
	}
	s.work.gates[sbID] = g
	s.work.mu.Unlock()
	return sync.OnceFunc(func() {
		s.work.mu.Lock()
		if s.work.gates[sbID] == g {
			delete(s.work.gates, sbID)
		}
		s.work.mu.Unlock()
		close(g)
	})
}

// waitIdle waits until no call or stream is in progress on sandbox sbID, at most limit; it reports
// whether that happened.
func (s *sandboxes) waitIdle(ctx context.Context, sbID string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for s.busy(sbID) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// longWork reports whether a call or stream in progress on sandbox sbID began more than d ago.
func (s *sandboxes) longWork(sbID string, d time.Duration) bool {
	s.work.mu.Lock()
	defer s.work.mu.Unlock()
	for _, t := range s.work.started[sbID] {
		if time.Since(t) > d {
			return true
		}
	}
	return false
}

// busy reports whether calls or streams are in progress on sandbox sbID.
func (s *sandboxes) busy(sbID string) bool {
	s.work.mu.Lock()
	defer s.work.mu.Unlock()
	return s.work.n[sbID] > 0
}

// sandboxCPU reports the CPU time tenantID's sandbox id used so far, from its node.
func (s *sandboxes) sandboxCPU(ctx context.Context, tenantID, id string) (time.Duration, error) {
	n, err := s.placer.nodeOfSandbox(ctx, tenantID, id)
	if err != nil {
		return 0, err
	}
	return n.SandboxCPU(ctx, id)
}
