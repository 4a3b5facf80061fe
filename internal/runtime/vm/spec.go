package vm

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/airlockrun/airlock/internal/cleanup"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
)

// CheckSpec checks what a VM driver (named driver, for errors) can boot of spec: a sandbox ID, init and
// control directory as absolute paths in the guest, and no host directories nor masks over them (a VM
// boots image templates only).
func CheckSpec(driver string, spec runtime.Spec) error {
	if !sandboxdir.IDPattern.MatchString(spec.ID) {
		return fmt.Errorf("%s: bad sandbox id %q: %w", driver, spec.ID, errdefs.ErrInvalidArgument)
	}
	if len(spec.Init) == 0 || !filepath.IsAbs(spec.Init[0]) || !filepath.IsAbs(spec.ControlDir) {
		return fmt.Errorf("%s: init and the control directory must be absolute paths inside the sandbox: %w", driver, errdefs.ErrInvalidArgument)
	}
	if len(spec.Mounts) > 0 {
		return fmt.Errorf("%s: the template shows host directories (%s), which a VM cannot: boot an image template: %w", driver, spec.Mounts[0].Destination, errdefs.ErrFailedPrecondition)
	}
	if len(spec.Masks) > 0 {
		return fmt.Errorf("%s: the spec hides paths (%s), which a VM cannot: boot an image template: %w", driver, spec.Masks[0].Path, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// MakeSandboxDir makes the private directory dir of sandbox id; one that exists is
// errdefs.ErrAlreadyExists.
func MakeSandboxDir(driver, dir, id string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s: sandbox %s: %w", driver, id, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("%s: %w", driver, err)
	}
	return nil
}

// ReadJSON reads the JSON file at path (a driver's own record) into v.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// WriteJSON writes v as JSON to path, readable by root only.
func WriteJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// The files of a sandbox's private directory that every VM driver keeps.
const (
	DiskFile   = "disk.img"     // the VM's writable disk, sparse
	KeyFile    = "key"          // the link key
	PIDFile    = "pid"          // the VMM's PID
	RecordFile = "machine.json" // what the VM was booted with: the driver's own record
	PausedFile = "paused"       // marks a VM a checkpoint left stopped
)

// maxImageMiB is the most RAM (MiB) a checkpoint image's machine may have.
const maxImageMiB = 1 << 20

// Boot is one boot of a VM by a driver, new or restored from a checkpoint image: the steps every VM
// driver takes around its VMM's own. BeginBoot starts it; until Up, Close destroys whatever the boot
// made (the driver's Destroy of the sandbox).
type Boot struct {
	// Spec is the sandbox's spec, its Limits with their defaults (and, once Restored, the image
	// machine's RAM and vCPUs).
	Spec runtime.Spec
	// Dir is the sandbox's private directory, and Disk the VM's writable disk in it.
	Dir, Disk string

	driver string
	log    *slog.Logger
	undo   cleanup.Cleanup
	t0     time.Time
	tPrep  time.Duration
}

// BeginBoot checks what a VM can boot of spec and makes the sandbox's private directory dir; from then
// on, until Up, the boot's Close calls destroy(spec.ID) (and logs its error to log). driver names the
// driver in errors ("qemu", "firecracker"). The caller defers Close.
func BeginBoot(ctx context.Context, driver string, spec runtime.Spec, dir string, log *slog.Logger, destroy func(context.Context, string) error) (*Boot, error) {
	if err := CheckSpec(driver, spec); err != nil {
		return nil, err
	}
	spec.Limits = spec.Limits.WithDefaults()
	if err := MakeSandboxDir(driver, dir, spec.ID); err != nil {
		return nil, err
	}
	b := &Boot{Spec: spec, Dir: dir, Disk: filepath.Join(dir, DiskFile), driver: driver, log: log, t0: time.Now()}
	b.undo = cleanup.Make(func() {
		if err := destroy(context.WithoutCancel(ctx), spec.ID); err != nil {
			log.Warn("undo half-created sandbox", "sandbox", spec.ID, "err", err)
		}
	})
	return b, nil
}

// Close destroys what the boot made, unless it is Up.
func (b *Boot) Close() { b.undo.Clean() }

// Fail returns err as the boot's error at step what: "DRIVER: sandbox ID WHAT: err" (or, with no
// what, "DRIVER: sandbox ID: err").
func (b *Boot) Fail(what string, err error) error {
	if what == "" {
		return fmt.Errorf("%s: sandbox %s: %w", b.driver, b.Spec.ID, err)
	}
	return fmt.Errorf("%s: sandbox %s %s: %w", b.driver, b.Spec.ID, what, err)
}

// Machine returns the RAM (MiB) and vCPUs of a new VM of the boot's limits: a whole vCPU for every
// started 1000 millicores.
func (b *Boot) Machine() (memoryMiB int64, cpus int) {
	l := b.Spec.Limits
	return l.MemoryBytes >> 20, int((l.CPUMillis + 999) / 1000)
}

// NewDisk makes what a new VM boots from besides the template: the initramfs of kernel k with the
// spec's init binary (made once in initramfsDir, see Initramfs), which it returns, and an empty
// writable disk of the disk limit's size.
func (b *Boot) NewDisk(ctx context.Context, initramfsDir string, k Kernel) (string, error) {
	initramfs, err := Initramfs(initramfsDir, k, b.Spec.InitBinary)
	if err != nil {
		return "", b.Fail("initramfs", err)
	}
	if err := MakeDisk(ctx, b.Disk, b.Spec.Limits.DiskBytes); err != nil {
		return "", b.Fail("disk", err)
	}
	return initramfs, nil
}

// Restored makes the machine of a restore the image's: it checks the image's RAM (MiB) and vCPUs
// (at most maxCPUs) and makes them the boot's limits: a machine's RAM and vCPUs cannot change.
func (b *Boot) Restored(memoryMiB int64, cpus, maxCPUs int) error {
	if memoryMiB <= 0 || memoryMiB > maxImageMiB || cpus <= 0 || cpus > maxCPUs {
		return b.Fail("restore", fmt.Errorf("the image's machine (%d MiB, %d vCPUs) is out of range: %w", memoryMiB, cpus, errdefs.ErrInvalidArgument))
	}
	b.Spec.Limits.MemoryBytes = memoryMiB << 20
	b.Spec.Limits.CPUMillis = min(b.Spec.Limits.CPUMillis, int64(cpus)*1000)
	return nil
}

// CopyDisk copies the writable disk of the checkpoint image in imageDir (its DiskFile) as the VM's.
func (b *Boot) CopyDisk(imageDir string) error {
	if err := CopySparse(filepath.Join(imageDir, DiskFile), b.Disk); err != nil {
		return b.Fail("disk", err)
	}
	return nil
}

// MakeKey makes the VM's link key and keeps it in KeyFile, readable by root only (see ReadKey).
func (b *Boot) MakeKey() ([]byte, error) {
	key := make([]byte, proto.LinkKeySize)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(b.Dir, KeyFile), key, 0o600); err != nil {
		return nil, b.Fail("key", err)
	}
	return key, nil
}

// CheckNetwork fails a restore whose image's machine had a network device (had) where this one has
// none, or the other way round: the guest's devices are part of the image.
func (b *Boot) CheckNetwork(had, has bool) error {
	if had != has {
		return b.Fail("restore", fmt.Errorf("the image's machine had a network device %t, this one %t: %w", had, has, errdefs.ErrFailedPrecondition))
	}
	return nil
}

// Record writes the driver's record of the machine (RecordFile) and ends the boot's preparation: what
// follows is the VMM's start and the guest's boot.
func (b *Boot) Record(rec any) error {
	if err := WriteJSON(filepath.Join(b.Dir, RecordFile), rec); err != nil {
		return b.Fail("record", err)
	}
	b.tPrep = time.Since(b.t0)
	return nil
}

// Up ends a boot that succeeded: what it made stays. It returns the sandbox, run by the VMM of PID pid.
func (b *Boot) Up(pid int, restored bool) runtime.Sandbox {
	b.undo.Release()
	b.log.Debug("vm up", "sandbox", b.Spec.ID, "restored", restored, "prepare", b.tPrep, "boot", time.Since(b.t0)-b.tPrep)
	return runtime.Sandbox{ID: b.Spec.ID, PID: pid, CreatedAt: time.Now()}
}

// AwaitGuest runs wait, which waits for the guest's daemon and ends with its own context, until it
// returns, or until the VMM exits (done closes): then the error says that vmm exited.
func AwaitGuest(done <-chan struct{}, vmm string, wait func() error) error {
	waitErr := make(chan error, 1)
	go func() { waitErr <- wait() }() // owner: the boot; ends with wait's context
	select {
	case err := <-waitErr:
		return err
	case <-done:
		return errors.New(vmm + " exited")
	}
}

// VMM is a started VMM process (QEMU, or the jailer that becomes Firecracker).
type VMM struct {
	// PID is its process ID.
	PID int
	// Done is closed when it exited (and was reaped).
	Done <-chan struct{}
	cmd  *exec.Cmd
}

// StartVMM starts cmd, the VMM of the sandbox whose private directory is dir, reaps it when it exits,
// and records its PID in PIDFile; if it cannot, it kills the VMM: a VMM whose PID is not recorded
// would escape the driver's Destroy.
func StartVMM(cmd *exec.Cmd, dir string) (*VMM, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { // owner: the VM; reaps the VMM when it exits
		cmd.Wait()
		close(done)
	}()
	v := &VMM{PID: cmd.Process.Pid, Done: done, cmd: cmd}
	if err := os.WriteFile(filepath.Join(dir, PIDFile), []byte(strconv.Itoa(v.PID)), 0o600); err != nil {
		v.Kill()
		return nil, err
	}
	return v, nil
}

// Kill kills the VMM and waits until it was reaped.
func (v *VMM) Kill() {
	_ = v.cmd.Process.Kill()
	<-v.Done
}

// ReadImage reads the record of the checkpoint image in imageDir (its file name) into rec and checks
// that it is the record of driver's machines (its "driver" field is madeBy): anything else is
// ErrInvalidArgument, for a restore (by driver) of sandbox id.
func ReadImage(driver, id, imageDir, name, madeBy string, rec any) error {
	var head struct {
		Driver string `json:"driver"`
	}
	b, err := os.ReadFile(filepath.Join(imageDir, name))
	if err == nil {
		err = json.Unmarshal(b, rec)
	}
	if err == nil {
		err = json.Unmarshal(b, &head)
	}
	if err == nil && head.Driver != madeBy {
		err = fmt.Errorf("not made by the %s driver", driver)
	}
	if err != nil {
		return fmt.Errorf("%s: restore %s: image %s: %v: %w", driver, id, imageDir, err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CheckID returns ErrInvalidArgument (for driver) unless id is a sandbox ID.
func CheckID(driver, id string) error {
	if !sandboxdir.IDPattern.MatchString(id) {
		return fmt.Errorf("%s: bad sandbox id %q: %w", driver, id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ListSandboxes reports the sandboxes with a private directory in dir (a driver's StateDir/sandboxes).
func ListSandboxes(driver, dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", driver, err)
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && sandboxdir.IDPattern.MatchString(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// ReadKey reads the link key of sandbox id (for driver) from its private directory dir: ErrNotFound
// where there is none.
func ReadKey(driver, id, dir string) ([]byte, error) {
	key, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: sandbox %s: %w", driver, id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", driver, err)
	}
	return key, nil
}

// Status reports the status of the VM of sandbox id (for driver) whose private directory is dir:
// ErrNotFound without the directory; running (paused, with PausedFile) while alive reports its VMM
// runs; otherwise stopped, for the reason stopped gives.
func Status(driver, id, dir string, alive func() bool, stopped func() string) (runtime.Status, error) {
	if err := CheckID(driver, id); err != nil {
		return runtime.Status{}, err
	}
	if _, err := os.Stat(dir); err != nil {
		return runtime.Status{}, fmt.Errorf("%s: sandbox %s: %w", driver, id, errdefs.ErrNotFound)
	}
	if alive() {
		_, err := os.Stat(filepath.Join(dir, PausedFile))
		return runtime.Status{Running: true, Paused: err == nil}, nil
	}
	return runtime.Status{Reason: stopped()}, nil
}

// StopReason says why the VM of cgroup stopped: its cgroup's OOM kill, or the guest's end.
func StopReason(cgroup string) string {
	if r := sandboxdir.StopReason(cgroup); r != "sandbox exited" {
		return r
	}
	return "the VM stopped"
}

// Snapshotter is a VMM's part of a checkpoint (see Checkpoint).
type Snapshotter interface {
	// Stop stops the guest.
	Stop(ctx context.Context) error
	// Save writes the stopped guest's memory and the VM's state into imageDir.
	Save(ctx context.Context, imageDir string) error
	// Recover lets the guest run again after a checkpoint failed part-way, as far as it can; it logs
	// what fails.
	Recover(ctx context.Context)
	// Resume lets the stopped guest run again.
	Resume(ctx context.Context) error
	// Wake wakes the daemon of a guest that runs again, as far as the guest lets it: a guest that
	// does not answer only stays unreachable itself, so its silence is logged, not an error.
	Wake(ctx context.Context)
}

// Checkpoint is one checkpoint of a VM (see Take).
type Checkpoint struct {
	// Driver names the driver in errors; ID is the sandbox's; Dir its private directory.
	Driver, ID, Dir string
	// ImageDir is where the image goes; ImageFile is the name the record is kept under there.
	ImageDir, ImageFile string
	// Record is the driver's record of the machine (read from RecordFile), kept with the image.
	Record any
	// LeaveRunning lets the guest run on after it; otherwise it stays stopped (PausedFile).
	LeaveRunning bool
	// Log receives the checkpoint's timings and the failures to resume.
	Log *slog.Logger
}

// Take writes the checkpoint: it stops the guest, has vmm save its memory and state, copies the VM's
// writable disk (DiskFile) and writes the record into ImageDir, and syncs it. With LeaveRunning the
// guest then runs on and its daemon is woken; otherwise the VM is marked paused. A failure before the
// image is complete lets the guest run again.
func (c Checkpoint) Take(ctx context.Context, vmm Snapshotter) error {
	fail := func(err error) error { return fmt.Errorf("%s: checkpoint %s: %w", c.Driver, c.ID, err) }
	if err := os.MkdirAll(c.ImageDir, 0o700); err != nil {
		return err
	}
	start := time.Now()
	if err := vmm.Stop(ctx); err != nil {
		return fail(err)
	}
	if err := vmm.Save(ctx, c.ImageDir); err != nil {
		vmm.Recover(ctx)
		return fail(err)
	}
	tMem := time.Since(start)
	if err := CopySparse(filepath.Join(c.Dir, DiskFile), filepath.Join(c.ImageDir, DiskFile)); err != nil {
		vmm.Recover(ctx)
		return fail(fmt.Errorf("disk: %w", err))
	}
	if err := WriteJSON(filepath.Join(c.ImageDir, c.ImageFile), c.Record); err != nil {
		vmm.Recover(ctx)
		return err
	}
	if err := sandboxdir.SyncTree(c.ImageDir); err != nil {
		vmm.Recover(ctx)
		return fail(err)
	}
	tDisk := time.Since(start) - tMem
	if !c.LeaveRunning {
		if err := os.WriteFile(filepath.Join(c.Dir, PausedFile), nil, 0o600); err != nil {
			return err
		}
		c.Log.Debug("checkpoint", "sandbox", c.ID, "memory", tMem, "disk", tDisk)
		return nil
	}
	if err := vmm.Resume(ctx); err != nil {
		return fail(err)
	}
	vmm.Wake(ctx)
	c.Log.Debug("checkpoint", "sandbox", c.ID, "memory", tMem, "disk", tDisk, "resume", time.Since(start)-tMem-tDisk)
	return nil
}

// CgroupStats reads the resource use of the VM of sandbox id (for driver): its CPU time and memory
// from cgroup, with the memory limit less the VMM's overhead (so the guest's RAM), and its disk's use
// as the host counts the allocated blocks of its disk image (DiskFile in its private directory dir).
func CgroupStats(driver, id, cgroup, dir string, overhead int64) (runtime.Stats, error) {
	st, err := sandboxdir.CgroupStats(cgroup)
	if err != nil {
		return st, fmt.Errorf("%s: sandbox %s: %w", driver, id, err)
	}
	st.MemoryLimit -= overhead
	if st.DiskUsed, st.DiskTotal, err = sandboxdir.ImageUsage(filepath.Join(dir, DiskFile)); err != nil {
		return st, fmt.Errorf("%s: sandbox %s: %w", driver, id, errdefs.ErrNotFound)
	}
	return st, nil
}

// HostConfig is the part of a VM driver's configuration that every VM driver has (see Complete).
type HostConfig struct {
	StateDir, DaemonBinary, CgroupParent string
	UIDBase                              int
	Logger                               *slog.Logger
}

// Complete checks c for driver and fills in what it leaves to defaults: StateDir and DaemonBinary
// are required, and StateDir is made absolute; an empty CgroupParent is cgroupParent; a zero UIDBase
// is uidBase, and the UIDCount uids from it must be a range of their own, above the host's users; a
// nil Logger is slog.Default().
func (c *HostConfig) Complete(driver, cgroupParent string, uidBase int) error {
	if c.StateDir == "" || c.DaemonBinary == "" {
		return fmt.Errorf("%s: StateDir and DaemonBinary are required: %w", driver, errdefs.ErrInvalidArgument)
	}
	if c.CgroupParent == "" {
		c.CgroupParent = cgroupParent
	}
	if c.UIDBase == 0 {
		c.UIDBase = uidBase
	}
	if c.UIDBase < 1<<16 || c.UIDBase > 1<<31-UIDCount {
		return fmt.Errorf("%s: UIDBase %d is not a range of its own: %w", driver, c.UIDBase, errdefs.ErrInvalidArgument)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return fmt.Errorf("%s: %w", driver, err)
	}
	c.StateDir = abs
	return nil
}

// MakeDirs makes StateDir, its sandboxes and uids directories, and dirs.
func (c *HostConfig) MakeDirs(driver string, dirs ...string) error {
	for _, d := range append([]string{c.StateDir, filepath.Join(c.StateDir, "sandboxes"), filepath.Join(c.StateDir, "uids")}, dirs...) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("%s: %w", driver, err)
		}
	}
	return nil
}
