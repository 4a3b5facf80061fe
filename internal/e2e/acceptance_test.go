package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/internal/testenv/pgtest"
	"github.com/airlockrun/airlock/internal/testenv/s3test"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestClusterAcceptance is issue 8's acceptance test: two control-plane replicas (airlock server) and
// three nodes (airlock node run), each a process of its own with its own state directory, on a real
// PostgreSQL and a real S3 server. 30 sessions are created through either replica; a node killed with
// SIGKILL has its sessions resumed on the others; a replica killed leaves the other serving, and the
// nodes reporting to it; no session ever runs in two sandboxes at once.
func TestClusterAcceptance(t *testing.T) {
	// The nodes join through the first replica and report to both, in turn, each with its own state
	// directory and sandbox address range.
	cl := testenv.StartCluster(t, 2, 3)
	cp1, cp2 := cl.Replicas[0], cl.Replicas[1]
	c1, c2 := cl.Clients[0], cl.Clients[1]
	clients := cl.Clients
	all := cl.Nodes
	nodes := map[string]*testenv.Node{}
	for _, n := range all {
		nodes[n.ID] = n
	}
	ctx := ctxT(t, 15*time.Minute)

	// 30 sessions, through either replica, each with a snapshot in the bucket.
	const count = 30
	sessions := make([]*airlock.Session, count)
	var wg sync.WaitGroup
	errs := make(chan error, count)
	work := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c := clients[i%2]
				se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{RollingIntervalSeconds: never()})
				if err == nil && se.State != airlock.SessionRunning {
					err = fmt.Errorf("created session is %s (%s)", se.State, se.Reason)
				}
				if err == nil {
					_, err = c.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"sh", "-c", fmt.Sprintf("echo session-%d > /home/user/who", i)}})
				}
				var sn *airlock.Snapshot
				if err == nil {
					sn, err = c.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{})
				}
				if err == nil {
					_, err = c.WaitSnapshot(ctx, se.ID, sn.ID)
				}
				if err != nil {
					errs <- fmt.Errorf("session %d: %w", i, err)
					continue
				}
				sessions[i] = se
			}
		}()
	}
	for i := range count {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	perNode := map[string][]int{}
	for i, se := range sessions {
		n := nodeOf(t, se.SandboxID, all...)
		perNode[n] = append(perNode[n], i)
	}
	// Each node's sandboxes have addresses from its range only.
	for i, n := range all {
		pool := netip.MustParsePrefix(testenv.ClusterAddresses(i))
		for _, k := range perNode[n.ID] {
			res, err := c1.Exec(ctx, sessions[k].ID, airlock.ExecRequest{Cmd: []string{"python3", "-c",
				"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('100.64.0.1', 9)); print(s.getsockname()[0])"}})
			if err != nil {
				t.Fatal(err)
			}
			if a, err := netip.ParseAddr(strings.TrimSpace(res.Stdout)); err != nil || !pool.Contains(a) {
				t.Errorf("a sandbox on %s has address %q (%s); want one in %s", n.ID, res.Stdout, res.Stderr, pool)
			}
		}
	}
	t.Logf("sessions per node: %d, %d, %d", len(perNode["node-1"]), len(perNode["node-2"]), len(perNode["node-3"]))
	// A token revoked through one replica ends the stream it opened through the other within 2 s: each
	// replica checks its streams' credentials in the Store (issue 40).
	revokeAcrossReplicas(t, cl.Replicas[1].URL, c1, sessions[0].ID)
	for _, n := range all {
		if len(perNode[n.ID]) == 0 {
			t.Errorf("no session was placed on %s: %v", n.ID, perNode)
		}
	}

	// Throughout: no session ever runs in two sandboxes at once.
	stopWatch := make(chan struct{})
	twice := make(chan string, 1)
	go func() {
		defer close(twice)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(100 * time.Millisecond):
			}
			l, err := c2.ListSandboxes(context.Background(), airlock.ListOptions{States: []string{"running"}, Limit: 1000})
			if err != nil {
				continue
			}
			seen := map[string]string{}
			for _, sb := range l.Sandboxes {
				se := sb.Metadata["airlock.session"]
				if prev, ok := seen[se]; ok && se != "" {
					select {
					case twice <- fmt.Sprintf("session %s runs in %s and %s", se, prev, sb.ID):
					default:
					}
				}
				seen[se] = sb.ID
			}
		}
	}()

	// Kill a node: its sessions resume on the other two from their snapshots.
	victim := all[0]
	for _, n := range all {
		if len(perNode[n.ID]) > len(perNode[victim.ID]) {
			victim = n
		}
	}
	killed := time.Now()
	victim.Kill()
	var took []time.Duration
	for _, i := range perNode[victim.ID] {
		se := sessions[i]
		deadline := time.Now().Add(2 * time.Minute)
		for {
			got, err := c2.GetSession(ctx, se.ID)
			if err == nil && got.State == airlock.SessionRunning && got.SandboxID != se.SandboxID {
				took = append(took, time.Since(killed))
				sessions[i] = got
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %d (%s) not resumed after its node was killed: %+v %v", i, se.ID, got, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("%d sessions of the killed node resumed elsewhere; the last %s after the kill", len(took), took[len(took)-1].Round(100*time.Millisecond))
	for _, i := range perNode[victim.ID] {
		res, err := c1.Exec(ctx, sessions[i].ID, airlock.ExecRequest{Cmd: []string{"cat", "/home/user/who"}})
		if err != nil || strings.TrimSpace(res.Stdout) != fmt.Sprintf("session-%d", i) {
			t.Errorf("session %d after its node was killed: %+v %v", i, res, err)
		}
		if n := nodeOf(t, sessions[i].SandboxID, all...); n == victim.ID || n == "" {
			t.Errorf("session %d runs on %q after %s was killed", i, n, victim.ID)
		}
	}

	// Kill a replica while calls go through both: the other serves every session, and the nodes keep
	// reporting (to it) so that nothing is fenced off.
	before := map[string]string{}
	for _, se := range sessions {
		before[se.ID] = se.SandboxID
	}
	var inflight sync.WaitGroup
	var failed1, failed2 int
	var mu sync.Mutex
	for k := range 10 {
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			c := clients[k%2]
			_, err := c.Exec(ctx, sessions[k].ID, airlock.ExecRequest{Cmd: []string{"sleep", "1"}})
			if err != nil {
				mu.Lock()
				if k%2 == 0 {
					failed1++
				} else {
					failed2++
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	cp1.Kill()
	inflight.Wait()
	if failed2 > 0 {
		t.Errorf("%d calls through the replica that stayed failed", failed2)
	}
	t.Logf("in-flight calls through the killed replica that failed: %d of 5", failed1)
	// Past the nodes' fence: had they lost their control plane, their sandboxes would be gone now.
	time.Sleep(12 * time.Second)
	for i, se := range sessions {
		got, err := c2.GetSession(ctx, se.ID)
		if err != nil || got.State != airlock.SessionRunning || got.SandboxID != before[se.ID] {
			t.Errorf("session %d after the replica was killed: %+v %v; want running in %s", i, got, err, before[se.ID])
			continue
		}
		res, err := c2.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"cat", "/home/user/who"}})
		if err != nil || strings.TrimSpace(res.Stdout) != fmt.Sprintf("session-%d", i) {
			t.Errorf("session %d through the replica that stayed: %+v %v", i, res, err)
		}
	}
	se, err := c2.CreateSession(ctx, airlock.CreateSessionRequest{RollingIntervalSeconds: never()})
	if err != nil || se.State != airlock.SessionRunning {
		t.Errorf("create through the replica that stayed: %+v %v", se, err)
	} else {
		sessions = append(sessions, se)
	}

	// The killed node starts again: what its sandboxes left is destroyed.
	again := testenv.StartNode(t, &testenv.Env{URL: cp2.URL, Client: c2, ClusterURL: cp2.ClusterURL}, victim.ID,
		testenv.NodeOptions{DataDir: victim.DataDir, Process: true, ControlPlanes: []string{cp2.ClusterURL}, S3: &cl.Options.S3})
	deadline := time.Now().Add(60 * time.Second)
	for {
		fp, err := testenv.TakeFootprint(again.DataDir)
		if err == nil && len(fp.Processes) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node keeps what its killed run left: %v %v", fp.Processes, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stopWatch)
	if msg, ok := <-twice; ok {
		t.Error(msg)
	}
	for _, se := range sessions {
		if err := c2.DeleteSession(ctx, se.ID); err != nil {
			t.Errorf("delete session %s: %v", se.ID, err)
		}
	}
	for _, n := range append(all, again) {
		if n == victim {
			continue
		}
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
		leftNothing(t, n)
	}
}

// TestReplicaCrashMidOperation: a replica killed in the middle of a session's resume, or of its pause
// (after its node saved the sandbox), leaves the session to the other replica, which settles it once
// the dead one's lease on the operation lapsed: the resume's sandbox is destroyed and the session is
// paused again; the pause is finished at the snapshot its node saved. Either way the session then
// works through the other, with its files.
func TestReplicaCrashMidOperation(t *testing.T) {
	testenv.RequireSandboxes(t)
	ro := testenv.ReplicaOptions{PostgresDSN: pgtest.Start(t), S3: s3test.Start(t), MasterKeyFile: filepath.Join(t.TempDir(), "master.key"),
		KeyFile: filepath.Join(t.TempDir(), "api-key")}
	stays := testenv.StartReplica(t, "stays", ro)
	key := ro.APIKey(t)
	c := airlock.New(stays.URL, airlock.WithAPIKey(key))
	ctx := ctxT(t, 10*time.Minute)
	env := &testenv.Env{URL: stays.URL, Client: c, ClusterURL: stays.ClusterURL}
	n := testenv.StartNode(t, env, "node-1", testenv.NodeOptions{S3: &ro.S3})
	testenv.WaitNodes(t, env, "up", n.ID)

	for _, point := range []string{"resume-booted", "snapshot-checkpointed"} {
		t.Run(point, func(t *testing.T) {
			se := newSession(t, env, airlock.CreateSessionRequest{RollingIntervalSeconds: never()})
			sh(t, env, se.ID, "echo kept > /home/user/f")
			if point == "resume-booted" {
				paused, err := c.PauseSession(ctx, se.ID)
				if err != nil {
					t.Fatal(err)
				}
				// In the bucket, for the other replica to resume from.
				if _, err := c.WaitSnapshot(ctx, se.ID, paused.HeadSnapshotID); err != nil {
					t.Fatal(err)
				}
			}
			dies := testenv.StartReplica(t, "dies-"+point, ro, "AIRLOCK_CRASH_AT="+point)
			cd := airlock.New(dies.URL, airlock.WithAPIKey(key))
			var err error
			if point == "resume-booted" {
				_, err = cd.ResumeSession(ctx, se.ID)
			} else {
				_, err = cd.PauseSession(ctx, se.ID)
			}
			select {
			case <-dies.Done():
			case <-time.After(30 * time.Second):
				t.Fatalf("the replica did not crash at %s; the call returned %v", point, err)
			}
			if err == nil {
				t.Fatalf("the call through the replica that was to crash at %s succeeded", point)
			}
			// Either way the session is paused: at its old snapshot after the resume, at the new one
			// after the pause (its node saved the image, put it on record and destroyed the sandbox in the
			// one call the replica made before it died; the replica that stays finishes the pause).
			want := airlock.SessionPaused
			deadline := time.Now().Add(60 * time.Second)
			for {
				got, err := c.GetSession(ctx, se.ID)
				if err == nil && got.State == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("session after a replica crashed at %s: %+v %v; want %s", point, got, err, want)
				}
				time.Sleep(200 * time.Millisecond)
			}
			// No sandbox of the session but the one it runs in (none while paused).
			deadline = time.Now().Add(30 * time.Second)
			for {
				got, _ := c.GetSession(ctx, se.ID)
				l, err := c.ListSandboxes(ctx, airlock.ListOptions{States: []string{"creating", "running"}, Metadata: map[string]string{"airlock.session": se.ID}})
				if err != nil {
					t.Fatal(err)
				}
				stray := 0
				for _, sb := range l.Sandboxes {
					if sb.ID != got.SandboxID {
						stray++
					}
				}
				if stray == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("sandboxes of session %s besides the one it runs in: %+v", se.ID, l.Sandboxes)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if res := sh(t, env, se.ID, "cat /home/user/f"); strings.TrimSpace(res.Stdout) != "kept" {
				t.Errorf("the session through the replica that stayed: %+v", res)
			}
		})
	}
}
