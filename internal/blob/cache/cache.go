// Package cache is a blob.Store that keeps, on the node's disk, copies of the immutable objects it
// reads from another (remote) blob.Store, so that reading them again costs no remote fetch: a node
// that restores a snapshot it restored before fetches none of its chunks again.
//
// Only Get uses the cache, and only for the keys Config.Cacheable accepts. A Get of such a key is
// answered from disk when the cache holds the object; otherwise it is fetched from the remote store
// once, however many Gets of it run at a time, written to the cache and returned. Put, Create and
// Delete go to the remote store and drop any cached copy of their key; Stat and List always go to the
// remote store.
//
// Layout: the object with key k is the file <Dir>/<id[:2]>/<id>-<size>-<crc>, where id is the hex
// SHA-256 of k, size the object's length in decimal and crc its CRC-32C (Castagnoli) in 8 lowercase hex
// digits. A file is written as a temporary file <Dir>/<id[:2]>/.tmp-<id>-<random> and renamed into
// place, without fsync: a file a crash has torn or that has rotted is caught by its size and checksum
// when it is read, dropped, and fetched again. Directories are created 0700 and files 0600. All file
// access goes through an os.Root on Dir, so no link leads the cache outside it.
//
// The cache keeps at most Config.MaxBytes bytes of object data, dropping the least recently used
// objects first. Its index lives in memory; New rebuilds it from the files in Dir, taking their
// modification times, which Get refreshes on every hit, as recency, and removes leftover temporary
// files and files shorter or longer than their names say.
package cache

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Config configures a Store.
type Config struct {
	// Remote is the store the cache reads through and every write goes to. Required.
	Remote blob.Store

	// Dir holds the cached objects; New creates it (0700) if missing. Required. The Store owns Dir:
	// nothing else, and no second Store, may write in it while the Store is in use. Files in it that do
	// not follow the layout (see the package documentation) are left alone and not counted; leftover
	// temporary files are removed.
	Dir string

	// MaxBytes bounds the bytes of object data the cache holds; it must be positive. Objects larger than
	// MaxBytes are never cached. File-system overhead (blocks, directories) and the temporary files of
	// fetches in progress come on top.
	MaxBytes int64

	// Cacheable reports whether key names an object that never changes once written — it may be
	// deleted, but is never rewritten with other bytes — and so may be cached. Only such keys are
	// cached. Cacheable is called with valid keys only, and must be fast and safe for concurrent use.
	// Nil caches nothing: the Store then passes every call through to Remote.
	//
	// The cache serves a copy it holds for as long as it holds it, even after the object was deleted
	// or rewritten through another Store or node; only this Store's own Put, Create and Delete drop it.
	Cacheable func(key string) bool

	// Logger receives warnings about cache files that could not be written or read back, and a debug
	// record of what New found in Dir. Nil discards them.
	Logger *slog.Logger
}

// Stats are a Store's counters and holdings.
type Stats struct {
	Hits      int64 // Gets answered from the cache
	Misses    int64 // Gets of cacheable keys the cache could not answer (they went to Remote, alone or together)
	Evictions int64 // objects dropped to keep within MaxBytes
	Objects   int   // objects held
	Bytes     int64 // bytes of object data held
}

// Store is a blob.Store reading through a node-local cache (see the package documentation). Safe for
// concurrent use.
//
// The Store New returns implements blob.Creator exactly when Config.Remote does, so that a caller's
// check for blob.Creator answers for the remote store.
type Store interface {
	blob.Store

	// Stats reports the cache's counters since New and what it holds now.
	Stats() Stats
}

// New returns a Store for cfg. It creates cfg.Dir if missing and indexes the objects cached there,
// dropping what exceeds cfg.MaxBytes, least recently used first. It fails with an error wrapping
// errdefs.ErrInvalidArgument for a Config missing a required field.
func New(cfg Config) (Store, error) {
	switch {
	case cfg.Remote == nil:
		return nil, fmt.Errorf("blob cache: no remote store: %w", errdefs.ErrInvalidArgument)
	case cfg.Dir == "":
		return nil, fmt.Errorf("blob cache: empty directory: %w", errdefs.ErrInvalidArgument)
	case cfg.MaxBytes <= 0:
		return nil, fmt.Errorf("blob cache: MaxBytes %d is not positive: %w", cfg.MaxBytes, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("blob cache: %w", err)
	}
	root, err := os.OpenRoot(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("blob cache: %w", err)
	}
	s := &store{
		remote:    cfg.Remote,
		root:      root,
		max:       cfg.MaxBytes,
		cacheable: cfg.Cacheable,
		log:       cfg.Logger,
		index:     map[string]*entry{},
		pending:   map[string]*pending{},
	}
	if s.cacheable == nil {
		s.cacheable = func(string) bool { return false }
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.scan(); err != nil {
		root.Close()
		return nil, fmt.Errorf("blob cache %s: %w", cfg.Dir, err)
	}
	if c, ok := cfg.Remote.(blob.Creator); ok {
		return &creatorStore{store: s, creator: c}, nil
	}
	return s, nil
}

// store is the Store New returns for a remote store that is not a blob.Creator.
type store struct {
	remote    blob.Store
	root      *os.Root // Dir
	max       int64
	cacheable func(string) bool
	log       *slog.Logger
	flight    singleflight.Group // remote fetches, by id
	hits      atomic.Int64
	misses    atomic.Int64

	mu        sync.Mutex
	index     map[string]*entry   // guarded by mu; the objects held, by id
	lru       list.List           // guarded by mu; of *entry, most recently used first
	bytes     int64               // guarded by mu; the sum of the sizes in index
	evictions int64               // guarded by mu
	pending   map[string]*pending // guarded by mu; remote fetches in progress, by id
}

// creatorStore is the Store New returns for a remote store that is a blob.Creator.
type creatorStore struct {
	*store
	creator blob.Creator
}

var (
	_ Store        = (*store)(nil)
	_ Store        = (*creatorStore)(nil)
	_ blob.Creator = (*creatorStore)(nil)
)

// entry is one cached object.
type entry struct {
	id   string // the hex SHA-256 of the object's key
	size int64
	crc  uint32 // CRC-32C of the object
	elem *list.Element
}

// name returns the entry's file, relative to Dir.
func (e *entry) name() string {
	return fmt.Sprintf("%s/%s-%d-%08x", e.id[:2], e.id, e.size, e.crc)
}

// pending is a remote fetch in progress. A Put, Create or Delete of its key marks it stale, so that
// it does not cache what it fetched from before the change.
type pending struct {
	stale bool // guarded by store.mu
}

// fetched is the result of a fetch shared by concurrent Gets.
type fetched struct {
	data     []byte
	fromDisk bool // a concurrent fetch had cached the object already
}

// leaderGone wraps the error of a remote fetch ended by the context of the Get that started it, which
// the other Gets waiting for it retry rather than report.
type leaderGone struct{ err error }

func (e leaderGone) Error() string { return e.err.Error() }
func (e leaderGone) Unwrap() error { return e.err }

const tmpPrefix = ".tmp-"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func idOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func check(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return blob.ValidateKey(key)
}

// Get implements blob.Store. For a cacheable key it answers from the cache if it can and otherwise
// fetches the object from Remote — once for all concurrent Gets of the key — and caches it unless it
// is larger than MaxBytes. A cached file that cannot be read back intact is dropped and the object
// fetched again. A failure to write the cache is logged and does not fail the Get. Errors of Remote
// are returned unchanged.
func (s *store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := check(ctx, key); err != nil {
		return nil, fmt.Errorf("get blob: %w", err)
	}
	if !s.cacheable(key) {
		return s.remote.Get(ctx, key)
	}
	id := idOf(key)
	if data, ok := s.read(key, id); ok {
		s.hits.Add(1)
		return data, nil
	}
	data, fromDisk, err := s.fetch(ctx, key, id)
	if err == nil && fromDisk {
		s.hits.Add(1)
	} else {
		s.misses.Add(1)
	}
	return data, err
}

// fetch gets the object of key, whose id is id, from Remote and caches it, or joins such a fetch in
// progress. It reports whether the object came from the cache after all. The fetch runs in a goroutine
// of its own under the context of the Get that started it, and ends when Remote's Get returns; a Get
// whose context ends stops waiting for it.
func (s *store) fetch(ctx context.Context, key, id string) ([]byte, bool, error) {
	for {
		ch := s.flight.DoChan(id, func() (any, error) { return s.fill(ctx, key, id) })
		select {
		case <-ctx.Done():
			return nil, false, fmt.Errorf("get blob %s: %w", key, ctx.Err())
		case r := <-ch:
			var gone leaderGone
			if errors.As(r.Err, &gone) {
				if ctx.Err() == nil {
					continue // another Get's context ended its fetch; fetch anew
				}
				return nil, false, gone.err
			}
			if r.Err != nil {
				return nil, false, r.Err
			}
			f := r.Val.(fetched)
			if r.Shared {
				return bytes.Clone(f.data), f.fromDisk, nil // every Get owns its slice
			}
			return f.data, f.fromDisk, nil
		}
	}
}

// fill is the body of a shared fetch: it gets the object from the cache if a fetch that just ended
// put it there, and otherwise from Remote, caching it.
func (s *store) fill(ctx context.Context, key, id string) (fetched, error) {
	if data, ok := s.read(key, id); ok {
		return fetched{data: data, fromDisk: true}, nil
	}
	p := &pending{}
	s.mu.Lock()
	s.pending[id] = p
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}()
	data, err := s.remote.Get(ctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return fetched{}, leaderGone{err}
		}
		return fetched{}, err
	}
	s.keep(key, id, p, data)
	return fetched{data: data}, nil
}

// read returns the cached object of key, whose id is id, and marks it most recently used, or reports
// false if the cache does not hold it intact. It drops a cached file it cannot read back intact.
func (s *store) read(key, id string) ([]byte, bool) {
	s.mu.Lock()
	e, ok := s.index[id]
	if ok {
		s.lru.MoveToFront(e.elem)
	}
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	name := e.name()
	data, err := s.root.ReadFile(name)
	if err == nil && (int64(len(data)) != e.size || crc32.Checksum(data, crcTable) != e.crc) {
		err = fmt.Errorf("%d bytes with CRC-32C %08x; want %d bytes with %08x",
			len(data), crc32.Checksum(data, crcTable), e.size, e.crc)
	}
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) { // else most likely evicted since the lookup
			s.log.Warn("blob cache: dropping a damaged file", "key", key, "file", name, "err", err)
		}
		s.drop(e)
		return nil, false
	}
	now := time.Now()
	_ = s.root.Chtimes(name, now, now) // recency for the next New; a failure costs only that
	return data, true
}

// keep caches data, the object of key fetched by p, unless it is too large or p has gone stale.
func (s *store) keep(key, id string, p *pending, data []byte) {
	if int64(len(data)) > s.max {
		return
	}
	e := &entry{id: id, size: int64(len(data)), crc: crc32.Checksum(data, crcTable)}
	if err := s.writeFile(e, data); err != nil {
		s.log.Warn("blob cache: cannot cache an object", "key", key, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.stale {
		s.removeFileLocked(e.name())
		return
	}
	s.addLocked(e)
}

// writeFile writes data to e's file through a temporary file.
func (s *store) writeFile(e *entry, data []byte) error {
	dir := e.id[:2]
	tmp := fmt.Sprintf("%s/%s%s-%016x", dir, tmpPrefix, e.id, rand.Uint64())
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err := s.root.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		f, err = s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.root.Rename(tmp, e.name())
	}
	if err != nil {
		_ = s.root.Remove(tmp)
	}
	return err
}

// addLocked indexes e, whose file is in place, as the most recently used object, replacing the
// entry of the same object, and evicts the least recently used objects beyond MaxBytes.
func (s *store) addLocked(e *entry) {
	if old, ok := s.index[e.id]; ok {
		if old.name() == e.name() { // the file just written replaced old's, byte for byte
			s.lru.MoveToFront(old.elem)
			return
		}
		s.removeLocked(old)
	}
	e.elem = s.lru.PushFront(e)
	s.index[e.id] = e
	s.bytes += e.size
	for s.bytes > s.max { // stops at e at the latest, since e.size <= s.max
		s.removeLocked(s.lru.Back().Value.(*entry))
		s.evictions++
	}
}

// removeLocked drops e from the index and removes its file.
func (s *store) removeLocked(e *entry) {
	delete(s.index, e.id)
	s.lru.Remove(e.elem)
	s.bytes -= e.size
	s.removeFileLocked(e.name())
}

func (s *store) removeFileLocked(name string) {
	if err := s.root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("blob cache: cannot remove a file", "file", name, "err", err)
	}
}

// drop drops e unless it has been dropped or replaced already.
func (s *store) drop(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.index[e.id] == e {
		s.removeLocked(e)
	}
}

// forget drops the cached copy of key, and keeps a fetch of key in progress from caching what it
// fetched.
func (s *store) forget(key string) {
	id := idOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pending[id]; ok {
		p.stale = true
	}
	if e, ok := s.index[id]; ok {
		s.removeLocked(e)
	}
}

// Put implements blob.Store: it stores data in Remote and drops any cached copy of key; it does not
// cache data.
func (s *store) Put(ctx context.Context, key string, data []byte) error {
	if err := check(ctx, key); err != nil {
		return fmt.Errorf("put blob: %w", err)
	}
	err := s.remote.Put(ctx, key, data)
	s.forget(key)
	return err
}

// Create implements blob.Creator like Put, with Remote's Create.
func (s *creatorStore) Create(ctx context.Context, key string, data []byte) error {
	if err := check(ctx, key); err != nil {
		return fmt.Errorf("create blob: %w", err)
	}
	err := s.creator.Create(ctx, key, data)
	s.forget(key)
	return err
}

// Delete implements blob.Store: it deletes the object from Remote and drops any cached copy.
func (s *store) Delete(ctx context.Context, key string) error {
	if err := check(ctx, key); err != nil {
		return fmt.Errorf("delete blob: %w", err)
	}
	err := s.remote.Delete(ctx, key)
	s.forget(key)
	return err
}

// Stat implements blob.Store by asking Remote, also for cached objects: callers use Stat to decide
// whether an object must be uploaded (snapshot chunk deduplication), which a copy the cache kept of an
// object since deleted from Remote must not answer.
func (s *store) Stat(ctx context.Context, key string) (int64, error) {
	return s.remote.Stat(ctx, key)
}

// List implements blob.Store by asking Remote.
func (s *store) List(ctx context.Context, prefix string, fn func(key string, size int64, modTime time.Time) error) error {
	return s.remote.List(ctx, prefix, fn)
}

// Stats implements Store.
func (s *store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		Hits:      s.hits.Load(),
		Misses:    s.misses.Load(),
		Evictions: s.evictions,
		Objects:   len(s.index),
		Bytes:     s.bytes,
	}
}

// scan indexes the objects cached in Dir, ranked by modification time, evicting beyond MaxBytes, and
// removes temporary files, files of the wrong size and older copies of an object.
func (s *store) scan() error {
	type found struct {
		e     *entry
		mtime time.Time
	}
	var all []found
	var removed int
	s.mu.Lock() // New runs alone, but the helpers expect the lock held
	defer s.mu.Unlock()
	dirs, err := readDir(s.root, ".")
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if !d.IsDir() || !isLowerHex(d.Name(), 2) {
			continue
		}
		des, err := readDir(s.root, d.Name())
		if err != nil {
			return err
		}
		for _, de := range des {
			if !de.Type().IsRegular() {
				continue
			}
			name := d.Name() + "/" + de.Name()
			if strings.HasPrefix(de.Name(), tmpPrefix) {
				s.removeFileLocked(name)
				removed++
				continue
			}
			e, ok := parseName(d.Name(), de.Name())
			if !ok {
				continue
			}
			info, err := de.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if info.Size() != e.size || e.size > s.max {
				s.removeFileLocked(name)
				removed++
				continue
			}
			all = append(all, found{e, info.ModTime()})
		}
	}
	slices.SortStableFunc(all, func(a, b found) int { return a.mtime.Compare(b.mtime) })
	for _, f := range all { // oldest first, so that each ends up more recent than those before
		s.addLocked(f.e)
	}
	s.log.Debug("blob cache: opened", "dir", s.root.Name(), "objects", len(s.index), "bytes", s.bytes,
		"evicted", s.evictions, "removed", removed)
	return nil
}

func readDir(root *os.Root, name string) ([]fs.DirEntry, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// parseName returns the entry of the file base in directory dir, or false if base is not the name of
// a cached object there.
func parseName(dir, base string) (*entry, bool) {
	id, rest, ok1 := strings.Cut(base, "-")
	sizeStr, crcStr, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 || !isLowerHex(id, sha256.Size*2) || id[:2] != dir || !isLowerHex(crcStr, 8) {
		return nil, false
	}
	size, err := strconv.ParseInt(sizeStr, 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != sizeStr {
		return nil, false
	}
	crc, err := strconv.ParseUint(crcStr, 16, 32)
	if err != nil {
		return nil, false
	}
	return &entry{id: id, size: size, crc: uint32(crc)}, true
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}
