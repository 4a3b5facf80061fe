package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/app"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/template/oci/ocitest"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// waitFor waits up to limit for cond to hold, checking every 200 ms.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// nodeOf reports which of nodes runs sandbox id (its runsc processes run from that node's data
// directory), or "".
func nodeOf(t *testing.T, id string, nodes ...*testenv.Node) string {
	t.Helper()
	for _, n := range nodes {
		fp, err := testenv.TakeFootprint(n.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range fp.Processes {
			if strings.Contains(p, id) {
				return n.ID
			}
		}
	}
	return ""
}

// TestSeparateNodes: a control plane with no node of its own (airlock server) and two nodes in
// processes of their own (airlock node join, airlock node run). Sandboxes are spread over both by
// capacity and run commands through them; a session paused on one node resumes there (its snapshot's
// node), and after that node stops, on the other, from the snapshot; a node that stops has its
// sandboxes failed, gets no more, and leaves nothing behind.
func TestSeparateNodes(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{NoLocalNode: true})
	ctx := ctxT(t, 10*time.Minute)
	// Before any node reports, nothing can be placed.
	_, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	wantCode(t, "a create with no node up", err, 503)

	a := testenv.StartNode(t, e, "node-a", testenv.NodeOptions{})
	b := testenv.StartNode(t, e, "node-b", testenv.NodeOptions{})
	byID := map[string]*testenv.Node{a.ID: a, b.ID: b}
	testenv.WaitNodes(t, e, "up", a.ID, b.ID)
	if code, out, errOut := runCLI("--url", e.URL, "--api-key", e.APIKey, "node", "ls"); code != 0 || strings.Count(out, " up ") != 2 {
		t.Errorf("node ls: %d %s %s; want both nodes up", code, out, errOut)
	} else if !strings.Contains(errOut, "warning: nodes node-a, node-b share one host") {
		// Both run on this machine and each offers all of it.
		t.Errorf("node ls warned %q; want a warning that node-a and node-b share one host", errOut)
	}

	// Spread by capacity: the two nodes offer the same, so four sandboxes go two and two.
	var sbs []string
	where := map[string]int{}
	for i := range 4 {
		sb, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create sandbox %d: %v", i, err)
		}
		sbs = append(sbs, sb.ID)
		on := nodeOf(t, sb.ID, a, b)
		where[on]++
		// The API says which node it is on: the one whose host runs it.
		if sb.Node != on {
			t.Errorf("sandbox %s: the API says it is on %q; it runs on %q", sb.ID, sb.Node, on)
		}
	}
	if where[a.ID] != 2 || where[b.ID] != 2 {
		t.Errorf("sandboxes per node: %v; want 2 and 2", where)
	}
	// node ls counts the Store's sandboxes on each node, at once, not what its last heartbeat said.
	for id, want := range where {
		if n := nodeInfo(t, e, id); n.Sandboxes != want {
			t.Errorf("node %s: %d sandboxes listed; want %d", id, n.Sandboxes, want)
		}
	}

	// The operator bounds node-a to the two it runs: the next sandbox goes to node-b, whatever node-a
	// reports. The bound it had is what it reported first.
	nA := nodeInfo(t, e, a.ID)
	if nA.Bound == nil || nA.Capacity == nil || *nA.Bound != *nA.Capacity {
		t.Fatalf("node-a's bound %+v, capacity %+v; want the bound set by its first heartbeat", nA.Bound, nA.Capacity)
	}
	if code, out, errOut := runCLI("--url", e.URL, "--api-key", e.APIKey, "node", "bound", a.ID, "--max-sandboxes", "2"); code != 0 || !strings.Contains(out, "at most 2 sandboxes") {
		t.Fatalf("node bound: %d %s %s", code, out, errOut)
	}
	waitFor(t, 10*time.Second, "node-a's next heartbeat, cut to its bound", func() bool {
		n := nodeInfo(t, e, a.ID)
		return n.Capacity != nil && n.Capacity.MaxSandboxes == 2 && n.Capacity.MemoryMB == nA.Capacity.MemoryMB
	})
	extra, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeOf(t, extra.ID, a, b); got != b.ID {
		t.Errorf("a sandbox with node-a at its bound went to %q; want %s", got, b.ID)
	}
	if err := e.Client.DeleteSandbox(ctx, extra.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.SetNodeBound(ctx, a.ID, airlock.NodeCapacity{MaxSandboxes: nA.Bound.MaxSandboxes}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "node-a's bound lifted", func() bool {
		n := nodeInfo(t, e, a.ID)
		return n.Capacity != nil && n.Capacity.MaxSandboxes == nA.Capacity.MaxSandboxes
	})
	for _, id := range sbs {
		if res := sh(t, e, id, "echo hello from $(hostname)"); res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "hello from") {
			t.Errorf("exec on %s: %+v", id, res)
		}
		data := bytes.Repeat([]byte(id), 10000)
		if _, err := e.Client.WriteFile(ctx, id, "/home/user/f", bytes.NewReader(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := e.Client.ReadFile(ctx, id, "/home/user/f"); err != nil || !bytes.Equal(got, data) {
			t.Errorf("read back on %s: %d bytes, %v", id, len(got), err)
		}
	}

	// A session pauses and resumes on the node of its snapshot.
	se := newSession(t, e, airlock.CreateSessionRequest{})
	sh(t, e, se.ID, "echo kept > /home/user/state")
	first := nodeOf(t, se.SandboxID, a, b)
	if first == "" {
		t.Fatalf("session sandbox %s is on no node", se.SandboxID)
	}
	if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	se2, err := e.Client.ResumeSession(ctx, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeOf(t, se2.SandboxID, a, b); got != first {
		t.Errorf("the session resumed on %q; want %s, where its snapshot was taken", got, first)
	}

	// Drained, the session's node moves it to the other with nothing lost: a file written just before
	// and a process in memory go along; its plain sandboxes stay, listed; nothing new is placed on it.
	other := a.ID
	if first == a.ID {
		other = b.ID
	}
	sh(t, e, se.ID, "echo just-before > /home/user/drained; setsid nohup sleep 1000 >/dev/null 2>&1 & echo $! > /home/user/pid")
	code, out, errOut := runCLI("--url", e.URL, "--api-key", e.APIKey, "node", "drain", first)
	if code != 0 || !strings.Contains(out, "moved session "+se.ID) || !strings.Contains(out, "to "+other) || !strings.Contains(out, "2 sandboxes of no session stay") {
		t.Fatalf("node drain %s: %d %s %s; want the session moved to %s and 2 plain sandboxes left", first, code, out, errOut, other)
	}
	moved, err := e.Client.GetSession(ctx, se.ID)
	if err != nil || moved.State != "running" || moved.Node != other || nodeOf(t, moved.SandboxID, a, b) != other {
		t.Fatalf("session after the drain: %+v, %v; want running on %s", moved, err, other)
	}
	if res := sh(t, e, se.ID, "cat /home/user/drained; kill -0 $(cat /home/user/pid) && echo alive"); res.Stdout != "just-before\nalive\n" {
		t.Errorf("the moved session's last file and process: %+v; want both there", res)
	}
	if n := nodeInfo(t, e, first); n.State != "draining" || !n.Draining {
		t.Errorf("node %s after the drain: state %q, draining %v", first, n.State, n.Draining)
	}
	for range 2 {
		sb, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if got := nodeOf(t, sb.ID, a, b); got != other {
			t.Errorf("a sandbox created with %s draining went to %q", first, got)
		}
		if err := e.Client.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.Client.UndrainNode(ctx, first); err != nil || n.State != "up" || n.Draining {
		t.Errorf("undrain %s: %+v, %v; want it up", first, n, err)
	}
	if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	first = other // where its snapshot is now

	// The session's node stops: its sandboxes fail; the others run on.
	gone, stays := byID[first], a
	if gone == a {
		stays = b
	}
	onGone := []string{}
	for _, id := range sbs {
		if nodeOf(t, id, gone) != "" {
			onGone = append(onGone, id)
		}
	}
	if err := gone.Stop(); err != nil {
		t.Fatalf("stop %s: %v", gone.ID, err)
	}
	for _, id := range sbs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			sb, err := e.Client.GetSandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			lost := strings.Contains(strings.Join(onGone, " "), id)
			if !lost && sb.State == "running" {
				if res := sh(t, e, id, "cat /home/user/f | wc -c"); strings.TrimSpace(res.Stdout) != fmt.Sprint(len(id)*10000) {
					t.Errorf("sandbox %s on the node that stays: %+v", id, res)
				}
				break
			}
			if lost && sb.State == "failed" && strings.Contains(sb.Reason, "node shut down") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox %s (lost with its node: %v) is %s (%s)", id, lost, sb.State, sb.Reason)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	testenv.WaitNodes(t, e, "up", stays.ID)
	if l, err := e.Client.ListNodes(ctx); err == nil {
		for _, n := range l.Nodes {
			if n.ID == gone.ID && n.State == "up" {
				t.Errorf("node %s is still up after it stopped", n.ID)
			}
		}
	}
	// New sandboxes go to the node that stays; the session resumes there from its snapshot.
	sb, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeOf(t, sb.ID, stays); got != stays.ID {
		t.Errorf("a sandbox created after %s stopped went to %q", gone.ID, got)
	}
	se3, err := e.Client.ResumeSession(ctx, se.ID)
	if err != nil {
		t.Fatalf("resume on the other node: %v", err)
	}
	if got := nodeOf(t, se3.SandboxID, stays); got != stays.ID {
		t.Errorf("the session resumed on %q; want %s", got, stays.ID)
	}
	if res := sh(t, e, se.ID, "cat /home/user/state"); strings.TrimSpace(res.Stdout) != "kept" {
		t.Errorf("the session's file after it moved: %+v", res)
	}

	// The stopped node left nothing on the host.
	leftNothing(t, gone)
	for _, id := range append(sbs, sb.ID) {
		if err := e.Client.DeleteSandbox(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	if err := e.Client.DeleteSession(ctx, se.ID); err != nil {
		t.Errorf("delete session: %v", err)
	}
	if err := stays.Stop(); err != nil {
		t.Fatal(err)
	}
	leftNothing(t, stays)
}

// nodeInfo returns what ListNodes says of node id.
func nodeInfo(t *testing.T, e *testenv.Env, id string) airlock.Node {
	t.Helper()
	l, err := e.Client.ListNodes(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Nodes {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("node %s is not listed", id)
	return airlock.Node{}
}

// leftNothing fails the test if node n left processes, mounts, cgroups, network namespaces, veths or
// runtime files on the host.
func leftNothing(t *testing.T, n *testenv.Node) {
	t.Helper()
	fp, err := testenv.TakeFootprint(n.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp.Processes)+len(fp.Mounts)+len(fp.Cgroups)+len(fp.NetNS)+len(fp.Links)+len(fp.Files) > 0 {
		t.Errorf("node %s left on the host: %+v", n.ID, fp)
	}
}

// TestNodeFailover: a node killed with SIGKILL has its sessions resumed on the other node from their
// latest snapshots (what came after is lost), its plain sandboxes failed; the Store never shows a
// session in two running sandboxes; when the killed node starts again, what its sandboxes left there is
// destroyed.
func TestNodeFailover(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{NoLocalNode: true})
	ctx := ctxT(t, 10*time.Minute)
	a := testenv.StartNode(t, e, "node-a", testenv.NodeOptions{Process: true})
	b := testenv.StartNode(t, e, "node-b", testenv.NodeOptions{Process: true})
	byID := map[string]*testenv.Node{a.ID: a, b.ID: b}
	testenv.WaitNodes(t, e, "up", a.ID, b.ID)

	// Two sessions and two sandboxes, spread over both nodes.
	var sessions []*airlock.Session
	for i := range 2 {
		se := newSession(t, e, airlock.CreateSessionRequest{RollingIntervalSeconds: never()})
		sh(t, e, se.ID, fmt.Sprintf("echo saved-%d > /home/user/state", i))
		if _, err := e.Client.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{}); err != nil {
			t.Fatal(err)
		}
		sh(t, e, se.ID, "echo after-the-snapshot > /home/user/state")
		sessions = append(sessions, se)
	}
	var plain []string
	for range 2 {
		sb, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		plain = append(plain, sb.ID)
	}
	victim := byID[nodeOf(t, sessions[0].SandboxID, a, b)]
	if victim == nil {
		t.Fatalf("session %s runs on no node", sessions[0].ID)
	}
	other := a
	if victim == a {
		other = b
	}

	// Watch the Store: no session ever has two sandboxes running.
	stop := make(chan struct{})
	twice := make(chan string, 1)
	go func() {
		for {
			select {
			case <-stop:
				close(twice)
				return
			case <-time.After(50 * time.Millisecond):
			}
			l, err := e.Client.ListSandboxes(context.Background(), airlock.ListOptions{States: []string{"running"}, Limit: 1000})
			if err != nil {
				continue
			}
			seen := map[string]string{}
			for _, sb := range l.Sandboxes {
				se := sb.Metadata["airlock.session"]
				if se == "" {
					continue
				}
				if prev, ok := seen[se]; ok {
					select {
					case twice <- fmt.Sprintf("session %s runs in %s and %s", se, prev, sb.ID):
					default:
					}
				}
				seen[se] = sb.ID
			}
		}
	}()

	// The session's interception CA, which its sandbox's trust store holds, as the victim keeps it.
	caBefore := sessionCACert(t, victim, sessions[0].ID)

	killed := time.Now()
	victim.Kill()
	// The killed node's keeper stops its sandboxes' processes once their lease lapses, with the node
	// process still down; when, is compared below with when their sessions started elsewhere.
	stopped := make(chan time.Time, 1)
	go func() {
		for time.Since(killed) < 2*time.Minute {
			if fp, err := testenv.TakeFootprint(victim.DataDir); err == nil && len(fp.Processes) == 0 {
				stopped <- time.Now()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		close(stopped)
	}()
	moved := map[string]time.Duration{}
	resumedAt := map[string]time.Time{}
	for _, se := range sessions {
		deadline := time.Now().Add(90 * time.Second)
		for {
			got, err := e.Client.GetSession(ctx, se.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == airlock.SessionRunning && got.SandboxID != se.SandboxID {
				moved[se.ID] = time.Since(killed)
				if got.Node != other.ID {
					t.Errorf("session %s resumed; the API says on %q, want %s", se.ID, got.Node, other.ID)
				}
				nsb, err := e.Client.GetSandbox(ctx, got.SandboxID)
				if err != nil {
					t.Fatal(err)
				}
				resumedAt[se.ID] = nsb.CreatedAt
				if n := nodeOf(t, got.SandboxID, other); n != other.ID {
					t.Errorf("session %s resumed on %q; want %s", se.ID, n, other.ID)
				}
				break
			}
			if got.State == airlock.SessionRunning && nodeOf(t, got.SandboxID, other) == other.ID {
				break // it was on the node that stays
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s did not resume elsewhere: %s (%s)", se.ID, got.State, got.Reason)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("sessions resumed elsewhere after the kill: %v", moved)
	at, ok := <-stopped
	if !ok {
		fp, _ := testenv.TakeFootprint(victim.DataDir)
		keeperLog, _ := os.ReadFile(filepath.Join(victim.DataDir, "keeper.log"))
		t.Fatalf("the killed node's sandboxes still run 2 minutes later: %v\nkeeper log:\n%s", fp.Processes, keeperLog)
	}
	t.Logf("the killed node's sandboxes stopped %s after the kill (the node's lease: %s after its last heartbeat)",
		at.Sub(killed).Round(10*time.Millisecond), nodeapi.FenceAfter+app.KeeperSlack)
	for id, r := range resumedAt {
		if !at.Before(r) {
			t.Errorf("session %s started on %s at %s, before its copy on the killed node stopped (%s): it ran twice",
				id, other.ID, r.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		}
	}
	if got := sessionCACert(t, other, sessions[0].ID); !bytes.Equal(got, caBefore) {
		t.Errorf("session %s has another interception CA on %s than it had on %s: its restored trust store does not hold it", sessions[0].ID, other.ID, victim.ID)
	}
	for i, se := range sessions {
		want := fmt.Sprintf("saved-%d", i)
		if _, ok := moved[se.ID]; !ok {
			want = "after-the-snapshot"
		}
		if res := sh(t, e, se.ID, "cat /home/user/state"); strings.TrimSpace(res.Stdout) != want {
			t.Errorf("session %s after the kill: %q; want %q", se.ID, res.Stdout, want)
		}
	}
	for _, id := range plain {
		sb, err := e.Client.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		onVictim := sb.State != "running"
		if onVictim && (sb.State != "failed" || !strings.Contains(sb.Reason, "stopped answering")) {
			t.Errorf("sandbox %s of the killed node: %s (%s); want failed", id, sb.State, sb.Reason)
		}
		if !onVictim {
			sh(t, e, id, "true")
		}
	}

	// The killed node starts again: what its sandboxes left is destroyed; the sessions run on where
	// they are.
	again := testenv.StartNode(t, e, victim.ID, testenv.NodeOptions{DataDir: victim.DataDir, Process: true})
	deadline := time.Now().Add(60 * time.Second)
	for {
		fp, err := testenv.TakeFootprint(again.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		if len(fp.Processes) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node keeps what its killed run left: %v", fp.Processes)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, se := range sessions {
		sh(t, e, se.ID, "true")
	}
	close(stop)
	if msg, ok := <-twice; ok {
		t.Error(msg)
	}
	for _, id := range plain {
		_ = e.Client.DeleteSandbox(ctx, id)
	}
	for _, se := range sessions {
		_ = e.Client.DeleteSession(ctx, se.ID)
	}
	if err := again.Stop(); err != nil {
		t.Error(err)
	}
	// Its host is gone for good: the operator removes it, and it is no longer listed.
	if code, out, errOut := runCLI("--url", e.URL, "--api-key", e.APIKey, "node", "rm", again.ID); code != 0 || !strings.Contains(out, "removed") {
		t.Errorf("node rm %s: %d %s %s", again.ID, code, out, errOut)
	}
	if code, out, errOut := runCLI("--url", e.URL, "--api-key", e.APIKey, "node", "ls"); code != 0 || strings.Contains(out, again.ID) || !strings.Contains(out, other.ID) {
		t.Errorf("node ls after node rm %s: %d %s %s", again.ID, code, out, errOut)
	}
	if err := other.Stop(); err != nil {
		t.Error(err)
	}
	leftNothing(t, again)
	leftNothing(t, other)
}

// TestNodeCrashRestart: a node killed with SIGKILL and started again before the control plane gives it
// up takes its sandboxes back: the same sandbox runs on with its processes and files.
func TestNodeCrashRestart(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{NoLocalNode: true})
	ctx := ctxT(t, 5*time.Minute)
	n := testenv.StartNode(t, e, "node-a", testenv.NodeOptions{Process: true})
	testenv.WaitNodes(t, e, "up", n.ID)
	sb, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, e, sb.ID, "echo kept > /home/user/f; (setsid nohup sleep 3600 >/dev/null 2>&1 &)")
	pids := sh(t, e, sb.ID, "pgrep -x sleep").Stdout
	n.Kill()
	again := testenv.StartNode(t, e, n.ID, testenv.NodeOptions{DataDir: n.DataDir, Process: true})
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := e.Client.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"sh", "-c", "cat /home/user/f; pgrep -x sleep"}})
		if err == nil && res.Stdout == "kept\n"+pids {
			break
		}
		if time.Now().After(deadline) {
			got, _ := e.Client.GetSandbox(ctx, sb.ID)
			t.Fatalf("the sandbox after its node restarted: %+v %v (sandbox %+v)", res, err, got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := e.Client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := again.Stop(); err != nil {
		t.Fatal(err)
	}
	leftNothing(t, again)
}

// TestNodeFence: a node cut off from every control plane stops its sandboxes itself (nodeapi.FenceAfter)
// before a control plane could give it up and resume its sessions elsewhere.
func TestNodeFence(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{NoLocalNode: true})
	ctx := ctxT(t, 5*time.Minute)
	n := testenv.StartNode(t, e, "node-a", testenv.NodeOptions{})
	testenv.WaitNodes(t, e, "up", n.ID)
	sb, err := e.Client.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if nodeOf(t, sb.ID, n) != n.ID {
		t.Fatalf("sandbox %s is not on %s", sb.ID, n.ID)
	}
	// The only control plane goes away; the node runs on, cut off.
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for nodeOf(t, sb.ID, n) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the node cut off still runs sandbox %s after 30s", sb.ID)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(n.Logs(), "no control plane reached") {
		t.Errorf("the node did not say why its sandbox stopped:\n%s", n.Logs())
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	leftNothing(t, n)
}

// sessionCACert returns the certificate (DER) of the interception CA node n keeps for a session.
func sessionCACert(t *testing.T, n *testenv.Node, sessionID string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.DataDir, "node", "ca", sessionID+".json"))
	if err != nil {
		t.Fatalf("node %s keeps no CA for session %s: %v", n.ID, sessionID, err)
	}
	var ca struct {
		Cert []byte `json:"cert"`
	}
	if err := json.Unmarshal(b, &ca); err != nil || len(ca.Cert) == 0 {
		t.Fatalf("node %s's CA of session %s: %v", n.ID, sessionID, err)
	}
	return ca.Cert
}

// TestSnapshotsBypassReplicas: two replicas, two nodes, S3 as the blob store. A session holding 96 MiB
// of random memory pauses on its node, which then stops; it resumes on the other node, fetching its
// snapshot from S3, with its process and memory intact. No image byte passes through a replica: their
// I/O grows by far less than the image during the pause and the resume, and their data directories
// hold no image.
func TestSnapshotsBypassReplicas(t *testing.T) {
	cl := testenv.StartCluster(t, 2, 2)
	c1, c2 := cl.Clients[0], cl.Clients[1]
	ctx := ctxT(t, 10*time.Minute)
	se, err := c1.CreateSession(ctx, airlock.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	from := nodeOf(t, se.SandboxID, cl.Nodes...)
	const beat = `import os, time, zlib
b = os.urandom(96 << 20)
crc = zlib.crc32(b)
i = 0
while True:
    i += 1
    open("/tmp/beat.new", "w").write("%d %d" % (crc, i))
    os.rename("/tmp/beat.new", "/tmp/beat")
    time.sleep(0.1)
`
	run := func(c *airlock.Client, cmd string) string {
		t.Helper()
		res, err := c.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"sh", "-c", cmd}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %+v %v", cmd, res, err)
		}
		return strings.TrimSpace(res.Stdout)
	}
	run(c1, "cat > /tmp/beat.py <<'EOF'\n"+beat+"EOF\n(setsid nohup python3 /tmp/beat.py >/dev/null 2>&1 &)")
	var before []string
	waitFor(t, 60*time.Second, "the memory holder's first beat", func() bool {
		before = strings.Fields(run(c1, "cat /tmp/beat 2>/dev/null || true"))
		return len(before) == 2
	})

	io := func() []int64 {
		var out []int64
		for _, r := range cl.Replicas {
			n, err := r.IO()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, n)
		}
		return out
	}
	io0 := io()
	paused, err := c1.PauseSession(ctx, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := c1.WaitSnapshot(ctx, se.ID, paused.HeadSnapshotID)
	if err != nil || sn.State != "complete" {
		t.Fatalf("snapshot %+v, %v; want it stored", sn, err)
	}
	if sn.LogicalBytes < 96<<20 {
		t.Fatalf("the image has %d bytes; want the 96 MiB the process holds", sn.LogicalBytes)
	}
	var stopped *testenv.Node
	for _, n := range cl.Nodes {
		if n.ID == from {
			stopped = n
		}
	}
	if err := stopped.Stop(); err != nil {
		t.Fatal(err)
	}
	cl.WaitNodes(t, "down", from)
	resumed, err := c2.ResumeSession(ctx, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	to := nodeOf(t, resumed.SandboxID, cl.Nodes...)
	if to == "" || to == from {
		t.Fatalf("resumed on %q; want the other node than %s", to, from)
	}
	var after []string
	waitFor(t, 30*time.Second, "a beat after the resume", func() bool {
		after = strings.Fields(run(c2, "cat /tmp/beat"))
		return len(after) == 2 && after[1] != before[1]
	})
	io1 := io()
	if after[0] != before[0] {
		t.Errorf("the memory's checksum was %s before the pause and %s after the resume", before[0], after[0])
	}
	if a, b := atoi(t, before[1]), atoi(t, after[1]); b <= a {
		t.Errorf("the counter went from %d to %d; want it continued", a, b)
	}
	for i := range cl.Replicas {
		moved := io1[i] - io0[i]
		t.Logf("replica %d: %d KiB read and written during the pause and the resume of a %d MiB image", i+1, moved>>10, sn.LogicalBytes>>20)
		if moved > sn.LogicalBytes/8 {
			t.Errorf("replica %d read and wrote %d bytes during the pause and the resume of a %d-byte image: the image passed through it", i+1, moved, sn.LogicalBytes)
		}
		var held int64
		_ = filepath.WalkDir(cl.Replicas[i].DataDir, func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					held += fi.Size()
				}
			}
			return nil
		})
		if held > 8<<20 {
			t.Errorf("replica %d's data directory holds %d bytes", i+1, held)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestClusterTemplates: in a cluster whose control plane has no node of its own, an image template
// imported through the API lands on one node, which writes it into the blob store; sandboxes of it go
// to that node while it has room (it need not fetch the image), and one placed on the other node
// fetches the image from the blob store (checked against its digests) and boots it; a session of it
// there pauses and resumes with its process.
func TestClusterTemplates(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{NoLocalNode: true})
	ctx := ctxT(t, 5*time.Minute)
	a := testenv.StartNode(t, e, "node-a", testenv.NodeOptions{})
	b := testenv.StartNode(t, e, "node-b", testenv.NodeOptions{})
	testenv.WaitNodes(t, e, "up", a.ID, b.ID)

	archive := ocitest.WriteArchive(t, tinyImage(t, "clustered", ""), "example.test/tiny:1")
	if code, out, errOut := runCLI("--url", e.URL, "--api-key", e.APIKey, "template", "import", "tiny", archive); code != 0 {
		t.Fatalf("template import into a cluster: %d %q %s", code, out, errOut)
	}
	// The holder's next heartbeat lists the image.
	time.Sleep(4 * time.Second)
	first := create(t, e, airlock.CreateSandboxRequest{Template: "tiny"})
	holder := nodeOf(t, first.ID, a, b)
	second := create(t, e, airlock.CreateSandboxRequest{Template: "tiny"})
	if got := nodeOf(t, second.ID, a, b); got != holder {
		t.Errorf("a second sandbox of the template went to %s; want %s, which holds its image", got, holder)
	}
	other := b
	if holder == b.ID {
		other = a
	}
	if _, err := os.Stat(filepath.Join(other.DataDir, "templates", "oci", "images")); err == nil {
		if ls, _ := os.ReadDir(filepath.Join(other.DataDir, "templates", "oci", "images")); len(ls) != 0 {
			t.Fatalf("node %s holds images %v before any sandbox of the template went to it", other.ID, ls)
		}
	}

	// The holder at its bound: the next one goes to the other node, which fetches the image.
	if _, err := e.Client.SetNodeBound(ctx, holder, airlock.NodeCapacity{MaxSandboxes: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the holder's bound", func() bool {
		n := nodeInfo(t, e, holder)
		return n.Capacity != nil && n.Capacity.MaxSandboxes == 2
	})
	se, err := e.Client.CreateSession(ctx, airlock.CreateSessionRequest{Template: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeOf(t, se.SandboxID, a, b); got != other.ID {
		t.Fatalf("the session's sandbox is on %s; want %s", got, other.ID)
	}
	for _, id := range []string{first.ID, se.ID} {
		if got := sh(t, e, id, "cat /srv/version; test -e /usr/bin/python3 && echo host-usr || echo own-usr").Stdout; got != "clustered\nown-usr\n" {
			t.Errorf("%s: %q; want the image's root", id, got)
		}
	}
	if _, err := e.Client.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c", "nohup setsid sleep 3600 >/dev/null 2>&1 & echo $! > /tmp/pid"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.PauseSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.ResumeSession(ctx, se.ID); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, e, se.ID, "cat /srv/version; kill -0 $(cat /tmp/pid) && echo alive").Stdout; got != "clustered\nalive\n" {
		t.Errorf("the resumed session: %q", got)
	}
}
