package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/snapshot"
)

// The node owns the snapshot pipeline. Snapshot writes the sandbox's image into the node's pending
// directory (DataDir/images/pending/<snapshot>, synced); a background store (snapstore.go) then asks the
// control plane for the tenant's grant, cuts the image into chunks, compresses and encrypts them with
// the grant and writes them from here straight into the blob store, moves the image into the node's
// image cache and reports the snapshot stored. A restore uses the image this node keeps (pending or
// cached) or fetches the snapshot from the blob store into the cache first. A control plane exchanges
// only snapshot IDs, grants and statistics with the node: no image byte passes through it.
//
// Grants (the tenant's snapshot subkeys) arrive with each call or store and are cleared when it ends;
// the node keeps none.

// Snapshot-image bounds and defaults.
const (
	// DefaultImageCacheBytes bounds the image cache when Config.ImageCacheBytes is zero.
	DefaultImageCacheBytes = 4 << 30
	// storeParallelism bounds the images stored at once: each compresses and encrypts on the CPU the
	// sandboxes share.
	storeParallelism = 2
	// maxYield bounds how long a background store waits for a checkpoint or restore at a time.
	maxYield = 2 * time.Second
)

// images is the node's share of the snapshot pipeline: pending images, the image cache, the store.
type images struct {
	store   *snapshot.Store
	pending string // images waiting to be stored; survive restarts
	cache   string // images stored or fetched, up to budget; emptied at start
	work    string // hard-linked copies that restores use; emptied at start
	budget  int64

	mu sync.Mutex // serializes moves into and out of the cache, and eviction
	// perSnap serializes the stores of one snapshot (two control planes may both retry one).
	perSnap keyedLocks
	fetches singleflight.Group
	slots   chan struct{}
	urgent  *urgentGate
	// stores are the background stores of the snapshots taken here (snapstore.go), which ask calls
	// (nil: no store runs).
	stores snapStores
	calls  nodecontract.SnapshotCalls
	nodeID string
	log    *slog.Logger
}

func newImages(dir string, store *snapshot.Store, budget int64, calls nodecontract.SnapshotCalls, nodeID string, log *slog.Logger) (*images, error) {
	if budget == 0 {
		budget = DefaultImageCacheBytes
	}
	im := &images{store: store, pending: filepath.Join(dir, "pending"), cache: filepath.Join(dir, "cache"),
		work: filepath.Join(dir, "work"), budget: budget, slots: make(chan struct{}, storeParallelism), urgent: newUrgentGate(),
		stores: newSnapStores(), calls: calls, nodeID: nodeID, log: log}
	for _, d := range []string{im.pending, im.cache, im.work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	// A crash may have torn what the cache and the work directory hold; pending images were synced,
	// with their stores' jobs, before they were reported saved, and those without a job are of a
	// checkpoint the crash cut off (sweepPending).
	clearDir(im.cache)
	clearDir(im.work)
	return im, nil
}

// pendingDir is where the image of snapID waits to be stored.
func (im *images) pendingDir(snapID string) string { return filepath.Join(im.pending, snapID) }

// checkSnapID refuses a snapshot ID that is not a safe file name.
func checkSnapID(id string) error {
	if err := snapshot.ValidateSnapshotID(id); err != nil {
		return err
	}
	if strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return fmt.Errorf("snapshot ID %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// storeImage writes the image this node saved for snapshot snapID into the snapshot store (chunked,
// compressed, encrypted with g, which the caller clears) and moves it into the image cache. A snapshot
// stored already (an earlier try got that far) reports its manifest's statistics. An image this node
// does not have and that is not stored is an error wrapping errdefs.ErrNotFound: it is lost.
func (im *images) storeImage(ctx context.Context, tenantID, snapID string, g *snapshot.Grant, meta map[string]string) (snapshot.Stats, error) {
	if err := checkSnapID(snapID); err != nil {
		return snapshot.Stats{}, err
	}
	if g == nil || g.Tenant() != tenantID {
		return snapshot.Stats{}, fmt.Errorf("store image %s: no grant for tenant %s: %w", snapID, tenantID, errdefs.ErrInvalidArgument)
	}
	unlock := im.perSnap.lock(snapID)
	defer unlock()
	select {
	case im.slots <- struct{}{}:
	case <-ctx.Done():
		return snapshot.Stats{}, ctx.Err()
	}
	defer func() { <-im.slots }()
	m, err := im.store.ManifestWith(ctx, g, snapID)
	if err == nil {
		im.toCache(snapID, im.pendingDir(snapID))
		return m.Stats, nil
	}
	dir := im.pendingDir(snapID)
	if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
		return snapshot.Stats{}, fmt.Errorf("snapshot %s on node %s: %w", snapID, im.nodeID, errImageLost)
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		// An unreadable manifest of an earlier try: write it again.
		im.log.Warn("rewrite the snapshot's unreadable manifest", "snapshot", snapID, "err", err)
		if err := im.store.Delete(ctx, tenantID, snapID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return snapshot.Stats{}, fmt.Errorf("store image %s: %w", snapID, err)
		}
	}
	t0 := time.Now()
	m, err = im.write(ctx, g, snapID, meta, dir)
	if err != nil {
		return snapshot.Stats{}, fmt.Errorf("store image %s: %w", snapID, err)
	}
	im.toCache(snapID, dir)
	im.log.Info("snapshot image stored", "snapshot", snapID, "took", time.Since(t0), "logical_bytes", m.Stats.LogicalBytes,
		"new_bytes", m.Stats.NewStoredBytes, "new_chunks", m.Stats.NewChunks, "chunks", m.Stats.Chunks)
	return m.Stats, nil
}

// write writes the files of image directory dir into the snapshot store.
func (im *images) write(ctx context.Context, g *snapshot.Grant, snapID string, meta map[string]string, dir string) (snapshot.Manifest, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return snapshot.Manifest{}, err
	}
	sort.Strings(names)
	w, err := im.store.NewWriterWith(ctx, g, snapID)
	if err != nil {
		return snapshot.Manifest{}, err
	}
	defer w.Abort()
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return snapshot.Manifest{}, err
		}
		err = w.AddFile(ctx, name, yieldingFile{f: f, ctx: ctx, gate: im.urgent})
		f.Close()
		if err != nil {
			return snapshot.Manifest{}, err
		}
	}
	return w.Commit(ctx, meta)
}

// DropImages removes the images of these snapshots from the node, pending or cached, stops their
// background stores (waiting until they have stopped) and forgets them. Unknown IDs are skipped.
func (n *Local) DropImages(ctx context.Context, snapIDs []string) error {
	im, err := n.imageStore()
	if err != nil {
		return err
	}
	for _, id := range snapIDs {
		if checkSnapID(id) != nil {
			continue
		}
		im.stores.stop(id)
		im.drop(id)
	}
	return nil
}

// drop removes the image of snapID, pending or cached, and its store's job.
func (im *images) drop(snapID string) {
	unlock := im.perSnap.lock(snapID)
	defer unlock()
	im.mu.Lock()
	defer im.mu.Unlock()
	os.RemoveAll(im.pendingDir(snapID))
	os.RemoveAll(filepath.Join(im.cache, snapID))
	os.Remove(im.jobPath(snapID))
}

// pendingImages reports the snapshots whose images this node saved and has not stored yet.
func (im *images) pendingImages() []string {
	entries, _ := os.ReadDir(im.pending)
	var ids []string
	for _, e := range entries {
		if e.IsDir() && checkSnapID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// imageStore returns the node's images, or an error saying the node keeps no snapshots.
func (n *Local) imageStore() (*images, error) {
	if n.images == nil {
		return nil, fmt.Errorf("node %s has no snapshot store (start it with one: --blob-dir or --s3-*): %w", n.ID(), errdefs.ErrFailedPrecondition)
	}
	return n.images, nil
}

// prepare returns a private copy (hard links) of the image of src.SnapshotID for one restore, fetching
// it from the snapshot store into the cache first when the node has it neither pending nor cached.
// The caller removes the copy with release, and holds the urgent gate around it and the restore.
func (im *images) prepare(ctx context.Context, tenantID string, src nodecontract.ImageSource) (dir string, release func(), err error) {
	if err := checkSnapID(src.SnapshotID); err != nil {
		return "", nil, err
	}
	dir, err = os.MkdirTemp(im.work, "restore-")
	if err != nil {
		return "", nil, err
	}
	release = func() { os.RemoveAll(dir) }
	if im.linkLocal(src.SnapshotID, dir) {
		return dir, release, nil
	}
	if src.Grant == nil || src.Grant.Tenant() != tenantID {
		release()
		return "", nil, fmt.Errorf("snapshot %s is not on this node and no grant for tenant %s came to fetch it: %w", src.SnapshotID, tenantID, errdefs.ErrInvalidArgument)
	}
	if im.budget < 0 {
		// No cache: straight into this restore's copy.
		if err := im.store.RestoreWith(ctx, src.Grant, src.SnapshotID, filepath.Join(dir, "image")); err != nil {
			release()
			return "", nil, err
		}
		return filepath.Join(dir, "image"), release, nil
	}
	// Forks of one snapshot onto this node fetch it once.
	_, err, _ = im.fetches.Do(src.SnapshotID, func() (any, error) {
		im.mu.Lock()
		_, serr := os.Stat(filepath.Join(im.cache, src.SnapshotID))
		im.mu.Unlock()
		if serr == nil {
			return nil, nil
		}
		tmp, err := os.MkdirTemp(im.work, "fetch-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		img := filepath.Join(tmp, "image")
		if err := im.store.RestoreWith(ctx, src.Grant, src.SnapshotID, img); err != nil {
			return nil, err
		}
		im.toCache(src.SnapshotID, img)
		return nil, nil
	})
	if err == nil && !im.linkLocal(src.SnapshotID, dir) {
		err = fmt.Errorf("snapshot %s: its image left the cache before the restore used it: %w", src.SnapshotID, errdefs.ErrUnavailable)
	}
	if err != nil {
		release()
		return "", nil, err
	}
	return dir, release, nil
}

// linkLocal fills the empty directory dir with hard links to the image of snapID this node keeps,
// pending or cached, and reports whether it could.
func (im *images) linkLocal(snapID, dir string) bool {
	im.mu.Lock()
	defer im.mu.Unlock()
	src := ""
	for _, d := range []string{im.pending, im.cache} {
		if _, err := os.Stat(filepath.Join(d, snapID)); err == nil {
			src = filepath.Join(d, snapID)
			break
		}
	}
	if src == "" {
		return false
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dir, rel)
		switch {
		case rel == ".":
			return nil
		case d.IsDir():
			return os.Mkdir(to, 0o700)
		default:
			return os.Link(p, to)
		}
	})
	if err != nil {
		clearDir(dir)
		return false
	}
	now := time.Now()
	_ = os.Chtimes(src, now, now) // most recently used
	return true
}

// toCache moves the image directory dir into the cache as snapID's (or removes it when the cache has
// no room for it) and evicts the least recently used images beyond the budget.
func (im *images) toCache(snapID, dir string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	dst := filepath.Join(im.cache, snapID)
	if _, err := os.Stat(dir); err != nil {
		return
	}
	os.RemoveAll(dst)
	if treeBytes(dir) > im.budget || os.Rename(dir, dst) != nil {
		os.RemoveAll(dir)
		return
	}
	now := time.Now()
	_ = os.Chtimes(dst, now, now)
	im.evictLocked()
}

// evictLocked removes the least recently used cached images until the cache fits its budget.
func (im *images) evictLocked() {
	entries, err := os.ReadDir(im.cache)
	if err != nil {
		return
	}
	type image struct {
		path  string
		used  time.Time
		bytes int64
	}
	var all []image
	var total int64
	for _, e := range entries {
		p := filepath.Join(im.cache, e.Name())
		info, err := e.Info()
		if err != nil {
			continue
		}
		n := treeBytes(p)
		all = append(all, image{p, info.ModTime(), n})
		total += n
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.Before(all[j].used) })
	for _, c := range all {
		if total <= im.budget {
			break
		}
		os.RemoveAll(c.path)
		total -= c.bytes
	}
}

// treeBytes sums the sizes of the regular files under dir.
func treeBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// clearDir removes what dir holds, keeping dir.
func clearDir(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// syncDir makes the entries of directory dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// prefetch asks the kernel to read the files of image directory dir into the page cache: the memory
// went to disk around the page cache, and a resume or fork soon after reads it back, as does the store.
func prefetch(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if f, err := os.Open(p); err == nil {
				_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_WILLNEED)
				f.Close()
			}
		}
		return nil
	})
}

// keyedLocks is a set of mutexes by key, made on demand and dropped when unused.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// urgentGate lets background stores give way to work a caller waits for (checkpoints, restores): a
// store's reads wait while any such work runs, but never longer than maxYield at a time, so stores
// make progress under a steady stream of it.
type urgentGate struct {
	mu   sync.Mutex
	busy int
	idle chan struct{} // closed while busy == 0
}

func newUrgentGate() *urgentGate {
	g := &urgentGate{idle: make(chan struct{})}
	close(g.idle)
	return g
}

// enter marks urgent work as running until the returned function is called.
func (g *urgentGate) enter() (leave func()) {
	g.mu.Lock()
	if g.busy == 0 {
		g.idle = make(chan struct{})
	}
	g.busy++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.busy--
			if g.busy == 0 {
				close(g.idle)
			}
			g.mu.Unlock()
		})
	}
}

// wait returns once no urgent work runs, maxYield passed, or ctx ended.
func (g *urgentGate) wait(ctx context.Context) error {
	g.mu.Lock()
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	default:
	}
	t := time.NewTimer(maxYield)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// yieldingFile is a file whose reads first wait for the gate (see urgentGate). It keeps ReadAt and
// Stat, so the snapshot writer still cuts it in parallel segments.
type yieldingFile struct {
	f    *os.File
	ctx  context.Context
	gate *urgentGate
}

func (y yieldingFile) Read(p []byte) (int, error) {
	if err := y.gate.wait(y.ctx); err != nil {
		return 0, err
	}
	return y.f.Read(p)
}

func (y yieldingFile) ReadAt(p []byte, off int64) (int, error) {
	if err := y.gate.wait(y.ctx); err != nil {
		return 0, err
	}
	return y.f.ReadAt(p, off)
}

func (y yieldingFile) Stat() (fs.FileInfo, error) { return y.f.Stat() }
