package snapshot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/cleanup"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// Manifest reports the manifest of snapshot snapshotID of tenantID. It fails with ErrNotFound if there
// is no such snapshot, ErrPermissionDenied if the tenant's key is revoked, and ErrCorrupt if the
// manifest does not authenticate.
func (s *Store) Manifest(ctx context.Context, tenantID, snapshotID string) (Manifest, error) {
	if err := checkIDs(tenantID, snapshotID); err != nil {
		return Manifest{}, fmt.Errorf("get snapshot: %w", err)
	}
	k, m, err := s.open(ctx, tenantID, snapshotID)
	if err != nil {
		return Manifest{}, err
	}
	k.clear()
	return m, nil
}

// open reads and checks a snapshot's manifest and returns it with the tenant's keys, which the caller
// clears.
func (s *Store) open(ctx context.Context, tenantID, snapshotID string) (*tenantKeys, Manifest, error) {
	return s.openWith(ctx, tenantID, snapshotID, func() (*tenantKeys, error) { return s.loadKeys(ctx, tenantID, false) })
}

// openWith is open with the keys that load gives.
func (s *Store) openWith(ctx context.Context, tenantID, snapshotID string, load func() (*tenantKeys, error)) (*tenantKeys, Manifest, error) {
	data, err := s.blobs.Get(ctx, manifestKey(tenantID, snapshotID))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, Manifest{}, fmt.Errorf("snapshot %s of tenant %s: %w", snapshotID, tenantID, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, Manifest{}, fmt.Errorf("read snapshot %s: %w", snapshotID, err)
	}
	k, err := load()
	if errors.Is(err, errdefs.ErrNotFound) {
		err = &CorruptError{Snapshot: snapshotID, Reason: "the tenant's data key is missing"}
	}
	if err != nil {
		return nil, Manifest{}, fmt.Errorf("read snapshot %s: %w", snapshotID, err)
	}
	m, err := k.openManifest(snapshotID, data)
	if err != nil {
		k.clear()
		return nil, Manifest{}, err
	}
	return k, m, nil
}

// ReadFile writes the content of file name of the snapshot to w. Every chunk is authenticated and
// checked against its ID and size before it is written; a missing or damaged one stops the read with
// a *CorruptError (ErrCorrupt) naming the snapshot, file and chunk. w may then have received part of
// the file: a caller that needs all or nothing writes to a temporary place (or uses Restore). It fails
// with ErrNotFound if the snapshot has no such file, and otherwise like Manifest.
func (s *Store) ReadFile(ctx context.Context, tenantID, snapshotID, name string, w io.Writer) error {
	if err := checkIDs(tenantID, snapshotID); err != nil {
		return fmt.Errorf("read snapshot file: %w", err)
	}
	if err := ValidateFileName(name); err != nil {
		return fmt.Errorf("read snapshot file: %w", err)
	}
	k, m, err := s.open(ctx, tenantID, snapshotID)
	if err != nil {
		return err
	}
	defer k.clear()
	i := slices.IndexFunc(m.Files, func(f File) bool { return f.Name == name })
	if i < 0 {
		return fmt.Errorf("snapshot %s has no file %s: %w", snapshotID, name, errdefs.ErrNotFound)
	}
	return s.readFile(ctx, k, snapshotID, &m.Files[i], w)
}

// readFile fetches and checks f's chunks, up to readAhead of them ahead of the one it writes to w, in
// order. Its goroutines have ended when it returns.
func (s *Store) readFile(ctx context.Context, k *tenantKeys, snapshotID string, f *File, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		data []byte
		err  error
	}
	pending := make(chan chan result, readAhead)
	go func() {
		defer close(pending)
		for _, ref := range f.Chunks {
			res := make(chan result, 1)
			select {
			case pending <- res:
			case <-ctx.Done():
				return
			}
			go func() {
				data, err := s.fetchChunk(ctx, k, snapshotID, f.Name, ref)
				res <- result{data, err}
			}()
		}
	}()
	var err error
	for res := range pending {
		r := <-res
		switch {
		case err != nil:
			// Draining after a failure.
		case r.err != nil:
			err = r.err
			cancel()
		default:
			if _, werr := w.Write(r.data); werr != nil {
				err = fmt.Errorf("snapshot %s: file %s: write: %w", snapshotID, f.Name, werr)
				cancel()
			}
		}
	}
	if err == nil {
		err = ctx.Err() // canceled before every chunk was fetched
	}
	return err
}

// fetchChunk gets and checks one chunk and returns its plaintext.
func (s *Store) fetchChunk(ctx context.Context, k *tenantKeys, snapshotID, file string, ref ChunkRef) ([]byte, error) {
	data, err := s.blobs.Get(ctx, chunkKey(k.tenant, ref.ID))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, &CorruptError{Snapshot: snapshotID, File: file, Chunk: ref.ID, Reason: "missing"}
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: file %s: chunk %s: %w", snapshotID, file, ref.ID, err)
	}
	return k.openChunk(snapshotID, file, ref, data)
}

// Restore writes every file of the snapshot under dir, which it creates (0700) if missing, with the
// files' parent directories (0700). Files are created 0600 and must not exist yet (ErrAlreadyExists).
// Names are resolved inside dir only: one that would escape it, through ".." or a symbolic link, fails.
// On failure Restore removes every file and directory it created, so dir holds all of the snapshot or
// nothing of it; errors are as for ReadFile.
func (s *Store) Restore(ctx context.Context, tenantID, snapshotID, dir string) error {
	return s.restore(ctx, tenantID, snapshotID, dir, func() (*tenantKeys, error) { return s.loadKeys(ctx, tenantID, false) })
}

// restore is Restore with the keys that load gives.
func (s *Store) restore(ctx context.Context, tenantID, snapshotID, dir string, load func() (*tenantKeys, error)) error {
	if err := checkIDs(tenantID, snapshotID); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if dir == "" {
		return fmt.Errorf("restore snapshot %s: empty directory: %w", snapshotID, errdefs.ErrInvalidArgument)
	}
	k, m, err := s.openWith(ctx, tenantID, snapshotID, load)
	if err != nil {
		return err
	}
	defer k.clear()

	var undo cleanup.Cleanup
	defer undo.Clean()
	// Make dir and its missing parents one by one, to remove only those made here.
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for _, d := range slices.Backward(missing) {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("restore snapshot %s: %w", snapshotID, err)
		}
		undo.Add(func() { os.Remove(d) })
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("restore snapshot %s: %w", snapshotID, err)
	}
	err = s.restoreInto(ctx, k, root, snapshotID, m.Files)
	root.Close()
	if err != nil {
		return err
	}
	undo.Release()
	return nil
}

// restoreInto writes files under root. On failure it removes what it created.
func (s *Store) restoreInto(ctx context.Context, k *tenantKeys, root *os.Root, snapshotID string, files []File) error {
	var undo cleanup.Cleanup
	defer undo.Clean()
	for i := range files {
		f := &files[i]
		// Make the parents one by one, to remove only those made here.
		var parents []string
		for d := path.Dir(f.Name); d != "."; d = path.Dir(d) {
			parents = append(parents, d)
		}
		for _, d := range slices.Backward(parents) {
			err := root.Mkdir(d, 0o700)
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("restore snapshot %s: file %s: %w", snapshotID, f.Name, err)
			}
			undo.Add(func() { root.Remove(d) })
		}
		out, err := root.OpenFile(f.Name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("restore snapshot %s: file %s exists: %w", snapshotID, f.Name, errdefs.ErrAlreadyExists)
		}
		if err != nil {
			return fmt.Errorf("restore snapshot %s: file %s: %w", snapshotID, f.Name, err)
		}
		undo.Add(func() { root.Remove(f.Name) })
		err = s.readFile(ctx, k, snapshotID, f, out)
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("restore snapshot %s: file %s: %w", snapshotID, f.Name, cerr)
		}
		if err != nil {
			return err
		}
	}
	undo.Release()
	return nil
}

// List reports the tenant's snapshots, oldest first (by creation time, then ID). It decrypts every
// manifest, so it fails with ErrPermissionDenied if the tenant's key is revoked and with ErrCorrupt if
// a manifest does not authenticate. A tenant without snapshots has an empty list.
func (s *Store) List(ctx context.Context, tenantID string) ([]ManifestInfo, error) {
	if err := ValidateTenantID(tenantID); err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []ManifestInfo
	err := s.eachManifest(ctx, tenantID, func(m *Manifest) error {
		out = append(out, m.info())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list snapshots of tenant %s: %w", tenantID, err)
	}
	slices.SortFunc(out, func(a, b ManifestInfo) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// eachManifest calls fn with each of the tenant's manifests, skipping those deleted meanwhile. It
// unwraps the tenant's data key only if there is a manifest.
func (s *Store) eachManifest(ctx context.Context, tenantID string, fn func(*Manifest) error) error {
	var k *tenantKeys
	defer func() { k.clear() }()
	prefix := manifestsPrefix(tenantID)
	return s.blobs.List(ctx, prefix, func(key string, _ int64, _ time.Time) error {
		id := strings.TrimPrefix(key, prefix)
		if ValidateSnapshotID(id) != nil {
			return nil // not a manifest
		}
		data, err := s.blobs.Get(ctx, key)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil // deleted since listed
		}
		if err != nil {
			return fmt.Errorf("read snapshot %s: %w", id, err)
		}
		if k == nil {
			if k, err = s.loadKeys(ctx, tenantID, false); errors.Is(err, errdefs.ErrNotFound) {
				return &CorruptError{Snapshot: id, Reason: "the tenant's data key is missing"}
			} else if err != nil {
				return err
			}
		}
		m, err := k.openManifest(id, data)
		if err != nil {
			return err
		}
		return fn(&m)
	})
}

// Delete deletes snapshot snapshotID of tenantID: its manifest, at once. Its chunks stay until a GC
// finds no other snapshot using them. It fails with ErrNotFound if there is no such snapshot.
func (s *Store) Delete(ctx context.Context, tenantID, snapshotID string) error {
	if err := checkIDs(tenantID, snapshotID); err != nil {
		return fmt.Errorf("delete snapshot: %w", err)
	}
	key := manifestKey(tenantID, snapshotID)
	if _, err := s.blobs.Stat(ctx, key); errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("snapshot %s of tenant %s: %w", snapshotID, tenantID, errdefs.ErrNotFound)
	} else if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", snapshotID, err)
	}
	if err := s.blobs.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", snapshotID, err)
	}
	return nil
}
