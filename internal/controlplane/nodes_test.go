package controlplane

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/mitm"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	keyslocal "github.com/airlockrun/airlock/internal/keys/local"
	"github.com/airlockrun/airlock/internal/keys/master"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// TestNodeRouting: a control plane with no node of its own places sandboxes only on nodes that joined
// and reported lately, by their room (memory and a bound of sandboxes), routes every call on a sandbox
// to its node, refuses heartbeats that name another host or are out of bounds, skips nodes that are
// down or leaving, and settles a node that restarted: what it lost fails, what it kept runs on.
func TestNodeRouting(t *testing.T) {
	ctx := context.Background()
	c := newRemoteNodes(t, "node-a", "node-b")
	s, st, clk, fakes, dialed, tn := c.s, c.st, c.clk, c.fakes, c.dialed, c.tenant

	if _, err := s.CreateSandbox(ctx, tn, CreateRequest{}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("create with no node up: %v; want unavailable", err)
	}
	capacity := nodecontract.Capacity{CPUMillicores: 4000, MemoryMB: 2048, MaxSandboxes: 3}
	beat := func(id, addr, boot string) error {
		return s.NodeHeartbeat(ctx, id, "fp-"+id, nodeapi.Heartbeat{Addr: addr, Boot: boot, Capacity: capacity})
	}
	bad := map[string]error{
		"another host":       beat("node-a", "10.9.9.9:7444", "boot1"),
		"no port":            beat("node-a", "10.0.0.1", "boot1"),
		"port 0":             beat("node-a", "10.0.0.1:0", "boot1"),
		"no boot":            beat("node-a", "10.0.0.1:7444", ""),
		"no capacity":        s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b"}),
		"negative sandboxes": s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b", Capacity: capacity, Sandboxes: -1}),
		"a host not in hex":  s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b", Capacity: capacity, Host: "../etc"}),
		"no host capacity":   s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b", Capacity: capacity, Host: "ab12", HostCapacity: &nodecontract.Capacity{}}),
	}
	for name, err := range bad {
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("heartbeat with %s: %v; want invalid argument", name, err)
		}
	}
	if err := beat("node-x", "10.0.0.1:7444", "boot1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("heartbeat of a node that never joined: %v; want not found", err)
	}
	if err := beat("node-a", "10.0.0.1:7444", "a1"); err != nil {
		t.Fatal(err)
	}
	if err := beat("node-b", "NODE-B.internal:7444", "b1"); err != nil {
		t.Fatal(err)
	}

	// Four sandboxes of 512 MB on two nodes of 2048 MB: two and two, each call on its node.
	var sbs []store.Sandbox
	for range 4 {
		sb, err := s.CreateSandbox(ctx, tn, CreateRequest{MemoryMB: 512})
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
	}
	per := map[string]int{}
	for _, sb := range sbs {
		per[sb.NodeID]++
		if !fakes[sb.NodeID].running[sb.ID] {
			t.Errorf("sandbox %s recorded on %s does not run there", sb.ID, sb.NodeID)
		}
	}
	if per["node-a"] != 2 || per["node-b"] != 2 {
		t.Errorf("sandboxes per node: %v; want 2 and 2", per)
	}
	if dialed["node-a"] != "10.0.0.1:7444" || dialed["node-b"] != "NODE-B.internal:7444" {
		t.Errorf("dialed %v; want the addresses of the heartbeats", dialed)
	}
	if _, err := s.SetNetwork(ctx, tn, sbs[0].ID, policy.Policy{}); err != nil {
		t.Errorf("set network, routed to %s: %v", sbs[0].NodeID, err)
	}
	if err := s.DeleteSandbox(ctx, tn, sbs[0].ID); err != nil {
		t.Fatal(err)
	}
	if d := fakes[sbs[0].NodeID].destroyed; len(d) != 1 || d[0] != sbs[0].ID {
		t.Errorf("destroyed on %s: %v; want %s", sbs[0].NodeID, d, sbs[0].ID)
	}

	// Room: 3 sandboxes a node; 1600 MB fits on neither (1536 MB left at most).
	if _, err := s.CreateSandbox(ctx, tn, CreateRequest{MemoryMB: 1600}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a sandbox larger than any node's room: %v; want resource exhausted", err)
	}
	for range 3 {
		if _, err := s.CreateSandbox(ctx, tn, CreateRequest{MemoryMB: 64}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateSandbox(ctx, tn, CreateRequest{MemoryMB: 64}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a seventh sandbox on two nodes of three: %v; want resource exhausted", err)
	}

	// node-a goes quiet: after NodeDownAfter it gets nothing; node-b leaving gets nothing either.
	clk.Add(NodeDownAfter + time.Second)
	if err := beat("node-b", "node-b.internal:7444", "b1"); err != nil {
		t.Fatal(err)
	}
	bs, err := st.ListSandboxesByState(ctx, []store.SandboxState{store.StateRunning}, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range bs {
		if sb.NodeID == "node-b" {
			if err := s.DeleteSandbox(ctx, tn, sb.ID); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	sb, err := s.CreateSandbox(ctx, tn, CreateRequest{MemoryMB: 64})
	if err != nil || sb.NodeID != "node-b" {
		t.Errorf("create with node-a down: %s, %v; want on node-b", sb.NodeID, err)
	}
	if err := s.NodeHeartbeat(ctx, "node-b", "fp-node-b", nodeapi.Heartbeat{Addr: "node-b.internal:7444", Boot: "b1", Capacity: capacity, Leaving: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, tn, CreateRequest{MemoryMB: 64}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("create with node-a down and node-b leaving: %v; want unavailable", err)
	}

	// node-a restarts (a new boot, a new address): it kept one of its sandboxes and lost the other.
	var onA []string
	for id := range fakes["node-a"].running {
		onA = append(onA, id)
	}
	if len(onA) < 2 {
		t.Fatalf("node-a runs %v; want at least two", onA)
	}
	delete(fakes["node-a"].running, onA[0])
	if err := beat("node-a", "node-a.internal:7555", "a2"); err != nil {
		t.Fatal(err)
	}
	s.loops.bg.Wait() // the settling of the restarted node
	lost, err := st.GetSandbox(ctx, tn, onA[0])
	if err != nil || lost.State != store.StateFailed {
		t.Errorf("the sandbox node-a lost: %+v, %v; want failed", lost.State, err)
	}
	kept, err := st.GetSandbox(ctx, tn, onA[1])
	if err != nil || kept.State != store.StateRunning {
		t.Errorf("the sandbox node-a kept: %+v, %v; want running", kept.State, err)
	}
	if _, err := s.SetNetwork(ctx, tn, onA[1], policy.Policy{}); err != nil || dialed["node-a"] != "node-a.internal:7555" {
		t.Errorf("a call after node-a moved: %v, dialed %s; want its new address", err, dialed["node-a"])
	}
}

// remoteNodes is a control plane with no node of its own, and fake nodes that joined it (but have not
// reported yet), each on host 10.0.0.1 or <id>.internal.
type remoteNodes struct {
	s      *Service
	st     store.Store
	clk    *clock
	fakes  map[string]*fakeNode
	dialed map[string]string // the address each node was last dialed at
	tenant string
}

func newRemoteNodes(t *testing.T, ids ...string) *remoteNodes {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &remoteNodes{st: st, clk: &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)},
		fakes: map[string]*fakeNode{}, dialed: map[string]string{}}
	for _, id := range ids {
		c.fakes[id] = newFakeNode(t)
		c.fakes[id].id = id
		rec, _ := json.Marshal(NodeRecord{ID: id, Hosts: []string{"10.0.0.1", id + ".internal"}, CertFingerprint: "fp-" + id})
		if _, err := st.PutDoc(ctx, store.Doc{Key: nodeDocPrefix + id, Value: rec}); err != nil {
			t.Fatal(err)
		}
	}
	ca := testClusterCA(t, st)
	c.s, err = New(Config{Store: st, Now: c.clk.Now, ReapInterval: time.Hour, Logger: slog.New(slog.DiscardHandler), Cluster: ca, ReplicaID: "r-self", DialNode: func(id, addr string, _ func(string) error) (Node, error) {
		c.dialed[id] = addr
		return c.fakes[id], nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	key, err := c.s.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.s.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c.tenant = p.TenantID
	return c
}

// testClusterCA is a cluster CA kept in st under a fixed test master key.
func testClusterCA(t *testing.T, st store.Store) *cluster.CA {
	t.Helper()
	mk, err := master.New(bytes.Repeat([]byte{3}, master.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cluster.LoadCA(context.Background(), st, mk)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestNodesPastAPage: placement, failover and reconcile see every sandbox of a node, not only the
// first page of the Store's lists (1000).
func TestNodesPastAPage(t *testing.T) {
	ctx := context.Background()
	c := newRemoteNodes(t, "node-a")
	const n = store.MaxListLimit + 50
	capacity := nodecontract.Capacity{CPUMillicores: 4000, MemoryMB: 1 << 20, MaxSandboxes: n}
	if err := c.s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "a1", Capacity: capacity}); err != nil {
		t.Fatal(err)
	}
	// Records of n running sandboxes on node-a, the node's bound.
	for range n {
		sb, err := c.st.CreateSandbox(ctx, store.Sandbox{TenantID: c.tenant, NodeID: "node-a", Template: "default",
			Spec: store.SandboxSpec{MemoryMB: 64}})
		if err != nil {
			t.Fatal(err)
		}
		sb.State = store.StateRunning
		if _, err := c.st.UpdateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		c.fakes["node-a"].running[sb.ID] = true
	}
	if _, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{MemoryMB: 64}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a sandbox past the bound of %d on the only node: %v; want resource exhausted", n, err)
	}
	// The node restarts having lost them all: every one fails.
	clear(c.fakes["node-a"].running)
	if err := c.s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "a2", Capacity: capacity}); err != nil {
		t.Fatal(err)
	}
	c.s.loops.bg.Wait()
	use, err := c.st.NodeUsage(ctx, activeSandbox)
	if err != nil {
		t.Fatal(err)
	}
	if u := use["node-a"]; u.Sandboxes != 0 {
		t.Errorf("after node-a restarted with none of its %d sandboxes, %d are still recorded there", n, u.Sandboxes)
	}
	if _, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{MemoryMB: 64}); err != nil {
		t.Fatalf("create on the emptied node: %v", err)
	}
	// n more are recorded on node-a; it goes quiet and is given up: all of its sandboxes fail.
	for range n {
		if _, err := c.st.CreateSandbox(ctx, store.Sandbox{TenantID: c.tenant, NodeID: "node-a", Template: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	c.clk.Add(NodeDownAfter + time.Second)
	c.s.failOver()
	c.s.loops.bg.Wait()
	if use, err = c.st.NodeUsage(ctx, activeSandbox); err != nil {
		t.Fatal(err)
	}
	if u := use["node-a"]; u.Sandboxes != 0 {
		t.Errorf("after node-a was given up, %d of its %d sandboxes are still recorded there", u.Sandboxes, n+1)
	}
}

// TestNodeBound: a node's first heartbeat sets its bound; a later one that claims more is cut to it;
// the operator sets it (a zero field keeps the current), applied from the next heartbeat; bad bounds are
// refused.
func TestNodeBound(t *testing.T) {
	ctx := context.Background()
	c := newRemoteNodes(t, "node-a", "node-b")
	if _, err := c.s.SetNodeBound(ctx, "node-a", nodecontract.Capacity{MaxSandboxes: 2}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a partial bound before the node reported: %v; want invalid argument", err)
	}
	beat := func(id string, capacity nodecontract.Capacity) {
		t.Helper()
		if err := c.s.NodeHeartbeat(ctx, id, "fp-"+id, nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b1", Capacity: capacity}); err != nil {
			t.Fatal(err)
		}
	}
	small := nodecontract.Capacity{CPUMillicores: 2000, MemoryMB: 1024, MaxSandboxes: 2}
	// Heartbeats refused set no bound: from another host, or with a certificate that is not the node's
	// (one it had before it joined again).
	huge := nodecontract.Capacity{CPUMillicores: 200000, MemoryMB: 102400, MaxSandboxes: 200}
	if err := c.s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.9.9.9:7444", Boot: "b1", Capacity: huge}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a heartbeat from another host: %v; want invalid argument", err)
	}
	if err := c.s.NodeHeartbeat(ctx, "node-a", "fp-old", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b1", Capacity: huge}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a heartbeat with a certificate no longer the node's: %v; want permission denied", err)
	}
	if rec, err := c.s.nodeRecord(ctx, "node-a"); err != nil || rec.Bound != nil {
		t.Fatalf("node-a's bound after refused heartbeats: %+v, %v; want none", rec.Bound, err)
	}
	beat("node-a", small)
	beat("node-b", small)
	rec, err := c.s.nodeRecord(ctx, "node-a")
	if err != nil || rec.Bound == nil || *rec.Bound != small {
		t.Fatalf("node-a's bound after its first heartbeat: %+v, %v; want %+v", rec.Bound, err, small)
	}
	// node-a now claims a hundred times more: it still gets two sandboxes at most.
	beat("node-a", huge)
	per := map[string]int{}
	for range 4 {
		sb, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{MemoryMB: 256})
		if err != nil {
			t.Fatal(err)
		}
		per[sb.NodeID]++
	}
	if _, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{MemoryMB: 256}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a fifth sandbox with node-a claiming %+v: %v; want resource exhausted", huge, err)
	}
	if per["node-a"] != 2 || per["node-b"] != 2 {
		t.Errorf("sandboxes per node: %v; want 2 and 2", per)
	}
	ns, err := c.s.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.Live == nil || n.Live.Capacity != small {
			t.Errorf("node %s listed with capacity %+v; want %+v, its bound", n.ID, n.Live, small)
		} else if n.ID == "node-a" && n.Live.Reported != huge {
			t.Errorf("node-a listed as reporting %+v; want %+v", n.Live.Reported, huge)
		}
	}
	// The operator raises node-a's bound of sandboxes and memory; the CPU bound stays.
	rec, err = c.s.SetNodeBound(ctx, "node-a", nodecontract.Capacity{MemoryMB: 4096, MaxSandboxes: 4})
	want := nodecontract.Capacity{CPUMillicores: 2000, MemoryMB: 4096, MaxSandboxes: 4}
	if err != nil || rec.Bound == nil || *rec.Bound != want {
		t.Fatalf("SetNodeBound: %+v, %v; want %+v", rec.Bound, err, want)
	}
	beat("node-a", huge)
	for range 2 {
		if sb, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{MemoryMB: 256}); err != nil || sb.NodeID != "node-a" {
			t.Errorf("a sandbox after node-a's bound was raised: %s, %v; want on node-a", sb.NodeID, err)
		}
	}
	if _, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{MemoryMB: 256}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a sandbox past node-a's raised bound: %v; want resource exhausted", err)
	}
	for name, b := range map[string]nodecontract.Capacity{
		"negative":     {MaxSandboxes: -1},
		"out of range": {MaxSandboxes: nodecontract.MaxCapacitySandboxes + 1},
	} {
		if _, err := c.s.SetNodeBound(ctx, "node-a", b); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("a %s bound: %v; want invalid argument", name, err)
		}
	}
	if _, err := c.s.SetNodeBound(ctx, "node-x", small); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the bound of a node that never joined: %v; want not found", err)
	}
}

// TestNodeHeartbeatLimits: a node's heartbeats past a burst of ten come at most one a second; a node
// that keeps saying it started again while it is being settled is settled once more after, not once
// per heartbeat.
func TestNodeHeartbeatLimits(t *testing.T) {
	ctx := context.Background()
	c := newRemoteNodes(t, "node-a")
	capacity := nodecontract.Capacity{CPUMillicores: 2000, MemoryMB: 1024, MaxSandboxes: 2}
	beat := func(boot string) error {
		return c.s.NodeHeartbeat(ctx, "node-a", "fp-node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: boot, Capacity: capacity})
	}
	for i := range heartbeatBurst {
		if err := beat("b1"); err != nil {
			t.Fatalf("heartbeat %d of a burst: %v", i+1, err)
		}
	}
	if err := beat("b1"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a heartbeat past the burst: %v; want resource exhausted", err)
	}
	c.clk.Add(heartbeatEvery)
	if err := beat("b1"); err != nil {
		t.Errorf("a heartbeat a second later: %v", err)
	}

	// Restarts while the node is settled: the first settling blocks in Recover.
	var mu sync.Mutex
	recovers := 0
	release := make(chan struct{})
	c.fakes["node-a"].mu.Lock()
	c.fakes["node-a"].onRecover = func() {
		mu.Lock()
		recovers++
		first := recovers == 1
		mu.Unlock()
		if first {
			<-release
		}
	}
	c.fakes["node-a"].mu.Unlock()
	for i := range 5 {
		c.clk.Add(heartbeatEvery)
		if err := beat(fmt.Sprintf("b%d", i+2)); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	c.s.loops.bg.Wait()
	if recovers != 2 {
		t.Errorf("five restarts while the first was settled were settled %d times in all; want 2", recovers)
	}
}

// TestSettleOrphanSnapshots: the leader fails the snapshots left "writing" by a replica whose lease it
// saw unchanged for a while (not renewed, or, for a replica that never held one, absent and the snapshot
// old); not on its first look, and not those of a replica that renews its lease, its own, or ones just
// begun. A replica holds its lease until it shuts down.
func TestSettleOrphanSnapshots(t *testing.T) {
	ctx := context.Background()
	c := newRemoteNodes(t)
	c.s.holdReplicaLease()
	if l, err := c.st.GetLease(ctx, replicaLease("r-self")); err != nil || l.Holder != "r-self" {
		t.Fatalf("this replica's lease: %+v, %v; want held", l, err)
	}
	se, err := c.st.CreateSession(ctx, store.Session{ID: store.NewID("se"), TenantID: c.tenant, State: store.SessionPaused, CreatedAt: c.clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.st.AcquireLease(ctx, replicaLease("r-dead"), "r-dead", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.st.AcquireLease(ctx, replicaLease("r-live"), "r-live", time.Hour); err != nil {
		t.Fatal(err)
	}
	snap := func(replica string, age time.Duration) string {
		t.Helper()
		sn, err := c.st.CreateSnapshot(ctx, store.Snapshot{TenantID: c.tenant, SessionID: se.ID, Trigger: store.TriggerManual,
			Meta: map[string]string{snapshotReplicaMeta: replica}, CreatedAt: c.clk.Now().Add(-age)})
		if err != nil {
			t.Fatal(err)
		}
		return sn.ID
	}
	want := map[string]store.SnapshotState{
		snap("r-dead", time.Minute):     store.SnapshotFailed,
		snap("r-live", time.Hour):       store.SnapshotWriting,
		snap("r-self", time.Hour):       store.SnapshotWriting, // its own: a restart settles those
		snap("r-never", 20*time.Minute): store.SnapshotFailed,
		snap("r-never", 4*time.Minute):  store.SnapshotWriting,
	}
	check := func(when string, want map[string]store.SnapshotState) {
		t.Helper()
		for id, st := range want {
			sn, err := c.st.GetSnapshot(ctx, c.tenant, id)
			if err != nil {
				t.Fatal(err)
			}
			if sn.State != st {
				t.Errorf("%s: snapshot of replica %s made %v before: %s (%s); want %s", when, sn.Meta[snapshotReplicaMeta], c.clk.Now().Sub(sn.CreatedAt), sn.State, sn.Reason, st)
			}
		}
	}
	// The first look fails nothing, though r-dead's lease has expired.
	time.Sleep(time.Second)
	c.s.settleOrphanSnapshots()
	all := map[string]store.SnapshotState{}
	for id := range want {
		all[id] = store.SnapshotWriting
	}
	check("first look", all)
	// A minute later r-live has renewed its lease, r-dead has not; r-dead starts one more.
	c.clk.Add(replicaGoneFor)
	if _, err := c.st.AcquireLease(ctx, replicaLease("r-live"), "r-live", time.Hour); err != nil {
		t.Fatal(err)
	}
	want[snap("r-dead", 0)] = store.SnapshotWriting // just begun (younger than an operation's lease)
	c.s.settleOrphanSnapshots()
	check("a minute later", want)

	c.s.releaseReplicaLease()
	if l, err := c.st.GetLease(ctx, replicaLease("r-self")); err != nil || !l.Expired(time.Now()) {
		t.Errorf("this replica's lease after it was released: %+v, %v; want expired", l, err)
	}
}

// TestSessionLease: each sandbox of a session starts under the session's lease with a larger fencing
// token; the lease is not taken from a sandbox that still runs, and an earlier holder no longer holds it.
func TestSessionLease(t *testing.T) {
	ctx := context.Background()
	e := setupSessions(t)
	se := e.create(t, SessionRequest{})
	first, err := e.st.GetSandbox(ctx, e.tenant, se.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	f1 := sandboxFence(first)
	if f1 <= 0 {
		t.Fatalf("the session's sandbox has fencing token %d; want one", f1)
	}
	if err := e.s.holdsSessionLease(ctx, se.ID, first.ID, f1); err != nil {
		t.Errorf("the running sandbox does not hold its session's lease: %v", err)
	}
	if _, err := e.s.takeSessionLease(ctx, se, "sb_intruder"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("lease taken from a running sandbox: %v; want conflict", err)
	}
	if _, err := e.s.PauseSession(ctx, e.tenant, se.ID); err != nil {
		t.Fatal(err)
	}
	settle(t, e.s)
	se, err = e.s.ResumeSession(ctx, e.tenant, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.st.GetSandbox(ctx, e.tenant, se.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if f2 := sandboxFence(second); f2 <= f1 {
		t.Errorf("the resumed sandbox has fencing token %d; want more than %d", f2, f1)
	}
	if err := e.s.holdsSessionLease(ctx, se.ID, first.ID, f1); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("the paused sandbox still holds the lease: %v; want conflict", err)
	}
}

// TestSessionCA: a session's interception CA, handed over by the node that made it, is kept sealed under
// the tenant's key and given only to a node that runs a sandbox of that session; the first CA stays; a
// fork gets its parent's; a rotation re-wraps it; deleting it forgets it.
func TestSessionCA(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keyring, err := keyslocal.New(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: st, ReapInterval: time.Hour, KeyProvider: keyring,
		DialNode: func(id, addr string, _ func(string) error) (Node, error) { return newFakeNode(t), nil }})
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	tn := p.TenantID
	other, _, _, err := s.CreateTenant(ctx, "other", "")
	if err != nil {
		t.Fatal(err)
	}
	place := func(sessionID, nodeID string) {
		if _, err := st.CreateSandbox(ctx, store.Sandbox{ID: store.NewID("sb"), TenantID: tn, NodeID: nodeID, Template: "default",
			State: store.StateCreating, Metadata: map[string]string{SessionMetadataKey: sessionID}, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	place("se_one", "node-a")
	ca, err := mitm.NewCA("se_one")
	if err != nil {
		t.Fatal(err)
	}
	data, err := ca.Marshal(plainKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.NodeCAPut(ctx, "node-b", tn, "se_one", data); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a node without a sandbox of the session handed its CA: %v; want permission denied", err)
	}
	if _, err := s.NodeCAGet(ctx, "node-a", tn, "se_one"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the CA of a session that has none yet: %v; want not found", err)
	}
	if err := s.NodeCAPut(ctx, "node-a", tn, "se_one", data); err != nil {
		t.Fatal(err)
	}
	again, _ := mitm.NewCA("se_one")
	againData, _ := again.Marshal(plainKey)
	if err := s.NodeCAPut(ctx, "node-a", tn, "se_one", againData); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second CA for the session: %v; want already exists", err)
	}
	d, err := st.GetDoc(ctx, sessionCADoc(tn, "se_one"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		WrappedKey []byte `json:"wrapped_key"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(d.Value, m.WrappedKey) || bytes.Contains(d.Value, []byte(base64.StdEncoding.EncodeToString(m.WrappedKey))) {
		t.Error("the Store holds the CA's key in the clear")
	}
	get := func(nodeID, tenantID, sessionID string) (*mitm.CA, error) {
		b, err := s.NodeCAGet(ctx, nodeID, tenantID, sessionID)
		if err != nil {
			return nil, err
		}
		return mitm.Load(sessionID, b, plainKey)
	}
	// The session moves to node-b: node-b gets the same CA; node-c and another tenant get nothing.
	place("se_one", "node-b")
	if got, err := get("node-b", tn, "se_one"); err != nil || !got.Certificate().Equal(ca.Certificate()) {
		t.Errorf("node-b's CA of the session: %v; want the one node-a made", err)
	}
	for name, err := range map[string]error{
		"a node without the session": func() error { _, err := get("node-c", tn, "se_one"); return err }(),
		"another tenant":             func() error { _, err := get("node-a", other.ID, "se_one"); return err }(),
		"a sandbox's own CA":         func() error { _, err := get("node-a", tn, "sb_one"); return err }(),
	} {
		if !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("%s: %v; want permission denied", name, err)
		}
	}
	// A fork gets its parent's; a rotation re-wraps; deletion forgets.
	if err := s.copySessionCA(ctx, tn, "se_one", "se_two"); err != nil {
		t.Fatal(err)
	}
	place("se_two", "node-c")
	if got, err := get("node-c", tn, "se_two"); err != nil || !got.Certificate().Equal(ca.Certificate()) {
		t.Errorf("the fork's CA: %v; want its parent's", err)
	}
	if _, err := keyring.RotateKey(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if did, err := s.rewrapSessionCAs(ctx, tn); err != nil || !did {
		t.Errorf("rewrap session CAs: %v %v", did, err)
	}
	if got, err := get("node-b", tn, "se_one"); err != nil || !got.Certificate().Equal(ca.Certificate()) {
		t.Errorf("the CA after a rotation: %v", err)
	}
	s.forgetCA(ctx, tn, "se_one")
	if _, err := get("node-b", tn, "se_one"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the CA of a deleted session: %v; want not found", err)
	}
}

// TestHostWarnings: nodes up on one host that together offer more than it has are warned of, each;
// nodes given shares of it, nodes on hosts of their own, and nodes down are not.
func TestHostWarnings(t *testing.T) {
	host := nodecontract.Capacity{CPUMillicores: 8000, MemoryMB: 16000, MaxSandboxes: 64}
	half := nodecontract.Capacity{CPUMillicores: 4000, MemoryMB: 8000, MaxSandboxes: 32}
	rec := func(id, hostID string, c nodecontract.Capacity, up bool) NodeRecord {
		hc := host
		return NodeRecord{ID: id, Up: up, Live: &NodeLive{Heartbeat: nodeapi.Heartbeat{Capacity: c, Host: hostID, HostCapacity: &hc}}}
	}
	for _, tc := range []struct {
		name  string
		nodes []NodeRecord
		want  []string // the nodes warned of
	}{
		{"two claim all of one host", []NodeRecord{rec("a", "h1", host, true), rec("b", "h1", host, true), rec("c", "h2", host, true)}, []string{"a", "b"}},
		{"two halves", []NodeRecord{rec("a", "h1", half, true), rec("b", "h1", half, true)}, nil},
		{"one of them down", []NodeRecord{rec("a", "h1", host, true), rec("b", "h1", host, false)}, nil},
		{"hosts of their own", []NodeRecord{rec("a", "h1", host, true), rec("b", "h2", host, true)}, nil},
		{"older nodes say no host", []NodeRecord{rec("a", "", host, true), rec("b", "", host, true)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := hostWarnings(tc.nodes)
			var warned []string
			for id, ws := range got {
				if len(ws) != 1 || !strings.Contains(ws[0], "2.0x its memory") {
					t.Errorf("node %s: warnings %q", id, ws)
				}
				warned = append(warned, id)
			}
			sort.Strings(warned)
			if !cmp.Equal(warned, tc.want, cmpopts.EquateEmpty()) {
				t.Errorf("warned of %v; want %v", warned, tc.want)
			}
		})
	}
}

// TestRemoveNode: a node can be removed only once it is down and its sandboxes were failed over; then
// it is no longer listed and its certificate is let in no more.
func TestRemoveNode(t *testing.T) {
	ctx := context.Background()
	c := newRemoteNodes(t, "node-a", "node-b")
	capacity := nodecontract.Capacity{CPUMillicores: 4000, MemoryMB: 2048, MaxSandboxes: 3}
	for _, id := range []string{"node-a", "node-b"} {
		if err := c.s.NodeHeartbeat(ctx, id, "fp-"+id, nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b1", Capacity: capacity}); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	on := sb.NodeID
	for name, id := range map[string]string{"the local node's ID": nodecontract.LocalID, "a bad ID": "../x"} {
		if err := c.s.RemoveNode(ctx, id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("remove %s: %v; want invalid argument", name, err)
		}
	}
	if err := c.s.RemoveNode(ctx, "node-x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("remove a node that never joined: %v; want not found", err)
	}
	if err := c.s.RemoveNode(ctx, on); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "is up") {
		t.Errorf("remove a node up: %v; want failed precondition", err)
	}
	c.clk.Add(NodeDownAfter + time.Second) // both down now
	if err := c.s.RemoveNode(ctx, on); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), sb.ID) {
		t.Errorf("remove a node down whose sandbox was not failed over yet: %v; want failed precondition naming it", err)
	}
	c.s.failOver()
	if err := c.s.RemoveNode(ctx, on); err != nil {
		t.Fatalf("remove a node down, its sandbox failed over: %v", err)
	}
	recs, err := c.s.ListNodes(ctx)
	if err != nil || len(recs) != 1 || recs[0].ID == on {
		t.Errorf("nodes after the removal: %+v %v; want only the other", recs, err)
	}
	if err := c.s.CheckNode(ctx, on, "fp-"+on); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a call with the removed node's certificate: %v; want permission denied", err)
	}
	if err := c.s.NodeHeartbeat(ctx, on, "fp-"+on, nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b2", Capacity: capacity}); err == nil {
		t.Error("a heartbeat of the removed node was taken")
	}
	if err := c.s.RemoveNode(ctx, on); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("remove it again: %v; want not found", err)
	}
}

// TestDrainNode: a draining node takes no new sandbox (a create goes to the other, or fails with none
// left) and its sandboxes of no session are reported, not moved; the control plane's own node and a node
// that never joined cannot be drained; undrained, it takes sandboxes again.
func TestDrainNode(t *testing.T) {
	ctx := context.Background()
	c := newRemoteNodes(t, "node-a", "node-b")
	capacity := nodecontract.Capacity{CPUMillicores: 4000, MemoryMB: 8192, MaxSandboxes: 8}
	beat := func() {
		t.Helper()
		for _, id := range []string{"node-a", "node-b"} {
			if err := c.s.NodeHeartbeat(ctx, id, "fp-"+id, nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b1", Capacity: capacity}); err != nil {
				t.Fatal(err)
			}
		}
	}
	beat()
	sb, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	on, other := sb.NodeID, "node-a"
	if on == "node-a" {
		other = "node-b"
	}
	rep, err := c.s.DrainNode(ctx, on)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Node.Draining || !rep.Node.Up || len(rep.Moved)+len(rep.NotMoved) != 0 || len(rep.Sandboxes) != 1 || rep.Sandboxes[0] != sb.ID {
		t.Errorf("drain report %+v; want the node draining and up, its plain sandbox %s listed", rep, sb.ID)
	}
	for i := range 3 {
		beat() // a heartbeat does not undo it
		got, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{})
		if err != nil || got.NodeID != other {
			t.Fatalf("create %d with %s draining: on %q, %v; want %s", i, on, got.NodeID, err, other)
		}
	}
	if _, err := c.s.DrainNode(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("create with every node draining: %v; want unavailable", err)
	}
	recs, err := c.s.ListNodes(ctx)
	if err != nil || len(recs) != 2 || !recs[0].Draining || !recs[1].Draining {
		t.Errorf("nodes: %+v, %v; want both draining", recs, err)
	}
	for name, id := range map[string]string{"a node that never joined": "node-x"} {
		if _, err := c.s.DrainNode(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("drain %s: %v; want not found", name, err)
		}
	}
	n, err := c.s.UndrainNode(ctx, on)
	if err != nil || n.Draining || !n.Up {
		t.Fatalf("undrain: %+v, %v", n, err)
	}
	if got, err := c.s.CreateSandbox(ctx, c.tenant, CreateRequest{}); err != nil || got.NodeID != on {
		t.Errorf("create after %s was undrained: on %q, %v", on, got.NodeID, err)
	}

	local := newRemoteNodes(t)
	local.s.placer.nodes.local = newFakeNode(t)
	if _, err := local.s.DrainNode(ctx, local.s.placer.nodes.local.ID()); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("drain the control plane's own node: %v; want invalid argument", err)
	}
}

// TestOpLeaseGivenUpWhenLeftMidway: a clustered replica holds the lease on a session's operation while the
// session is mid-way; if the operation ends with the session still mid-way (its last update failed), the
// session's unlock gives the lease up, so that the leader can settle it; a session that settled gave it
// up already.
func TestOpLeaseGivenUpWhenLeftMidway(t *testing.T) {
	c := newRemoteNodes(t, "node-a")
	ss := c.s.sessions
	held := func(id string) bool {
		ss.ops.mu.Lock()
		defer ss.ops.mu.Unlock()
		_, ok := ss.ops.m[id]
		return ok
	}
	unlock := ss.lockSession("se_1")
	ss.sessionChanged(store.Session{ID: "se_1", State: store.SessionPausing})
	if !held("se_1") {
		t.Fatal("no lease held on a session mid-way")
	}
	unlock() // the operation's last update failed: still pausing
	if held("se_1") {
		t.Error("the lease on an operation that ended with its session mid-way is still held")
	}
	unlock = ss.lockSession("se_2")
	ss.sessionChanged(store.Session{ID: "se_2", State: store.SessionResuming})
	ss.sessionChanged(store.Session{ID: "se_2", State: store.SessionRunning})
	if held("se_2") {
		t.Error("the lease on a settled session is still held")
	}
	unlock()
	ss.ops.wg.Wait() // the renewals ended
}
