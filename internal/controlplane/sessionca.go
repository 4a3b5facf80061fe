package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/mitm"
	"github.com/airlockrun/airlock/internal/store"
)

// A session's interception CA goes with the session from node to node: the sandboxes restored from its
// snapshots trust that CA only. In a cluster the node that makes it hands it to the control plane, which
// keeps it in the Store (its key wrapped under the tenant's key, bound to the session), and a node that
// later runs a sandbox of the session is given it (nodeapi: /cluster/v1/ca/get, /cluster/v1/ca/put).

// sessionCADocPrefix starts the keys of the session CAs' documents: prefix + tenant + "/" + session.
const sessionCADocPrefix = "cas/"

func sessionCADoc(tenantID, sessionID string) string {
	return sessionCADocPrefix + store.DocKeyPart(tenantID) + "/" + store.DocKeyPart(sessionID)
}

// sessionCAPurpose is bound to a session CA's key when it is wrapped, so that it unwraps only as that
// session's.
func sessionCAPurpose(tenantID, sessionID string) []byte {
	return []byte("airlock/session-ca\x00" + tenantID + "\x00" + sessionID + "\x00")
}

// sessionCARecord is a session CA's document.
type sessionCARecord struct {
	// CA is the CA as mitm.CA.Marshal encodes it, its key wrapped: the key-encryption key's ID, a
	// newline, and the wrapped key.
	CA []byte `json:"ca"`
}

func plainKey(b []byte) ([]byte, error) { return append([]byte(nil), b...), nil }

// sealSessionCA encodes ca for the Store, its key wrapped under the tenant's current key.
func (s *keyring) sealSessionCA(ctx context.Context, tenantID, sessionID string, ca *mitm.CA) ([]byte, error) {
	return ca.Marshal(func(der []byte) ([]byte, error) {
		bound := append(sessionCAPurpose(tenantID, sessionID), der...)
		defer clear(bound)
		w, keyID, err := s.keyProvider.WrapKey(ctx, tenantID, bound)
		if err != nil {
			return nil, err
		}
		return append([]byte(keyID+"\n"), w...), nil
	})
}

// openSessionCA decodes a session CA from the Store.
func (s *keyring) openSessionCA(ctx context.Context, tenantID, sessionID string, data []byte) (*mitm.CA, error) {
	return mitm.Load(sessionID, data, func(b []byte) ([]byte, error) {
		keyID, w, ok := bytes.Cut(b, []byte("\n"))
		if !ok {
			return nil, fmt.Errorf("session CA %s: malformed wrapped key: %w", sessionID, errdefs.ErrInvalidArgument)
		}
		bound, err := s.keyProvider.UnwrapKey(ctx, tenantID, string(keyID), w)
		if err != nil {
			return nil, err
		}
		defer clear(bound)
		prefix := sessionCAPurpose(tenantID, sessionID)
		if !bytes.HasPrefix(bound, prefix) {
			return nil, fmt.Errorf("session CA %s: the key is not this session's: %w", sessionID, errdefs.ErrInvalidArgument)
		}
		return append([]byte(nil), bound[len(prefix):]...), nil
	})
}

// nodeRunsSession checks that nodeID has a sandbox of tenantID's session sessionID up (creating,
// running or stopping): only such a node is given the session's CA.
func (s *nodeCalls) nodeRunsSession(ctx context.Context, nodeID, tenantID, sessionID string) error {
	if nodeID == "" || tenantID == "" || !strings.HasPrefix(sessionID, "se_") {
		return errNotYours
	}
	sbs, _, err := s.store.ListSandboxes(ctx, tenantID, store.SandboxFilter{
		States:   []store.SandboxState{store.StateCreating, store.StateRunning, store.StateStopping},
		Metadata: map[string]string{SessionMetadataKey: sessionID}, Limit: store.MaxListLimit})
	switch {
	case errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument):
		return errNotYours
	case err != nil:
		return fmt.Errorf("session %s: %v: %w", sessionID, err, errdefs.ErrUnavailable)
	}
	for _, sb := range sbs {
		if sb.NodeID == nodeID {
			return nil
		}
	}
	return errNotYours
}

// NodeCAGet gives a node that runs a sandbox of the session the session's interception CA, its key in
// the clear (inside the mutual TLS of the cluster port): ErrNotFound if the session has none yet.
func (s *nodeCalls) NodeCAGet(ctx context.Context, nodeID, tenantID, sessionID string) ([]byte, error) {
	if s.keyProvider == nil {
		return nil, fmt.Errorf("no key provider: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.nodeRunsSession(ctx, nodeID, tenantID, sessionID); err != nil {
		return nil, err
	}
	d, err := s.store.GetDoc(ctx, sessionCADoc(tenantID, sessionID))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("session %s has no interception CA yet: %w", sessionID, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("session CA %s: %v: %w", sessionID, err, errdefs.ErrUnavailable)
	}
	var rec sessionCARecord
	if err := json.Unmarshal(d.Value, &rec); err != nil {
		return nil, fmt.Errorf("session CA %s: %w", sessionID, err)
	}
	ca, err := s.keyring.openSessionCA(ctx, tenantID, sessionID, rec.CA)
	if err != nil {
		return nil, err
	}
	return ca.Marshal(plainKey)
}

// NodeCAPut keeps the interception CA a node made for a session it runs a sandbox of. The first CA of a
// session stays: a later one is ErrAlreadyExists (the node is to use the one kept).
func (s *nodeCalls) NodeCAPut(ctx context.Context, nodeID, tenantID, sessionID string, data []byte) error {
	if s.keyProvider == nil {
		return fmt.Errorf("no key provider: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.nodeRunsSession(ctx, nodeID, tenantID, sessionID); err != nil {
		return err
	}
	ca, err := mitm.Load(sessionID, data, plainKey)
	if err != nil {
		return err
	}
	return s.keyring.keepSessionCA(ctx, tenantID, sessionID, ca)
}

// keepSessionCA stores ca as the session's, unless it has one.
func (s *keyring) keepSessionCA(ctx context.Context, tenantID, sessionID string, ca *mitm.CA) error {
	sealed, err := s.sealSessionCA(ctx, tenantID, sessionID, ca)
	if err != nil {
		return err
	}
	v, err := json.Marshal(sessionCARecord{CA: sealed})
	if err != nil {
		return err
	}
	if _, err := s.store.PutDoc(ctx, store.Doc{Key: sessionCADoc(tenantID, sessionID), Value: v}); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) || errors.Is(err, errdefs.ErrConflict) {
			return fmt.Errorf("session %s has an interception CA already: %w", sessionID, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("session CA %s: %v: %w", sessionID, err, errdefs.ErrUnavailable)
	}
	return nil
}

// copySessionCA gives a fork the interception CA of the session it was forked from, if that one has a
// CA kept (the fork's sandboxes are restored from the parent's snapshot and trust it).
func (s *keyring) copySessionCA(ctx context.Context, tenantID, fromID, toID string) error {
	if s.keyProvider == nil || !s.nodes.clustered() {
		return nil
	}
	d, err := s.store.GetDoc(ctx, sessionCADoc(tenantID, fromID))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec sessionCARecord
	if err := json.Unmarshal(d.Value, &rec); err != nil {
		return err
	}
	ca, err := s.openSessionCA(ctx, tenantID, fromID, rec.CA)
	if err != nil {
		return err
	}
	if err := s.keepSessionCA(ctx, tenantID, toID, ca.ForSandbox(toID)); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		return err
	}
	return nil
}

// dropSessionCA forgets a deleted session's kept CA.
func (s *keyring) dropSessionCA(ctx context.Context, tenantID, sessionID string) {
	if err := deleteDoc(ctx, s.store, sessionCADoc(tenantID, sessionID)); err != nil {
		s.log.Warn("forget a session's interception CA", "session", sessionID, "err", err)
	}
}

// rewrapSessionCAs wraps the keys of the tenant's kept session CAs again under its current key.
func (s *keyring) rewrapSessionCAs(ctx context.Context, tenantID string) (bool, error) {
	if s.keyProvider == nil {
		return false, nil
	}
	prefix := sessionCADocPrefix + store.DocKeyPart(tenantID) + "/"
	ds, err := s.store.ListDocs(ctx, prefix)
	if err != nil {
		return false, err
	}
	var errs []error
	for _, d := range ds {
		sessionID := strings.TrimPrefix(d.Key, prefix)
		var rec sessionCARecord
		if err := json.Unmarshal(d.Value, &rec); err != nil {
			errs = append(errs, fmt.Errorf("session CA %s: %w", sessionID, err))
			continue
		}
		ca, err := s.openSessionCA(ctx, tenantID, sessionID, rec.CA)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if rec.CA, err = s.sealSessionCA(ctx, tenantID, sessionID, ca); err != nil {
			errs = append(errs, err)
			continue
		}
		if d.Value, err = json.Marshal(rec); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := s.store.PutDoc(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("session CA %s: %w", sessionID, err))
		}
	}
	return len(ds) > 0, errors.Join(errs...)
}
