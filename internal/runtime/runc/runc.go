// Package runc is the runc runtime driver: each sandbox is an OCI container run by runc (Debian's), in
// Linux namespaces on the host's kernel — weaker isolation than gVisor's user-space kernel, for tenants
// the operator allows it, in exchange for a faster start and native speed.
//
// What holds a sandbox in:
//   - a user namespace: the sandbox's root is host uid Config.IDBase (and its uids 0..65535 map to
//     IDBase..IDBase+65535), never host root; every runc sandbox of the node shares that range, as
//     Docker's userns-remap does, and is kept apart from the others by its own namespaces;
//   - PID, mount, IPC, UTS and cgroup namespaces, and the network namespace the node prepared, through
//     the node's gateway like every sandbox;
//   - a seccomp profile that denies what containers do not need (seccomp.go), no new privileges, and a
//     small capability set (that of Docker's containers, minus CAP_NET_RAW and CAP_MKNOD);
//   - cgroup limits of memory (no swap), CPU, and processes (pids), and a size-capped disk for the
//     writable layer;
//   - a read-only root: the template under the sandbox's own writable overlay layer. The template is
//     copied once, owned by the sandbox range (shift.go), so that root inside owns it as root owns the
//     template outside; the template's read-only host mounts stay the host's, read-only.
//
// The daemon is the container's first process and talks to the node over the same link and control
// directories as gVisor's (internal/runtime/sandboxdir), proving itself with the link key.
//
// Snapshots hold files only (runtime.FilesOnly): a checkpoint freezes the container, archives its
// writable layer and thaws it; a restore boots a new container over that layer, whose processes start
// anew. (runc checkpoints memory through CRIU, which does not run on every kernel — not on this
// project's CI kernel — and is not used.)
//
// Host layout of one sandbox, all removed by Destroy. runc mounts what the container sees from inside
// its user namespace, as the sandbox's root, which may not pass through the node's private data
// directory; so what it mounts lives in a directory of its own under RunDir (traversable, not listable),
// and the rest stays private under StateDir:
//
//	StateDir/sandboxes/ID/
//	  config.json   OCI spec
//	  disk.img      ext4 image, allocated up front, mounted at disk/ through a loop device (the disk limit)
//	  disk/upper    the writable layer; disk/work is overlayfs's work dir
//	  console.log   the daemon's own stdout and stderr
//	RunDir/ID/
//	  rootfs/       overlayfs: the template's shifted copy (lower, never written) + disk/upper
//	  link/, ctl/   the daemon's link and control directories (sandboxdir)
//	  init          the daemon binary, bound read-only over an empty file
package runc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/cleanup"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
)

// Config configures the driver. The zero value of every field but StateDir works.
type Config struct {
	// Runc is the runc binary. Empty: "runc" from PATH.
	Runc string
	// StateDir holds runc's state (StateDir/runc), the shifted templates and the sandboxes'
	// directories. Required.
	StateDir string
	// CgroupParent is the cgroup under which each sandbox gets its own. Empty: "/airlock-runc".
	CgroupParent string
	// RunDir holds, per sandbox, what runc mounts into it (see the package documentation); it and its
	// parents must be traversable by the sandboxes' root. Empty: /run/airlock-runc/ and a name made
	// from StateDir.
	RunDir string
	// IDBase is the host uid and gid of the sandboxes' root; uids 0..IDRange-1 inside map to
	// IDBase..IDBase+IDRange-1. Zero: DefaultIDBase.
	IDBase int
	// Logger receives the driver's logs. Nil: slog.Default().
	Logger *slog.Logger
}

// DefaultIDBase is the host uid of a runc sandbox's root: far above the host's own users and system
// ranges (and /etc/subuid's usual 100000 + 65536·n).
const DefaultIDBase = 1 << 30

// IDRange is how many uids and gids a sandbox has.
const IDRange = 65536

// Driver is the runc runtime driver.
type Driver struct {
	cfg   Config
	log   *slog.Logger
	shift *shifter
	oci   sandboxdir.OCI
}

var (
	_ runtime.Driver       = (*Driver)(nil)
	_ runtime.Checkpointer = (*Driver)(nil)
	_ runtime.Restorer     = (*Driver)(nil)
	_ runtime.Pauser       = (*Driver)(nil)
	_ runtime.CPUMeter     = (*Driver)(nil)
	_ runtime.StatsReader  = (*Driver)(nil)
	_ runtime.FilesOnly    = (*Driver)(nil)
	_ runtime.ImageFiles   = (*Driver)(nil)
)

// New returns a driver. It checks that runc can be found and creates the state directories.
func New(cfg Config) (*Driver, error) {
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("runc: StateDir is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Runc == "" {
		cfg.Runc = "runc"
	}
	p, err := exec.LookPath(cfg.Runc)
	if err != nil {
		return nil, fmt.Errorf("runc: runc not found (install it with scripts/install.sh): %w", err)
	}
	cfg.Runc = p
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "/airlock-runc"
	}
	if cfg.IDBase == 0 {
		cfg.IDBase = DefaultIDBase
	}
	if cfg.IDBase < IDRange || cfg.IDBase > 1<<31-IDRange {
		return nil, fmt.Errorf("runc: IDBase %d is not a uid range of its own: %w", cfg.IDBase, errdefs.ErrInvalidArgument)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("runc: %w", err)
	}
	cfg.StateDir = abs
	if cfg.RunDir == "" {
		sum := sha256.Sum256([]byte(abs))
		cfg.RunDir = filepath.Join("/run/airlock-runc", hex.EncodeToString(sum[:6]))
	}
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, "runc"), filepath.Join(cfg.StateDir, "sandboxes")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("runc: %w", err)
		}
	}
	// The shifted templates are the sandboxes' lower layers: traversable, as RunDir is.
	for _, d := range []string{filepath.Join(cfg.StateDir, "templates"), filepath.Dir(cfg.RunDir), cfg.RunDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("runc: %w", err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, fmt.Errorf("runc: %w", err)
		}
	}
	d := &Driver{cfg: cfg, log: cfg.Logger.With("driver", "runc"), shift: newShifter(filepath.Join(cfg.StateDir, "templates"), cfg.IDBase)}
	d.oci = sandboxdir.OCI{Name: "runc", Command: d.runc}
	return d, nil
}

// Name reports "runc".
func (d *Driver) Name() string { return "runc" }

// CgroupParent is the cgroup every sandbox's processes run under. See runtime.Confined.
func (d *Driver) CgroupParent() string { return d.cfg.CgroupParent }

// FilesOnly reports that checkpoints hold files only. See runtime.FilesOnly.
func (d *Driver) FilesOnly() bool { return true }

// ImageFSFile is the checkpoint image's archive of the writable layer, its only part.
const ImageFSFile = "fs.tar"

// FilesPart names the image's writable-layer archive (runtime.ImageFiles).
func (d *Driver) FilesPart() string { return ImageFSFile }

var idPattern = sandboxdir.IDPattern

func (d *Driver) dir(id string) string          { return filepath.Join(d.cfg.StateDir, "sandboxes", id) }
func (d *Driver) pub(id string) string          { return filepath.Join(d.cfg.RunDir, id) }
func (d *Driver) sdir(id string) sandboxdir.Dir { return sandboxdir.Dir(d.pub(id)) }
func (d *Driver) cgroupPath(id string) string   { return filepath.Join(d.cfg.CgroupParent, id) }

// Create boots spec as a runc container. See runtime.Driver.
func (d *Driver) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	return d.boot(ctx, spec, nil)
}

// boot prepares the sandbox's directory, disk and root, fills the writable layer with fill (if not
// nil), and starts the container. On error nothing is left.
func (d *Driver) boot(ctx context.Context, spec runtime.Spec, fill func(upper string) error) (runtime.Sandbox, error) {
	if !idPattern.MatchString(spec.ID) {
		return runtime.Sandbox{}, fmt.Errorf("runc: bad sandbox id %q: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	if len(spec.Init) == 0 || !filepath.IsAbs(spec.Init[0]) {
		return runtime.Sandbox{}, fmt.Errorf("runc: init must be an absolute path inside the sandbox: %w", errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(spec.ControlDir) {
		return runtime.Sandbox{}, fmt.Errorf("runc: the control directory must be an absolute path inside the sandbox: %w", errdefs.ErrInvalidArgument)
	}
	spec.Limits = spec.Limits.WithDefaults()
	dir, pub := d.dir(spec.ID), d.pub(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return runtime.Sandbox{}, fmt.Errorf("runc: sandbox %s: %w", spec.ID, errdefs.ErrAlreadyExists)
		}
		return runtime.Sandbox{}, fmt.Errorf("runc: %w", err)
	}
	c := cleanup.Make(func() {
		if err := d.Destroy(context.WithoutCancel(ctx), spec.ID); err != nil {
			d.log.Warn("undo half-created sandbox", "sandbox", spec.ID, "err", err)
		}
	})
	defer c.Clean()

	t0 := time.Now()
	lower, err := d.shift.template(spec.RootFS)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: sandbox %s template: %w", spec.ID, err)
	}
	if err := sandboxdir.MakeDisk(filepath.Join(dir, "disk.img"), filepath.Join(dir, "disk"), spec.Limits.DiskBytes); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: sandbox %s disk: %w", spec.ID, err)
	}
	root := d.cfg.IDBase
	upper, work := filepath.Join(dir, "disk", "upper"), filepath.Join(dir, "disk", "work")
	for _, p := range []string{upper, work} {
		if err := os.Mkdir(p, 0o755); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("runc: %w", err)
		}
	}
	if err := os.Lchown(upper, root, root); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: %w", err)
	}
	if fill != nil {
		if err := fill(upper); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("runc: sandbox %s: writable layer: %w", spec.ID, err)
		}
	}
	if err := os.Mkdir(pub, 0o711); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: %w", err)
	}
	rootfs := filepath.Join(pub, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: %w", err)
	}
	// The daemon binary where the sandbox's root can reach it: bound over an empty file.
	initFile := filepath.Join(pub, "init")
	if err := os.WriteFile(initFile, nil, 0o555); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: %w", err)
	}
	if err := unix.Mount(spec.InitBinary, initFile, "", unix.MS_BIND, ""); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: bind the daemon binary: %w", err)
	}
	if err := unix.Mount("", initFile, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: bind the daemon binary: %w", err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", rootfs, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: mount writable layer: %w", err)
	}
	sd := sandboxdir.Dir(pub)
	if err := sd.MakeLinkDir(root); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: %w", err)
	}
	if err := sd.MakeControlDir(root); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: sandbox %s control directory: %w", spec.ID, err)
	}
	tDisk := time.Since(t0)
	b, err := json.Marshal(d.ociSpec(spec, pub))
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: encode spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: %w", err)
	}
	console, err := os.OpenFile(filepath.Join(dir, "console.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: %w", err)
	}
	defer console.Close()
	pidFile := filepath.Join(dir, "pid")
	cmd := d.runc(ctx, "run", "--detach", "--pid-file", pidFile, "--bundle", dir, spec.ID)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, console, console
	if err := cmd.Run(); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: run %s: %v: %s", spec.ID, err, sandboxdir.Tail(filepath.Join(dir, "console.log")))
	}
	tRun := time.Since(t0)
	pid, err := sandboxdir.ReadPID(pidFile)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: sandbox %s: %w", spec.ID, err)
	}
	if err := sd.WaitForSocket(ctx, 15*time.Second); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("runc: sandbox %s daemon did not start: %w: %s", spec.ID, err, sandboxdir.Tail(filepath.Join(dir, "console.log")))
	}
	c.Release()
	d.log.Debug("runc sandbox up", "sandbox", spec.ID, "disk", tDisk, "run", tRun-tDisk, "socket", time.Since(t0)-tRun)
	return runtime.Sandbox{ID: spec.ID, PID: pid, CreatedAt: time.Now()}, nil
}

// caps are the sandbox's capabilities (within its user namespace): Docker's default set without
// CAP_NET_RAW (no raw sockets to forge packets with) and CAP_MKNOD (no devices).
var caps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE", "CAP_SETFCAP"}

// ociSpec builds the OCI runtime spec of a sandbox whose mount sources are in pub.
func (d *Driver) ociSpec(spec runtime.Spec, pub string) *specs.Spec {
	dir := pub
	l := spec.Limits
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		// The network namespace is the node's (made outside the sandbox's user namespace), in which a
		// sysfs cannot be mounted; the host's is not shown either. An empty, read-only /sys.
		{Destination: "/sys", Type: "tmpfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro", "size=4k"}},
		{Destination: sandboxdir.LinkMount, Type: "bind", Source: filepath.Join(dir, "link"), Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}},
		{Destination: spec.Init[0], Type: "bind", Source: filepath.Join(dir, "init"), Options: []string{"bind", "ro", "nosuid", "nodev"}},
		{Destination: spec.ControlDir, Type: "bind", Source: filepath.Join(dir, "ctl"), Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
	}
	for _, m := range spec.Mounts {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	period := uint64(100_000)
	quota := l.CPUMillis * int64(period) / 1000
	// The process limit is the sandbox's pids cgroup (RLIMIT_NPROC counts a host uid, which every runc
	// sandbox shares): the limit, and room for the daemon and root's own.
	pids := l.Processes + 32
	mem := l.MemoryBytes
	swap := l.MemoryBytes // memory+swap = memory: no swap
	return &specs.Spec{
		Version:  specs.Version,
		Hostname: hostname,
		Root:     &specs.Root{Path: filepath.Join(dir, "rootfs")},
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: spec.Init,
			Env:  spec.Env,
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			// The open-file limit is the node's (a user namespace cannot raise it).
			NoNewPrivileges: true,
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(d.cfg.IDBase), Size: IDRange}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(d.cfg.IDBase), Size: IDRange}},
			CgroupsPath: d.cgroupPath(spec.ID),
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.UserNamespace}, {Type: specs.CgroupNamespace},
				{Type: specs.NetworkNamespace, Path: spec.NetNS}},
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &mem, Swap: &swap},
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:   &specs.LinuxPids{Limit: pids},
			},
			Seccomp:       Profile(),
			MaskedPaths:   maskedPaths(spec.Masks),
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

// maskedPaths are the paths runc hides in the container (under /dev/null or an empty read-only tmpfs):
// the kernel's files no container needs, and the template's host entries not every host user may
// read. (Root inside is a host user of the sandbox range, so a mode keeps host root's files from it
// already; the masks keep from it, too, the files of a host user who happens to be in that range.)
func maskedPaths(masks []runtime.Mask) []string {
	paths := []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
		"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
	for _, m := range masks {
		paths = append(paths, m.Path)
	}
	return paths
}

// runc builds a runc command with the driver's global flags.
func (d *Driver) runc(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, d.cfg.Runc, append([]string{"--root", filepath.Join(d.cfg.StateDir, "runc")}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	return cmd
}

// Status reports whether the sandbox runs. See runtime.Driver.
func (d *Driver) Status(ctx context.Context, id string) (runtime.Status, error) {
	return d.oci.Status(ctx, id, d.cgroupPath(id))
}

// Wait blocks until the sandbox's main process exits. See runtime.Driver.
func (d *Driver) Wait(ctx context.Context, id string) (runtime.Status, error) {
	return d.oci.Wait(ctx, id, d.cgroupPath(id))
}

// Destroy kills the container and removes every trace of it. See runtime.Driver.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("runc: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	var errs []error
	if err := d.oci.Delete(ctx, id); err != nil {
		errs = append(errs, err)
	}
	dir, pub := d.dir(id), d.pub(id)
	for _, m := range []string{filepath.Join(pub, "rootfs"), filepath.Join(pub, "init"), filepath.Join(dir, "disk"), filepath.Join(pub, "link")} {
		if err := sandboxdir.Unmount(m); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, sandboxdir.RemoveCgroups(d.cgroupPath(id))...)
	if len(errs) == 0 {
		for _, p := range []string{pub, dir} {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runc: destroy %s: %w", id, err)
	}
	return nil
}

// Close removes the empty cgroup parent and RunDir. Call it after every sandbox was destroyed.
func (d *Driver) Close() error {
	parents, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", d.cfg.CgroupParent))
	for _, p := range parents {
		_ = unix.Rmdir(p)
	}
	_ = os.Remove(d.cfg.RunDir)
	return nil
}

// RunDir reports the directory of what runc mounts into the sandboxes.
func (d *Driver) RunDir() string { return d.cfg.RunDir }

// List reports the sandboxes with a directory or a container on this host. See runtime.Driver.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	return d.oci.List(ctx, filepath.Join(d.cfg.StateDir, "sandboxes"))
}

// DialLink connects to the daemon of sandbox id beneath its link directory and reports the link key
// the daemon must prove itself with. See runtime.Driver.
func (d *Driver) DialLink(ctx context.Context, id string) (net.Conn, []byte, error) {
	if !idPattern.MatchString(id) {
		return nil, nil, fmt.Errorf("runc: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	key, err := d.sdir(id).LinkKey()
	if err != nil {
		return nil, nil, fmt.Errorf("runc: %w", err)
	}
	if key == nil {
		return nil, nil, fmt.Errorf("runc: sandbox %s has no link key: %w", id, errdefs.ErrFailedPrecondition)
	}
	conn, err := d.sdir(id).Dial(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("runc: %w", err)
	}
	return conn, key, nil
}

// CPUTime reads the CPU time of the sandbox's cgroup (cpuacct.usage). See runtime.CPUMeter.
func (d *Driver) CPUTime(ctx context.Context, id string) (time.Duration, error) {
	if !idPattern.MatchString(id) {
		return 0, fmt.Errorf("runc: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	t, err := sandboxdir.CPUTime(d.cgroupPath(id))
	if err != nil {
		return 0, fmt.Errorf("runc: sandbox %s: %w", id, err)
	}
	return t, nil
}

// Stats reads the sandbox's CPU time and memory from its cgroup and its disk's use from the host's mount
// of the disk image. See runtime.StatsReader.
func (d *Driver) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if !idPattern.MatchString(id) {
		return runtime.Stats{}, fmt.Errorf("runc: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	st, err := sandboxdir.Stats(d.cgroupPath(id), filepath.Join(d.dir(id), "disk"))
	if err != nil {
		return st, fmt.Errorf("runc: sandbox %s: %w", id, err)
	}
	return st, nil
}
