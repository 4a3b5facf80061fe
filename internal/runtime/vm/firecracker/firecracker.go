// Package firecracker is the Firecracker runtime driver: each sandbox is a Firecracker microVM under
// Firecracker's jailer, with the same guest as the QEMU driver's (vm/qemu): Debian's kernel (as the
// ELF vmlinux Firecracker boots, extracted from its bzImage once, see Vmlinux), the initramfs of its
// modules with the daemon as /init, the template's read-only erofs image and the VM's own ext4 disk.
// Firecracker needs KVM: New refuses a host where a timed probe (vm.ProbeKVM) shows KVM guests make no
// progress.
//
// How it differs from the QEMU driver:
//   - The daemon's link and control channels are virtio-vsock ports (Firecracker has no
//     virtio-serial): the node connects to the vsock unix socket Firecracker listens on in the VM's
//     jail and asks for the guest's port (vm.VsockConnect); the guest learns this from
//     proto.VMVsockParam on its kernel command line.
//   - Firecracker is configured over its HTTP API (api.go, a small client of the swagger's calls) on a
//     unix socket in the jail; it opens its files by path, so every file the VM uses is a hard link
//     (or a copy) inside the jail, at the same path in every jail (jail.go), so that a snapshot made in
//     one jail is restored in another.
//   - Firecracker runs under its jailer: as a uid of its own (Config.UIDBase, a range apart from the
//     QEMU driver's), chrooted, in the sandbox's network namespace (where the tap it opens by name is
//     bridged with the veth, as vm.WireNetwork does for QEMU), in new PID, IPC and UTS namespaces (the
//     node clones the jailer into them), in v1 cgroups the jailer makes under CgroupParent with the
//     VM's CPU quota, memory limit and a thread bound.
//   - Snapshots are Firecracker's (PUT /snapshot/create, /snapshot/load; checkpoint.go).
//
// Host layout of one sandbox, all removed by Destroy:
//
//	StateDir/sandboxes/ID/
//	  disk.img      the writable disk (ext4, sparse; hard-linked into the jail)
//	  key           the link key
//	  pid           Firecracker's PID
//	  uid           the number of the VM's uid in the driver's range
//	  machine.json  what the VM was booted with
//	StateDir/jail/<firecracker>/airlock-N/root/   the VM's jail (ChrootBase)
package firecracker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
	"github.com/airlockrun/airlock/internal/runtime/vm"
)

// Config configures the driver. The zero value of every field but StateDir and DaemonBinary works.
type Config struct {
	// Firecracker and Jailer are the binaries (a statically linked Firecracker and the jailer of the
	// same release). Empty: "firecracker" and "jailer" from PATH.
	Firecracker string
	Jailer      string
	// StateDir holds the sandboxes' directories, the template images, the initramfs, the kernel and
	// the jails. Required.
	StateDir string
	// ChrootBase is the jailer's --chroot-base-dir. Empty: StateDir/jail. It must be on StateDir's
	// file system for the VMs' files to be hard links rather than copies.
	ChrootBase string
	// GuestDir is where the guest kernel is unpacked. Empty: vm.DefaultGuestDir.
	GuestDir string
	// DaemonBinary is the daemon, the initramfs's /init. Required.
	DaemonBinary string
	// CgroupParent is the cgroup under which the jailer makes each VM's. Empty: "/airlock-fc".
	CgroupParent string
	// UIDBase is the first of the vm.UIDCount host uids (and gids) Firecrackers run as, one per VM.
	// Zero: DefaultUIDBase.
	UIDBase int
	// Logger receives the driver's logs. Nil: slog.Default().
	Logger *slog.Logger
}

// DefaultUIDBase is the first uid Firecrackers run as: the range after the QEMU driver's.
const DefaultUIDBase = vm.DefaultUIDBase + vm.UIDCount

// BootTimeout bounds a boot, from the jailer's start to the daemon listening.
const BootTimeout = time.Minute

// Driver is the Firecracker runtime driver.
type Driver struct {
	cfg       Config
	log       *slog.Logger
	kernel    vm.Kernel
	vmlinux   string
	images    *vm.RootImages
	uids      vm.UIDs
	consoleMu sync.Mutex
	consoles  map[string]*ring // guarded by consoleMu: the end of each VM's console, while the node runs it

	ctls vm.Controls // the control connections of the VMs
}

var (
	_ runtime.Driver       = (*Driver)(nil)
	_ runtime.CPUMeter     = (*Driver)(nil)
	_ runtime.StatsReader  = (*Driver)(nil)
	_ runtime.Confined     = (*Driver)(nil)
	_ runtime.Checkpointer = (*Driver)(nil)
	_ runtime.Restorer     = (*Driver)(nil)
	_ runtime.Pauser       = (*Driver)(nil)
)

// Usable reports why Firecracker cannot run VMs here, or nil: the binaries are found (their paths
// are filled in cfg) and the probe saw a KVM guest's kernel (vmlinux) run.
func Usable(ctx context.Context, cfg *Config, vmlinux string) error {
	if err := findBinaries(cfg); err != nil {
		return err
	}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return fmt.Errorf("no /dev/kvm, which Firecracker needs: %w", errdefs.ErrFailedPrecondition)
	}
	if !ProbeKVM(ctx, cfg.Firecracker, vmlinux) {
		return fmt.Errorf("KVM guests make no progress here (a probe guest's kernel did not run within %s): %w", vm.KVMProbeTime, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// findBinaries finds Firecracker and the jailer (empty: from PATH) and fills in their paths.
func findBinaries(cfg *Config) error {
	for _, b := range []*string{&cfg.Firecracker, &cfg.Jailer} {
		if *b == "" {
			*b = "firecracker"
			if b == &cfg.Jailer {
				*b = "jailer"
			}
		}
		p, err := exec.LookPath(*b)
		if err != nil {
			return fmt.Errorf("%s not found (Debian packages no Firecracker; install a release's firecracker and jailer): %w", *b, errdefs.ErrFailedPrecondition)
		}
		*b = p
	}
	return nil
}

// ProbeKVM reports whether a Firecracker guest runs here: it boots the guest kernel (vmlinux) without
// a root, from a configuration file and without its API, and looks for the kernel's panic on its
// console within vm.KVMProbeTime.
func ProbeKVM(ctx context.Context, firecracker, vmlinux string) bool {
	dir, err := os.MkdirTemp("", "airlock-fc-probe-")
	if err != nil {
		return false
	}
	defer os.RemoveAll(dir)
	conf := fmt.Sprintf(`{"boot-source":{"kernel_image_path":%q,"boot_args":"console=ttyS0 reboot=k pci=off %s"},`+
		`"machine-config":{"vcpu_count":1,"mem_size_mib":128}}`, vmlinux, vm.ProbeKernelArgs)
	cf := filepath.Join(dir, "probe.json")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		return false
	}
	return vm.ProbeKVM(ctx, func(ctx context.Context) *exec.Cmd {
		return exec.CommandContext(ctx, firecracker, "--no-api", "--config-file", cf, "--level", "Error")
	})
}

// New returns a driver. It finds Firecracker, the jailer and the guest kernel (extracting its vmlinux)
// and probes KVM; where Firecracker cannot run VMs it says why.
func New(cfg Config) (*Driver, error) {
	hc := vm.HostConfig{StateDir: cfg.StateDir, DaemonBinary: cfg.DaemonBinary, CgroupParent: cfg.CgroupParent, UIDBase: cfg.UIDBase, Logger: cfg.Logger}
	if err := hc.Complete("firecracker", "/airlock-fc", DefaultUIDBase); err != nil {
		return nil, err
	}
	cfg.StateDir, cfg.CgroupParent, cfg.UIDBase, cfg.Logger = hc.StateDir, hc.CgroupParent, hc.UIDBase, hc.Logger
	if err := findBinaries(&cfg); err != nil {
		return nil, fmt.Errorf("firecracker: cannot run VMs here: %w", err)
	}
	if cfg.ChrootBase == "" {
		cfg.ChrootBase = filepath.Join(cfg.StateDir, "jail")
	}
	k, err := vm.FindKernel(cfg.GuestDir)
	if err != nil {
		return nil, fmt.Errorf("firecracker: %w", err)
	}
	if err := hc.MakeDirs("firecracker", cfg.ChrootBase); err != nil {
		return nil, err
	}
	ctx := context.Background()
	vmlinux, err := Vmlinux(ctx, k.Image, filepath.Join(cfg.StateDir, "kernel"))
	if err != nil {
		return nil, fmt.Errorf("firecracker: %w", err)
	}
	if err := Usable(ctx, &cfg, vmlinux); err != nil {
		return nil, fmt.Errorf("firecracker: cannot run VMs here: %w", err)
	}
	d := &Driver{cfg: cfg, log: cfg.Logger.With("driver", "firecracker"), kernel: k, vmlinux: vmlinux,
		images:   &vm.RootImages{Dir: filepath.Join(cfg.StateDir, "images")},
		uids:     vm.UIDs{Dir: filepath.Join(cfg.StateDir, "uids"), Base: cfg.UIDBase},
		consoles: map[string]*ring{}}
	d.log.Info("firecracker microvm driver", "firecracker", cfg.Firecracker, "kernel", k.Release)
	return d, nil
}

// Name reports "vm:firecracker".
func (d *Driver) Name() string { return "vm:firecracker" }

// Accel reports "kvm": Firecracker runs guests under KVM only (New refuses a host where they make no
// progress).
func (d *Driver) Accel() string { return "kvm" }

// CgroupParent is the cgroup every VM's Firecracker runs under. See runtime.Confined.
func (d *Driver) CgroupParent() string { return d.cfg.CgroupParent }

func (d *Driver) dir(id string) string { return filepath.Join(d.cfg.StateDir, "sandboxes", id) }

// jailOf returns the jail of sandbox id, from the uid it holds.
func (d *Driver) jailOf(id string) (jail, bool) {
	uid, ok := d.uids.Held(id, d.dir(id))
	if !ok {
		return jail{}, false
	}
	return newJail(d.cfg.ChrootBase, d.cfg.Firecracker, d.cfg.UIDBase, uid-d.cfg.UIDBase), true
}

// cgroupPath is the VM's cgroup, under each v1 hierarchy: the jailer's parent and its ID.
func (d *Driver) cgroupPath(j jail) string { return filepath.Join(d.cfg.CgroupParent, j.ID) }

// bootArgs is the guest kernel's command line. Firecracker adds its devices' virtio_mmio.device
// parameters; "vminit" (no "=", no ".") is passed to /init as its argument.
var bootArgs = "console=ttyS0 quiet panic=-1 reboot=k pci=off i8042.noaux i8042.nomux i8042.dumbkbd random.trust_cpu=on " +
	proto.VMVsockParam + "=" + strconv.Itoa(proto.VMLinkVsockPort) + "," + strconv.Itoa(proto.VMControlVsockPort) + " vminit"

// Create boots spec as a VM. See runtime.Driver.
func (d *Driver) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	return d.boot(ctx, spec, nil)
}

// boot boots spec as a VM: a new one, or one restored from an image. On error nothing is left.
func (d *Driver) boot(ctx context.Context, spec runtime.Spec, from *restoreFrom) (runtime.Sandbox, error) {
	b, err := vm.BeginBoot(ctx, "firecracker", spec, d.dir(spec.ID), d.log, d.Destroy)
	if err != nil {
		return runtime.Sandbox{}, err
	}
	defer b.Close()
	root, err := d.images.Image(ctx, spec.RootFS)
	if err != nil {
		return runtime.Sandbox{}, b.Fail("template image", err)
	}
	rec := imageRecord{Driver: d.Name(), MAC: vm.RandomMAC(), Root: filepath.Base(root)}
	rec.MemoryMiB, rec.CPUs = b.Machine()
	rec.CPUs = min(rec.CPUs, maxCPUs)
	var initramfs, snapState, snapMem string
	if from == nil {
		if initramfs, err = b.NewDisk(ctx, filepath.Join(d.cfg.StateDir, "initramfs"), d.kernel); err != nil {
			return runtime.Sandbox{}, err
		}
	} else {
		if err := restoreMachine(b, from, &rec); err != nil {
			return runtime.Sandbox{}, err
		}
		snapState, snapMem = filepath.Join(from.dir, StateFile), filepath.Join(from.dir, MemoryFile)
	}
	uid, err := d.uids.Take(spec.ID, b.Dir)
	if err != nil {
		return runtime.Sandbox{}, b.Fail("uid", err)
	}
	j := newJail(d.cfg.ChrootBase, d.cfg.Firecracker, d.cfg.UIDBase, uid-d.cfg.UIDBase)
	if err := j.build(layout(d.vmlinux, initramfs, root, b.Disk, snapState, snapMem)); err != nil {
		return runtime.Sandbox{}, b.Fail("jail", err)
	}
	key, err := b.MakeKey()
	if err != nil {
		return runtime.Sandbox{}, err
	}
	addr, tap, err := vm.WireNetwork(spec.NetNS, uid)
	if err != nil {
		return runtime.Sandbox{}, b.Fail("network", err)
	}
	if tap != nil {
		tap.Close() // persistent: Firecracker opens it by name
	}
	if from == nil {
		rec.Network = addr.IsValid()
	} else if err := b.CheckNetwork(rec.Network, addr.IsValid()); err != nil {
		return runtime.Sandbox{}, err
	}
	if err := b.Record(rec); err != nil {
		return runtime.Sandbox{}, err
	}
	v, err := d.start(b.Spec, j, limits{CPUMillis: b.Spec.Limits.CPUMillis, MemoryBytes: b.Spec.Limits.MemoryBytes})
	if err != nil {
		return runtime.Sandbox{}, b.Fail("start", err)
	}
	bctx, cancel := context.WithTimeout(ctx, BootTimeout)
	defer cancel()
	if err := d.startMachine(bctx, b, j, v.Done, rec, from != nil); err != nil {
		return runtime.Sandbox{}, err
	}
	id := vm.Identity(spec, key, addr)
	listening := from == nil
	if listening {
		id.Argv, id.Env, id.Processes = spec.Init, spec.Env, b.Spec.Limits.Processes
	} else {
		id.Wake = true
	}
	if err := vm.AwaitGuest(v.Done, "Firecracker", func() error { return d.tell(bctx, spec.ID, id, listening) }); err != nil {
		return runtime.Sandbox{}, b.Fail("did not boot", fmt.Errorf("%w: %s", err, d.console(spec.ID)))
	}
	return b.Up(v.PID, from != nil), nil
}

// maxCPUs is the most vCPUs Firecracker gives a machine.
const maxCPUs = 32

// restoreMachine makes rec the machine of the image a boot restores, over a copy of its disk: the
// image's RAM, vCPUs and MAC are in the snapshot, and its template image must be this one's.
func restoreMachine(b *vm.Boot, from *restoreFrom, rec *imageRecord) error {
	r := from.rec
	if err := b.Restored(r.MemoryMiB, r.CPUs, maxCPUs); err != nil {
		return err
	}
	if r.Root != rec.Root {
		return b.Fail("restore", fmt.Errorf("the image's VM had the template image %s, this template's is %s: %w", r.Root, rec.Root, errdefs.ErrFailedPrecondition))
	}
	rec.MemoryMiB, rec.CPUs, rec.MAC, rec.Network = r.MemoryMiB, r.CPUs, r.MAC, r.Network
	return b.CopyDisk(from.dir)
}

// startMachine waits for the API of the Firecracker in jail j (until it exits: done closes), then
// configures and starts the machine of rec, or loads into it the snapshot a boot restores.
func (d *Driver) startMachine(ctx context.Context, b *vm.Boot, j jail, done <-chan struct{}, rec imageRecord, restore bool) error {
	a := d.api(j)
	if err := waitAPI(ctx, a, done); err != nil {
		return b.Fail("api", fmt.Errorf("%w: %s", err, d.console(b.Spec.ID)))
	}
	m := machine{MemoryMiB: rec.MemoryMiB, CPUs: rec.CPUs, BootArgs: bootArgs}
	if rec.Network {
		m.MAC = rec.MAC
	}
	var err error
	if restore {
		err = a.load(ctx)
	} else {
		err = a.configure(ctx, m)
	}
	if err != nil {
		return b.Fail("boot", fmt.Errorf("%w: %s", err, d.console(b.Spec.ID)))
	}
	return nil
}

// api returns a client of the API of the Firecracker in jail j.
func (d *Driver) api(j jail) *api {
	return newAPI(func(ctx context.Context) (net.Conn, error) { return j.dial(ctx, jailAPI) })
}

// waitAPI waits until Firecracker's API socket answers a connection, or Firecracker exits.
func waitAPI(ctx context.Context, a *api, done <-chan struct{}) error {
	for {
		conn, err := a.dial(ctx)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-done:
			return errors.New("Firecracker exited")
		case <-ctx.Done():
			return fmt.Errorf("no API socket: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// start starts the jailer, which starts Firecracker in jail j with limits l.
func (d *Driver) start(spec runtime.Spec, j jail, l limits) (*vm.VMM, error) {
	cons := newRing(consoleSize)
	d.consoleMu.Lock()
	d.consoles[spec.ID] = cons
	d.consoleMu.Unlock()
	cmd := exec.Command(d.cfg.Jailer, jailerArgs(d.cfg, j, l, spec.NetNS)...)
	// The guest's console and Firecracker's log: only their end is kept, in the node's memory.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, cons, cons
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid: true,
		// The jailer makes its own mount namespace and joins the sandbox's network namespace.
		// No Pdeathsig: VMs outlive a node's restart (the node finds them again); the fence keeper
		// stops them through their cgroups if the node is gone for good.
		Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
	}
	v, err := vm.StartVMM(cmd, d.dir(spec.ID))
	if err != nil {
		return nil, fmt.Errorf("start the jailer: %w", err)
	}
	return v, nil
}

// consoleSize is how much of a VM's console the node keeps.
const consoleSize = 64 << 10

// console returns the end of the VM's console, for an error message.
func (d *Driver) console(id string) string {
	d.consoleMu.Lock()
	r := d.consoles[id]
	d.consoleMu.Unlock()
	if r == nil {
		return ""
	}
	b := r.Bytes()
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "console: " + string(bytes.TrimSpace(b))
}

// ring keeps the last bytes written to it.
type ring struct {
	mu  sync.Mutex
	buf []byte // guarded by mu
	max int
}

func newRing(n int) *ring { return &ring{max: n} }

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	if len(r.buf) > r.max {
		r.buf = append(r.buf[:0], r.buf[len(r.buf)-r.max:]...)
	}
	return len(p), nil
}

// Bytes returns a copy of what the ring holds.
func (r *ring) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.buf...)
}

// dialVsock connects to the guest's vsock port through the Firecracker of sandbox id.
func (d *Driver) dialVsock(ctx context.Context, id string, port uint32) (net.Conn, error) {
	j, ok := d.jailOf(id)
	if !ok {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	conn, err := j.dial(ctx, jailVsock)
	if err != nil {
		return nil, err
	}
	if err := vm.VsockConnect(ctx, conn, port); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// control returns the VM's control connection, dialling it if the driver has none (after a restart,
// or after a snapshot reset the VM's vsock connections); fresh drops the one it has first.
func (d *Driver) control(ctx context.Context, id string, fresh bool) (*vm.Control, error) {
	if fresh {
		d.ctls.Drop(id)
	} else if c := d.ctls.Get(id); c != nil {
		return c, nil
	}
	// Until the guest's init listens, Firecracker closes the connection: try again.
	var conn net.Conn
	var err error
	for {
		if conn, err = d.dialVsock(ctx, id, proto.VMControlVsockPort); err == nil {
			break
		}
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("control channel: %w (%v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	c := vm.NewControl(conn)
	d.ctls.Put(id, c)
	return c, nil
}

// tell sends the guest's daemon m and waits until it applied it (and, with listening, until it
// accepts link connections). A connection that ended (the guest reset its vsock connections after a
// snapshot) is dialled again and m sent again: every message is safe to apply twice.
func (d *Driver) tell(ctx context.Context, id string, m proto.VMControl, listening bool) error {
	for attempt := 0; ; attempt++ {
		ctl, err := d.control(ctx, id, attempt > 0)
		if err != nil {
			return err
		}
		seq, err := ctl.Send(m)
		if err == nil {
			if listening && m.Argv != nil {
				// The first message: the daemon the init execs reports that it listens, with its own
				// numbering.
				seq = 0
			}
			err = ctl.Wait(ctx, seq, listening)
		}
		if err == nil || errors.Is(err, errdefs.ErrFailedPrecondition) || ctx.Err() != nil || attempt >= 3 {
			return err
		}
		d.log.Debug("control channel again", "sandbox", id, "err", err)
	}
}

// Status reports whether the VM runs. See runtime.Driver.
func (d *Driver) Status(ctx context.Context, id string) (runtime.Status, error) {
	return vm.Status("firecracker", id, d.dir(id), func() bool { _, ok := d.alive(id); return ok }, func() string {
		if j, ok := d.jailOf(id); ok {
			return vm.StopReason(d.cgroupPath(j))
		}
		return "the VM stopped"
	})
}

// alive reports whether the Firecracker of sandbox id runs: its PID is in the VM's cgroup.
func (d *Driver) alive(id string) (int, bool) {
	pid, err := sandboxdir.ReadPID(filepath.Join(d.dir(id), vm.PIDFile))
	if err != nil {
		return 0, false
	}
	j, ok := d.jailOf(id)
	if !ok {
		return pid, false
	}
	return pid, sandboxdir.InCgroup(d.cgroupPath(j), pid)
}

// Wait blocks until Firecracker exits. See runtime.Driver.
func (d *Driver) Wait(ctx context.Context, id string) (runtime.Status, error) {
	if pid, ok := d.alive(id); ok {
		if err := sandboxdir.WaitPID(ctx, pid); err != nil {
			return runtime.Status{}, err
		}
	}
	return d.Status(ctx, id)
}

// Destroy kills Firecracker and removes everything of the VM: its cgroups, its jail, its directory.
// The tap goes with the sandbox's network namespace. See runtime.Driver.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	if err := vm.CheckID("firecracker", id); err != nil {
		return err
	}
	d.ctls.Drop(id)
	var errs []error
	j, hasJail := d.jailOf(id)
	if hasJail {
		if err := sandboxdir.KillCgroup(d.cgroupPath(j), id); err != nil {
			errs = append(errs, err)
		}
	}
	// A jailer started but not yet in its cgroups.
	if pid, err := sandboxdir.ReadPID(filepath.Join(d.dir(id), vm.PIDFile)); err == nil && processIs(pid, d.cfg.Jailer, d.cfg.Firecracker, j.ID) {
		_ = unix.Kill(pid, unix.SIGKILL)
		_ = sandboxdir.WaitPID(ctx, pid)
	}
	if hasJail {
		errs = append(errs, sandboxdir.RemoveCgroups(d.cgroupPath(j))...)
		if err := os.RemoveAll(filepath.Dir(j.Root)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		d.uids.Release(id, d.dir(id))
		if err := os.RemoveAll(d.dir(id)); err != nil {
			errs = append(errs, err)
		}
		d.consoleMu.Lock()
		delete(d.consoles, id)
		d.consoleMu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("firecracker: destroy %s: %w", id, err)
	}
	return nil
}

// processIs reports whether process pid is still the VM's jailer or Firecracker (not a process that
// took its PID since): its command line names the jail's ID.
func processIs(pid int, jailer, firecracker, jailID string) bool {
	if jailID == "" {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && (bytes.Contains(b, []byte("\x00"+jailID+"\x00")) || bytes.Contains(b, []byte("--id="+jailID+"\x00")))
}

// List reports the sandboxes with a directory on this host. See runtime.Driver.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	return vm.ListSandboxes("firecracker", filepath.Join(d.cfg.StateDir, "sandboxes"))
}

// Close removes the empty cgroup parent. Call it after every sandbox was destroyed.
func (d *Driver) Close() error {
	_ = sandboxdir.RemoveCgroups(d.cfg.CgroupParent)
	return nil
}

// DialLink connects to the daemon over the VM's link port (vsock, through Firecracker's socket in the
// jail) and reports its link key. See runtime.Driver.
func (d *Driver) DialLink(ctx context.Context, id string) (net.Conn, []byte, error) {
	if err := vm.CheckID("firecracker", id); err != nil {
		return nil, nil, err
	}
	key, err := vm.ReadKey("firecracker", id, d.dir(id))
	if err != nil {
		return nil, nil, err
	}
	conn, err := d.dialVsock(ctx, id, proto.VMLinkVsockPort)
	if err != nil {
		return nil, nil, fmt.Errorf("firecracker: sandbox %s: %w", id, err)
	}
	return conn, key, nil
}

// cgroupOf returns the cgroup of the VM of sandbox id: ErrInvalidArgument for a bad ID, ErrNotFound
// without a jail.
func (d *Driver) cgroupOf(id string) (string, error) {
	if err := vm.CheckID("firecracker", id); err != nil {
		return "", err
	}
	j, ok := d.jailOf(id)
	if !ok {
		return "", fmt.Errorf("firecracker: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return d.cgroupPath(j), nil
}

// CPUTime reads the CPU time of the VM's cgroup. See runtime.CPUMeter.
func (d *Driver) CPUTime(ctx context.Context, id string) (time.Duration, error) {
	cg, err := d.cgroupOf(id)
	if err != nil {
		return 0, err
	}
	return sandboxdir.CPUTime(cg)
}

// Stats reads the VM's CPU time and memory from its cgroup and its disk's use as the host counts the
// disk image's allocated blocks. The memory limit reported is the guest's RAM. See
// runtime.StatsReader.
func (d *Driver) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	cg, err := d.cgroupOf(id)
	if err != nil {
		return runtime.Stats{}, err
	}
	return vm.CgroupStats("firecracker", id, cg, d.dir(id), overhead)
}
