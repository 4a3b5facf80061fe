package daemon

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/daemon/proto"
)

// VMInit is the guest init of a microVM sandbox: the daemon binary is the initramfs's /init, and the
// kernel runs it as PID 1 with the single argument "vminit". It loads the kernel modules the initramfs
// holds (in the order of /modules/order), mounts the sandbox's root — the template's read-only image
// (the disk of serial VMRootSerial) under an overlay whose writable layer is the VM's own disk
// (VMDiskSerial) — with the daemon binary at its usual path and an empty control directory, reads the
// node's first control message (the daemon's argv and environment, the sandbox's identity), and execs
// the daemon in the new root as PID 1. Its channels to the node are virtio-serial ports, or vsock
// ports where the kernel command line has proto.VMVsockParam (Firecracker). It returns only on
// failure (the kernel then panics, and the node sees the VM stop).
func VMInit() int {
	if err := vmInit(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock vminit: %v\n", err)
		return 1
	}
	return 0
}

// Serials of the VM's disks.
const (
	VMRootSerial = "airlock-root"
	VMDiskSerial = "airlock-disk"
)

// Paths inside the guest: the daemon binary as the initramfs holds it, and the new root's mount point.
const (
	vmInitBinary = "/init"
	vmNewRoot    = "/newroot"
)

func vmInit() error {
	for _, m := range []struct{ src, dst, typ, opts string }{
		{"devtmpfs", "/dev", "devtmpfs", "mode=0755"},
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
	} {
		os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.typ, unix.MS_NOSUID, m.opts); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	if err := loadModules("/modules", strings.Fields(string(cmdline))); err != nil {
		return err
	}
	vsockLink, vsockCtl, overVsock, err := vsockParam(strings.Fields(string(cmdline)))
	if err != nil {
		return err
	}
	root, disk, err := waitDisks("/sys/block", 20*time.Second)
	if err != nil {
		return err
	}
	for _, d := range []string{"/lower", "/disk", vmNewRoot} {
		os.MkdirAll(d, 0o755)
	}
	if err := mountRootImage(root, "/lower"); err != nil {
		return err
	}
	if err := unix.Mount(disk, "/disk", "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount the writable disk: %w", err)
	}
	for _, d := range []string{"/disk/upper", "/disk/work"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("overlay", vmNewRoot, "overlay", 0, "lowerdir=/lower,upperdir=/disk/upper,workdir=/disk/work"); err != nil {
		return fmt.Errorf("mount the root: %w", err)
	}
	// The first control message: the daemon's argv and the sandbox's identity.
	var m proto.VMControl
	var ctl *os.File
	var ctlArg string
	if overVsock {
		if m, ctl, err = acceptFirstControl(vsockCtl); err != nil {
			return err
		}
		// The daemon serves the node's connection on: it waits there for the daemon's report.
		if vsockCtl.connFD, err = inheritable(ctl); err != nil {
			return err
		}
		ctlArg = vsockCtl.String()
	} else {
		if ctlArg, err = waitVPort(proto.VMControlPort, 20*time.Second); err != nil {
			return err
		}
		if m, ctl, err = firstControl(ctlArg); err != nil {
			return err
		}
	}
	if len(m.Argv) == 0 || !filepath.IsAbs(m.Argv[0]) {
		return fmt.Errorf("the first control message has no daemon argv")
	}
	controlDir := flagValue(m.Argv, "-control")
	if controlDir == "" || !filepath.IsAbs(controlDir) {
		return fmt.Errorf("the daemon's argv has no -control directory")
	}
	// The daemon binary and the control directory, on a tmpfs of their own where the argv wants them.
	if err := mountInit(m.Argv[0], controlDir); err != nil {
		return err
	}
	if m.Key != nil {
		if err := writeControlFile(filepath.Join(vmNewRoot, controlDir, proto.ControlKey), m.Key); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(vmNewRoot, controlDir, proto.ControlWake), []byte("0"), 0o644); err != nil {
		return err
	}
	for _, d := range []string{"dev", "proc", "sys"} {
		dst := filepath.Join(vmNewRoot, d)
		os.MkdirAll(dst, 0o755)
		if err := unix.Mount("/"+d, dst, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move /%s: %w", d, err)
		}
	}
	for _, m := range []struct{ src, dst, typ, opts string }{
		{"devpts", "/dev/pts", "devpts", "newinstance,ptmxmode=0666,mode=0620"},
		{"shm", "/dev/shm", "tmpfs", "mode=1777"},
	} {
		dst := filepath.Join(vmNewRoot, m.dst)
		os.MkdirAll(dst, 0o755)
		if err := unix.Mount(m.src, dst, m.typ, unix.MS_NOSUID|unix.MS_NOEXEC, m.opts); err != nil {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	os.Remove(filepath.Join(vmNewRoot, "dev/ptmx"))
	os.Symlink("pts/ptmx", filepath.Join(vmNewRoot, "dev/ptmx"))
	if err := os.Chdir(vmNewRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := setLinkUp("lo"); err != nil {
		return err
	}
	if err := applyIdentity(&m, "/"); err != nil {
		return err
	}
	if err := lockGuestKernel(); err != nil {
		return err
	}
	if m.Processes > 0 {
		// The daemon is root, whom RLIMIT_NPROC does not hold; the users it starts processes as are.
		lim := uint64(m.Processes)
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: lim, Max: lim}); err != nil {
			return fmt.Errorf("process limit: %w", err)
		}
	}
	var link string
	if overVsock {
		link = vsockLink.String()
	} else {
		ctl.Close()
		if link, err = waitVPort(proto.VMLinkPort, 5*time.Second); err != nil {
			return err
		}
	}
	argv := append(append([]string(nil), m.Argv...), "-vm-link", link, "-vm-control", ctlArg)
	return syscall.Exec(m.Argv[0], argv, m.Env)
}

// flagValue returns the value of flag name in argv ("-name value" or "-name=value"), the last one.
func flagValue(argv []string, name string) string {
	v := ""
	for i, a := range argv {
		if a == name && i+1 < len(argv) {
			v = argv[i+1]
		} else if strings.HasPrefix(a, name+"=") {
			v = a[len(name)+1:]
		}
	}
	return v
}

// mountInit puts the daemon binary at initPath and an empty control directory at controlDir inside the
// new root, on a small tmpfs at their common parent (/.airlock for the node's paths).
func mountInit(initPath, controlDir string) error {
	parent := filepath.Dir(initPath)
	if filepath.Dir(controlDir) != parent || parent == "/" {
		return fmt.Errorf("the daemon binary %s and the control directory %s must share a parent directory", initPath, controlDir)
	}
	p := filepath.Join(vmNewRoot, parent)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755"); err != nil {
		return fmt.Errorf("mount %s: %w", parent, err)
	}
	dst := filepath.Join(vmNewRoot, initPath)
	if err := os.WriteFile(dst, nil, 0o555); err != nil {
		return err
	}
	if err := unix.Mount(vmInitBinary, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the daemon binary: %w", err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("bind the daemon binary: %w", err)
	}
	return os.Mkdir(filepath.Join(vmNewRoot, controlDir), 0o755)
}

// firstControl opens the control port and reads the node's first message; the caller closes the port.
func firstControl(path string) (proto.VMControl, *os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return proto.VMControl{}, nil, err
	}
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		var m proto.VMControl
		err := proto.ReadVMLine(r, &m)
		if err == nil {
			err = m.Check()
		}
		if err == nil {
			return m, f, nil
		}
		if !errors.Is(err, io.EOF) {
			fmt.Fprintf(os.Stderr, "airlock vminit: first control message: %v\n", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loadModules loads the modules listed in dir/order, in that order, each with the parameters the
// kernel command line gives it (NAME.PARAM=VALUE, as modprobe passes them).
func loadModules(dir string, cmdline []string) error {
	b, err := os.ReadFile(filepath.Join(dir, "order"))
	if err != nil {
		return fmt.Errorf("module list: %w", err)
	}
	for _, file := range strings.Fields(string(b)) {
		name := strings.ReplaceAll(strings.TrimSuffix(file, ".ko"), "-", "_")
		var params []string
		for _, a := range cmdline {
			if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(strings.ReplaceAll(k, "-", "_"), name+".") {
				params = append(params, k[len(name)+1:]+"="+v)
			}
		}
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), strings.Join(params, " "), 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load module %s: %w", name, err)
		}
	}
	return nil
}

// waitDisks waits for the template's image and the writable disk among the virtio disks of sysBlock
// (/sys/block) and returns their devices' names under /dev.
func waitDisks(sysBlock string, timeout time.Duration) (root, disk string, err error) {
	deadline := time.Now().Add(timeout)
	for {
		root, disk = pickDisks(sysBlock)
		if root != "" && disk != "" {
			r, d := filepath.Join("/dev", root), filepath.Join("/dev", disk)
			_, err1 := os.Stat(r)
			_, err2 := os.Stat(d)
			if err1 == nil && err2 == nil {
				return r, d, nil
			}
		}
		if time.Now().After(deadline) {
			return "", "", fmt.Errorf("no disks of serials %s and %s, nor one read-only and one writable disk", VMRootSerial, VMDiskSerial)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pickDisks finds the template's image and the writable disk among the virtio disks of sysBlock: by
// their serials (VMRootSerial, VMDiskSerial: QEMU sets them), or, where neither has one (Firecracker's
// serials are its own), the one disk the VMM marks read-only and the one it does not. It reports the
// disks' names ("vda"), or "" for what it did not find.
func pickDisks(sysBlock string) (root, disk string) {
	blocks, _ := filepath.Glob(filepath.Join(sysBlock, "vd*"))
	var ro, rw []string
	for _, b := range blocks {
		name := filepath.Base(b)
		if s, err := os.ReadFile(filepath.Join(b, "serial")); err == nil {
			switch strings.TrimSpace(string(s)) {
			case VMRootSerial:
				root = name
				continue
			case VMDiskSerial:
				disk = name
				continue
			}
		}
		if f, err := os.ReadFile(filepath.Join(b, "ro")); err == nil {
			switch strings.TrimSpace(string(f)) {
			case "1":
				ro = append(ro, name)
			case "0":
				rw = append(rw, name)
			}
		}
	}
	if root != "" || disk != "" {
		return root, disk
	}
	if len(ro) == 1 && len(rw) == 1 {
		return ro[0], rw[0]
	}
	return "", ""
}

// waitVPort waits for the virtio-serial port called name and returns its device.
func waitVPort(name string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		p, err := FindVPort(name)
		if err == nil {
			if _, err = os.Stat(p); err == nil {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			return "", err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mountRootImage mounts the template's read-only image: erofs, or ext4.
func mountRootImage(dev, dst string) error {
	err := unix.Mount(dev, dst, "erofs", unix.MS_RDONLY, "")
	if err != nil {
		if err2 := unix.Mount(dev, dst, "ext4", unix.MS_RDONLY, "noload"); err2 != nil {
			return fmt.Errorf("mount the template's image: erofs: %v; ext4: %w", err, err2)
		}
	}
	return nil
}

// applyIdentity gives the guest what m sets of its identity: host name, clock, entropy, machine ID,
// and its network address and default route. root is the guest's root directory.
func applyIdentity(m *proto.VMControl, root string) error {
	if m.Hostname != "" {
		if err := unix.Sethostname([]byte(m.Hostname)); err != nil {
			return fmt.Errorf("host name: %w", err)
		}
	}
	if m.UnixNano != 0 {
		tv := unix.NsecToTimeval(m.UnixNano)
		if err := unix.Settimeofday(&tv); err != nil {
			return fmt.Errorf("clock: %w", err)
		}
	}
	if len(m.Seed) > 0 {
		if err := reseed(m.Seed); err != nil {
			return fmt.Errorf("entropy: %w", err)
		}
	}
	if m.MachineID != "" {
		p := filepath.Join(root, "etc", "machine-id")
		os.Remove(p)
		if err := os.WriteFile(p, []byte(m.MachineID+"\n"), 0o444); err != nil {
			return fmt.Errorf("machine id: %w", err)
		}
	}
	if m.Address != "" {
		if err := configureNet("eth0", m.Address, m.Gateway); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	return nil
}

// reseed mixes seed into the kernel's random pool and makes the kernel reseed its generator from it.
func reseed(seed []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info: entropy_count (bits), buf_size (bytes), buf.
	info := make([]byte, 8+len(seed))
	binary.NativeEndian.PutUint32(info[0:], uint32(8*len(seed)))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(seed)))
	copy(info[8:], seed)
	const rndAddEntropy, rndReseedCRNG = 0x40085203, 0x5207
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		return e
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); e != 0 {
		return e
	}
	return nil
}

// setLinkUp brings interface name up.
func setLinkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s up: %w", name, err)
	}
	return nil
}

// configureNet gives interface name the address prefix (replacing its address), brings it up and
// routes everything through gateway.
func configureNet(name, prefix, gateway string) error {
	p, err := netip.ParsePrefix(prefix)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	set := func(req uint, addr netip.Addr) error {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(addr.AsSlice()); err != nil {
			return err
		}
		return unix.IoctlIfreq(fd, req, ifr)
	}
	if err := set(unix.SIOCSIFADDR, p.Addr()); err != nil {
		return fmt.Errorf("address: %w", err)
	}
	mask := netip.AddrFrom4([4]byte(netmask(p.Bits())))
	if err := set(unix.SIOCSIFNETMASK, mask); err != nil {
		return fmt.Errorf("netmask: %w", err)
	}
	if err := setLinkUp(name); err != nil {
		return err
	}
	if gateway == "" {
		return nil
	}
	gw, err := netip.ParseAddr(gateway)
	if err != nil {
		return err
	}
	ifi, err := netInterfaceIndex(name)
	if err != nil {
		return err
	}
	return replaceDefaultRoute(gw, ifi)
}

func netmask(bits int) []byte {
	m := uint32(0xffffffff) << (32 - bits)
	if bits == 0 {
		m = 0
	}
	return binary.BigEndian.AppendUint32(nil, m)
}

func netInterfaceIndex(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", name, "ifindex"))
	if err != nil {
		return 0, err
	}
	var i int
	_, err = fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &i)
	return i, err
}

// replaceDefaultRoute sets the IPv4 default route to gw through interface ifindex, over rtnetlink.
func replaceDefaultRoute(gw netip.Addr, ifindex int) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	attr := func(typ uint16, data []byte) []byte {
		l := unix.SizeofRtAttr + len(data)
		b := make([]byte, (l+3)&^3)
		binary.NativeEndian.PutUint16(b[0:], uint16(l))
		binary.NativeEndian.PutUint16(b[2:], typ)
		copy(b[4:], data)
		return b
	}
	rtm := unix.RtMsg{Family: unix.AF_INET, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_BOOT, Scope: unix.RT_SCOPE_UNIVERSE, Type: unix.RTN_UNICAST}
	body := append([]byte(nil), (*[unix.SizeofRtMsg]byte)(unsafe.Pointer(&rtm))[:]...)
	gw4 := gw.As4()
	body = append(body, attr(unix.RTA_GATEWAY, gw4[:])...)
	body = append(body, attr(unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(ifindex)))...)
	hdr := unix.NlMsghdr{Len: uint32(unix.SizeofNlMsghdr + len(body)), Type: unix.RTM_NEWROUTE,
		Flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_REPLACE, Seq: 1}
	msg := append(append([]byte(nil), (*[unix.SizeofNlMsghdr]byte)(unsafe.Pointer(&hdr))[:]...), body...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
			if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
				return fmt.Errorf("default route: %w", syscall.Errno(-code))
			}
		}
	}
	return nil
}

// childCaps are the capabilities the processes a VM's daemon starts may have, root's included: those
// gVisor's and runc's sandboxes get (a container's, without CAP_NET_RAW and CAP_MKNOD). Not
// CAP_SYS_ADMIN (mounts, namespaces of all kinds, the guest's sysctls), nor CAP_SYS_PTRACE,
// CAP_SYS_MODULE, CAP_NET_ADMIN, CAP_SYS_TIME or CAP_SYS_BOOT.
var childCaps = []int{unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_FSETID, unix.CAP_KILL, unix.CAP_SETGID,
	unix.CAP_SETUID, unix.CAP_SETPCAP, unix.CAP_NET_BIND_SERVICE, unix.CAP_SYS_CHROOT, unix.CAP_AUDIT_WRITE, unix.CAP_SETFCAP}

// confineChildren drops from the daemon's bounding set every capability but childCaps, so that no
// process it starts (root's included) gains another at exec, and makes the daemon undumpable, so that
// no such process can ptrace it or read its memory (the link key) through /proc. The daemon keeps its
// own capabilities: it sets the guest's identity after a restore.
func confineChildren() error {
	for c := 0; c <= 63; c++ {
		if slices.Contains(childCaps, c) {
			continue
		}
		// The bounding set is each thread's: drop it on every one of the process's (the Go runtime
		// starts processes from any; the threads it makes later are clones of these).
		if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); errno != 0 {
			if errno == unix.EINVAL {
				break // past the kernel's last capability
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, errno)
		}
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the daemon undumpable: %w", err)
	}
	return nil
}

// lockGuestKernel keeps what the daemon starts, root included, from the guest kernel's own levers,
// as the container runtimes keep a sandbox from the host's: the helpers the kernel itself runs with
// every capability (a core_pattern pipe, modprobe, the uevent helper) get childCaps at most, no module
// loads any more, and /proc/sys, /proc/sysrq-trigger and /sys are read-only. Undoing any of it needs
// capabilities only the daemon has (confineChildren).
func lockGuestKernel() error {
	var mask uint64
	for _, c := range childCaps {
		mask |= 1 << c
	}
	caps := fmt.Sprintf("%d\t%d", uint32(mask), uint32(mask>>32))
	for _, w := range []struct{ path, value string }{
		{"/proc/sys/kernel/usermodehelper/bset", caps},
		{"/proc/sys/kernel/usermodehelper/inheritable", caps},
		{"/proc/sys/kernel/modules_disabled", "1"},
	} {
		if err := os.WriteFile(w.path, []byte(w.value), 0); err != nil {
			return fmt.Errorf("lock the guest kernel: %w", err)
		}
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/sys"} {
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("lock %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	return nil
}
