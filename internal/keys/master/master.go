// Package master seals what the servers keep in the Store under the master key, which every
// control-plane replica on one database is given (a file, --master-key-file): the local keyring's
// tenant keys and the cluster's certificate authority.
package master

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
)

// KeySize is the size of a master key.
const KeySize = 32

const (
	version   = 0x01
	nonceSize = 12
)

// Key seals and opens values under a master key. Safe for concurrent use.
type Key struct {
	aead cipher.AEAD
}

// New returns a Key for the given key bytes (KeySize of them), which it copies.
func New(key []byte) (*Key, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("master key has %d bytes; want %d: %w", len(key), KeySize, errdefs.ErrInvalidArgument)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	return &Key{aead: aead}, nil
}

// Seal encrypts plain (AES-256-GCM, random nonce) bound to context (for example the key of the Store
// document that keeps it), so that it opens under that context only.
func (k *Key) Seal(context string, plain []byte) ([]byte, error) {
	out := make([]byte, 1+nonceSize, 1+nonceSize+len(plain)+k.aead.Overhead())
	out[0] = version
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return k.aead.Seal(out, out[1:1+nonceSize], plain, []byte(context)), nil
}

// ErrNotAuthentic is what Open reports for a value that is not one Seal made under this key and
// context.
var ErrNotAuthentic = errors.New("does not authenticate under the master key")

// Open decrypts a value Seal made under the same key and context.
func (k *Key) Open(context string, sealed []byte) ([]byte, error) {
	if len(sealed) < 1+nonceSize || sealed[0] != version {
		return nil, fmt.Errorf("%s: malformed sealed value: %w", context, ErrNotAuthentic)
	}
	plain, err := k.aead.Open(nil, sealed[1:1+nonceSize], sealed[1+nonceSize:], []byte(context))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", context, ErrNotAuthentic)
	}
	return plain, nil
}

// LoadFile reads a master key file: 64 hex digits (surrounding space ignored), mode 0600 or
// stricter. With create, a missing file is made with a fresh random key (and its directory, 0700).
func LoadFile(path string, create bool) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		key := make([]byte, KeySize)
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
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("master key: %s must hold %d hex digits: %w", path, 2*KeySize, errdefs.ErrInvalidArgument)
	}
	return key, nil
}
