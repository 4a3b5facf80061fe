package controlplane

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
)

// The calls nodes in processes of their own make (nodeapi.Control). A node is trusted with the tenants
// whose sandboxes run on it, and with those sandboxes' credential bindings: nothing more. Every refusal
// is the same permission denied, so that a node learns nothing of other tenants' sandboxes.

// maxNodeDataKey bounds the keys a node has wrapped.
const maxNodeDataKey = 512

var errNotYours = fmt.Errorf("no such sandbox on this node: %w", errdefs.ErrPermissionDenied)

// CheckNode checks that the caller is a node of the cluster by its latest certificate: nodeID joined
// and was last given the certificate of that fingerprint (a certificate from before the node joined
// again is no longer its own), and is not named as a control plane's in-process node.
func (s *nodeCalls) CheckNode(ctx context.Context, nodeID, fingerprint string) error {
	refused := fmt.Errorf("not a node of this cluster, or not its current certificate: %w", errdefs.ErrPermissionDenied)
	if nodeID == "" || nodeID == nodecontract.LocalID {
		return refused
	}
	d, err := s.store.GetDoc(ctx, nodeDocPrefix+nodeID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return refused
	}
	if err != nil {
		return fmt.Errorf("node %s: %v: %w", nodeID, err, errdefs.ErrUnavailable)
	}
	var rec NodeRecord
	if err := json.Unmarshal(d.Value, &rec); err != nil || rec.CertFingerprint == "" {
		return refused
	}
	current, prev := rec.certIs(fingerprint)
	if !current && !prev {
		return refused
	}
	if current && rec.PrevCertFingerprint != "" {
		// The renewed certificate is in use: the one before it is no longer the node's. (A lost race
		// with another write leaves it for the next call.)
		rec.PrevCertFingerprint = ""
		if d.Value, err = json.Marshal(rec); err == nil {
			_, _ = s.store.PutDoc(ctx, d)
		}
	}
	return nil
}

// certIs reports whether the certificate of fingerprint is r's current one, or the one it renewed from
// (its own until the current one is first used).
func (r NodeRecord) certIs(fingerprint string) (current, prev bool) {
	current = r.CertFingerprint != "" && subtle.ConstantTimeCompare([]byte(r.CertFingerprint), []byte(fingerprint)) == 1
	prev = r.PrevCertFingerprint != "" && subtle.ConstantTimeCompare([]byte(r.PrevCertFingerprint), []byte(fingerprint)) == 1
	return current, prev
}

// lookupNodeSandbox returns the sandbox of tenantID that nodeID ran or runs; a store failure is
// unavailable (the node tries again), anything else not the node's.
func (s *nodeCalls) lookupNodeSandbox(ctx context.Context, nodeID, tenantID, sandboxID string) (store.Sandbox, error) {
	if nodeID == "" || tenantID == "" || sandboxID == "" {
		return store.Sandbox{}, errNotYours
	}
	sb, err := s.store.GetSandbox(ctx, tenantID, sandboxID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument):
		return store.Sandbox{}, errNotYours
	case err != nil:
		return store.Sandbox{}, fmt.Errorf("sandbox %s: %v: %w", sandboxID, err, errdefs.ErrUnavailable)
	case sb.NodeID != nodeID:
		return store.Sandbox{}, errNotYours
	}
	return sb, nil
}

// nodeSandbox returns the sandbox of tenantID that nodeID runs (creating, running or stopping).
func (s *nodeCalls) nodeSandbox(ctx context.Context, nodeID, tenantID, sandboxID string) (store.Sandbox, error) {
	sb, err := s.lookupNodeSandbox(ctx, nodeID, tenantID, sandboxID)
	if err != nil {
		return sb, err
	}
	switch sb.State {
	case store.StateCreating, store.StateRunning, store.StateStopping:
		return sb, nil
	}
	return store.Sandbox{}, errNotYours
}

// nodeBinding checks that the sandbox's egress policy has a credential binding of the secret (or, with
// connection, of the OAuth connection) name.
func (s *nodeCalls) nodeBinding(ctx context.Context, nodeID, tenantID, sandboxID, name string, connection bool) error {
	sb, err := s.nodeSandbox(ctx, nodeID, tenantID, sandboxID)
	if err != nil {
		return err
	}
	p, err := NetworkPolicy(sb)
	if err != nil {
		return err
	}
	for _, c := range p.Credentials {
		if (connection && c.Connection == name) || (!connection && c.Connection == "" && c.Secret == name) {
			return nil
		}
	}
	return fmt.Errorf("sandbox %s binds no such credential: %w", sandboxID, errdefs.ErrPermissionDenied)
}

// NodeSecret returns a secret the policy of a sandbox on the node binds.
func (s *nodeCalls) NodeSecret(ctx context.Context, nodeID, tenantID, sandboxID, name string) ([]byte, error) {
	if s.secrets == nil {
		return nil, fmt.Errorf("no secret store: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.nodeBinding(ctx, nodeID, tenantID, sandboxID, name, false); err != nil {
		return nil, err
	}
	return s.secrets.Reveal(ctx, tenantID, name)
}

// NodeToken returns the access token of an OAuth connection the policy of a sandbox on the node binds.
func (s *nodeCalls) NodeToken(ctx context.Context, nodeID, tenantID, sandboxID, connection string) ([]byte, error) {
	if s.connections == nil {
		return nil, fmt.Errorf("no OAuth connections: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.nodeBinding(ctx, nodeID, tenantID, sandboxID, connection, true); err != nil {
		return nil, err
	}
	return s.connections.Token(ctx, tenantID, connection)
}

// nodeKeyPurpose prefixes every data key a node has wrapped: what a node unwraps must be a key it
// wrapped itself for this purpose, never one of the tenant's other keys (snapshots', secrets') that
// the same key-encryption key wraps.
func nodeKeyPurpose(nodeID string) []byte { return []byte("airlock/node-ca\x00" + nodeID + "\x00") }

// NodeWrapKey wraps a data key of the node's (an interception CA's) under the tenant's key, bound to
// the node: only NodeUnwrapKey for the same node gives it back.
func (s *nodeCalls) NodeWrapKey(ctx context.Context, nodeID, tenantID string, dek []byte) ([]byte, string, error) {
	if s.keyProvider == nil {
		return nil, "", fmt.Errorf("no key provider: %w", errdefs.ErrFailedPrecondition)
	}
	// What nodes wrap is their interception CAs' private keys (an ECDSA P-256 key in DER: 138 bytes).
	if len(dek) == 0 || len(dek) > maxNodeDataKey {
		return nil, "", fmt.Errorf("a data key of %d bytes (1 to %d): %w", len(dek), maxNodeDataKey, errdefs.ErrInvalidArgument)
	}
	// The key provider makes a tenant's key on first use: only for tenants that exist.
	if _, err := s.store.GetTenant(ctx, tenantID); errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument) {
		return nil, "", errNotYours
	} else if err != nil {
		return nil, "", fmt.Errorf("tenant: %v: %w", err, errdefs.ErrUnavailable)
	}
	bound := append(nodeKeyPurpose(nodeID), dek...)
	defer clear(bound)
	return s.keyProvider.WrapKey(ctx, tenantID, bound)
}

// NodeUnwrapKey unwraps a data key NodeWrapKey wrapped for the same node; any other wrapped key of
// the tenant's is refused.
func (s *nodeCalls) NodeUnwrapKey(ctx context.Context, nodeID, tenantID, keyID string, wrapped []byte) ([]byte, error) {
	if s.keyProvider == nil {
		return nil, fmt.Errorf("no key provider: %w", errdefs.ErrFailedPrecondition)
	}
	bound, err := s.keyProvider.UnwrapKey(ctx, tenantID, keyID, wrapped)
	if err != nil {
		return nil, err
	}
	defer clear(bound)
	prefix := nodeKeyPurpose(nodeID)
	if !bytes.HasPrefix(bound, prefix) {
		return nil, fmt.Errorf("not a key this node wrapped: %w", errdefs.ErrPermissionDenied)
	}
	return bytes.Clone(bound[len(prefix):]), nil
}

// Bounds of what a node's audit entry may carry.
const (
	maxNodeAuditField  = 1 << 10
	maxNodeAuditDetail = 16 << 10
)

// NodeAudit appends the node's daemon and egress entries to their tenants' audit logs. An entry must
// be of one of those kinds and name, as its actor, a sandbox of its tenant that ran on the node (in any
// state: the last flows end as a sandbox goes); others are dropped and logged, the rest kept. Fields
// are cut to bounds.
func (s *nodeCalls) NodeAudit(ctx context.Context, nodeID string, entries []store.AuditEntry) error {
	if s.audit == nil {
		return fmt.Errorf("no audit log: %w", errdefs.ErrFailedPrecondition)
	}
	ok := map[[2]string]bool{}
	keep := make([]store.AuditEntry, 0, len(entries))
	refused := 0
	for _, e := range entries {
		if e.Kind != store.AuditDaemon && e.Kind != store.AuditEgress {
			refused++
			continue
		}
		k := [2]string{e.TenantID, e.Actor}
		mine, seen := ok[k]
		if !seen {
			_, err := s.lookupNodeSandbox(ctx, nodeID, e.TenantID, e.Actor)
			if err != nil && !errors.Is(err, errdefs.ErrPermissionDenied) {
				return err // the store failed: the node sends the batch again
			}
			mine = err == nil
			ok[k] = mine
		}
		if !mine {
			refused++
			continue
		}
		e.Seq, e.Prev, e.Hash = 0, "", ""
		e.Action, e.Target, e.Result = truncate(e.Action, maxNodeAuditField), truncate(e.Target, maxNodeAuditField), truncate(e.Result, maxNodeAuditField)
		e.Detail = truncate(e.Detail, maxNodeAuditDetail)
		keep = append(keep, e)
	}
	if refused > 0 {
		s.log.Warn("audit entries from a node refused: of another kind, or of no sandbox of the node's", "node", nodeID, "refused", refused, "kept", len(keep))
	}
	for _, e := range keep {
		s.audit(e)
	}
	return nil
}

// NodeSandboxExit handles a node's report that one of its sandboxes stopped by itself.
func (s *nodeCalls) NodeSandboxExit(ctx context.Context, nodeID, sandboxID, reason string) error {
	sb, err := s.store.GetSandboxAnyTenant(ctx, sandboxID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument):
		return errNotYours
	case err != nil:
		return fmt.Errorf("sandbox %s: %v: %w", sandboxID, err, errdefs.ErrUnavailable)
	case sb.NodeID != nodeID:
		return errNotYours
	}
	go s.sandboxes.sandboxExited(nodeID, sandboxID, truncateReason(reason))
	return nil
}

var (
	_ nodeapi.Control = (*Service)(nil)
	_ Node            = (*nodeapi.Client)(nil)
)
