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
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/store"
)

// Snapshots are stored by the node that took them. One node call (nodecontract.Node.Snapshot) saves a
// sandbox's image on its node and lets the sandbox run on or destroys it (a pause); the snapshot is
// then recorded "uploading", and sessions resume and fork from that image at once (on that node). The
// node writes it into the snapshot store in the background (chunked, compressed, encrypted, straight
// from the node to the blob store), asking a control plane for the tenant's grant (NodeSnapshotGrant)
// and reporting the outcome (NodeSnapshotStored), retrying across its own restarts until it is stored,
// lost, or no longer wanted. The report records the snapshot complete (or failed), from any replica.
// So a pause costs the checkpoint, not the trip through the store, and no image byte, layer or
// retry loop is a replica's.

// errNoSnapshotWaits is every refusal of a node's snapshot call: the snapshot does not exist, is not
// the node's, or no longer waits for its image. The node drops the image.
var errNoSnapshotWaits = fmt.Errorf("no snapshot of this node waits for that image: %w", errdefs.ErrNotFound)

// Bounds of what a node's report may say of its image.
const (
	maxReportFilesPart = 255
	maxReportRuntime   = 64
)

// nodeSnapshot returns tenantID's snapshot snapID if node nodeID took it and it waits for its image
// (writing or uploading); refusals are errNoSnapshotWaits, a store failure unavailable.
func (s *snapshotBook) nodeSnapshot(ctx context.Context, nodeID, tenantID, snapID string) (store.Snapshot, error) {
	if nodeID == "" || tenantID == "" || snapID == "" {
		return store.Snapshot{}, errNoSnapshotWaits
	}
	sn, err := s.store.GetSnapshot(ctx, tenantID, snapID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument):
		return sn, errNoSnapshotWaits
	case err != nil:
		return sn, fmt.Errorf("snapshot %s: %v: %w", snapID, err, errdefs.ErrUnavailable)
	case sn.Meta[snapshotNodeMeta] != nodeID:
		return store.Snapshot{}, errNoSnapshotWaits
	}
	return sn, nil
}

// NodeSnapshotSaved records that node nodeID saved rep.Image for rep's snapshot, which it took: one
// writing is uploading from then on (restores and forks may use the image on the node). Said again (the
// node retries), it answers nil; a snapshot failed or deleted meanwhile is refused (errNoSnapshotWaits).
func (s *snapshotBook) NodeSnapshotSaved(ctx context.Context, nodeID string, rep nodecontract.SnapshotReport) error {
	if err := checkReport(rep); err != nil {
		return err
	}
	sn, err := s.nodeSnapshot(ctx, nodeID, rep.TenantID, rep.SnapshotID)
	if err != nil {
		return err
	}
	switch sn.State {
	case store.SnapshotUploading, store.SnapshotComplete:
		return nil
	case store.SnapshotWriting:
	default:
		return errNoSnapshotWaits
	}
	_, err = s.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
		switch sn.State {
		case store.SnapshotUploading, store.SnapshotComplete:
			return nil
		case store.SnapshotWriting:
		default:
			return errNoSnapshotWaits
		}
		sn.State = store.SnapshotUploading
		recordImage(sn, rep.Image)
		return nil
	})
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return errNoSnapshotWaits
	case err != nil:
		return fmt.Errorf("record snapshot %s saved: %v: %w", rep.SnapshotID, err, errdefs.ErrUnavailable)
	}
	return nil
}

// NodeSnapshotGrant gives node nodeID the grant that opens tenantID's snapshots, to store snapID, which
// it took and which waits for its image. A revoked key is refused as for any other use of it.
func (s *snapshotBook) NodeSnapshotGrant(ctx context.Context, nodeID, tenantID, snapID string) (*snapshot.Grant, error) {
	sn, err := s.nodeSnapshot(ctx, nodeID, tenantID, snapID)
	if err != nil {
		return nil, err
	}
	if sn.State != store.SnapshotWriting && sn.State != store.SnapshotUploading {
		return nil, errNoSnapshotWaits
	}
	snaps, err := s.snapshotStore()
	if err != nil {
		return nil, err
	}
	return snaps.Grant(ctx, tenantID, true)
}

// NodeSnapshotStored records what node nodeID reports of a snapshot it stored, or lost: complete (with
// the image's description, if the record of the checkpoint never came: its replica crashed), or
// failed. A snapshot deleted or failed meanwhile has what was stored deleted. Reports repeat (the node
// retries until one is answered): a settled snapshot answers nil.
func (s *snapshotBook) NodeSnapshotStored(ctx context.Context, nodeID string, rep nodecontract.SnapshotReport) error {
	if err := checkReport(rep); err != nil {
		return err
	}
	snaps, err := s.snapshotStore()
	if err != nil {
		return err
	}
	sn, err := s.nodeSnapshot(ctx, nodeID, rep.TenantID, rep.SnapshotID)
	if errors.Is(err, errdefs.ErrNotFound) {
		if _, gerr := s.store.GetSnapshot(ctx, rep.TenantID, rep.SnapshotID); errors.Is(gerr, errdefs.ErrNotFound) && rep.Lost == "" {
			// Deleted while it was stored: what was just stored goes too.
			_ = snaps.Delete(context.WithoutCancel(ctx), rep.TenantID, rep.SnapshotID)
		}
		return err
	}
	if err != nil {
		return err
	}
	faultinject.Crash("upload-stored")
	switch sn.State {
	case store.SnapshotComplete:
		return nil
	case store.SnapshotFailed:
		// Failed meanwhile (its replica went away before it was recorded, its key was revoked): what was
		// stored cannot be restored.
		if rep.Lost == "" {
			_ = snaps.Delete(context.WithoutCancel(ctx), sn.TenantID, sn.ID)
		}
		return nil
	}
	if rep.Lost != "" {
		s.log.Error("snapshot image lost before it was stored", "snapshot", sn.ID, "session", sn.SessionID, "node", nodeID, "reason", rep.Lost)
		_, err := s.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
			if sn.State.Terminal() {
				return nil
			}
			sn.State, sn.Reason = store.SnapshotFailed, truncateReason(rep.Lost)
			return nil
		})
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil // deleted meanwhile, image and all
		}
		return err
	}
	done := s.now()
	sn, err = s.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
		switch sn.State {
		case store.SnapshotComplete:
			return nil
		case store.SnapshotFailed:
			return fmt.Errorf("snapshot %s failed meanwhile: %w", sn.ID, errdefs.ErrConflict)
		case store.SnapshotWriting:
			recordImage(sn, rep.Image)
		}
		sn.State, sn.CompletedAt = store.SnapshotComplete, &done
		sn.LogicalBytes, sn.StoredBytes = rep.LogicalBytes, rep.NewStoredBytes
		sn.Meta["upload_ms"] = fmt.Sprint(rep.StoreMillis)
		return nil
	})
	switch {
	case errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrConflict):
		// Deleted, or failed, meanwhile: what was just stored goes.
		_ = snaps.Delete(context.WithoutCancel(ctx), rep.TenantID, rep.SnapshotID)
		return nil
	case err != nil:
		return fmt.Errorf("record snapshot %s stored: %v: %w", rep.SnapshotID, err, errdefs.ErrUnavailable)
	}
	faultinject.Crash("snapshot-complete")
	s.log.Info("snapshot stored", "session", sn.SessionID, "snapshot", sn.ID, "node", nodeID, "took_ms", rep.StoreMillis,
		"logical_bytes", rep.LogicalBytes, "new_bytes", rep.NewStoredBytes)
	return nil
}

// checkReport refuses a report whose fields are out of bounds.
func checkReport(rep nodecontract.SnapshotReport) error {
	switch {
	case len(rep.Lost) > nodecontract.MaxLostReason:
		return fmt.Errorf("report of snapshot %q: lost reason of %d bytes (at most %d): %w", rep.SnapshotID, len(rep.Lost), nodecontract.MaxLostReason, errdefs.ErrInvalidArgument)
	case len(rep.Image.FilesPart) > maxReportFilesPart || len(rep.Image.Runtime) > maxReportRuntime:
		return fmt.Errorf("report of snapshot %q: image description out of bounds: %w", rep.SnapshotID, errdefs.ErrInvalidArgument)
	case rep.LogicalBytes < 0 || rep.NewStoredBytes < 0 || rep.StoreMillis < 0 || rep.Image.Bytes < 0:
		return fmt.Errorf("report of snapshot %q: negative figures: %w", rep.SnapshotID, errdefs.ErrInvalidArgument)
	}
	return nil
}

// recordImage puts into sn what its node saved: the image's size, its files part, runtime and kind.
func recordImage(sn *store.Snapshot, img nodecontract.Image) {
	sn.LogicalBytes = img.Bytes
	if img.FilesPart != "" {
		sn.Meta[snapshotFilesMeta] = img.FilesPart
	} else {
		sn.Meta[snapshotFilesMeta] = noFilesPart
	}
	if img.Runtime != "" {
		sn.Meta[snapshotRuntimeMeta] = img.Runtime
	}
	sn.Meta[SnapshotKindMeta] = SnapshotKindMemory
	if img.FilesOnly {
		sn.Meta[SnapshotKindMeta] = SnapshotKindFiles
	}
}

// failSnapshotsOfRemovedNodes fails the snapshots still waiting for an image on a node that was removed
// for good: nothing will store them. (The leader runs it.)
func (s *snapshotBook) failSnapshotsOfRemovedNodes(ctx context.Context) {
	sns, err := s.store.ListSnapshotsByState(ctx, []store.SnapshotState{store.SnapshotWriting, store.SnapshotUploading}, store.MaxListLimit)
	if err != nil {
		s.log.Error("settle snapshots of removed nodes: list", "err", err)
		return
	}
	removed := map[string]bool{}
	for _, sn := range sns {
		id := sn.Meta[snapshotNodeMeta]
		if id == "" {
			continue
		}
		gone, ok := removed[id]
		if !ok {
			gone = s.nodeRemoved(ctx, id)
			removed[id] = gone
		}
		if !gone || (sn.State == store.SnapshotWriting && s.now().Sub(sn.CreatedAt) < opLeaseTTL) {
			continue
		}
		reason := "its node " + id + " was removed before the image reached the snapshot store"
		s.log.Error("snapshot image lost before it was stored", "snapshot", sn.ID, "session", sn.SessionID, "node", id, "reason", reason)
		if _, err := s.updateSnapshot(ctx, sn, func(sn *store.Snapshot) error {
			if sn.State.Terminal() {
				return nil
			}
			sn.State, sn.Reason = store.SnapshotFailed, reason
			return nil
		}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Error("settle snapshots of removed nodes", "snapshot", sn.ID, "err", err)
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

// dropImages removes the images of these snapshots from every node this control plane reaches (a
// restore may have fetched one anywhere), which also stops their stores. Best effort: a node not
// reached keeps them in its bounded cache, or pending until it asks for a grant to store them (which
// then finds the snapshot gone).
func (s *snapshotBook) dropImages(snapIDs ...string) {
	if len(snapIDs) == 0 {
		return
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

// pauseSnapshot returns the snapshot a pause of se took, if its node saved the image: the latest of the
// session's, taken by a pause, after se's head, uploading or complete. A pause interrupted once its node took
// the sandbox is finished at it.
func (s *snapshotBook) pauseSnapshot(ctx context.Context, se store.Session) (store.Snapshot, bool, error) {
	var found store.Snapshot
	cursor := ""
	for {
		sns, next, err := s.store.ListSnapshots(ctx, se.TenantID, store.SnapshotFilter{SessionID: se.ID, Cursor: cursor, Limit: store.MaxListLimit,
			States: []store.SnapshotState{store.SnapshotUploading, store.SnapshotComplete}})
		if err != nil {
			return found, false, fmt.Errorf("session %s: its pause's snapshot: %w", se.ID, err)
		}
		for _, sn := range sns {
			if sn.Trigger == store.TriggerPause && sn.ParentID == se.HeadSnapshotID && sn.CreatedAt.After(found.CreatedAt) {
				found = sn
			}
		}
		if next == "" {
			return found, found.ID != "", nil
		}
		cursor = next
	}
}
