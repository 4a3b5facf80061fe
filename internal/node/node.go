// Package node holds the node services of one host: it boots sandboxes through a runtime driver, gives each
// its own network namespace, keeps the channel (link) to each sandbox's daemon, watches for sandboxes that
// die, and re-adopts the sandboxes still running after a node restart.
//
// In single-binary mode the control plane calls a Local node in-process.
package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/cleanup"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/netns"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/template"
)

// InitPath is where the daemon binary is mounted inside every sandbox.
const InitPath = "/.airlock/init"

// LinkSocket is the daemon's socket inside every sandbox.
const LinkSocket = "/run/airlock/daemon.sock"

// ControlDir is where the control directory (the link key and wake file, which only the host writes)
// is mounted read-only inside every sandbox.
const ControlDir = "/.airlock/ctl"

// legacyInit is the daemon's argv in sandboxes booted before images recorded theirs (the daemon was
// the airlock binary, run as "airlock sandbox-init"): their restores must repeat it.
var legacyInit = []string{InitPath, "sandbox-init", "-socket", LinkSocket}

// InitArgs is the daemon's argv inside every sandbox, after extra flags.
func InitArgs(extra ...string) []string {
	return append(append([]string{InitPath}, extra...), "-socket", LinkSocket, "-control", ControlDir)
}

// templateArgs are the daemon's arguments an image template's config gives: its user (the default
// user when it resolves in the image), working directory and command (Entrypoint then Cmd, for a
// process whose request names none). Each is one "-flag=value" argument, so a value cannot be read as
// a flag of its own; the store checked them at import.
func templateArgs(tpl template.Template) []string {
	var args []string
	if argv := append(append([]string(nil), tpl.Entrypoint...), tpl.Cmd...); len(argv) > 0 && argv[0] != "" {
		b, _ := json.Marshal(argv)
		args = append(args, "-image-cmd="+string(b))
	}
	if tpl.User != "" {
		args = append(args, "-image-user="+tpl.User)
	}
	if tpl.WorkingDir != "" {
		args = append(args, "-workdir="+tpl.WorkingDir)
	}
	return args
}

// Config configures a Local node.
type Config struct {
	// ID names the node. Empty: nodecontract.LocalID.
	ID string
	// TenantAudit, if set, gives the audit that also records the frames of a sandbox's daemon channel
	// (the tenant's audit log).
	TenantAudit func(tenantID, sandboxID string) link.Audit
	// DataDir holds the node's state: DataDir/netns, DataDir/audit (and the flow log's files, by
	// convention in DataDir/flows). Required.
	DataDir string
	// Driver runs the sandboxes by default. Required.
	Driver runtime.Driver
	// More are the node's other runtime drivers, each chosen by its name (nodecontract.CreateRequest.Runtime).
	More []runtime.Driver
	// Templates resolves template names. Required.
	Templates template.Registry
	// Gateway, if set, gives each sandbox a veth to the host through which all its traffic goes to the
	// gateway. Nil: sandboxes have a network namespace with loopback only.
	Gateway *gateway.Gateway
	// FlowLog is where the Gateway records the sandboxes' network flows, read back by Flows. Nil: the
	// node has no flow log.
	FlowLog *flowlog.Log
	// IfacePrefix is the name prefix of the sandboxes' host-side veths (the gateway's). Required with
	// Gateway; at most 6 characters.
	IfacePrefix string
	// DaemonBinary is the host path of the static daemon binary mounted into every sandbox. Required.
	DaemonBinary string
	// DaemonArgs are more arguments for the daemon, before the socket and control flags (see InitArgs).
	DaemonArgs []string
	// Snapshots is the snapshot store the node writes checkpoint images into and restores them from,
	// with the grants control planes give it (a store without a key provider will do). Nil: the node
	// keeps no snapshots; checkpoints and restores fail.
	Snapshots *snapshot.Store
	// SnapshotCalls is what the node asks of the control plane for the snapshots it takes: the tenant's
	// grant to store one, and the report that it is stored (or lost). Nil: the node stores nothing in the
	// background, and Snapshot fails.
	SnapshotCalls nodecontract.SnapshotCalls
	// ImageCacheBytes bounds the images the node keeps after they are stored or fetched
	// (DataDir/images/cache), for fast resumes and forks. Zero: DefaultImageCacheBytes; negative: none.
	ImageCacheBytes int64
	// WarmPool is how many sandboxes the node keeps restored ahead for each kind of create of a
	// template's start snapshot (warm.go). Zero: DefaultWarmPool; negative: none.
	WarmPool int
	// OnExit is called, from a goroutine of the node, when a sandbox stops without being destroyed through
	// the node: its daemon or runtime died, or it ran out of memory. Nil: ignored.
	OnExit func(id, reason string)
	// Logger receives logs. Nil: slog.Default().
	Logger *slog.Logger
}

// Local is the node of this host.
type Local struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// sandboxes holds the sandboxes this node runs, by ID; guarded by mu.
	sandboxes map[string]*sandbox
	// closed is set by Shutdown; guarded by mu.
	closed bool
	// fences holds the largest fencing token seen per session (nodecontract.CreateRequest.Fence); guarded by mu.
	fences map[string]int64

	wg sync.WaitGroup // watchers
	// images is the node's share of the snapshot pipeline (images.go); nil without Config.Snapshots.
	images *images
	// drv are the runtime drivers, and which one runs each sandbox (drivers.go).
	drv *drivers
	// starts are the templates' start snapshots (start.go).
	starts *starts
	// warm is the pool of sandboxes restored ahead from start snapshots (warm.go).
	warm *warmPool
	// metrics samples the sandboxes' resource use (metrics.go).
	metrics *sampler
}

// sandbox is the node's view of one running sandbox.
type sandbox struct {
	id string
	// addr is the sandbox's own address on its veth, looked up on first use by DialPort.
	addr atomic.Pointer[netip.Addr]
	// ingress holds the connections DialPort made into the sandbox.
	ingress ingressConns
	// link is the node's own client of the daemon's connection (its Mux's first), for the node's calls
	// (quiesce); cp is the in-process control plane's (Link), made on first use after each new
	// connection. Both guarded by Local.mu.
	link  *link.Client
	cp    *link.Client
	audit *link.FileAudit
	// channel is the tenant's audit log, which link and cp record their frames into (nil: none); audit
	// records the frames of every client of the daemon's connection.
	channel link.Audit
	cancel  context.CancelFunc // stops the watcher
	// ckpt is closed when the checkpoint in progress is over (its new channel up); nil while none.
	// Guarded by Local.mu.
	ckpt chan struct{}
	// destroying is closed when the node starts destroying the sandbox, so that the watcher does not
	// report the exit it causes.
	destroying chan struct{}
}

// New returns the local node. It creates its directories; call Recover before serving.
func New(cfg Config) (*Local, error) {
	if cfg.DataDir == "" || cfg.Driver == nil || cfg.Templates == nil || cfg.DaemonBinary == "" {
		return nil, fmt.Errorf("node: DataDir, Driver, Templates and DaemonBinary are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Gateway != nil && (cfg.IfacePrefix == "" || len(cfg.IfacePrefix) > 6) {
		return nil, fmt.Errorf("node: IfacePrefix must be 1-6 characters with a Gateway: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.ID == "" {
		cfg.ID = nodecontract.LocalID
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OnExit == nil {
		cfg.OnExit = func(string, string) {}
	}
	for _, d := range []string{cfg.DataDir, filepath.Join(cfg.DataDir, "netns"), filepath.Join(cfg.DataDir, "audit")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	// Commits (CommitSandbox) and image uploads a crash cut off are of no use after it.
	os.RemoveAll(filepath.Join(cfg.DataDir, "commits"))
	if stale, _ := filepath.Glob(filepath.Join(cfg.DataDir, ".image-upload-*")); len(stale) > 0 {
		for _, p := range stale {
			os.Remove(p)
		}
	}
	bin, err := pinDaemon(cfg.DaemonBinary, filepath.Join(cfg.DataDir, "daemons"))
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	cfg.DaemonBinary = bin
	drv, err := newDrivers(cfg.Driver, cfg.More)
	if err != nil {
		return nil, err
	}
	n := &Local{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), sandboxes: map[string]*sandbox{}, fences: map[string]int64{}, drv: drv,
		starts: &starts{dir: filepath.Join(cfg.DataDir, "starts")}, warm: newWarmPool(cfg.WarmPool), metrics: newSampler()}
	_ = n.starts.remove("") // what a crash cut off
	if cfg.Snapshots != nil {
		if n.images, err = newImages(filepath.Join(cfg.DataDir, "images"), cfg.Snapshots, cfg.ImageCacheBytes, cfg.SnapshotCalls, cfg.ID, n.log); err != nil {
			return nil, err
		}
		// The stores a previous run (or a crash) left unfinished go on.
		for _, id := range n.images.sweepPending() {
			n.images.startStore(id, false) // said before, perhaps: the control plane takes it again
		}
	}
	return n, nil
}

// ID names the node.
func (n *Local) ID() string { return n.cfg.ID }

func (n *Local) netnsPath(id string) string { return filepath.Join(n.cfg.DataDir, "netns", id) }

// AuditPath is the host path of a sandbox's channel log: every message on its daemon channel, one JSON
// object a line, without the requests' arguments (see shapeOnly). It outlives the sandbox.
func (n *Local) AuditPath(id string) string {
	return filepath.Join(n.cfg.DataDir, "audit", id+".jsonl")
}

// CheckTemplate reports whether the node has the template (building it, or fetching its image from the
// blob store, on first use).
func (n *Local) CheckTemplate(ctx context.Context, name string) error {
	_, err := n.template(ctx, name)
	return err
}

// TemplateRoot reports the host directory of the template's root filesystem.
func (n *Local) TemplateRoot(ctx context.Context, name string) (string, error) {
	t, err := n.template(ctx, name)
	if err != nil {
		return "", err
	}
	return t.RootFS, nil
}

// CreateSandbox boots a sandbox and returns once its daemon answers. A failed create leaves nothing
// behind on the host.
func (n *Local) CreateSandbox(ctx context.Context, req nodecontract.CreateRequest) error {
	return n.boot(ctx, req, "")
}

// RestoreSandbox boots sandbox req.ID from the checkpoint image of snapshot src.SnapshotID (see
// Snapshot), in a new network namespace under req.Network, and returns once its daemon
// answers. The node uses the image it keeps, or fetches it from the snapshot store with src.Grant. Its
// processes continue where the image was taken; its trust store is the image's, so req.CAID must name
// the CA the checkpointed sandbox used. A failed restore leaves nothing behind on the host.
func (n *Local) RestoreSandbox(ctx context.Context, req nodecontract.CreateRequest, src nodecontract.ImageSource) error {
	d, err := n.drv.get(req.Runtime)
	if err != nil {
		return err
	}
	if _, ok := d.(runtime.Restorer); !ok {
		return fmt.Errorf("the %s runtime cannot restore: %w", d.Name(), errdefs.ErrFailedPrecondition)
	}
	im, err := n.imageStore()
	if err != nil {
		return err
	}
	// Background stores give way until the sandbox runs: a resume or fork is waited for.
	leave := im.urgent.enter()
	defer leave()
	t0 := time.Now()
	dir, release, err := im.prepare(ctx, req.TenantID, src)
	if err != nil {
		return fmt.Errorf("restore %s from snapshot %s: %w", req.ID, src.SnapshotID, err)
	}
	defer release()
	n.log.Debug("snapshot image ready", "sandbox", req.ID, "snapshot", src.SnapshotID, "took", time.Since(t0))
	return n.boot(ctx, req, dir)
}

// boot creates (imageDir "") or restores a sandbox.
func (n *Local) boot(ctx context.Context, req nodecontract.CreateRequest, imageDir string) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return fmt.Errorf("node is shutting down: %w", errdefs.ErrUnavailable)
	}
	if _, ok := n.sandboxes[req.ID]; ok {
		n.mu.Unlock()
		return fmt.Errorf("sandbox %s: %w", req.ID, errdefs.ErrAlreadyExists)
	}
	if req.Fence != 0 && req.CAID != "" {
		if seen := n.fences[req.CAID]; req.Fence < seen {
			n.mu.Unlock()
			return fmt.Errorf("sandbox %s of session %s: fencing token %d, but %d was seen: the lease was taken over: %w", req.ID, req.CAID, req.Fence, seen, errdefs.ErrConflict)
		}
		n.fences[req.CAID] = req.Fence
	}
	n.mu.Unlock()

	start := time.Now()
	tpl, err := n.template(ctx, req.Template)
	if err != nil {
		return err
	}
	drv, err := n.drv.get(req.Runtime)
	if err != nil {
		return err
	}
	// A template's start snapshot, where the node holds one and the runtime restores: a sandbox the
	// warm pool restored ahead, which TakeWarm reserved under this ID, or a restore now.
	warm, err := n.claimWarm(req, drv, imageDir)
	if err != nil {
		return err
	}
	fromStart := warm != nil
	if _, ok := drv.(runtime.Restorer); ok && imageDir == "" && req.Start != nil && warm == nil {
		if dir, release, ok := n.starts.open(req.Start.Key); ok {
			defer release()
			imageDir, fromStart = dir, true
		}
	}
	var c cleanup.Cleanup
	defer c.Clean()
	ns, addr := n.netnsPath(req.ID), hostnet.Addr{}
	if warm != nil {
		addr = warm.addr
		n.undoNetwork(req.ID, &c)
	} else if addr, err = n.makeNetwork(req.ID, &c); err != nil {
		return err
	}
	if gw := n.cfg.Gateway; gw != nil {
		caID := req.CAID
		if caID == "" {
			caID = req.ID
		}
		if err := gw.RegisterWithCA(req.ID, caID, req.TenantID, addr.Sandbox, req.Network); err != nil {
			return err
		}
		c.Add(func() { gw.Unregister(req.ID) })
	}
	if err := n.sealFlows(req.ID, req.FlowKey, req.LogRetention); err != nil {
		return err
	}
	if fl := n.cfg.FlowLog; fl != nil && req.FlowKey != nil {
		c.Add(func() { fl.Forget(req.ID) })
	}

	env := n.sandboxEnv(tpl, req)
	spec := n.runtimeSpec(req.ID, tpl, env, ns, runtime.Limits(req.Limits))
	if fromStart {
		spec.ControlEnv = env // the daemon's, in place of the start snapshot's
	}
	tNetns := time.Since(start)
	n.drv.track(req.ID, drv.Name())
	c.Add(func() { n.drv.untrack(req.ID) })
	if warm != nil {
		c.Add(func() { _ = drv.Destroy(context.WithoutCancel(ctx), req.ID) })
		err = drv.(runtime.WarmRestorer).Wake(ctx, req.ID, env)
	} else if imageDir == "" {
		_, err = drv.Create(ctx, spec)
	} else if rs, ok := drv.(runtime.Restorer); ok {
		_, err = rs.Restore(ctx, spec, imageDir)
	} else {
		err = fmt.Errorf("the %s runtime cannot restore: %w", drv.Name(), errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		return err
	}
	tDriver := time.Since(start)
	c.Add(func() { _ = drv.Destroy(context.WithoutCancel(ctx), req.ID) })
	if err := n.attach(ctx, req.ID, req.TenantID); err != nil {
		return err
	}
	// Its own identity, before anything runs in it for its owner: at boot, and after a restore of an
	// image that other sandboxes are restored from too.
	if restored := imageDir != "" || warm != nil; !restored || fromStart || req.NewIdentity {
		if err := n.giveIdentity(ctx, req.ID, restored); err != nil {
			n.forget(req.ID)
			return err
		}
	}
	// A restored trust store already holds the CA's certificate; a start snapshot's holds another
	// sandbox's.
	if imageDir == "" || fromStart {
		if err := n.installTrust(ctx, req.ID, tpl); err != nil {
			n.forget(req.ID)
			return err
		}
	}
	if imageDir == "" && warm == nil && req.Start != nil {
		if err := n.runStart(ctx, req.ID, req.Start); err != nil {
			n.forget(req.ID)
			return fmt.Errorf("sandbox %s: %w", req.ID, err)
		}
	}
	c.Release()
	// Its resource use counts from now: the node's work to hand it over (the trust store, the start
	// command) is not the sandbox's.
	n.registerMetrics(req.ID, runtime.Limits(req.Limits))
	if req.Start != nil && (imageDir == "" || fromStart) {
		n.warm.countStart(warm != nil, fromStart)
	}
	n.log.Debug("sandbox up", "sandbox", req.ID, "restored", imageDir != "", "start_snapshot", fromStart, "warm", warm != nil, "netns", tNetns, "driver", tDriver-tNetns, "link", time.Since(start)-tDriver)
	return nil
}

// makeNetwork makes sandbox id's network namespace (at n.netnsPath(id)) and, with a gateway, its veth to
// the host, whose addresses it returns; c is given what undoes both.
func (n *Local) makeNetwork(id string, c *cleanup.Cleanup) (hostnet.Addr, error) {
	if err := netns.Create(n.netnsPath(id)); err != nil {
		return hostnet.Addr{}, err
	}
	n.undoNetwork(id, c)
	if n.cfg.Gateway == nil {
		return hostnet.Addr{}, nil
	}
	return hostnet.Attach(n.netnsPath(id), n.ifName(id))
}

// undoNetwork gives c what removes sandbox id's network namespace and veth.
func (n *Local) undoNetwork(id string, c *cleanup.Cleanup) {
	ns, ifName := n.netnsPath(id), n.ifName(id)
	c.Add(func() { _ = netns.Remove(ns) })
	if n.cfg.Gateway != nil {
		c.Add(func() { _ = hostnet.Detach(ifName) })
	}
}

// sandboxEnv is the environment of the processes of sandbox req of template tpl.
func (n *Local) sandboxEnv(tpl template.Template, req nodecontract.CreateRequest) []string {
	env := append(append([]string{}, tpl.Env...), req.Env...)
	if n.cfg.Gateway != nil {
		// The sandbox's interception CA is in the system bundle (installTrust); these point the usual
		// runtimes at it whatever they would read by default.
		env = append(env, "SSL_CERT_FILE="+trustBundle, "REQUESTS_CA_BUNDLE="+trustBundle, "CURL_CA_BUNDLE="+trustBundle,
			"NODE_EXTRA_CA_CERTS="+sandboxCA)
	}
	return env
}

// runtimeSpec is what the runtime boots sandbox id of template tpl with.
func (n *Local) runtimeSpec(id string, tpl template.Template, env []string, ns string, limits runtime.Limits) runtime.Spec {
	return runtime.Spec{
		ID:         id,
		RootFS:     tpl.RootFS,
		Mounts:     tpl.Mounts,
		Masks:      tpl.Masks,
		Init:       InitArgs(append(append([]string(nil), n.cfg.DaemonArgs...), templateArgs(tpl)...)...),
		LegacyInit: legacyInit,
		ControlDir: ControlDir,
		InitBinary: n.cfg.DaemonBinary,
		Env:        env,
		NetNS:      ns,
		Limits:     limits,
	}
}

// forget drops a sandbox from the node's table and stops its watcher, without destroying it.
func (n *Local) forget(id string) {
	n.mu.Lock()
	s := n.sandboxes[id]
	delete(n.sandboxes, id)
	n.metrics.forget(id)
	var cancel context.CancelFunc
	var cl *link.Client
	if s != nil {
		cancel, cl = s.cancel, s.link
	}
	n.mu.Unlock()
	if s != nil {
		close(s.destroying)
		cancel()
		cl.Close()
		s.audit.Close()
		s.ingress.closeAll()
	}
}

// Where a sandbox's trust store lives.
const (
	trustBundle = "/etc/ssl/certs/ca-certificates.crt"
	sandboxCA   = "/etc/ssl/certs/airlock-sandbox-ca.pem"
)

// installTrust puts the certificate of the sandbox's interception CA (never its key) into the sandbox's
// system bundle, after the template's roots, and alone at sandboxCA. Without a gateway it does nothing.
func (n *Local) installTrust(ctx context.Context, id string, tpl template.Template) error {
	gw := n.cfg.Gateway
	if gw == nil {
		return nil
	}
	caPEM, err := gw.CACertPEM(id)
	if err != nil {
		return err
	}
	roots, err := readTemplateFile(tpl.RootFS, trustBundle, maxTrustBundle)
	if err != nil {
		return fmt.Errorf("sandbox %s trust store: %w", id, err)
	}
	bundle := append(append(roots, '\n'), caPEM...)
	cl, err := n.Link(ctx, id)
	if err != nil {
		return err
	}
	for path, data := range map[string][]byte{trustBundle: bundle, sandboxCA: caPEM} {
		if err := cl.WriteFile(ctx, path, bytes.NewReader(data), link.WriteFileOptions{Mode: 0o644, User: "root"}); err != nil {
			return fmt.Errorf("sandbox %s trust store %s: %w", id, path, err)
		}
	}
	return nil
}

// maxTrustBundle bounds what is read of a template's CA bundle.
const maxTrustBundle = 8 << 20

// readTemplateFile reads the regular file at name in the template root at root, at most limit bytes;
// nil if there is none (template.ReadFile: beneath the root, following no link out of it).
func readTemplateFile(root, name string, limit int64) ([]byte, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return template.ReadFile(r, name, limit)
}

// attach dials the sandbox's daemon, registers the sandbox and starts its watcher.
func (n *Local) attach(ctx context.Context, id, tenantID string) error {
	audit, err := link.NewFileAudit(n.AuditPath(id))
	if err != nil {
		return fmt.Errorf("sandbox %s audit log: %w", id, err)
	}
	// The node's file records the frames of every client of the daemon's connection (the Mux's); the
	// tenant's audit log those of the node's own client, the control planes' clients record theirs.
	var channel link.Audit
	if n.cfg.TenantAudit != nil {
		channel = n.cfg.TenantAudit(tenantID, id)
	}
	cl, err := n.dialWithRetry(ctx, id, link.Options{Audit: channel, Logger: n.log.With("sandbox", id), Shared: true, MuxAudit: shapeOnly{audit}})
	if err != nil {
		audit.Close()
		return fmt.Errorf("sandbox %s: connect to daemon: %w", id, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	s := &sandbox{id: id, link: cl, audit: audit, channel: channel, cancel: cancel, destroying: make(chan struct{})}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		cancel()
		cl.Close()
		audit.Close()
		return fmt.Errorf("node is shutting down: %w", errdefs.ErrUnavailable)
	}
	n.sandboxes[id] = s
	n.mu.Unlock()
	n.wg.Add(1)
	go n.watch(wctx, s, cl)
	return nil
}

// sealFlows has the flow log keep sandbox id's flows for keep (0: its default) and seal them under key, if there
// is a key and a flow log.
func (n *Local) sealFlows(id string, key []byte, keep time.Duration) error {
	if n.cfg.FlowLog == nil {
		return nil
	}
	if err := n.cfg.FlowLog.SetRetention(id, keep); err != nil {
		return err
	}
	if key == nil {
		return nil
	}
	return n.cfg.FlowLog.SetKey(id, key)
}

// shapeOnly records a frame's shape (direction, stream, type, operation, size, error) in the node's
// channel log, never a request's arguments: command lines and paths are the tenant's, and stay in its
// audit log, sealed under its key (a revoked key makes them unreadable there; a plain file on the node
// would keep them).
type shapeOnly struct{ link.Audit }

// Record implements link.Audit.
func (a shapeOnly) Record(e link.Entry) {
	e.Args = nil
	a.Audit.Record(e)
}

// dialWithRetry dials the daemon of sandbox id, retrying briefly while the daemon starts listening. A
// daemon that fails to prove it is the sandbox's is not tried again.
func (n *Local) dialWithRetry(ctx context.Context, id string, opts link.Options) (*link.Client, error) {
	deadline := time.Now().Add(10 * time.Second)
	delay := time.Millisecond
	for {
		cl, err := n.dialOnce(ctx, id, opts, 5*time.Second)
		if err == nil {
			return cl, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil || errors.Is(err, link.ErrNotProven) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// dialOnce dials the daemon of sandbox id through the driver, has it prove that it is the sandbox's
// own (a legacy sandbox's daemon cannot: see runtime.Driver.DialLink), and checks that it answers,
// within timeout.
func (n *Local) dialOnce(ctx context.Context, id string, opts link.Options, timeout time.Duration) (*link.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, key, err := n.drv.driverOf(id).DialLink(dctx, id)
	if err != nil {
		return nil, err
	}
	opts.Key = key
	cl, err := link.Connect(dctx, conn, opts)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if err := cl.Ping(dctx); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// watch waits for the sandbox to stop or its link to drop, and reports an exit the node did not cause.
func (n *Local) watch(ctx context.Context, s *sandbox, cl *link.Client) {
	defer n.wg.Done()
	exited := make(chan runtime.Status, 1)
	go func() {
		st, err := n.drv.driverOf(s.id).Wait(ctx, s.id)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			st = runtime.Status{Reason: "runtime lost: " + err.Error()}
		}
		exited <- st
	}()
	var reason string
	select {
	case <-ctx.Done():
		return
	case <-s.destroying:
		return
	case st := <-exited:
		reason = st.Reason
	case <-cl.Done():
		// The daemon's channel dropped. Either the sandbox is going down (Wait will say why in a
		// moment) or the daemon alone died while the sandbox's runtime lives on.
		select {
		case st := <-exited:
			reason = st.Reason
		case <-time.After(2 * time.Second):
			reason = "sandbox daemon connection lost"
		case <-s.destroying:
			return
		case <-ctx.Done():
			return
		}
		if reason == "sandbox exited" {
			reason = "sandbox daemon exited"
		}
	}
	select {
	case <-s.destroying:
		return
	default:
	}
	n.log.Warn("sandbox stopped by itself", "sandbox", s.id, "reason", reason)
	n.cfg.OnExit(s.id, reason)
}

// Link returns the in-process control plane's channel to a sandbox's daemon: a client of the daemon
// connection's Mux like a remote control plane's (LinkMux), not the node's own, so that a checkpoint
// drops it alike and a call it did not let through fails with link.ErrNotStarted, to be sent again.
// While a checkpoint of the sandbox is in progress it waits for it to end (and for the channel after
// it), so that a call that arrives meanwhile runs after it rather than on a channel about to close.
func (n *Local) Link(ctx context.Context, id string) (*link.Client, error) {
	s, err := n.settled(ctx, id)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.cp == nil || s.cp.Err() != nil {
		// A dropped one is closed by its Mux, or closes itself on its go-away.
		s.cp = link.NewClient(s.link.Mux().Pipe(), link.Options{Audit: s.channel, Logger: n.log.With("sandbox", s.id)})
	}
	return s.cp, nil
}

// LinkMux returns the Mux of a sandbox's daemon connection, for the control planes in other processes
// to join (Mux.Serve). Like Link it waits for a checkpoint in progress.
func (n *Local) LinkMux(ctx context.Context, id string) (*link.Mux, error) {
	s, err := n.settled(ctx, id)
	if err != nil {
		return nil, err
	}
	cl, _ := n.current(s)
	return cl.Mux(), nil
}

// settled looks up a sandbox, once no checkpoint of it is in progress.
func (n *Local) settled(ctx context.Context, id string) (*sandbox, error) {
	s, err := n.lookup(id)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	ckpt := s.ckpt
	n.mu.Unlock()
	if ckpt != nil {
		select {
		case <-ckpt:
		case <-ctx.Done():
			return nil, fmt.Errorf("sandbox %s: wait for its checkpoint: %w", id, ctx.Err())
		}
	}
	return s, nil
}

// beginCheckpoint makes Link wait until the returned function is called (once the checkpoint and the
// new channel after it are done).
func (n *Local) beginCheckpoint(s *sandbox) (end func()) {
	ch := make(chan struct{})
	n.mu.Lock()
	s.ckpt = ch
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		if s.ckpt == ch {
			s.ckpt = nil
		}
		n.mu.Unlock()
		close(ch)
	}
}

// ifName is the name of a sandbox's host-side veth: the prefix and as much of the ID's random part as fits
// in an interface name (15 bytes).
func (n *Local) ifName(id string) string {
	r := id
	if i := len("sb_"); len(r) > i && r[:i] == "sb_" {
		r = r[i:]
	}
	name := n.cfg.IfacePrefix + r
	if len(name) > 15 {
		name = name[:15]
	}
	return name
}

// SetNetwork replaces a running sandbox's egress policy; new connections follow it at once.
func (n *Local) SetNetwork(ctx context.Context, id string, p policy.Policy) error {
	if n.cfg.Gateway == nil {
		return fmt.Errorf("node %s has no network gateway: %w", n.cfg.ID, errdefs.ErrFailedPrecondition)
	}
	return n.cfg.Gateway.SetPolicy(id, p)
}

// DestroySandbox removes the sandbox and everything of it from the host. Unknown IDs succeed, and
// whatever a crashed node left of a sandbox is removed too.
func (n *Local) DestroySandbox(ctx context.Context, id string) error {
	n.forget(id)
	n.warm.forget(id)
	err := n.drv.destroy(ctx, id)
	n.drv.untrack(id)
	if gw := n.cfg.Gateway; gw != nil {
		gw.Unregister(id)
		if herr := hostnet.Detach(n.ifName(id)); herr != nil {
			err = errors.Join(err, herr)
		}
	}
	if nerr := netns.Remove(n.netnsPath(id)); nerr != nil {
		err = errors.Join(err, nerr)
	}
	if n.cfg.FlowLog != nil {
		n.cfg.FlowLog.Forget(id) // the file stays; only its descriptor goes
	}
	return err
}

// Flows returns the network flows of sandbox id that f selects, newest first (see flowlog.Log.Read). The
// flows of a sandbox that is gone stay readable. It does not check who owns the sandbox: the control
// plane does.
func (n *Local) Flows(ctx context.Context, id string, f flowlog.Filter) ([]gateway.Flow, error) {
	if n.cfg.FlowLog == nil {
		return nil, fmt.Errorf("node %s has no flow log: %w", n.cfg.ID, errdefs.ErrFailedPrecondition)
	}
	return n.cfg.FlowLog.Read(ctx, id, f)
}

// Sandboxes reports the IDs of the sandboxes on this host, running, frozen or left over.
func (n *Local) Sandboxes(ctx context.Context) ([]string, error) {
	ids, err := n.drv.list(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	entries, _ := os.ReadDir(filepath.Join(n.cfg.DataDir, "netns"))
	for _, e := range entries {
		if !seen[e.Name()] {
			seen[e.Name()] = true
			ids = append(ids, e.Name())
		}
	}
	// And those this process keeps a record of (a frozen one between checkpoint and teardown among them):
	// a sandbox absent from all three is gone from the host.
	n.mu.Lock()
	for id := range n.sandboxes {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	n.mu.Unlock()
	// But not the warm pool's, which are nobody's yet (warm.go).
	mine := ids[:0]
	for _, id := range ids {
		if !n.warm.has(id) {
			mine = append(mine, id)
		}
	}
	return mine, nil
}

// Recover re-adopts the sandboxes a previous run of the node left running: for each ID in ids whose
// sandbox still runs, it re-opens the channel to the daemon and watches it again. It reports the IDs
// it adopted; the caller destroys the rest.
func (n *Local) Recover(ctx context.Context, reqs []nodecontract.RecoverRequest) ([]string, error) {
	var adopted []string
	for _, r := range reqs {
		id := r.ID
		n.mu.Lock()
		_, tracked := n.sandboxes[id]
		n.mu.Unlock()
		if tracked {
			// Running here and watched already (a control plane that lost track of the node asks
			// again): attaching again would replace its link and watcher under it.
			adopted = append(adopted, id)
			continue
		}
		drv, err := n.drv.get(r.Runtime)
		if err != nil {
			n.log.Warn("re-adopt sandbox", "sandbox", id, "err", err)
			continue
		}
		st, err := drv.Status(ctx, id)
		if err != nil || !st.Running {
			continue
		}
		n.drv.track(id, drv.Name())
		// A checkpoint the previous run did not finish may have left it frozen or its daemon quiesced.
		if p, ok := drv.(runtime.Pauser); ok {
			if err := p.Unpause(ctx, id); err != nil {
				n.log.Warn("re-adopt sandbox: unpause", "sandbox", id, "err", err)
				continue
			}
		}
		if gw := n.cfg.Gateway; gw != nil {
			addr, err := hostnet.Lookup(n.ifName(id))
			if err != nil {
				n.log.Warn("re-adopt sandbox network", "sandbox", id, "err", err)
				continue
			}
			caID := r.CAID
			if caID == "" {
				caID = id
			}
			if err := gw.RegisterWithCA(id, caID, r.TenantID, addr.Sandbox, r.Network); err != nil {
				n.log.Warn("re-adopt sandbox network", "sandbox", id, "err", err)
				continue
			}
		}
		if err := n.sealFlows(id, r.FlowKey, r.LogRetention); err != nil {
			n.log.Warn("re-adopt sandbox flow log", "sandbox", id, "err", err)
			continue
		}
		if err := n.attach(ctx, id, r.TenantID); err != nil {
			n.log.Warn("re-adopt sandbox", "sandbox", id, "err", err)
			continue
		}
		// The gateway made a new interception CA for the re-adopted sandbox; trust it from now on.
		if tpl, err := n.cfg.Templates.Get(ctx, template.DefaultName); err == nil {
			if err := n.installTrust(ctx, id, tpl); err != nil {
				n.log.Warn("re-adopt sandbox trust store", "sandbox", id, "err", err)
			}
		}
		n.registerMetrics(id, runtime.Limits(r.Limits))
		adopted = append(adopted, id)
	}
	return adopted, nil
}

// Shutdown stops watching, closes every daemon channel and stops the background stores (their jobs
// stay: the next start of the node takes them up). It does not destroy sandboxes: the control plane
// decides that (and does, before calling Shutdown, in single-binary mode).
func (n *Local) Shutdown(ctx context.Context) error {
	n.closeWarm() // nobody's: no later run adopts them
	n.metrics.close()
	if n.images != nil {
		// The stores in progress finish if they can before ctx ends (a paused session's image is then
		// in the snapshot store for another node); the others resume at the next start.
		n.images.stores.drain()
		if !waitGroup(ctx, &n.images.stores.wg) {
			n.images.stores.close() // cut off: their jobs stay on disk for the next start, which is no error
		}
	}
	n.mu.Lock()
	n.closed = true
	all := make([]*sandbox, 0, len(n.sandboxes))
	for _, s := range n.sandboxes {
		all = append(all, s)
	}
	n.mu.Unlock()
	for _, s := range all {
		cl, cancel := n.current(s)
		cancel()
		cl.Close()
		s.audit.Close()
	}
	// What ctx left no time for (stores cut off, the node's own work) gets storeCutGrace to end.
	end := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		end, cancel = context.WithTimeout(context.WithoutCancel(ctx), storeCutGrace)
		defer cancel()
	}
	if n.images != nil && !waitGroup(end, &n.images.stores.wg) {
		n.log.Warn("stores cut off by the shutdown have not ended", "within", storeCutGrace)
	}
	if !waitGroup(end, &n.wg) {
		return end.Err()
	}
	return nil
}

// storeCutGrace is how long Shutdown waits, past its deadline, for the stores it cut off and the node's
// own work to end.
const storeCutGrace = 5 * time.Second

// Snapshot saves a running sandbox's memory, processes and files as the image of snapshot
// req.SnapshotID (see runtime.Checkpointer), then lets it run on (nodecontract.ThenRun) or destroys it
// (nodecontract.ThenDestroy; a destroy that fails is logged: the image is what counts). Before it
// answers it tells the control plane that the image is saved (SnapshotCalls.SnapshotSaved); with
// ThenDestroy, before the sandbox goes, and if it cannot, the sandbox runs on and the snapshot fails. The daemon lets
// go of its channel for it (link streams in progress end; the processes live on and can be
// re-attached); a sandbox that runs on is connected to anew. The image is kept on the node, synced,
// with its store's job beside it, and a background store writes it into the snapshot store and reports
// it (snapstore.go). With req.IfIdle a sandbox with calls or streams in progress is nodecontract.ErrBusy.
// A snapshot that fails leaves the sandbox running and no image. A snapshot once begun runs to its end
// (at most checkpointTimeout) even if its caller goes away: one cut off halfway (runsc killed while it
// saves) could leave the sandbox unable to run on.
func (n *Local) Snapshot(ctx context.Context, id string, req nodecontract.SnapshotRequest) (nodecontract.Image, error) {
	if err := req.Check(); err != nil {
		return nodecontract.Image{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	img, err := n.saveSnapshot(ctx, id, req)
	if err != nil {
		return nodecontract.Image{}, err
	}
	if req.Then == nodecontract.ThenDestroy {
		// The sandbox is stopped for good and its image on record: no call reaches it from now on, and
		// its teardown (memory freed, disk and network removed, a few hundred milliseconds) need not hold
		// up the answer.
		n.forget(id)
		n.wg.Add(1)
		go func() { // owner: n; ends once the sandbox is destroyed
			defer n.wg.Done()
			dctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
			defer cancel()
			if err := n.DestroySandbox(dctx, id); err != nil {
				n.log.Warn("destroy a sandbox once its snapshot was saved", "sandbox", id, "snapshot", req.SnapshotID, "err", err)
			}
		}()
	}
	return img, nil
}

// saveSnapshot checkpoints sandbox id as the image of req.SnapshotID, writes its store's job and starts
// the store. Without req.Then == ThenRun the sandbox is left frozen.
func (n *Local) saveSnapshot(ctx context.Context, id string, req nodecontract.SnapshotRequest) (nodecontract.Image, error) {
	drv := n.drv.driverOf(id)
	if _, ok := drv.(runtime.Checkpointer); !ok {
		return nodecontract.Image{}, fmt.Errorf("the %s runtime cannot checkpoint: %w", drv.Name(), errdefs.ErrFailedPrecondition)
	}
	im, err := n.imageStore()
	if err != nil {
		return nodecontract.Image{}, err
	}
	if im.calls == nil {
		return nodecontract.Image{}, fmt.Errorf("node %s cannot store snapshots (it has no way to ask the control plane for them): %w", n.ID(), errdefs.ErrFailedPrecondition)
	}
	if err := checkSnapID(req.SnapshotID); err != nil {
		return nodecontract.Image{}, err
	}
	unlock := im.perSnap.lock(req.SnapshotID)
	defer unlock()
	dir := im.pendingDir(req.SnapshotID)
	leave := im.urgent.enter()
	defer leave()
	var img nodecontract.Image
	saved := func() error {
		img = n.image(drv, dir)
		if err := im.writeJob(req.SnapshotID, storeJob{Tenant: req.TenantID, Meta: req.Meta, Image: img}); err != nil {
			return err
		}
		if req.Then == nodecontract.ThenRun {
			return nil
		}
		// The sandbox goes only once the image is on record: else it runs on, and the snapshot fails.
		if err := im.saySaved(ctx, req.TenantID, req.SnapshotID, img); err != nil {
			os.Remove(im.jobPath(req.SnapshotID))
			return fmt.Errorf("snapshot %s: the control plane did not take the saved image on record: %w", req.SnapshotID, err)
		}
		return nil
	}
	if err := n.checkpoint(ctx, id, dir, req.Then == nodecontract.ThenRun, req.IfIdle, saved); err != nil {
		return nodecontract.Image{}, err
	}
	said := true
	if req.Then == nodecontract.ThenRun {
		// The sandbox runs on either way; the store says it again first if this fails.
		if err := im.saySaved(ctx, req.TenantID, req.SnapshotID, img); err != nil {
			n.log.Warn("the control plane did not take a saved snapshot image on record; the store tries again", "snapshot", req.SnapshotID, "err", err)
			said = false
		}
	}
	n.prefetch(dir)
	im.startStore(req.SnapshotID, said)
	return img, nil
}

// checkpoint saves sandbox id into dir (made anew; its parent directory must exist), leaving it running
// if leaveRunning, else stopped (DestroySandbox cleans up). With ifIdle, only if no call or stream to
// its daemon is in progress (else nodecontract.ErrBusy). saved, if set, is called once the image is
// saved and synced, before the sandbox runs on; its error fails the checkpoint. On error dir is removed
// and the sandbox runs on.
func (n *Local) checkpoint(ctx context.Context, id, dir string, leaveRunning, ifIdle bool, saved func() error) error {
	drv := n.drv.driverOf(id)
	cp, ok := drv.(runtime.Checkpointer)
	if !ok {
		return fmt.Errorf("the %s runtime cannot checkpoint: %w", drv.Name(), errdefs.ErrFailedPrecondition)
	}
	s, err := n.lookup(id)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil { // a half-written earlier try
		return err
	}
	// Calls that arrive from now wait for the new channel (Link); the clients that reach the daemon
	// through this node (control planes) are dropped, so that they join it again through Link. With
	// ifIdle, only if no call or stream is in progress: a rolling snapshot must not cut work.
	defer n.beginCheckpoint(s)()
	cl, cancel := n.current(s)
	if m := cl.Mux(); m != nil && !m.DropOthers(ifIdle) {
		return fmt.Errorf("sandbox %s: %w", id, nodecontract.ErrBusy)
	}
	// The watcher would take the channel's end for the daemon's death: stop it first.
	cancel()
	qerr := cl.Quiesce(ctx)
	if qerr != nil {
		err = fmt.Errorf("sandbox %s: quiesce the daemon: %w", id, qerr)
	} else {
		err = cp.Checkpoint(ctx, id, dir, runtime.CheckpointOptions{LeaveRunning: leaveRunning})
	}
	if err == nil {
		// The driver synced the image; this makes its directory's entry durable too.
		if err = syncDir(filepath.Dir(dir)); err != nil {
			err = fmt.Errorf("save checkpoint image: %w", err)
		}
	}
	if err == nil && saved != nil {
		err = saved()
	}
	if err != nil {
		os.RemoveAll(dir)
	}
	if !leaveRunning && err == nil {
		return nil
	}
	if err != nil {
		// Whatever step failed, let it run again: thaw it, or wake a daemon left quiesced.
		if p, ok := drv.(runtime.Pauser); ok {
			if uerr := p.Unpause(ctx, id); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
	}
	// Running again (or still): connect anew and watch it again.
	if rerr := n.relink(ctx, s); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// checkpointTimeout bounds a checkpoint (of a sandbox of 64 GiB, written at 200 MB/s: under 6 minutes).
const checkpointTimeout = 10 * time.Minute

// image describes the checkpoint image drv made in dir.
func (n *Local) image(drv runtime.Driver, dir string) nodecontract.Image {
	img := nodecontract.Image{Bytes: treeBytes(dir), Runtime: drv.Name()}
	if f, ok := drv.(runtime.FilesOnly); ok && f.FilesOnly() {
		img.FilesOnly = true
	}
	if f, ok := drv.(runtime.ImageFiles); ok {
		img.FilesPart = f.FilesPart()
	}
	return img
}

// prefetch reads the image in dir into the page cache in the background (see prefetch).
func (n *Local) prefetch(dir string) {
	n.wg.Add(1)
	go func() { // owner: n; ends when it has read the files
		defer n.wg.Done()
		prefetch(dir)
	}()
}

// SandboxCPU reports the CPU time a sandbox used so far (see runtime.CPUMeter).
func (n *Local) SandboxCPU(ctx context.Context, id string) (time.Duration, error) {
	drv := n.drv.driverOf(id)
	m, ok := drv.(runtime.CPUMeter)
	if !ok {
		return 0, fmt.Errorf("the %s runtime does not meter CPU: %w", drv.Name(), errdefs.ErrFailedPrecondition)
	}
	if _, err := n.lookup(id); err != nil {
		return 0, err
	}
	return m.CPUTime(ctx, id)
}

// relink replaces a sandbox's daemon channel after a checkpoint and restarts its watcher.
func (n *Local) relink(ctx context.Context, s *sandbox) error {
	old, _ := n.current(s)
	old.Close()
	cl, reason, err := n.dialAlive(ctx, s.id, link.Options{Audit: s.channel, Logger: n.log.With("sandbox", s.id), Shared: true, MuxAudit: s.audit})
	if err != nil {
		n.log.Warn("sandbox daemon unreachable after a checkpoint", "sandbox", s.id, "reason", reason, "err", err)
		go n.cfg.OnExit(s.id, reason)
		return fmt.Errorf("sandbox %s: reconnect to the daemon: %w", s.id, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	n.mu.Lock()
	s.link, s.cancel = cl, cancel
	n.mu.Unlock()
	n.wg.Add(1)
	go n.watch(wctx, s, cl)
	return nil
}

// dialAlive connects to the daemon of sandbox id again after a checkpoint. Once a first try failed it
// keeps trying (dialWithRetry) only while the sandbox lives: a sandbox that died meanwhile (an OOM kill
// just before the checkpoint) ends it at once, with the reason the runtime gives. On error, reason says
// why the sandbox is to be counted as exited.
func (n *Local) dialAlive(ctx context.Context, id string, opts link.Options) (*link.Client, string, error) {
	cl, err := n.dialOnce(ctx, id, opts, 2*time.Second)
	if err == nil {
		return cl, "", nil
	}
	if errors.Is(err, link.ErrNotProven) {
		return nil, notProvenReason, err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	exited := make(chan runtime.Status, 1)
	go func() {
		if st, err := n.drv.driverOf(id).Wait(wctx, id); err == nil {
			exited <- st
		}
	}()
	type dialed struct {
		cl  *link.Client
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		cl, err := n.dialWithRetry(wctx, id, opts)
		done <- dialed{cl, err}
	}()
	select {
	case d := <-done:
		if errors.Is(d.err, link.ErrNotProven) {
			return nil, notProvenReason, d.err
		}
		if d.err != nil {
			return nil, "sandbox daemon unreachable after a checkpoint", d.err
		}
		return d.cl, "", nil
	case st := <-exited:
		stop()
		if d := <-done; d.cl != nil {
			d.cl.Close()
		}
		return nil, st.Reason, fmt.Errorf("the sandbox stopped: %s: %w", st.Reason, errdefs.ErrUnavailable)
	}
}

// lookup returns the node's record of a sandbox it runs.
func (n *Local) lookup(id string) (*sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.sandboxes[id]
	if s == nil {
		return nil, fmt.Errorf("sandbox %s is not running on node %s: %w", id, n.cfg.ID, errdefs.ErrFailedPrecondition)
	}
	return s, nil
}

// current returns the sandbox's daemon channel and its watcher's cancel function, which relink replaces.
func (n *Local) current(s *sandbox) (*link.Client, context.CancelFunc) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return s.link, s.cancel
}

// notProvenReason is why a sandbox whose daemon did not prove it is the sandbox's own is failed.
const notProvenReason = "sandbox daemon failed to prove it is this sandbox's (link key)"

// CopyCA gives caID the interception CA stored under fromID (a fork keeps trusting its parent's CA).
func (n *Local) CopyCA(ctx context.Context, fromID, toID, tenantID string) error {
	if n.cfg.Gateway == nil {
		return nil
	}
	return n.cfg.Gateway.CopyCA(ctx, fromID, toID, tenantID)
}

// RewrapCAs wraps the keys of the tenant's interception CAs again under its current key-encryption key.
func (n *Local) RewrapCAs(ctx context.Context, tenantID string) (int, error) {
	if n.cfg.Gateway == nil {
		return 0, nil
	}
	return n.cfg.Gateway.RewrapCAs(ctx, tenantID)
}

// ForgetCA removes a session's interception CA once the session is gone.
func (n *Local) ForgetCA(caID string) {
	if n.cfg.Gateway != nil {
		n.cfg.Gateway.ForgetCA(caID)
	}
}

// waitGroup waits for wg until ctx ends, and reports whether wg was done.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { // owner: the caller; ends when wg is done (a caller that gave up leaves it to end then)
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
