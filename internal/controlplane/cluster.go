package controlplane

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
)

// nodeDocPrefix starts the keys of the node registry's documents: nodeDocPrefix + the node's ID.
const nodeDocPrefix = "cluster/nodes/"

// NodeRecord is a node that joined the cluster.
type NodeRecord struct {
	ID    string   `json:"id"`
	Hosts []string `json:"hosts"`
	// JoinedAt is when it last joined; JoinToken the ID of the join token it used.
	JoinedAt  time.Time `json:"joined_at"`
	JoinToken string    `json:"join_token"`
	// CertExpiresAt is when the certificate it was given expires; CertFingerprint names that
	// certificate (an earlier one of the node's is no longer its own once it joined again).
	CertExpiresAt   time.Time `json:"cert_expires_at"`
	CertFingerprint string    `json:"cert_fingerprint"`
	// PrevCertFingerprint is the certificate the node renewed from, still its own until it first
	// calls with the new one (a renewal whose answer was lost must not lock the node out).
	PrevCertFingerprint string `json:"prev_cert_fingerprint,omitempty"`
	// Bound is the most the node is trusted to offer: placement uses what it reports in its heartbeats
	// only up to this, so a node taken over cannot draw in more sandboxes (and their tenants' secrets)
	// than it was given. The operator sets it (SetNodeBound); until then, its first heartbeat after it
	// joined sets it to what it reported then.
	Bound *nodecontract.Capacity `json:"bound,omitempty"`
	// Draining says no sandbox is to be placed on it any more: the operator is taking it out
	// (DrainNode).
	Draining bool `json:"draining,omitempty"`
	// Live is its latest heartbeat (nil: none yet), filled in by ListNodes; not stored here.
	Live *NodeLive `json:"-"`
	// Up reports whether it was heard from within NodeDownAfter (ListNodes).
	Up bool `json:"-"`
	// Placed is how many of the Store's sandboxes are on it, creating, running or stopping (ListNodes;
	// not stored here): what placement counts, not what its last heartbeat said.
	Placed int `json:"-"`
	// Warnings are what the operator should know of it (ListNodes; not stored): nodes that share its
	// host and, with it, offer more than the host has.
	Warnings []string `json:"-"`
}

// JoinRequest is a node asking to join the cluster.
type JoinRequest struct {
	// Token is the join token (cluster.UseJoinToken); a node that proves it is the node of its ID
	// (Proof) needs none.
	Token  string
	NodeID string
	// CSR is a PEM certificate signing request for the node's key.
	CSR []byte
	// Hosts are the names and addresses control planes reach the node at, put in its certificate.
	Hosts []string
	// Proof, if set, proves that the node holds the key of the certificate recorded for NodeID: the
	// node itself re-joins (the same host, set up again, or its certificate expired), and keeps what the
	// operator set of it (its bound, draining).
	Proof *cluster.JoinProof
	// Replace asks to take the place of a node that joined with NodeID before, without its key: only
	// with a join token the operator made for that ID to replace it (the operator's approval). Another
	// token's holder cannot take a node's identity.
	Replace bool
}

// Joined is what a node gets for joining: its certificate, and the cluster CA's to trust.
type Joined struct {
	CertPEM, CAPEM []byte
	Node           NodeRecord
}

func (s *placer) clusterCA() (*cluster.CA, error) {
	if s.ca == nil {
		return nil, fmt.Errorf("this server runs no cluster of nodes: %w", errdefs.ErrFailedPrecondition)
	}
	return s.ca, nil
}

// CreateJoinToken makes a join token as o says (cluster.CreateJoinToken), with which nodes join the cluster.
func (s *placer) CreateJoinToken(ctx context.Context, o cluster.JoinTokenOptions) (string, cluster.JoinToken, error) {
	if _, err := s.clusterCA(); err != nil {
		return "", cluster.JoinToken{}, err
	}
	if slices.Contains(o.NodeIDs, nodecontract.LocalID) {
		return "", cluster.JoinToken{}, fmt.Errorf("node ID %s is the control plane's own node's: %w", nodecontract.LocalID, errdefs.ErrInvalidArgument)
	}
	return cluster.CreateJoinToken(ctx, s.store, o)
}

// ListJoinTokens reports the join tokens, expired ones included.
func (s *placer) ListJoinTokens(ctx context.Context) ([]cluster.JoinToken, error) {
	if _, err := s.clusterCA(); err != nil {
		return nil, err
	}
	return cluster.ListJoinTokens(ctx, s.store)
}

// DeleteJoinToken revokes a join token.
func (s *placer) DeleteJoinToken(ctx context.Context, id string) error {
	if _, err := s.clusterCA(); err != nil {
		return err
	}
	return cluster.DeleteJoinToken(ctx, s.store, id)
}

// RemoveNode forgets a node that is gone for good (its host lost): its record and its last heartbeat are
// deleted, so its certificate is let in no more (CheckNode), it is no longer listed, and the uploads of
// snapshots it saved but never stored fail. A node up is refused (stop it first: on SIGTERM its
// sandboxes move), and so is one with sandboxes the Store still has on it (the leader fails them over
// once the node is down for NodeDownAfter; try again then). To bring the host back, join it again.
func (s *placer) RemoveNode(ctx context.Context, id string) error {
	if _, err := s.clusterCA(); err != nil {
		return err
	}
	if err := cluster.CheckID(id); err != nil || id == nodecontract.LocalID {
		return fmt.Errorf("node ID %q: not a node that joined: %w", id, errdefs.ErrInvalidArgument)
	}
	rec, err := s.nodeRecord(ctx, id)
	if err != nil {
		return err
	}
	if l, err := s.nodeLive(ctx, id); err == nil && l.Up(s.now()) {
		return fmt.Errorf("node %s is up (heard from %s ago): stop it first (airlock node run stops on SIGTERM, and its sandboxes move): %w",
			id, s.now().Sub(l.SeenAt).Round(time.Second), errdefs.ErrFailedPrecondition)
	} else if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	sbs, err := s.sandboxesOnNode(ctx, id, activeSandbox)
	if err != nil {
		return err
	}
	if len(sbs) > 0 {
		return fmt.Errorf("node %s still has %d sandboxes in the Store (%s first): they are failed over once it is down for %s; try again then: %w",
			id, len(sbs), sbs[0].ID, NodeDownAfter, errdefs.ErrFailedPrecondition)
	}
	// The heartbeat first: a node with a record and no heartbeat is "new", never "removed".
	for _, key := range []string{liveDocPrefix + id, nodeDocPrefix + rec.ID} {
		if err := deleteDoc(ctx, s.store, key); err != nil {
			return fmt.Errorf("remove node %s: %w", id, err)
		}
	}
	s.nodes.forget(id)
	s.log.Warn("node removed", "node", id, "hosts", rec.Hosts)
	return nil
}

// JoinNode records a node and issues its certificate. A new node ID needs a join token that lets it join
// (cluster.UseJoinToken), which it uses up. An ID a node joined with is the node's: it re-joins with the
// proof of the key of the certificate recorded for it (req.Proof), keeping its bound and draining; anyone
// else is refused, ErrAlreadyExists (409) without Replace and ErrPermissionDenied (403) with it, unless
// the join token is one the operator made to replace that ID.
func (s *placer) JoinNode(ctx context.Context, req JoinRequest) (Joined, error) {
	ca, err := s.clusterCA()
	if err != nil {
		return Joined{}, err
	}
	if err := cluster.CheckID(req.NodeID); err != nil {
		return Joined{}, fmt.Errorf("node ID: %w", err)
	}
	if req.NodeID == nodecontract.LocalID {
		// The node in a control plane's process has it: a joined node by that name would be answered
		// for its sandboxes (nodecalls.go).
		return Joined{}, fmt.Errorf("node ID %s is the control plane's own node's: %w", req.NodeID, errdefs.ErrInvalidArgument)
	}
	// What is wrong with the request is said before any token is used up.
	if _, err := cluster.ParseCSR(req.CSR); err != nil {
		return Joined{}, err
	}
	if err := cluster.CheckHosts(req.Hosts); err != nil {
		return Joined{}, err
	}
	key := nodeDocPrefix + req.NodeID
	old, err := s.store.GetDoc(ctx, key)
	var prev *NodeRecord
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		old = store.Doc{Key: key}
	case err != nil:
		return Joined{}, fmt.Errorf("node %s: %w", req.NodeID, err)
	default:
		prev = new(NodeRecord)
		if err := json.Unmarshal(old.Value, prev); err != nil {
			return Joined{}, fmt.Errorf("node record %s: %w", key, err)
		}
	}
	rec := NodeRecord{ID: req.NodeID, Hosts: append([]string{}, req.Hosts...), JoinedAt: s.now().UTC(),
		CertExpiresAt: s.now().UTC().Add(cluster.CertLifetime)}
	how := "token"
	var proofErr error
	if prev != nil && req.Proof != nil {
		if proofErr = s.checkJoinProof(*prev, req); proofErr == nil {
			// The node itself: what the operator set of it stays.
			how, rec.JoinToken, rec.Bound, rec.Draining = "proof", prev.JoinToken, prev.Bound, prev.Draining
		}
	}
	switch {
	case how == "proof":
	case prev != nil && !req.Replace && proofErr != nil:
		return Joined{}, proofErr
	case prev != nil && !req.Replace:
		return Joined{}, fmt.Errorf("a node with ID %s joined already: it re-joins from its host (node join finds its key in the data directory "+
			"and proves it), or the operator approves a new host for it with a join token made to replace it (node token create --node-id %s --replace): %w",
			req.NodeID, req.NodeID, errdefs.ErrAlreadyExists)
	default:
		if req.Token == "" {
			return Joined{}, fmt.Errorf("no join token: node %s needs one to join (a new node) or to be replaced; only a node that joined "+
				"re-joins without one, with the proof of its key: %w", req.NodeID, errdefs.ErrPermissionDenied)
		}
		tok, err := cluster.UseJoinToken(ctx, s.store, req.Token, req.NodeID, prev != nil)
		if err != nil {
			return Joined{}, err
		}
		rec.JoinToken = tok.ID
		if prev != nil {
			how = "replace"
		}
	}
	j, err := s.recordJoin(ctx, ca, old, rec, req.CSR)
	if err != nil {
		if how != "proof" {
			// The join did not go through: the token's use is given back.
			if rerr := cluster.ReleaseJoinToken(context.WithoutCancel(ctx), s.store, rec.JoinToken, req.NodeID); rerr != nil {
				s.log.Warn("give back a join token's use", "join_token", rec.JoinToken, "node", req.NodeID, "err", rerr)
			}
		}
		return Joined{}, err
	}
	s.nodes.rejoined(req.NodeID)
	s.log.Info("node joined", "node", req.NodeID, "hosts", req.Hosts, "join_token", rec.JoinToken, "by", how)
	return j, nil
}

// checkJoinProof checks a join's proof that the node holds the key of the certificate recorded for it:
// its current one, or the one it renewed from (its own until it first used the new one).
func (s *placer) checkJoinProof(rec NodeRecord, req JoinRequest) error {
	fp, err := cluster.VerifyJoinProof(*req.Proof, req.NodeID, req.CSR, req.Hosts, s.now())
	if err != nil {
		return fmt.Errorf("node %s: %w", req.NodeID, err)
	}
	if cur, prev := rec.certIs(fp); !cur && !prev {
		return fmt.Errorf("node %s: join proof: its certificate is not the one node %s was last given (it joined again since, or was replaced): %w",
			req.NodeID, req.NodeID, errdefs.ErrPermissionDenied)
	}
	return nil
}

// recordJoin issues the certificate of a node that may join, and records rec with its fingerprint in old
// (compare-and-swap: of nodes joining with one ID at once, one wins).
func (s *placer) recordJoin(ctx context.Context, ca *cluster.CA, old store.Doc, rec NodeRecord, csr []byte) (Joined, error) {
	certPEM, err := ca.IssueCSR(cluster.Identity{Role: cluster.RoleNode, ID: rec.ID}, csr, rec.Hosts)
	if err != nil {
		return Joined{}, err
	}
	block, _ := pem.Decode(certPEM)
	rec.CertFingerprint = cluster.CertFingerprint(block.Bytes)
	if old.Value, err = json.Marshal(rec); err != nil {
		return Joined{}, err
	}
	if _, err := s.store.PutDoc(ctx, old); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) || errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrNotFound) {
			return Joined{}, fmt.Errorf("another node joined as %s meanwhile (or it was removed): %w", rec.ID, errdefs.ErrAlreadyExists)
		}
		return Joined{}, fmt.Errorf("record node %s: %w", rec.ID, err)
	}
	return Joined{CertPEM: certPEM, CAPEM: ca.CertPEM(), Node: rec}, nil
}

// ClusterFingerprint is the cluster CA certificate's fingerprint, which joining nodes can pin.
func (s *placer) ClusterFingerprint() (string, error) {
	ca, err := s.clusterCA()
	if err != nil {
		return "", err
	}
	return ca.Fingerprint(), nil
}

// ListNodes reports the nodes that joined the cluster, by ID.
func (s *placer) ListNodes(ctx context.Context) ([]NodeRecord, error) {
	if _, err := s.clusterCA(); err != nil {
		return nil, err
	}
	ds, err := s.store.ListDocs(ctx, nodeDocPrefix)
	if err != nil {
		return nil, err
	}
	live, err := s.liveNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]NodeRecord, 0, len(ds))
	for _, d := range ds {
		var n NodeRecord
		if err := json.Unmarshal(d.Value, &n); err != nil {
			return nil, fmt.Errorf("node record %s: %w", d.Key, err)
		}
		if n, err = s.withLive(ctx, n, live); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	warn := hostWarnings(out)
	for i := range out {
		out[i].Warnings = warn[out[i].ID]
	}
	return out, nil
}

// nodeView returns rec with what ListNodes adds to it (but its warnings).
func (s *placer) nodeView(ctx context.Context, rec NodeRecord) (NodeRecord, error) {
	live := map[string]NodeLive{}
	if l, err := s.nodeLive(ctx, rec.ID); err == nil {
		live[rec.ID] = l
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return rec, err
	}
	return s.withLive(ctx, rec, live)
}

// withLive fills in n's latest heartbeat (from live), whether it is up, and its sandboxes.
func (s *placer) withLive(ctx context.Context, n NodeRecord, live map[string]NodeLive) (NodeRecord, error) {
	if l, ok := live[n.ID]; ok {
		n.Live, n.Up = &l, l.Up(s.now())
	}
	sbs, err := s.sandboxesOnNode(ctx, n.ID, activeSandbox)
	if err != nil {
		return n, err
	}
	n.Placed = len(sbs)
	return n, nil
}

// deleteDoc deletes the document key, whatever its version (retried while it changes); one missing is
// no error.
func deleteDoc(ctx context.Context, st store.Store, key string) error {
	for range 8 {
		d, err := st.GetDoc(ctx, key)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		err = st.DeleteDoc(ctx, key, d.Version)
		if err == nil || errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		if !errors.Is(err, errdefs.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("%s changes too often: %w", key, errdefs.ErrConflict)
}
