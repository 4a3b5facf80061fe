package node

import "time"

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
