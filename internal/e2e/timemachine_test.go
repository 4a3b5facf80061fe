package e2e

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/faultinject"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// counterScript starts a process that keeps a counter in memory and appends each value to a file
// every second.
const counterScript = `mkdir -p /home/user/work && cd /home/user/work && setsid nohup python3 -c '
import time
i = 0
while True:
    i += 1
    with open("count.log", "a") as f:
        f.write("%d\n" % i)
    time.sleep(1)
' >/dev/null 2>&1 &`

// countLog reads the counter's file and checks that it counts 1, 2, 3… without a gap or a restart;
// it returns the last value.
func countLog(t *testing.T, e *testenv.Env, id string) int {
	t.Helper()
	lines := strings.Fields(sh(t, e, id, "cat /home/user/work/count.log").Stdout)
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("count.log line %d is %q: the counter did not continue from its file (%d lines)", i+1, l, len(lines))
		}
	}
	return len(lines)
}

// TestTimeMachineRollingRestore: a session with a 15 s rolling interval gets its rolling snapshots
// while a process counts; restoring to the third gives the process as it was then — its next value
// follows the one its file recorded at that snapshot — and the files as they were then; where the
// session was stays in its timeline as a branch.
func TestTimeMachineRollingRestore(t *testing.T) {
	testenv.RequireSandboxes(t)
	e := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t, 4*time.Minute)
	fifteen := 15
	se := newSession(t, e, airlock.CreateSessionRequest{IdleTimeoutSeconds: never(), RollingIntervalSeconds: &fifteen})
	sh(t, e, se.ID, counterScript)
	// A call that runs across the rolling interval is not cut off by a rolling snapshot: the snapshot
	// waits until it ended.
	longStart := time.Now()
	res, err := e.Client.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"bash", "-c", "sleep 17; echo done"}, TimeoutSeconds: 60})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "done" {
		t.Fatalf("a 17 s exec across the rolling interval: %+v %v", res, err)
	}
	longEnd := time.Now()
	if tl, err := e.Client.Timeline(ctx, se.ID); err == nil {
		for _, sn := range tl.Snapshots {
			if sn.Trigger == "rolling" && sn.CreatedAt.After(longStart) && sn.CreatedAt.Before(longEnd.Add(-time.Second)) {
				t.Errorf("rolling snapshot %s at %s, while the exec ran (%s to %s)", sn.ID, sn.CreatedAt, longStart, longEnd)
			}
		}
	}
	// Calls 20 ms apart while the rolling snapshots are taken: none is cut off (a checkpoint goes ahead
	// only while no call is in progress, and a call that meets it waits for it or is sent again).
	stopCalls := make(chan struct{})
	callsDone := make(chan struct{})
	stop := sync.OnceFunc(func() { close(stopCalls); <-callsDone })
	defer stop()
	calls, cut := 0, 0
	go func() {
		defer close(callsDone)
		for i := 0; ; i++ {
			select {
			case <-stopCalls:
				return
			case <-time.After(20 * time.Millisecond):
			}
			want := strconv.Itoa(i)
			res, err := e.Client.Exec(ctx, se.ID, airlock.ExecRequest{Cmd: []string{"echo", want}, TimeoutSeconds: 60})
			calls++
			if err != nil || strings.TrimSpace(res.Stdout) != want {
				cut++
				t.Errorf("call %d during rolling snapshots: %+v %v", i, res, err)
			}
		}
	}()
	start := time.Now()
	var rolls []airlock.Snapshot
	for {
		tl, err := e.Client.Timeline(ctx, se.ID)
		if err != nil {
			t.Fatal(err)
		}
		rolls = rolls[:0]
		for _, sn := range tl.Snapshots {
			if sn.Trigger == "rolling" && (sn.State == "uploading" || sn.State == "complete") {
				rolls = append(rolls, sn)
			}
		}
		if len(rolls) >= 3 {
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("%d rolling snapshots after %s; want 3", len(rolls), time.Since(start))
		}
		time.Sleep(time.Second)
	}
	stop()
	t.Logf("3 rolling snapshots after %s, %s apart; %d calls 20 ms apart meanwhile, %d cut off", time.Since(start).Round(time.Second),
		rolls[2].CreatedAt.Sub(rolls[1].CreatedAt).Round(time.Second), calls, cut)
	if calls < 100 {
		t.Errorf("only %d calls while the rolling snapshots were taken", calls)
	}
	// The loop counts the interval from its own clock reading at the round that took the snapshot, a
	// little before the snapshot's CreatedAt is stamped: two CreatedAts can be a few ms under 15 s apart.
	if d := rolls[2].CreatedAt.Sub(rolls[1].CreatedAt); d < 14*time.Second || d > 30*time.Second {
		t.Errorf("rolling snapshots %s apart; want the 15 s interval (give or take the loop's second and the checkpoint)", d)
	}
	third := rolls[2]
	// Files from snapshots, without restoring them: the first's count.log is a prefix of the third's,
	// and the diff between them shows it changed.
	firstLog, err := e.Client.ReadSnapshotFile(ctx, se.ID, rolls[0].ID, "/home/user/work/count.log")
	if err != nil {
		t.Fatal(err)
	}
	thirdLog, err := e.Client.ReadSnapshotFile(ctx, se.ID, third.ID, "/home/user/work/count.log")
	if err != nil {
		t.Fatal(err)
	}
	if len(firstLog) == 0 || len(thirdLog) <= len(firstLog) || !strings.HasPrefix(string(thirdLog), string(firstLog)) {
		t.Fatalf("count.log in the first snapshot %q, in the third %q", firstLog, thirdLog)
	}
	d, err := e.Client.DiffSnapshots(ctx, se.ID, rolls[0].ID, third.ID)
	if err != nil {
		t.Fatal(err)
	}
	changed := false
	for _, c := range d.Changes {
		if c.Path == "/home/user/work/count.log" && c.Kind == "changed" && c.NewSize == int64(len(thirdLog)) {
			changed = true
		}
	}
	if !changed {
		t.Errorf("diff of the first and third snapshots: %+v; want count.log changed", d.Changes)
	}
	fd, err := e.Client.DiffSnapshotFile(ctx, se.ID, rolls[0].ID, third.ID, "/home/user/work/count.log")
	if err != nil || fd.Binary || !strings.Contains(fd.Unified, "+"+strings.Fields(string(thirdLog))[len(strings.Fields(string(thirdLog)))-1]) {
		t.Errorf("unified diff of count.log: %+v %v", fd, err)
	}
	if l, err := e.Client.ListSnapshotFiles(ctx, se.ID, third.ID, "/home/user/work"); err != nil || len(l.Entries) != 1 || l.Entries[0].Name != "count.log" {
		t.Errorf("list /home/user/work in the third snapshot: %+v %v", l, err)
	}
	if _, err := e.Client.ReadSnapshotFile(ctx, se.ID, third.ID, "/home/user/../../etc/shadow"); err == nil {
		t.Error("a path with .. was read")
	}
	time.Sleep(3 * time.Second)
	before := countLog(t, e, se.ID)
	got, err := e.Client.RestoreSession(ctx, se.ID, airlock.RestoreSessionRequest{SnapshotID: third.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != airlock.SessionRunning || got.HeadSnapshotID != third.ID {
		t.Fatalf("restored: %+v", got)
	}
	at := countLog(t, e, se.ID)
	if at >= before {
		t.Fatalf("after the restore the file counts to %d, as far as before it (%d): files not as they were", at, before)
	}
	time.Sleep(3 * time.Second)
	later := countLog(t, e, se.ID) // contiguous: the process went on from the value it had then
	if later <= at {
		t.Fatalf("the counter did not go on after the restore: %d then %d", at, later)
	}
	t.Logf("before the restore the counter was at %d; the third snapshot had %d; it went on to %d", before, at, later)
	tl, err := e.Client.Timeline(ctx, se.ID)
	if err != nil {
		t.Fatal(err)
	}
	branch := false
	for _, sn := range tl.Snapshots {
		if sn.Trigger == "pause" && sn.CreatedAt.After(third.CreatedAt) {
			branch = true
		}
	}
	if !branch || tl.HeadSnapshotID != third.ID {
		t.Errorf("timeline %+v: want the pre-restore state kept as a branch and the head at %s", tl, third.ID)
	}
}

// TestPruneAndGCSurviveCrashes kills the server (SIGKILL) while it prunes snapshots and while it
// collects their chunks; after a restart every snapshot left still restores: none lost a chunk.
func TestPruneAndGCSurviveCrashes(t *testing.T) {
	testenv.RequireSandboxes(t)
	for _, point := range []string{"prune-record-deleted", "gc-chunk-deleted"} {
		t.Run(point, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "airlock-prune-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			addr := freeAddr(t)
			// Keep only what is younger than a second: every snapshot not pinned nor a head goes.
			keep := []string{"--keep-all", "1s", "--keep-hourly", "1s", "--keep-daily", "1s"}
			srv := startServerArgs(t, dir, addr, keep)
			t.Cleanup(func() { os.Remove(testenv.KeyFile(dir)) })
			key, err := os.ReadFile(testenv.KeyFile(dir))
			if err != nil {
				t.Fatal(err)
			}
			c := airlock.New(srv.url, airlock.WithAPIKey(strings.TrimSpace(string(key))))
			ctx := ctxT(t, 3*time.Minute)
			off := 0
			se, err := c.CreateSession(ctx, airlock.CreateSessionRequest{IdleTimeoutSeconds: never(), RollingIntervalSeconds: &off})
			if err != nil {
				t.Fatal(err)
			}
			e := &testenv.Env{URL: srv.url, Client: c, DataDir: dir}
			for i := 0; i < 4; i++ {
				sh(t, e, se.ID, "head -c 2000000 /dev/urandom > /home/user/blob"+strconv.Itoa(i))
				name := ""
				if i == 1 {
					name = "keep"
				}
				sn, err := c.SnapshotSession(ctx, se.ID, airlock.CreateSnapshotRequest{Name: name})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.WaitSnapshot(ctx, se.ID, sn.ID); err != nil {
					t.Fatal(err)
				}
			}
			stop(t, srv)
			upkeep := append(keep, "--prune-interval", "1s", "--gc-interval", "1s", "--gc-grace", "1ms")
			srv = startServerArgs(t, dir, addr, upkeep, faultinject.EnvVar+"="+point)
			done := make(chan error, 1)
			go func() { done <- srv.cmd.Wait() }()
			select {
			case werr := <-done:
				if werr == nil || !strings.Contains(werr.Error(), "killed") {
					t.Fatalf("server exit: %v; want killed at %s\n%s", werr, point, srv.log.String())
				}
			case <-time.After(90 * time.Second):
				_ = srv.cmd.Process.Kill()
				t.Fatalf("the server did not reach %s in 90s\n%s", point, srv.log.String())
			}
			srv = startServerArgs(t, dir, addr, keep)
			defer stop(t, srv)
			tl, err := c.Timeline(ctx, se.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(tl.Snapshots) == 0 {
				t.Fatal("no snapshot left")
			}
			for _, sn := range tl.Snapshots {
				if sn.State != "complete" {
					continue
				}
				got, err := c.RestoreSession(ctx, se.ID, airlock.RestoreSessionRequest{SnapshotID: sn.ID})
				if err != nil || got.State != airlock.SessionRunning {
					t.Fatalf("after a crash at %s, snapshot %s (%s) does not restore: %+v %v", point, sn.ID, sn.Trigger, got, err)
				}
			}
			t.Logf("crash at %s: %d snapshots left, each restores", point, len(tl.Snapshots))
			if err := c.DeleteSession(context.Background(), se.ID); err != nil {
				t.Errorf("delete: %v", err)
			}
		})
	}
}
