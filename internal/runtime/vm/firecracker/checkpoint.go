package firecracker

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

// A checkpoint of a VM is Firecracker's full snapshot: the guest's memory and the VM's state (vCPUs,
// devices, and the paths of its drives and vsock socket, the same in every jail), written by the
// paused Firecracker into its jail and moved out by the node, with a copy of its writable disk taken
// at the same moment. A restore starts a new jailed Firecracker, loads the snapshot (PUT
// /snapshot/load, resumed at once) over a copy of the disk, and gives the guest its new identity over
// the control channel: several restores of one image are a fork. A snapshot resets the VM's vsock
// connections (Firecracker tells the guest's driver, which closes them as it runs again), so the node
// dials its control channel anew after one.

// Files of a checkpoint image.
const (
	ImageFile  = "firecracker.json" // what the machine was: imageRecord
	StateFile  = "vmstate"          // Firecracker's VM state
	MemoryFile = "memory"           // the guest's memory
	DiskFile   = vm.DiskFile        // the writable disk, sparse
)

// imageRecord is the machine a VM was booted with, and that a checkpoint was made of.
type imageRecord struct {
	Driver    string `json:"driver"`
	MemoryMiB int64  `json:"memory_mib"`
	CPUs      int    `json:"cpus"`
	MAC       string `json:"mac"`
	Network   bool   `json:"network"`
	// Root is the template image's name: a restore must give the guest the same image.
	Root string `json:"root"`
}

// Checkpoint pauses the guest, has Firecracker write its snapshot, moves it into imageDir with a copy of
// the disk, and lets the guest run on with opts.LeaveRunning (then wakes its daemon); otherwise it
// stays paused until Unpause or Destroy. See runtime.Checkpointer.
func (d *Driver) Checkpoint(ctx context.Context, id, imageDir string, opts runtime.CheckpointOptions) error {
	if err := vm.CheckID("firecracker", id); err != nil {
		return err
	}
	dir := d.dir(id)
	var rec imageRecord
	if err := vm.ReadJSON(filepath.Join(dir, vm.RecordFile), &rec); err != nil {
		return fmt.Errorf("firecracker: checkpoint %s: %w", id, err)
	}
	j, ok := d.jailOf(id)
	if !ok {
		return fmt.Errorf("firecracker: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	cp := vm.Checkpoint{Driver: "firecracker", ID: id, Dir: dir, ImageDir: imageDir, ImageFile: ImageFile, Record: rec,
		LeaveRunning: opts.LeaveRunning, Log: d.log}
	return cp.Take(ctx, &snapshotter{d: d, id: id, j: j, a: d.api(j)})
}

// snapshotter is Firecracker's part of a checkpoint: over its API, a snapshot of the paused VM,
// written into its jail and moved out.
type snapshotter struct {
	d  *Driver
	id string
	j  jail
	a  *api
}

func (s *snapshotter) Stop(ctx context.Context) error { return s.a.pause(ctx) }

func (s *snapshotter) Save(ctx context.Context, imageDir string) error {
	return writeSnapshot(ctx, s.a, s.j, imageDir)
}

func (s *snapshotter) Recover(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.a.resume(rctx); err != nil {
		s.d.log.Warn("resume after a failed checkpoint", "sandbox", s.id, "err", err)
	}
}

func (s *snapshotter) Resume(ctx context.Context) error { return s.a.resume(ctx) }

func (s *snapshotter) Wake(ctx context.Context) { s.d.wakeSoon(ctx, s.id) }

// writeSnapshot has the paused Firecracker of jail j write its snapshot into the jail and moves it
// into imageDir.
func writeSnapshot(ctx context.Context, a *api, j jail, imageDir string) error {
	// What an earlier, failed checkpoint left.
	for _, p := range []string{jailSnapState, jailSnapMem} {
		j.remove(p)
	}
	if err := a.snapshot(ctx); err != nil {
		return err
	}
	if err := j.takeOut(jailSnapState, filepath.Join(imageDir, StateFile)); err != nil {
		return err
	}
	return j.takeOut(jailSnapMem, filepath.Join(imageDir, MemoryFile))
}

// wakeSoon wakes the daemon of a guest that runs again, over a new control connection (the snapshot
// reset the old one), as far as the guest lets it: a guest that does not answer only stays
// unreachable itself, so its silence is logged, not an error.
func (d *Driver) wakeSoon(ctx context.Context, id string) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d.ctls.Drop(id)
	if err := d.tell(wctx, id, proto.VMControl{Wake: true, UnixNano: time.Now().UnixNano()}, false); err != nil {
		d.log.Warn("the guest did not confirm its wake", "sandbox", id, "err", err)
	}
}

// Unpause lets a VM a checkpoint left paused run again and wakes its daemon. See runtime.Pauser.
func (d *Driver) Unpause(ctx context.Context, id string) error {
	if err := vm.CheckID("firecracker", id); err != nil {
		return err
	}
	j, ok := d.jailOf(id)
	if !ok {
		return fmt.Errorf("firecracker: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err := d.api(j).resume(ctx); err != nil {
		return fmt.Errorf("firecracker: unpause %s: %w", id, err)
	}
	os.Remove(filepath.Join(d.dir(id), vm.PausedFile))
	d.wakeSoon(ctx, id)
	return nil
}

// Restore boots spec.ID from the checkpoint in imageDir: a new jailed Firecracker loads the guest's
// memory and state over a copy of its disk, then the guest gets spec's identity. The machine's RAM and
// vCPUs are the image's, whatever spec.Limits say of them. See runtime.Restorer.
func (d *Driver) Restore(ctx context.Context, spec runtime.Spec, imageDir string) (runtime.Sandbox, error) {
	var rec imageRecord
	if err := vm.ReadImage("firecracker", spec.ID, imageDir, ImageFile, d.Name(), &rec); err != nil {
		return runtime.Sandbox{}, err
	}
	return d.boot(ctx, spec, &restoreFrom{dir: imageDir, rec: rec})
}

// restoreFrom is the image a boot restores.
type restoreFrom struct {
	dir string
	rec imageRecord
}
