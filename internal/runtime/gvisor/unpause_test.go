package gvisor_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestUnpauseAfterAnInterruptedCheckpoint: a node that died while checkpointing a sandbox leaves its
// daemon quiesced (socket closed), possibly with the sandbox paused too; Unpause, as a restarted node's
// re-adopt calls it, gets the daemon listening again in both cases, and the sandbox answers.
func TestUnpauseAfterAnInterruptedCheckpoint(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for _, paused := range []bool{false, true} {
		id := "unp-running"
		if paused {
			id = "unp-paused"
		}
		spec, _ := r.spec(t, id)
		sb, err := r.d.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.d.Destroy(context.Background(), id) })
		c := r.dial(t, sb)
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := c.Quiesce(qctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		c.Close()
		if paused {
			out, err := exec.Command("runsc", "--root", filepath.Join(r.dir, "runtime", "runsc"), "pause", id).CombinedOutput()
			if err != nil {
				t.Fatalf("runsc pause: %v: %s", err, out)
			}
		}
		// The node is gone; a new one re-adopts the sandbox.
		if err := r.d.Unpause(ctx, id); err != nil {
			t.Fatalf("Unpause (paused %v): %v", paused, err)
		}
		if got := sh(t, r.dial(t, sb), "echo back"); got != "back" {
			t.Errorf("after Unpause (paused %v): %q", paused, got)
		}
	}
}
