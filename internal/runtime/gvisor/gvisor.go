// Package gvisor is the default runtime driver: each sandbox is a gVisor (runsc) container with the systrap
// platform, its own OCI bundle, a read-only template root under a private writable layer on a size-capped
// disk image, cgroup limits, and a network namespace the node prepares.
//
// Host layout of one sandbox, all under Config.StateDir/sandboxes/ID and all removed by Destroy:
//
//	config.json   OCI spec
//	disk.img      ext4 image, allocated up front, mounted at disk/ through a loop device (the disk limit)
//	disk/upper    the writable layer; disk/work is overlayfs's work dir
//	rootfs/       overlayfs: template (lower, never written) + disk/upper
//	link/         a small tmpfs mounted at /run/airlock inside; the daemon creates daemon.sock here
//	ctl/          the control directory, mounted read-only at runtime.Spec.ControlDir (linkdir.go)
//	console.log   the daemon's own stdout and stderr
package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/cleanup"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/sandboxdir"
)

// LinkDir is where the daemon's socket directory is mounted inside the sandbox.
const LinkDir = sandboxdir.LinkMount

// LinkSocketName is the file name of the daemon's socket in LinkDir.
const LinkSocketName = sandboxdir.SocketName

// Config configures the driver. The zero value of every field but StateDir works.
type Config struct {
	// Runsc is the runsc binary. Empty: "runsc" from PATH.
	Runsc string
	// StateDir holds runsc's state (StateDir/runsc) and the sandboxes' directories. Required.
	StateDir string
	// Platform is the gVisor platform. Empty: "systrap".
	Platform string
	// CgroupParent is the cgroup under which each sandbox gets its own. Empty: "/airlock".
	CgroupParent string
	// Debug writes runsc's debug logs into each sandbox's directory (they are removed with it).
	Debug bool
	// Logger receives the driver's logs. Nil: slog.Default().
	Logger *slog.Logger
}

// Driver is the gVisor runtime driver.
type Driver struct {
	cfg Config
	log *slog.Logger
	oci sandboxdir.OCI
	// cpuV1 reports the host's cgroup v1 cpu hierarchy, where the driver adjusts quotas (cgroups.go).
	cpuV1 bool
	// settles are the sandboxes whose quota is still to be settled after their boot period (cgroups.go).
	settleMu sync.Mutex
	settles  map[string]chan struct{}
	// parks are the sandboxes RestoreQuiesced restored and Wake has not woken yet (warm.go); guarded
	// by parkMu.
	parkMu sync.Mutex
	parks  map[string]*park
}

var _ runtime.Driver = (*Driver)(nil)

// New returns a driver. It checks that runsc can be found and creates the state directories.
func New(cfg Config) (*Driver, error) {
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("gvisor: StateDir is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Runsc == "" {
		cfg.Runsc = "runsc"
	}
	p, err := exec.LookPath(cfg.Runsc)
	if err != nil {
		return nil, fmt.Errorf("gvisor: runsc not found (install it with scripts/install.sh): %w", err)
	}
	cfg.Runsc = p
	if cfg.Platform == "" {
		cfg.Platform = "systrap"
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "/airlock"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, "runsc"), filepath.Join(cfg.StateDir, "sandboxes")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor: %w", err)
		}
	}
	_, err = os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
	d := &Driver{cfg: cfg, log: cfg.Logger.With("driver", "gvisor"), cpuV1: err == nil}
	if err := makeMaskFile(d.maskFile()); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	d.oci = sandboxdir.OCI{Name: "gvisor", Command: d.runsc}
	return d, nil
}

// Name reports "gvisor".
func (d *Driver) Name() string { return "gvisor" }

// CgroupParent is the cgroup every sandbox's runsc processes run under. See runtime.Confined.
func (d *Driver) CgroupParent() string { return d.cfg.CgroupParent }

var idPattern = sandboxdir.IDPattern

func (d *Driver) dir(id string) string { return filepath.Join(d.cfg.StateDir, "sandboxes", id) }

// maskFile is the empty, unreadable file bound over each file a spec masks (runtime.Spec.Masks).
func (d *Driver) maskFile() string { return filepath.Join(d.cfg.StateDir, "mask") }

// maskSource names the tmpfs of a directory's mask in the spec (a tmpfs has no source; this one tells
// it from the sandbox's other tmpfs mounts).
const maskSource = "airlock-mask"

// specMasks reports the masks an OCI spec the driver wrote hides (runtime.Spec.Masks), in its order.
func (d *Driver) specMasks(spec specs.Spec) []runtime.Mask {
	var out []runtime.Mask
	for _, m := range spec.Mounts {
		switch {
		case m.Type == "tmpfs" && m.Source == maskSource:
			out = append(out, runtime.Mask{Path: m.Destination, Dir: true})
		case m.Type == "bind" && m.Source == d.maskFile():
			out = append(out, runtime.Mask{Path: m.Destination})
		}
	}
	return out
}

// makeMaskFile makes p an empty regular file of mode 0 (emptied if it was not), never through a link.
func makeMaskFile(p string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("mask file: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("mask file %s: not a regular file (%v)", p, err)
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("mask file: %w", err)
	}
	if err := f.Chmod(0); err != nil {
		return fmt.Errorf("mask file: %w", err)
	}
	return nil
}

func (d *Driver) cgroupPath(id string) string { return filepath.Join(d.cfg.CgroupParent, id) }

// Create boots spec as a runsc container. See runtime.Driver.
func (d *Driver) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	return d.boot(ctx, spec, nil, []string{"run", "--detach"}, imageLink{Control: true}, false)
}

// boot prepares the sandbox's directory, disk and root, fills the writable layer with fill (if not
// nil), makes the link directory with what lnk says it holds and a control directory if lnk says so,
// and starts the container with the runsc command start ("run …" or "restore …"; the bundle and ID
// are appended). A restore wakes the daemon and waits until it listens, unless quiesced. On error
// nothing is left.
func (d *Driver) boot(ctx context.Context, spec runtime.Spec, fill func(dir string) error, start []string, lnk imageLink, quiesced bool) (runtime.Sandbox, error) {
	if !idPattern.MatchString(spec.ID) {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: bad sandbox id %q: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	if len(spec.Init) == 0 || !filepath.IsAbs(spec.Init[0]) {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: init must be an absolute path inside the sandbox: %w", errdefs.ErrInvalidArgument)
	}
	if lnk.Control && !filepath.IsAbs(spec.ControlDir) {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: the control directory must be an absolute path inside the sandbox: %w", errdefs.ErrInvalidArgument)
	}
	if !lnk.Control {
		spec.ControlDir = ""
	}
	spec.Limits = spec.Limits.WithDefaults()
	dir := d.dir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return runtime.Sandbox{}, fmt.Errorf("gvisor: sandbox %s: %w", spec.ID, errdefs.ErrAlreadyExists)
		}
		return runtime.Sandbox{}, fmt.Errorf("gvisor: %w", err)
	}
	c := cleanup.Make(func() {
		// Destroy undoes whatever subset of the steps below ran.
		if err := d.Destroy(context.WithoutCancel(ctx), spec.ID); err != nil {
			d.log.Warn("undo half-created sandbox", "sandbox", spec.ID, "err", err)
		}
	})
	defer c.Clean()

	t0 := time.Now()
	if err := sandboxdir.MakeDisk(filepath.Join(dir, "disk.img"), filepath.Join(dir, "disk"), spec.Limits.DiskBytes); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: sandbox %s disk: %w", spec.ID, err)
	}
	upper, work := filepath.Join(dir, "disk", "upper"), filepath.Join(dir, "disk", "work")
	for _, p := range []string{upper, work} {
		if err := os.Mkdir(p, 0o755); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("gvisor: %w", err)
		}
	}
	if fill != nil {
		if err := fill(dir); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("gvisor: sandbox %s: writable layer: %w", spec.ID, err)
		}
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: %w", err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", spec.RootFS, upper, work)
	if err := unix.Mount("overlay", rootfs, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: mount writable layer: %w", err)
	}
	if err := sandboxdir.Dir(dir).MakeLinkDir(0); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: %w", err)
	}
	if err := restoreLinkDir(filepath.Join(dir, "link"), lnk.Entries); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: sandbox %s: %w", spec.ID, err)
	}
	if spec.ControlDir != "" {
		if err := sandboxdir.Dir(dir).MakeControlDir(0); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("gvisor: sandbox %s control directory: %w", spec.ID, err)
		}
		if spec.ControlEnv != nil {
			if err := sandboxdir.Dir(dir).WriteControlEnv(spec.ControlEnv, 0); err != nil {
				return runtime.Sandbox{}, fmt.Errorf("gvisor: sandbox %s control directory: %w", spec.ID, err)
			}
		}
	}

	tDisk := time.Since(t0)
	oci, err := d.ociSpec(spec, dir)
	if err != nil {
		return runtime.Sandbox{}, err
	}
	b, err := json.Marshal(oci)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: encode spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: %w", err)
	}

	console, err := os.OpenFile(filepath.Join(dir, "console.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: %w", err)
	}
	defer console.Close()
	// --detach: runsc returns once the container runs. Its stdio are files, never pipes we would have to
	// drain (a detached container holds them open for its whole life).
	// The PID comes from a file runsc writes, which spares a "runsc state" (a process start) per boot.
	pidFile := filepath.Join(dir, "pid")
	cmd := d.runsc(ctx, append(start, "--pid-file", pidFile, "--bundle", dir, spec.ID)...)
	cmd.Stdin = nil
	cmd.Stdout = console
	cmd.Stderr = console
	if err := cmd.Run(); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: runsc %s %s: %v: %s", start[0], spec.ID, err, sandboxdir.Tail(filepath.Join(dir, "console.log")))
	}
	tRun := time.Since(t0)
	if start[0] == "restore" && !quiesced {
		// The restored daemon waits, quiesced, for this to listen again.
		if err := d.wake(ctx, spec.ID); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("gvisor: restore %s: %w", spec.ID, err)
		}
	}
	pid, err := sandboxdir.ReadPID(pidFile)
	if err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: sandbox %s: %w", spec.ID, err)
	}
	tState := time.Since(t0)
	if !quiesced {
		if err := d.waitForSocket(ctx, spec.ID, 15*time.Second); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("gvisor: sandbox %s daemon did not start: %w: %s", spec.ID, err, sandboxdir.Tail(filepath.Join(dir, "console.log")))
		}
	}
	if err := d.settleAfterBoot(spec.ID); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("gvisor: sandbox %s: %w", spec.ID, err)
	}
	c.Release()
	d.log.Debug("runsc sandbox up", "sandbox", spec.ID, "how", start[0], "disk", tDisk, "run", tRun-tDisk, "wake", tState-tRun, "socket", time.Since(t0)-tState)
	return runtime.Sandbox{ID: spec.ID, PID: pid, CreatedAt: time.Now()}, nil
}

// readSpec reads the OCI spec sandbox id was booted with.
func (d *Driver) readSpec(id string) (specs.Spec, error) {
	var spec specs.Spec
	p := filepath.Join(d.dir(id), "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return spec, err
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, fmt.Errorf("%s: %w", p, err)
	}
	return spec, nil
}

// runsc builds a runsc command with the driver's global flags.
func (d *Driver) runsc(ctx context.Context, args ...string) *exec.Cmd {
	global := []string{
		"--root=" + filepath.Join(d.cfg.StateDir, "runsc"),
		"--platform=" + d.cfg.Platform,
		"--network=sandbox",
		// The daemon creates its socket in the link mount; sandbox code can create sockets but never
		// connect to a host socket ("open" is not granted).
		"--host-uds=create",
		// The writable layer is the host overlay on the sandbox's own disk image.
		"--overlay2=none",
	}
	if d.cfg.Debug && len(args) > 0 && (args[0] == "run" || args[0] == "restore") {
		global = append(global, "--debug", "--debug-log="+filepath.Join(d.dir(args[len(args)-1]), "runsc-logs")+"/")
	}
	cmd := exec.CommandContext(ctx, d.cfg.Runsc, append(global, args...)...)
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
		return fmt.Errorf("gvisor: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	d.stopSettle(id)
	d.unpark(id)
	var errs []error
	if err := d.oci.Delete(ctx, id); err != nil {
		errs = append(errs, err)
	}
	dir := d.dir(id)
	// Overlay first (it holds the disk's upper dir), then the disk (autoclear frees its loop device),
	// and the link directory's tmpfs.
	for _, m := range []string{filepath.Join(dir, "rootfs"), filepath.Join(dir, "disk"), filepath.Join(dir, "link")} {
		if err := sandboxdir.Unmount(m); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, sandboxdir.RemoveCgroups(d.cgroupPath(id))...)
	if len(errs) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gvisor: destroy %s: %w", id, err)
	}
	return nil
}

// Close releases what the driver holds on the host beyond its sandboxes: the empty cgroup parent, and
// the shared, empty network namespace runsc pins for its gofers at StateDir/runsc/null-netns (stacked
// when concurrent starts raced), which would otherwise stay mounted. Call it after every sandbox was
// destroyed.
func (d *Driver) Close() error {
	// The cgroup parent, if no sandbox is left under it (rmdir fails on a cgroup with children).
	parents, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", d.cfg.CgroupParent))
	for _, p := range parents {
		_ = unix.Rmdir(p)
	}
	path := filepath.Join(d.cfg.StateDir, "runsc", "null-netns")
	for unix.Unmount(path, unix.MNT_DETACH) == nil {
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("gvisor: close: %w", err)
	}
	return nil
}

// List reports the sandboxes with a directory or a container on this host. See runtime.Driver.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	return d.oci.List(ctx, filepath.Join(d.cfg.StateDir, "sandboxes"))
}

// ociSpec builds the OCI runtime spec of a sandbox.
func (d *Driver) ociSpec(spec runtime.Spec, dir string) (*specs.Spec, error) {
	l := spec.Limits
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	// The daemon runs as root inside the sandbox so that it can start processes as any user; the
	// capability set is the usual container one: no CAP_SYS_ADMIN, no CAP_SYS_RESOURCE, so the
	// process limit (RLIMIT_NPROC, which gVisor enforces per user) binds root as well.
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
		"CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE", "CAP_SETFCAP"}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: LinkDir, Type: "bind", Source: filepath.Join(dir, "link"), Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}},
		{Destination: spec.Init[0], Type: "bind", Source: spec.InitBinary, Options: []string{"bind", "ro", "nosuid", "nodev"}},
	}
	if spec.ControlDir != "" {
		mounts = append(mounts, specs.Mount{Destination: spec.ControlDir, Type: "bind", Source: filepath.Join(dir, "ctl"), Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}})
	}
	for _, m := range spec.Mounts {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	// What the mounts show that not every host user may read, hidden after them: the sentry and its
	// gofer read host files as host root would (CAP_DAC_OVERRIDE), so a mode alone keeps nothing from
	// root inside. A directory under an empty read-only tmpfs (the sentry's own memory, no host file), a
	// file under the driver's empty one.
	for _, m := range spec.Masks {
		if !filepath.IsAbs(m.Path) {
			return nil, fmt.Errorf("gvisor: mask %q: not an absolute path: %w", m.Path, errdefs.ErrInvalidArgument)
		}
		if m.Dir {
			mounts = append(mounts, specs.Mount{Destination: m.Path, Type: "tmpfs", Source: maskSource, Options: []string{"ro", "nosuid", "nodev", "noexec", "mode=000"}})
		} else {
			mounts = append(mounts, specs.Mount{Destination: m.Path, Type: "bind", Source: d.maskFile(), Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
		}
	}
	// The share of the CPU over a long period while it boots; settleCPUQuota shortens it (cgroups.go).
	period := uint64(bootCPUPeriod)
	quota := l.CPUMillis * int64(period) / 1000
	// Host threads of the sentry count against the host pids limit; it only guards the host, the process
	// limit inside is RLIMIT_NPROC.
	hostPids := int64(8192)
	ns := []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}}
	if spec.NetNS != "" {
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: spec.NetNS})
	} else {
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	nproc := uint64(l.Processes)
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
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NPROC", Hard: nproc, Soft: nproc},
				{Type: "RLIMIT_NOFILE", Hard: 65536, Soft: 65536},
			},
			NoNewPrivileges: true,
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			CgroupsPath: d.cgroupPath(spec.ID),
			Namespaces:  ns,
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &l.MemoryBytes},
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:   &specs.LinuxPids{Limit: hostPids},
			},
		},
	}, nil
}

var (
	_ runtime.CPUMeter    = (*Driver)(nil)
	_ runtime.StatsReader = (*Driver)(nil)
)

// CPUTime reads the CPU time of the sandbox's cgroup (cpuacct.usage). See runtime.CPUMeter.
func (d *Driver) CPUTime(ctx context.Context, id string) (time.Duration, error) {
	if !idPattern.MatchString(id) {
		return 0, fmt.Errorf("gvisor: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	t, err := sandboxdir.CPUTime(d.cgroupPath(id))
	if err != nil {
		return 0, fmt.Errorf("gvisor: sandbox %s: %w", id, err)
	}
	return t, nil
}

// Stats reads the sandbox's CPU time and memory from its cgroup and its disk's use from the host's mount
// of the disk image. See runtime.StatsReader.
func (d *Driver) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if !idPattern.MatchString(id) {
		return runtime.Stats{}, fmt.Errorf("gvisor: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	st, err := sandboxdir.Stats(d.cgroupPath(id), filepath.Join(d.dir(id), "disk"))
	if err != nil {
		return st, fmt.Errorf("gvisor: sandbox %s: %w", id, err)
	}
	return st, nil
}
