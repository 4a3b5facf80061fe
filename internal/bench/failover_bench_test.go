package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// BenchmarkNodeFailover is issue 25's failover figure: two replicas and two nodes (processes of their
// own, PostgreSQL, an S3 server). Each iteration runs a session with a stored snapshot, kills its
// node with SIGKILL and times until the session runs on the other node (its new sandbox started),
// from the kill and from the killed node's last heartbeat the control plane saw; then the node starts
// again for the next. Run with -benchtime 3x or so (about 25 s each).
func BenchmarkNodeFailover(b *testing.B) {
	cl := testenv.StartCluster(b, 2, 2)
	c := cl.Clients[0]
	ctx := context.Background()
	var fromKill, fromBeat []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{})
		if err != nil {
			b.Fatal(err)
		}
		sn, err := c.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.WaitSnapshot(ctx, se.ID, sn.ID); err != nil {
			b.Fatal(err)
		}
		se, err = c.GetSession(ctx, se.ID)
		if err != nil {
			b.Fatal(err)
		}
		i := slices.IndexFunc(cl.Nodes, func(n *testenv.Node) bool { return n.ID == se.Node })
		if i < 0 {
			b.Fatalf("session %s runs on %q, not a node of the cluster", se.ID, se.Node)
		}
		victim := cl.Nodes[i]
		b.StartTimer()
		killed := time.Now()
		victim.Kill()
		var started time.Time
		for deadline := time.Now().Add(2 * time.Minute); started.IsZero(); time.Sleep(50 * time.Millisecond) {
			got, err := c.GetSession(ctx, se.ID)
			if err == nil && got.State == airlock.SessionRunning && got.Node != "" && got.Node != victim.ID {
				sb, err := c.GetSandbox(ctx, got.SandboxID)
				if err == nil && sb.StartedAt != nil {
					started = *sb.StartedAt
				}
			}
			if time.Now().After(deadline) {
				b.Fatalf("session %s did not run elsewhere within 2 minutes: %+v %v", se.ID, got, err)
			}
		}
		b.StopTimer()
		l, err := c.ListNodes(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range l.Nodes {
			if n.ID == victim.ID && n.LastSeenAt != nil {
				fromBeat = append(fromBeat, started.Sub(*n.LastSeenAt))
			}
		}
		fromKill = append(fromKill, started.Sub(killed))
		_ = c.DeleteSession(ctx, se.ID)
		cl.Nodes[i] = testenv.StartNode(b, cl.Env, victim.ID, testenv.NodeOptions{DataDir: victim.DataDir, Process: true,
			ControlPlanes: []string{cl.Replicas[0].ClusterURL, cl.Replicas[1].ClusterURL}, SandboxAddresses: testenv.ClusterAddresses(i),
			S3: &cl.Options.S3})
		cl.WaitNodes(b, "up", victim.ID)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(fromKill, 0.5)), "p50_kill_ms")
	b.ReportMetric(ms(percentile(fromBeat, 0.5)), "p50_heartbeat_ms")
	b.ReportMetric(ms(slices.Max(fromBeat)), "max_heartbeat_ms")
}

// BenchmarkLeaderTakeover is issue 25's leader figure: two replicas (processes of their own) on
// PostgreSQL. Each iteration kills the replica that holds the leader's lease with SIGKILL and times
// until the other holds it; then the killed one starts again. Run with -benchtime 3x or so.
func BenchmarkLeaderTakeover(b *testing.B) {
	cl := testenv.StartCluster(b, 2, 0)
	ctx := context.Background()
	st, err := postgres.Open(ctx, cl.Options.PostgresDSN)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ids := make([]string, len(cl.Replicas))
	for i, r := range cl.Replicas {
		id, err := os.ReadFile(filepath.Join(r.DataDir, "replica-id"))
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = strings.TrimSpace(string(id))
	}
	leader := func() (string, bool) {
		l, err := st.GetLease(ctx, "cluster/leader")
		if err != nil || l.Expired(time.Now()) {
			return "", false
		}
		return l.Holder, true
	}
	var took []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		var was string
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if h, ok := leader(); ok && slices.Contains(ids, h) {
				was = h
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("no replica leads")
			}
		}
		// Kill it just after a renewal's worth of time has passed, at a random point of its cycle.
		time.Sleep(time.Duration(time.Now().UnixNano()%2000) * time.Millisecond)
		i := slices.Index(ids, was)
		b.StartTimer()
		killed := time.Now()
		cl.Replicas[i].Kill()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if h, ok := leader(); ok && h != was {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("no replica took over within a minute")
			}
		}
		took = append(took, time.Since(killed))
		b.StopTimer()
		cl.Replicas[i].Restart(b, cl.Options)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(took, 0.5)), "p50_ms")
	b.ReportMetric(ms(slices.Max(took)), "max_ms")
}
