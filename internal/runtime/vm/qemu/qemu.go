// Package qemu is the QEMU microvm runtime driver: each sandbox is a virtual machine of its own (QEMU's
// "microvm" machine: virtio over MMIO, no PCI, no firmware beyond a minimal BIOS) with its own guest
// kernel, for tenants and templates the operator routes to hardware-virtualisation isolation. It uses
// KVM where a timed probe shows KVM guests make progress (see ProbeKVM), and QEMU's TCG emulation
// otherwise.
//
// What a VM is made of:
//   - the guest kernel (Debian's, see vm.FindKernel) and an initramfs of its virtio modules with the
//     daemon as /init (daemon.VMInit), which mounts the root and execs the daemon as PID 1;
//   - the template's root file system as a read-only erofs disk, made once per template and shared by
//     every VM of it (vm.RootImages), under an overlay whose writable layer is the VM's own ext4 disk,
//     sized to the disk limit;
//   - two virtio-serial ports to unix sockets of the node's: the daemon's link and its control
//     messages (proto.VMLinkPort), the identity proof (the link key) sent over the latter;
//   - a virtio-net device on a tap in the sandbox's network namespace, bridged to the namespace's
//     veth, so that the guest is on the same link, gateway, nftables and policy as every sandbox; the
//     guest takes the veth's address;
//   - limits: the guest's RAM is the memory limit (a hard cap: the guest's kernel kills inside it),
//     vCPUs and a CPU quota on QEMU's cgroup, the disk's size.
//
// QEMU itself runs unprivileged, as a uid of its own (from Config.UIDBase, never root, never another
// VM's), in new PID, mount, network, IPC and UTS namespaces (so with no network of its own), under its
// seccomp sandbox (-sandbox on with every option denied), chrooted into a jail of its own that holds
// only the files it opens by name, read-only (see jail.go): every disk, socket and the tap are
// descriptors the node opened.
//
// Host layout of one sandbox, all removed by Destroy:
//
//	StateDir/sandboxes/ID/
//	  disk.img      the writable disk (ext4, sparse)
//	  link.sock, ctl.sock, qmp.sock   the node's sockets of the ports and of QEMU's monitor
//	  key           the link key
//	  pid           QEMU's PID
//	  qemu.log      QEMU's own messages
//	  root/         QEMU's jail: hard links of its binary, libraries, module, firmware, kernel, initramfs
package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
	// QEMU is the qemu-system-x86_64 binary. Empty: from PATH.
	QEMU string
	// StateDir holds the sandboxes' directories, the template images and the initramfs. Required.
	StateDir string
	// GuestDir is where the guest kernel is unpacked. Empty: vm.DefaultGuestDir.
	GuestDir string
	// DaemonBinary is the daemon, the initramfs's /init. Required.
	DaemonBinary string
	// CgroupParent is the cgroup under which each VM's QEMU gets its own. Empty: "/airlock-vm".
	CgroupParent string
	// UIDBase is the first of the UIDCount host uids (and gids) QEMUs run as, one per VM. Zero:
	// DefaultUIDBase.
	UIDBase int
	// Accel is "kvm", "tcg", or empty to probe (ProbeKVM).
	Accel string
	// ProbeCache, if set, is a file that keeps the probe's answer for this host's QEMU, kernel and
	// /dev/kvm, so that a later start need not probe again (e.g. under /run: until the host reboots).
	ProbeCache string
	// Logger receives the driver's logs. Nil: slog.Default().
	Logger *slog.Logger
}

// DefaultUIDBase is the first uid QEMUs run as: no user of the host's, and apart from runc's range.
const DefaultUIDBase = vm.DefaultUIDBase

// UIDCount is how many uids a node's VMs have: at most that many VMs at once.
const UIDCount = vm.UIDCount

// BootTimeout bounds a boot, from QEMU's start to the daemon listening: under emulation a guest takes
// seconds.
const BootTimeout = 2 * time.Minute

// Driver is the QEMU microvm runtime driver.
type Driver struct {
	cfg    Config
	log    *slog.Logger
	kernel vm.Kernel
	images *vm.RootImages
	uids   vm.UIDs
	accel  string
	qemu   qemuFiles // what every VM's jail holds of QEMU's
	store  jailStore // the copies jails link to

	ctls vm.Controls // the control connections of the VMs
}

var (
	_ runtime.Driver      = (*Driver)(nil)
	_ runtime.CPUMeter    = (*Driver)(nil)
	_ runtime.StatsReader = (*Driver)(nil)
	_ runtime.Confined    = (*Driver)(nil)
)

// New returns a driver. It finds QEMU and the guest kernel, and decides on KVM or TCG.
func New(cfg Config) (*Driver, error) {
	hc := vm.HostConfig{StateDir: cfg.StateDir, DaemonBinary: cfg.DaemonBinary, CgroupParent: cfg.CgroupParent, UIDBase: cfg.UIDBase, Logger: cfg.Logger}
	if err := hc.Complete("qemu", "/airlock-vm", DefaultUIDBase); err != nil {
		return nil, err
	}
	cfg.StateDir, cfg.CgroupParent, cfg.UIDBase, cfg.Logger = hc.StateDir, hc.CgroupParent, hc.UIDBase, hc.Logger
	if cfg.QEMU == "" {
		cfg.QEMU = "qemu-system-x86_64"
	}
	p, err := exec.LookPath(cfg.QEMU)
	if err != nil {
		return nil, fmt.Errorf("qemu: %s not found (scripts/install.sh installs Debian's qemu-system-x86): %w", cfg.QEMU, err)
	}
	cfg.QEMU = p
	k, err := vm.FindKernel(cfg.GuestDir)
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	if err := hc.MakeDirs("qemu"); err != nil {
		return nil, err
	}
	accel := cfg.Accel
	if accel == "" {
		accel = "tcg"
		if vm.ProbeCached(cfg.ProbeCache, []string{cfg.QEMU, k.Image}, func() bool { return ProbeKVM(context.Background(), cfg.QEMU, k.Image) }) {
			accel = "kvm"
		}
	}
	qf, err := findQEMUFiles(cfg.QEMU)
	if err != nil {
		return nil, fmt.Errorf("qemu: the files of QEMU's jail: %w", err)
	}
	d := &Driver{cfg: cfg, log: cfg.Logger.With("driver", "qemu"), kernel: k, accel: accel,
		images: &vm.RootImages{Dir: filepath.Join(cfg.StateDir, "images")},
		uids:   vm.UIDs{Dir: filepath.Join(cfg.StateDir, "uids"), Base: cfg.UIDBase},
		qemu:   qf, store: jailStore{dir: filepath.Join(cfg.StateDir, "jail", "files")}}
	// The copies every jail links to, made now rather than at the first boot; those of files no longer
	// used (an upgraded QEMU, an old kernel) that no VM holds go.
	keep := []string{k.Image}
	for _, f := range qf.files {
		keep = append(keep, f.host)
	}
	for _, h := range keep {
		if _, err := d.store.copyOf(h); err != nil {
			return nil, fmt.Errorf("qemu: the files of QEMU's jail: %w", err)
		}
	}
	d.store.prune(keep)
	d.log.Info("qemu microvm driver", "accel", accel, "kernel", k.Release)
	return d, nil
}

// Name reports "vm:qemu", the runtime's name in the class of VMs.
func (d *Driver) Name() string { return "vm:qemu" }

// Accel reports how guests run: "kvm" or "tcg".
func (d *Driver) Accel() string { return d.accel }

// CgroupParent is the cgroup every VM's QEMU runs under. See runtime.Confined.
func (d *Driver) CgroupParent() string { return d.cfg.CgroupParent }

func (d *Driver) dir(id string) string        { return filepath.Join(d.cfg.StateDir, "sandboxes", id) }
func (d *Driver) cgroupPath(id string) string { return filepath.Join(d.cfg.CgroupParent, id) }

// cgroupControllers are the v1 hierarchies a VM's QEMU is put in.
var cgroupControllers = []string{"cpu", "cpuacct", "memory", "pids"}

// overhead is QEMU's own memory beyond the guest's RAM that its cgroup allows: its code, the
// emulator's translation cache (capped by tb-size) and device buffers.
const overhead = 192 << 20

// Create boots spec as a VM. See runtime.Driver.
func (d *Driver) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	return d.boot(ctx, spec, nil)
}

// boot boots spec as a VM: a new one, or one restored from an image. On error nothing is left.
func (d *Driver) boot(ctx context.Context, spec runtime.Spec, from *restoreFrom) (runtime.Sandbox, error) {
	b, err := vm.BeginBoot(ctx, "qemu", spec, d.dir(spec.ID), d.log, d.Destroy)
	if err != nil {
		return runtime.Sandbox{}, err
	}
	defer b.Close()
	root, err := d.images.Image(ctx, spec.RootFS)
	if err != nil {
		return runtime.Sandbox{}, b.Fail("template image", err)
	}
	m := machine{MAC: vm.RandomMAC(), Kernel: d.kernel.Image, Root: root}
	m.MemoryMiB, m.CPUs = b.Machine()
	if from == nil {
		if m.Initramfs, err = b.NewDisk(ctx, filepath.Join(d.cfg.StateDir, "initramfs"), d.kernel); err != nil {
			return runtime.Sandbox{}, err
		}
	} else {
		if err := d.restoreMachine(b, from, &m); err != nil {
			return runtime.Sandbox{}, err
		}
		defer m.incoming.Close()
	}
	key, err := b.MakeKey()
	if err != nil {
		return runtime.Sandbox{}, err
	}
	addr, tap, err := vm.WireNetwork(spec.NetNS, -1)
	if err != nil {
		return runtime.Sandbox{}, b.Fail("network", err)
	}
	defer tap.Close()
	m.tap, m.mtu = tap, addr.MTU
	if from != nil {
		if err := b.CheckNetwork(from.rec.Network, tap != nil); err != nil {
			return runtime.Sandbox{}, err
		}
	}
	if m.uid, err = d.uids.Take(spec.ID, b.Dir); err != nil {
		return runtime.Sandbox{}, b.Fail("uid", err)
	}
	if err := b.Record(imageRecord{Driver: "qemu", MemoryMiB: m.MemoryMiB, CPUs: m.CPUs, MAC: m.MAC, Network: tap != nil,
		Kernel: filepath.Base(m.Kernel), Initramfs: filepath.Base(m.Initramfs)}); err != nil {
		return runtime.Sandbox{}, err
	}
	pid, done, err := d.start(ctx, b.Spec, b.Dir, m)
	if err != nil {
		return runtime.Sandbox{}, b.Fail("", err)
	}
	ctl, err := d.control(ctx, spec.ID)
	if err != nil {
		return runtime.Sandbox{}, b.Fail("", err)
	}
	bctx, cancel := context.WithTimeout(ctx, BootTimeout)
	defer cancel()
	id := vm.Identity(spec, key, addr)
	wait := func() error { return d.wake(bctx, spec.ID, id) }
	if from == nil {
		id.Argv, id.Env, id.Processes = spec.Init, spec.Env, b.Spec.Limits.Processes
		if _, err := ctl.Send(id); err != nil {
			return runtime.Sandbox{}, b.Fail("", err)
		}
		wait = func() error { return ctl.Wait(bctx, 0, true) }
	}
	if err := vm.AwaitGuest(done, "QEMU", wait); err != nil {
		return runtime.Sandbox{}, b.Fail("did not boot", fmt.Errorf("%w: %s", err, d.console(ctx, b.Dir)))
	}
	return b.Up(pid, from != nil), nil
}

// restoreMachine makes m the machine of the image a boot restores: the image's RAM, vCPUs, MAC, kernel
// and initramfs (their sizes are part of the machine QEMU restores), over a copy of its disk, with its
// migration stream to take in (m.incoming, which the caller closes).
func (d *Driver) restoreMachine(b *vm.Boot, from *restoreFrom, m *machine) error {
	r := from.rec
	m.MemoryMiB, m.CPUs, m.MAC = r.MemoryMiB, r.CPUs, r.MAC
	var err error
	if m.Kernel, m.Initramfs, err = d.imageBoot(r); err != nil {
		return b.Fail("restore", err)
	}
	if err := b.Restored(r.MemoryMiB, r.CPUs, maxCPUs); err != nil {
		return err
	}
	if err := b.CopyDisk(from.dir); err != nil {
		return err
	}
	if m.incoming, err = os.Open(filepath.Join(from.dir, MemoryFile)); err != nil {
		return b.Fail("", err)
	}
	return nil
}

// maxCPUs is the most vCPUs an image's machine may have.
const maxCPUs = 64

// machine is what QEMU is started with.
type machine struct {
	MemoryMiB int64
	CPUs      int
	MAC       string
	Kernel    string
	Initramfs string
	Root      string
	tap       *os.File // nil: no network
	mtu       int      // the tap's
	incoming  *os.File // the migration stream to restore, or nil
	uid       int      // QEMU's
}

// console returns the end of the guest's console (QEMU's ring buffer, if QEMU still runs) and of
// QEMU's own messages, for an error message.
func (d *Driver) console(ctx context.Context, dir string) string {
	out := tail(filepath.Join(dir, "qemu.log"), 2000)
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if q, err := dialQMP(qctx, filepath.Join(dir, "qmp.sock")); err == nil {
		defer q.Close()
		if raw, err := q.Execute(qctx, "ringbuf-read", map[string]any{"device": "con", "size": consoleSize, "format": "utf8"}); err == nil {
			var text string
			if json.Unmarshal(raw, &text) == nil {
				if len(text) > 2000 {
					text = text[len(text)-2000:]
				}
				out += "\nconsole: " + text
			}
		}
	}
	return out
}

// consoleSize is the guest console's ring buffer: the guest writes what it likes there, and the host
// keeps only its end, in QEMU's memory.
const consoleSize = 64 << 10

// tail returns the last n bytes of the file at path, reading no more.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		f.Seek(fi.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return strings.TrimSpace(string(b))
}

// listenUnix makes a listening unix socket at path, for QEMU to accept on.
func listenUnix(path string) (*os.File, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	f, err := ln.File()
	ln.Close()
	return f, err
}

// start starts QEMU paused, puts it in its cgroups, takes in the image it restores (if any), and lets
// the guest run. It returns QEMU's PID and a channel closed when QEMU exits.
func (d *Driver) start(ctx context.Context, spec runtime.Spec, dir string, m machine) (int, <-chan struct{}, error) {
	var files fdSet
	defer files.close()
	fds, err := d.openFiles(&files, dir, m)
	if err != nil {
		return 0, nil, err
	}
	qlog, err := os.OpenFile(filepath.Join(dir, "qemu.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, nil, err
	}
	defer qlog.Close()
	// The binary's path is the same in the jail as on the host.
	cmd := exec.Command(d.qemu.binary, d.args(spec.ID, m, fds)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, qlog, qlog
	cmd.ExtraFiles = files.files
	// The jail has no loader cache: the loader finds the libraries where they were found on the host.
	cmd.Env = []string{"LD_LIBRARY_PATH=" + d.qemu.libPath}
	cmd.Dir = "/"
	groups := []uint32{}
	if d.accel == "kvm" {
		// /dev/kvm is the kvm group's.
		var st unix.Stat_t
		if unix.Stat("/dev/kvm", &st) == nil {
			groups = append(groups, st.Gid)
		}
	}
	uid := uint32(m.uid)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Chroot:     filepath.Join(dir, "root"),
		Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: groups},
	}
	v, err := vm.StartVMM(cmd, dir)
	if err != nil {
		return 0, nil, fmt.Errorf("start qemu: %w", err)
	}
	// Killed on failure: a QEMU whose cgroup was not recorded would escape Destroy.
	if err := d.confine(spec.ID, v.PID, spec.Limits); err != nil {
		v.Kill()
		return 0, nil, err
	}
	if err := run(ctx, dir, m.incoming); err != nil {
		v.Kill()
		return 0, nil, err
	}
	return v.PID, v.Done, nil
}

// fdSet is the descriptors QEMU is started with, its ExtraFiles: the first is its fd 3.
type fdSet struct{ files []*os.File }

// add adds f and returns its number in QEMU.
func (s *fdSet) add(f *os.File) int {
	s.files = append(s.files, f)
	return 2 + len(s.files)
}

// open opens the file at p with flag and adds it.
func (s *fdSet) open(p string, flag int) (int, error) {
	f, err := os.OpenFile(p, flag|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	return s.add(f), nil
}

// close closes the host's descriptors (QEMU has its own once it started).
func (s *fdSet) close() {
	for _, f := range s.files {
		f.Close()
	}
}

// qemuFDs are the numbers in QEMU of a VM's descriptors.
type qemuFDs struct {
	root, disk, diskRO int // the template's image, the writable disk read-write and read-only
	link, ctl, qmp     int // the listening sockets of the ports and of the monitor
	tap                int // the tap, or 0 for none
}

// openFiles opens the files of machine m for QEMU into files, and makes QEMU's jail (dir/root) with
// the kernel and initramfs QEMU opens by name.
func (d *Driver) openFiles(files *fdSet, dir string, m machine) (qemuFDs, error) {
	var fds qemuFDs
	disk := filepath.Join(dir, vm.DiskFile)
	// QEMU opens the writable disk read-write and, to probe it, read-only: a descriptor of each mode.
	for _, f := range []struct {
		fd   *int
		path string
		flag int
	}{{&fds.root, m.Root, os.O_RDONLY}, {&fds.disk, disk, os.O_RDWR}, {&fds.diskRO, disk, os.O_RDONLY}} {
		var err error
		if *f.fd, err = files.open(f.path, f.flag); err != nil {
			return fds, err
		}
	}
	if err := d.makeJail(filepath.Join(dir, "root"), m.Kernel, m.Initramfs, d.accel == "kvm"); err != nil {
		return fds, err
	}
	for _, s := range []struct {
		fd   *int
		name string
	}{{&fds.link, "link"}, {&fds.ctl, "ctl"}, {&fds.qmp, "qmp"}} {
		f, err := listenUnix(filepath.Join(dir, s.name+".sock"))
		if err != nil {
			return fds, err
		}
		*s.fd = files.add(f)
	}
	if m.tap != nil {
		// A dup: the caller closes its own.
		tap, err := dupFile(m.tap)
		if err != nil {
			return fds, err
		}
		fds.tap = files.add(tap)
	}
	return fds, nil
}

// args is QEMU's command line for machine m of sandbox id, whose files QEMU has as fds.
func (d *Driver) args(id string, m machine, fds qemuFDs) []string {
	accel := "tcg,tb-size=64"
	if d.accel == "kvm" {
		accel = "kvm"
	}
	appendArgs := "console=ttyS0 quiet panic=-1 reboot=t tsc_early_khz=2000000 no_timer_check lpj=8000000 " +
		"random.trust_cpu=on -- vminit"
	args := []string{
		"-name", "airlock-" + id, "-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-S",
		// No guest memory in a core dump of QEMU.
		"-M", "microvm,pit=on,pic=on,rtc=on,isa-serial=on,dump-guest-core=off", "-accel", accel, "-cpu", "max",
		"-smp", strconv.Itoa(m.CPUs), "-m", strconv.FormatInt(m.MemoryMiB, 10) + "M",
		"-kernel", jailKernel, "-initrd", jailInitramfs,
		"-append", appendArgs,
		// The guest's console: a ring in QEMU's memory, never a file the guest could fill.
		"-chardev", fmt.Sprintf("ringbuf,id=con,size=%d", consoleSize), "-serial", "chardev:con",
		"-add-fd", fmt.Sprintf("fd=%d,set=1", fds.root), "-add-fd", fmt.Sprintf("fd=%d,set=2", fds.disk), "-add-fd", fmt.Sprintf("fd=%d,set=2", fds.diskRO),
		"-drive", "id=root,if=none,file=/dev/fdset/1,format=raw,readonly=on,file.locking=off",
		"-device", "virtio-blk-device,drive=root,serial=" + "airlock-root",
		"-drive", "id=disk,if=none,file=/dev/fdset/2,format=raw,discard=unmap,file.locking=off",
		"-device", "virtio-blk-device,drive=disk,serial=" + "airlock-disk",
		"-device", "virtio-serial-device,max_ports=3",
		"-chardev", fmt.Sprintf("socket,id=link,fd=%d,server=on,wait=off", fds.link),
		"-device", "virtserialport,chardev=link,name=" + proto.VMLinkPort,
		"-chardev", fmt.Sprintf("socket,id=ctl,fd=%d,server=on,wait=off", fds.ctl),
		"-device", "virtserialport,chardev=ctl,name=" + proto.VMControlPort,
		"-chardev", fmt.Sprintf("socket,id=qmp,fd=%d,server=on,wait=off", fds.qmp),
		"-mon", "chardev=qmp,mode=control",
		"-device", "virtio-rng-device",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	}
	if fds.tap != 0 {
		dev := "virtio-net-device,netdev=net,mac=" + m.MAC
		if m.mtu > 0 {
			dev += ",host_mtu=" + strconv.Itoa(m.mtu)
		}
		args = append(args, "-netdev", fmt.Sprintf("tap,id=net,fd=%d,vhost=off", fds.tap), "-device", dev)
	}
	if m.incoming != nil {
		// Taken in once QEMU is in its cgroups, so that the guest's memory is charged to them.
		args = append(args, "-incoming", "defer")
	}
	return args
}

// run takes in the image a started QEMU (of the sandbox in dir) restores, incoming if not nil, over
// its monitor, and lets the guest run.
func run(ctx context.Context, dir string, incoming *os.File) error {
	q, err := dialQMP(ctx, filepath.Join(dir, "qmp.sock"))
	if err != nil {
		return fmt.Errorf("monitor: %w: %s", err, tail(filepath.Join(dir, "qemu.log"), 2000))
	}
	defer q.Close()
	if incoming != nil {
		if err := q.SendFD(ctx, "incoming", incoming); err != nil {
			return err
		}
		if _, err := q.Execute(ctx, "migrate-incoming", map[string]any{"uri": "fd:incoming"}); err != nil {
			return err
		}
		if err := waitIncoming(ctx, q); err != nil {
			return fmt.Errorf("restore: %w: %s", err, tail(filepath.Join(dir, "qemu.log"), 2000))
		}
	}
	_, err = q.Execute(ctx, "cont", nil)
	return err
}

// waitIncoming waits until QEMU took in the migration stream it restores.
func waitIncoming(ctx context.Context, q *qmp) error {
	ctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	defer cancel()
	return q.poll(ctx, "query-status", 20*time.Millisecond, func(status, _ string) (bool, error) {
		switch status {
		case "inmigrate":
			return false, nil
		case "paused", "prelaunch":
			return true, nil
		}
		return true, fmt.Errorf("QEMU is %s after taking in the image", status)
	})
}

// dupFile returns a new descriptor of f's file.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// qemuThreads bounds QEMU's threads (vCPUs, its I/O pool of up to 64, its own): a guest cannot make
// more, and QEMU aborts when it cannot make one, so the bound is generous.
const qemuThreads = 256

// confine makes the VM's cgroups with its limits and moves QEMU (all its threads) into them.
func (d *Driver) confine(id string, pid int, l runtime.Limits) error {
	cg := d.cgroupPath(id)
	for _, c := range cgroupControllers {
		p := filepath.Join("/sys/fs/cgroup", c, cg)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", p, err)
		}
	}
	write := func(c, file string, v int64) error {
		p := filepath.Join("/sys/fs/cgroup", c, cg, file)
		if err := os.WriteFile(p, []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: %w", p, err)
		}
		return nil
	}
	const period = 100_000
	if err := write("cpu", "cpu.cfs_period_us", period); err != nil {
		return err
	}
	if err := write("cpu", "cpu.cfs_quota_us", l.CPUMillis*period/1000); err != nil {
		return err
	}
	if err := write("memory", "memory.limit_in_bytes", l.MemoryBytes+overhead); err != nil {
		return err
	}
	// QEMU's threads: vCPUs, I/O and its own; a guest cannot make more.
	if err := write("pids", "pids.max", qemuThreads); err != nil {
		return err
	}
	for _, c := range cgroupControllers {
		if err := write(c, "cgroup.procs", int64(pid)); err != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) pid(id string) (int, error) {
	return sandboxdir.ReadPID(filepath.Join(d.dir(id), vm.PIDFile))
}

// alive reports whether QEMU of sandbox id runs: its PID is in the VM's cgroup.
func (d *Driver) alive(id string) (int, bool) {
	pid, err := d.pid(id)
	if err != nil {
		return 0, false
	}
	return pid, sandboxdir.InCgroup(d.cgroupPath(id), pid)
}

// Status reports whether the VM runs. See runtime.Driver.
func (d *Driver) Status(ctx context.Context, id string) (runtime.Status, error) {
	return vm.Status("qemu", id, d.dir(id), func() bool { _, ok := d.alive(id); return ok },
		func() string { return vm.StopReason(d.cgroupPath(id)) })
}

// Wait blocks until QEMU exits. See runtime.Driver.
func (d *Driver) Wait(ctx context.Context, id string) (runtime.Status, error) {
	pid, ok := d.alive(id)
	if ok {
		if err := sandboxdir.WaitPID(ctx, pid); err != nil {
			return runtime.Status{}, err
		}
	}
	return d.Status(ctx, id)
}

// Destroy kills QEMU and removes everything of the VM. See runtime.Driver.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	if err := vm.CheckID("qemu", id); err != nil {
		return err
	}
	d.ctls.Drop(id)
	var errs []error
	// Every process of the VM's cgroup: QEMU, and whatever it became.
	if err := sandboxdir.KillCgroup(d.cgroupPath(id), id); err != nil {
		errs = append(errs, err)
	}
	// A QEMU started but not yet in its cgroup.
	if pid, err := d.pid(id); err == nil && processIs(pid, "airlock-"+id) {
		_ = unix.Kill(pid, unix.SIGKILL)
		_ = sandboxdir.WaitPID(ctx, pid)
	}
	errs = append(errs, sandboxdir.RemoveCgroups(d.cgroupPath(id))...)
	if len(errs) == 0 {
		d.uids.Release(id, d.dir(id))
		if err := os.RemoveAll(d.dir(id)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("qemu: destroy %s: %w", id, err)
	}
	return nil
}

// processIs reports whether process pid's command line holds name (it is still the VM's QEMU, not a
// process that took its PID since).
func processIs(pid int, name string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "\x00"+name+"\x00")
}

// List reports the sandboxes with a directory on this host. See runtime.Driver.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	return vm.ListSandboxes("qemu", filepath.Join(d.cfg.StateDir, "sandboxes"))
}

// Close removes the empty cgroup parent. Call it after every sandbox was destroyed.
func (d *Driver) Close() error {
	_ = sandboxdir.RemoveCgroups(d.cfg.CgroupParent)
	return nil
}

// DialLink connects to the daemon over the VM's link port and reports its link key. The socket is the
// node's own, in the VM's private directory. See runtime.Driver.
func (d *Driver) DialLink(ctx context.Context, id string) (net.Conn, []byte, error) {
	if err := vm.CheckID("qemu", id); err != nil {
		return nil, nil, err
	}
	key, err := vm.ReadKey("qemu", id, d.dir(id))
	if err != nil {
		return nil, nil, err
	}
	conn, err := vm.DialLink(ctx, filepath.Join(d.dir(id), "link.sock"))
	if err != nil {
		return nil, nil, fmt.Errorf("qemu: sandbox %s: %w", id, err)
	}
	return conn, key, nil
}

// CPUTime reads the CPU time of the VM's cgroup: QEMU's, the guest's and the emulator's. See
// runtime.CPUMeter.
func (d *Driver) CPUTime(ctx context.Context, id string) (time.Duration, error) {
	if err := vm.CheckID("qemu", id); err != nil {
		return 0, err
	}
	return sandboxdir.CPUTime(d.cgroupPath(id))
}

// Stats reads the VM's CPU time and memory from its cgroup (QEMU's memory: the guest's RAM as far as it
// touched it, and QEMU's own) and its disk's use as the host counts the disk image's allocated blocks
// (the guest's file system is never read by the host). The memory limit reported is the guest's RAM.
// See runtime.StatsReader.
func (d *Driver) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if err := vm.CheckID("qemu", id); err != nil {
		return runtime.Stats{}, err
	}
	return vm.CgroupStats("qemu", id, d.cgroupPath(id), d.dir(id), overhead)
}

// ProbeKVM reports whether KVM guests make progress here. /dev/kvm can exist and accept a VM whose guest
// then never runs (nested virtualisation without support), so the probe boots the guest kernel under
// KVM with no root at all and waits a few seconds for the panic that ends a working boot at once (see
// vm.ProbeKVM).
func ProbeKVM(ctx context.Context, qemu, kernel string) bool {
	return vm.ProbeKVM(ctx, func(ctx context.Context) *exec.Cmd {
		return exec.CommandContext(ctx, qemu, "-M", "microvm", "-accel", "kvm", "-cpu", "host", "-m", "128M",
			"-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-serial", "stdio",
			"-kernel", kernel, "-append", "console=ttyS0 "+vm.ProbeKernelArgs)
	})
}

var (
	kernelName    = regexp.MustCompile(`^vmlinuz-[A-Za-z0-9._+-]{1,64}$`)
	initramfsName = regexp.MustCompile(`^initramfs-[0-9a-f]{24}\.cpio$`)
)

// imageBoot returns the kernel and initramfs a restore of an image made from r boots with: the files
// the image names, by name only, in the guest kernel's directory and the driver's initramfs directory.
// An image names no other host file.
func (d *Driver) imageBoot(r imageRecord) (kernel, initramfs string, err error) {
	if !kernelName.MatchString(r.Kernel) || !initramfsName.MatchString(r.Initramfs) {
		return "", "", fmt.Errorf("the image names kernel %q and initramfs %q: %w", r.Kernel, r.Initramfs, errdefs.ErrInvalidArgument)
	}
	kernel = filepath.Join(filepath.Dir(d.kernel.Image), r.Kernel)
	initramfs = filepath.Join(d.cfg.StateDir, "initramfs", r.Initramfs)
	for _, p := range []string{kernel, initramfs} {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("the image's machine booted %s, which this node no longer has: %w", filepath.Base(p), errdefs.ErrFailedPrecondition)
		}
	}
	return kernel, initramfs, nil
}
