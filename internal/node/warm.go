package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/cleanup"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/runtime"
)

// The warm pool: for the creates of a template's start snapshot, the node keeps sandboxes restored
// ahead (runtime.WarmRestorer), so that a create only wakes one instead of restoring it. A warm
// sandbox is restored under an ID of its own, in a network namespace with its veth, but is nobody's
// yet: the gateway does not know it (nothing it sends leaves the veth), its daemon is quiesced (nothing
// can reach it) and it has neither an environment nor an interception CA of a create. A create takes
// one in two steps, so that the control plane records the sandbox before the node hands it over (as it
// does every create): TakeWarm reserves a ready one and gives its ID, which the control plane records
// and then creates; CreateSandbox of that ID registers it with the gateway under the create's policy,
// gives the daemon the create's environment and wakes it, and installs the CA, as a restore does.
//
// A pool belongs to one kind of create: the tenant, the template version, the runtime, the limits and
// the start snapshot (a warm sandbox never serves another tenant). Each TakeWarm asks for the pool of
// its kind to be kept filled, one restore at a time in the background; a kind nobody asked for in
// warmIdle loses its pool, a reserved sandbox not created within warmHold is destroyed, and removing
// the start snapshot or its image destroys the pool. Warm sandboxes are never handed out twice, and a
// node that stops destroys them (Shutdown; after a crash, they are orphans to the control plane).

// DefaultWarmPool is how many sandboxes a node keeps restored ahead for each kind of create of a start
// snapshot (Config.WarmPool).
const DefaultWarmPool = 1

// warmMax bounds the warm sandboxes of a node, of every kind together (each holds the memory its start
// snapshot had).
const warmMax = 16

// warmIdle is how long a kind of create keeps its pool without a create asking for it.
const warmIdle = 10 * time.Minute

// warmHold is how long a warm sandbox TakeWarm reserved waits for its create.
const warmHold = time.Minute

// warmWait bounds how long TakeWarm waits for a restore of the pool's in progress: less than a restore
// takes, which the create would do otherwise (competing with the pool's).
const warmWait = time.Second

// warmRestoreTimeout bounds one restore of the pool's.
const warmRestoreTimeout = 2 * time.Minute

// warmKind is what a warm sandbox can serve: the creates with the same fields.
type warmKind struct {
	tenant, template, runtime, start string
	limits                           runtime.Limits
}

// warmSandbox is one sandbox of the pool.
type warmSandbox struct {
	id   string
	kind warmKind
	addr hostnet.Addr
	// ready is set once it is restored; held once TakeWarm reserved it; dying while it is destroyed
	// (it stays in the pool until then, so that a create of its ID cannot boot another under it).
	ready bool
	held  time.Time
	dying bool
}

// warmDemand is a kind of create the pool is kept filled for.
type warmDemand struct {
	req     nodecontract.CreateRequest // the latest create of the kind (its ID and Env unused)
	asked   time.Time
	filling bool
}

// warmPool is the node's pool (see above). Its fields are guarded by mu.
type warmPool struct {
	size int
	// hold and idle are warmHold and warmIdle (tests shorten them).
	hold, idle time.Duration
	mu         sync.Mutex
	byID       map[string]*warmSandbox // every warm sandbox: restoring, ready or reserved
	demand     map[warmKind]*warmDemand
	closed     bool
	janitor    bool
	stop       chan struct{}
	wg         sync.WaitGroup
	// changed is closed (and replaced) when a restore of the pool's ends.
	changed chan struct{}
	// The creates of start snapshots, by how they were served (StartStats); guarded by mu.
	stats StartStats
}

// StartStats counts the creates of templates' start snapshots on the node, by how each was served.
type StartStats struct {
	// Warm were handed a sandbox the warm pool restored ahead; Restored were restored from the start
	// snapshot when asked; Booted booted and started the command (no start snapshot, or a runtime that
	// cannot restore).
	Warm, Restored, Booted uint64
	// Ready is how many warm sandboxes are ready now.
	Ready int
}

// StartStats reports how the node served the creates of start snapshots since it started.
func (n *Local) StartStats() StartStats {
	p := n.warm
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	for _, w := range p.byID {
		if w.ready && w.held.IsZero() && !w.dying {
			st.Ready++
		}
	}
	return st
}

// countStart counts a create of a start snapshot that succeeded, served as warm or fromStart say.
func (p *warmPool) countStart(warm, fromStart bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case warm:
		p.stats.Warm++
	case fromStart:
		p.stats.Restored++
	default:
		p.stats.Booted++
	}
}

func newWarmPool(size int) *warmPool {
	if size == 0 {
		size = DefaultWarmPool
	}
	return &warmPool{size: max(size, 0), hold: warmHold, idle: warmIdle, byID: map[string]*warmSandbox{}, demand: map[warmKind]*warmDemand{}, stop: make(chan struct{}),
		changed: make(chan struct{})}
}

// has reports whether id is a warm sandbox not yet taken by its create.
func (p *warmPool) has(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.byID[id]
	return ok
}

// warmKindOf is the kind of create req is, on driver drv.
func warmKindOf(req nodecontract.CreateRequest, drv runtime.Driver) warmKind {
	k := warmKind{tenant: req.TenantID, template: req.Template, runtime: drv.Name(), limits: runtime.Limits(req.Limits)}
	if req.Start != nil {
		k.start = req.Start.Key
	}
	return k
}

// TakeWarm reserves a sandbox restored ahead for a create like req (its ID ignored) and returns its ID,
// which the create must then use (CreateSandbox with that ID, within warmHold), if the node has one
// ready, or one of the pool's restores in progress ends within warmWait (and ctx); and asks for the
// pool of req's kind to be kept filled.
func (n *Local) TakeWarm(ctx context.Context, req nodecontract.CreateRequest) (string, bool) {
	p := n.warm
	if p.size == 0 || req.Start == nil || req.Start.Key == "" || !n.HasStart(req.Start.Key) {
		return "", false
	}
	drv, err := n.drv.get(req.Runtime)
	if err != nil {
		return "", false
	}
	if _, ok := drv.(runtime.WarmRestorer); !ok {
		return "", false
	}
	kind := warmKindOf(req, drv)
	wait := time.NewTimer(warmWait)
	defer wait.Stop()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return "", false
	}
	d := p.demand[kind]
	if d == nil {
		d = &warmDemand{}
		p.demand[kind] = d
	}
	d.req, d.asked = req, time.Now()
	d.req.ID, d.req.Env = "", nil
	n.fillLocked(kind, d)
	for {
		restoring := false
		for _, w := range p.byID {
			switch {
			case w.kind != kind || !w.held.IsZero() || w.dying:
			case w.ready:
				w.held = time.Now()
				if d := p.demand[kind]; d != nil {
					n.fillLocked(kind, d) // its place in the pool (the filling may have ended meanwhile)
				}
				p.mu.Unlock()
				return w.id, true
			default:
				restoring = true
			}
		}
		changed := p.changed
		p.mu.Unlock()
		if !restoring {
			return "", false
		}
		select {
		case <-changed:
		case <-wait.C:
			return "", false
		case <-ctx.Done():
			return "", false
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return "", false
		}
	}
}

// signalLocked wakes the TakeWarm calls waiting for a restore. p.mu is held.
func (p *warmPool) signalLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// fillLocked starts filling the pool of kind, unless it is being filled. p.mu is held.
func (n *Local) fillLocked(kind warmKind, d *warmDemand) {
	p := n.warm
	if d.filling {
		return
	}
	d.filling = true
	p.wg.Add(1)
	go n.fill(kind)
	if !p.janitor {
		p.janitor = true
		p.wg.Add(1)
		go n.warmJanitor()
	}
}

// fill restores sandboxes of kind, one at a time, until its pool has p.size ready or its demand is
// gone. A failed restore ends the filling until the next TakeWarm.
func (n *Local) fill(kind warmKind) {
	p := n.warm
	defer p.wg.Done()
	for {
		p.mu.Lock()
		d := p.demand[kind]
		count := 0
		for _, w := range p.byID {
			if w.kind == kind && w.held.IsZero() && !w.dying {
				count++
			}
		}
		if p.closed || d == nil || count >= p.size || len(p.byID) >= warmMax {
			if d != nil {
				d.filling = false
			}
			p.mu.Unlock()
			return
		}
		req := d.req
		req.ID = "sb_" + strings.ToLower(rand.Text()) // an ID of the control plane's form
		p.byID[req.ID] = &warmSandbox{id: req.ID, kind: kind}
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), warmRestoreTimeout)
		addr, err := n.prewarm(ctx, req)
		cancel()
		p.mu.Lock()
		p.signalLocked()
		w := p.byID[req.ID]
		if err == nil && w != nil && !p.closed {
			w.ready, w.addr = true, addr
			p.mu.Unlock()
			continue
		}
		delete(p.byID, req.ID)
		if err != nil && p.demand[kind] != nil {
			p.demand[kind].filling = false
		}
		p.mu.Unlock()
		if err == nil {
			// Dropped (or the node closed) while it restored.
			n.destroyWarm(req.ID)
			continue
		}
		n.log.Warn("warm pool: restore ahead", "template", kind.template, "start", kind.start, "err", err)
		return
	}
}

// prewarm restores sandbox req.ID from its start snapshot, its daemon quiesced, unknown to the gateway.
// On error nothing of it is left.
func (n *Local) prewarm(ctx context.Context, req nodecontract.CreateRequest) (hostnet.Addr, error) {
	var addr hostnet.Addr
	tpl, err := n.template(ctx, req.Template)
	if err != nil {
		return addr, err
	}
	drv, err := n.drv.get(req.Runtime)
	if err != nil {
		return addr, err
	}
	wr, ok := drv.(runtime.WarmRestorer)
	if !ok {
		return addr, errors.New("the runtime cannot restore ahead")
	}
	dir, release, ok := n.starts.open(req.Start.Key)
	if !ok {
		return addr, errors.New("the start snapshot is gone")
	}
	defer release()
	var c cleanup.Cleanup
	defer c.Clean()
	if addr, err = n.makeNetwork(req.ID, &c); err != nil {
		return addr, err
	}
	n.drv.track(req.ID, drv.Name())
	c.Add(func() { n.drv.untrack(req.ID) })
	if _, err := wr.RestoreQuiesced(ctx, n.runtimeSpec(req.ID, tpl, n.sandboxEnv(tpl, req), n.netnsPath(req.ID), runtime.Limits(req.Limits)), dir); err != nil {
		return addr, err
	}
	c.Release()
	return addr, nil
}

// claimWarm returns the warm sandbox TakeWarm reserved for the create req (a restore from imageDir if
// not ""), taking it out of the pool; nil if req.ID names none. One reserved for another kind of create
// is destroyed first (and nil returned): the create then boots req.ID the usual way. An ID of the pool
// that no TakeWarm gave is refused, as is one whose expired reservation is being destroyed (once it is
// gone, a create of the ID boots the usual way).
func (n *Local) claimWarm(req nodecontract.CreateRequest, drv runtime.Driver, imageDir string) (*warmSandbox, error) {
	p := n.warm
	p.mu.Lock()
	w := p.byID[req.ID]
	switch {
	case w == nil:
		p.mu.Unlock()
		return nil, nil
	case w.held.IsZero():
		p.mu.Unlock()
		return nil, fmt.Errorf("sandbox %s: %w", req.ID, errdefs.ErrAlreadyExists)
	case w.dying:
		p.mu.Unlock()
		return nil, fmt.Errorf("sandbox %s: the warm sandbox reserved for it expired; create again: %w", req.ID, errdefs.ErrUnavailable)
	}
	_, ok := drv.(runtime.WarmRestorer)
	if ok && imageDir == "" && w.kind == warmKindOf(req, drv) {
		delete(p.byID, req.ID)
		p.mu.Unlock()
		return w, nil
	}
	w.dying = true
	p.mu.Unlock()
	n.log.Warn("warm pool: a create of another kind took a warm sandbox; booting it anew", "sandbox", req.ID)
	n.destroyWarm(req.ID)
	return nil, nil
}

// destroyWarm destroys warm sandbox id, marked dying, and then takes it out of the pool.
func (n *Local) destroyWarm(id string) {
	if err := n.DestroySandbox(context.Background(), id); err != nil {
		n.log.Warn("warm pool: destroy", "sandbox", id, "err", err)
	}
	p := n.warm
	p.mu.Lock()
	delete(p.byID, id)
	p.mu.Unlock()
}

// dropWarm destroys the ready and reserved warm sandboxes that match, and forgets the demand of their
// kinds; those being restored are destroyed when their restore ends.
func (n *Local) dropWarm(match func(warmKind) bool) {
	p := n.warm
	p.mu.Lock()
	var ids []string
	for id, w := range p.byID {
		if !match(w.kind) || w.dying {
			continue
		}
		if w.ready {
			w.dying = true
			ids = append(ids, id)
		} else {
			delete(p.byID, id)
		}
	}
	for k := range p.demand {
		if match(k) {
			delete(p.demand, k)
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		n.destroyWarm(id)
	}
}

// dropWarmImage drops the pools of the start snapshots of image digest ("sha256:…"; see dropWarm).
func (n *Local) dropWarmImage(digest string) {
	hex := strings.TrimPrefix(digest, "sha256:") + "-"
	n.dropWarm(func(k warmKind) bool { return strings.HasPrefix(k.start, hex) })
}

// warmJanitor destroys, every warmIdle/10, the pools of kinds nobody asked for in warmIdle and the
// reserved sandboxes no create took in warmHold.
func (n *Local) warmJanitor() {
	p := n.warm
	defer p.wg.Done()
	t := time.NewTicker(min(p.idle/10, p.hold/2))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			idle := map[warmKind]bool{}
			for k, d := range p.demand {
				if now.Sub(d.asked) > p.idle {
					idle[k] = true
				}
			}
			var stale []string
			for id, w := range p.byID {
				if !w.held.IsZero() && !w.dying && now.Sub(w.held) > p.hold {
					w.dying = true
					stale = append(stale, id)
				}
			}
			p.mu.Unlock()
			for _, id := range stale {
				n.log.Warn("warm pool: a reserved sandbox was not created in time; destroying it", "sandbox", id)
				n.destroyWarm(id)
			}
			if len(idle) > 0 {
				n.dropWarm(func(k warmKind) bool { return idle[k] })
			}
		}
	}
}

// closeWarm destroys the pool and waits for its restores and janitor.
func (n *Local) closeWarm() {
	p := n.warm
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	p.mu.Unlock()
	n.dropWarm(func(warmKind) bool { return true })
	p.wg.Wait()
}

// forget takes id out of the pool (it is being destroyed), unless the pool destroys it itself.
func (p *warmPool) forget(id string) {
	p.mu.Lock()
	if w := p.byID[id]; w != nil && !w.dying {
		delete(p.byID, id)
	}
	p.mu.Unlock()
}
