package castore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/mitm"
)

// Remote is the CA store of a node of its own (gateway.CAStore): CAs are kept on the node's disk as
// Store keeps them, and a session's CA also by the control plane, so that the session's sandboxes on
// another node later get the same CA, the one their restored trust stores hold.
type Remote struct {
	// Local keeps the node's copies.
	Local *Store
	// Get returns the CA the control plane keeps for a session (mitm.CA.Marshal, the key in the
	// clear), or an error wrapping errdefs.ErrNotFound; Put hands it one.
	Get func(ctx context.Context, tenantID, sessionID string) ([]byte, error)
	Put func(ctx context.Context, tenantID, sessionID string, ca []byte) error
}

// isSession reports whether a CA ID names a session (whose CA moves with it), not a lone sandbox.
func isSession(id string) bool { return strings.HasPrefix(id, "se_") }

func plain(b []byte) ([]byte, error) { return append([]byte(nil), b...), nil }

// Load returns the node's copy, or else the control plane's (then copied to the node).
func (r *Remote) Load(ctx context.Context, id, tenantID string) (*mitm.CA, error) {
	ca, err := r.Local.Load(ctx, id, tenantID)
	if err == nil || !errors.Is(err, errdefs.ErrNotFound) || !isSession(id) {
		return ca, err
	}
	data, err := r.Get(ctx, tenantID, id)
	if err != nil {
		return nil, fmt.Errorf("castore: session %s: %w", id, err)
	}
	defer clear(data)
	if ca, err = mitm.Load(id, data, plain); err != nil {
		return nil, err
	}
	if err := r.Local.Save(ctx, id, tenantID, ca); err != nil {
		return nil, err
	}
	return ca, nil
}

// Save keeps ca on the node and, for a session, with the control plane. A session that has a CA kept
// there already is ErrAlreadyExists: the caller is to Load that one.
func (r *Remote) Save(ctx context.Context, id, tenantID string, ca *mitm.CA) error {
	if isSession(id) {
		data, err := ca.Marshal(plain)
		if err != nil {
			return err
		}
		err = r.Put(ctx, tenantID, id, data)
		clear(data)
		if err != nil {
			return fmt.Errorf("castore: session %s: %w", id, err)
		}
	}
	return r.Local.Save(ctx, id, tenantID, ca)
}

// Delete forgets the node's copy (the control plane forgets its own when the session is deleted).
func (r *Remote) Delete(id string) error { return r.Local.Delete(id) }

// Rewrap re-wraps the node's copies (the control plane re-wraps its own).
func (r *Remote) Rewrap(ctx context.Context, tenantID string) (int, error) {
	return r.Local.Rewrap(ctx, tenantID)
}
