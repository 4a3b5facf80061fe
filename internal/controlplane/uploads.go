package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/faultinject"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
)

// Snapshots are written behind, by the node that took them. A checkpoint saves the sandbox's image on
// its node; the snapshot is then recorded "uploading", and sessions resume and fork from that image at
// once (on that node) while the node writes it into the snapshot store (chunked, compressed,
// encrypted, straight from the node to the blob store), which a control plane asks for here, with the
// tenant's grant, and retries with backoff. Once the store holds it, the snapshot is recorded complete
// and can be restored on any node. A restart (of this replica or of the node) starts again the uploads
// it finds unfinished (see reconcileUploads); the leader takes over those of a replica that went away.
// So a pause costs the checkpoint, not the trip through the store, and no image byte passes through a
// control plane.

// uploader runs the background uploads, at most one per snapshot.
type uploader struct {
	mu sync.Mutex
	// active holds the running uploads by snapshot ID; guarded by mu.
	active map[string]*upload
	wg     sync.WaitGroup
}

type upload struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newUploader() *uploader {
	return &uploader{active: map[string]*upload{}}
}

// startUpload has the node of the uploading snapshot sn write its image into the snapshot store, in
// the background, retrying until it is stored, the snapshot is gone, or cancelUpload or Shutdown stops it.
// An upload of sn already running is left alone.
func (s *snapshotBook) startUpload(sn store.Snapshot) {
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

// upload has the node of sn write its image into the snapshot store and records the snapshot
// complete. A snapshot deleted meanwhile ends the upload without error (its data goes with it); one
// whose image is gone before it was stored (its node lost it, or is gone for good) is recorded failed.
func (s *snapshotBook) upload(ctx context.Context, sn store.Snapshot) error {
	snaps, err := s.snapshotStore()
	if err != nil {
		return err
	}
	t0 := s.now()
	nodeID := sn.Meta[snapshotNodeMeta]
	n, err := s.placer.node(ctx, nodeID)
	lost := ""
	switch {
	case err != nil && s.nodeRemoved(ctx, nodeID):
		lost = "its node " + nodeID + " was removed before the image reached the snapshot store"
	case err != nil:
		return fmt.Errorf("node %s: %w", nodeID, err)
	}
	var stats struct{ logical, stored int64 }
	if lost == "" {
		g, err := snaps.Grant(ctx, sn.TenantID, true)
		if err != nil {
			return fmt.Errorf("store snapshot: %w", err)
		}
		st, err := n.StoreImage(ctx, nodecontract.StoreRequest{TenantID: sn.TenantID, SnapshotID: sn.ID, Grant: g,
			Meta: map[string]string{"session": sn.SessionID, "template": sn.Meta["template"]}})
		g.Clear()
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			lost = "its saved image was lost before it reached the snapshot store"
		case err != nil:
			return fmt.Errorf("store snapshot on node %s: %w", nodeID, err)
		}
		stats.logical, stats.stored = st.LogicalBytes, st.NewStoredBytes
	}
	if lost != "" {
		// Not stored, and nothing left to store: retrying would not help.
		s.log.Error("snapshot image lost before it was uploaded", "snapshot", sn.ID, "session", sn.SessionID, "node", nodeID, "reason", lost)
		_, err := s.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
			sn.State, sn.Reason = store.SnapshotFailed, lost
			return nil
		})
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil // deleted meanwhile, image and all
		}
		return err
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
	if fresh.State != store.SnapshotUploading {
		// Settled meanwhile (complete, or failed), or its record lost the step to uploading (the Store
		// forgot a commit; lost.go): retrying would never change that.
		return s.uploadSettled(ctx, fresh)
	}
	sn, err = s.updateSnapshot(ctx, fresh, func(sn *store.Snapshot) error {
		if sn.State != store.SnapshotUploading {
			return fmt.Errorf("snapshot %s is %s, not uploading: %w", sn.ID, sn.State, errdefs.ErrConflict)
		}
		sn.State, sn.CompletedAt = store.SnapshotComplete, &done
		sn.LogicalBytes, sn.StoredBytes = stats.logical, stats.stored
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
	s.log.Info("snapshot uploaded", "session", sn.SessionID, "snapshot", sn.ID, "node", nodeID, "took", done.Sub(t0),
		"logical_bytes", stats.logical, "new_bytes", stats.stored)
	return nil
}

// uploadSettled ends the upload of sn, found no longer uploading once its image was stored. One still
// "writing" has no record of what its image holds (the kind, the files part): it cannot be restored,
// and is failed so that its data goes with the next GC.
func (s *snapshotBook) uploadSettled(ctx context.Context, sn store.Snapshot) error {
	if sn.State != store.SnapshotWriting {
		return nil
	}
	s.log.Warn("a snapshot's record went back to writing while it uploaded (the Store forgot a commit): failing it", "snapshot", sn.ID, "session", sn.SessionID)
	_, err := s.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
		if sn.State != store.SnapshotWriting {
			return nil
		}
		sn.State, sn.Reason = store.SnapshotFailed, "its record lost its step to uploading (the Store forgot a commit)"
		return nil
	})
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}

// cancelUpload stops the upload of snapID, if one runs, and waits until it has.
func (s *snapshotBook) cancelUpload(snapID string) {
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
func (s *snapshotBook) waitUploads(ctx context.Context) {
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

// reconcileUploads, after a restart, starts again the uploads of the snapshots still uploading that
// this replica took (or any, outside a cluster). Those of a replica that went away are the leader's to
// take over (settleSnapshots).
func (s *snapshotBook) reconcileUploads(ctx context.Context) error {
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		return fmt.Errorf("reconcile uploads: %w", err)
	}
	for _, t := range ts {
		cursor := ""
		for {
			sns, next, err := s.store.ListSnapshots(ctx, t.ID, store.SnapshotFilter{States: []store.SnapshotState{store.SnapshotUploading},
				Cursor: cursor, Limit: store.MaxListLimit})
			if err != nil {
				return fmt.Errorf("reconcile uploads: %w", err)
			}
			for _, sn := range sns {
				if s.mySnapshot(sn) {
					s.startUpload(sn) // which fails the snapshot if its image is gone and not stored
				}
			}
			if next == "" {
				break
			}
			cursor = next
		}
	}
	s.sweepPendingImages(ctx)
	return nil
}

// sweepPendingImages removes, from the nodes this control plane reaches, the images waiting for an
// upload that no snapshot waits for any more (deleted while its node was out of reach). A node lists
// its images before the snapshots are read: a snapshot is recorded before its checkpoint starts, so a
// pending image listed is either of a snapshot still writing or uploading, or of none.
func (s *snapshotBook) sweepPendingImages(ctx context.Context) {
	caps, err := s.placer.nodesUp(ctx)
	if err != nil {
		return
	}
	pending := map[string][]string{}
	for id := range caps {
		n, err := s.placer.node(ctx, id)
		if err != nil {
			continue
		}
		if ids, err := n.PendingImages(ctx); err == nil && len(ids) > 0 {
			pending[id] = ids
		}
	}
	if len(pending) == 0 {
		return
	}
	sns, err := s.store.ListSnapshotsByState(ctx, []store.SnapshotState{store.SnapshotWriting, store.SnapshotUploading}, store.MaxListLimit)
	if err != nil || len(sns) >= store.MaxListLimit {
		return // not sure which are needed
	}
	wanted := map[string]bool{}
	for _, sn := range sns {
		wanted[sn.ID] = true
	}
	for id, ids := range pending {
		var drop []string
		for _, snID := range ids {
			if !wanted[snID] {
				drop = append(drop, snID)
			}
		}
		if n, err := s.placer.node(ctx, id); err == nil && len(drop) > 0 {
			s.log.Info("removing images no snapshot waits for", "node", id, "images", len(drop))
			s.dropImagesOn(ctx, n, drop...)
		}
	}
}

// nodeRemoved reports whether node id is known to be gone for good: not this process's, and without a
// record of its joining and a heartbeat.
func (s *snapshotBook) nodeRemoved(ctx context.Context, id string) bool {
	if s.nodes.isLocal(id) {
		return false
	}
	if _, err := s.placer.nodeRecord(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		return false
	}
	_, err := s.placer.nodeLive(ctx, id)
	return errors.Is(err, errdefs.ErrNotFound)
}

// dropImages stops the uploads of these snapshots and removes their images from every node this
// control plane reaches (a restore may have fetched one anywhere). Best effort: a node not reached
// keeps them in its bounded cache, or pending until a control plane asks it to store them (which then
// finds the snapshot gone).
func (s *snapshotBook) dropImages(snapIDs ...string) {
	if len(snapIDs) == 0 {
		return
	}
	for _, id := range snapIDs {
		s.cancelUpload(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	caps, err := s.placer.nodesUp(ctx)
	if err != nil {
		s.log.Warn("drop snapshot images: list nodes", "err", err)
		return
	}
	var wg sync.WaitGroup
	for id := range caps {
		n, err := s.placer.node(ctx, id)
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.dropImagesOn(ctx, n, snapIDs...)
		}()
	}
	wg.Wait()
}

// dropImagesOn removes the images of these snapshots from node n, best effort.
func (s *snapshotBook) dropImagesOn(ctx context.Context, n Node, snapIDs ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := n.DropImages(ctx, snapIDs); err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
		s.log.Warn("drop snapshot images", "node", n.ID(), "snapshots", len(snapIDs), "err", err)
	}
}
