package node

import (
	"os"
	"strings"
	"time"
)

// SetWarmTimes shortens how long n's warm pool keeps a reservation and an idle kind's pool; call it
// before the first TakeWarm.
func SetWarmTimes(n *Local, hold, idle time.Duration) {
	n.warm.hold, n.warm.idle = hold, idle
}

// SetMetricsClock makes n's sampler read the time from now and sample every interval; call it before
// the first sandbox.
func SetMetricsClock(n *Local, now func() time.Time, interval time.Duration) {
	n.metrics.now, n.metrics.interval = now, interval
}

// SampleAll takes one round of readings, as the sampling loop does every interval.
func SampleAll(n *Local) { n.sampleAll() }

// HasMetrics reports whether n keeps a ring of readings for sandbox id.
func HasMetrics(n *Local, id string) bool {
	n.metrics.mu.Lock()
	defer n.metrics.mu.Unlock()
	return n.metrics.rings[id] != nil
}

// InWarmPool reports whether the node's warm pool still has sandbox id (ready, reserved or dying).
func InWarmPool(n *Local, id string) bool {
	n.warm.mu.Lock()
	defer n.warm.mu.Unlock()
	return n.warm.byID[id] != nil
}

// SetStoreBackoff sets how long n's background stores wait before they try again: first, doubled with
// each failure, up to longest.
func SetStoreBackoff(n *Local, first, longest time.Duration) {
	n.images.stores.mu.Lock()
	defer n.images.stores.mu.Unlock()
	n.images.stores.backoff, n.images.stores.maxBackoff = first, longest
}

// PendingImages reports the snapshots whose images n saved and has not stored yet.
func PendingImages(n *Local) []string { return n.images.pendingImages() }

// PendingDir is where n keeps the image of snapID until it is stored.
func PendingDir(n *Local, snapID string) string { return n.images.pendingDir(snapID) }

// StoreJobs reports the snapshots n keeps a store's job for.
func StoreJobs(n *Local) []string {
	var ids []string
	entries, _ := os.ReadDir(n.images.pending)
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), jobSuffix); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// StoresRunning counts n's running background stores.
func StoresRunning(n *Local) int {
	n.images.stores.mu.Lock()
	defer n.images.stores.mu.Unlock()
	return len(n.images.stores.runs)
}
