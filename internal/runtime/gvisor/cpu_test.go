package gvisor_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/gvisor"
)

// TestCPULimitHolds: a sandbox boots and is restored with its CPU share over a long period, and is
// checkpointed with its quota lifted (see cgroups.go); each leaves the sandbox with its own share again,
// over the usual 100 ms period: a sandbox of half a core, restored from a checkpoint, that keeps both
// host cores busy, gets half a core.
func TestCPULimitHolds(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	spec, _ := r.spec(t, "cpu-a")
	spec.Limits.CPUMillis = 500
	a, err := r.d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "cpu-a") })
	waitCPULimit(t, "cpu-a", "after create")
	ca := r.dial(t, a)
	if err := ca.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(r.dir, "cpu-img")
	if err := r.d.Checkpoint(ctx, "cpu-a", img, runtime.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	assertCPULimit(t, "cpu-a", "after a checkpoint")

	spec, _ = r.spec(t, "cpu-b")
	spec.Limits.CPUMillis = 500
	b, err := r.d.Restore(ctx, spec, img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "cpu-b") })
	waitCPULimit(t, "cpu-b", "after a restore")
	cb := r.dial(t, b)
	// Two busy processes for 3 s; the CPU time is read from outside, over the middle 2 s.
	sh(t, cb, `for i in 1 2; do setsid nohup timeout 3 python3 -c 'while True: pass' >/dev/null 2>&1 & done; sleep 0.3`)
	before := cpuUsage(t, "cpu-b")
	start := time.Now()
	time.Sleep(2 * time.Second)
	used, wall := cpuUsage(t, "cpu-b")-before, time.Since(start)
	// Half a core over the window, with a period's slack; unlimited it would be up to two cores.
	if limit := wall/2 + 150*time.Millisecond; used > limit {
		t.Errorf("the sandbox used %v of CPU in %v; its limit is half a core (%v)", used, wall, limit)
	}
	t.Logf("CPU used in %v: %v", wall, used)
}

// waitCPULimit waits for the limit of sandbox id to be settled after its boot period (at most a
// second and two periods), then asserts it: its period the usual one at once, its quota within 2 s.
func waitCPULimit(t *testing.T, id, when string) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/cpu/airlock-test-ckpt", id)
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us")); err != nil || strings.TrimSpace(string(b)) != "100000" {
		t.Errorf("%s: the period is %q, %v; want 100000 at once", when, b, err)
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us")); err == nil && strings.TrimSpace(string(b)) == "50000" {
			break
		}
	}
	assertCPULimit(t, id, when)
}

func assertCPULimit(t *testing.T, id, when string) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/cpu/airlock-test-ckpt", id)
	for file, want := range map[string]string{"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("%s: %s is %s; want %s", when, file, got, want)
		}
	}
}

func cpuUsage(t *testing.T, id string) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct/airlock-test-ckpt", id, "cpuacct.usage"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(n)
}

// TestFailedCheckpointKeepsLimits: a checkpoint that fails after the quota was lifted (here runsc
// cannot create its image file) leaves the sandbox running with its own quota again, its daemon
// answering.
func TestFailedCheckpointKeepsLimits(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	spec, _ := r.spec(t, "cpu-f")
	spec.Limits.CPUMillis = 500
	a, err := r.d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.d.Destroy(context.Background(), "cpu-f") })
	if err := r.dial(t, a).Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(r.dir, "cpu-f-img")
	// runsc creates its state file with O_EXCL: a directory in its place makes the save fail.
	if err := os.MkdirAll(filepath.Join(img, gvisor.ImageMemoryDir, "checkpoint.img"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := r.d.Checkpoint(ctx, "cpu-f", img, runtime.CheckpointOptions{LeaveRunning: true}); err == nil {
		t.Fatal("the checkpoint succeeded; want it to fail")
	}
	assertCPULimit(t, "cpu-f", "after a failed checkpoint")
	if got := sh(t, r.dial(t, a), "echo alive"); got != "alive" {
		t.Errorf("after a failed checkpoint the sandbox answers %q", got)
	}
}
