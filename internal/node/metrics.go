package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/runtime"
)

// Resource metrics: the node reads each sandbox it runs every nodecontract.SampleInterval (runtime.StatsReader: its
// cgroup and its disk's mount, from the host) into a ring of the last SampleKeep readings, an hour,
// and answers SandboxMetrics from it, with a reading taken at the moment for a window that reaches the
// present. One goroutine samples every sandbox, one after another; it starts with the first sandbox and
// stops with the node (Shutdown). A sandbox's ring goes when the node lets go of it (destroyed, or
// stopped through the node), and the warm pool's sandboxes, nobody's yet, have none.
//
// CPU use is the CPU time a sandbox used between two readings over the time between them and its CPUs
// (cpuUsedPct: 100 is all of its CPUs busy for the whole interval; capped at 100, which the runtime's
// own work for a checkpoint, done with the quota lifted, can pass). Its CPUs are its CPU limit in whole
// cores, rounded up. The first interval begins when the node handed the sandbox over (or re-adopted
// it), so the work of its boot or restore, and the node's to prepare it, is not counted as its own.

// SampleKeep is how many readings the node keeps of each sandbox: an hour's.
const SampleKeep = 720

// minCPUWindow is the shortest interval a reading taken on demand reports CPU use over, when the
// sandbox is that old: a shorter one is mostly noise.
const minCPUWindow = time.Second

// statsTimeout bounds one reading.
const statsTimeout = 2 * time.Second

// CPUCount is the number of CPUs a sandbox limited to millis thousandths of a core has: whole cores,
// rounded up, at least one (the driver's default of one core for 0).
func CPUCount(millis int64) int {
	if millis <= 0 {
		return 1
	}
	return int((millis + 999) / 1000)
}

// cpuPct is the CPU use between two readings of CPU time, in percent of cpus cores, 0 to 100, rounded
// to hundredths.
func cpuPct(from, to time.Time, used0, used1 time.Duration, cpus int) float64 {
	wall := to.Sub(from)
	if wall <= 0 || cpus < 1 {
		return 0
	}
	pct := float64(used1-used0) / (float64(wall) * float64(cpus)) * 100
	pct = min(max(pct, 0), 100)
	return math.Round(pct*100) / 100
}

// cpuReading is a sandbox's CPU time at one moment.
type cpuReading struct {
	t    time.Time
	used time.Duration
}

// ring holds one sandbox's readings. Its fields are guarded by sampler.mu.
type ring struct {
	cpus int
	// buf holds at most SampleKeep samples, the oldest at next once it is full.
	buf  []nodecontract.Sample
	next int
	// last and prev are the latest two CPU readings (prev is the zero reading until there are two):
	// the sandbox's CPU time when the node took it on, then at each sample.
	last, prev cpuReading
	// hasLast reports whether last holds a reading.
	hasLast bool
}

// add stores a reading taken at t and returns its sample.
func (r *ring) add(t time.Time, st runtime.Stats) nodecontract.Sample {
	s := r.sample(t, st, false)
	if len(r.buf) < SampleKeep {
		r.buf = append(r.buf, s)
	} else {
		r.buf[r.next] = s
		r.next = (r.next + 1) % SampleKeep
	}
	r.prev, r.last, r.hasLast = r.last, cpuReading{t, st.CPUTime}, true
	return s
}

// sample makes the sample of a reading taken at t, its CPU use over the interval since the latest
// reading; live (a reading on demand, not stored) reaches back to the one before if the latest is less
// than minCPUWindow old.
func (r *ring) sample(t time.Time, st runtime.Stats, live bool) nodecontract.Sample {
	s := nodecontract.Sample{Time: t, CPUCount: r.cpus, MemUsed: st.MemoryUsed, MemCache: st.MemoryCache, MemTotal: st.MemoryLimit,
		DiskUsed: st.DiskUsed, DiskTotal: st.DiskTotal}
	if !r.hasLast {
		return s
	}
	from := r.last
	if live && t.Sub(from.t) < minCPUWindow && !r.prev.t.IsZero() {
		from = r.prev
	}
	s.CPUUsedPct = cpuPct(from.t, t, from.used, st.CPUTime, r.cpus)
	return s
}

// between returns the stored samples taken in [start, end] (a zero bound is none), oldest first.
func (r *ring) between(start, end time.Time) []nodecontract.Sample {
	var out []nodecontract.Sample
	for i := range len(r.buf) {
		s := r.buf[(r.next+i)%len(r.buf)]
		if (start.IsZero() || !s.Time.Before(start)) && (end.IsZero() || !s.Time.After(end)) {
			out = append(out, s)
		}
	}
	return out
}

// sampler keeps the node's rings and runs its sampling loop.
type sampler struct {
	// interval is nodecontract.SampleInterval and now time.Now (tests change them before the first sandbox).
	interval time.Duration
	now      func() time.Time

	// mu is taken after Local.mu where both are held.
	mu sync.Mutex
	// rings holds a ring per sandbox the node runs; running is set while the loop runs, closed once
	// stop is closed. All guarded by mu.
	rings   map[string]*ring
	running bool
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

func newSampler() *sampler {
	return &sampler{interval: nodecontract.SampleInterval, now: time.Now, rings: map[string]*ring{}, stop: make(chan struct{})}
}

// registerMetrics gives sandbox id, of limits, a ring whose first interval starts now, and starts the
// sampling loop if it does not run yet. A sandbox the node let go of meanwhile, or a node shutting down,
// gets none.
func (n *Local) registerMetrics(id string, limits runtime.Limits) {
	sm := n.metrics
	r := &ring{cpus: CPUCount(limits.CPUMillis)}
	if rd, ok := n.drv.driverOf(id).(runtime.StatsReader); ok {
		ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
		st, err := rd.Stats(ctx, id)
		cancel()
		if err == nil {
			r.last, r.hasLast = cpuReading{sm.now(), st.CPUTime}, true
		}
	}
	// Under n.mu, as forget drops the ring: a sandbox forgotten meanwhile is not given one again.
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sandboxes[id] == nil {
		return
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if sm.closed {
		return
	}
	sm.rings[id] = r
	if !sm.running {
		sm.running = true
		sm.wg.Add(1)
		go n.sampleLoop() // owner: n; ends at Shutdown
	}
}

// forget drops sandbox id's ring. The node calls it holding Local.mu (see registerMetrics).
func (sm *sampler) forget(id string) {
	sm.mu.Lock()
	delete(sm.rings, id)
	sm.mu.Unlock()
}

// close stops the loop and waits for it.
func (sm *sampler) close() {
	sm.mu.Lock()
	if !sm.closed {
		sm.closed = true
		close(sm.stop)
	}
	sm.mu.Unlock()
	sm.wg.Wait()
}

// sampleLoop reads every sandbox every interval until the sampler closes.
func (n *Local) sampleLoop() {
	sm := n.metrics
	defer sm.wg.Done()
	t := time.NewTicker(sm.interval)
	defer t.Stop()
	for {
		select {
		case <-sm.stop:
			return
		case <-t.C:
			n.sampleAll()
		}
	}
}

// sampleAll takes a reading of every sandbox that has a ring, one after another, and stores it. A
// sandbox that cannot be read (it is going, or its driver reads nothing) is left out of this round.
func (n *Local) sampleAll() {
	sm := n.metrics
	sm.mu.Lock()
	rings := make(map[string]*ring, len(sm.rings))
	for id, r := range sm.rings {
		rings[id] = r
	}
	sm.mu.Unlock()
	for id, r := range rings {
		rd, ok := n.drv.driverOf(id).(runtime.StatsReader)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
		st, err := rd.Stats(ctx, id)
		cancel()
		if err != nil {
			n.log.Debug("sample sandbox resources", "sandbox", id, "err", err)
			continue
		}
		sm.mu.Lock()
		select {
		case <-sm.stop:
			sm.mu.Unlock()
			return
		default:
		}
		// A ring dropped meanwhile takes the reading and goes with it.
		r.add(sm.now(), st)
		sm.mu.Unlock()
	}
}

// SandboxMetrics reports the resource use of a sandbox the node runs: the readings it keeps taken in
// [start, end] (a zero bound is none), oldest first, and one taken now if end is zero or not before
// now. The readings go back at most SampleKeep × nodecontract.SampleInterval, and never past when the node took the
// sandbox on. A sandbox the node does not run is errdefs.ErrFailedPrecondition (see lookup), as is one
// whose driver reads nothing. It does not check who owns the sandbox: the control plane does.
func (n *Local) SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]nodecontract.Sample, error) {
	if !start.IsZero() && !end.IsZero() && start.After(end) {
		return nil, fmt.Errorf("metrics of sandbox %s: start %s is after end %s: %w", id, start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano), errdefs.ErrInvalidArgument)
	}
	if _, err := n.lookup(id); err != nil {
		return nil, err
	}
	drv := n.drv.driverOf(id)
	rd, ok := drv.(runtime.StatsReader)
	if !ok {
		return nil, fmt.Errorf("the %s runtime does not read resource use: %w", drv.Name(), errdefs.ErrFailedPrecondition)
	}
	sm := n.metrics
	sm.mu.Lock()
	r := sm.rings[id]
	var out []nodecontract.Sample
	if r != nil {
		out = r.between(start, end)
	}
	sm.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("sandbox %s is not running on node %s: %w", id, n.cfg.ID, errdefs.ErrFailedPrecondition)
	}
	now := sm.now()
	if end.IsZero() || !end.Before(now) {
		if start.IsZero() || !start.After(now) {
			st, err := rd.Stats(ctx, id)
			if errors.Is(err, errdefs.ErrNotFound) {
				// Going meanwhile: the node still has it, the host no longer.
				return nil, fmt.Errorf("sandbox %s is stopping: %v: %w", id, err, errdefs.ErrFailedPrecondition)
			}
			if err != nil {
				return nil, fmt.Errorf("metrics of sandbox %s: %w", id, err)
			}
			sm.mu.Lock()
			live := r.sample(now, st, true)
			sm.mu.Unlock()
			out = append(out, live)
		}
	}
	if out == nil {
		out = []nodecontract.Sample{}
	}
	return slices.Clip(out), nil
}
