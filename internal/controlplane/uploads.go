package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/faultinject"
	"github.com/airlockrun/airlock/internal/store"
)

// Snapshots are written behind. A checkpoint saves the sandbox's image into the pending directory
// (DATA/pending/<snapshot>, synced to disk); the snapshot is then recorded "uploading", and sessions
// resume and fork from that image at once while the uploader writes it into the snapshot store
// (chunked, compressed, encrypted). Once the store holds it, the snapshot is recorded complete and its
// image moves into the image cache. A failed upload is retried with backoff, the image kept meanwhile;
// a restart starts again the uploads it finds unfinished (see reconcileUploads). So a pause costs the
// checkpoint, not the trip through the store.

// uploadParallelism bounds the uploads that run at once: each one compresses and encrypts on the CPU
// the sandboxes share.
const uploadParallelism = 2

// uploader runs the background uploads, at most one per snapshot.
type uploader struct {
	mu sync.Mutex
	// active holds the running uploads by snapshot ID; guarded by mu.
	active map[string]*upload
	wg     sync.WaitGroup
	slots  chan struct{}
}

type upload struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newUploader() *uploader {
	return &uploader{active: map[string]*upload{}, slots: make(chan struct{}, uploadParallelism)}
}

// pendingImage is where the checkpoint image of snapshot snapID waits for its upload.
func (s *Service) pendingImage(snapID string) string { return filepath.Join(s.pending, snapID) }

// startUpload writes the saved image of the uploading snapshot sn into the snapshot store in the
// background, retrying until it is stored, the snapshot is gone, or cancelUpload or Shutdown stops it.
// An upload of sn already running is left alone.
func (s *Service) startUpload(sn store.Snapshot) {
	s.up.mu.Lock()
	defer s.up.mu.Unlock()
	if _, ok := s.up.active[sn.ID]; ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	u := &upload{cancel: cancel, done: make(chan struct{})}
	s.up.active[sn.ID] = u
	s.up.wg.Add(1)
	go func() {
		defer s.up.wg.Done()
		defer close(u.done)
		defer func() {
			s.up.mu.Lock()
			if s.up.active[sn.ID] == u {
				delete(s.up.active, sn.ID)
			}
			s.up.mu.Unlock()
			cancel()
		}()
		backoff := time.Second
		for {
			err := s.upload(ctx, sn)
			if err == nil || ctx.Err() != nil {
				return
			}
			s.log.Error("upload snapshot; retrying", "snapshot", sn.ID, "session", sn.SessionID, "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-s.stop: // shutting down: a restart tries again
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Minute)
		}
	}()
}

// upload writes the saved image of sn into the snapshot store and records the snapshot complete. A
// snapshot deleted meanwhile ends the upload without error (its data goes with it); one whose image is
// gone before it was stored is recorded failed.
func (s *Service) upload(ctx context.Context, sn store.Snapshot) error {
	snaps, err := s.snapshotStore()
	if err != nil {
		return err
	}
	select {
	case s.up.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.up.slots }()
	t0 := s.now()
	dir := s.pendingImage(sn.ID)
	// An earlier attempt (before a crash) may have committed it already: its manifest, written last,
	// says so.
	m, err := snaps.Manifest(ctx, sn.TenantID, sn.ID)
	if err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "memory")); errors.Is(serr, fs.ErrNotExist) {
			// Not stored, and nothing left to store: retrying would not help.
			s.log.Error("snapshot image lost before it was uploaded", "snapshot", sn.ID, "session", sn.SessionID)
			_, err := s.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
				sn.State, sn.Reason = store.SnapshotFailed, "its saved image was lost before it reached the snapshot store"
				return nil
			})
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil // deleted meanwhile, image and all
			}
			return err
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Warn("rewrite the snapshot's unreadable manifest", "snapshot", sn.ID, "err", err)
			if err := snaps.Delete(ctx, sn.TenantID, sn.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return fmt.Errorf("store snapshot: %w", err)
			}
		}
		m, err = s.storeImage(ctx, snaps, sn.TenantID, sn.ID, dir, map[string]string{"session": sn.SessionID, "template": sn.Meta["template"]})
		if err != nil {
			return fmt.Errorf("store snapshot: %w", err)
		}
	}
	faultinject.Crash("upload-stored")
	done := s.now()
	fresh, err := s.store.GetSnapshot(ctx, sn.TenantID, sn.ID)
	if errors.Is(err, errdefs.ErrNotFound) {
		// Deleted while it uploaded: what was just stored goes too.
		_ = snaps.Delete(context.WithoutCancel(ctx), sn.TenantID, sn.ID)
		return nil
	}
	if err != nil {
		return err
	}
	sn, err = s.updateSnapshot(ctx, fresh, func(sn *store.Snapshot) error {
		if sn.State != store.SnapshotUploading {
			return fmt.Errorf("snapshot %s is %s, not uploading: %w", sn.ID, sn.State, errdefs.ErrConflict)
		}
		sn.State, sn.CompletedAt = store.SnapshotComplete, &done
		sn.LogicalBytes, sn.StoredBytes = m.Stats.LogicalBytes, m.Stats.NewStoredBytes
		sn.Meta["upload_ms"] = fmt.Sprint(done.Sub(t0).Milliseconds())
		return nil
	})
	if errors.Is(err, errdefs.ErrNotFound) {
		_ = snaps.Delete(context.WithoutCancel(ctx), sn.TenantID, sn.ID)
		return nil
	}
	if err != nil {
		return err
	}
	faultinject.Crash("snapshot-complete")
	s.cacheImage(sn.ID, dir)
	s.log.Info("snapshot uploaded", "session", sn.SessionID, "snapshot", sn.ID, "took", done.Sub(t0),
		"logical_bytes", m.Stats.LogicalBytes, "new_bytes", m.Stats.NewStoredBytes, "new_chunks", m.Stats.NewChunks,
		"chunks", m.Stats.Chunks)
	return nil
}

// cancelUpload stops the upload of snapID, if one runs, and waits until it has.
func (s *Service) cancelUpload(snapID string) {
	s.up.mu.Lock()
	u := s.up.active[snapID]
	s.up.mu.Unlock()
	if u != nil {
		u.cancel()
		<-u.done
	}
}

// waitUploads waits until every upload finished or ctx ends, then stops those still running (a
// restart takes them up again).
func (s *Service) waitUploads(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.up.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	s.up.mu.Lock()
	n := len(s.up.active)
	for _, u := range s.up.active {
		u.cancel()
	}
	s.up.mu.Unlock()
	<-done
	s.log.Warn("stopped unfinished snapshot uploads; they continue after a restart", "uploads", n)
}

// reconcileUploads, after a restart, starts again the uploads of the snapshots still uploading and
// removes pending images nothing needs. A snapshot whose saved image is gone (the disk lost it) and
// that is not stored either fails (see upload).
func (s *Service) reconcileUploads(ctx context.Context) error {
	if s.pending == "" {
		return nil
	}
	keep := map[string]bool{}
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		return fmt.Errorf("reconcile uploads: %w", err)
	}
	for _, t := range ts {
		if err := s.reconcileTenantUploads(ctx, t.ID, keep); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(s.pending)
	if err != nil {
		return fmt.Errorf("reconcile uploads: %w", err)
	}
	for _, e := range entries {
		if !keep[e.Name()] {
			_ = os.RemoveAll(filepath.Join(s.pending, e.Name()))
		}
	}
	return nil
}

// reconcileTenantUploads is reconcileUploads for one tenant; it adds the snapshots it uploads to keep.
func (s *Service) reconcileTenantUploads(ctx context.Context, tenantID string, keep map[string]bool) error {
	cursor := ""
	for {
		sns, next, err := s.store.ListSnapshots(ctx, tenantID, store.SnapshotFilter{States: []store.SnapshotState{store.SnapshotUploading},
			Cursor: cursor, Limit: store.MaxListLimit})
		if err != nil {
			return fmt.Errorf("reconcile uploads: %w", err)
		}
		for _, sn := range sns {
			if !s.mySnapshot(sn) {
				continue // another replica's image, in its own pending directory
			}
			keep[sn.ID] = true
			s.startUpload(sn) // which fails the snapshot if its image is gone and not stored
		}
		if next == "" {
			return nil
		}
		cursor = next
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

// syncDir makes the entries of directory dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// urgentGate lets background uploads give way to work a caller waits for (checkpoints, restores): an
// upload's reads wait while any such work runs, but never longer than maxYield at a time, so uploads
// make progress under a steady stream of it.
type urgentGate struct {
	mu   sync.Mutex
	busy int
	idle chan struct{} // closed while busy == 0
}

const maxYield = 2 * time.Second

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

// prefetch asks the kernel to read the files of directory dir into the page cache, in the background.
func prefetch(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if f, err := os.Open(filepath.Join(dir, e.Name())); err == nil {
			_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_WILLNEED)
			f.Close()
		}
	}
}
