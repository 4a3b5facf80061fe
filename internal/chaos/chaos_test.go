package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/internal/testenv/pgtest"
	"github.com/airlockrun/airlock/sdk/go/airlock"
	"golang.org/x/sys/unix"
)

// The chaos test's knobs, from the environment (scripts/chaos.sh sets them).
const (
	// chaosSeedEnv replays a run: the test prints the seed it used.
	chaosSeedEnv = "AIRLOCK_CHAOS_SEED"
	// chaosFaultsEnv is how many faults a run injects (default chaosFaults).
	chaosFaultsEnv = "AIRLOCK_CHAOS_FAULTS"
	// chaosKindsEnv narrows the faults drawn to a comma-separated list of chaosFaultKinds ("disk,node").
	chaosKindsEnv = "AIRLOCK_CHAOS_KINDS"
	// chaosSoakEnv, a duration ("30m"), runs faults until it has passed (soak mode) instead.
	chaosSoakEnv = "AIRLOCK_CHAOS_SOAK"
)

const (
	chaosFaults   = 20
	chaosSessions = 3
	// chaosSettle is how long every session may take to be running or paused again after a fault: a
	// node given up after 12 s, a replica's operation lease lapsing after 10 s, and a resume.
	chaosSettle = 150 * time.Second
	// chaosKeepAll is the replicas' --keep-all: younger snapshots are all kept.
	chaosKeepAll = 2 * time.Minute
	// chaosNodeDisk is the size of each node's file system of its own, which the disk fault fills;
	// chaosDiskMB the disk of each session's sandbox, allocated on it (a tmpfs: in memory) up front.
	chaosNodeDisk = 6 << 30
	chaosDiskMB   = 256
	// crashResumes and crashWindow are the control plane's crash budget (controlplane/failover.go):
	// a session whose sandbox stops by itself that often that soon fails.
	crashResumes = 3
	crashWindow  = 10 * time.Minute
)

// The faults and the operations they hit.
var (
	chaosFaultKinds = []string{"node", "replica", "runsc", "postgres", "s3", "disk"}
	chaosOps        = []string{"pause", "resume", "snapshot", "fork", "restore", "none"}
)

// TestChaos: a small cluster (PostgreSQL, versitygw, two replicas, two nodes, all real processes) runs
// sessions that count in memory and append to a file, while a seeded random schedule kills a node, a
// replica or a sandbox's runsc process with SIGKILL, crashes PostgreSQL or versitygw and starts them
// again, each at a random point of a pause, resume, snapshot, fork or restore, or fills a node's disk
// for a while as one starts. Rolling snapshots (every 15 s), retention (every 20 s, deleting what is
// older than chaosKeepAll and not pinned) and GC (every 30 s) run meanwhile. Throughout, no session
// may have two copies running at once (runsc's own state, on both nodes, polled); after each fault every
// session must be running or paused again within chaosSettle, with its work at least where its last
// acknowledged snapshot had it. At the end every acknowledged snapshot must decrypt and restore, and
// the audit chain must verify. The seed is printed; AIRLOCK_CHAOS_SEED replays a run.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos test runs a cluster for minutes")
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv(chaosSeedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", chaosSeedEnv, v, err)
		}
	}
	faults := chaosFaults
	if v := os.Getenv(chaosFaultsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", chaosFaultsEnv, v)
		}
		faults = n
	}
	var soak time.Duration
	if v := os.Getenv(chaosSoakEnv); v != "" {
		var err error
		if soak, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s=%q: %v", chaosSoakEnv, v, err)
		}
	}
	kinds := chaosFaultKinds
	if v := os.Getenv(chaosKindsEnv); v != "" {
		kinds = strings.Split(v, ",")
		for _, k := range kinds {
			if !slices.Contains(chaosFaultKinds, k) {
				t.Fatalf("%s=%q: %q is not one of %v", chaosKindsEnv, v, k, chaosFaultKinds)
			}
		}
	}
	t.Logf("chaos seed %d (%s=%d replays this run)", seed, chaosSeedEnv, seed)

	// Retention and GC run often, so that faults land in their runs too: retention deletes the
	// snapshots past chaosKeepAll that nothing protects (the acknowledged ones are pinned).
	cl := testenv.StartClusterWith(t, 2, 2, testenv.ClusterOptions{NodeDiskBytes: chaosNodeDisk,
		ReplicaArgs: []string{"--prune-interval", "20s", "--gc-interval", "30s", "--keep-all", chaosKeepAll.String()}})
	c := &chaos{t: t, cl: cl, rng: rand.New(rand.NewPCG(uint64(seed), 0)), sbSession: map[string]string{}, kills: map[string][]time.Time{},
		acked: map[string]ackedSnapshot{}, floor: map[string]int{}, faultCount: map[string]int{}, kinds: kinds}
	for _, n := range cl.Nodes {
		c.runscRoots = append(c.runscRoots, filepath.Join(n.DataDir, "runtime", "runsc"))
	}
	ctx := ctxT(t, 2*time.Hour)
	for range chaosSessions {
		se, err := c.client().CreateSession(ctx, airlock.CreateSessionRequest{RollingIntervalSeconds: new(15), DiskMB: chaosDiskMB})
		if err != nil {
			t.Fatal(err)
		}
		c.sessions = append(c.sessions, se.ID)
		if _, err := c.client().Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c",
			"nohup setsid bash -c 'i=0; while :; do i=$((i+1)); echo $i >> /home/user/log; sleep 0.2; done' >/dev/null 2>&1 &"}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, id := range c.sessions {
			_ = c.client().DeleteSession(context.Background(), id)
		}
	})
	// A session survives losing its node from its latest stored snapshot: each has one before the
	// first fault.
	for _, se := range c.sessions {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if n, err := c.count(ctx, c.client(), se); err == nil && n > 0 {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("session %s: its work did not start: %v", se, err)
			}
		}
		if after := c.snapshotOp(ctx, c.client(), se); after != nil {
			after()
		}
		if c.floor[se] == 0 {
			t.Fatalf("session %s: its first snapshot was not stored", se)
		}
	}
	stop := c.watchTwice()
	start := time.Now()
	for i := 0; ; i++ {
		if soak > 0 && time.Since(start) >= soak || soak == 0 && i >= faults {
			break
		}
		c.round(ctx, i)
		if t.Failed() {
			break
		}
	}
	stop()
	c.mu.Lock()
	twice := slices.Clone(c.twice)
	c.mu.Unlock()
	for _, msg := range twice {
		t.Errorf("twice: %s", msg)
	}
	if !t.Failed() {
		c.checkSnapshots(ctx)
		c.checkAudit()
	}
	c.report(seed, time.Since(start))
}

// ackedSnapshot is a snapshot the API said the store holds, and how far its session's work had got at
// least when it was taken.
type ackedSnapshot struct {
	session string
	count   int
}

type chaos struct {
	t          *testing.T
	cl         *testenv.Cluster
	rng        *rand.Rand
	runscRoots []string
	sessions   []string
	kinds      []string // the faults drawn from

	mu sync.Mutex
	// sbSession maps the sandboxes seen to their sessions; twice holds what the watcher saw run twice;
	// both guarded by mu.
	sbSession map[string]string
	twice     []string

	// Owned by the test's goroutine.
	acked      map[string]ackedSnapshot
	floor      map[string]int
	faultCount map[string]int
	kills      map[string][]time.Time // when a sandbox of each session was killed
	settles    []time.Duration
	failovers  []time.Duration
	lost       int
}

// client returns the client of a replica that runs.
func (c *chaos) client() *airlock.Client {
	for i, r := range c.cl.Replicas {
		select {
		case <-r.Done():
		default:
			return c.cl.Clients[i]
		}
	}
	c.t.Fatal("no replica runs")
	return nil
}

// round runs one operation and one fault at a random point of it, then waits until the cluster settled
// and checks that nothing was lost.
func (c *chaos) round(ctx context.Context, i int) {
	t := c.t
	op := chaosOps[c.rng.IntN(len(chaosOps))]
	fault := c.kinds[c.rng.IntN(len(c.kinds))]
	delay := time.Duration(c.rng.IntN(1500)) * time.Millisecond
	run := c.op(ctx, op)
	opDone := make(chan func(), 1)
	if fault == "disk" {
		// A disk stays full for a while: the operation starts on it full and ends as it may.
		t.Logf("round %d: %s, on a disk full since %s", i, op, delay)
		free := c.fillNodeDisk()
		time.Sleep(delay)
		go func() { opDone <- run() }() // owner: round; what it returns runs on the test's goroutine
		free()
	} else {
		t.Logf("round %d: %s, with %s %s into it", i, op, fault, delay)
		go func() { opDone <- run() }() // owner: round; what it returns runs on the test's goroutine
		time.Sleep(delay)
		c.inject(ctx, fault)
	}
	c.faultCount[fault]++
	var after func()
	select {
	case after = <-opDone:
	case <-time.After(5 * time.Minute):
		t.Fatalf("round %d: the %s did not return within 5 minutes of the %s", i, op, fault)
	}
	took := c.settle(ctx, i)
	c.settles = append(c.settles, took)
	if after != nil {
		after()
	}
	c.checkWork(ctx, i)
}

// op prepares operation name on a random session (on the test's goroutine: it draws from the seeded
// source and reads the test's state) and returns it to run (on a goroutine of its own: it touches only
// what it was given), which returns what must follow it on the test's goroutine once the cluster
// settled (nil: nothing). Its errors are not the test's: a fault may well fail it.
func (c *chaos) op(ctx context.Context, name string) func() func() {
	cl := c.client()
	se := c.sessions[c.rng.IntN(len(c.sessions))]
	logf := c.t.Logf
	switch name {
	case "pause":
		return func() func() {
			octx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			if _, err := cl.PauseSession(octx, se); err != nil {
				logf("  pause %s: %v", se, err)
			}
			return nil
		}
	case "resume":
		return func() func() {
			octx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			if _, err := cl.ResumeSession(octx, se); err != nil {
				logf("  resume %s: %v", se, err)
			}
			return nil
		}
	case "snapshot":
		return func() func() { return c.snapshotOp(ctx, cl, se) }
	case "fork":
		return func() func() {
			octx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			res, err := cl.ForkSession(octx, se, airlock.ForkSessionRequest{Count: 1})
			if err != nil {
				logf("  fork %s: %v", se, err)
				return nil
			}
			return func() {
				for _, f := range res.Sessions {
					c.mu.Lock()
					c.sessions = append(c.sessions, f.ID) // checked for a round, then deleted (checkWork)
					c.mu.Unlock()
				}
			}
		}
	case "restore":
		var targets []string
		for id, a := range c.acked {
			if a.session == se {
				targets = append(targets, id)
			}
		}
		if len(targets) == 0 {
			return func() func() { return nil }
		}
		sort.Strings(targets)
		target := targets[c.rng.IntN(len(targets))]
		// Its work goes back to where the target had it, whether or not the call returns.
		c.floor[se] = min(c.floor[se], c.acked[target].count)
		return func() func() {
			octx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			if _, err := cl.RestoreSession(octx, se, airlock.RestoreSessionRequest{SnapshotID: target}); err != nil {
				logf("  restore %s to %s: %v", se, target, err)
			}
			return nil
		}
	}
	return func() func() { return nil }
}

// snapshotOp snapshots se and returns what acknowledges the snapshot once the store holds it.
func (c *chaos) snapshotOp(ctx context.Context, cl *airlock.Client, se string) func() {
	octx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	n, err := c.count(octx, cl, se)
	if err != nil {
		c.t.Logf("  snapshot %s: count: %v", se, err)
		return nil
	}
	sn, err := cl.SnapshotSession(octx, se, airlock.CreateSnapshotRequest{})
	if err != nil {
		c.t.Logf("  snapshot %s: %v", se, err)
		return nil
	}
	// Pinned, so that retention keeps it (it cannot delete it for chaosKeepAll).
	pinned := true
	for try := 0; try < 20; try++ {
		if _, err = cl.UpdateSnapshot(octx, se, sn.ID, airlock.UpdateSnapshotRequest{Pinned: &pinned}); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		c.t.Logf("  snapshot %s of %s not pinned: %v", sn.ID, se, err)
		return nil
	}
	return func() {
		// Acknowledged once the store holds it (what a failover restores from).
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		got, err := c.client().WaitSnapshot(wctx, se, sn.ID)
		if err != nil || got.State != "complete" {
			c.t.Logf("  snapshot %s of %s not stored: %v", sn.ID, se, err)
			return
		}
		c.acked[sn.ID] = ackedSnapshot{session: se, count: n}
		// The session's work must be at least this far only if it goes on from this snapshot: one
		// stored after its node went away (the node came back) was not there for the failover, which
		// took the newest stored then; it stays restorable (checkSnapshots).
		if c.descends(ctx, se, sn.ID) {
			c.floor[se] = max(c.floor[se], n)
		}
	}
}

// descends reports whether session se goes on from snapshot id: id is its head or an ancestor of it.
func (c *chaos) descends(ctx context.Context, se, id string) bool {
	cl := c.client()
	got, err := cl.GetSession(ctx, se)
	if err != nil {
		return false
	}
	for cur, n := got.HeadSnapshotID, 0; cur != "" && n < 1000; n++ {
		if cur == id {
			return true
		}
		sn, err := cl.GetSnapshot(ctx, se, cur)
		if err != nil {
			return false
		}
		cur = sn.ParentID
	}
	return false
}

// inject injects fault kind.
func (c *chaos) inject(ctx context.Context, kind string) {
	t := c.t
	switch kind {
	case "node":
		i := c.rng.IntN(len(c.cl.Nodes))
		n := c.cl.Nodes[i]
		onIt := c.sessionsOn(ctx, n.ID)
		// Back within its sandboxes' lease (it takes them back), or after it was given up (its sessions
		// run elsewhere by then, and what it left is destroyed).
		down := time.Duration(1+c.rng.IntN(7)) * time.Second
		if c.rng.IntN(2) == 0 {
			down = time.Duration(14+c.rng.IntN(5)) * time.Second
		}
		t.Logf("  kill -9 node %s (sessions %v), back after %s", n.ID, onIt, down)
		killed := time.Now()
		n.Kill()
		time.Sleep(down)
		if down > 13*time.Second {
			// Given up: its sessions ran on the other node; how soon is a failover's time.
			for _, se := range onIt {
				if d, ok := c.runningElsewhere(ctx, se, n.ID, killed); ok {
					c.failovers = append(c.failovers, d)
				}
			}
		}
		c.cl.Nodes[i] = testenv.StartNode(t, c.cl.Env, n.ID, testenv.NodeOptions{DataDir: n.DataDir, Process: true,
			ControlPlanes: c.clusterURLs(), SandboxAddresses: testenv.ClusterAddresses(i), S3: &c.cl.Options.S3})
	case "replica":
		alive := 0
		for _, r := range c.cl.Replicas {
			select {
			case <-r.Done():
			default:
				alive++
			}
		}
		if alive < len(c.cl.Replicas) {
			return
		}
		r := c.cl.Replicas[c.rng.IntN(len(c.cl.Replicas))]
		down := time.Duration(500+c.rng.IntN(4500)) * time.Millisecond
		t.Logf("  kill -9 replica %s, back after %s", r.URL, down)
		r.Kill()
		time.Sleep(down)
		r.Restart(t, c.cl.Options)
	case "runsc":
		pids := c.runscSandboxes()
		if len(pids) == 0 {
			t.Logf("  no runsc sandbox to kill")
			return
		}
		// A session whose sandbox stops by itself crashResumes times within crashWindow fails rather
		// than resume again (controlplane/failover.go: a crash loop), as it should; so sessions killed
		// that often lately are spared.
		ids := make([]string, 0, len(pids))
		for id := range pids {
			if se := c.sessionOf(id); se == "" || c.recentKills(se) < crashResumes {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			t.Logf("  no runsc sandbox to kill (of sessions not killed %d times in %s)", crashResumes, crashWindow)
			return
		}
		sort.Strings(ids)
		id := ids[c.rng.IntN(len(ids))]
		t.Logf("  kill -9 runsc-sandbox of %s (pid %d)", id, pids[id])
		if se := c.sessionOf(id); se != "" {
			c.kills[se] = append(c.kills[se], time.Now())
		}
		_ = syscall.Kill(pids[id], syscall.SIGKILL)
	case "postgres":
		t.Logf("  crash PostgreSQL and start it again")
		pgtest.Restart(t)
	case "s3":
		t.Logf("  kill -9 versitygw and start it again")
		c.cl.Options.S3.Restart(t)
	}
}

// fillNodeDisk fills a random node's disk (its data directory's file system) and returns what waits a
// random while, then frees it.
func (c *chaos) fillNodeDisk() (free func()) {
	t := c.t
	n := c.cl.Nodes[c.rng.IntN(len(c.cl.Nodes))]
	hold := time.Duration(2000+c.rng.IntN(8000)) * time.Millisecond
	filled, err := fillDisk(n.DataDir)
	if err != nil {
		t.Fatalf("fill node %s's disk: %v", n.ID, err)
	}
	t.Logf("  node %s's disk filled (%d MiB more), for %s", n.ID, filled>>20, hold)
	return func() {
		time.Sleep(hold)
		if err := os.Remove(filepath.Join(n.DataDir, chaosFiller)); err != nil {
			t.Fatal(err)
		}
	}
}

// chaosFiller is the file in a node's data directory that fills its file system.
const chaosFiller = "chaos-filler"

// fillDisk fills the file system of dir with a file (chaosFiller) until not a page is left, and reports
// how many bytes that took.
func fillDisk(dir string) (int64, error) {
	f, err := os.OpenFile(filepath.Join(dir, chaosFiller), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	for chunk := int64(1 << 40); chunk >= 4096; {
		var st unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
			return total, err
		}
		chunk = min(chunk, int64(st.Bavail)*st.Bsize)
		if chunk < 4096 {
			break
		}
		switch err := unix.Fallocate(int(f.Fd()), 0, total, chunk); {
		case errors.Is(err, unix.ENOSPC): // the node took some meanwhile: a smaller piece
			chunk /= 2
		case err != nil:
			return total, err
		default:
			total += chunk
		}
	}
	return total, nil
}

func (c *chaos) clusterURLs() []string {
	var out []string
	for _, r := range c.cl.Replicas {
		out = append(out, r.ClusterURL)
	}
	return out
}

// sessionsOn lists the sessions of the test that run on node id now.
func (c *chaos) sessionsOn(ctx context.Context, id string) []string {
	var out []string
	for _, se := range c.snapshotSessions() {
		got, err := c.client().GetSession(ctx, se)
		if err == nil && got.State == airlock.SessionRunning && got.Node == id {
			out = append(out, se)
		}
	}
	return out
}

func (c *chaos) snapshotSessions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sessions)
}

// runningElsewhere reports when, after since, session se ran on a node other than gone (from its
// sandbox's creation time), if it does now.
func (c *chaos) runningElsewhere(ctx context.Context, se, gone string, since time.Time) (time.Duration, bool) {
	got, err := c.client().GetSession(ctx, se)
	if err != nil || got.State != airlock.SessionRunning || got.Node == gone || got.SandboxID == "" {
		return 0, false
	}
	sb, err := c.client().GetSandbox(ctx, got.SandboxID)
	if err != nil || sb.StartedAt == nil || sb.StartedAt.Before(since) {
		return 0, false
	}
	return sb.StartedAt.Sub(since), true
}

// settle waits until every session is running (its sandbox answers) or paused, and reports how long it
// took. A session failed is lost; one still between states after chaosSettle is stuck.
func (c *chaos) settle(ctx context.Context, round int) time.Duration {
	t0 := time.Now()
	for {
		pending := map[string]string{}
		for _, se := range c.snapshotSessions() {
			got, err := c.client().GetSession(ctx, se)
			if err != nil {
				pending[se] = err.Error()
				continue
			}
			switch got.State {
			case airlock.SessionRunning:
				// Running means its sandbox answers (one whose runsc was just killed may not be
				// reported gone yet).
				ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.client().Exec(ectx, se, airlock.ExecRequest{Cmd: []string{"true"}})
				cancel()
				if err != nil {
					pending[se] = "running, but: " + err.Error()
				}
			case airlock.SessionPaused:
			case airlock.SessionFailed:
				if !slices.Contains(c.sessions[:chaosSessions], se) {
					// A fork whose node was lost before its first snapshot was stored: it had no
					// acknowledged state to lose (the API said "uploading").
					c.t.Logf("  fork %s failed: %s", se, got.Reason)
					continue
				}
				c.lost++
				c.t.Fatalf("round %d: session %s is lost: failed (%s)", round, se, got.Reason)
			default:
				pending[se] = got.State + " " + got.Reason
			}
		}
		if len(pending) == 0 {
			return time.Since(t0)
		}
		if time.Since(t0) > chaosSettle {
			c.t.Fatalf("round %d: sessions not settled within %s: %v", round, chaosSettle, pending)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkWork checks each running session's work is at least where its last acknowledged snapshot had it
// and goes on; forks made this round are then deleted.
func (c *chaos) checkWork(ctx context.Context, round int) {
	for _, se := range c.snapshotSessions() {
		cl := c.client()
		got, err := cl.GetSession(ctx, se)
		if err != nil || got.State != airlock.SessionRunning {
			continue
		}
		n, err := c.count(ctx, cl, se)
		if err != nil {
			c.t.Errorf("round %d: session %s: read its work: %v", round, se, err)
			continue
		}
		if n < c.floor[se] {
			c.lost++
			c.t.Errorf("round %d: session %s's work is at %d, behind its acknowledged snapshot's %d: lost", round, se, n, c.floor[se])
		}
		if !slices.Contains(c.sessions[:chaosSessions], se) {
			continue // a fork: its own work goes on from the fork's point; checked to run below
		}
		time.Sleep(500 * time.Millisecond)
		if m, err := c.count(ctx, cl, se); err != nil || m <= n {
			// A failover that began meanwhile (its node was given up late: a restart slowed by the
			// fault) moved the work to a new sandbox, from its latest snapshot: the next round checks it
			// there, and the floor above that nothing acknowledged was lost.
			if now, gerr := cl.GetSession(ctx, se); gerr == nil && (now.SandboxID != got.SandboxID || now.State != airlock.SessionRunning) {
				c.t.Logf("round %d: session %s moved while its work was read (%s, sandbox %s then %s)", round, se, now.State, got.SandboxID, now.SandboxID)
				continue
			}
			c.t.Errorf("round %d: session %s's work does not go on: %d then %d (%v)", round, se, n, m, err)
		}
	}
	// Forks have been checked: they go.
	c.mu.Lock()
	forks := slices.Clone(c.sessions[chaosSessions:])
	c.sessions = c.sessions[:chaosSessions]
	c.mu.Unlock()
	for _, f := range forks {
		if err := c.client().DeleteSession(ctx, f); err != nil {
			c.t.Logf("delete fork %s: %v", f, err)
		}
	}
}

// count reads how far session se's work got: the last line of its log.
func (c *chaos) count(ctx context.Context, cl *airlock.Client, se string) (int, error) {
	ectx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := cl.Exec(ectx, se, airlock.ExecRequest{Cmd: []string{"tail", "-n", "1", "/home/user/log"}})
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(res.Stdout))
}

// recentKills counts the runsc kills of session se's sandboxes within crashWindow.
func (c *chaos) recentKills(se string) int {
	n := 0
	for _, t := range c.kills[se] {
		if time.Since(t) < crashWindow {
			n++
		}
	}
	return n
}

// runscSandboxes returns the runsc sandbox processes of the cluster's nodes, by sandbox ID.
func (c *chaos) runscSandboxes() map[string]int {
	out := map[string]int{}
	for _, n := range c.cl.Nodes {
		maps.Copy(out, testenv.RunscSandboxes(n.DataDir))
	}
	return out
}

// watchTwice polls runsc's state of every container on both nodes, and records any moment in which one
// session has two containers running. It returns what stops it.
func (c *chaos) watchTwice() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owner: TestChaos; ends with stop
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(300 * time.Millisecond):
			}
			running := map[string][]string{} // session → its sandboxes running
			for _, root := range c.runscRoots {
				out, err := exec.Command("runsc", "--root", root, "list", "--format=json").Output()
				if err != nil {
					continue // no root yet, or a container being made
				}
				var cs []struct {
					ID     string `json:"id"`
					Status string `json:"status"`
				}
				if json.Unmarshal(out, &cs) != nil {
					continue
				}
				for _, ct := range cs {
					if ct.Status != "running" {
						continue
					}
					if se := c.sessionOf(ct.ID); se != "" {
						running[se] = append(running[se], ct.ID+"@"+filepath.Base(filepath.Dir(filepath.Dir(root))))
					}
				}
			}
			for se, sbs := range running {
				if len(sbs) > 1 {
					c.mu.Lock()
					c.twice = append(c.twice, fmt.Sprintf("%s: session %s runs in %v", time.Now().Format(time.RFC3339Nano), se, sbs))
					c.mu.Unlock()
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// sessionOf returns the session sandbox id runs, asking the API about sandboxes not seen before.
func (c *chaos) sessionOf(id string) string {
	c.mu.Lock()
	se, ok := c.sbSession[id]
	c.mu.Unlock()
	if ok {
		return se
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Any replica that answers (the watcher does not read which run: the test restarts them).
	var sb *airlock.Sandbox
	var err error
	for _, cl := range c.cl.Clients {
		if sb, err = cl.GetSandbox(ctx, id); err == nil {
			break
		}
	}
	if err != nil {
		return ""
	}
	se = sb.Metadata["airlock.session"]
	c.mu.Lock()
	c.sbSession[id] = se
	c.mu.Unlock()
	return se
}

// checkSnapshots checks every acknowledged snapshot still there decrypts (its work file is read from
// it) and that a few restore (a fork of each boots and runs).
func (c *chaos) checkSnapshots(ctx context.Context) {
	ids := make([]string, 0, len(c.acked))
	for id := range c.acked {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		a := c.acked[id]
		b, err := c.client().ReadSnapshotFile(ctx, a.session, id, "/home/user/log")
		if err != nil {
			c.t.Errorf("acknowledged snapshot %s of %s: read its work: %v", id, a.session, err)
			continue
		}
		lines := strings.Fields(string(b))
		if n, err := strconv.Atoi(lines[len(lines)-1]); err != nil || n < a.count {
			c.t.Errorf("acknowledged snapshot %s of %s holds work %v; want at least %d", id, a.session, lines[len(lines)-1:], a.count)
		}
	}
	c.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids[:min(3, len(ids))] {
		a := c.acked[id]
		res, err := c.client().ForkSession(ctx, a.session, airlock.ForkSessionRequest{Count: 1, SnapshotID: id})
		if err != nil {
			c.t.Errorf("restore acknowledged snapshot %s of %s: %v", id, a.session, err)
			continue
		}
		for _, f := range res.Sessions {
			if n, err := c.count(ctx, c.client(), f.ID); err != nil || n < a.count {
				c.t.Errorf("fork %s of snapshot %s: work %d (%v); want at least %d", f.ID, id, n, err, a.count)
			}
			_ = c.client().DeleteSession(ctx, f.ID)
		}
	}
	c.t.Logf("acknowledged snapshots: %d read back, %d restored", len(ids), min(3, len(ids)))
}

// checkAudit verifies the operator's audit chain through the CLI.
func (c *chaos) checkAudit() {
	code, out, errOut := runCLI("--url", c.cl.Replicas[0].URL, "--api-key", c.cl.Env.APIKey, "audit", "verify")
	if code != 0 {
		c.t.Errorf("audit verify: exit %d: %s %s", code, out, errOut)
	}
}

// report logs the run's figures: the faults, the settle times and the failovers.
func (c *chaos) report(seed int64, took time.Duration) {
	med := func(ds []time.Duration) (time.Duration, time.Duration) {
		if len(ds) == 0 {
			return 0, 0
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2], s[len(s)-1]
	}
	sp50, smax := med(c.settles)
	fp50, fmax := med(c.failovers)
	c.mu.Lock()
	twice := len(c.twice)
	c.mu.Unlock()
	c.t.Logf("chaos seed %d: %d faults %v in %s; settle p50 %s max %s; failovers %d, p50 %s max %s; %d acknowledged snapshots; lost %d, twice %d",
		seed, len(c.settles), c.faultCount, took.Round(time.Second), sp50.Round(10*time.Millisecond), smax.Round(10*time.Millisecond),
		len(c.failovers), fp50.Round(10*time.Millisecond), fmax.Round(10*time.Millisecond), len(c.acked), c.lost, twice)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), args, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}
