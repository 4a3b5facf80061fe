package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
	"github.com/airlockrun/airlock/internal/store"
)

// Docs is what a keyring in the Store needs of it.
type Docs interface {
	GetDoc(ctx context.Context, key string) (store.Doc, error)
	PutDoc(ctx context.Context, d store.Doc) (store.Doc, error)
}

const (
	// DocPrefix starts the keys of the documents of a keyring in the Store: DocPrefix + the tenant.
	DocPrefix = "keys/local/"
	// checkDocKey names the document that tells whether a master key is the one the keyring's
	// documents were encrypted under.
	checkDocKey  = "keys/local-master-check"
	checkText    = "airlock local keyring master key check v1"
	docVersion   = 0x01
	docAADPrefix = "airlock/keys/local/doc v1\x00"
	// MasterKeySize is the size of a master key.
	MasterKeySize = 32
)

// storeBacking keeps each tenant's state in a document of its own, encrypted under the master key. It
// reads the Store on every call, so a key revoked or rotated through one replica is at once revoked or
// rotated for all.
type storeBacking struct {
	docs   Docs
	master []byte
}

// NewInStore returns a keyring keeping its keys in docs, each tenant's state encrypted (AES-256-GCM)
// under masterKey. Every server on one Store must be given the same master key: NewInStore checks it
// against the one the Store's keyring was made with (recording it on first use), and refuses another
// (ErrFailedPrecondition).
func NewInStore(ctx context.Context, docs Docs, masterKey []byte) (*Keyring, error) {
	if len(masterKey) != MasterKeySize {
		return nil, fmt.Errorf("local keyring: master key has %d bytes; want %d: %w", len(masterKey), MasterKeySize, errdefs.ErrInvalidArgument)
	}
	b := &storeBacking{docs: docs, master: append([]byte(nil), masterKey...)}
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
	aead, err := newAEAD(b.master)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+nonceSize, 1+nonceSize+len(plain)+aead.Overhead())
	out[0] = docVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return aead.Seal(out, out[1:1+nonceSize], plain, []byte(docAADPrefix+key)), nil
}

// open decrypts a document sealed for key; it must authenticate.
func (b *storeBacking) open(key string, sealed []byte) ([]byte, error) {
	if len(sealed) < 1+nonceSize || sealed[0] != docVersion {
		return nil, fmt.Errorf("document %s is malformed", key)
	}
	aead, err := newAEAD(b.master)
	if err != nil {
		return nil, err
	}
	plain, err := aead.Open(nil, sealed[1:1+nonceSize], sealed[1+nonceSize:], []byte(docAADPrefix+key))
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
// its keyring in a file: each tenant the Store has no keys for gets the file's. Then the file is removed,
// so that key material the Store revokes is not left behind in it. It reports how many tenants it moved
// and which it skipped (the Store had keys for them already; theirs are kept). No file: nothing to do.
func ImportFile(ctx context.Context, k *Keyring, dir string) (moved int, skipped []string, err error) {
	path := filepath.Join(dir, FileName)
	ring, err := readRingFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	for tenant, ts := range ring.Tenants {
		err := k.b.save(ctx, tenant, ts, 0)
		ts.wipe()
		switch {
		case err == nil:
			moved++
		case errors.Is(err, errdefs.ErrConflict):
			skipped = append(skipped, tenant)
		default:
			return moved, skipped, fmt.Errorf("local keyring: import tenant %s from %s: %w", tenant, path, err)
		}
	}
	if err := os.Remove(path); err != nil {
		return moved, skipped, fmt.Errorf("local keyring: remove %s after importing it: %w", path, err)
	}
	return moved, skipped, nil
}

// LoadMasterKey reads a master key file: 64 hex digits (surrounding space ignored), mode 0600 or
// stricter. With create, a missing file is made with a fresh random key (and its directory, 0700).
func LoadMasterKey(path string, create bool) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		key := make([]byte, MasterKeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("master key: %w", err)
		}
		text := []byte(hex.EncodeToString(key) + "\n")
		defer clear(text)
		if err := fsutil.WriteFileAtomic(path, text, 0o600); err != nil {
			return nil, fmt.Errorf("master key: %w", err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	defer clear(b)
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("master key: %s has mode %v; want 0600: %w", path, st.Mode().Perm(), errdefs.ErrFailedPrecondition)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != MasterKeySize {
		return nil, fmt.Errorf("master key: %s must hold %d hex digits: %w", path, 2*MasterKeySize, errdefs.ErrInvalidArgument)
	}
	return key, nil
}
