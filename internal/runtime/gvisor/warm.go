package gvisor

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
)

// Sandboxes restored ahead of their use (runtime.WarmRestorer). A quiesced daemon polls its wake file
// every 5 ms, which under gVisor costs about a quarter of a CPU (each poll is a few gofer round trips);
// waking it only changes that file. So a sandbox restored ahead stays so for parkAfter, ready to wake in
// a few milliseconds, and is then paused (runsc pause: nothing in it runs, while runsc goes on loading
// its memory), after which a wake first resumes it (a runsc process, ≈ 60–80 ms here).
var parkAfter = 10 * time.Second // a variable for tests (export_test.go)

// park is a sandbox RestoreQuiesced restored that Wake has not woken yet.
type park struct {
	mu     sync.Mutex
	timer  *time.Timer
	paused bool // guarded by mu
	done   bool // woken or destroyed; guarded by mu
}

// RestoreQuiesced restores like Restore but leaves the daemon quiesced: it neither writes
// spec.ControlEnv nor wakes the daemon, which Wake does; after parkAfter the sandbox is paused. See
// runtime.WarmRestorer.
func (d *Driver) RestoreQuiesced(ctx context.Context, spec runtime.Spec, imageDir string) (runtime.Sandbox, error) {
	spec.ControlEnv = nil
	sb, err := d.restore(ctx, spec, imageDir, true)
	if err != nil {
		return sb, err
	}
	id := spec.ID
	p := &park{}
	d.parkMu.Lock()
	if d.parks == nil {
		d.parks = map[string]*park{}
	}
	d.parks[id] = p
	p.timer = time.AfterFunc(parkAfter, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.done {
			return
		}
		if err := d.runscQuiet(context.Background(), "pause", id); err != nil {
			d.log.Warn("pause a sandbox restored ahead", "sandbox", id, "err", err)
			return
		}
		p.paused = true
	})
	d.parkMu.Unlock()
	return sb, nil
}

// unpark takes sandbox id out of the parked ones (woken or destroyed), and reports whether it was
// paused.
func (d *Driver) unpark(id string) bool {
	d.parkMu.Lock()
	p := d.parks[id]
	delete(d.parks, id)
	d.parkMu.Unlock()
	if p == nil {
		return false
	}
	p.timer.Stop()
	p.mu.Lock() // a pause in progress ends first
	defer p.mu.Unlock()
	p.done = true
	return p.paused
}

// Wake writes env into the control directory of sandbox id (which only the host writes: the sandbox
// sees it read-only), resumes it if it was paused, and wakes its quiesced daemon, which takes env when
// it listens again. See runtime.WarmRestorer.
func (d *Driver) Wake(ctx context.Context, id string, env []string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("gvisor: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	if env != nil {
		if !d.hasControl(id) {
			return fmt.Errorf("gvisor: wake %s: no control directory to give the environment through: %w", id, errdefs.ErrFailedPrecondition)
		}
		if err := d.sdir(id).WriteControlEnv(env, 0); err != nil {
			return fmt.Errorf("gvisor: wake %s: %w", id, err)
		}
	}
	if d.unpark(id) {
		if err := d.runscQuiet(ctx, "resume", id); err != nil {
			return fmt.Errorf("gvisor: wake %s: resume: %w", id, err)
		}
	}
	if err := d.wake(ctx, id); err != nil {
		return fmt.Errorf("gvisor: wake %s: %w", id, err)
	}
	if err := d.waitForSocket(ctx, id, 15*time.Second); err != nil {
		return fmt.Errorf("gvisor: sandbox %s daemon did not wake: %w: %s", id, err, sandboxdir.Tail(filepath.Join(d.dir(id), "console.log")))
	}
	return nil
}
