package snapshot

import (
	"context"
	"fmt"
	"sync"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// holds is a Store's registry of what its open Writers use, which its GC must not take away: the
// chunks they reference (stored by them or found already stored) and the snapshot IDs they write.
//
// The protocol that keeps a chunk a Writer reuses from being deleted under it:
//
//   - a Writer holds a chunk before it Stats the chunk's blob, and keeps it until Commit or Abort;
//   - GC deletes a chunk only if, under the lock, no Writer holds it and none released it since the
//     GC began (its manifest may have been committed after GC listed the manifests), and it marks the
//     chunk as being deleted until the delete returns;
//   - a Writer that holds a chunk being deleted waits for the delete to finish before its Stat, which
//     then reports the chunk missing, so the Writer uploads it again.
type holds struct {
	mu sync.Mutex
	// tenants is guarded by mu; a tenant's entry is dropped when it holds nothing.
	tenants map[string]*tenantHolds
}

type tenantHolds struct {
	// chunks counts the open Writers holding each chunk.
	chunks map[string]int
	// writing are the snapshot IDs open Writers write.
	writing map[string]bool
	// gcs is the number of GCs running.
	gcs int
	// released are the chunks released while a GC ran; cleared when none runs.
	released map[string]bool
	// deleting are the chunks a GC is deleting, each with a channel closed when the delete returns.
	deleting map[string]chan struct{}
}

func (t *tenantHolds) empty() bool {
	return len(t.chunks) == 0 && len(t.writing) == 0 && t.gcs == 0 && len(t.deleting) == 0
}

// tenantLocked returns tenantID's entry, creating it.
func (h *holds) tenantLocked(tenantID string) *tenantHolds {
	if h.tenants == nil {
		h.tenants = map[string]*tenantHolds{}
	}
	t := h.tenants[tenantID]
	if t == nil {
		t = &tenantHolds{chunks: map[string]int{}, writing: map[string]bool{}, released: map[string]bool{}, deleting: map[string]chan struct{}{}}
		h.tenants[tenantID] = t
	}
	return t
}

func (h *holds) tidyLocked(tenantID string) {
	if t := h.tenants[tenantID]; t != nil && t.empty() {
		delete(h.tenants, tenantID)
	}
}

// reserve marks snapshotID as being written, or fails with ErrAlreadyExists if it is.
func (h *holds) reserve(tenantID, snapshotID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tenantLocked(tenantID)
	if t.writing[snapshotID] {
		return fmt.Errorf("snapshot %s of tenant %s is being written: %w", snapshotID, tenantID, errdefs.ErrAlreadyExists)
	}
	t.writing[snapshotID] = true
	return nil
}

func (h *holds) unreserve(tenantID, snapshotID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.tenants[tenantID]; t != nil {
		delete(t.writing, snapshotID)
		h.tidyLocked(tenantID)
	}
}

// hold holds chunk id for a Writer, first waiting for a GC's delete of it to finish. The hold stands
// even if ctx ends the wait; the Writer releases it with the others.
func (h *holds) hold(ctx context.Context, tenantID, id string) error {
	h.mu.Lock()
	t := h.tenantLocked(tenantID)
	t.chunks[id]++
	deleted := t.deleting[id]
	h.mu.Unlock()
	if deleted == nil {
		return nil
	}
	select {
	case <-deleted:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release drops a Writer's holds of ids.
func (h *holds) release(tenantID string, ids map[string]struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tenants[tenantID]
	if t == nil {
		return
	}
	for id := range ids {
		if t.chunks[id]--; t.chunks[id] <= 0 {
			delete(t.chunks, id)
		}
		if t.gcs > 0 {
			t.released[id] = true
		}
	}
	h.tidyLocked(tenantID)
}

// beginGC records that a GC of tenantID starts; endGC that it ended.
func (h *holds) beginGC(tenantID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tenantLocked(tenantID).gcs++
}

func (h *holds) endGC(tenantID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tenants[tenantID]
	if t.gcs--; t.gcs == 0 {
		clear(t.released)
	}
	h.tidyLocked(tenantID)
}

// deleteUnlessHeld calls del to delete chunk id unless a Writer holds it or released it during the
// GC, and reports whether it did. Writers that hold the chunk meanwhile wait for del to return.
func (h *holds) deleteUnlessHeld(tenantID, id string, del func() error) (bool, error) {
	h.mu.Lock()
	t := h.tenantLocked(tenantID)
	if t.chunks[id] > 0 || t.released[id] || t.deleting[id] != nil {
		h.mu.Unlock()
		return false, nil
	}
	done := make(chan struct{})
	t.deleting[id] = done
	h.mu.Unlock()

	err := del()

	h.mu.Lock()
	delete(t.deleting, id)
	close(done)
	h.tidyLocked(tenantID)
	h.mu.Unlock()
	return err == nil, err
}
