// Package runtime defines the runtime driver interface: how a node boots, watches and destroys one isolated
// sandbox. Drivers (gvisor, later runc and vm) live in sub-packages and register by name.
//
// The interface is deliberately small and keyed by sandbox ID, ctx first. Abilities that not every driver has
// (checkpoint with memory, restore, fork) are separate interfaces a caller discovers with a type assertion.
package runtime

import (
	"context"
	"net"
	"syscall"
	"time"
)

// Mount is a host path made visible inside the sandbox.
type Mount struct {
	// Source is the host path.
	Source string
	// Destination is the absolute path inside the sandbox.
	Destination string
	// ReadOnly makes the mount read-only inside the sandbox.
	ReadOnly bool
}

// Mask hides a path inside the sandbox, typically one of a Mount's host entries that not every host
// user may read, under an empty, read-only entry of its kind: its content and, for a directory, its
// entries are not readable in the sandbox, by root included.
type Mask struct {
	// Path is the absolute path inside the sandbox.
	Path string
	// Dir reports that Path is a directory (hidden under an empty directory); otherwise it is a file of
	// any other kind (hidden under an empty file).
	Dir bool
}

// Limits are the resource limits of one sandbox. Zero values mean the driver's default, never unlimited.
type Limits struct {
	// CPUMillis is the CPU quota in thousandths of a core (1000 = one core). Zero: 1000.
	CPUMillis int64
	// MemoryBytes caps the sandbox's memory; above it the sandbox is killed. Zero: 512 MiB.
	MemoryBytes int64
	// DiskBytes caps the sandbox's writable layer. Zero: 1 GiB.
	DiskBytes int64
	// Processes caps the number of processes the sandbox's non-root user may run at once. Zero: 512.
	Processes int64
}

// WithDefaults returns l with every zero field replaced by its default.
func (l Limits) WithDefaults() Limits {
	if l.CPUMillis <= 0 {
		l.CPUMillis = 1000
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = 512 << 20
	}
	if l.DiskBytes <= 0 {
		l.DiskBytes = 1 << 30
	}
	if l.Processes <= 0 {
		l.Processes = 512
	}
	return l
}

// Spec says what to boot.
type Spec struct {
	// ID names the sandbox; it is unique on the node and safe to use in file names.
	ID string
	// RootFS is the template's read-only root filesystem directory on the host. The sandbox sees it through
	// a private writable layer; the directory itself is never written.
	RootFS string
	// Mounts are extra mounts, e.g. the template's read-only binds of host directories.
	Mounts []Mount
	// Masks hide paths under Mounts, after them (the template's host entries not every host user may
	// read). A driver that cannot hide them refuses the spec.
	Masks []Mask
	// Init is the argv of the sandbox's first process: the in-sandbox daemon. Args[0] is a path inside
	// the sandbox. A restore keeps the argv its image was made with (runsc requires it unchanged).
	Init []string
	// LegacyInit is the argv the daemon had in sandboxes booted before images recorded theirs; a restore
	// of such an image uses it.
	LegacyInit []string
	// InitBinary is the host path of the daemon binary; it is mounted read-only at Init[0]. A restore
	// uses the binary its image was made with instead: the file of the name the image records, in
	// InitBinary's directory (the node keeps every version there, named by its content).
	InitBinary string
	// Env is the environment of the init process, which it passes on to the processes it starts.
	Env []string
	// Hostname of the sandbox. Empty: the ID.
	Hostname string
	// ControlDir is where, inside the sandbox, the driver mounts read-only the control directory
	// through which the host signals the daemon (proto.ControlKey, proto.ControlWake). Required.
	ControlDir string
	// ControlEnv, if not nil, is written into the control directory as the environment file
	// (proto.ControlEnv, readable by the sandbox's root only): a daemon restored from a template's start
	// snapshot takes it in place of Env it was checkpointed with, when it wakes.
	ControlEnv []string
	// NetNS is the path of the network namespace to join (a bind-mounted nsfs file).
	NetNS string
	// Limits are the resource limits.
	Limits Limits
}

// Sandbox is what Create reports about a booted sandbox.
type Sandbox struct {
	ID string
	// PID is the host PID of the sandbox's main process (the gVisor sentry for gvisor).
	PID int
	// CreatedAt is when the sandbox started.
	CreatedAt time.Time
}

// Status is what the driver knows of a sandbox's state.
type Status struct {
	// Running reports whether the sandbox's processes are alive (also when Paused).
	Running bool
	// Paused reports that the sandbox is frozen (after a checkpoint that did not leave it running); a
	// Pauser thaws it.
	Paused bool
	// Reason explains why a sandbox that is not running stopped (e.g. "out of memory (limit 512 MiB)").
	Reason string
}

// Driver boots and destroys sandboxes. Implementations are safe for concurrent use by different IDs;
// callers serialize calls for one ID.
type Driver interface {
	// Name is the name the driver is registered under ("gvisor").
	Name() string
	// Create boots a sandbox and returns once its init process runs and its daemon listens.
	// A failed Create leaves nothing behind on the host.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Wait blocks until the sandbox stops or ctx ends, and reports why it stopped.
	Wait(ctx context.Context, id string) (Status, error)
	// Status reports the sandbox's state without blocking. An unknown ID is errdefs.ErrNotFound.
	Status(ctx context.Context, id string) (Status, error)
	// Destroy kills the sandbox and removes everything of it from the host: processes, mounts, cgroups,
	// files. It is idempotent: destroying an unknown or half-created sandbox succeeds.
	Destroy(ctx context.Context, id string) error
	// List reports the IDs of the sandboxes the driver has on this host, e.g. to re-adopt them after a
	// node restart or to destroy orphans.
	List(ctx context.Context) ([]string, error)
	// DialLink connects to the sandbox's daemon and reports the link key the daemon must prove that it
	// holds (link.Options.Key): nil only for a sandbox restored from an image made before daemons had
	// keys. It never follows a path that a process in the sandbox could have changed.
	DialLink(ctx context.Context, id string) (net.Conn, []byte, error)
}

// WakeSignal is sent to a sandbox's init process when it runs again after a checkpoint that left it
// running, and when it was restored: an init that closed its host connections for the checkpoint (they
// cannot be saved) opens them again. Airlock's daemon does (see link.Client.Quiesce).
const WakeSignal = syscall.SIGUSR2

// CheckpointOptions control a checkpoint.
type CheckpointOptions struct {
	// LeaveRunning keeps the sandbox running after the checkpoint.
	LeaveRunning bool
}

// Checkpointer is implemented by drivers that can save a sandbox's live memory and process tree.
type Checkpointer interface {
	// Checkpoint writes the sandbox's state into imageDir.
	Checkpoint(ctx context.Context, id, imageDir string, opts CheckpointOptions) error
}

// FilesOnly is implemented by Checkpointers whose images hold a sandbox's files only, not its memory
// and processes: a sandbox restored from one boots anew (its processes restart from the template's
// start command) over the files it had. Such a checkpoint pauses the sandbox only while its files are
// archived.
type FilesOnly interface {
	// FilesOnly reports whether the driver's checkpoints hold files only.
	FilesOnly() bool
}

// ImageFiles is implemented by drivers whose checkpoint images hold the sandbox's writable layer as a tar
// archive (whiteouts as overlayfs's, see snapfs), so that a snapshot's files can be read without
// restoring it. Everything else in an image is the driver's own.
type ImageFiles interface {
	// FilesPart names the image's file (relative to the image directory) holding the layer.
	FilesPart() string
}

// Pauser is implemented by drivers whose checkpoints leave a sandbox frozen rather than gone, so that a
// pause abandoned (the snapshot could not be stored, or the node restarted) can let it run on.
type Pauser interface {
	// Unpause lets a frozen sandbox run again and sends it WakeSignal. A running sandbox is left alone.
	Unpause(ctx context.Context, id string) error
}

// Restorer is implemented by drivers that can boot a sandbox from a checkpoint image. Restoring the same
// image into several new IDs forks it.
type Restorer interface {
	// Restore boots spec.ID from the image in imageDir.
	Restore(ctx context.Context, spec Spec, imageDir string) (Sandbox, error)
}

// WarmRestorer is implemented by Restorers that can restore a sandbox ahead of its use: RestoreQuiesced
// boots it like Restore, its processes running, but leaves its daemon quiesced (not listening, so
// nothing can reach it) until Wake. The node keeps such sandboxes ready for the creates of a
// template's start snapshot (a warm pool), and wakes one with the environment of the create that
// takes it.
type WarmRestorer interface {
	Restorer
	// RestoreQuiesced boots spec.ID from the image in imageDir, its daemon left quiesced; spec.ControlEnv
	// is ignored (Wake gives it).
	RestoreQuiesced(ctx context.Context, spec Spec, imageDir string) (Sandbox, error)
	// Wake gives the daemon of a sandbox RestoreQuiesced booted env (as Spec.ControlEnv: it replaces
	// the environment the image was made with; nil keeps that) and wakes it, returning once it listens.
	Wake(ctx context.Context, id string, env []string) error
}

// Confined is implemented by drivers that run every process of their sandboxes, the runtime's own
// included (runsc's sandbox, runc's container), in cgroups under one parent, so that a node's fence
// keeper (internal/keeper) can stop them there without the driver, after the node process died.
type Confined interface {
	// CgroupParent is that parent, relative to each cgroup hierarchy's root (an OCI cgroupsPath).
	CgroupParent() string
}

// CPUMeter is implemented by drivers that can tell how much CPU time a sandbox used.
type CPUMeter interface {
	// CPUTime reports the CPU time the sandbox (its kernel and every process in it) used so far.
	CPUTime(ctx context.Context, id string) (time.Duration, error)
}

// Stats is one reading of a sandbox's resource use, taken from the host: from what the host's kernel
// counts for the sandbox, never from anything the sandbox could write.
type Stats struct {
	// CPUTime is the CPU time the sandbox used so far, as CPUMeter reports it.
	CPUTime time.Duration
	// MemoryUsed is the memory charged to the sandbox less what the kernel can drop at once (inactive
	// file pages): the working set, as container tools count it. Under gVisor it includes the sandbox's
	// kernel and its page cache (the sentry's memory).
	MemoryUsed int64
	// MemoryCache is the host page cache charged to the sandbox (files it read or wrote through the
	// host), shared memory excluded.
	MemoryCache int64
	// MemoryLimit is the sandbox's memory limit.
	MemoryLimit int64
	// DiskUsed and DiskTotal are the bytes used and the size of the sandbox's writable disk, as its
	// file system counts them (the total is the limit less the file system's own overhead).
	DiskUsed, DiskTotal int64
}

// StatsReader is implemented by drivers that can read a sandbox's resource use.
type StatsReader interface {
	// Stats reads the sandbox's resource use now. An unknown sandbox is errdefs.ErrNotFound.
	Stats(ctx context.Context, id string) (Stats, error)
}
