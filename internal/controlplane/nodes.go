package controlplane

import (
	"cmp"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// The nodes a control plane runs sandboxes on: its own (in-process, Config.Node), and the nodes in
// processes of their own that joined the cluster and report in heartbeats (Config.DialNode). Each
// sandbox is on the node its record names; every call about it goes there.

// liveDocPrefix starts the keys of the nodes' latest heartbeats: liveDocPrefix + the node's ID.
const liveDocPrefix = "cluster/live/"

// NodeDownAfter is how long after its last heartbeat a node is taken for down: no sandbox is placed on
// it, and the leader fails its sandboxes and resumes its sessions elsewhere (failover.go). It exceeds
// nodeapi.FenceAfter, after which a node that cannot reach a control plane has stopped its sandboxes (and
// a node process that died has had them stopped by its fence keeper, app.KeeperSlack later), by one
// heartbeat: docs/ARCHITECTURE.md has the timing argument.
const NodeDownAfter = nodeapi.FenceAfter + nodeapi.HeartbeatInterval

// NodeLive is a node's latest heartbeat, as the control plane recorded it.
type NodeLive struct {
	nodeapi.Heartbeat
	// SeenAt is when the heartbeat arrived; BootSeenAt when the first heartbeat of this Boot did.
	SeenAt     time.Time `json:"seen_at"`
	BootSeenAt time.Time `json:"boot_seen_at"`
	// Reported is the capacity the node reported; Capacity is that cut to the node's bound.
	Reported nodecontract.Capacity `json:"reported"`
}

// Up reports whether the node was heard from within NodeDownAfter of now, and is not leaving.
func (l NodeLive) Up(now time.Time) bool { return !l.Leaving && now.Sub(l.SeenAt) < NodeDownAfter }

// checkRuntimes bounds the runtimes a heartbeat reports: a node taken over must not fill the Store.
func checkRuntimes(rs []nodecontract.Runtime) error {
	if len(rs) > 8 {
		return fmt.Errorf("heartbeat: %d runtimes, at most 8: %w", len(rs), errdefs.ErrInvalidArgument)
	}
	for _, r := range rs {
		if checkRuntimeName(r.Name) != nil || r.Name == RuntimeVM || len(r.Abilities) > 8 {
			return fmt.Errorf("heartbeat: runtime %q: %w", r.Name, errdefs.ErrInvalidArgument)
		}
		switch {
		case r.Accel == "" && !isVM(r.Name):
		case (r.Accel == nodecontract.AccelKVM || r.Accel == nodecontract.AccelTCG) && isVM(r.Name):
		default:
			return fmt.Errorf("heartbeat: runtime %s: accelerator %q: %w", r.Name, r.Accel, errdefs.ErrInvalidArgument)
		}
		for _, a := range r.Abilities {
			switch a {
			case nodecontract.AbilityMemorySnapshots, nodecontract.AbilityFilesSnapshots, nodecontract.AbilityFork:
			default:
				return fmt.Errorf("heartbeat: runtime %s: unknown ability %q: %w", r.Name, a, errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// hostIDPattern is a heartbeat's Host: empty (an older node) or a hash in hex.
var hostIDPattern = regexp.MustCompile(`^[0-9a-f]{0,64}$`)

// hostWarnings warns of the nodes up that share a host and together offer more of it than it has
// (each started with the whole host's capacity, none given a share): placement would overfill it. It
// returns the warnings by node.
func hostWarnings(nodes []NodeRecord) map[string][]string {
	groups := map[string][]NodeRecord{}
	for _, n := range nodes {
		if n.Up && n.Live != nil && n.Live.Host != "" && n.Live.HostCapacity != nil {
			groups[n.Live.Host] = append(groups[n.Live.Host], n)
		}
	}
	out := map[string][]string{}
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		var mem, cpu, hostMem, hostCPU int64
		ids := make([]string, 0, len(g))
		for _, n := range g {
			mem += n.Live.Capacity.MemoryMB
			cpu += n.Live.Capacity.CPUMillicores
			hostMem = max(hostMem, n.Live.HostCapacity.MemoryMB)
			hostCPU = max(hostCPU, n.Live.HostCapacity.CPUMillicores)
			ids = append(ids, n.ID)
		}
		if mem <= hostMem && cpu <= hostCPU {
			continue
		}
		sort.Strings(ids)
		for _, n := range g {
			out[n.ID] = append(out[n.ID], fmt.Sprintf("nodes %s share one host and together offer %.1fx its memory and %.1fx its CPU: "+
				"give each a share (node run --memory-mb, --cpu-millicores) or bound them (node bound)",
				strings.Join(ids, ", "), float64(mem)/float64(hostMem), float64(cpu)/float64(hostCPU)))
		}
	}
	return out
}

// maxBootLen bounds a heartbeat's Boot.
const maxBootLen = 64

// NodeHeartbeat records a node's heartbeat. Its address must be on one of the hosts it joined with (a
// node cannot point control planes at another service). A heartbeat with a new Boot means the node
// process started again: the sandboxes it had are settled (reconcileNode). fingerprint names the
// certificate the node called with: one the node's record still names (it may have joined again since
// CheckNode).
func (s *nodeCalls) NodeHeartbeat(ctx context.Context, nodeID, fingerprint string, hb nodeapi.Heartbeat) error {
	if hb.Boot == "" || len(hb.Boot) > maxBootLen || len(hb.Version) > maxBootLen {
		return fmt.Errorf("heartbeat: boot must be 1-%d characters, version at most %d: %w", maxBootLen, maxBootLen, errdefs.ErrInvalidArgument)
	}
	if err := checkRuntimes(hb.Runtimes); err != nil {
		return err
	}
	if len(hb.Images) > nodeapi.MaxImages {
		return fmt.Errorf("heartbeat: %d images, at most %d: %w", len(hb.Images), nodeapi.MaxImages, errdefs.ErrInvalidArgument)
	}
	for _, d := range hb.Images {
		if err := oci.CheckDigest(d); err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
	}
	if err := hb.Capacity.Check(); err != nil {
		return fmt.Errorf("heartbeat: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if hb.Sandboxes < 0 || hb.Sandboxes > nodecontract.MaxCapacitySandboxes {
		return fmt.Errorf("heartbeat: %d sandboxes: %w", hb.Sandboxes, errdefs.ErrInvalidArgument)
	}
	if !hostIDPattern.MatchString(hb.Host) {
		return fmt.Errorf("heartbeat: host %q: want up to 64 hex digits: %w", truncate(hb.Host, 80), errdefs.ErrInvalidArgument)
	}
	if hb.HostCapacity != nil {
		if err := hb.HostCapacity.Check(); err != nil {
			return fmt.Errorf("heartbeat: host capacity: %v: %w", err, errdefs.ErrInvalidArgument)
		}
	}
	// Each heartbeat writes the Store: a node that sends them faster than it should (every
	// nodeapi.HeartbeatInterval) is refused the excess.
	if !s.nodes.allowHeartbeat(nodeID, s.now()) {
		return fmt.Errorf("heartbeat: node %s sends heartbeats faster than one a second: %w", nodeID, errdefs.ErrResourceExhausted)
	}
	notCurrent := fmt.Errorf("heartbeat: not the current certificate of node %s: %w", nodeID, errdefs.ErrPermissionDenied)
	rec, err := s.placer.nodeRecord(ctx, nodeID)
	if err != nil {
		return err
	}
	if cur, prev := rec.certIs(fingerprint); !cur && !prev {
		return notCurrent
	}
	host, port, err := net.SplitHostPort(hb.Addr)
	if p, perr := strconv.Atoi(port); err != nil || perr != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("heartbeat: address %q is not host:port: %w", hb.Addr, errdefs.ErrInvalidArgument)
	}
	known := false
	for _, h := range rec.Hosts {
		known = known || strings.EqualFold(h, host)
	}
	if !known {
		return fmt.Errorf("heartbeat: %s is not a host node %s joined with (%s): %w", host, nodeID, strings.Join(rec.Hosts, ", "), errdefs.ErrInvalidArgument)
	}
	if rec.Bound == nil {
		// The first heartbeat since the node joined: what it offers now is the most it is trusted with.
		if rec, err = s.placer.updateNodeRecord(ctx, nodeID, func(r *NodeRecord) error {
			if cur, prev := r.certIs(fingerprint); !cur && !prev {
				return notCurrent // joined again meanwhile
			}
			if r.Bound == nil {
				b := hb.Capacity
				r.Bound = &b
			}
			return nil
		}); err != nil {
			return err
		}
	}
	reported := hb.Capacity
	hb.Capacity = hb.Capacity.Min(*rec.Bound)
	now := s.now().UTC()
	live := NodeLive{Heartbeat: hb, SeenAt: now, BootSeenAt: now, Reported: reported}
	key := liveDocPrefix + nodeID
	var restarted, saved bool
	for range 8 {
		d, err := s.store.GetDoc(ctx, key)
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			d = store.Doc{Key: key}
		case err != nil:
			return fmt.Errorf("heartbeat: %v: %w", err, errdefs.ErrUnavailable)
		}
		var prev NodeLive
		if d.Value != nil && json.Unmarshal(d.Value, &prev) == nil && prev.Boot == hb.Boot {
			live.BootSeenAt = prev.BootSeenAt
		}
		// Started again, or back after it was given up (its sandboxes failed meanwhile; what is left of
		// them there goes).
		restarted = d.Value != nil && (prev.Boot != hb.Boot || now.Sub(prev.SeenAt) >= NodeDownAfter)
		if d.Value, err = json.Marshal(live); err != nil {
			return err
		}
		if _, err = s.store.PutDoc(ctx, d); err == nil {
			saved = true
			break
		}
		if !errors.Is(err, errdefs.ErrConflict) && !errors.Is(err, errdefs.ErrAlreadyExists) {
			return fmt.Errorf("heartbeat: %v: %w", err, errdefs.ErrUnavailable)
		}
	}
	if !saved {
		return fmt.Errorf("heartbeat: the record of node %s changes too often: %w", nodeID, errdefs.ErrUnavailable)
	}
	s.nodes.seen(nodeID, live)
	if restarted {
		// Of the replicas, the one whose write changed the Boot settles the node.
		s.log.Info("node restarted: settling its sandboxes", "node", nodeID, "addr", hb.Addr)
		s.placer.settleRestarted(nodeID, live.BootSeenAt)
	}
	return nil
}

// settleRestarted settles the sandboxes of node nodeID, which started again at since (reconcileRemote),
// in the background. One settling of a node runs at a time: a node that keeps starting again (or says it
// did) while one runs has one more run after it, for its latest start, however many times it did.
func (s *placer) settleRestarted(nodeID string, since time.Time) {
	ns := s.nodes
	ns.mu.Lock()
	if _, busy := ns.settling[nodeID]; busy {
		ns.settling[nodeID] = since
		ns.mu.Unlock()
		return
	}
	ns.settling[nodeID] = time.Time{}
	ns.mu.Unlock()
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			if err := s.sandboxes.reconcileRemote(ctx, nodeID, since); err != nil {
				s.log.Error("settle a restarted node's sandboxes", "node", nodeID, "err", err)
			}
			cancel()
			ns.mu.Lock()
			next := ns.settling[nodeID]
			if next.IsZero() {
				delete(ns.settling, nodeID)
				ns.mu.Unlock()
				return
			}
			ns.settling[nodeID], since = time.Time{}, next
			ns.mu.Unlock()
		}
	}()
}

// updateNodeRecord changes the record of a node that joined with fn (compare-and-swap, retried) and
// returns it as saved.
func (s *placer) updateNodeRecord(ctx context.Context, nodeID string, fn func(*NodeRecord) error) (NodeRecord, error) {
	for range 8 {
		d, err := s.store.GetDoc(ctx, nodeDocPrefix+nodeID)
		if errors.Is(err, errdefs.ErrNotFound) {
			return NodeRecord{}, fmt.Errorf("node %s: %w", nodeID, errdefs.ErrNotFound)
		}
		if err != nil {
			return NodeRecord{}, fmt.Errorf("node %s: %v: %w", nodeID, err, errdefs.ErrUnavailable)
		}
		var rec NodeRecord
		if err := json.Unmarshal(d.Value, &rec); err != nil {
			return NodeRecord{}, fmt.Errorf("node record %s: %w", d.Key, err)
		}
		if err := fn(&rec); err != nil {
			return NodeRecord{}, err
		}
		if d.Value, err = json.Marshal(rec); err != nil {
			return NodeRecord{}, err
		}
		if _, err = s.store.PutDoc(ctx, d); err == nil {
			return rec, nil
		}
		if !errors.Is(err, errdefs.ErrConflict) {
			return NodeRecord{}, fmt.Errorf("node %s: %v: %w", nodeID, err, errdefs.ErrUnavailable)
		}
	}
	return NodeRecord{}, fmt.Errorf("the record of node %s changes too often: %w", nodeID, errdefs.ErrUnavailable)
}

// SetNodeBound sets the most node nodeID is trusted to offer (see NodeRecord.Bound); a zero field keeps
// the current bound's. It applies from the node's next heartbeat.
func (s *placer) SetNodeBound(ctx context.Context, nodeID string, b nodecontract.Capacity) (NodeRecord, error) {
	if _, err := s.clusterCA(); err != nil {
		return NodeRecord{}, err
	}
	if b.CPUMillicores < 0 || b.MemoryMB < 0 || b.MaxSandboxes < 0 {
		return NodeRecord{}, fmt.Errorf("node bound %+v: no field may be negative: %w", b, errdefs.ErrInvalidArgument)
	}
	rec, err := s.updateNodeRecord(ctx, nodeID, func(r *NodeRecord) error {
		nb := b // each try starts from the request, not the last try's merge
		if r.Bound != nil {
			nb.CPUMillicores = cmp.Or(nb.CPUMillicores, r.Bound.CPUMillicores)
			nb.MemoryMB = cmp.Or(nb.MemoryMB, r.Bound.MemoryMB)
			nb.MaxSandboxes = cmp.Or(nb.MaxSandboxes, r.Bound.MaxSandboxes)
		}
		if err := nb.Check(); err != nil {
			if r.Bound == nil {
				return fmt.Errorf("node %s has not reported yet, so give all of cpu_millicores, memory_mb and max_sandboxes: %v: %w", nodeID, err, errdefs.ErrInvalidArgument)
			}
			return fmt.Errorf("node bound: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		r.Bound = &nb
		return nil
	})
	if err != nil {
		return NodeRecord{}, err
	}
	s.log.Info("node bound set", "node", nodeID, "cpu_millicores", rec.Bound.CPUMillicores, "memory_mb", rec.Bound.MemoryMB, "max_sandboxes", rec.Bound.MaxSandboxes)
	return s.nodeView(ctx, rec)
}

// nodeRecord returns the record of a node that joined.
func (s *placer) nodeRecord(ctx context.Context, nodeID string) (NodeRecord, error) {
	d, err := s.store.GetDoc(ctx, nodeDocPrefix+nodeID)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return NodeRecord{}, fmt.Errorf("node %s: %w", nodeID, errdefs.ErrNotFound)
		}
		return NodeRecord{}, fmt.Errorf("node %s: %v: %w", nodeID, err, errdefs.ErrUnavailable)
	}
	var rec NodeRecord
	if err := json.Unmarshal(d.Value, &rec); err != nil {
		return NodeRecord{}, fmt.Errorf("node record %s: %w", nodeID, err)
	}
	return rec, nil
}

// nodeLive returns a node's latest heartbeat (ErrNotFound: none yet).
func (s *placer) nodeLive(ctx context.Context, nodeID string) (NodeLive, error) {
	d, err := s.store.GetDoc(ctx, liveDocPrefix+nodeID)
	if err != nil {
		return NodeLive{}, err
	}
	var l NodeLive
	if err := json.Unmarshal(d.Value, &l); err != nil {
		return NodeLive{}, fmt.Errorf("node heartbeat %s: %w", nodeID, err)
	}
	return l, nil
}

// liveNodes returns the latest heartbeat of every node that sent one, by ID.
func (s *placer) liveNodes(ctx context.Context) (map[string]NodeLive, error) {
	ds, err := s.store.ListDocs(ctx, liveDocPrefix)
	if err != nil {
		return nil, err
	}
	out := make(map[string]NodeLive, len(ds))
	for _, d := range ds {
		var l NodeLive
		if err := json.Unmarshal(d.Value, &l); err != nil {
			s.log.Error("a node heartbeat record that does not decode", "key", d.Key, "err", err)
			continue
		}
		out[strings.TrimPrefix(d.Key, liveDocPrefix)] = l
	}
	return out, nil
}

// nodeSet reaches the nodes: the in-process one, and clients of the others, made on first use from their
// latest heartbeat and made again when a node's address changes.
type nodeSet struct {
	local Node
	dial  func(id, addr string, pinned func(fingerprint string) error) (Node, error)

	mu     sync.Mutex
	remote map[string]remoteNode // guarded by mu
	// pins are the certificates each remote node's record named when last read, which connections to
	// it must present (pinned); guarded by mu.
	pins    map[string]nodePin
	placing map[string]placing // placements in progress in this process, by node; guarded by mu
	// beats limits each node's heartbeats; settling holds the nodes being settled after a restart, each
	// with the start of one more to settle after (zero: none). Both guarded by mu.
	beats    map[string]*rate.Limiter
	settling map[string]time.Time
}

// Heartbeats a node may send: heartbeatBurst at once, then one every heartbeatEvery (a node sends one
// every nodeapi.HeartbeatInterval).
const (
	heartbeatEvery = time.Second
	heartbeatBurst = 10
)

// allowHeartbeat reports whether node id may send a heartbeat at now.
func (ns *nodeSet) allowHeartbeat(id string, now time.Time) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	l := ns.beats[id]
	if l == nil {
		// Only nodes that joined and called with their certificate get here: the map stays small.
		l = rate.NewLimiter(rate.Every(heartbeatEvery), heartbeatBurst)
		ns.beats[id] = l
	}
	return l.AllowN(now, 1)
}

type remoteNode struct {
	addr string
	n    Node
	// joinedAt is when the node last joined as its record said when n was made: a node that joined
	// again (or was replaced) since is dialed anew.
	joinedAt time.Time
	// checked is when addr and joinedAt were last compared with the node's heartbeat and record.
	checked time.Time
}

// nodePin is what a node's record said of its certificates when read at at: its current one, and the
// one it renewed from (its own until it first used the new one).
type nodePin struct {
	cur, prev string
	at        time.Time
}

// pinFor is how long a node's recorded certificates are taken as read before a connection to it is
// checked against its record anew.
const pinFor = nodeapi.HeartbeatInterval

// pinTimeout bounds the read of a node's record for a connection to it.
const pinTimeout = 10 * time.Second

// placing counts what this process is placing on a node and has not recorded yet.
type placing struct {
	count int
	memMB int64
}

func newNodeSet(local Node, dial func(id, addr string, pinned func(fingerprint string) error) (Node, error)) *nodeSet {
	return &nodeSet{local: local, dial: dial, remote: map[string]remoteNode{}, pins: map[string]nodePin{}, placing: map[string]placing{},
		beats: map[string]*rate.Limiter{}, settling: map[string]time.Time{}}
}

// isLocal reports whether id is the in-process node's.
func (ns *nodeSet) isLocal(id string) bool { return ns.local != nil && id == ns.local.ID() }

// serves reports whether this control plane can reach node id: its own, or (with DialNode) any joined
// node.
func (ns *nodeSet) serves(id string) bool {
	return ns.isLocal(id) || (ns.dial != nil && id != "" && id != nodecontract.LocalID)
}

// seen updates the client of a node whose heartbeat arrived here, if its address changed.
func (ns *nodeSet) seen(id string, l NodeLive) {
	ns.mu.Lock()
	r, ok := ns.remote[id]
	if ok && r.addr != l.Addr {
		delete(ns.remote, id)
	}
	ns.mu.Unlock()
	if ok && r.addr != l.Addr {
		closeNode(r.n)
	}
}

func closeNode(n Node) {
	if c, ok := n.(interface{ Close() error }); ok {
		_ = c.Close()
	}
}

// forget drops the client of node id (removed).
func (ns *nodeSet) forget(id string) {
	ns.mu.Lock()
	r, ok := ns.remote[id]
	delete(ns.remote, id)
	delete(ns.beats, id)
	delete(ns.pins, id)
	ns.mu.Unlock()
	if ok {
		closeNode(r.n)
	}
}

// rejoined drops the client of node id, which joined again (or was replaced), and what was read of its
// certificates: its next call dials it anew, pinned to the certificate now recorded. (Other replicas see
// the new join within nodeapi.HeartbeatInterval: node.)
func (ns *nodeSet) rejoined(id string) {
	ns.mu.Lock()
	r, ok := ns.remote[id]
	delete(ns.remote, id)
	delete(ns.pins, id)
	ns.mu.Unlock()
	if ok {
		closeNode(r.n)
	}
}

// close closes the clients of the remote nodes.
func (ns *nodeSet) close() {
	ns.mu.Lock()
	rs := ns.remote
	ns.remote = map[string]remoteNode{}
	ns.mu.Unlock()
	for _, r := range rs {
		closeNode(r.n)
	}
}

// node returns the node with ID id. A node this control plane cannot reach, or that never reported, is
// ErrUnavailable.
func (s *placer) node(ctx context.Context, id string) (Node, error) {
	ns := s.nodes
	if ns.isLocal(id) {
		return ns.local, nil
	}
	if !ns.serves(id) {
		return nil, fmt.Errorf("node %q is not reachable from this control plane: %w", id, errdefs.ErrUnavailable)
	}
	now := s.now()
	ns.mu.Lock()
	r, ok := ns.remote[id]
	ns.mu.Unlock()
	if ok && now.Sub(r.checked) < nodeapi.HeartbeatInterval {
		return r.n, nil
	}
	// Its address may have changed (a heartbeat to another replica), and it may have joined again.
	l, err := s.nodeLive(ctx, id)
	if err != nil {
		if ok {
			return r.n, nil
		}
		return nil, fmt.Errorf("node %s has not reported: %v: %w", id, err, errdefs.ErrUnavailable)
	}
	rec, err := s.nodeRecord(ctx, id)
	if err != nil {
		if ok && !errors.Is(err, errdefs.ErrNotFound) {
			return r.n, nil
		}
		return nil, fmt.Errorf("node %s: %v: %w", id, err, errdefs.ErrUnavailable)
	}
	ns.setPin(id, rec, now)
	if ok && r.addr == l.Addr && r.joinedAt.Equal(rec.JoinedAt) {
		ns.mu.Lock()
		if cur, still := ns.remote[id]; still && cur.n == r.n {
			cur.checked = now
			ns.remote[id] = cur
		}
		ns.mu.Unlock()
		return r.n, nil
	}
	n, err := ns.dial(id, l.Addr, s.pinned(id))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", id, err)
	}
	ns.mu.Lock()
	cur, exists := ns.remote[id]
	if exists && cur.addr == l.Addr && cur.joinedAt.Equal(rec.JoinedAt) { // another call dialed it first
		ns.mu.Unlock()
		closeNode(n)
		return cur.n, nil
	}
	ns.remote[id] = remoteNode{addr: l.Addr, n: n, joinedAt: rec.JoinedAt, checked: now}
	ns.mu.Unlock()
	if exists {
		closeNode(cur.n)
	}
	return n, nil
}

// setPin notes the certificates rec names for node id, read at now.
func (ns *nodeSet) setPin(id string, rec NodeRecord, now time.Time) {
	ns.mu.Lock()
	ns.pins[id] = nodePin{cur: rec.CertFingerprint, prev: rec.PrevCertFingerprint, at: now}
	ns.mu.Unlock()
}

// pinHolds reports whether the certificate of fingerprint is one node id's record named when read
// within pinFor of now.
func (ns *nodeSet) pinHolds(id, fingerprint string, now time.Time) bool {
	ns.mu.Lock()
	p, ok := ns.pins[id]
	ns.mu.Unlock()
	if !ok || now.Sub(p.at) >= pinFor || now.Before(p.at) {
		return false
	}
	cur, prev := NodeRecord{CertFingerprint: p.cur, PrevCertFingerprint: p.prev}.certIs(fingerprint)
	return cur || prev
}

// pinned returns the check of node id's certificate on each connection to it (nodeapi.ClientConfig.Pinned):
// it must be the one the node's record names (or the one it renewed from), not merely one the cluster's CA
// issued for its ID; a certificate from before the node last joined (or was replaced) is refused.
func (s *placer) pinned(id string) func(fingerprint string) error {
	return func(fingerprint string) error {
		now := s.now()
		if s.nodes.pinHolds(id, fingerprint, now) {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), pinTimeout)
		defer cancel()
		rec, err := s.nodeRecord(ctx, id)
		if err != nil {
			return fmt.Errorf("node %s: its record, to check its certificate against: %w", id, err)
		}
		s.nodes.setPin(id, rec, now)
		if cur, prev := rec.certIs(fingerprint); cur || prev {
			return nil
		}
		s.log.Warn("a node presented a certificate that is not the one it was last given; not connected", "node", id, "fingerprint", fingerprint)
		return fmt.Errorf("node %s presented the certificate %s, not the one it was last given: %w", id, fingerprint, errdefs.ErrPermissionDenied)
	}
}

// nodeGone reports whether node id is known to be down: not this process's, and not heard from within
// NodeDownAfter, or leaving, or never heard from at all.
func (s *placer) nodeGone(ctx context.Context, id string) bool {
	if s.nodes.isLocal(id) {
		return false
	}
	l, err := s.nodeLive(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return true
	}
	return err == nil && !l.Up(s.now())
}

// sandboxNode returns the node sb is on.
func (s *placer) sandboxNode(ctx context.Context, sb store.Sandbox) (Node, error) {
	return s.node(ctx, sb.NodeID)
}

// nodeOfSandbox returns the node of tenantID's sandbox id.
func (s *placer) nodeOfSandbox(ctx context.Context, tenantID, id string) (Node, error) {
	sb, err := s.store.GetSandbox(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	return s.node(ctx, sb.NodeID)
}

// nodesUp returns the nodes this control plane can reach: its own and those heard from lately, with
// their capacities (the local node's: the host's).
func (s *placer) nodesUp(ctx context.Context) (map[string]nodecontract.Capacity, error) {
	out := map[string]nodecontract.Capacity{}
	if s.nodes.local != nil {
		out[s.nodes.local.ID()] = s.localCapacity
	}
	if s.nodes.dial == nil {
		return out, nil
	}
	live, err := s.liveNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %v: %w", err, errdefs.ErrUnavailable)
	}
	now := s.now()
	for id, l := range live {
		if l.Up(now) && s.nodes.serves(id) {
			out[id] = l.Capacity
		}
	}
	return out, nil
}

// placeable returns the nodes up (nodesUp) that are not draining: those a new sandbox may go to.
func (s *placer) placeable(ctx context.Context) (map[string]nodecontract.Capacity, error) {
	caps, err := s.nodesUp(ctx)
	if err != nil {
		return nil, err
	}
	draining, err := s.drainingNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %v: %w", err, errdefs.ErrUnavailable)
	}
	for id := range draining {
		delete(caps, id)
	}
	return caps, nil
}

// placement is a node chosen for a sandbox; done must be called once the sandbox is recorded (or not).
type placement struct {
	n    Node
	done func()
}

// activeSandbox are the states of a sandbox that holds (or may hold) resources on its node.
var activeSandbox = []store.SandboxState{store.StateCreating, store.StateRunning, store.StateStopping}

// sandboxesOnNode returns every sandbox recorded on node nodeID in one of states, reading the Store
// page by page.
func (s *placer) sandboxesOnNode(ctx context.Context, nodeID string, states []store.SandboxState) ([]store.Sandbox, error) {
	var all []store.Sandbox
	after := ""
	for {
		page, err := s.store.ListSandboxesOnNode(ctx, nodeID, states, after, store.MaxListLimit)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < store.MaxListLimit {
			return all, nil
		}
		after = page[len(page)-1].ID
	}
}

// place chooses the node for a new sandbox of spec that runs on runtime rt ("": any): of the nodes up
// and not draining that have rt, with room for it (a bound of
// sandboxes, and memory, counting those placed there and not stopped; CPU is shared, not reserved), prefer if it is one of them (the node
// where the session's snapshot is), else one that holds the template image image (a digest, "": none)
// if one has room (the others would fetch it from the blob store first), else the one with the most
// memory left, ties at random.
func (s *placer) place(ctx context.Context, spec store.SandboxSpec, prefer, rt, image string) (placement, error) {
	caps, err := s.placeable(ctx)
	if err != nil {
		return placement{}, err
	}
	if len(caps) == 0 {
		return placement{}, fmt.Errorf("no node is up (and not draining) to run the sandbox: %w", errdefs.ErrUnavailable)
	}
	if rt != "" {
		for id := range caps {
			if _, ok := s.runtimeOn(ctx, id, rt); !ok {
				delete(caps, id)
			}
		}
		if len(caps) == 0 {
			return placement{}, fmt.Errorf("no node that is up has the %s runtime: %w", rt, errdefs.ErrUnavailable)
		}
	}
	used, err := s.store.NodeUsage(ctx, activeSandbox)
	if err != nil {
		return placement{}, fmt.Errorf("place: %v: %w", err, errdefs.ErrUnavailable)
	}
	usedBy := func(id string) (int, int64) {
		u := used[id]
		return u.Sandboxes, u.MemoryMB
	}
	best := ""
	if prefer == "" && image != "" && len(caps) > 1 {
		// Holders first, if some nodes are not.
		if holders := s.imageHolders(ctx, image, caps); len(holders) > 0 && len(holders) < len(caps) {
			best, _ = s.nodes.reserve(holders, usedBy, spec, "")
		}
	}
	if best == "" {
		if best, err = s.nodes.reserve(caps, usedBy, spec, prefer); err != nil {
			return placement{}, err
		}
	}
	release := sync.OnceFunc(func() { s.nodes.unreserve(best, spec) })
	n, err := s.node(ctx, best)
	if err != nil {
		release()
		return placement{}, err
	}
	return placement{n: n, done: release}, nil
}

// imageOfRef returns the image digest of template reference ref ("" for the host template).
func imageOfRef(ref string) string {
	_, digest, _ := strings.Cut(ref, "@")
	return digest
}

// imageHolders returns those of caps that hold image digest (none for ""): the in-process node if it
// has it, and the nodes whose last heartbeat listed it.
func (s *placer) imageHolders(ctx context.Context, digest string, caps map[string]nodecontract.Capacity) map[string]nodecontract.Capacity {
	if digest == "" {
		return nil
	}
	out := map[string]nodecontract.Capacity{}
	if s.nodes.local != nil {
		if c, ok := caps[s.nodes.local.ID()]; ok && s.holdsImage(digest) {
			out[s.nodes.local.ID()] = c
		}
	}
	if !s.nodes.clustered() {
		return out
	}
	live, err := s.liveNodes(ctx)
	if err != nil {
		return out
	}
	for id, l := range live {
		if c, ok := caps[id]; ok && slices.Contains(l.Images, digest) {
			out[id] = c
		}
	}
	return out
}

// reserve chooses a node for spec among caps (see place), given what each has placed already, and counts
// the sandbox as being placed there until unreserve.
func (ns *nodeSet) reserve(caps map[string]nodecontract.Capacity, used func(id string) (count int, memMB int64), spec store.SandboxSpec, prefer string) (string, error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	best, bestFree, ties := "", int64(-1), 0
	for id, c := range caps {
		count, memMB := used(id)
		p := ns.placing[id]
		count, memMB = count+p.count, memMB+p.memMB
		if count >= c.MaxSandboxes || memMB+int64(spec.MemoryMB) > c.MemoryMB {
			continue
		}
		free := c.MemoryMB - memMB
		switch {
		case id == prefer:
			best, bestFree, ties = id, 1<<62, 1
		case free > bestFree:
			best, bestFree, ties = id, free, 1
		case free == bestFree:
			ties++
			if rand.IntN(ties) == 0 {
				best = id
			}
		}
	}
	if best == "" {
		return "", fmt.Errorf("no node has room for the sandbox (%d MB of memory): %w", spec.MemoryMB, errdefs.ErrResourceExhausted)
	}
	p := ns.placing[best]
	p.count++
	p.memMB += int64(spec.MemoryMB)
	ns.placing[best] = p
	return best, nil
}

func (ns *nodeSet) unreserve(id string, spec store.SandboxSpec) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	p := ns.placing[id]
	p.count--
	p.memMB -= int64(spec.MemoryMB)
	if p.count <= 0 {
		delete(ns.placing, id)
	} else {
		ns.placing[id] = p
	}
}

// reachableNodes returns every node this control plane can reach now: its own, and those heard from
// lately (for calls that concern all of a tenant's things on every node, such as re-wrapping its CAs).
func (s *placer) reachableNodes(ctx context.Context) ([]Node, error) {
	caps, err := s.nodesUp(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(caps))
	var errs []error
	for id := range caps {
		n, err := s.node(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, n)
	}
	return out, errors.Join(errs...)
}

// NodeRenew issues a node that calls with its current certificate a new one for the key of csrPEM,
// with the hosts it joined with, and records it as the node's: the older one is refused from then on.
func (s *nodeCalls) NodeRenew(ctx context.Context, nodeID, fingerprint string, csrPEM []byte) ([]byte, error) {
	ca, err := s.placer.clusterCA()
	if err != nil {
		return nil, err
	}
	key := nodeDocPrefix + nodeID
	d, err := s.store.GetDoc(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("node %s: %v: %w", nodeID, err, errdefs.ErrUnavailable)
	}
	var rec NodeRecord
	if err := json.Unmarshal(d.Value, &rec); err != nil {
		return nil, fmt.Errorf("node record %s: %w", nodeID, err)
	}
	certPEM, err := ca.IssueCSR(cluster.Identity{Role: cluster.RoleNode, ID: nodeID}, csrPEM, rec.Hosts)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(certPEM)
	// The certificate the node called with (CheckNode let it in: its current or previous one) stays
	// its own until it uses the new one.
	rec.PrevCertFingerprint = fingerprint
	rec.CertFingerprint = cluster.CertFingerprint(block.Bytes)
	rec.CertExpiresAt = s.now().UTC().Add(cluster.CertLifetime)
	if d.Value, err = json.Marshal(rec); err != nil {
		return nil, err
	}
	// Compare-and-swap: a join (or another renewal) in between wins; this one is refused.
	if _, err := s.store.PutDoc(ctx, d); err != nil {
		return nil, fmt.Errorf("record node %s's certificate: %w", nodeID, err)
	}
	s.log.Info("node certificate renewed", "node", nodeID, "expires", rec.CertExpiresAt)
	return certPEM, nil
}
