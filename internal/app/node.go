package app

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	blobs3 "github.com/airlockrun/airlock/internal/blob/s3"
	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/daemon"
	"github.com/airlockrun/airlock/internal/fsutil"
	"github.com/airlockrun/airlock/internal/gateway/hostnet"
	"github.com/airlockrun/airlock/internal/node"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/snapshot"
)

// Files a node keeps in <data dir>/cluster once it joined (airlock node join).
const (
	NodeClusterDir = "cluster"
	NodeKeyFile    = "node.key"  // its private key (0600)
	NodeCertFile   = "node.crt"  // its certificate
	NodeCAFile     = "ca.crt"    // the cluster CA's certificate
	NodeInfoFile   = "node.json" // its ID and the control plane it joined
)

// NodeInfo is what NodeInfoFile holds.
type NodeInfo struct {
	ID           string    `json:"id"`
	ControlPlane string    `json:"control_plane"`
	Hosts        []string  `json:"hosts"`
	JoinedAt     time.Time `json:"joined_at"`
}

// DefaultNodeListen is the node API's default address.
const DefaultNodeListen = ":7444"

// NodeConfig configures RunNode. Zero values take the defaults.
type NodeConfig struct {
	// DataDir holds the node's state, and in DataDir/cluster what airlock node join saved. Required.
	DataDir string
	// ControlPlanes are the control planes' cluster ports (https://host:port; a load balancer, or the
	// replicas, tried in turn). At least one is required.
	ControlPlanes []string
	// Listen is the node API's address. Empty: DefaultNodeListen.
	Listen string
	// Advertise is the host:port control planes reach the node API at; its host must be one the node
	// joined with. Empty: the first host it joined with, and Listen's port.
	Advertise string
	// MaxSandboxes bounds the sandboxes the node runs at once. Zero: 32 per CPU core.
	MaxSandboxes int
	// MemoryMB and CPUMillicores bound the memory and CPU the node offers (its share of a host it
	// shares with other nodes). Zero: the host's (nodecontract.HostCapacity).
	MemoryMB      int64
	CPUMillicores int64
	// SandboxAddresses is the range the node's sandboxes get their /30s from (nodes sharing a host can
	// each have one of their own). Invalid prefix (the zero value): hostnet.Pool.
	SandboxAddresses netip.Prefix
	// Runsc, DaemonBinary, Debug, Hosts, HostsOnly, ExtraRootsPEM and EgressAllowPrivate are as in
	// Config. (The control planes refuse tenants' rules into ranges they have not opened; the node's
	// gateway refuses connections into ranges it has not.)
	Runsc              string
	DaemonBinary       string
	Debug              bool
	Hosts              map[string][]netip.Addr
	HostsOnly          bool
	ExtraRootsPEM      []byte
	EgressAllowPrivate []netip.Prefix
	// BlobDir or S3 is the blob store of the cluster's snapshots, which the node writes checkpoint
	// images into and restores them from, with the grants control planes give it: the control planes'
	// S3 bucket, or their blob directory (DATA/blobs of an airlock server on the same host or a shared
	// file system). Neither: the node keeps no snapshots (sessions cannot pause on it).
	BlobDir string
	S3      *blobs3.Config
	// ImageCacheBytes bounds the node's cache of checkpoint images (node.Config). Zero:
	// DefaultImageCacheBytes; negative: none.
	ImageCacheBytes int64
	// WarmPool sizes the node's warm pool (node.Config). Zero: node.DefaultWarmPool; negative: none.
	WarmPool int
	// LogRetention is how long the flow logs of sandboxes whose tenant keeps logs forever are kept (0:
	// forever); a tenant's own retention comes with each sandbox.
	LogRetention time.Duration
	// Logger receives logs. Nil: slog.Default().
	Logger *slog.Logger
	// Out receives what is meant for the person who started the node. Nil: os.Stdout.
	Out io.Writer
	// Ready, if set, is called with the node API's address once it accepts connections.
	Ready func(addr string)
	// KeeperBinary is the airlock binary the node runs its fence keeper with (airlock node keeper; see
	// internal/keeper): the process that stops the node's sandboxes once the node's lease lapses, also
	// after the node process died. Empty: no keeper (a node killed leaves its sandboxes running until it
	// starts again), with a warning.
	KeeperBinary string
}

// DefaultChunkCacheBytes bounds a node's cache of snapshot chunks fetched from S3.
const DefaultChunkCacheBytes = 4 << 30

// joined is what a node's join left in its data directory.
type joined struct {
	info  NodeInfo
	cert  tls.Certificate
	roots *x509.CertPool
}

func loadJoined(dataDir string) (joined, error) {
	dir := filepath.Join(dataDir, NodeClusterDir)
	var j joined
	b, err := os.ReadFile(filepath.Join(dir, NodeInfoFile))
	if err != nil {
		return j, fmt.Errorf("no node joined with data directory %s (airlock --data-dir DIR node join, then node run with the same --data-dir): %w", dataDir, err)
	}
	if err := json.Unmarshal(b, &j.info); err != nil {
		return j, fmt.Errorf("%s: %w", NodeInfoFile, err)
	}
	if err := cluster.CheckID(j.info.ID); err != nil {
		return j, fmt.Errorf("%s: %w", NodeInfoFile, err)
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, NodeCertFile))
	if err != nil {
		return j, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, NodeKeyFile))
	if err != nil {
		return j, err
	}
	defer clear(keyPEM)
	if j.cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return j, fmt.Errorf("the node's key and certificate: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, NodeCAFile))
	if err != nil {
		return j, err
	}
	j.roots = x509.NewCertPool()
	if !j.roots.AppendCertsFromPEM(caPEM) {
		return j, fmt.Errorf("%s: no certificate", NodeCAFile)
	}
	id, err := cluster.IdentityOf(j.cert.Leaf)
	if err != nil || id != (cluster.Identity{Role: cluster.RoleNode, ID: j.info.ID}) {
		return j, fmt.Errorf("the node's certificate names %v, not node %s", id, j.info.ID)
	}
	if time.Now().After(j.cert.Leaf.NotAfter) {
		return j, fmt.Errorf("the node's certificate expired at %s: join again from this host with the same data directory (airlock node join --id %s: its key here proves it is the node; no token needed)",
			j.cert.Leaf.NotAfter.Format(time.RFC3339), j.info.ID)
	}
	return j, nil
}

// RunNode runs a node in a process of its own, which joined a cluster (airlock node join): it serves the
// node API to the control planes over mutual TLS, reports to them in heartbeats, and asks them for its
// sandboxes' credentials and key wraps at the moment it needs them; nothing of a tenant is stored here
// but its sandboxes. It serves until ctx ends; then it destroys its sandboxes (reporting them to the
// control plane) and stops.
func RunNode(ctx context.Context, cfg NodeConfig) error {
	n, err := newNodeProcess(cfg)
	if err != nil {
		return err
	}
	return n.run(ctx, n.serveUntil,
		n.openDataDir,          // the data directory it joined with
		n.readJoin,             // its ID, key, certificate and the cluster CA
		n.measureCapacity,      // what it offers sandboxes
		n.connectControlPlanes, // the client of their cluster ports
		n.openEgress,           // the egress guards and extra roots
		n.openSnapshots,        // the cluster's blob store, if given
		n.startNode,            // the node, with credentials from the control planes
		n.listen,               // the node API's address, and the one advertised
		n.reportStart,          // the first heartbeat
		n.serve)                // the fence keeper, and the node API
}

// nodeProcess is the system RunNode builds: a node in a process of its own.
type nodeProcess struct {
	system // its host is the NodeConfig
	joined joined
	// held is the node's certificate, renewed while it runs (renewCert); every handshake presents the
	// current one. cc is the client of the control planes' cluster ports.
	held *cluster.HeldCert
	cc   *nodeapi.ControlClient
	// capacity is what the node offers sandboxes; hostCap what its whole host does, and hostID names
	// the host.
	capacity, hostCap nodecontract.Capacity
	hostID            string
	// ln is the node API's listener, reached by the control planes at advertise; boot tells this run of
	// the node from the one before.
	ln        net.Listener
	handler   http.Handler
	advertise string
	boot      string
	srv       *http.Server
	served    <-chan error // what the node API's Serve returned
	keep      *nodeKeeper
	// reached is when the last heartbeat that got through was sent (a control plane saw it after that).
	reached lastReached
}

// newNodeProcess checks cfg and fills its defaults.
func newNodeProcess(cfg NodeConfig) (*nodeProcess, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultNodeListen
	}
	cfg.Logger, cfg.Out = defaultOutputs(cfg.Logger, cfg.Out)
	if err := checkHost("airlock node run", &cfg.DaemonBinary); err != nil {
		return nil, err
	}
	if cfg.DataDir == "" || len(cfg.ControlPlanes) == 0 {
		return nil, errors.New("a node needs its data directory and the control plane's cluster URL")
	}
	return &nodeProcess{system: system{log: cfg.Logger, out: cfg.Out, host: cfg}}, nil
}

// openDataDir finds the data directory the node joined with.
func (n *nodeProcess) openDataDir(context.Context) error {
	return n.setDataDir(n.host.DataDir, false)
}

// readJoin reads what the node's join left in the data directory, and takes the range of its
// sandboxes' addresses.
func (n *nodeProcess) readJoin(context.Context) error {
	j, err := loadJoined(n.dataDir)
	if err != nil {
		return err
	}
	n.joined = j
	if n.host.SandboxAddresses.IsValid() {
		if err := hostnet.SetPool(n.host.SandboxAddresses); err != nil {
			return err
		}
	}
	n.log = n.log.With("node", j.info.ID)
	return nil
}

// measureCapacity measures what the host offers, and the node's share of it.
func (n *nodeProcess) measureCapacity(context.Context) error {
	var err error
	if n.hostCap, err = nodecontract.HostCapacity(0); err != nil {
		return err
	}
	if n.capacity, err = nodecontract.HostCapacity(n.host.MaxSandboxes); err != nil {
		return err
	}
	// Nodes sharing a host each offer a share of it (--memory-mb, --cpu-millicores).
	if n.host.MemoryMB > 0 {
		n.capacity.MemoryMB = min(n.capacity.MemoryMB, n.host.MemoryMB)
	}
	if n.host.CPUMillicores > 0 {
		n.capacity.CPUMillicores = min(n.capacity.CPUMillicores, n.host.CPUMillicores)
	}
	n.hostID = node.HostID()
	return nil
}

// connectControlPlanes makes the client of the control planes' cluster ports. It is closed last, so
// that the exits and audit entries of the shutdown go out first.
func (n *nodeProcess) connectControlPlanes(context.Context) error {
	n.held = cluster.NewHeldCert(n.joined.cert)
	cc, err := nodeapi.NewControlClient(nodeapi.ControlClientConfig{URL: n.host.ControlPlanes[0], More: n.host.ControlPlanes[1:], Held: n.held, Roots: n.joined.roots, Logger: n.log})
	if err != nil {
		return err
	}
	n.cc = cc
	n.onCloseQuietly(func() { _ = cc.Close() })
	return nil
}

// openSnapshots opens the snapshot store of the node: the blob store cfg names, without a key provider
// (the control planes send grants). None without one.
func (n *nodeProcess) openSnapshots(ctx context.Context) error {
	if n.host.S3 != nil && n.host.BlobDir != "" {
		return errors.New("give the node one blob store: --blob-dir or --s3-*")
	}
	blobs, err := openBlobs(ctx, n.host.S3, n.host.BlobDir, filepath.Join(n.dataDir, "node", "chunks"), n.log)
	if err != nil {
		return err
	}
	if blobs == nil {
		n.log.Warn("this node has no snapshot store (--blob-dir or --s3-*): sessions cannot pause or resume on it")
		return nil
	}
	n.snaps, err = snapshot.New(snapshot.Config{Blobs: blobs, Logger: n.log})
	return err
}

// startNode starts the node. The interception CAs' keys are wrapped by the control plane, under their
// tenants' keys, bound to this node: a revoked tenant key means no CA, and the files here are of no
// use elsewhere.
func (n *nodeProcess) startNode(context.Context) error {
	cc := n.cc
	return n.startHostNode(hostNode{id: n.joined.info.ID, keys: cc, secret: cc.Secret, token: cc.Token, audit: cc.Record,
		onExit: cc.SandboxExit, sessionCA: cc.SessionCA, keepSessionCA: cc.KeepSessionCA, snapshots: cc})
}

// listen binds the node API's address, and settles the address the control planes reach it at.
func (n *nodeProcess) listen(context.Context) error {
	h, err := nodeapi.NewHandler(n.node, n.log)
	if err != nil {
		return err
	}
	n.handler = h
	ln, err := net.Listen("tcp", n.host.Listen)
	if err != nil {
		return fmt.Errorf("node API: listen on %s: %w", n.host.Listen, err)
	}
	n.ln = ln
	n.onCloseQuietly(func() { _ = ln.Close() })
	n.advertise = n.host.Advertise
	if n.advertise == "" {
		if len(n.joined.info.Hosts) == 0 {
			return errors.New("the node joined with no host: give --advertise host:port")
		}
		n.advertise = net.JoinHostPort(n.joined.info.Hosts[0], strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	return nil
}

// reportStart sends the first heartbeat, which says the node started anew (the control plane settles
// what a previous run left), before it serves: a control plane cannot reach it at that address before.
func (n *nodeProcess) reportStart(ctx context.Context) error {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	n.boot = hex.EncodeToString(rnd[:])
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := n.beat(hctx, false); err != nil {
		return fmt.Errorf("report to the control plane at %s: %w", strings.Join(n.host.ControlPlanes, ", "), err)
	}
	return nil
}

// beat sends a heartbeat; leaving says the node is about to stop.
func (n *nodeProcess) beat(ctx context.Context, leaving bool) error {
	ids, err := n.node.Sandboxes(ctx)
	if err != nil {
		return err
	}
	rts, err := n.node.Runtimes(ctx)
	if err != nil {
		return err
	}
	return n.cc.Heartbeat(ctx, nodeapi.Heartbeat{Addr: n.advertise, Boot: n.boot, Capacity: n.capacity, Sandboxes: len(ids),
		Version: daemon.Version, Leaving: leaving, Runtimes: rts, Host: n.hostID, HostCapacity: &n.hostCap, Images: n.node.ImageDigests()})
}

// serve attaches the fence keeper, which holds the sandboxes to the same lease as the node's fence
// from outside this process (attached before any sandbox can be placed here), and serves the node API
// to the control planes.
func (n *nodeProcess) serve(ctx context.Context) error {
	n.srv = newHTTPServer(n.handler, n.log)
	tlsCfg := n.held.ServerTLS(n.joined.roots, cluster.RoleControlPlane)
	n.keep = startKeeper(ctx, n.host, n.dataDir, n.node, n.log)
	n.onCloseQuietly(n.keep.close)
	n.served = serveTLS(n.srv, n.ln, tlsCfg) // ends on Shutdown
	n.log.Info("node is up", "addr", n.ln.Addr().String(), "advertise", n.advertise, "control_planes", n.host.ControlPlanes, "capacity", n.capacity)
	fmt.Fprintf(n.out, "Node %s serves control planes at %s (data in %s)\n", n.joined.info.ID, n.advertise, n.dataDir)
	if n.host.Ready != nil {
		n.host.Ready(n.ln.Addr().String())
	}
	return nil
}

// serveUntil serves until ctx ends or the node API's server fails, meanwhile sending heartbeats,
// renewing the node's certificate and fencing the node when it is cut off; then it shuts down.
func (n *nodeProcess) serveUntil(ctx context.Context) error {
	// Heartbeats go out on their own, so that a slow one does not hold up the fence; so does the
	// certificate's renewal.
	n.reached.set(time.Now())
	bctx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	var loops sync.WaitGroup
	loops.Go(func() { every(bctx, nodeapi.HeartbeatInterval, false, n.heartbeat) })
	loops.Go(func() { every(bctx, renewEvery, true, n.renewCert) })
	serveErr := n.fenceUntil(ctx)
	stopBeats()
	loops.Wait()
	return n.shutdown(serveErr)
}

// every calls f (at once too, if now) every d until ctx ends.
func every(ctx context.Context, d time.Duration, now bool, f func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	if now {
		f(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

// heartbeat sends a heartbeat and, if it got through, notes when it was sent.
func (n *nodeProcess) heartbeat(ctx context.Context) {
	sent := time.Now()
	// Room to try a second replica if the first went silent.
	hctx, cancel := context.WithTimeout(ctx, 2*nodeapi.HeartbeatInterval)
	err := n.beat(hctx, false)
	cancel()
	if err == nil {
		n.reached.set(sent)
	} else if ctx.Err() == nil {
		n.log.Warn("heartbeat to the control plane failed", "err", err)
	}
}

// renewCert renews the node's certificate if it is due.
func (n *nodeProcess) renewCert(ctx context.Context) {
	if err := renewCert(ctx, n.cc, n.held, n.joined, n.dataDir); err != nil && ctx.Err() == nil {
		n.log.Error("renew the node's certificate", "err", err)
	}
}

// fenceUntil waits until ctx ends or the node API's server fails (and reports what it returned),
// renewing the keeper's lease every second. Cut off from the control planes for FenceAfter, the node
// stops its sandboxes: the control planes are about to give it up and resume its sessions elsewhere,
// so they stop here first (a session never runs in two places), and so does any placed on it
// meanwhile. They are reported when a control plane is reached again.
func (n *nodeProcess) fenceUntil(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-n.served:
			return err
		case <-tick.C:
			cut := n.reached.since()
			if cut >= nodeapi.FenceAfter {
				fence(ctx, n.node, n.cc, n.log, cut)
			}
			n.keep.renew(ctx, nodeapi.FenceAfter+KeeperSlack-cut)
		}
	}
}

// shutdown tells the control planes the node leaves, destroys its sandboxes (their gateway, their only
// way out, stops with the node), lets the keeper go and stops the node; serveErr is what the node API's
// Serve returned, if it ended first.
func (n *nodeProcess) shutdown(serveErr error) error {
	n.log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer scancel()
	// No more sandboxes for this node.
	hctx, hcancel := context.WithTimeout(sctx, nodeapi.HeartbeatInterval)
	if err := n.beat(hctx, true); err != nil {
		n.log.Warn("tell the control plane the node leaves", "err", err)
	}
	hcancel()
	lerr := n.destroyAll(sctx)
	_ = n.srv.Shutdown(sctx)
	if lerr == nil {
		n.keep.release(sctx) // the sandboxes are gone: nothing left to guard
	}
	errs := []error{lerr}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		errs = append(errs, serveErr)
	}
	if err := n.node.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("stop node: %w", err))
	}
	n.log.Info("stopped")
	return errors.Join(errs...)
}

// destroyAll destroys the node's sandboxes at its shutdown and reports each to the control plane,
// which fails it (a session's resumes from its latest snapshot); it waits for the reports until ctx
// ends. It reports the error of listing them.
func (n *nodeProcess) destroyAll(ctx context.Context) error {
	ids, err := n.node.Sandboxes(ctx)
	var reports sync.WaitGroup
	for _, id := range ids {
		if err := n.node.DestroySandbox(ctx, id); err != nil {
			n.log.Error("destroy sandbox at shutdown", "sandbox", id, "err", err)
		}
		reports.Go(func() { n.cc.SandboxExit(id, "its node shut down") })
	}
	reported := make(chan struct{})
	go func() { reports.Wait(); close(reported) }()
	select {
	case <-reported:
	case <-ctx.Done():
	}
	return err
}

// renewEvery is how often a node checks whether its certificate is due for renewal.
const renewEvery = time.Hour

// renewCert renews the node's certificate through the cluster port once a third of its lifetime or less
// is left: for the same key, checked to be from the cluster's CA and to name the node, saved in place
// of the old one, and presented from then on.
func renewCert(ctx context.Context, cc *nodeapi.ControlClient, held *cluster.HeldCert, j joined, dataDir string) error {
	cur, _ := held.Current()
	if !cluster.RenewDue(cur.Leaf.NotAfter, time.Now()) {
		return nil
	}
	signer, ok := cur.PrivateKey.(crypto.Signer)
	if !ok {
		return errors.New("the node's key cannot sign")
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, signer)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	certPEM, err := cc.Renew(rctx, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER}))
	if err != nil {
		return err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return errors.New("the control plane answered no certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: j.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("the renewed certificate: %w", err)
	}
	if id, err := cluster.IdentityOf(leaf); err != nil || id != (cluster.Identity{Role: cluster.RoleNode, ID: j.info.ID}) {
		return fmt.Errorf("the renewed certificate names %v, not node %s", id, j.info.ID)
	}
	if !signer.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(leaf.PublicKey) {
		return errors.New("the renewed certificate is not for the node's key")
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dataDir, NodeClusterDir, NodeCertFile), certPEM, 0o600); err != nil {
		return err
	}
	held.Set(tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: cur.PrivateKey, Leaf: leaf})
	cc.Reconnect()
	return nil
}

// lastReached is when the last heartbeat that got through was sent (a time with its monotonic reading:
// a step of the wall clock does not move the fence).
type lastReached struct {
	mu sync.Mutex
	t  time.Time // guarded by mu
}

func (l *lastReached) set(t time.Time) { l.mu.Lock(); l.t = t; l.mu.Unlock() }

func (l *lastReached) since() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Since(l.t)
}

// fence destroys every sandbox of the node, all at once (the control planes give the node up
// NodeDownAfter after its last heartbeat; the fence must be done well before), and reports each.
func fence(ctx context.Context, nd *node.Local, cc *nodeapi.ControlClient, log *slog.Logger, cut time.Duration) {
	ids, err := nd.Sandboxes(ctx)
	if len(ids) == 0 && err == nil {
		return
	}
	log.Error("no control plane reached: stopping every sandbox of this node", "for", cut.Round(time.Second), "sandboxes", len(ids), "err", err)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := nd.DestroySandbox(ctx, id); err != nil {
				log.Error("fence: destroy sandbox", "sandbox", id, "err", err)
			}
		}()
		go cc.SandboxExit(id, "its node lost the control plane") // retries until reached, or Close
	}
	wg.Wait()
}
