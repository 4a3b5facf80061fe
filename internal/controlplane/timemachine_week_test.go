//go:build !race

package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// This file is built only without the race detector, under which the simulated week takes almost six
// minutes (half a minute without): scripts/test.sh runs it in a second, race-free pass.

// TestRetentionSimulatedWeek: minute snapshots for a week, on a clock the test moves, pruned as the
// loop would (hourly here): what is left is exactly what the default retention keeps — all of the last
// hour, the newest of each of the 23 hours before, the newest of each of the 6 days before — plus the
// pinned one; collection leaves no chunk only deleted snapshots used; the oldest daily one restores.
func TestRetentionSimulatedWeek(t *testing.T) {
	// Ten thousand snapshots, each synced to disk several times: on a memory file system when there is
	// one (the code is the same; the disk's flushes are not what this tests).
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		t.Setenv("TMPDIR", "/dev/shm")
	}
	e := setupSessions(t)
	ctx := context.Background()
	// Start on an hour so that the expectation is simple to state.
	e.clk.mu.Lock()
	e.clk.t = time.Date(2026, 11, 1, 0, 0, 30, 0, time.UTC)
	e.clk.mu.Unlock()
	se := e.create(t, SessionRequest{RollingIntervalSeconds: 60})
	pinned, err := e.s.SnapshotSession(ctx, e.tenant, se.ID, "keep-me")
	if err != nil {
		t.Fatal(err)
	}
	e.s.rollSnapshots()
	const minutes = 7 * 24 * 60
	for i := 1; i <= minutes; i++ {
		e.clk.Add(time.Minute)
		e.n.addCPU(se.SandboxID, time.Second)
		e.s.rollSnapshots()
		if i%60 == 0 {
			settle(t, e.s)
			e.s.pruneSnapshots()
		}
	}
	settle(t, e.s)
	e.s.pruneSnapshots()
	now := e.clk.Now()
	all, err := e.s.sessionSnapshots(ctx, se)
	if err != nil {
		t.Fatal(err)
	}
	var kept []time.Time
	for _, sn := range all {
		if sn.ID == pinned.ID {
			continue
		}
		if sn.Trigger != store.TriggerRolling {
			t.Errorf("unexpected snapshot %s (%s)", sn.ID, sn.Trigger)
		}
		kept = append(kept, sn.CreatedAt)
	}
	// Expected, stated plainly: snapshots are at :00:30 of each minute.
	var want []time.Time
	for i := 1; i <= minutes; i++ {
		at := time.Date(2026, 11, 1, 0, 0, 30, 0, time.UTC).Add(time.Duration(i) * time.Minute)
		age := now.Sub(at)
		switch {
		case age < time.Hour:
			want = append(want, at)
		case age < 24*time.Hour && at.Minute() == 59:
			want = append(want, at)
		case age < 7*24*time.Hour && at.Hour() == 23 && at.Minute() == 59:
			want = append(want, at)
		}
	}
	if len(kept) != len(want) {
		t.Fatalf("kept %d rolling snapshots; want %d (60 + 23 + 6)", len(kept), len(want))
	}
	for i := range want {
		if !kept[i].Equal(want[i]) {
			t.Fatalf("kept[%d] taken at %s; want %s", i, kept[i], want[i])
		}
	}
	if _, err := e.st.GetSnapshot(ctx, e.tenant, pinned.ID); err != nil {
		t.Errorf("pinned snapshot: %v", err)
	}
	// Collection: every chunk left is one a remaining snapshot uses.
	e.s.collectSnapshots(0)
	referenced := map[string]bool{}
	infos, err := e.s.snapshotBook.snapshots.List(ctx, e.tenant)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != len(all) {
		t.Errorf("the snapshot store holds %d snapshots; %d records remain", len(infos), len(all))
	}
	for _, in := range infos {
		m, err := e.s.snapshotBook.snapshots.Manifest(ctx, e.tenant, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				referenced[c.ID] = true
			}
		}
	}
	stored := 0
	_ = filepath.WalkDir(e.blobs, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(p, "/chunks/") {
			stored++
		}
		return nil
	})
	if stored != len(referenced) {
		t.Errorf("%d chunks stored, %d referenced: collection left orphans", stored, len(referenced))
	}
	// The oldest daily snapshot still restores.
	oldest := all[0]
	if oldest.ID == pinned.ID {
		oldest = all[1]
	}
	got, err := e.s.RestoreSession(ctx, e.tenant, se.ID, RestoreRequest{SnapshotID: oldest.ID})
	if err != nil || got.State != store.SessionRunning || got.HeadSnapshotID != oldest.ID {
		t.Fatalf("restore to the oldest daily snapshot %s: %+v %v", oldest.ID, got, err)
	}
	settle(t, e.s)
}
