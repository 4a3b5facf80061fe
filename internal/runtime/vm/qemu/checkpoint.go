package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/vm"
)

// A checkpoint of a VM is QEMU's own: its migration stream (the guest's RAM and every device's state)
// written to a file while the guest is stopped, and a copy of its writable disk taken at the same
// moment. A restore starts a new QEMU of the same machine that takes the stream in (-incoming), over a
// copy of the disk, and gives the guest its new identity (link key, address, host name, clock,
// entropy) over the control port: several restores of one image are a fork.

// Files of a checkpoint image.
const (
	ImageFile  = "qemu.json" // what the machine was: imageRecord
	MemoryFile = "memory"    // the migration stream
	DiskFile   = vm.DiskFile // the writable disk, sparse
)

// imageRecord is the machine a checkpoint was made of: a restore must build the same one.
type imageRecord struct {
	Driver    string `json:"driver"`
	MemoryMiB int64  `json:"memory_mib"`
	CPUs      int    `json:"cpus"`
	MAC       string `json:"mac"`
	Network   bool   `json:"network"`
	Kernel    string `json:"kernel"`
	Initramfs string `json:"initramfs"`
}

var (
	_ runtime.Checkpointer = (*Driver)(nil)
	_ runtime.Restorer     = (*Driver)(nil)
	_ runtime.Pauser       = (*Driver)(nil)
)

// Checkpoint stops the guest, writes its memory and devices and its disk into imageDir, and lets it run
// on with opts.LeaveRunning (then wakes its daemon); otherwise it stays stopped until Unpause or
// Destroy. See runtime.Checkpointer.
func (d *Driver) Checkpoint(ctx context.Context, id, imageDir string, opts runtime.CheckpointOptions) error {
	if err := vm.CheckID("qemu", id); err != nil {
		return err
	}
	dir := d.dir(id)
	var rec imageRecord
	if err := vm.ReadJSON(filepath.Join(dir, vm.RecordFile), &rec); err != nil {
		return fmt.Errorf("qemu: checkpoint %s: %w", id, err)
	}
	q, err := dialQMP(ctx, filepath.Join(dir, "qmp.sock"))
	if err != nil {
		return fmt.Errorf("qemu: checkpoint %s: monitor: %w", id, err)
	}
	defer q.Close()
	cp := vm.Checkpoint{Driver: "qemu", ID: id, Dir: dir, ImageDir: imageDir, ImageFile: ImageFile, Record: rec,
		LeaveRunning: opts.LeaveRunning, Log: d.log}
	return cp.Take(ctx, &snapshotter{d: d, id: id, q: q})
}

// snapshotter is QEMU's part of a checkpoint: over its monitor, a migration of the stopped guest to
// a file.
type snapshotter struct {
	d  *Driver
	id string
	q  *qmp
}

func (s *snapshotter) Stop(ctx context.Context) error {
	_, err := s.q.Execute(ctx, "stop", nil)
	return err
}

func (s *snapshotter) Save(ctx context.Context, imageDir string) error {
	mem, err := os.OpenFile(filepath.Join(imageDir, MemoryFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer mem.Close()
	return s.d.migrate(ctx, s.q, mem)
}

func (s *snapshotter) Recover(ctx context.Context) {
	// A migration that failed half-way may still run: cancel it first, or it would stop the guest
	// again when it completes.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := cancelMigration(rctx, s.q); err != nil {
		s.d.log.Warn("cancel a failed checkpoint's migration", "sandbox", s.id, "err", err)
	}
	if _, err := s.q.Execute(rctx, "cont", nil); err != nil {
		s.d.log.Warn("resume after a failed checkpoint", "sandbox", s.id, "err", err)
	}
}

func (s *snapshotter) Resume(ctx context.Context) error {
	_, err := s.q.Execute(ctx, "cont", nil)
	return err
}

func (s *snapshotter) Wake(ctx context.Context) { s.d.wakeSoon(ctx, s.id) }

// migrationTimeout bounds a checkpoint's migration, for a QEMU that never finishes one.
const migrationTimeout = 10 * time.Minute

// migrate writes the stopped guest's migration stream to f and waits until it is complete.
func (d *Driver) migrate(ctx context.Context, q *qmp, f *os.File) error {
	ctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	defer cancel()
	// A stopped guest is copied in one pass; QEMU's default bandwidth cap (for live migration over a
	// network) would make it take seconds.
	if _, err := q.Execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(64) << 30}); err != nil {
		return err
	}
	if err := q.SendFD(ctx, "migfile", f); err != nil {
		return err
	}
	if _, err := q.Execute(ctx, "migrate", map[string]any{"uri": "fd:migfile"}); err != nil {
		return err
	}
	return q.poll(ctx, "query-migrate", 10*time.Millisecond, func(status, desc string) (bool, error) {
		switch status {
		case "completed":
			return true, nil
		case "failed", "cancelled":
			return true, fmt.Errorf("migration %s: %s", status, desc)
		}
		return false, nil
	})
}

// cancelMigration cancels a migration in progress, if any, and waits until it ended.
func cancelMigration(ctx context.Context, q *qmp) error {
	asked := false
	return q.poll(ctx, "query-migrate", 10*time.Millisecond, func(status, _ string) (bool, error) {
		switch status {
		case "", "none", "completed", "failed", "cancelled":
			return true, nil
		}
		if !asked {
			asked = true
			_, err := q.Execute(ctx, "migrate_cancel", nil)
			return false, err
		}
		return false, nil
	})
}

// wakeSoon wakes the daemon of a guest that runs again, as far as the guest lets it: a guest that does
// not answer only stays unreachable itself, so its silence is logged, not an error.
func (d *Driver) wakeSoon(ctx context.Context, id string) {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := d.wake(wctx, id, proto.VMControl{}); err != nil {
		d.log.Warn("the guest did not confirm its wake", "sandbox", id, "err", err)
	}
}

// wake sends the daemon m with Wake set (and whatever identity m gives) and waits until it applied it.
func (d *Driver) wake(ctx context.Context, id string, m proto.VMControl) error {
	ctl, err := d.control(ctx, id)
	if err != nil {
		return err
	}
	m.Wake = true
	if m.UnixNano == 0 {
		m.UnixNano = time.Now().UnixNano()
	}
	seq, err := ctl.Send(m)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return ctl.Wait(wctx, seq, false)
}

// control returns the VM's control connection, making it if the driver has none (after a restart).
func (d *Driver) control(ctx context.Context, id string) (*vm.Control, error) {
	if c := d.ctls.Get(id); c != nil {
		return c, nil
	}
	// Dialled without the lock; calls for one ID are serialized by the caller.
	c, err := vm.DialControl(ctx, filepath.Join(d.dir(id), "ctl.sock"))
	if err != nil {
		return nil, fmt.Errorf("control port: %w", err)
	}
	d.ctls.Put(id, c)
	return c, nil
}

// Unpause lets a VM a checkpoint left stopped run again and wakes its daemon. See runtime.Pauser.
func (d *Driver) Unpause(ctx context.Context, id string) error {
	if err := vm.CheckID("qemu", id); err != nil {
		return err
	}
	dir := d.dir(id)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("qemu: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	q, err := dialQMP(ctx, filepath.Join(dir, "qmp.sock"))
	if err != nil {
		return fmt.Errorf("qemu: unpause %s: monitor: %w", id, err)
	}
	defer q.Close()
	if err := cancelMigration(ctx, q); err != nil {
		return fmt.Errorf("qemu: unpause %s: %w", id, err)
	}
	if _, err := q.Execute(ctx, "cont", nil); err != nil {
		return fmt.Errorf("qemu: unpause %s: %w", id, err)
	}
	os.Remove(filepath.Join(dir, vm.PausedFile))
	d.wakeSoon(ctx, id)
	return nil
}

// Restore boots spec.ID from the checkpoint in imageDir: a new QEMU of the same machine takes in the
// guest's memory and devices over a copy of its disk, then the guest gets spec's identity. The
// machine's RAM and vCPUs are the image's, whatever spec.Limits say of them. See runtime.Restorer.
func (d *Driver) Restore(ctx context.Context, spec runtime.Spec, imageDir string) (runtime.Sandbox, error) {
	var rec imageRecord
	if err := vm.ReadImage("qemu", spec.ID, imageDir, ImageFile, "qemu", &rec); err != nil {
		return runtime.Sandbox{}, err
	}
	return d.boot(ctx, spec, &restoreFrom{dir: imageDir, rec: rec})
}

// restoreFrom is the image a boot restores.
type restoreFrom struct {
	dir string
	rec imageRecord
}
