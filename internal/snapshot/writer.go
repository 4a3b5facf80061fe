package snapshot

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"sync"
	"sync/atomic"

	"github.com/restic/chunker"
	"golang.org/x/sync/errgroup"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Polynomial is the irreducible polynomial of degree 53 over GF(2) of the Rabin fingerprint that cuts
// files into chunks (the one restic's chunker documents in its examples and tests). It is fixed, for
// every tenant and forever: changing it, or the chunk sizes below, changes where chunks are cut and so
// ends deduplication against snapshots written before.
const Polynomial = chunker.Pol(0x3DA3358B4DC173)

// Chunk sizes. A chunk is cut where the fingerprint of the last 64 bytes has its low averageBits bits
// zero, but never before MinChunkSize bytes nor after MaxChunkSize; chunks average about AvgChunkSize.
// A run of zero pages cuts at every MinChunkSize bytes, so it is stored as one chunk however long.
//
// They are much smaller than restic's defaults (512 KiB, 8 MiB, about 1.5 MiB on average) because
// memory images change in scattered pages rather than in long runs: between two pauses of an idle
// session holding 256 MiB (a gVisor image of 294 MB), about a hundred pages in some sixty runs change
// or move. Measured on such images, each chunk costs a request on S3:
//
//	min 256 KiB, about 768 KiB: 390 chunks, 3.9–5.7 MB new per pause
//	min 128 KiB, about 384 KiB: 763 chunks, 3.3–3.8 MB
//	min  64 KiB, about 320 KiB: 938 chunks, 2.3–2.9 MB (these)
//	min  64 KiB, about 192 KiB: 1495 chunks, 2.3–2.9 MB
//
// MaxChunkSize also bounds what a manifest may name (snapshots written with larger minimums stay
// readable).
const (
	MinChunkSize = 64 << 10
	MaxChunkSize = 4 << 20
	AvgChunkSize = MinChunkSize + 1<<averageBits

	averageBits = 18
)

const (
	// uploadWorkers bounds the chunks a Writer compresses, encrypts and uploads at once. Its memory is
	// bounded by (uploadWorkers+1) chunks of plaintext and as many of ciphertext.
	uploadWorkers = 3
	// readAhead bounds the chunks a read fetches and decrypts ahead of the one it writes out.
	readAhead = 3
	// segmentWorkers: a large file that can be read at offsets is cut in segments of segmentSize bytes,
	// segmentWorkers at once (see chunkFileLocked).
	segmentWorkers = 2
)

// segmentSize is the size of the segments of a large file (a variable for tests).
var segmentSize int64 = 64 << 20

// Writer writes one snapshot: AddFile for each file, then Commit, or Abort to give up. Chunks are
// uploaded as they are cut; the snapshot appears, all at once, only when Commit writes its manifest.
//
// A Writer is meant for one goroutine; its methods are serialized. AddFile runs up to uploadWorkers (3)
// upload goroutines and segmentWorkers (2) cutting ones, all ended when it returns, and holds at most
// uploadWorkers+segmentWorkers chunks in memory, each as plaintext and as ciphertext: 40 MiB at
// MaxChunkSize. A Writer holds the tenant's subkeys until Commit
// or Abort, one of which must be called (defer w.Abort() is safe after Commit). Writers must finish
// within the grace period GC is run with; see Store.GC.
type Writer struct {
	st     *Store
	tenant string
	id     string

	mu sync.Mutex
	// The fields below are guarded by mu.
	state writerState
	// failure is why the Writer failed, once it has.
	failure error
	keys    *tenantKeys
	files   []File
	tree    fileTree
	// held are the chunks this Writer uses, each held once in the Store's registry (see holds).
	held  map[string]struct{}
	stats Stats
	chunk *chunker.Chunker
	hash  hash.Hash
	// bufs recycles chunk buffers; its capacity bounds how many the Writer keeps.
	bufs chan *chunkBuf
}

type writerState int

const (
	writerOpen writerState = iota
	writerFailed
	writerDone // committed or aborted
)

// chunkBuf holds one chunk's plaintext and, later, its sealed blob.
type chunkBuf struct {
	plain, sealed []byte
}

// NewWriter starts writing snapshot snapshotID of tenantID, making the tenant's data key on its first
// snapshot. It fails with ErrAlreadyExists if the snapshot exists or is being written by another Writer
// of this Store, ErrInvalidArgument for a bad ID, and ErrPermissionDenied if the tenant's key is revoked.
func (s *Store) NewWriter(ctx context.Context, tenantID, snapshotID string) (*Writer, error) {
	if err := checkIDs(tenantID, snapshotID); err != nil {
		return nil, fmt.Errorf("new snapshot writer: %w", err)
	}
	k, err := s.loadKeys(ctx, tenantID, true)
	if err != nil {
		return nil, fmt.Errorf("new snapshot writer %s: %w", snapshotID, err)
	}
	return s.newWriter(ctx, k, snapshotID)
}

// newWriter starts writing snapshot snapshotID with the keys k, which the Writer clears when it is done
// (or newWriter, when it fails).
func (s *Store) newWriter(ctx context.Context, k *tenantKeys, snapshotID string) (*Writer, error) {
	tenantID := k.tenant
	ok := false
	defer func() {
		if !ok {
			k.clear()
		}
	}()
	if err := checkIDs(tenantID, snapshotID); err != nil {
		return nil, fmt.Errorf("new snapshot writer: %w", err)
	}
	if err := s.holds.reserve(tenantID, snapshotID); err != nil {
		return nil, fmt.Errorf("new snapshot writer: %w", err)
	}
	defer func() {
		if !ok {
			s.holds.unreserve(tenantID, snapshotID)
		}
	}()
	_, err := s.blobs.Stat(ctx, manifestKey(tenantID, snapshotID))
	switch {
	case err == nil:
		return nil, fmt.Errorf("new snapshot writer: snapshot %s of tenant %s: %w", snapshotID, tenantID, errdefs.ErrAlreadyExists)
	case !errors.Is(err, errdefs.ErrNotFound):
		return nil, fmt.Errorf("new snapshot writer %s: %w", snapshotID, err)
	}
	ok = true
	return &Writer{
		st:     s,
		tenant: tenantID,
		id:     snapshotID,
		keys:   k,
		held:   map[string]struct{}{},
		hash:   k.idHash(),
		bufs:   make(chan *chunkBuf, uploadWorkers+1),
	}, nil
}

// LogValue prints the snapshot's name only, never key material.
func (w *Writer) LogValue() slog.Value {
	return slog.GroupValue(slog.String("tenant", w.tenant), slog.String("snapshot", w.id), slog.String("keys", "REDACTED"))
}

// Format prints the snapshot's name only, for every verb.
func (w *Writer) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "snapshot.Writer{tenant: %s, snapshot: %s, keys: REDACTED}", w.tenant, w.id)
}

// AddFile reads r to its end and adds its content to the snapshot as file name (see
// ValidateFileName), uploading the chunks the store does not have yet. It returns once they are
// stored. A bad or duplicate name (ErrInvalidArgument, ErrAlreadyExists) leaves the Writer usable; a
// read or upload error fails it, and only Abort remains.
func (w *Writer) AddFile(ctx context.Context, name string, r io.Reader) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return fmt.Errorf("add file %s to snapshot %s: %w", name, w.id, err)
	}
	if err := w.tree.check(name); err != nil {
		return fmt.Errorf("add file to snapshot %s: %w", w.id, err)
	}
	f, err := w.chunkFileLocked(ctx, name, r)
	if err != nil {
		w.state, w.failure = writerFailed, err
		return fmt.Errorf("add file %s to snapshot %s: %w", name, w.id, err)
	}
	_ = w.tree.add(name) // cannot fail: checked above, under the same lock
	w.files = append(w.files, f)
	return nil
}

// chunkFileLocked cuts r into chunks and stores the new ones, with up to uploadWorkers uploads running
// while it reads on. A large file that can be read at offsets (an *os.File, say) is cut in segments of
// segmentSize bytes, segmentWorkers at a time, each segment starting a chunk: a memory image keeps its
// pages at their offsets, so the cuts stay where they were from one snapshot to the next.
func (w *Writer) chunkFileLocked(ctx context.Context, name string, r io.Reader) (File, error) {
	f := File{Name: name, Chunks: []ChunkRef{}}
	var newChunks, newBytes atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(uploadWorkers)
	var heldMu sync.Mutex
	// claim reports whether this Writer has yet to store chunk id, and holds it for it.
	claim := func(id string) (bool, error) {
		heldMu.Lock()
		defer heldMu.Unlock()
		if _, ok := w.held[id]; ok {
			return false, nil // stored or being stored by this Writer
		}
		w.held[id] = struct{}{}
		return true, w.st.holds.hold(gctx, w.tenant, id)
	}
	upload := func(id string, buf *chunkBuf) {
		g.Go(func() error {
			defer w.putBuf(buf)
			n, err := w.storeChunk(gctx, id, buf)
			if err != nil {
				return fmt.Errorf("store chunk %s: %w", id, err)
			}
			if n > 0 {
				newChunks.Add(1)
				newBytes.Add(n)
			}
			return nil
		})
	}
	var readErr error
	if ra, size, ok := readerAt(r); ok && size > 2*segmentSize {
		segs := make([][]ChunkRef, (size+segmentSize-1)/segmentSize)
		sg, sctx := errgroup.WithContext(gctx)
		sg.SetLimit(segmentWorkers)
		for i := range segs {
			off := int64(i) * segmentSize
			sec := io.NewSectionReader(ra, off, min(segmentSize, size-off))
			sg.Go(func() error {
				c := chunker.NewWithBoundaries(sec, Polynomial, MinChunkSize, MaxChunkSize)
				c.SetAverageBits(averageBits)
				refs, err := w.cut(sctx, c, w.keys.idHash(), claim, upload)
				segs[i] = refs
				return err
			})
		}
		readErr = sg.Wait()
		for _, refs := range segs {
			f.Chunks = append(f.Chunks, refs...)
		}
	} else {
		if w.chunk == nil {
			w.chunk = chunker.NewWithBoundaries(r, Polynomial, MinChunkSize, MaxChunkSize)
		} else {
			w.chunk.ResetWithBoundaries(r, Polynomial, MinChunkSize, MaxChunkSize)
		}
		w.chunk.SetAverageBits(averageBits)
		f.Chunks, readErr = w.cut(gctx, w.chunk, w.hash, claim, upload)
	}
	err := g.Wait()
	switch {
	case readErr != nil && !errors.Is(readErr, context.Canceled):
		return File{}, readErr
	case err != nil:
		return File{}, err
	case readErr != nil:
		return File{}, readErr
	case ctx.Err() != nil:
		return File{}, ctx.Err()
	}
	for _, c := range f.Chunks {
		f.Size += c.Size
	}
	w.stats.LogicalBytes += f.Size
	w.stats.Chunks += len(f.Chunks)
	w.stats.NewChunks += int(newChunks.Load())
	w.stats.NewStoredBytes += newBytes.Load()
	return f, nil
}

// cut reads chunks from c until its end, names each with h, and hands those claim grants to upload.
// It returns the file's (or segment's) chunks in order; on an error, what it read so far.
func (w *Writer) cut(ctx context.Context, c *chunker.Chunker, h hash.Hash, claim func(string) (bool, error), upload func(string, *chunkBuf)) ([]ChunkRef, error) {
	var refs []ChunkRef
	for ctx.Err() == nil {
		buf := w.getBuf()
		ch, err := c.Next(buf.plain[:0])
		if err != nil {
			w.putBuf(buf)
			if err != io.EOF {
				return refs, fmt.Errorf("read: %w", err)
			}
			return refs, nil
		}
		buf.plain = ch.Data
		id := chunkID(h, ch.Data)
		refs = append(refs, ChunkRef{ID: id, Size: int64(ch.Length)})
		mine, err := claim(id)
		if err != nil {
			w.putBuf(buf)
			return refs, err
		}
		if !mine {
			w.putBuf(buf)
			continue
		}
		upload(id, buf)
	}
	return refs, ctx.Err()
}

// readerAt reports r as an io.ReaderAt with its size, when it is one whose size it can tell (a file).
func readerAt(r io.Reader) (io.ReaderAt, int64, bool) {
	ra, ok := r.(io.ReaderAt)
	st, ok2 := r.(interface{ Stat() (fs.FileInfo, error) })
	if !ok || !ok2 {
		return nil, 0, false
	}
	fi, err := st.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, 0, false
	}
	return ra, fi.Size(), true
}

// storeChunk uploads chunk id unless the store has it, and reports the bytes uploaded.
func (w *Writer) storeChunk(ctx context.Context, id string, buf *chunkBuf) (int64, error) {
	key := chunkKey(w.tenant, id)
	_, err := w.st.blobs.Stat(ctx, key)
	if err == nil {
		return 0, nil // deduplicated
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		return 0, err
	}
	if buf.sealed, err = w.keys.sealChunk(id, buf.plain, buf.sealed); err != nil {
		return 0, err
	}
	if err := w.st.blobs.Put(ctx, key, buf.sealed); err != nil {
		return 0, err
	}
	return int64(len(buf.sealed)), nil
}

func (w *Writer) getBuf() *chunkBuf {
	select {
	case b := <-w.bufs:
		return b
	default:
		return &chunkBuf{plain: make([]byte, 0, MinChunkSize)}
	}
}

func (w *Writer) putBuf(b *chunkBuf) {
	select {
	case w.bufs <- b:
	default:
	}
}

// Commit writes the snapshot's manifest, with meta, and reports it. Bad meta (an empty key is
// ErrInvalidArgument, more than 64 KiB of keys and values ErrTooLarge) leaves the Writer open;
// otherwise the Writer is done once Commit returns, whether it succeeded or not. It fails with
// ErrAlreadyExists if a snapshot of the same ID was committed meanwhile, and with ErrPermissionDenied
// if the tenant's key was revoked since NewWriter; the chunks uploaded are then left for GC.
func (w *Writer) Commit(ctx context.Context, meta map[string]string) (Manifest, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return Manifest{}, fmt.Errorf("commit snapshot %s: %w", w.id, err)
	}
	if err := checkMeta(meta); err != nil {
		return Manifest{}, fmt.Errorf("commit snapshot %s: %w", w.id, err)
	}
	defer w.finishLocked()
	if err := w.st.checkKey(ctx, w.keys); err != nil {
		return Manifest{}, fmt.Errorf("commit snapshot %s: %w", w.id, err)
	}
	w.stats.ReusedChunks = w.stats.Chunks - w.stats.NewChunks
	m := Manifest{
		Version:   formatV1,
		Tenant:    w.tenant,
		ID:        w.id,
		CreatedAt: w.st.now().UTC(),
		Meta:      meta,
		Files:     w.files,
		Stats:     w.stats,
	}
	if m.Files == nil {
		m.Files = []File{}
	}
	data, err := w.keys.sealManifest(&m)
	if err != nil {
		return Manifest{}, fmt.Errorf("commit snapshot %s: %w", w.id, err)
	}
	err = w.st.createBlob(ctx, manifestKey(w.tenant, w.id), data)
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		return Manifest{}, fmt.Errorf("commit snapshot %s of tenant %s: %w", w.id, w.tenant, errdefs.ErrAlreadyExists)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("commit snapshot %s: write manifest: %w", w.id, err)
	}
	w.st.log.Debug("snapshot: committed", "tenant", w.tenant, "snapshot", w.id, "files", len(m.Files),
		"logical_bytes", m.Stats.LogicalBytes, "chunks", m.Stats.Chunks, "new_chunks", m.Stats.NewChunks,
		"new_stored_bytes", m.Stats.NewStoredBytes)
	return m, nil
}

// Abort gives the snapshot up: no manifest is written, and the chunks uploaded are left for GC (other
// snapshots may share them). It is safe to call more than once, and after Commit, where it does
// nothing.
func (w *Writer) Abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != writerDone {
		w.finishLocked()
	}
}

// finishLocked releases the Writer's holds, reservation and keys.
func (w *Writer) finishLocked() {
	w.state = writerDone
	w.st.holds.release(w.tenant, w.held)
	w.st.holds.unreserve(w.tenant, w.id)
	w.held = nil
	w.keys.clear()
	w.hash = nil
	w.chunk = nil
	w.bufs = nil // every upload has finished: AddFile waits for them
}

func (w *Writer) usableLocked() error {
	switch w.state {
	case writerFailed:
		return fmt.Errorf("writer failed earlier: %v: %w", w.failure, errdefs.ErrFailedPrecondition)
	case writerDone:
		return fmt.Errorf("writer is committed or aborted: %w", errdefs.ErrFailedPrecondition)
	}
	return nil
}

// fileTree is a set of file names in which no name is another's directory.
type fileTree struct {
	files map[string]bool
	dirs  map[string]bool
}

// check reports why name cannot join the tree: ErrInvalidArgument for a bad name or one that is a
// directory of another, or is under another, and ErrAlreadyExists for a name in the tree.
func (t *fileTree) check(name string) error {
	if err := ValidateFileName(name); err != nil {
		return err
	}
	switch {
	case t.files[name]:
		return fmt.Errorf("file %s: %w", name, errdefs.ErrAlreadyExists)
	case t.dirs[name]:
		return fmt.Errorf("file %s is the directory of another file: %w", name, errdefs.ErrInvalidArgument)
	}
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		if t.files[d] {
			return fmt.Errorf("file %s is under file %s: %w", name, d, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// add adds name to the tree, or reports why it cannot (see check).
func (t *fileTree) add(name string) error {
	if err := t.check(name); err != nil {
		return err
	}
	if t.files == nil {
		t.files, t.dirs = map[string]bool{}, map[string]bool{}
	}
	t.files[name] = true
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		t.dirs[d] = true
	}
	return nil
}
