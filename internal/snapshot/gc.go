package snapshot

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/faultinject"
)

// GCStats reports what a GC run found and did.
type GCStats struct {
	// Snapshots is the number of manifests read.
	Snapshots int
	// Chunks is the number of chunk blobs listed; Referenced how many of them a manifest uses.
	Chunks     int
	Referenced int
	// Deleted is the number of chunks deleted, and DeletedBytes their size.
	Deleted      int
	DeletedBytes int64
	// KeptYoung is the number of unreferenced chunks kept for being younger than the grace period;
	// KeptHeld for being used by an open Writer.
	KeptYoung int
	KeptHeld  int
}

// LogValue lets GCStats be logged as a group.
func (g GCStats) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("snapshots", g.Snapshots), slog.Int("chunks", g.Chunks), slog.Int("referenced", g.Referenced),
		slog.Int("deleted", g.Deleted), slog.Int64("deleted_bytes", g.DeletedBytes), slog.Int("kept_young", g.KeptYoung),
		slog.Int("kept_held", g.KeptHeld))
}

// GC deletes the tenant's chunks that no snapshot references and that were last written more than
// grace ago, and reports what it did.
//
// It first reads every manifest and marks the chunks they reference, then lists the chunks and
// deletes the unmarked ones older than grace, except those an open Writer of this Store holds. Chunks
// of a snapshot being written elsewhere are only protected by their age: a Writer must Commit within
// grace of uploading its first chunk (an hour is a safe default for checkpoints; 0 is for tests and
// for stores no one else writes to).
//
// GC never deletes a manifest or a referenced chunk, so stopping it at any point — ctx, a crash —
// leaves every committed snapshot readable; it stops at the first error, before deleting anything if
// a manifest cannot be read (ErrPermissionDenied for a revoked key, ErrCorrupt for a damaged
// manifest), since its chunks would look unreferenced.
func (s *Store) GC(ctx context.Context, tenantID string, grace time.Duration) (GCStats, error) {
	var st GCStats
	if err := ValidateTenantID(tenantID); err != nil {
		return st, fmt.Errorf("gc snapshots: %w", err)
	}
	if grace < 0 {
		return st, fmt.Errorf("gc snapshots: negative grace period %v: %w", grace, errdefs.ErrInvalidArgument)
	}
	s.holds.beginGC(tenantID)
	defer s.holds.endGC(tenantID)
	start := s.now()
	cutoff := start.Add(-grace)

	// Mark.
	referenced := map[string]bool{}
	err := s.eachManifest(ctx, tenantID, func(m *Manifest) error {
		st.Snapshots++
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				referenced[c.ID] = true
			}
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("gc snapshots of tenant %s: mark: %w", tenantID, err)
	}

	// Sweep.
	prefix := chunksPrefix(tenantID)
	err = s.blobs.List(ctx, prefix, func(key string, size int64, modTime time.Time) error {
		id, ok := parseChunkKey(strings.TrimPrefix(key, prefix))
		if !ok {
			return nil // not a chunk: leave it alone
		}
		st.Chunks++
		switch {
		case referenced[id]:
			st.Referenced++
			return nil
		case !modTime.Before(cutoff):
			st.KeptYoung++
			return nil
		}
		deleted, err := s.holds.deleteUnlessHeld(tenantID, id, func() error { return s.blobs.Delete(ctx, key) })
		if err != nil {
			return fmt.Errorf("delete chunk %s: %w", id, err)
		}
		if !deleted {
			st.KeptHeld++
			return nil
		}
		st.Deleted++
		st.DeletedBytes += size
		faultinject.Crash("gc-chunk-deleted")
		return nil
	})
	s.log.Debug("snapshot: gc", "tenant", tenantID, "stats", st, "duration", time.Since(start), "err", err)
	if err != nil {
		return st, fmt.Errorf("gc snapshots of tenant %s: sweep: %w", tenantID, err)
	}
	return st, nil
}

// parseChunkKey returns the chunk ID of a key relative to the chunks prefix ("ab/ab12…").
func parseChunkKey(rel string) (string, bool) {
	dir, id, ok := strings.Cut(rel, "/")
	if !ok || !validChunkID(id) || dir != id[:2] {
		return "", false
	}
	return id, true
}
