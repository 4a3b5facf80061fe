// Package castore keeps each sandbox's interception CA on the node's disk, its key wrapped by the
// tenant's key-encryption key, so that a node restart keeps the CA the sandbox already trusts. A
// revoked tenant key means the CA cannot be loaded, and so no interception for that tenant.
package castore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
	"github.com/airlockrun/airlock/internal/gateway/mitm"
	"github.com/airlockrun/airlock/internal/keys"
)

// Store keeps CAs as files DIR/<sandbox>.json (0600).
type Store struct {
	dir  string
	keys keys.KeyProvider
	// mu serializes the writes (Save, Delete) with a re-wrap's load and save of the same file, so that
	// a re-wrap never brings back a deleted CA or writes an old one over a new one.
	mu sync.Mutex
}

// New returns a store in dir (created 0700), wrapping keys with kp.
func New(dir string, kp keys.KeyProvider) (*Store, error) {
	if kp == nil {
		return nil, fmt.Errorf("castore: a key provider is required: %w", errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("castore: %w", err)
	}
	return &Store{dir: dir, keys: kp}, nil
}

var idPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`)

func (s *Store) path(id string) (string, error) {
	if !idPattern.MatchString(id) {
		return "", fmt.Errorf("castore: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return filepath.Join(s.dir, id+".json"), nil
}

// wrapped is a wrapped key with the ID of the key-encryption key that wrapped it.
func joinWrapped(keyID string, w []byte) []byte { return append([]byte(keyID+"\n"), w...) }

func splitWrapped(b []byte) (string, []byte, error) {
	keyID, rest, ok := strings.Cut(string(b), "\n")
	if !ok {
		return "", nil, fmt.Errorf("castore: malformed wrapped key: %w", errdefs.ErrInvalidArgument)
	}
	return keyID, []byte(rest), nil
}

// Save stores ca for the tenant's sandbox id, replacing what was there atomically.
func (s *Store) Save(ctx context.Context, id, tenantID string, ca *mitm.CA) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveLocked(ctx, id, tenantID, ca)
}

func (s *Store) saveLocked(ctx context.Context, id, tenantID string, ca *mitm.CA) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	data, err := ca.Marshal(func(key []byte) ([]byte, error) {
		w, keyID, err := s.keys.WrapKey(ctx, tenantID, key)
		if err != nil {
			return nil, err
		}
		return joinWrapped(keyID, w), nil
	})
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(p, data, 0o600); err != nil {
		return fmt.Errorf("castore: %w", err)
	}
	return nil
}

// Load returns the CA of the tenant's sandbox id, or an error wrapping errdefs.ErrNotFound when none is
// stored.
func (s *Store) Load(ctx context.Context, id, tenantID string) (*mitm.CA, error) {
	p, err := s.path(id)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("castore: no CA for sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("castore: %w", err)
	}
	return mitm.Load(id, data, func(b []byte) ([]byte, error) {
		keyID, w, err := splitWrapped(b)
		if err != nil {
			return nil, err
		}
		return s.keys.UnwrapKey(ctx, tenantID, keyID, w)
	})
}

// Delete removes the sandbox's CA. A missing one is fine.
func (s *Store) Delete(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.path(id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("castore: %w", err)
	}
	return nil
}

// Rewrap wraps the keys of the tenant's CAs again under its current key-encryption key (after a
// rotation) and reports how many it re-wrapped. A CA that does not unwrap as the tenant's is another
// tenant's, and is left alone.
func (s *Store) Rewrap(ctx context.Context, tenantID string) (int, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, fmt.Errorf("castore: %w", err)
	}
	n := 0
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !idPattern.MatchString(id) {
			continue
		}
		ok, err := s.rewrapOne(ctx, id, tenantID)
		if err != nil {
			return n, fmt.Errorf("castore: rewrap CA %s: %w", id, err)
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// rewrapOne re-saves the CA id if it is the tenant's, under the lock, and reports whether it was.
func (s *Store) rewrapOne(ctx context.Context, id, tenantID string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ca, err := s.Load(ctx, id, tenantID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrInvalidArgument):
		return false, nil // another tenant's (or gone meanwhile)
	case err != nil:
		return false, err
	}
	return true, s.saveLocked(ctx, id, tenantID, ca)
}
