package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// Failover: what keeps sessions going when a node or a control-plane replica goes away, and a session
// from ever running in two places.
//
//   - A node that has not reached a control plane for nodeapi.FenceAfter destroys its sandboxes itself
//     (it cannot tell whether it was given up on). A control plane gives a node up only later, once it
//     has not heard from it for NodeDownAfter: by then the node has stopped them, or is dead.
//   - The leader (one replica at a time, by a lease on leaderLease) then fails the node's sandboxes and
//     resumes their sessions on other nodes from their latest snapshots; it also runs the periodic loops
//     (timeouts, idle pauses, rolling snapshots, retention, key checks), so that two replicas do not
//     both act on one session.
//   - Each sandbox of a session starts under the session's lease (sessionLease), held by that sandbox:
//     its fencing token goes to the node, which refuses a smaller one than it has seen, and the session
//     is recorded running in the sandbox only while the lease is still the sandbox's.

// leaderLease is the resource whose holder is the leader replica.
const leaderLease = "cluster/leader"

// leaderTTL is how long the leader's lease lasts unless renewed (every leaderEvery).
const (
	leaderTTL   = 10 * time.Second
	leaderEvery = 2 * time.Second
	// failOverEvery is how often the leader looks for nodes gone down.
	failOverEvery = time.Second
)

// sessionLeaseTTL is the lease a session's sandbox holds: it ends when the sandbox does (a later sandbox
// of the session takes it over), not by time.
const sessionLeaseTTL = 10 * 365 * 24 * time.Hour

// fenceMetadataKey is the key, in a session sandbox's metadata, of its fencing token.
const fenceMetadataKey = "airlock.fence"

func sessionLease(sessionID string) string { return "session/" + sessionID }

// clustered reports whether this control plane reaches nodes of their own (other replicas may run
// beside it).
func (n *nodeSet) clustered() bool { return n.dial != nil }

// replicaLease is the resource whose lease a replica holds from Start until the end of Shutdown
// (renewed every leaderEvery), so the others can tell one that went away.
func replicaLease(replica string) string { return "replica/" + replica }

// holdReplicaLease takes this replica's lease and renews it until releaseReplicaLease.
func (s *loops) holdReplicaLease() {
	if !s.nodes.clustered() || s.replicaLeaseStop != nil {
		return
	}
	renew := func() {
		ctx, cancel := context.WithTimeout(context.Background(), leaderEvery)
		defer cancel()
		if _, err := s.store.AcquireLease(ctx, replicaLease(s.replica), s.replica, leaderTTL); err != nil {
			s.log.Error("replica lease", "err", err)
		}
	}
	renew()
	stop, done := make(chan struct{}), make(chan struct{})
	s.replicaLeaseStop = func() {
		close(stop)
		<-done
	}
	go func() {
		defer close(done)
		t := time.NewTicker(leaderEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				ctx, cancel := context.WithTimeout(context.Background(), leaderEvery)
				defer cancel()
				if l, err := s.store.GetLease(ctx, replicaLease(s.replica)); err == nil && l.Holder == s.replica {
					_ = s.store.ReleaseLease(ctx, replicaLease(s.replica), s.replica, l.Token)
				}
				return
			case <-t.C:
				renew()
			}
		}
	}()
}

// releaseReplicaLease stops renewing this replica's lease and gives it up (the end of Shutdown).
func (s *loops) releaseReplicaLease() {
	if s.replicaLeaseStop != nil {
		s.replicaLeaseStop()
		s.replicaLeaseStop = nil
	}
}

// lead takes or renews the leader's lease; a replica not in a cluster always leads.
func (s *loops) lead() {
	if !s.nodes.clustered() {
		s.leading.Store(true)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaderEvery)
	defer cancel()
	l, err := s.store.AcquireLease(ctx, leaderLease, s.replica, leaderTTL)
	was := s.leading.Load()
	switch {
	case err == nil:
		s.leading.Store(true)
		if !was {
			s.log.Info("this replica leads", "replica", s.replica, "token", l.Token)
		}
	case errors.Is(err, errdefs.ErrConflict):
		s.leading.Store(false)
		if was {
			s.log.Warn("this replica no longer leads", "replica", s.replica)
		}
	default:
		// Without the Store the lease cannot be known kept: stop acting as the leader.
		s.leading.Store(false)
		s.log.Error("leader lease", "err", err)
	}
}

// resign gives the leader's lease up (at shutdown), so that another replica leads at once.
func (s *loops) resign(ctx context.Context) {
	if !s.nodes.clustered() || !s.leading.Load() {
		return
	}
	s.leading.Store(false)
	if l, err := s.store.GetLease(ctx, leaderLease); err == nil && l.Holder == s.replica {
		_ = s.store.ReleaseLease(ctx, leaderLease, s.replica, l.Token)
	}
}

// ifLeader returns f run only while this replica leads.
func (s *loops) ifLeader(f func()) func() {
	return func() {
		if s.leading.Load() {
			f()
		}
	}
}

// takeSessionLease gives session se's lease to its new sandbox sbID and returns the fencing token. A
// lease held by an earlier sandbox of the session that is over (or whose node is gone) is taken over;
// one held by a sandbox still up is ErrConflict: the session runs there.
func (s *sessions) takeSessionLease(ctx context.Context, se store.Session, sbID string) (int64, error) {
	res := sessionLease(se.ID)
	for range 4 {
		l, err := s.store.AcquireLease(ctx, res, sbID, sessionLeaseTTL)
		if err == nil {
			return l.Token, nil
		}
		if !errors.Is(err, errdefs.ErrConflict) {
			return 0, fmt.Errorf("session %s: lease: %w", se.ID, err)
		}
		cur, err := s.store.GetLease(ctx, res)
		if err != nil {
			return 0, fmt.Errorf("session %s: lease: %w", se.ID, err)
		}
		fresh, err := s.store.GetSession(ctx, se.TenantID, se.ID)
		if err != nil {
			return 0, fmt.Errorf("session %s: %w", se.ID, err)
		}
		// The holder keeps the lease while the session runs in it: up, on a node not gone. A sandbox
		// the session moved on from (paused, failed) is being torn down or is gone.
		if fresh.SandboxID == cur.Holder {
			holder, err := s.store.GetSandbox(ctx, se.TenantID, cur.Holder)
			if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return 0, fmt.Errorf("session %s: lease holder: %w", se.ID, err)
			}
			if err == nil && (holder.State == store.StateCreating || holder.State == store.StateRunning || holder.State == store.StateStopping) &&
				!s.placer.nodeGone(ctx, holder.NodeID) {
				return 0, fmt.Errorf("session %s runs in sandbox %s: %w", se.ID, holder.ID, errdefs.ErrConflict)
			}
		}
		// The holder is over: its lease ends now (another taker may have been first: try again).
		if err := s.store.ReleaseLease(ctx, res, cur.Holder, cur.Token); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			return 0, fmt.Errorf("session %s: lease: %w", se.ID, err)
		}
	}
	return 0, fmt.Errorf("session %s: its lease is contended: %w", se.ID, errdefs.ErrConflict)
}

// holdsSessionLease reports whether sandbox sbID still holds its session's lease with token.
func (s *sessions) holdsSessionLease(ctx context.Context, sessionID, sbID string, token int64) error {
	l, err := s.store.GetLease(ctx, sessionLease(sessionID))
	if err != nil {
		return fmt.Errorf("session %s: lease: %w", sessionID, err)
	}
	if l.Holder != sbID || l.Token != token {
		return fmt.Errorf("session %s: its lease went to %s (token %d) meanwhile: %w", sessionID, l.Holder, l.Token, errdefs.ErrConflict)
	}
	return nil
}

// sandboxFence returns the fencing token a session sandbox was started with (0: none).
func sandboxFence(sb store.Sandbox) int64 {
	n, _ := strconv.ParseInt(sb.Metadata[fenceMetadataKey], 10, 64)
	return n
}

// nodeLostReason starts the reason of a sandbox failed because its node went away; its session is
// resumed elsewhere.
const nodeLostReason = "its node "

// failOver gives up the nodes not heard from for NodeDownAfter: their sandboxes fail, and their
// sessions resume on other nodes from their latest snapshots. (The leader runs it.)
func (s *loops) failOver() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	live, err := s.placer.liveNodes(ctx)
	if err != nil {
		s.log.Error("fail over: list nodes", "err", err)
		return
	}
	now := s.now()
	down := map[string]bool{}
	for id, l := range live {
		if now.Sub(l.SeenAt) >= NodeDownAfter && !s.nodes.isLocal(id) {
			down[id] = true
		}
	}
	if len(down) == 0 {
		return
	}
	for id := range down {
		sbs, err := s.placer.sandboxesOnNode(ctx, id, activeSandbox)
		if err != nil {
			s.log.Error("fail over: list sandboxes", "node", id, "err", err)
			continue
		}
		for _, sb := range sbs {
			s.log.Warn("node down: failing its sandbox", "node", id, "sandbox", sb.ID)
			s.sandboxes.sandboxExited(id, sb.ID, nodeLostReason+id+" stopped answering")
		}
	}
}

// resumeElsewhere resumes a session whose sandbox failed with its node, on another node, from its
// latest snapshot.
func (s *sessions) resumeElsewhere(tenantID, sessionID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	unlock := s.lockSession(sessionID)
	defer unlock()
	se, err := s.store.GetSession(ctx, tenantID, sessionID)
	if err != nil || se.State != store.SessionFailed || se.HeadSnapshotID == "" {
		return
	}
	if from := s.storedHead(ctx, se); from != se.HeadSnapshotID {
		s.log.Warn("session's latest snapshot was not stored before its node went away: it goes on from an earlier one",
			"session", sessionID, "head", se.HeadSnapshotID, "from", from)
		if se, err = s.updateSession(ctx, se, func(se *store.Session) error {
			se.HeadSnapshotID = from
			return nil
		}); err != nil {
			s.log.Error("resume a session whose node went away", "session", sessionID, "err", err)
			return
		}
	}
	start := s.now()
	if se, err = s.resumeLocked(ctx, se); err != nil {
		s.log.Error("resume a session whose node went away", "session", sessionID, "err", err)
		return
	}
	s.log.Info("session resumed after its node went away", "session", sessionID, "sandbox", se.SandboxID, "snapshot", se.HeadSnapshotID, "took", s.now().Sub(start))
}

// A session whose sandbox stopped by itself, not for lack of memory, resumes from its latest snapshot
// as one whose node went away does, but at most crashResumes times in crashWindow: a session that brings
// its sandbox down again each time it runs ends up failed, not in a loop.
const (
	crashResumes = 3
	crashWindow  = 10 * time.Minute
)

// crashDocPrefix keys the documents that count a session's automatic resumes after crashes (a JSON
// list of their times): the budget is the session's, whichever replica resumes it.
const crashDocPrefix = "crashes/"

// crashBudget counts the automatic resumes of sessions whose sandbox crashed: in the Store's documents
// (allowStored), or in this replica (allow) when the Store cannot be reached.
type crashBudget struct {
	store store.Docs
	log   *slog.Logger
	now   func() time.Time

	mu sync.Mutex
	m  map[string][]time.Time // resumes within crashWindow, by session (allow); guarded by mu
}

// allowStored reports whether session id may be resumed after a crash now, and counts it if so, in
// the Store, so that every replica counts against one budget. A Store that cannot be read or written
// falls back to this replica's own count (allow).
func (b *crashBudget) allowStored(ctx context.Context, id string) bool {
	now := b.now()
	key := crashDocPrefix + id
	for range 5 {
		d, err := b.store.GetDoc(ctx, key)
		var times []time.Time
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			d = store.Doc{Key: key}
		case err != nil:
			b.log.Warn("crash budget: read; counting in this replica", "session", id, "err", err)
			return b.allow(id, now)
		default:
			_ = json.Unmarshal(d.Value, &times) // unreadable: counted from none
		}
		one := crashBudget{m: map[string][]time.Time{id: times}}
		ok := one.allow(id, now)
		if d.Value, err = json.Marshal(one.m[id]); err != nil {
			return b.allow(id, now)
		}
		_, err = b.store.PutDoc(ctx, d)
		switch {
		case err == nil:
			return ok
		case errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrAlreadyExists):
			continue // another replica counted meanwhile: count again
		default:
			b.log.Warn("crash budget: write; counting in this replica", "session", id, "err", err)
			return b.allow(id, now)
		}
	}
	return false
}

// forgetCrashes removes the count of a deleted session's crash resumes.
func (b *crashBudget) forget(ctx context.Context, id string) {
	if d, err := b.store.GetDoc(ctx, crashDocPrefix+id); err == nil {
		_ = b.store.DeleteDoc(ctx, d.Key, d.Version)
	}
}

// allow reports whether session id may be resumed after a crash at now, and counts it if so.
func (b *crashBudget) allow(id string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string][]time.Time{}
	}
	recent := b.m[id][:0]
	for _, t := range b.m[id] {
		if now.Sub(t) < crashWindow {
			recent = append(recent, t)
		}
	}
	for k, ts := range b.m { // sessions that have not crashed for a while are forgotten
		if len(ts) > 0 && now.Sub(ts[len(ts)-1]) >= crashWindow {
			delete(b.m, k)
		}
	}
	if len(recent) >= crashResumes {
		b.m[id] = recent
		return false
	}
	b.m[id] = append(recent, now)
	return true
}

// storedHead returns the snapshot session se can go on from: its head, if the snapshot store holds it or
// the node that keeps its image is up; otherwise the newest of its earlier snapshots (along ParentID)
// the store holds, so that a session whose latest snapshot was still uploading when its node went away
// is not lost. With none, its head (and the resume fails).
func (s *sessions) storedHead(ctx context.Context, se store.Session) string {
	head, err := s.store.GetSnapshot(ctx, se.TenantID, se.HeadSnapshotID)
	if err != nil || head.State == store.SnapshotComplete {
		return se.HeadSnapshotID
	}
	if head.State == store.SnapshotUploading {
		id := head.Meta[snapshotNodeMeta]
		if s.nodes.isLocal(id) {
			return se.HeadSnapshotID
		}
		if l, err := s.placer.nodeLive(ctx, id); err == nil && l.Up(s.now()) {
			return se.HeadSnapshotID
		}
	}
	for id, seen := head.ParentID, 0; id != "" && seen < 10000; seen++ {
		sn, err := s.store.GetSnapshot(ctx, se.TenantID, id)
		if err != nil {
			break
		}
		if sn.State == store.SnapshotComplete {
			return sn.ID
		}
		id = sn.ParentID
	}
	return se.HeadSnapshotID
}

// lostWithNode reports whether reason says a sandbox failed because its node went away.
func lostWithNode(reason string) bool {
	return strings.HasPrefix(reason, nodeLostReason)
}

// A session in the middle of an operation (creating, pausing, resuming, deleting) is held by the
// replica doing it with a short lease (opLease), renewed while the operation runs. Should the replica die,
// the lease lapses and the leader settles the session as a restart would (adoptOrphanOps).

// opLeaseTTL is how long a replica's lease on a session's operation lasts unless renewed (every
// opLeaseEvery).
const (
	opLeaseTTL   = 10 * time.Second
	opLeaseEvery = 3 * time.Second
)

func opLease(sessionID string) string { return "sessionop/" + sessionID }

// transitional reports whether a session in state st is in the middle of an operation.
func transitional(st store.SessionState) bool {
	switch st {
	case store.SessionCreating, store.SessionPausing, store.SessionResuming, store.SessionDeleting:
		return true
	}
	return false
}

// sessionOps holds this replica's leases on session operations in progress.
type sessionOps struct {
	mu sync.Mutex
	m  map[string]context.CancelFunc // stops the renewal, by session ID; guarded by mu
	wg sync.WaitGroup                // the renewals
}

// stopAll gives up every lease on an operation (at shutdown: what is left mid-way, the leader settles).
func (o *sessionOps) stopAll() {
	o.mu.Lock()
	for id, stop := range o.m {
		stop()
		delete(o.m, id)
	}
	o.mu.Unlock()
	o.wg.Wait()
}

// sessionChanged keeps this replica's lease on se's operation while se is in the middle of one, and gives
// it up once se settled. (Clustered replicas only.)
func (s *sessions) sessionChanged(se store.Session) {
	if !s.nodes.clustered() {
		return
	}
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	stop, held := s.ops.m[se.ID]
	switch {
	case transitional(se.State) && !held:
		ctx, cancel := context.WithCancel(context.Background())
		s.ops.m[se.ID] = cancel
		s.ops.wg.Add(1)
		go func() { // owner: s.ops; ends when the session settles, or at shutdown
			defer s.ops.wg.Done()
			s.holdOp(ctx, se.ID)
		}()
	case !transitional(se.State) && held:
		stop()
		delete(s.ops.m, se.ID)
	}
}

// lockSession takes session id's lock for an operation on it. The unlock it returns also gives up this
// replica's lease on the operation if the session was left in the middle of one — the operation's last
// update failed (the Store out of reach, say) — so that the leader settles it (adoptOrphanOps) once the
// lease lapses, instead of this replica holding the lease, and the session mid-way, for ever.
func (s *sessions) lockSession(id string) (unlock func()) {
	release := s.locks.Lock(id)
	return func() {
		s.ops.mu.Lock()
		stop, held := s.ops.m[id]
		delete(s.ops.m, id)
		s.ops.mu.Unlock()
		if held {
			stop()
			s.log.Warn("an operation ended with its session mid-way (its last update failed): the leader will settle it", "session", id)
		}
		release()
	}
}

// holdOp takes and renews the lease on session id's operation until ctx ends, then releases it.
func (s *sessions) holdOp(ctx context.Context, id string) {
	res := opLease(id)
	var token int64
	t := time.NewTicker(opLeaseEvery)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(context.Background(), opLeaseEvery)
		var l store.Lease
		var err error
		if token == 0 {
			l, err = s.store.AcquireLease(cctx, res, s.replica, opLeaseTTL)
		} else {
			l, err = s.store.RenewLease(cctx, res, s.replica, token, opLeaseTTL)
		}
		cancel()
		if err == nil {
			token = l.Token
		} else {
			s.log.Warn("lease on a session's operation", "session", id, "err", err)
			token = 0 // lost or never had: take it again if it is free
		}
		select {
		case <-ctx.Done():
			if token != 0 {
				rctx, cancel := context.WithTimeout(context.Background(), opLeaseEvery)
				_ = s.store.ReleaseLease(rctx, res, s.replica, token)
				cancel()
			}
			return
		case <-t.C:
		}
	}
}

// adoptOrphanOps settles the sessions left in the middle of an operation by a replica that went away:
// whose operation lease lapsed, or was never taken and the session has not changed for opLeaseTTL.
// (The leader runs it.)
func (s *loops) adoptOrphanOps() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ses, err := s.store.ListSessionsByState(ctx, []store.SessionState{store.SessionCreating, store.SessionPausing,
		store.SessionResuming, store.SessionDeleting}, store.MaxListLimit)
	if err != nil {
		s.log.Error("adopt sessions: list", "err", err)
		return
	}
	now := s.now()
	for _, se := range ses {
		s.ops.mu.Lock()
		_, mine := s.ops.m[se.ID]
		s.ops.mu.Unlock()
		if mine {
			continue
		}
		if now.Sub(se.UpdatedAt) < opLeaseTTL {
			continue // just begun: its replica may be about to take the lease
		}
		l, err := s.store.GetLease(ctx, opLease(se.ID))
		switch {
		case err == nil && !l.Expired(now):
			continue
		case err != nil && !errors.Is(err, errdefs.ErrNotFound):
			s.log.Error("adopt sessions: lease", "session", se.ID, "err", err)
			continue
		}
		unlock, ok := s.locks.TryLock(se.ID)
		if !ok {
			continue
		}
		fresh, err := s.store.GetSession(ctx, se.TenantID, se.ID)
		if err == nil && fresh.Version == se.Version {
			s.log.Warn("a session's operation was left by a replica that went away: settling it", "session", se.ID, "state", se.State)
			s.sessions.adoptOp(ctx, fresh)
		}
		unlock()
	}
}

// replicaGoneFor is how long the leader must have seen a replica's lease unchanged (not renewed, or
// absent) before it takes the replica for gone and fails the snapshots it left "writing". It judges by
// what it sees change over its own clock, not by comparing the lease's expiry with it, so clocks that
// disagree cannot fail a live replica's snapshots. A replica with no lease (one from before replicas held
// them, or one that shut down) must also have made the snapshot replicaUnknownAfter ago.
const (
	replicaGoneFor      = time.Minute
	replicaUnknownAfter = 10 * time.Minute
)

// leaseSeen is how a replica's lease looked to the leader, and since when it has looked so.
type leaseSeen struct {
	state string
	since time.Time
}

// settleOrphanSnapshots fails the snapshots left "writing" by replicas that went away (killed, never
// started again): a replica that starts again does this for its own (reconcileSessions). Their chunks
// are orphans for GC. (The leader runs it.)
func (s *loops) settleOrphanSnapshots() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := s.now()
	s.replicaMu.Lock()
	defer s.replicaMu.Unlock()
	if s.replicaSeen == nil {
		s.replicaSeen = map[string]leaseSeen{}
	}
	looked := map[string]string{} // this round's look at each replica's lease ("" if it failed)
	isGone := func(replica string, created time.Time) bool {
		state, ok := looked[replica]
		if !ok {
			l, err := s.store.GetLease(ctx, replicaLease(replica))
			switch {
			case err == nil:
				state = fmt.Sprintf("held by %s, token %d, until %d", l.Holder, l.Token, l.ExpiresAt.UnixNano())
			case errors.Is(err, errdefs.ErrNotFound):
				state = "absent"
			default:
				s.log.Error("settle snapshots: replica lease", "replica", replica, "err", err)
			}
			looked[replica] = state
			if seen, ok := s.replicaSeen[replica]; state != "" && (!ok || seen.state != state) {
				s.replicaSeen[replica] = leaseSeen{state: state, since: now}
			}
		}
		seen := s.replicaSeen[replica]
		if state == "" || now.Sub(seen.since) < replicaGoneFor {
			return false
		}
		return state != "absent" || now.Sub(created) >= replicaUnknownAfter
	}
	// Stores are the nodes' work, reported to any replica: only a node removed for good leaves some
	// never to be stored.
	s.book.failSnapshotsOfRemovedNodes(ctx)
	sns, err := s.store.ListSnapshotsByState(ctx, []store.SnapshotState{store.SnapshotWriting}, store.MaxListLimit)
	if err != nil {
		s.log.Error("settle snapshots: list", "err", err)
		return
	}
	for _, sn := range sns {
		r := sn.Meta[snapshotReplicaMeta]
		if r == "" || r == s.replica || now.Sub(sn.CreatedAt) < opLeaseTTL || !isGone(r, sn.CreatedAt) {
			continue
		}
		s.log.Warn("a snapshot was left writing by a replica that went away: failing it", "snapshot", sn.ID, "replica", r)
		if _, err := s.book.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
			if sn.State != store.SnapshotWriting {
				return errdefs.ErrConflict
			}
			sn.State, sn.Reason = store.SnapshotFailed, "interrupted: replica "+r+" went away while it was written"
			return nil
		}); err != nil {
			if !errors.Is(err, errdefs.ErrConflict) {
				s.log.Error("settle snapshots", "snapshot", sn.ID, "err", err)
			}
			continue
		}
		if s.snapshots != nil {
			_ = s.snapshots.Delete(ctx, sn.TenantID, sn.ID) // a manifest, if it got that far
		}
	}
}

// adoptOp settles session se, left mid-operation by a replica that went away, as a restart would: a
// pause whose sandbox runs on runs on, one whose node took the sandbox is paused at its snapshot; a sandbox a create, resume or fork booted that the
// session does not run in is destroyed. The caller holds se's lock.
func (s *sessions) adoptOp(ctx context.Context, se store.Session) {
	if se.State == store.SessionPausing && se.SandboxID != "" {
		// A pause whose teardown the Store forgot (lost.go) left a record of a sandbox its node no longer
		// has: failed, it is not thawed below, and the session is paused at its latest snapshot.
		// (A snapshot that failed lets the sandbox run on; one that succeeded destroyed it.)
		s.sandboxes.failIfLost(ctx, se.TenantID, se.SandboxID)
	}
	if err := s.reconcileSessionLocked(ctx, se); err != nil {
		s.log.Error("settle a session left mid-operation", "session", se.ID, "err", err)
	}
	fresh, err := s.store.GetSession(ctx, se.TenantID, se.ID)
	if err != nil {
		return
	}
	sbs, _, err := s.store.ListSandboxes(ctx, se.TenantID, store.SandboxFilter{States: []store.SandboxState{store.StateCreating, store.StateRunning},
		Metadata: map[string]string{SessionMetadataKey: se.ID}, Limit: store.MaxListLimit})
	if err != nil {
		s.log.Error("settle a session left mid-operation: its sandboxes", "session", se.ID, "err", err)
		return
	}
	for _, sb := range sbs {
		if sb.ID != fresh.SandboxID {
			s.log.Info("destroying a sandbox a replica that went away left", "session", se.ID, "sandbox", sb.ID)
			s.endSessionSandbox(ctx, se.TenantID, sb.ID, "its session's operation was interrupted", true)
		}
	}
}
