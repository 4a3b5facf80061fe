package flowlog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway"
)

// TestSweep: flow files older than their sandbox's retention (its own, remembered beside the files,
// else the log's default) are deleted, each file on its own; a sandbox's next flow starts a new file;
// without a retention, flows are kept.
func TestSweep(t *testing.T) {
	const sb3 = "sb_cccccccccccccccccccccccccc"
	l, dir := openLog(t)
	ctx := context.Background()
	now := time.Now()
	for _, id := range []string{sb1, sb2, sb3} {
		l.Record(flow(id, 1, gateway.DecisionAllow, "api.example.com", "203.0.113.2"))
	}
	if err := l.SetRetention(sb1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := l.SetRetention(sb3, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	age := func(id, suffix string, d time.Duration) {
		t.Helper()
		if err := os.Chtimes(filepath.Join(dir, id+suffix), now.Add(-d), now.Add(-d)); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		_, err := os.Lstat(filepath.Join(dir, name))
		return err == nil
	}
	count := func(id string) int {
		t.Helper()
		got, err := l.Read(ctx, id, Filter{})
		if err != nil {
			t.Fatalf("Read(%s): %v", id, err)
		}
		return len(got)
	}
	age(sb1, ".jsonl", 2*time.Hour)
	age(sb2, ".jsonl", 100*time.Hour)
	age(sb3, ".jsonl", 90*time.Minute)

	n, err := l.Sweep(now)
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 (sb1's file, older than its hour)", n, err)
	}
	if count(sb1) != 0 || count(sb2) != 1 || count(sb3) != 1 {
		t.Errorf("after the sweep, flows: sb1 %d, sb2 %d, sb3 %d; want 0, 1, 1", count(sb1), count(sb2), count(sb3))
	}
	if exists(sb1+".jsonl"+keepSuffix) || !exists(sb3+".jsonl"+keepSuffix) {
		t.Error("the retention's file of a sandbox with no flows left stayed, or another's went")
	}
	// sb1's file was open for appending: its next flow starts a new one.
	l.Record(flow(sb1, 2, gateway.DecisionAllow, "api.example.com", "203.0.113.2"))
	if count(sb1) != 1 {
		t.Errorf("after a flow recorded past the sweep, sb1 has %d flows; want 1", count(sb1))
	}

	// The default applies to sandboxes without their own: sb2's 100 hours.
	l.SetDefaultRetention(50 * time.Hour)
	if n, err := l.Sweep(now); err != nil || n != 1 || count(sb2) != 0 {
		t.Errorf("Sweep with a 50h default = %d, %v (sb2 has %d flows); want sb2's file deleted", n, err, count(sb2))
	}

	// A rotated file goes on its own when older; the current one stays.
	if err := os.WriteFile(filepath.Join(dir, sb3+".jsonl.1"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	age(sb3, ".jsonl.1", 3*time.Hour)
	age(sb3, ".jsonl", time.Minute)
	if n, err := l.Sweep(now); err != nil || n != 1 || exists(sb3+".jsonl.1") || !exists(sb3+".jsonl") {
		t.Errorf("Sweep of an old rotated file = %d, %v; want it alone deleted", n, err)
	}

	// Zero takes the default again (its file goes); a bad ID is refused.
	if err := l.SetRetention(sb3, 0); err != nil || exists(sb3+".jsonl"+keepSuffix) {
		t.Errorf("SetRetention(0) = %v; want the retention's file gone", err)
	}
	if err := l.SetRetention("../x", time.Hour); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("SetRetention(../x) = %v; want invalid argument", err)
	}
	// Without any retention, nothing goes.
	l.SetDefaultRetention(0)
	age(sb3, ".jsonl", 1000*time.Hour)
	if n, err := l.Sweep(now); err != nil || n != 0 {
		t.Errorf("Sweep with no retention = %d, %v; want 0", n, err)
	}
}
