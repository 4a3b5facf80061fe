package controlplane

import (
	"context"
	"fmt"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/store"
)

// The calls nodes in processes of their own make (nodeapi.Control). A node is trusted with the tenants
// whose sandboxes run on it, and with those sandboxes' credential bindings: nothing more. Every refusal
// is the same permission denied, so that a node learns nothing of other tenants' sandboxes.

var errNotYours = fmt.Errorf("no such sandbox on this node: %w", errdefs.ErrPermissionDenied)

// nodeSandbox returns the sandbox of tenantID that nodeID runs (creating, running or stopping).
func (s *Service) nodeSandbox(ctx context.Context, nodeID, tenantID, sandboxID string) (store.Sandbox, error) {
	if nodeID == "" || tenantID == "" || sandboxID == "" {
		return store.Sandbox{}, errNotYours
	}
	sb, err := s.store.GetSandbox(ctx, tenantID, sandboxID)
	if err != nil || sb.NodeID != nodeID {
		return store.Sandbox{}, errNotYours
	}
	switch sb.State {
	case store.StateCreating, store.StateRunning, store.StateStopping:
		return sb, nil
	}
	return store.Sandbox{}, errNotYours
}

// nodeBinding checks that the sandbox's egress policy has a credential binding of the secret (or, with
// connection, of the OAuth connection) name.
func (s *Service) nodeBinding(ctx context.Context, nodeID, tenantID, sandboxID, name string, connection bool) error {
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
func (s *Service) NodeSecret(ctx context.Context, nodeID, tenantID, sandboxID, name string) ([]byte, error) {
	if s.secrets == nil {
		return nil, fmt.Errorf("no secret store: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.nodeBinding(ctx, nodeID, tenantID, sandboxID, name, false); err != nil {
		return nil, err
	}
	return s.secrets.Reveal(ctx, tenantID, name)
}

// NodeToken returns the access token of an OAuth connection the policy of a sandbox on the node binds.
func (s *Service) NodeToken(ctx context.Context, nodeID, tenantID, sandboxID, connection string) ([]byte, error) {
	if s.connections == nil {
		return nil, fmt.Errorf("no OAuth connections: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.nodeBinding(ctx, nodeID, tenantID, sandboxID, connection, true); err != nil {
		return nil, err
	}
	return s.connections.Token(ctx, tenantID, connection)
}

// nodeTenant checks that the tenant has a sandbox on the node.
func (s *Service) nodeTenant(ctx context.Context, nodeID, tenantID string) error {
	if nodeID == "" || tenantID == "" {
		return errNotYours
	}
	cursor := ""
	for {
		page, next, err := s.store.ListSandboxes(ctx, tenantID, store.SandboxFilter{Cursor: cursor, Limit: store.MaxListLimit,
			States: []store.SandboxState{store.StateCreating, store.StateRunning, store.StateStopping}})
		if err != nil {
			return err
		}
		for _, sb := range page {
			if sb.NodeID == nodeID {
				return nil
			}
		}
		if next == "" {
			return errNotYours
		}
		cursor = next
	}
}

// NodeWrapKey wraps a data key of the node's (an interception CA's) under the key of a tenant with a
// sandbox on the node.
func (s *Service) NodeWrapKey(ctx context.Context, nodeID, tenantID string, dek []byte) ([]byte, string, error) {
	if s.keyProvider == nil {
		return nil, "", fmt.Errorf("no key provider: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.nodeTenant(ctx, nodeID, tenantID); err != nil {
		return nil, "", err
	}
	return s.keyProvider.WrapKey(ctx, tenantID, dek)
}

// NodeUnwrapKey unwraps a data key NodeWrapKey wrapped, for a tenant with a sandbox on the node.
func (s *Service) NodeUnwrapKey(ctx context.Context, nodeID, tenantID, keyID string, wrapped []byte) ([]byte, error) {
	if s.keyProvider == nil {
		return nil, fmt.Errorf("no key provider: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.nodeTenant(ctx, nodeID, tenantID); err != nil {
		return nil, err
	}
	return s.keyProvider.UnwrapKey(ctx, tenantID, keyID, wrapped)
}

// NodeAudit appends the node's daemon and egress entries to their tenants' audit logs. Each entry must
// name, as its actor, a sandbox of its tenant on the node; the batch is refused whole otherwise.
func (s *Service) NodeAudit(ctx context.Context, nodeID string, entries []store.AuditEntry) error {
	if s.audit == nil {
		return fmt.Errorf("no audit log: %w", errdefs.ErrFailedPrecondition)
	}
	checked := map[[2]string]bool{}
	for _, e := range entries {
		if e.Kind != store.AuditDaemon && e.Kind != store.AuditEgress {
			return fmt.Errorf("audit entry of kind %q: nodes record daemon and egress entries only: %w", e.Kind, errdefs.ErrPermissionDenied)
		}
		k := [2]string{e.TenantID, e.Actor}
		if checked[k] {
			continue
		}
		if _, err := s.nodeSandbox(ctx, nodeID, e.TenantID, e.Actor); err != nil {
			return err
		}
		checked[k] = true
	}
	for _, e := range entries {
		e.Seq, e.Prev, e.Hash = 0, "", ""
		s.audit(e)
	}
	return nil
}

// NodeSandboxExit handles a node's report that one of its sandboxes stopped by itself.
func (s *Service) NodeSandboxExit(ctx context.Context, nodeID, sandboxID, reason string) error {
	sb, err := s.store.GetSandboxAnyTenant(ctx, sandboxID)
	if err != nil || sb.NodeID != nodeID {
		return errNotYours
	}
	go s.HandleSandboxExit(sandboxID, reason)
	return nil
}

var (
	_ nodeapi.Control = (*Service)(nil)
	_ Node            = (*nodeapi.Client)(nil)
)
