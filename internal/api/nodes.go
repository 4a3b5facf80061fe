package api

import (
	"net/http"
	"regexp"
	"time"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

var joinTokenIDPattern = regexp.MustCompile(`^[a-z2-7]{16}$`)

// defaultJoinTokenTTL is a join token's lifetime when the request names none.
const defaultJoinTokenTTL = 24 * time.Hour

func toJoinToken(t cluster.JoinToken) wire.JoinToken {
	joined := t.Joined
	if joined == nil {
		joined = []string{}
	}
	return wire.JoinToken{ID: t.ID, Description: t.Description, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt,
		NodeIDs: t.NodeIDs, NodePrefix: t.NodePrefix, Uses: t.MaxUses(), Joined: joined, Replace: t.Replace}
}

func toNode(n controlplane.NodeRecord) wire.Node {
	out := wire.Node{ID: n.ID, Hosts: n.Hosts, JoinedAt: n.JoinedAt, JoinToken: n.JoinToken, CertExpiresAt: n.CertExpiresAt,
		CertFingerprint: n.CertFingerprint, State: "new", Sandboxes: n.Placed, Warnings: n.Warnings, Draining: n.Draining}
	if l := n.Live; l != nil {
		out.State = "down"
		if n.Up {
			out.State = "up"
			if n.Draining {
				out.State = "draining"
			}
		}
		seen := l.SeenAt
		out.Addr, out.LastSeenAt, out.ReportedSandboxes, out.Version, out.Host = l.Addr, &seen, l.Sandboxes, l.Version, l.Host
		out.Capacity = toNodeCapacity(l.Capacity)
		for _, r := range l.Runtimes {
			out.Runtimes = append(out.Runtimes, wire.NodeRuntime{Name: r.Name, Abilities: r.Abilities, Accel: r.Accel})
		}
		if l.Reported != (nodecontract.Capacity{}) {
			out.Reported = toNodeCapacity(l.Reported)
		}
	}
	if n.Bound != nil {
		out.Bound = toNodeCapacity(*n.Bound)
	}
	return out
}

func toNodeCapacity(c nodecontract.Capacity) *wire.NodeCapacity {
	return &wire.NodeCapacity{CPUMillicores: c.CPUMillicores, MemoryMB: c.MemoryMB, MaxSandboxes: c.MaxSandboxes}
}

func (s *Server) removeNode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := cluster.CheckID(id); err != nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "node %v", err))
		return
	}
	if err := s.cp.RemoveNode(r.Context(), id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) drainNode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := cluster.CheckID(id); err != nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "node %v", err))
		return
	}
	rep, err := s.cp.DrainNode(r.Context(), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.DrainReport{Node: toNode(rep.Node), Moved: []wire.MovedSession{}, NotMoved: []wire.MovedSession{}, Sandboxes: rep.Sandboxes}
	if out.Sandboxes == nil {
		out.Sandboxes = []string{}
	}
	for _, m := range rep.Moved {
		out.Moved = append(out.Moved, wire.MovedSession{TenantID: m.TenantID, SessionID: m.SessionID, To: m.To})
	}
	for _, m := range rep.NotMoved {
		out.NotMoved = append(out.NotMoved, wire.MovedSession{TenantID: m.TenantID, SessionID: m.SessionID, Reason: m.Reason})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) undrainNode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := cluster.CheckID(id); err != nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "node %v", err))
		return
	}
	rec, err := s.cp.UndrainNode(r.Context(), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toNode(rec))
}

func (s *Server) setNodeBound(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := cluster.CheckID(id); err != nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "node %v", err))
		return
	}
	var req wire.NodeCapacity
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	rec, err := s.cp.SetNodeBound(r.Context(), id, nodecontract.Capacity{CPUMillicores: req.CPUMillicores, MemoryMB: req.MemoryMB, MaxSandboxes: req.MaxSandboxes})
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toNode(rec))
}

func (s *Server) createJoinToken(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateJoinTokenRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	ttl := defaultJoinTokenTTL
	if req.TTLSeconds != 0 {
		if req.TTLSeconds < 0 || req.TTLSeconds > int64(cluster.MaxJoinTokenTTL/time.Second) {
			writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "ttl_seconds %d: want 1 to %d", req.TTLSeconds, int64(cluster.MaxJoinTokenTTL/time.Second)))
			return
		}
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	tok, t, err := s.cp.CreateJoinToken(r.Context(), cluster.JoinTokenOptions{TTL: ttl, Description: req.Description,
		NodeIDs: req.NodeIDs, NodePrefix: req.NodePrefix, Uses: req.Uses, Replace: req.Replace})
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	fp, err := s.cp.ClusterFingerprint()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, wire.CreatedJoinToken{JoinToken: toJoinToken(t), Token: tok, CAFingerprint: fp})
}

func (s *Server) listJoinTokens(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	ts, err := s.cp.ListJoinTokens(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.JoinTokenList{JoinTokens: make([]wire.JoinToken, 0, len(ts))}
	for _, t := range ts {
		out.JoinTokens = append(out.JoinTokens, toJoinToken(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteJoinToken(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, joinTokenIDPattern, "join token", "16 characters of a-z and 2-7")
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := s.cp.DeleteJoinToken(r.Context(), id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	ns, err := s.cp.ListNodes(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.NodeList{Nodes: make([]wire.Node, 0, len(ns))}
	for _, n := range ns {
		out.Nodes = append(out.Nodes, toNode(n))
	}
	writeJSON(w, http.StatusOK, out)
}

// joinNode takes no API key: the join token in the body is the credential, or the proof of the key of
// the certificate the node was last given.
func (s *Server) joinNode(w http.ResponseWriter, r *http.Request) {
	var req wire.JoinRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var proof *cluster.JoinProof
	if p := req.Proof; p != nil {
		proof = &cluster.JoinProof{CertPEM: []byte(p.Certificate), SignedAt: p.SignedAt, Signature: p.Signature}
	}
	j, err := s.cp.JoinNode(r.Context(), controlplane.JoinRequest{Token: req.Token, NodeID: req.NodeID, CSR: []byte(req.CSR),
		Hosts: req.Hosts, Proof: proof, Replace: req.Replace})
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.JoinResponse{Node: toNode(j.Node), Certificate: string(j.CertPEM), CACertificate: string(j.CAPEM)})
}
