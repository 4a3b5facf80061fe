package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/snapfs"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/store"
)

// Reading a snapshot's files without restoring it: its writable layer (the image's file its node's
// driver named, snapshotFilesMeta, from the snapshot store) over its template, as a snapfs.View.

// What a view of a snapshot holds in memory of its writable layer: the index (names and link targets,
// snapfs.EntryOverhead per entry) up to maxLayerIndexBytes, and the contents of files of at most
// maxHeldFile bytes up to maxHeldBytes in all. The rest of what the sandbox wrote is read again from
// the snapshot store, as a stream, when a file is read; a diff compares it by the digests taken while
// indexing.
const (
	maxLayerIndexBytes = 256 << 20
	maxHeldBytes       = 32 << 20
	maxHeldFile        = snapfs.MaxTextSize
)

// MaxSnapshotFileBytes bounds a file read from a snapshot.
const MaxSnapshotFileBytes = 64 << 20

// maxDiffChanges bounds the changes a diff lists.
const maxDiffChanges = 10000

// SnapshotView opens a view of the files of one snapshot in the session's timeline (its own, or its
// fork source). The caller closes it; ctx also bounds reading the View's files (large ones are read
// from the snapshot store again), so the View is used within ctx.
func (s *snapshotBook) SnapshotView(ctx context.Context, tenantID, sessionID, snapID string) (*snapfs.View, error) {
	snaps, err := s.snapshotStore()
	if err != nil {
		return nil, err
	}
	se, err := s.sessions.GetSession(ctx, tenantID, sessionID)
	if err != nil {
		return nil, err
	}
	// Reading a snapshot is decrypting it, even when this node holds a copy of its image.
	if err := s.keyring.checkKey(ctx, tenantID); err != nil {
		return nil, err
	}
	sn, err := s.sessions.restoreTarget(ctx, se, RestoreRequest{SnapshotID: snapID})
	if err != nil {
		return nil, err
	}
	tmpl := sn.Meta["template"]
	if tmpl == "" {
		tmpl = se.Spec.Template
	}
	root, err := s.templateRoot(ctx, tmpl)
	if err != nil {
		return nil, fmt.Errorf("template %q of snapshot %s: %w", tmpl, sn.ID, err)
	}
	layer, err := s.loadLayer(ctx, snaps, sn)
	if err != nil {
		return nil, err
	}
	return snapfs.NewView(layer, root)
}

// loadLayer reads the writable layer of sn from the snapshot store, once its node has stored it.
func (s *snapshotBook) loadLayer(ctx context.Context, snaps *snapshot.Store, sn store.Snapshot) (*snapfs.Layer, error) {
	sn, err := s.waitStored(ctx, sn)
	if err != nil {
		return nil, err
	}
	part := sn.Meta[snapshotFilesMeta]
	switch part {
	case "":
		part = legacyFilesPart
	case noFilesPart:
		return nil, fmt.Errorf("snapshot %s was taken by a runtime that keeps no file layer to read: %w", sn.ID, errdefs.ErrFailedPrecondition)
	}
	// reopen streams the layer from the store; the goroutine ends when the reader is closed or read to
	// its end (the pipe's writer fails once the reader is closed), or when ctx ends.
	reopen := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(snaps.ReadFile(ctx, sn.TenantID, sn.ID, part, pw)) }()
		return pr, nil
	}
	rc, err := reopen()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return loadLayerFrom(rc, sn.ID, reopen)
}

// storedWait bounds how long a read of a snapshot's files waits for its node to store it.
const storedWait = time.Minute

// waitStored waits until the snapshot store holds sn (its node is uploading it), for up to storedWait.
func (s *snapshotBook) waitStored(ctx context.Context, sn store.Snapshot) (store.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, storedWait)
	defer cancel()
	for {
		switch sn.State {
		case store.SnapshotComplete:
			return sn, nil
		case store.SnapshotUploading, store.SnapshotWriting:
		default:
			return sn, fmt.Errorf("snapshot %s is %s: %w", sn.ID, sn.State, errdefs.ErrConflict)
		}
		select {
		case <-ctx.Done():
			return sn, fmt.Errorf("snapshot %s is still being stored from its node; retry shortly: %w", sn.ID, errdefs.ErrUnavailable)
		case <-time.After(100 * time.Millisecond):
		}
		fresh, err := s.store.GetSnapshot(ctx, sn.TenantID, sn.ID)
		if err != nil {
			return sn, err
		}
		sn = fresh
	}
}

func loadLayerFrom(r io.Reader, snapID string, reopen func() (io.ReadCloser, error)) (*snapfs.Layer, error) {
	l, err := snapfs.LoadWith(r, snapfs.LoadOptions{MaxIndexBytes: maxLayerIndexBytes, MaxHeldBytes: maxHeldBytes,
		MaxHeldFile: maxHeldFile, Reopen: reopen})
	if err != nil {
		if errors.Is(err, errdefs.ErrFailedPrecondition) {
			return nil, fmt.Errorf("files of snapshot %s: %w", snapID, err)
		}
		return nil, fmt.Errorf("files of snapshot %s: %v: %w", snapID, err, errdefs.ErrInternal)
	}
	return l, nil
}

// DiffSnapshots lists what changed in the files from snapshot from to snapshot to, both in the
// session's timeline; truncated says the list stops at its bound.
func (s *snapshotBook) DiffSnapshots(ctx context.Context, tenantID, sessionID, from, to string) ([]snapfs.Change, bool, error) {
	a, b, err := s.twoViews(ctx, tenantID, sessionID, from, to)
	if err != nil {
		return nil, false, err
	}
	defer a.Close()
	defer b.Close()
	return snapfs.DiffLimit(a, b, maxDiffChanges)
}

// DiffSnapshotFile returns the unified diff of one file between two snapshots; ok is false when either
// side is not text (or too large to diff).
func (s *snapshotBook) DiffSnapshotFile(ctx context.Context, tenantID, sessionID, from, to, path string) (diff string, ok bool, err error) {
	a, b, err := s.twoViews(ctx, tenantID, sessionID, from, to)
	if err != nil {
		return "", false, err
	}
	defer a.Close()
	defer b.Close()
	var data [2][]byte
	found := false
	for i, v := range []*snapfs.View{a, b} {
		d, err := v.ReadFile(path, snapfs.MaxTextSize)
		switch {
		case errors.Is(err, errdefs.ErrNotFound): // absent on that side: all added or all removed
		case errors.Is(err, errdefs.ErrFailedPrecondition):
			return "", false, nil // too large to diff
		case err != nil:
			return "", false, err
		default:
			data[i], found = d, true
		}
	}
	if !found {
		return "", false, fmt.Errorf("%s is in neither snapshot: %w", path, errdefs.ErrNotFound)
	}
	diff, ok = snapfs.UnifiedDiff(path, data[0], data[1], 3)
	return diff, ok, nil
}

func (s *snapshotBook) twoViews(ctx context.Context, tenantID, sessionID, from, to string) (*snapfs.View, *snapfs.View, error) {
	a, err := s.SnapshotView(ctx, tenantID, sessionID, from)
	if err != nil {
		return nil, nil, err
	}
	b, err := s.SnapshotView(ctx, tenantID, sessionID, to)
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}
