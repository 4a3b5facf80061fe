package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// TestNodeRouting: a control plane with no node of its own places sandboxes only on nodes that joined
// and reported lately, by their room (memory and a bound of sandboxes), routes every call on a sandbox
// to its node, refuses heartbeats that name another host or are out of bounds, skips nodes that are
// down or leaving, and settles a node that restarted: what it lost fails, what it kept runs on.
func TestNodeRouting(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	fakes := map[string]*fakeNode{}
	dialed := map[string]string{}
	for _, id := range []string{"node-a", "node-b"} {
		fakes[id] = newFakeNode(t)
		fakes[id].id = id
		rec, _ := json.Marshal(NodeRecord{ID: id, Hosts: []string{"10.0.0.1", id + ".internal"}})
		if _, err := st.PutDoc(ctx, store.Doc{Key: nodeDocPrefix + id, Value: rec}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(Config{Store: st, Now: clk.Now, ReapInterval: time.Hour, DialNode: func(id, addr string) (Node, error) {
		dialed[id] = addr
		return fakes[id], nil
	}})
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

	if _, err := s.CreateSandbox(ctx, tn, CreateRequest{}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("create with no node up: %v; want unavailable", err)
	}
	capacity := node.Capacity{CPUMillicores: 4000, MemoryMB: 2048, MaxSandboxes: 3}
	beat := func(id, addr, boot string) error {
		return s.NodeHeartbeat(ctx, id, nodeapi.Heartbeat{Addr: addr, Boot: boot, Capacity: capacity})
	}
	bad := map[string]error{
		"another host":       beat("node-a", "10.9.9.9:7444", "boot1"),
		"no port":            beat("node-a", "10.0.0.1", "boot1"),
		"port 0":             beat("node-a", "10.0.0.1:0", "boot1"),
		"no boot":            beat("node-a", "10.0.0.1:7444", ""),
		"no capacity":        s.NodeHeartbeat(ctx, "node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b"}),
		"negative sandboxes": s.NodeHeartbeat(ctx, "node-a", nodeapi.Heartbeat{Addr: "10.0.0.1:7444", Boot: "b", Capacity: capacity, Sandboxes: -1}),
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
	if err := s.NodeHeartbeat(ctx, "node-b", nodeapi.Heartbeat{Addr: "node-b.internal:7444", Boot: "b1", Capacity: capacity, Leaving: true}); err != nil {
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
	s.bg.Wait() // the settling of the restarted node
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
