// Package local is a blob.Store keeping each object in a file under a root directory on the node's
// disk.
//
// Layout: the object with key "a/b/c" is the file <root>/a/b/c@. Every key segment but the last is a
// directory; the last gets the suffix "@", which no key can contain, so that "a" (file "a@") and "a/b"
// (directory "a", file "a/b@") can both exist as they can in S3, and so that nothing else in the tree —
// above all the ".tmp-…" files an interrupted write leaves behind — is ever taken for an object.
// Directories are created 0700 and files 0600; emptied directories are left in place.
//
// Writes are atomic and durable: the data goes to a temporary file in the object's directory, which is
// synced and then renamed (Put) or hard-linked (Create) into place, and the directory is synced. A
// crash leaves the old object or the new one, plus at most a stray temporary file that List ignores.
//
// One Store owns its root; several Stores (and processes) may share it, since every change is a single
// rename, link or unlink.
package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
)

// Suffix ends the file name of every object (see the package documentation).
const Suffix = "@"

// Store is a directory-backed blob.Store. It also implements blob.Creator. Safe for concurrent use.
type Store struct {
	root string
}

var (
	_ blob.Store   = (*Store)(nil)
	_ blob.Creator = (*Store)(nil)
)

// New returns a Store keeping its objects under root, which it creates (0700) if missing.
func New(root string) (*Store, error) {
	if root == "" {
		return nil, fmt.Errorf("local blob store: empty root: %w", errdefs.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("local blob store: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("local blob store: %w", err)
	}
	return &Store{root: abs}, nil
}

// Root reports the directory the store keeps its objects in.
func (s *Store) Root() string { return s.root }

// path returns the file of key, which the caller has validated.
func (s *Store) path(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key)) + Suffix
}

func check(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return blob.ValidateKey(key)
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := check(ctx, key); err != nil {
		return fmt.Errorf("put blob: %w", err)
	}
	if err := fsutil.WriteFileAtomic(s.path(key), data, 0o600); err != nil {
		return fmt.Errorf("put blob %s: %w", key, err)
	}
	return nil
}

// Create implements blob.Creator: it writes a synced temporary file and hard-links it to the object's
// name, which fails if the name is taken.
func (s *Store) Create(ctx context.Context, key string, data []byte) error {
	if err := check(ctx, key); err != nil {
		return fmt.Errorf("create blob: %w", err)
	}
	if err := s.create(s.path(key), data); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create blob %s: %w", key, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("create blob %s: %w", key, err)
	}
	return nil
}

func (s *Store) create(path string, data []byte) error {
	if _, err := os.Lstat(path); err == nil {
		return fs.ErrExist // spare the write
	}
	return fsutil.CreateFileAtomic(path, data, 0o600)
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := check(ctx, key); err != nil {
		return nil, fmt.Errorf("get blob: %w", err)
	}
	data, err := os.ReadFile(s.path(key))
	if notExist(err) {
		return nil, fmt.Errorf("blob %s: %w", key, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get blob %s: %w", key, err)
	}
	return data, nil
}

// Stat implements blob.Store.
func (s *Store) Stat(ctx context.Context, key string) (int64, error) {
	if err := check(ctx, key); err != nil {
		return 0, fmt.Errorf("stat blob: %w", err)
	}
	st, err := os.Stat(s.path(key))
	if notExist(err) || err == nil && !st.Mode().IsRegular() {
		return 0, fmt.Errorf("blob %s: %w", key, errdefs.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("stat blob %s: %w", key, err)
	}
	return st.Size(), nil
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := check(ctx, key); err != nil {
		return fmt.Errorf("delete blob: %w", err)
	}
	if err := os.Remove(s.path(key)); err != nil && !notExist(err) {
		return fmt.Errorf("delete blob %s: %w", key, err)
	}
	return nil
}

// List implements blob.Store. It reads one directory at a time, so its memory is bounded by the
// largest directory, not by the number of objects.
func (s *Store) List(ctx context.Context, prefix string, fn func(key string, size int64, modTime time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := blob.ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("list blobs: %w", err)
	}
	// Start in the deepest directory that prefix names in full.
	keyDir := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		keyDir = prefix[:i+1]
	}
	if err := s.walk(ctx, keyDir, prefix, fn); err != nil {
		return fmt.Errorf("list blobs %q: %w", prefix, err)
	}
	return nil
}

// entry is a directory entry as it sorts among keys: an object "x" sorts as "x", a directory "x" as
// "x/", so that visiting entries in order and descending into directories lists keys in lexical order.
type entry struct {
	key string // the object's key, or the directory's key prefix ending in '/'
	dir bool
	de  fs.DirEntry
}

// walk lists the objects in the directory of keyDir ("" or a key prefix ending in '/') whose keys start
// with prefix.
func (s *Store) walk(ctx context.Context, keyDir, prefix string, fn func(string, int64, time.Time) error) error {
	des, err := os.ReadDir(filepath.Join(s.root, filepath.FromSlash(keyDir)))
	if notExist(err) {
		return nil // nothing there, or removed while listing
	}
	if err != nil {
		return err
	}
	ents := make([]entry, 0, len(des))
	for _, de := range des {
		name := de.Name()
		switch {
		case de.IsDir():
			if !validSegment(name) {
				continue
			}
			k := keyDir + name + "/"
			if strings.HasPrefix(k, prefix) || strings.HasPrefix(prefix, k) {
				ents = append(ents, entry{key: k, dir: true, de: de})
			}
		case de.Type().IsRegular() && strings.HasSuffix(name, Suffix):
			seg := strings.TrimSuffix(name, Suffix)
			if !validSegment(seg) {
				continue // not an object: a temporary file or a stranger
			}
			if k := keyDir + seg; strings.HasPrefix(k, prefix) {
				ents = append(ents, entry{key: k, de: de})
			}
		}
	}
	slices.SortFunc(ents, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.dir {
			if err := s.walk(ctx, e.key, prefix, fn); err != nil {
				return err
			}
			continue
		}
		info, err := e.de.Info()
		if notExist(err) {
			continue // deleted while listing
		}
		if err != nil {
			return err
		}
		if err := fn(e.key, info.Size(), info.ModTime()); err != nil {
			return err
		}
	}
	return nil
}

func validSegment(seg string) bool {
	if seg == "" || seg == "." || seg == ".." || strings.Contains(seg, "/") {
		return false
	}
	return blob.ValidateKey(seg) == nil
}

// notExist reports whether err says a file is missing, including when a path component is not a
// directory.
func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
