// Package fake is a runtime driver for fast unit tests of the code above the drivers (the node, the
// control plane). Each of its sandboxes is an instance of the real in-sandbox daemon (package daemon),
// run in the test's own process and serving on a unix socket in the driver's state directory: the node
// dials it through DialLink, the daemon proves the sandbox's link key, and commands run as they would
// in a sandbox.
//
// It provides no isolation whatsoever. A sandbox's processes are host processes of the test's user, on
// the host's file system and network; the template's root, its mounts, the network namespace and the
// limits of a Spec are checked for form and otherwise ignored. Use it to test logic, never isolation:
// package runtimetest is the suite real drivers pass.
//
// What a sandbox has of its own is a directory, its writable layer: the home directory of the daemon's
// default user, where its processes start. A checkpoint archives the layer (ImageFSFile) and records
// the sandbox in ImageFile; a restore unpacks the layer into a new sandbox. No memory is saved: a
// restored sandbox starts with a fresh daemon and no processes, and reports the image it came from
// (Info.RestoredFrom). A paused sandbox's daemon answers nobody; the processes it started run on.
//
// Host layout of one sandbox, under Config.StateDir/sandboxes/ID and all removed by Destroy:
//
//	daemon.sock   the daemon's socket, while it listens
//	ctl/          the control directory: the link key (proto.ControlKey) and the wake file
//	layer/        the writable layer
//
// Processes that left the daemon's process groups (setsid) survive Destroy: the fake has no cgroup or
// PID namespace to kill them by.
//
// Tests make an operation fail with Fail and make a sandbox stop by itself with Exit.
package fake

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/cleanup"
	"github.com/airlockrun/airlock/internal/daemon"
	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime"
)

// SocketName is the file name of a sandbox's daemon socket in its directory.
const SocketName = "daemon.sock"

// Config configures the driver. The zero value of every field but StateDir works.
type Config struct {
	// StateDir holds the sandboxes' directories (StateDir/sandboxes/ID). Required. Its path may be of
	// any length: sockets are bound and dialed through a descriptor of their directory.
	StateDir string
	// Logger receives the driver's and the daemons' logs. Nil: discarded.
	Logger *slog.Logger
}

// Op names an operation of the driver that Fail can make fail.
type Op string

// The operations Fail can make fail.
const (
	OpCreate     Op = "create"
	OpRestore    Op = "restore"
	OpWake       Op = "wake"
	OpCheckpoint Op = "checkpoint"
	OpUnpause    Op = "unpause"
	OpDestroy    Op = "destroy"
	OpDialLink   Op = "dial"
)

// Driver is the fake runtime driver. It is safe for concurrent use.
type Driver struct {
	cfg  Config
	log  *slog.Logger
	user daemon.User // the daemons' default user, the test's own; Home is set per sandbox

	mu sync.Mutex
	// sandboxes holds the sandboxes whose daemons run in this process, stopped ones included, by ID;
	// guarded by mu.
	sandboxes map[string]*sandbox
	// fail holds the errors Fail injected, by operation; guarded by mu.
	fail map[Op]error
}

var (
	_ runtime.Driver       = (*Driver)(nil)
	_ runtime.Checkpointer = (*Driver)(nil)
	_ runtime.Restorer     = (*Driver)(nil)
	_ runtime.Pauser       = (*Driver)(nil)
	_ runtime.ImageFiles   = (*Driver)(nil)
	_ runtime.StatsReader  = (*Driver)(nil)
)

// sandbox is one sandbox of the driver.
type sandbox struct {
	id      string
	dir     string
	spec    runtime.Spec
	env     []string // the daemon's base environment: the spec's, or the image's on a restore
	from    *Image   // the image it was restored from; nil if created
	created time.Time
	stop    context.CancelFunc // stops the daemon
	served  chan struct{}      // closed when the daemon's Serve returned
	wake    chan struct{}      // wakes the quiesced daemon (daemon.Config.Wake)
	stopped chan struct{}      // closed once the sandbox stopped: Exit, Destroy, Close, or its daemon ended

	// The fields below are guarded by Driver.mu.
	reason string // why it stopped, once stopped is closed
	paused bool
	// ln is the daemon's listening socket; nil while the daemon is quiesced.
	ln *listener
	// up is closed while ln is set; a new one is made when ln closes.
	up          chan struct{}
	checkpoints int
	unpauses    int
	// stats is what Stats reports (SetStats).
	stats runtime.Stats
	// serve starts the daemon of a sandbox RestoreQuiesced booted, until Wake calls it.
	serve func(env []string) error
}

// New returns a driver with its state under cfg.StateDir, which it creates.
func New(cfg Config) (*Driver, error) {
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("fake: StateDir is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "sandboxes"), 0o700); err != nil {
		return nil, fmt.Errorf("fake: %w", err)
	}
	u := daemon.User{Name: "fake", UID: os.Getuid(), GID: os.Getgid()}
	if cur, err := user.Current(); err == nil {
		u.Name = cur.Username
	}
	return &Driver{cfg: cfg, log: cfg.Logger.With("driver", "fake"), user: u, sandboxes: map[string]*sandbox{}, fail: map[Op]error{}}, nil
}

// Name reports "fake".
func (d *Driver) Name() string { return "fake" }

// Fail makes every later call of op fail with an error wrapping err, until Fail(op, nil). A create or
// restore fails before it makes anything; a checkpoint fails after it paused the sandbox (see
// Checkpoint); the others fail before they do anything.
func (d *Driver) Fail(op Op, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.fail, op)
		return
	}
	d.fail[op] = err
}

// failure reports the error Fail injected for op, wrapped with what failed, or nil.
func (d *Driver) failure(op Op, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.fail[op]; err != nil {
		return fmt.Errorf("fake: %s %s: %w", op, id, err)
	}
	return nil
}

var idPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`)

func (d *Driver) dir(id string) string { return filepath.Join(d.cfg.StateDir, "sandboxes", id) }

// Create starts a daemon for spec.ID and returns once it listens. See runtime.Driver.
func (d *Driver) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	if err := d.failure(OpCreate, spec.ID); err != nil {
		return runtime.Sandbox{}, err
	}
	return d.boot(spec, nil, "", false)
}

// checkSpec refuses a spec a real driver would refuse for its form.
func checkSpec(spec runtime.Spec) error {
	switch {
	case !idPattern.MatchString(spec.ID):
		return fmt.Errorf("fake: bad sandbox id %q: %w", spec.ID, errdefs.ErrInvalidArgument)
	case len(spec.Init) == 0 || !filepath.IsAbs(spec.Init[0]):
		return fmt.Errorf("fake: init must be an absolute path inside the sandbox: %w", errdefs.ErrInvalidArgument)
	case !filepath.IsAbs(spec.ControlDir):
		return fmt.Errorf("fake: the control directory must be an absolute path inside the sandbox: %w", errdefs.ErrInvalidArgument)
	}
	paths := []string{spec.RootFS, spec.InitBinary}
	if spec.NetNS != "" { // without one, a real driver makes a namespace of its own
		paths = append(paths, spec.NetNS)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("fake: sandbox %s: %w (%w)", spec.ID, err, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// boot makes the sandbox's directory, fills its layer from the image in imageDir (if img is not nil)
// and starts its daemon. On error nothing is left.
func (d *Driver) boot(spec runtime.Spec, img *Image, imageDir string, quiesced bool) (runtime.Sandbox, error) {
	if err := checkSpec(spec); err != nil {
		return runtime.Sandbox{}, err
	}
	dir := d.dir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return runtime.Sandbox{}, fmt.Errorf("fake: sandbox %s: %w", spec.ID, errdefs.ErrAlreadyExists)
		}
		return runtime.Sandbox{}, fmt.Errorf("fake: %w", err)
	}
	c := cleanup.Make(func() { os.RemoveAll(dir) })
	defer c.Clean()

	layer := filepath.Join(dir, "layer")
	if err := os.Mkdir(layer, 0o755); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("fake: %w", err)
	}
	env := spec.Env
	if img != nil {
		if err := readLayerTar(filepath.Join(imageDir, ImageFSFile), layer); err != nil {
			return runtime.Sandbox{}, fmt.Errorf("fake: restore %s: writable layer: %w", spec.ID, err)
		}
		// A real restore brings back the daemon's memory, and with it the environment it started with.
		env = img.Env
	}
	ctl := filepath.Join(dir, "ctl")
	if err := makeControlDir(ctl); err != nil {
		return runtime.Sandbox{}, fmt.Errorf("fake: sandbox %s control directory: %w", spec.ID, err)
	}

	sb := &sandbox{id: spec.ID, dir: dir, spec: spec, env: env, from: img, created: time.Now(),
		served: make(chan struct{}), wake: make(chan struct{}, 1), stopped: make(chan struct{}), up: make(chan struct{})}
	if img != nil {
		sb.checkpoints = img.Checkpoint
	}
	u := d.user
	u.Home = layer
	dctx, stop := context.WithCancel(context.Background())
	sb.stop = stop
	log := d.log.With("sandbox", spec.ID)
	// serve starts the daemon, with environment env.
	serve := func(env []string) error {
		ln, err := d.listen(sb)
		if err != nil {
			return fmt.Errorf("fake: sandbox %s: %w", spec.ID, err)
		}
		cfg := daemon.Config{
			DefaultUser: u,
			Env:         env,
			Control:     ctl,
			// The sandbox's identity goes into its layer, never the host's /etc.
			IdentityRoot: layer,
			Wake:         sb.wake,
			Listen:       func() (net.Listener, error) { return d.listen(sb) },
		}
		go func() { // owner: sb; ends when sb.stop is called (Exit, Destroy, Close)
			err := daemon.Serve(dctx, ln, cfg, log)
			close(sb.served)
			reason := "sandbox exited"
			if err != nil {
				reason = "sandbox daemon failed: " + err.Error()
			}
			d.markStopped(sb, reason)
		}()
		return nil
	}
	if quiesced {
		sb.serve = serve
	} else if err := serve(env); err != nil {
		return runtime.Sandbox{}, err
	}
	d.mu.Lock()
	d.sandboxes[spec.ID] = sb
	d.mu.Unlock()
	c.Release()
	return runtime.Sandbox{ID: spec.ID, PID: os.Getpid(), CreatedAt: sb.created}, nil
}

// makeControlDir makes the control directory at p with a fresh link key and a wake file.
func makeControlDir(p string) error {
	if err := os.Mkdir(p, 0o755); err != nil {
		return err
	}
	key := make([]byte, proto.LinkKeySize)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(p, proto.ControlKey), key, 0o400); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p, proto.ControlWake), []byte("0"), 0o644)
}

// listen makes the daemon's listening socket of sb, replacing a stale socket file, and records that the
// daemon listens. The socket is bound through a descriptor of its directory, so that the path of the
// state directory may be longer than a socket address (108 bytes).
func (d *Driver) listen(sb *sandbox) (net.Listener, error) {
	path := filepath.Join(sb.dir, SocketName)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("listen: %w", err)
	}
	dir, err := os.Open(sb.dir)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	defer dir.Close()
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Net: "unix", Name: fdPath(dir, SocketName)})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The name it was bound under stops naming the socket once dir is closed: the listener removes the
	// file by its real path (listener.Close).
	ul.SetUnlinkOnClose(false)
	l := &listener{Listener: ul, path: path, d: d, sb: sb}
	d.mu.Lock()
	sb.ln = l
	select {
	case <-sb.up:
	default:
		close(sb.up)
	}
	d.mu.Unlock()
	return l, nil
}

// fdPath names the file name in the directory dir through dir's descriptor.
func fdPath(dir *os.File, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + name
}

// listener is a daemon's listening socket. It is not a *net.UnixListener, so the daemon leaves its
// unlinking alone; closing it removes the socket file and records that the daemon stopped listening.
type listener struct {
	net.Listener
	path string
	d    *Driver
	sb   *sandbox
	once sync.Once
}

// Close closes the socket and removes its file.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		err = l.Listener.Close()
		l.d.mu.Lock()
		defer l.d.mu.Unlock()
		if l.sb.ln == l {
			l.sb.ln = nil
			l.sb.up = make(chan struct{})
			os.Remove(l.path)
		}
	})
	return err
}

// markStopped records that sb stopped and why, unless it stopped already.
func (d *Driver) markStopped(sb *sandbox, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-sb.stopped:
	default:
		sb.reason = reason
		close(sb.stopped)
	}
}

// halt stops sb with reason (unless it stopped already): its daemon kills the processes it started and
// returns. It returns once the daemon did.
func (d *Driver) halt(sb *sandbox, reason string) {
	d.markStopped(sb, reason)
	sb.stop()
	d.mu.Lock()
	never := sb.serve != nil // restored quiesced, never woken: no daemon to wait for
	sb.serve = nil
	d.mu.Unlock()
	if never {
		close(sb.served)
	}
	<-sb.served
}

// Exit makes sandbox id stop by itself, as a sandbox whose daemon died or that ran out of memory does:
// its daemon stops, and Wait and Status report reason. Its directory stays until Destroy. An unknown
// ID is errdefs.ErrNotFound.
func (d *Driver) Exit(id, reason string) error {
	d.mu.Lock()
	sb := d.sandboxes[id]
	d.mu.Unlock()
	if sb == nil {
		return fmt.Errorf("fake: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	d.halt(sb, reason)
	return nil
}

// leftReason is the stop reason of a sandbox whose directory a driver before this one left.
const leftReason = "its driver is gone"

// Status reports whether the sandbox runs. A directory a previous driver left over (see Close) is a
// sandbox that stopped. See runtime.Driver.
func (d *Driver) Status(ctx context.Context, id string) (runtime.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sb := d.sandboxes[id]; sb != nil {
		select {
		case <-sb.stopped:
			return runtime.Status{Reason: sb.reason}, nil
		default:
			return runtime.Status{Running: true, Paused: sb.paused}, nil
		}
	}
	if idPattern.MatchString(id) {
		if _, err := os.Lstat(d.dir(id)); err == nil {
			return runtime.Status{Reason: leftReason}, nil
		}
	}
	return runtime.Status{}, fmt.Errorf("fake: sandbox %s: %w", id, errdefs.ErrNotFound)
}

// Wait blocks until the sandbox stops or ctx ends. See runtime.Driver.
func (d *Driver) Wait(ctx context.Context, id string) (runtime.Status, error) {
	d.mu.Lock()
	sb := d.sandboxes[id]
	d.mu.Unlock()
	if sb == nil {
		return d.Status(ctx, id)
	}
	select {
	case <-sb.stopped:
	case <-ctx.Done():
		return runtime.Status{}, ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return runtime.Status{Reason: sb.reason}, nil
}

// Destroy stops the sandbox's daemon, which kills the processes it started, and removes its directory.
// Unknown IDs succeed. See runtime.Driver.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("fake: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	if err := d.failure(OpDestroy, id); err != nil {
		return err
	}
	d.mu.Lock()
	sb := d.sandboxes[id]
	delete(d.sandboxes, id)
	d.mu.Unlock()
	if sb != nil {
		d.halt(sb, "sandbox destroyed")
	}
	if err := os.RemoveAll(d.dir(id)); err != nil {
		return fmt.Errorf("fake: destroy %s: %w", id, err)
	}
	return nil
}

// List reports the sandboxes with a directory, running or not. See runtime.Driver.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(d.cfg.StateDir, "sandboxes"))
	if err != nil {
		return nil, fmt.Errorf("fake: list: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if idPattern.MatchString(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// DialLink connects to the daemon of sandbox id and reports its link key, which the daemon proves it
// holds. A sandbox that is paused, stopped or whose daemon is quiesced is errdefs.ErrUnavailable. See
// runtime.Driver.
func (d *Driver) DialLink(ctx context.Context, id string) (net.Conn, []byte, error) {
	if !idPattern.MatchString(id) {
		return nil, nil, fmt.Errorf("fake: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	if err := d.failure(OpDialLink, id); err != nil {
		return nil, nil, err
	}
	sb, err := d.running(id)
	if err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	paused := sb.paused
	d.mu.Unlock()
	if paused {
		return nil, nil, fmt.Errorf("fake: sandbox %s is paused: %w", id, errdefs.ErrUnavailable)
	}
	key, err := os.ReadFile(filepath.Join(sb.dir, "ctl", proto.ControlKey))
	if err != nil {
		return nil, nil, fmt.Errorf("fake: link key of %s: %w", id, err)
	}
	dir, err := os.Open(sb.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("fake: dial the daemon of %s: %w (%w)", id, err, errdefs.ErrUnavailable)
	}
	defer dir.Close()
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "unix", fdPath(dir, SocketName))
	if err != nil {
		return nil, nil, fmt.Errorf("fake: dial the daemon of %s: %w (%w)", id, err, errdefs.ErrUnavailable)
	}
	return conn, key, nil
}

// running returns sandbox id if it runs (paused or not): errdefs.ErrNotFound if the driver has no such
// sandbox, errdefs.ErrUnavailable if it stopped.
func (d *Driver) running(id string) (*sandbox, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sb := d.sandboxes[id]
	if sb == nil {
		return nil, fmt.Errorf("fake: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	select {
	case <-sb.stopped:
		return nil, fmt.Errorf("fake: sandbox %s stopped (%s): %w", id, sb.reason, errdefs.ErrUnavailable)
	default:
		return sb, nil
	}
}

// SetStats makes Stats report st for sandbox id, which must be the driver's.
func (d *Driver) SetStats(id string, st runtime.Stats) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	sb := d.sandboxes[id]
	if sb == nil {
		return fmt.Errorf("fake: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	sb.stats = st
	return nil
}

// Stats reports what SetStats set for a running sandbox (the zero Stats until then): the fake measures
// nothing. See runtime.StatsReader.
func (d *Driver) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if !idPattern.MatchString(id) {
		return runtime.Stats{}, fmt.Errorf("fake: bad sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	sb, err := d.running(id)
	if err != nil {
		return runtime.Stats{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return sb.stats, nil
}

// Close stops every sandbox's daemon, as a restart of the host would: the sandboxes' directories stay,
// and a driver made again on the same StateDir lists them as stopped, for Destroy to remove. Tests call
// it from their cleanup; the driver is unusable afterwards.
func (d *Driver) Close() error {
	d.mu.Lock()
	all := make([]*sandbox, 0, len(d.sandboxes))
	for _, sb := range d.sandboxes {
		all = append(all, sb)
	}
	d.sandboxes = map[string]*sandbox{}
	d.mu.Unlock()
	for _, sb := range all {
		d.halt(sb, "the driver closed")
	}
	return nil
}

// Info is what the driver knows of one of its sandboxes, for tests to check.
type Info struct {
	// Spec is the spec the sandbox was created or restored with.
	Spec runtime.Spec
	// Env is the daemon's base environment: the spec's, or the image's for a restored sandbox.
	Env []string
	// Layer is the host directory of the sandbox's writable layer, the home directory of the daemon's
	// default user.
	Layer string
	// RestoredFrom is the record of the image the sandbox was restored from; nil if it was created.
	RestoredFrom *Image
	// Checkpoints counts the checkpoints made of the sandbox, and of the sandboxes whose images it was
	// restored from.
	Checkpoints int
	// Unpauses counts the calls of Unpause that reached the sandbox.
	Unpauses int
	// Listening reports whether the daemon listens (it does not while quiesced).
	Listening bool
	// Status is what Status reports.
	Status runtime.Status
}

// Info reports what the driver knows of sandbox id: errdefs.ErrNotFound unless it runs, or stopped
// without being destroyed, in this driver.
func (d *Driver) Info(id string) (Info, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sb := d.sandboxes[id]
	if sb == nil {
		return Info{}, fmt.Errorf("fake: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	info := Info{Spec: sb.spec, Env: sb.env, Layer: filepath.Join(sb.dir, "layer"), RestoredFrom: sb.from,
		Checkpoints: sb.checkpoints, Unpauses: sb.unpauses, Listening: sb.ln != nil}
	select {
	case <-sb.stopped:
		info.Status = runtime.Status{Reason: sb.reason}
	default:
		info.Status = runtime.Status{Running: true, Paused: sb.paused}
	}
	return info, nil
}
