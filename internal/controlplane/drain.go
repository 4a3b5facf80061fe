package controlplane

// Draining a node: the operator takes it out of placement and moves its sessions to other nodes with
// nothing lost, before taking its host down.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// DrainReport is what DrainNode did.
type DrainReport struct {
	Node NodeRecord
	// Moved are the sessions that now run on another node; NotMoved those that did not (paused if their
	// pause went through, else still running on the node), with why.
	Moved    []MovedSession
	NotMoved []MovedSession
	// Sandboxes are the node's sandboxes of no session: they cannot move, and run until they end or are
	// deleted.
	Sandboxes []string
}

// MovedSession is a session DrainNode moved (To: the node it runs on now) or could not (Reason).
type MovedSession struct {
	TenantID, SessionID string
	To, Reason          string
}

// DrainNode marks a node that joined as draining, so that no sandbox is placed on it any more, and moves
// each of its running sessions to another node: paused (a snapshot of its memory, processes and files,
// stored) and resumed elsewhere at once, so that nothing of its work is lost. A session that cannot be
// resumed elsewhere (no room, no other node up) stays paused. Sandboxes of no session stay; stop the node
// when they are done (or delete them). Draining a draining node moves what is still on it.
func (s *sessions) DrainNode(ctx context.Context, id string) (DrainReport, error) {
	rec, err := s.placer.setDraining(ctx, id, true)
	if err != nil {
		return DrainReport{}, err
	}
	s.log.Warn("node draining", "node", id)
	rep := DrainReport{Node: rec}
	sbs, err := s.placer.sandboxesOnNode(ctx, id, []store.SandboxState{store.StateRunning})
	if err != nil {
		return rep, fmt.Errorf("drain node %s: %v: %w", id, err, errdefs.ErrUnavailable)
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		slot = make(chan struct{}, drainAtOnce)
	)
	for _, sb := range sbs {
		seID := sb.Metadata[SessionMetadataKey]
		if seID == "" {
			rep.Sandboxes = append(rep.Sandboxes, sb.ID)
			continue
		}
		wg.Add(1)
		slot <- struct{}{}
		go func() { // owner: DrainNode; ends when the session moved or did not
			defer func() { <-slot; wg.Done() }()
			m := MovedSession{TenantID: sb.TenantID, SessionID: seID}
			var err error
			m.To, err = s.moveSession(ctx, sb.TenantID, seID, id)
			if err != nil {
				m.Reason = err.Error()
				s.log.Warn("session not moved off a draining node", "node", id, "session", seID, "err", err)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				rep.NotMoved = append(rep.NotMoved, m)
			case m.To != "":
				rep.Moved = append(rep.Moved, m)
			}
		}()
	}
	wg.Wait()
	for _, l := range [][]MovedSession{rep.Moved, rep.NotMoved} {
		slices.SortFunc(l, func(a, b MovedSession) int { return strings.Compare(a.SessionID, b.SessionID) })
	}
	return rep, nil
}

// drainAtOnce bounds the sessions a drain moves at a time.
const drainAtOnce = 4

// UndrainNode lets sandboxes be placed on a draining node again.
func (s *placer) UndrainNode(ctx context.Context, id string) (NodeRecord, error) {
	rec, err := s.setDraining(ctx, id, false)
	if err == nil {
		s.log.Info("node no longer draining", "node", id)
	}
	return rec, err
}

// moveSession pauses session seID if it runs on node from and resumes it on another, and reports where
// ("": it was not running there any more, nothing to do).
func (s *sessions) moveSession(ctx context.Context, tenantID, seID, from string) (string, error) {
	unlock := s.lockSession(seID)
	defer unlock()
	se, err := s.GetSession(ctx, tenantID, seID)
	if err != nil {
		return "", err
	}
	if se.State != store.SessionRunning {
		return "", nil
	}
	sb, err := s.sandboxes.GetSandbox(ctx, tenantID, se.SandboxID)
	if err != nil || sb.NodeID != from {
		return "", nil // gone or elsewhere already
	}
	ctx = context.WithoutCancel(ctx)
	if se, err = s.pauseLocked(ctx, se, "moved off draining node "+from); err != nil {
		return "", fmt.Errorf("pause: %w", err)
	}
	// Another node restores only what the store holds: wait for the upload of the pause's snapshot.
	sn, err := s.store.GetSnapshot(ctx, tenantID, se.HeadSnapshotID)
	if err == nil {
		_, err = s.book.waitStored(ctx, sn)
	}
	if err != nil {
		return "", fmt.Errorf("paused, not resumed elsewhere: %w", err)
	}
	if se, err = s.resumeLocked(ctx, se); err != nil {
		return "", fmt.Errorf("paused, not resumed elsewhere: %w", err)
	}
	sb, err = s.sandboxes.GetSandbox(ctx, tenantID, se.SandboxID)
	if err != nil {
		return "", err
	}
	s.log.Info("session moved off a draining node", "session", seID, "from", from, "to", sb.NodeID)
	return sb.NodeID, nil
}

// setDraining sets whether a node that joined is draining.
func (s *placer) setDraining(ctx context.Context, id string, draining bool) (NodeRecord, error) {
	if _, err := s.clusterCA(); err != nil {
		return NodeRecord{}, err
	}
	if s.nodes.isLocal(id) {
		return NodeRecord{}, fmt.Errorf("node %s is the control plane's own: it cannot be drained (stop the control plane instead): %w", id, errdefs.ErrInvalidArgument)
	}
	rec, err := s.updateNodeRecord(ctx, id, func(r *NodeRecord) error {
		r.Draining = draining
		return nil
	})
	if err != nil {
		return NodeRecord{}, err
	}
	return s.nodeView(ctx, rec)
}

// drainingNodes reports the nodes that joined and are draining.
func (s *placer) drainingNodes(ctx context.Context) (map[string]bool, error) {
	ds, err := s.store.ListDocs(ctx, nodeDocPrefix)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range ds {
		var rec NodeRecord
		if err := json.Unmarshal(d.Value, &rec); err != nil {
			return nil, fmt.Errorf("node record %s: %w", d.Key, err)
		}
		if rec.Draining {
			out[rec.ID] = true
		}
	}
	return out, nil
}
