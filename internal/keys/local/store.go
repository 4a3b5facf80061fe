package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/keys/master"
	"github.com/airlockrun/airlock/internal/store"
)

const (
	// DocPrefix starts the keys of the documents of a keyring in the Store: DocPrefix + the tenant.
	DocPrefix = "keys/local/"
	// checkDocKey names the document that tells whether a master key is the one the keyring's
	// documents were encrypted under.
	checkDocKey  = "keys/local-master-check"
	checkText    = "airlock local keyring master key check v1"
	docAADPrefix = "airlock/keys/local/doc v1\x00"
)

// storeBacking keeps each tenant's state in a document of its own, encrypted under the master key. It
// reads the Store on every call, so a key revoked or rotated through one replica is at once revoked or
// rotated for all.
type storeBacking struct {
	docs   store.Docs
	master *master.Key
}

// NewInStore returns a keyring keeping its keys in docs, each tenant's state encrypted (AES-256-GCM)
// under masterKey. Every server on one Store must be given the same master key: NewInStore checks it
// against the one the Store's keyring was made with (recording it on first use), and refuses another
// (ErrFailedPrecondition).
func NewInStore(ctx context.Context, docs store.Docs, masterKey *master.Key) (*Keyring, error) {
	b := &storeBacking{docs: docs, master: masterKey}
	d, err := docs.GetDoc(ctx, checkDocKey)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		sealed, err := b.seal(checkDocKey, []byte(checkText))
		if err != nil {
			return nil, fmt.Errorf("local keyring: %w", err)
		}
		if _, err := docs.PutDoc(ctx, store.Doc{Key: checkDocKey, Value: sealed}); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
			return nil, fmt.Errorf("local keyring: record the master key check: %w", err)
		} else if err != nil {
			// Another server recorded it first: check against its record.
			return NewInStore(ctx, docs, masterKey)
		}
	case err != nil:
		return nil, fmt.Errorf("local keyring: read the master key check: %w", err)
	default:
		text, err := b.open(checkDocKey, d.Value)
		if err != nil || string(text) != checkText {
			return nil, fmt.Errorf("local keyring: the master key is not the one this database's keyring was made with (every server on one database needs the same master key): %w", errdefs.ErrFailedPrecondition)
		}
	}
	return &Keyring{b: b}, nil
}

func (b *storeBacking) key(tenantID string) string { return DocPrefix + store.DocKeyPart(tenantID) }

// seal encrypts plain for the document key.
func (b *storeBacking) seal(key string, plain []byte) ([]byte, error) {
	return b.master.Seal(docAADPrefix+key, plain)
}

// open decrypts a document sealed for key; it must authenticate.
func (b *storeBacking) open(key string, sealed []byte) ([]byte, error) {
	plain, err := b.master.Open(docAADPrefix+key, sealed)
	if err != nil {
		return nil, fmt.Errorf("document %s does not authenticate under the master key", key)
	}
	return plain, nil
}

func (b *storeBacking) load(ctx context.Context, tenantID string) (*tenantState, int64, error) {
	key := b.key(tenantID)
	d, err := b.docs.GetDoc(ctx, key)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	plain, err := b.open(key, d.Value)
	if err != nil {
		return nil, 0, err
	}
	defer clear(plain)
	var ts tenantState
	if err := json.Unmarshal(plain, &ts); err != nil {
		return nil, 0, fmt.Errorf("document %s: %w", key, err)
	}
	if err := ts.validate(tenantID); err != nil {
		ts.wipe()
		return nil, 0, fmt.Errorf("document %s: %w", key, err)
	}
	return &ts, d.Version, nil
}

func (b *storeBacking) save(ctx context.Context, tenantID string, ts *tenantState, version int64) error {
	key := b.key(tenantID)
	plain, err := json.Marshal(ts)
	if err != nil {
		return err
	}
	defer clear(plain)
	sealed, err := b.seal(key, plain)
	if err != nil {
		return err
	}
	_, err = b.docs.PutDoc(ctx, store.Doc{Key: key, Value: sealed, Version: version})
	if errors.Is(err, errdefs.ErrAlreadyExists) || errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("%w: %w", err, errdefs.ErrConflict) // another writer made or removed it
	}
	return err
}

func (b *storeBacking) describe() string { return "store:" + DocPrefix }

// ImportFile moves the keys of the keyring file in dir (New's) into k, for a server that used to keep
// its keyring in a file: a tenant the Store has no keys for gets the file's; a tenant it has keys for
// (another replica made some first) gets the file's keys added to its own, under their IDs, its current
// key staying current, unless it is revoked in either (revocation wins: no key material comes back).
// Then the file is removed, so that key material the Store revokes is not left behind in it. It
// reports how many tenants it moved and how many it merged. No file: nothing to do.
func ImportFile(ctx context.Context, k *Keyring, dir string) (moved, merged int, err error) {
	path := filepath.Join(dir, FileName)
	ring, err := readRingFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for tenant, file := range ring.Tenants {
		created := false
		err := k.update(ctx, tenant, func(old *tenantState) (*tenantState, error) {
			created = old == nil
			if old == nil {
				return file.clone(), nil
			}
			if old.RevokedAt != nil {
				return nil, nil // revoked in the Store: nothing comes back
			}
			ts := old.clone()
			if file.RevokedAt != nil {
				ts.wipe()
				ts.Keys, ts.Current, ts.RevokedAt = nil, "", file.RevokedAt
				for _, e := range old.Keys {
					ts.Keys = append(ts.Keys, keyEntry{ID: e.ID, CreatedAt: e.CreatedAt})
				}
				return ts, nil
			}
			for _, e := range file.Keys {
				if ts.find(e.ID) == nil {
					e.Key = append([]byte(nil), e.Key...)
					ts.Keys = append(ts.Keys, e)
				}
			}
			return ts, nil
		})
		file.wipe()
		if err != nil {
			return moved, merged, fmt.Errorf("local keyring: import tenant %s from %s: %w", tenant, path, err)
		}
		if created {
			moved++
		} else {
			merged++
		}
	}
	if err := os.Remove(path); err != nil {
		return moved, merged, fmt.Errorf("local keyring: remove %s after importing it: %w", path, err)
	}
	return moved, merged, nil
}
