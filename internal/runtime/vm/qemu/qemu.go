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
	"crypto/rand"
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
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/cleanup"
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

	mu   sync.Mutex
	ctls map[string]*vm.Control // guarded by mu: the control connections of the VMs
}

var (
	_ runtime.Driver      = (*Driver)(nil)
	_ runtime.CPUMeter    = (*Driver)(nil)
	_ runtime.StatsReader = (*Driver)(nil)
	_ runtime.Confined    = (*Driver)(nil)
)

// New returns a driver. It finds QEMU and the guest kernel, and decides on KVM or TCG.
func New(cfg Config) (*Driver, error) {
	if cfg.StateDir == "" || cfg.DaemonBinary == "" {
		return nil, fmt.Errorf("qemu: StateDir and DaemonBinary are required: %w", errdefs.ErrInvalidArgument)
	}
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
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "/airlock-vm"
	}
	if cfg.UIDBase == 0 {
		cfg.UIDBase = DefaultUIDBase
	}
	if cfg.UIDBase < 1<<16 || cfg.UIDBase > 1<<31-UIDCount {
		return nil, fmt.Errorf("qemu: UIDBase %d is not a range of its own: %w", cfg.UIDBase, errdefs.ErrInvalidArgument)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	cfg.StateDir = abs
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, "sandboxes"), filepath.Join(cfg.StateDir, "uids")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("qemu: %w", err)
		}
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
		images: &vm.RootImages{Dir: filepath.Join(cfg.StateDir, "images")}, ctls: map[string]*vm.Control{},
		uids: vm.UIDs{Dir: filepath.Join(cfg.StateDir, "uids"), Base: cfg.UIDBase},
		qemu: qf, store: jailStore{dir: filepath.Join(cfg.StateDir, "jail", "files")}}
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
	if err := vm.CheckSpec("qemu", spec); err != nil {
		return runtime.Sandbox{}, err
	}
	spec.Limits = spec.Limits.WithDefaults()
	dir := d.dir(spec.ID)
	if err := vm.MakeSandboxDir("qemu", dir, spec.ID); err != nil {
		return runtime.Sandbox{}, err
	}
	c := cleanup.Make(func() {
		if err := d.Destroy(context.WithoutCancel(ctx), spec.ID); err != nil {
			d.log.Warn("undo half-created sandbox", "sandbox", spec.ID, "err", err)
		}
	})
	defer c.Clean()
	t0 := time.Now()
	root, err := d.images.Image(ctx, spec.RootFS)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s template image: %w", spec.ID, err)
	}
	m := machine{
		MemoryMiB: spec.Limits.MemoryBytes >> 20,
		CPUs:      int((spec.Limits.CPUMillis + 999) / 1000),
		MAC:       vm.RandomMAC(),
		Kernel:    d.kernel.Image,
		Root:      root,
	}
	disk := filepath.Join(dir, "disk.img")
	if from == nil {
		if m.Initramfs, err = vm.Initramfs(filepath.Join(d.cfg.StateDir, "initramfs"), d.kernel, spec.InitBinary); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s initramfs: %w", spec.ID, err)
		}
		if err := vm.MakeDisk(ctx, disk, spec.Limits.DiskBytes); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s disk: %w", spec.ID, err)
		}
	} else {
		// The same machine as the image's: its RAM, vCPUs, MAC, kernel and initramfs (their sizes are
		// part of the machine QEMU restores).
		r := from.rec
		m.MemoryMiB, m.CPUs, m.MAC = r.MemoryMiB, r.CPUs, r.MAC
		if m.Kernel, m.Initramfs, err = d.imageBoot(r); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("qemu: restore %s: %w", spec.ID, err)
		}
		if r.MemoryMiB <= 0 || r.MemoryMiB > 1<<20 || r.CPUs <= 0 || r.CPUs > 64 {
			return runtime.Sandbox{}, fmt.Errorf("qemu: restore %s: the image's machine (%d MiB, %d vCPUs) is out of range: %w", spec.ID, r.MemoryMiB, r.CPUs, errdefs.ErrInvalidArgument)
		}
		// The limits are the machine's: its RAM and vCPUs cannot change.
		spec.Limits.MemoryBytes = r.MemoryMiB << 20
		spec.Limits.CPUMillis = min(spec.Limits.CPUMillis, int64(r.CPUs)*1000)
		if err := vm.CopySparse(filepath.Join(from.dir, DiskFile), disk); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s disk: %w", spec.ID, err)
		}
		if m.incoming, err = os.Open(filepath.Join(from.dir, MemoryFile)); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s: %w", spec.ID, err)
		}
		defer m.incoming.Close()
	}
	key := make([]byte, proto.LinkKeySize)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "key"), key, 0o600); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("qemu: %w", err)
	}
	addr, tap, err := vm.WireNetwork(spec.NetNS, -1)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s network: %w", spec.ID, err)
	}
	defer tap.Close()
	m.tap, m.mtu = tap, addr.MTU
	if from != nil && from.rec.Network != (tap != nil) {
		return runtime.Sandbox{}, fmt.Errorf("qemu: restore %s: the image's machine had a network device %t, this one %t: %w", spec.ID, from.rec.Network, tap != nil, errdefs.ErrFailedPrecondition)
	}
	if m.uid, err = d.uids.Take(spec.ID, dir); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s: %w", spec.ID, err)
	}
	if err := vm.WriteJSON(filepath.Join(dir, "machine.json"), imageRecord{Driver: "qemu", MemoryMiB: m.MemoryMiB, CPUs: m.CPUs,
		MAC: m.MAC, Network: tap != nil, Kernel: filepath.Base(m.Kernel), Initramfs: filepath.Base(m.Initramfs)}); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("qemu: %w", err)
	}
	tPrep := time.Since(t0)
	pid, done, err := d.start(ctx, spec, dir, m)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s: %w", spec.ID, err)
	}
	ctl, err := d.control(ctx, spec.ID)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s: %w", spec.ID, err)
	}
	bctx, cancel := context.WithTimeout(ctx, BootTimeout)
	defer cancel()
	waitErr := make(chan error, 1)
	if from == nil {
		first := vm.Identity(spec, key, addr)
		first.Argv, first.Env, first.Processes = spec.Init, spec.Env, spec.Limits.Processes
		if _, err := ctl.Send(first); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s: %w", spec.ID, err)
		}
		go func() { waitErr <- ctl.Wait(bctx, 0, true) }() // owner: boot; ends with bctx
	} else {
		go func() { waitErr <- d.wake(bctx, spec.ID, vm.Identity(spec, key, addr)) }() // owner: boot; ends with bctx
	}
	select {
	case err = <-waitErr:
	case <-done:
		err = errors.New("QEMU exited")
	}
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("qemu: sandbox %s did not boot: %w: %s", spec.ID, err, d.console(ctx, dir))
	}
	c.Release()
	d.log.Debug("vm up", "sandbox", spec.ID, "restored", from != nil, "prepare", tPrep, "boot", time.Since(t0)-tPrep)
	return runtime.Sandbox{ID: spec.ID, PID: pid, CreatedAt: time.Now()}, nil
}

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
	disk := filepath.Join(dir, "disk.img")
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	fd := func(f *os.File) int {
		files = append(files, f)
		return 2 + len(files) // ExtraFiles start at 3
	}
	open := func(p string, flag int) (int, error) {
		f, err := os.OpenFile(p, flag|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		return fd(f), nil
	}
	var fds [3]int
	var err error
	// QEMU opens the writable disk read-write and, to probe it, read-only: a descriptor of each mode.
	for i, f := range []struct {
		path string
		flag int
	}{{m.Root, os.O_RDONLY}, {disk, os.O_RDWR}, {disk, os.O_RDONLY}} {
		if fds[i], err = open(f.path, f.flag); err != nil {
			return 0, nil, err
		}
	}
	rootFD, diskFD, diskROFD := fds[0], fds[1], fds[2]
	// The kernel and initramfs QEMU opens by name, in its jail.
	jail := filepath.Join(dir, "root")
	if err := d.makeJail(jail, m.Kernel, m.Initramfs, d.accel == "kvm"); err != nil {
		return 0, nil, err
	}
	socks := map[string]int{}
	for _, s := range []string{"link", "ctl", "qmp"} {
		f, err := listenUnix(filepath.Join(dir, s+".sock"))
		if err != nil {
			return 0, nil, err
		}
		socks[s] = fd(f)
	}
	l := spec.Limits
	accel := "tcg,tb-size=64"
	if d.accel == "kvm" {
		accel = "kvm"
	}
	appendArgs := "console=ttyS0 quiet panic=-1 reboot=t tsc_early_khz=2000000 no_timer_check lpj=8000000 " +
		"random.trust_cpu=on -- vminit"
	args := []string{
		"-name", "airlock-" + spec.ID, "-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-S",
		// No guest memory in a core dump of QEMU.
		"-M", "microvm,pit=on,pic=on,rtc=on,isa-serial=on,dump-guest-core=off", "-accel", accel, "-cpu", "max",
		"-smp", strconv.Itoa(m.CPUs), "-m", strconv.FormatInt(m.MemoryMiB, 10) + "M",
		"-kernel", jailKernel, "-initrd", jailInitramfs,
		"-append", appendArgs,
		// The guest's console: a ring in QEMU's memory, never a file the guest could fill.
		"-chardev", fmt.Sprintf("ringbuf,id=con,size=%d", consoleSize), "-serial", "chardev:con",
		"-add-fd", fmt.Sprintf("fd=%d,set=1", rootFD), "-add-fd", fmt.Sprintf("fd=%d,set=2", diskFD), "-add-fd", fmt.Sprintf("fd=%d,set=2", diskROFD),
		"-drive", "id=root,if=none,file=/dev/fdset/1,format=raw,readonly=on,file.locking=off",
		"-device", "virtio-blk-device,drive=root,serial=" + "airlock-root",
		"-drive", "id=disk,if=none,file=/dev/fdset/2,format=raw,discard=unmap,file.locking=off",
		"-device", "virtio-blk-device,drive=disk,serial=" + "airlock-disk",
		"-device", "virtio-serial-device,max_ports=3",
		"-chardev", fmt.Sprintf("socket,id=link,fd=%d,server=on,wait=off", socks["link"]),
		"-device", "virtserialport,chardev=link,name=" + proto.VMLinkPort,
		"-chardev", fmt.Sprintf("socket,id=ctl,fd=%d,server=on,wait=off", socks["ctl"]),
		"-device", "virtserialport,chardev=ctl,name=" + proto.VMControlPort,
		"-chardev", fmt.Sprintf("socket,id=qmp,fd=%d,server=on,wait=off", socks["qmp"]),
		"-mon", "chardev=qmp,mode=control",
		"-device", "virtio-rng-device",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	}
	if m.tap != nil {
		// A dup: the caller closes its own.
		tap, err := dupFile(m.tap)
		if err != nil {
			return 0, nil, err
		}
		dev := "virtio-net-device,netdev=net,mac=" + m.MAC
		if m.mtu > 0 {
			dev += ",host_mtu=" + strconv.Itoa(m.mtu)
		}
		args = append(args, "-netdev", fmt.Sprintf("tap,id=net,fd=%d,vhost=off", fd(tap)), "-device", dev)
	}
	if m.incoming != nil {
		// Taken in once QEMU is in its cgroups, so that the guest's memory is charged to them.
		args = append(args, "-incoming", "defer")
	}
	qlog, err := os.OpenFile(filepath.Join(dir, "qemu.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, nil, err
	}
	defer qlog.Close()
	// The binary's path is the same in the jail as on the host.
	cmd := exec.Command(d.qemu.binary, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, qlog, qlog
	cmd.ExtraFiles = files
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
		Chroot:     jail,
		Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: groups},
	}
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("start qemu: %w", err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	go func() { // owner: the VM; reaps QEMU when it exits
		cmd.Wait()
		close(done)
	}()
	fail := func(err error) (int, <-chan struct{}, error) {
		// Killed here: a QEMU whose PID or cgroup was not recorded would escape Destroy.
		_ = cmd.Process.Kill()
		<-done
		return 0, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(pid)), 0o600); err != nil {
		return fail(err)
	}
	if err := d.confine(spec.ID, pid, l); err != nil {
		return fail(err)
	}
	q, err := dialQMP(ctx, filepath.Join(dir, "qmp.sock"))
	if err != nil {
		return fail(fmt.Errorf("monitor: %w: %s", err, tail(filepath.Join(dir, "qemu.log"), 2000)))
	}
	defer q.Close()
	if m.incoming != nil {
		if err := q.SendFD(ctx, "incoming", m.incoming); err != nil {
			return fail(err)
		}
		if _, err := q.Execute(ctx, "migrate-incoming", map[string]any{"uri": "fd:incoming"}); err != nil {
			return fail(err)
		}
		if err := waitIncoming(ctx, q); err != nil {
			return fail(fmt.Errorf("restore: %w: %s", err, tail(filepath.Join(dir, "qemu.log"), 2000)))
		}
	}
	if _, err := q.Execute(ctx, "cont", nil); err != nil {
		return fail(err)
	}
	return pid, done, nil
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
	return sandboxdir.ReadPID(filepath.Join(d.dir(id), "pid"))
}

// alive reports whether QEMU of sandbox id runs: its PID is in the VM's cgroup.
func (d *Driver) alive(id string) (int, bool) {
	pid, err := d.pid(id)
	if err != nil {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", d.cgroupPath(id), "cgroup.procs"))
	if err != nil {
		return pid, false
	}
	for _, f := range strings.Fields(string(b)) {
		if f == strconv.Itoa(pid) {
			return pid, true
		}
	}
	return pid, false
}

// Status reports whether the VM runs. See runtime.Driver.
func (d *Driver) Status(ctx context.Context, id string) (runtime.Status, error) {
	if !sandboxdir.IDPattern.MatchString(id) {
		return runtime.Status{}, fmt.Errorf("qemu: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	if _, err := os.Stat(d.dir(id)); err != nil {
		return runtime.Status{}, fmt.Errorf("qemu: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if _, ok := d.alive(id); ok {
		_, err := os.Stat(filepath.Join(d.dir(id), pausedFile))
		return runtime.Status{Running: true, Paused: err == nil}, nil
	}
	return runtime.Status{Reason: d.stopReason(id)}, nil
}

// stopReason says why a VM stopped: its cgroup's OOM kill, or the guest's end.
func (d *Driver) stopReason(id string) string {
	r := sandboxdir.StopReason(d.cgroupPath(id))
	if r == "sandbox exited" {
		return "the VM stopped"
	}
	return r
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
	if !sandboxdir.IDPattern.MatchString(id) {
		return fmt.Errorf("qemu: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	d.mu.Lock()
	if c := d.ctls[id]; c != nil {
		c.Close()
		delete(d.ctls, id)
	}
	d.mu.Unlock()
	var errs []error
	// Every process of the VM's cgroup: QEMU, and whatever it became.
	procs := filepath.Join("/sys/fs/cgroup/pids", d.cgroupPath(id), "cgroup.procs")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(procs)
		if err != nil || len(strings.Fields(string(b))) == 0 {
			break
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("processes of %s do not die", id))
			break
		}
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
	ents, err := os.ReadDir(filepath.Join(d.cfg.StateDir, "sandboxes"))
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && sandboxdir.IDPattern.MatchString(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Close removes the empty cgroup parent. Call it after every sandbox was destroyed.
func (d *Driver) Close() error {
	for _, c := range cgroupControllers {
		_ = unix.Rmdir(filepath.Join("/sys/fs/cgroup", c, d.cfg.CgroupParent))
	}
	return nil
}

// DialLink connects to the daemon over the VM's link port and reports its link key. The socket is the
// node's own, in the VM's private directory. See runtime.Driver.
func (d *Driver) DialLink(ctx context.Context, id string) (net.Conn, []byte, error) {
	if !sandboxdir.IDPattern.MatchString(id) {
		return nil, nil, fmt.Errorf("qemu: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	key, err := os.ReadFile(filepath.Join(d.dir(id), "key"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("qemu: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("qemu: %w", err)
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
	if !sandboxdir.IDPattern.MatchString(id) {
		return 0, fmt.Errorf("qemu: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return sandboxdir.CPUTime(d.cgroupPath(id))
}

// Stats reads the VM's CPU time and memory from its cgroup (QEMU's memory: the guest's RAM as far as it
// touched it, and QEMU's own) and its disk's use as the host counts the disk image's allocated blocks
// (the guest's file system is never read by the host). The memory limit reported is the guest's RAM.
// See runtime.StatsReader.
func (d *Driver) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if !sandboxdir.IDPattern.MatchString(id) {
		return runtime.Stats{}, fmt.Errorf("qemu: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	st, err := sandboxdir.CgroupStats(d.cgroupPath(id))
	if err != nil {
		return st, fmt.Errorf("qemu: sandbox %s: %w", id, err)
	}
	st.MemoryLimit -= overhead // the guest's RAM
	var s unix.Stat_t
	if err := unix.Lstat(filepath.Join(d.dir(id), "disk.img"), &s); err != nil {
		return st, fmt.Errorf("qemu: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	st.DiskUsed, st.DiskTotal = s.Blocks*512, s.Size
	return st, nil
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
