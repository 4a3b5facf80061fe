package controlplane

import (
	"context"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// Records that outlive their sandboxes. The Store says a sandbox runs; its node no longer has it. A
// teardown always records "stopping" before it asks the node, and a sandbox that exits on its own is
// reported by its node, so this happens only when the Store forgets what it acknowledged: PostgreSQL
// failed over to a standby the last commits had not reached, or a server run with synchronous_commit
// off crashed (docs/DEPLOY.md asks for neither). A session would then stay "running" in a sandbox that
// answers nothing. The leader compares, every lostSweepEvery, each reachable node's sandboxes with the
// Store's, and fails those the node lacks as lost with their node: their sessions go on from their
// latest stored snapshots (failover.go).

// lostSweepEvery is how often the leader looks for sandbox records their node has outlived.
const lostSweepEvery = 30 * time.Second

// lostReason is the reason a sandbox whose node no longer has it fails with.
func lostReason(nodeID string) string {
	return nodeLostReason + nodeID + " no longer has it (its record outlived it)"
}

// sweepLost fails, on every node up, the sandboxes the Store records running there that the node does
// not have. (The leader runs it.)
func (s *sandboxes) sweepLost() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	up, err := s.placer.nodesUp(ctx)
	if err != nil {
		s.log.Error("look for lost sandboxes: list nodes", "err", err)
		return
	}
	for id := range up {
		sbs, err := s.placer.sandboxesOnNode(ctx, id, []store.SandboxState{store.StateRunning})
		if err != nil {
			s.log.Error("look for lost sandboxes", "node", id, "err", err)
			continue
		}
		if len(sbs) == 0 {
			continue
		}
		for _, sbID := range s.lostOnNode(ctx, id, sbs) {
			s.sandboxExited(id, sbID, lostReason(id))
		}
	}
}

// lostOnNode returns the IDs of those of sbs, read from the Store as running on node nodeID before this
// call, that the node does not have. A node that does not answer has lost none. The caller fails them
// through handleSandboxExit, which reads each record again under its lock and leaves alone one that is
// no longer running (a teardown records "stopping" before it asks the node, so a sandbox running in the
// Store both before and after the node's answer, and absent from it, is gone without its record knowing).
func (s *sandboxes) lostOnNode(ctx context.Context, nodeID string, sbs []store.Sandbox) []string {
	n, err := s.placer.node(ctx, nodeID)
	if err != nil {
		return nil
	}
	ids, err := n.Sandboxes(ctx)
	if err != nil {
		return nil
	}
	has := make(map[string]bool, len(ids))
	for _, id := range ids {
		has[id] = true
	}
	var lost []string
	for _, sb := range sbs {
		if sb.State == store.StateRunning && sb.NodeID == nodeID && !has[sb.ID] {
			s.log.Warn("the Store says a sandbox runs that its node does not have: failing it", "node", nodeID, "sandbox", sb.ID)
			lost = append(lost, sb.ID)
		}
	}
	return lost
}

// failIfLost fails tenantID's sandbox sbID if the Store records it running and its node does not have
// it. Unlike sweepLost it leaves the sandbox's session to the caller, which holds the session's lock.
func (s *sandboxes) failIfLost(ctx context.Context, tenantID, sbID string) {
	sb, err := s.store.GetSandbox(ctx, tenantID, sbID)
	if err != nil || sb.State != store.StateRunning {
		return
	}
	if len(s.lostOnNode(ctx, sb.NodeID, []store.Sandbox{sb})) > 0 {
		s.handleSandboxExit(sb.NodeID, sb.ID, lostReason(sb.NodeID))
	}
}
