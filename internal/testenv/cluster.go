package testenv

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testenv/pgtest"
	"github.com/airlockrun/airlock/internal/testenv/s3test"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// Cluster is control-plane replicas (airlock server) and nodes (airlock node run), each a process of its
// own, on a PostgreSQL server and an S3 server of the test's.
type Cluster struct {
	Replicas []*Replica
	// Clients are one client per replica, with the operator's first API key.
	Clients []*airlock.Client
	Nodes   []*Node
	// Env is the first replica's, for StartNode and the helpers that take one.
	Env *Env
	// Options are what the replicas share (StartReplica with them adds one).
	Options ReplicaOptions
}

// ClusterAddresses is the sandbox address range of the i-th node (from 0) of a Cluster: a /14 of its own
// inside 100.96.0.0/11.
func ClusterAddresses(i int) string { return fmt.Sprintf("100.%d.0.0/14", 96+4*i) }

// ClusterOptions shape a cluster StartClusterWith starts.
type ClusterOptions struct {
	// NodeDiskBytes, if set, gives each node a data directory on a file system of its own of that size
	// (NodeOptions.DiskBytes).
	NodeDiskBytes int64
	// ReplicaArgs are more flags for every replica (ReplicaOptions.Args).
	ReplicaArgs []string
}

// StartCluster starts replicas replicas and nodes nodes (node-1, node-2, …; each with its own state
// directory and ClusterAddresses range, joined through the first replica, reporting to all of them in
// turn) and waits until every node is up. It skips the test without sandboxes or PostgreSQL.
func StartCluster(t testing.TB, replicas, nodes int) *Cluster {
	t.Helper()
	return StartClusterWith(t, replicas, nodes, ClusterOptions{})
}

// StartClusterWith is StartCluster shaped by o.
func StartClusterWith(t testing.TB, replicas, nodes int, o ClusterOptions) *Cluster {
	t.Helper()
	RequireSandboxes(t)
	if !pgtest.Available() {
		t.Skip("needs PostgreSQL (scripts/install.sh installs it)")
	}
	if replicas < 1 || nodes < 0 || nodes > 8 {
		t.Fatalf("StartCluster(%d, %d): want at least one replica and at most 8 nodes", replicas, nodes)
	}
	c := &Cluster{Options: ReplicaOptions{PostgresDSN: pgtest.Start(t), S3: s3test.Start(t),
		MasterKeyFile: filepath.Join(t.TempDir(), "master.key"), KeyFile: filepath.Join(t.TempDir(), "api-key"), Args: o.ReplicaArgs}}
	var clusterURLs []string
	for i := range replicas {
		r := StartReplica(t, fmt.Sprintf("cp%d", i+1), c.Options)
		c.Replicas = append(c.Replicas, r)
		clusterURLs = append(clusterURLs, r.ClusterURL)
	}
	key := c.Options.APIKey(t)
	for _, r := range c.Replicas {
		c.Clients = append(c.Clients, airlock.New(r.URL, airlock.WithAPIKey(key)))
	}
	c.Env = &Env{URL: c.Replicas[0].URL, Client: c.Clients[0], ClusterURL: c.Replicas[0].ClusterURL, APIKey: key}
	var ids []string
	for i := range nodes {
		n := StartNode(t, c.Env, fmt.Sprintf("node-%d", i+1), NodeOptions{Process: true, ControlPlanes: clusterURLs,
			SandboxAddresses: ClusterAddresses(i), S3: &c.Options.S3, DiskBytes: o.NodeDiskBytes})
		c.Nodes = append(c.Nodes, n)
		ids = append(ids, n.ID)
	}
	c.WaitNodes(t, "up", ids...)
	return c
}

// WaitNodes waits up to 30 s until the first replica reports every one of ids in state (up, down, new).
func (c *Cluster) WaitNodes(t testing.TB, state string, ids ...string) {
	t.Helper()
	WaitNodes(t, c.Env, state, ids...)
}

// WaitNodes waits up to 30 s until e's control plane reports every one of ids in state (up, down, new).
func WaitNodes(t testing.TB, e *Env, state string, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l, err := e.Client.ListNodes(ctx)
		cancel()
		got := map[string]string{}
		if err == nil {
			for _, n := range l.Nodes {
				got[n.ID] = n.State
			}
		}
		all := err == nil
		for _, id := range ids {
			all = all && got[id] == state
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes %v not %s within 30s: %v %v", ids, state, got, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
